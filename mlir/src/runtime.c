/* tessera: the runtime functions a CPU library defines itself (see native.rs).
 *
 * memrefCopy: what bufferized `memref.copy` ops between buffers of different layouts call
 * (a strided view passed to a kernel whose argument has the identity layout). MLIR's C
 * runner utilities define it too, element by element through an index vector; this one
 * merges the dimensions both views keep contiguous and copies whole runs with memmove, one
 * call per run. The library is linked with -Bsymbolic, so its own calls come here. */
#include <stdint.h>
#include <string.h>

struct unranked {
  int64_t rank;
  void *descriptor;
};

/* The ranked descriptor: allocated and aligned pointers, offset, sizes[rank],
 * strides[rank]. */
struct ranked {
  char *allocated;
  char *aligned;
  int64_t offset;
  int64_t shape[];
};

/* Views of more dimensions than this are copied element by element. */
#define MAX_RANK 16

void memrefCopy(int64_t elem, struct unranked *src, struct unranked *dst) {
  int64_t rank = src->rank;
  struct ranked *s = src->descriptor, *d = dst->descriptor;
  char *sp = s->aligned + s->offset * elem, *dp = d->aligned + d->offset * elem;
  if (rank == 0) {
    memmove(dp, sp, elem);
    return;
  }
  const int64_t *size = s->shape, *ss = s->shape + rank, *ds = d->shape + rank;
  for (int64_t i = 0; i < rank; i++)
    if (size[i] == 0)
      return;
  /* Merged dimensions, innermost first: a dimension joins the one inside it when both
   * views step over that one exactly. */
  int64_t n[MAX_RANK], sst[MAX_RANK], dst_st[MAX_RANK];
  int64_t m = 0;
  for (int64_t i = rank - 1; i >= 0; i--) {
    if (m > 0 && ss[i] == sst[m - 1] * n[m - 1] && ds[i] == dst_st[m - 1] * n[m - 1]) {
      n[m - 1] *= size[i];
      continue;
    }
    if (m == MAX_RANK) {
      m = -1;
      break;
    }
    n[m] = size[i];
    sst[m] = ss[i];
    dst_st[m] = ds[i];
    m++;
  }
  /* A run: the innermost merged dimension when both views are contiguous along it. */
  int contiguous = m > 0 && sst[0] == 1 && dst_st[0] == 1;
  if (m < 0) {
    /* Too many dimensions to merge: one element at a time, in row-major order. */
    int64_t total = 1;
    for (int64_t i = 0; i < rank; i++)
      total *= size[i];
    for (int64_t lin = 0; lin < total; lin++) {
      int64_t rem = lin, so = 0, doff = 0;
      for (int64_t i = rank - 1; i >= 0; i--) {
        int64_t q = rem % size[i];
        rem /= size[i];
        so += q * ss[i];
        doff += q * ds[i];
      }
      memmove(dp + doff * elem, sp + so * elem, elem);
    }
    return;
  }
  int64_t run = contiguous ? n[0] : 1;
  int64_t first = contiguous ? 1 : 0;
  int64_t idx[MAX_RANK] = {0};
  for (;;) {
    int64_t so = 0, doff = 0;
    for (int64_t j = first; j < m; j++) {
      so += idx[j] * sst[j];
      doff += idx[j] * dst_st[j];
    }
    memmove(dp + doff * elem, sp + so * elem, run * elem);
    int64_t j = first;
    while (j < m && ++idx[j] == n[j])
      idx[j++] = 0;
    if (j == m)
      return;
  }
}
