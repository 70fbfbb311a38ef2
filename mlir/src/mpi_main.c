/* The fixed part of the C driver of an MPI program built by tessera (`--emit mpi`); the
 * generated part (one `case` per rank) follows. Reads .npy inputs and the weights file,
 * builds MLIR memref descriptors ({allocated, aligned, offset, sizes[], strides[]}), calls
 * the rank's function, writes the host's outputs as .npy. Errors abort the whole job. */
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void die(const char *what, const char *why) {
  fprintf(stderr, "error: %s: %s\n", what, why);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) die("memory", "out of memory");
  return p;
}

/* The program's buffers: finalize-memref-to-llvm's generic allocation functions, which
   every memref.alloc of the rank functions and every free of theirs call, and the frees of
   the buffers they return (free_results). Each allocation leads with a header that holds its
   size, so that each rank can report the most bytes its buffers held at once and what they
   still hold at the end (nothing, unless a buffer leaks). */
#define BUF_HEADER 16
static size_t buf_held, buf_peak;
static unsigned long long buf_allocs;

void *_mlir_memref_to_llvm_alloc(size_t size) {
  unsigned char *p = malloc(size + BUF_HEADER);
  if (!p) die("memory", "out of memory");
  memcpy(p, &size, sizeof size);
  buf_held += size;
  if (buf_held > buf_peak) buf_peak = buf_held;
  buf_allocs++;
  return p + BUF_HEADER;
}

void _mlir_memref_to_llvm_free(void *q) {
  if (!q) return;
  unsigned char *p = (unsigned char *)q - BUF_HEADER;
  size_t size;
  memcpy(&size, p, sizeof size);
  buf_held -= size;
  free(p);
}

/* One line on stderr: what this rank's buffers held (see _mlir_memref_to_llvm_alloc). */
static void report_buffers(int rank, const char *device) {
  fprintf(stderr, "rank %d (%s): buffers: peak %zu B, %zu B held at exit, %llu allocations\n", rank,
          device, buf_peak, buf_held, buf_allocs);
}

/* Creates the directory `dir` and its missing parents, as `tessera train --output-dir` does;
   dies naming it when it cannot. */
static void make_dirs(const char *dir) {
  char p[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof p) die(dir, "cannot create the output directory (bad path)");
  memcpy(p, dir, n + 1);
  for (char *c = p + 1;; c++) {
    if (*c != '/' && *c != 0) continue;
    char end = *c;
    *c = 0;
    struct stat st;
    int failed = mkdir(p, 0777) != 0 ? errno : 0;
    if (failed && !(failed == EEXIST && stat(p, &st) == 0 && S_ISDIR(st.st_mode))) {
      fprintf(stderr, "error: %s: cannot create the output directory (%s: %s)\n", dir, p, strerror(failed));
      MPI_Abort(MPI_COMM_WORLD, 1);
      exit(1);
    }
    *c = end;
    if (end == 0) break;
  }
}

/* weights.safetensors next to the executable. */
static const char *weights_path(const char *argv0) {
  static char path[4096];
  const char *slash = strrchr(argv0, '/');
  size_t n = slash ? (size_t)(slash - argv0 + 1) : 0;
  if (n + 32 >= sizeof path) die(argv0, "path too long");
  memcpy(path, argv0, n);
  strcpy(path + n, "weights.safetensors");
  return path;
}

static void *read_weight(const char *path, long offset, size_t len) {
  FILE *f = fopen(path, "rb");
  if (!f) die(path, "cannot open the weights file");
  void *p = xmalloc(len);
  if (fseek(f, offset, SEEK_SET) != 0 || fread(p, 1, len, f) != len) die(path, "truncated weights file");
  fclose(f);
  return p;
}

/* Reads a C-order .npy file of the given dtype and shape. With `count`, the file may also
   hold a stack of such tensors along a leading axis: their number goes to `*count`. */
