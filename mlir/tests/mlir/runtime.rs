//! The CPU library's own runtime functions (`native::RUNTIME`), compiled with the clang the
//! libraries are built with and run against a C driver: `memrefCopy` copies views of every
//! kind (offset rows of a wider buffer, a transposed view, a view with a stride of 2, a
//! rank-0 and an empty one, and one of 20 dimensions that do not merge) exactly as the index arithmetic says.

use std::process::Command;

use tessera_mlir::native;

/// A driver that fills a source buffer with its indices, copies views of it into a
/// destination through `memrefCopy`, checks every element with the views' strides, and
/// prints how many differ.
const DRIVER: &str = r#"
#include <stdio.h>
#include <stdint.h>
struct unranked { int64_t rank; void *descriptor; };
void memrefCopy(int64_t elem, struct unranked *src, struct unranked *dst);

static float src[1 << 16], dst[1 << 16];
static int64_t sdesc[3 + 2 * 32], ddesc[3 + 2 * 32];

/* Copies the view (offset, sizes, strides) of src into dst with the destination strides
 * given, and counts the elements that differ from what the strides say. */
static int check(int64_t rank, int64_t so, const int64_t *size, const int64_t *ss,
                 const int64_t *ds) {
  for (int i = 0; i < (1 << 16); i++) { src[i] = (float)i; dst[i] = -1.0f; }
  void **sp = (void **)sdesc, **dp = (void **)ddesc;
  sp[0] = sp[1] = src; dp[0] = dp[1] = dst;
  sdesc[2] = so; ddesc[2] = 0;
  for (int64_t i = 0; i < rank; i++) {
    sdesc[3 + i] = ddesc[3 + i] = size[i];
    sdesc[3 + rank + i] = ss[i];
    ddesc[3 + rank + i] = ds[i];
  }
  struct unranked us = {rank, sdesc}, ud = {rank, ddesc};
  memrefCopy(4, &us, &ud);
  int64_t total = 1;
  for (int64_t i = 0; i < rank; i++) total *= size[i];
  int bad = 0;
  for (int64_t lin = 0; lin < total; lin++) {
    int64_t rem = lin, s = so, d = 0;
    for (int64_t i = rank - 1; i >= 0; i--) {
      int64_t q = rem % size[i];
      rem /= size[i];
      s += q * ss[i];
      d += q * ds[i];
    }
    if (dst[d] != src[s]) bad++;
  }
  return bad;
}

int main(void) {
  int bad = 0;
  /* Rows of a [1, 16, 192] buffer, columns 64..127, as [1, 16, 4, 16]. */
  int64_t z1[] = {1, 16, 4, 16}, s1[] = {3072, 192, 16, 1}, d1[] = {1024, 64, 16, 1};
  bad += check(4, 64, z1, s1, d1);
  /* A transposed view of a [16, 16, 4] buffer. */
  int64_t z2[] = {4, 16, 16}, s2[] = {1, 4, 64}, d2[] = {256, 16, 1};
  bad += check(3, 0, z2, s2, d2);
  /* Every other element of rows of 40. */
  int64_t z3[] = {8, 20}, s3[] = {40, 2}, d3[] = {20, 1};
  bad += check(2, 3, z3, s3, d3);
  /* Into a strided destination. */
  int64_t z4[] = {8, 20}, s4[] = {20, 1}, d4[] = {64, 1};
  bad += check(2, 0, z4, s4, d4);
  /* Rank 0, and an empty view (nothing written). */
  bad += check(0, 7, z1, s1, d1);
  int64_t z5[] = {3, 0, 5}, s5[] = {5, 5, 1}, d5[] = {5, 5, 1};
  bad += check(3, 0, z5, s5, d5);
  if (dst[0] != -1.0f) bad++;
  /* 20 dimensions (four of 2, the rest of 1) whose strides never merge: more than the
   * merged copy takes, so element by element. */
  int64_t z6[20], s6[20], d6[20];
  for (int i = 0; i < 20; i++) {
    z6[i] = i % 5 == 0 ? 2 : 1;
    s6[i] = 3 * i + 1;
    d6[i] = i % 5 == 0 ? (int64_t)1 << (i / 5) : 1000 + i;
  }
  bad += check(20, 1, z6, s6, d6);
  printf("%d\n", bad);
  return bad != 0;
}
"#;

#[test]
fn memref_copy_copies_every_kind_of_view() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = dir.path().join("runtime.c");
    let driver = dir.path().join("driver.c");
    std::fs::write(&runtime, native::RUNTIME).expect("writes");
    std::fs::write(&driver, DRIVER).expect("writes");
    let exe = dir.path().join("driver");
    let clang = native::llvm_prefix().join("bin/clang");
    let out = Command::new(&clang)
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&driver)
        .arg(&runtime)
        .output()
        .expect("clang runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("driver runs");
    assert_eq!(String::from_utf8_lossy(&run.stdout), "0\n");
    assert!(run.status.success());
}