static void *read_stack(const char *path, const char *descr, int rank, const int64_t *shape,
                        size_t nbytes, const char *input, long *count) {
  FILE *f = fopen(path, "rb");
  if (!f) die(path, "cannot open input file");
  unsigned char magic[10];
  if (fread(magic, 1, 10, f) != 10 || memcmp(magic, "\x93NUMPY", 6) != 0) die(path, "not a .npy file");
  size_t hlen;
  if (magic[6] == 1) {
    hlen = magic[8] | (magic[9] << 8);
  } else {
    unsigned char b[2];
    if (fread(b, 1, 2, f) != 2) die(path, "truncated header");
    hlen = magic[8] | (magic[9] << 8) | (b[0] << 16) | ((size_t)b[1] << 24);
  }
  char *h = calloc(hlen + 1, 1);
  if (fread(h, 1, hlen, f) != hlen) die(path, "truncated header");
  char want[64];
  snprintf(want, sizeof want, "'descr': '%s'", descr);
  if (!strstr(h, want)) {
    fprintf(stderr, "error: %s: input %s must have dtype %s (header: %s)\n", path, input, descr, h);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (strstr(h, "'fortran_order': True")) die(path, "Fortran order is not supported");
  /* The shape tuple, however it is spaced: "(4, 16)", "(4, 16, )", "(4,)", "()". */
  const char *t = strstr(h, "'shape':");
  const char *open = t ? strchr(t, '(') : NULL;
  const char *close = open ? strchr(open, ')') : NULL;
  int ok = open && close;
  int n = 0;
  long long dims[17];
  for (const char *q = open ? open + 1 : NULL; ok && q < close;) {
    if (*q >= '0' && *q <= '9') {
      char *end;
      long long v = strtoll(q, &end, 10);
      ok = n <= rank;
      if (ok) dims[n] = v;
      n++;
      q = end;
    } else {
      q++;
    }
  }
  /* The shape, or (with `count`) a stack of it. */
  int lead = ok && count && n == rank + 1 ? 1 : 0;
  ok = ok && n == rank + lead && (!lead || dims[0] > 0);
  for (int i = 0; ok && i < rank; i++) ok = dims[lead + i] == shape[i];
  size_t many = lead ? (size_t)dims[0] : 1;
  if (count) *count = (long)many;
  if (!ok) {
    fprintf(stderr, "error: %s: input %s must have shape (", path, input);
    for (int i = 0; i < rank; i++) fprintf(stderr, i ? ", %lld" : "%lld", (long long)shape[i]);
    fprintf(stderr, ") (header: %s)\n", h);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  free(h);
  /* The data must be in the file before it is allocated. */
  long here = ftell(f);
  if (here < 0 || fseek(f, 0, SEEK_END) != 0) die(path, "cannot read");
  long end = ftell(f);
  if (end < here || fseek(f, here, SEEK_SET) != 0) die(path, "cannot read");
  if (nbytes && many > (size_t)(end - here) / nbytes) die(path, "truncated data");
  void *p = xmalloc(nbytes * many);
  if (fread(p, 1, nbytes * many, f) != nbytes * many) die(path, "truncated data");
  fclose(f);
  return p;
}

static void *read_npy(const char *path, const char *descr, int rank, const int64_t *shape,
                      size_t nbytes, const char *input) {
  return read_stack(path, descr, rank, shape, nbytes, input, NULL);
}

/* A contiguous descriptor for `data` (leaked: the process is short-lived). */
static int64_t *descriptor(void *data, int rank, const int64_t *shape) {
  int64_t *d = calloc(3 + 2 * (size_t)rank, sizeof(int64_t));
  d[0] = (int64_t)(intptr_t)data;
  d[1] = (int64_t)(intptr_t)data;
  d[2] = 0;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; i--) {
    d[3 + i] = shape[i];
    d[3 + rank + i] = stride;
    stride *= shape[i];
  }
  return d;
}

/* Whether `arg` (`NAME=FILE`, argv[at]) names one of the `n` batch inputs `known`, not given
   before it; says why not when `loud`. */
static int known_input(char **argv, int at, const char *const *known, int n, int loud) {
  const char *arg = argv[at];
  size_t len = (size_t)(strchr(arg, '=') - arg);
  int found = 0;
  for (int k = 0; k < n; k++) found |= strlen(known[k]) == len && !strncmp(known[k], arg, len);
  if (!found) {
    if (loud) fprintf(stderr, "error: --input %.*s: the step has no batch input of that name\n", (int)len, arg);
    return 0;
  }
  for (int j = 1; j + 1 < at; j++)
    if (!strcmp(argv[j], "--input") && !strncmp(argv[j + 1], arg, len + 1)) {
      if (loud) fprintf(stderr, "error: --input %.*s: given twice\n", (int)len, arg);
      return 0;
    }
  return 1;
}

/* Copies the tensor of a result descriptor into `dst`, contiguous. */
static void copy_out(const int64_t *desc, int rank, size_t esize, unsigned char *dst) {
  const unsigned char *base = (const unsigned char *)(intptr_t)desc[1];
  int64_t offset = desc[2];
  const int64_t *sizes = desc + 3, *strides = desc + 3 + rank;
  int64_t count = 1;
  for (int i = 0; i < rank; i++) count *= sizes[i];
  int64_t idx[16] = {0};
  for (int64_t k = 0; k < count; k++) {
    int64_t e = offset;
    for (int i = 0; i < rank; i++) e += idx[i] * strides[i];
    memcpy(dst + k * (int64_t)esize, base + e * (int64_t)esize, esize);
    for (int i = rank - 1; i >= 0; i--) {
      if (++idx[i] < sizes[i]) break;
      idx[i] = 0;
    }
  }
}

/* The tag of the messages that bring the state to the host after the last step (the rank
   functions' own messages use tags from 0 up; MPI guarantees tags up to 32767). */
#define STATE_TAG 32767

/* Sends (or receives) `len` bytes in pieces MPI's int counts can hold. */
static void send_bytes(const unsigned char *p, size_t len, int to) {
  for (size_t at = 0; at < len; at += (size_t)1 << 30) {
    size_t n = len - at < ((size_t)1 << 30) ? len - at : (size_t)1 << 30;
    MPI_Send(p + at, (int)n, MPI_BYTE, to, STATE_TAG, MPI_COMM_WORLD);
  }
}

static void recv_bytes(unsigned char *p, size_t len, int from) {
  for (size_t at = 0; at < len; at += (size_t)1 << 30) {
    size_t n = len - at < ((size_t)1 << 30) ? len - at : (size_t)1 << 30;
    MPI_Recv(p + at, (int)n, MPI_BYTE, from, STATE_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
}

/* Copies the block at offsets `offs` with extents `bd` of a row-major tensor of extents
   `wd` (rank `rank`, elements of `esize` bytes) from `whole` into `block` (`out` nonzero) or
   from `block` back into `whole`. */
static void block_copy(unsigned char *whole, unsigned char *block, int rank, const int64_t *wd,
                       const int64_t *offs, const int64_t *bd, size_t esize, int out) {
  int64_t count = 1;
  for (int i = 0; i < rank; i++) count *= bd[i];
  int64_t idx[16] = {0};
  for (int64_t k = 0; k < count; k++) {
    int64_t e = 0;
    for (int i = 0; i < rank; i++) e = e * wd[i] + offs[i] + idx[i];
    if (out)
      memcpy(block + k * (int64_t)esize, whole + e * (int64_t)esize, esize);
    else
      memcpy(whole + e * (int64_t)esize, block + k * (int64_t)esize, esize);
    for (int i = rank - 1; i >= 0; i--) {
      if (++idx[i] < bd[i]) break;
      idx[i] = 0;
    }
  }
}

/* Frees the buffers a rank function returned (`n` descriptors in `res`, of ranks `ranks`)
   once its results are copied out: each allocation once (two results may share one). The
   buffer deallocation gives the caller every returned buffer, cloning one that would be an
   argument's or a constant's; the checks against its arguments (`args`, `nargs`
   descriptors) and MLIR's marker for a global's allocation (0xdeadbeef) only guard that. */
static void free_results(int64_t *res, int n, const int *ranks, int64_t *const *args, int nargs) {
  int64_t *d = res;
  for (int i = 0; i < n; i++) {
    int64_t p = d[0];
    int keep = p == 0 || p == (int64_t)0xdeadbeef;
    for (int a = 0; a < nargs && !keep; a++) keep = args[a][0] == p;
    int64_t *e = res;
    for (int j = 0; j < i && !keep; j++) {
      keep = e[0] == p;
      e += 3 + 2 * ranks[j];
    }
    if (!keep) _mlir_memref_to_llvm_free((void *)(intptr_t)p);
    d += 3 + 2 * ranks[i];
  }
}

/* Writes an output from a result descriptor to OUTDIR/<stem>.npy (the stem is the output's
   name made file-safe). */
static int write_npy(const char *dir, const char *stem, const char *descr, int rank,
                     const int64_t *shape, const int64_t *desc, size_t esize) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.npy", dir, stem);
  char header[512];
  int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int i = 0; i < rank; i++)
    n += snprintf(header + n, sizeof header - n, rank == 1 ? "%lld," : (i + 1 < rank ? "%lld, " : "%lld"),
                  (long long)shape[i]);
  n += snprintf(header + n, sizeof header - n, "), }");
  int total = 10 + n + 1;
  int pad = (64 - total % 64) % 64;
  FILE *f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "error: %s: cannot write\n", path);
    return 1;
  }
  unsigned short hl = (unsigned short)(n + pad + 1);
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  fputc(hl & 0xff, f);
  fputc(hl >> 8, f);
  fwrite(header, 1, n, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  int64_t count = 1;
  for (int i = 0; i < rank; i++) count *= desc[3 + i];
  unsigned char *data = xmalloc((size_t)count * esize);
  copy_out(desc, rank, esize, data);
  fwrite(data, esize, (size_t)count, f);
  free(data);
  fclose(f);
  printf("output %s -> %s\n", stem, path);
  return 0;
}

/* ---- a training step: `--steps N` runs it N times, the state carried between steps ---- */

/* A file next to the executable (as weights_path), in `buf`. */
static const char *beside(const char *argv0, const char *file, char *buf, size_t size) {
  const char *slash = strrchr(argv0, '/');
  size_t n = slash ? (size_t)(slash - argv0 + 1) : 0;
  if (n + strlen(file) + 1 > size) die(argv0, "path too long");
  memcpy(buf, argv0, n);
  strcpy(buf + n, file);
  return buf;
}

/* The FILE of `--input NAME=FILE`. */
static const char *input_file(int argc, char **argv, const char *name) {
  size_t n = strlen(name);
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--input") && !strncmp(argv[i + 1], name, n) && argv[i + 1][n] == '=')
      return argv[i + 1] + n + 1;
  fprintf(stderr, "error: input %s is not given: add --input %s=FILE.npy\n", name, name);
  MPI_Abort(MPI_COMM_WORLD, 1);
  return NULL;
}

/* Writes `path` atomically (a temporary file renamed over it). */
static int write_file(const char *path, const unsigned char *data, size_t len) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0 || rename(tmp, path) != 0) {
    fprintf(stderr, "error: %s: cannot write\n", path);
    return 1;
  }
  return 0;
}

/* Writes `out`: the file `tmpl` with `n` byte ranges (offset, length) replaced by `bufs`. */
static int patch_write(const char *tmpl, const char *out, int n, const long *offs, const size_t *lens,
                       unsigned char *const *bufs) {
  FILE *f = fopen(tmpl, "rb");
  if (!f || fseek(f, 0, SEEK_END) != 0) die(tmpl, "cannot read");
  long size = ftell(f);
  if (size < 0 || fseek(f, 0, SEEK_SET) != 0) die(tmpl, "cannot read");
  unsigned char *data = xmalloc((size_t)size);
  if (fread(data, 1, (size_t)size, f) != (size_t)size) die(tmpl, "truncated");
  fclose(f);
  for (int i = 0; i < n; i++) {
    if (offs[i] < 0 || (size_t)offs[i] + lens[i] > (size_t)size) die(tmpl, "does not match the program");
    memcpy(data + offs[i], bufs[i], lens[i]);
  }
  int failed = write_file(out, data, (size_t)size);
  free(data);
  return failed;
}

/* `x` as tessera train writes a loss (Rust's `{:?}` of an f32): the shortest digits that read
   back as `x`, in plain notation (with `.0` for a whole number) from 1e-4 to below 1e16, else
   as `<digits>e<exponent>`. */
static void loss_text(char *buf, size_t size, float x) {
  if (isnan(x)) {
    snprintf(buf, size, "nan");
    return;
  }
  if (isinf(x)) {
    snprintf(buf, size, x > 0 ? "inf" : "-inf");
    return;
  }
  char e[48];
  for (int p = 0; p < 10; p++) {
    snprintf(e, sizeof e, "%.*e", p, (double)x);
    if (strtof(e, NULL) == x) break;
  }
  /* e: [-]d[.ddd]e(+|-)XX */
  const char *q = e;
  int neg = *q == '-';
  if (neg) q++;
  char digits[16];
  int nd = 0;
  for (; *q && *q != 'e'; q++)
    if (*q >= '0' && *q <= '9' && nd < 15) digits[nd++] = *q;
  int ex = *q == 'e' ? atoi(q + 1) : 0;
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  size_t n = 0;
  if (neg) buf[n++] = '-';
  float a = fabsf(x);
  if (a != 0.0f && (a < 1e-4f || a >= 1e16f)) {
    buf[n++] = digits[0];
    if (nd > 1) {
      buf[n++] = '.';
      for (int i = 1; i < nd; i++) buf[n++] = digits[i];
    }
    snprintf(buf + n, size - n, "e%d", ex);
    return;
  }
  if (a == 0.0f) ex = 0, nd = 1, digits[0] = '0';
  if (ex >= 0) {
    for (int i = 0; i <= ex; i++) buf[n++] = i < nd ? digits[i] : '0';
    buf[n++] = '.';
    if (nd > ex + 1) {
      for (int i = ex + 1; i < nd; i++) buf[n++] = digits[i];
    } else {
      buf[n++] = '0';
    }
  } else {
    buf[n++] = '0';
    buf[n++] = '.';
    for (int i = 0; i < -ex - 1; i++) buf[n++] = '0';
    for (int i = 0; i < nd; i++) buf[n++] = digits[i];
  }
  buf[n] = 0;
}
