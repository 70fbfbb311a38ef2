/* The fixed part of the C driver of an MPI program built by tessera (`--emit mpi`); the
 * generated part (one `case` per rank) follows. Reads .npy inputs and the weights file,
 * builds MLIR memref descriptors ({allocated, aligned, offset, sizes[], strides[]}), calls
 * the rank's function, writes the host's outputs as .npy. Errors abort the whole job. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what, const char *why) {
  fprintf(stderr, "error: %s: %s\n", what, why);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
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
  void *p = malloc(len ? len : 1);
  if (fseek(f, offset, SEEK_SET) != 0 || fread(p, 1, len, f) != len) die(path, "truncated weights file");
  fclose(f);
  return p;
}

/* Reads a C-order .npy file of the given dtype and shape. */
static void *read_npy(const char *path, const char *descr, int rank, const int64_t *shape,
                      size_t nbytes, const char *input) {
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
  for (const char *q = open ? open + 1 : NULL; ok && q < close;) {
    if (*q >= '0' && *q <= '9') {
      char *end;
      long long v = strtoll(q, &end, 10);
      ok = n < rank && v == shape[n];
      n++;
      q = end;
    } else {
      q++;
    }
  }
  if (!ok || n != rank) {
    fprintf(stderr, "error: %s: input %s must have shape (", path, input);
    for (int i = 0; i < rank; i++) fprintf(stderr, i ? ", %lld" : "%lld", (long long)shape[i]);
    fprintf(stderr, ") (header: %s)\n", h);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  free(h);
  void *p = malloc(nbytes ? nbytes : 1);
  if (fread(p, 1, nbytes, f) != nbytes) die(path, "truncated data");
  fclose(f);
  return p;
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
  const char *base = (const char *)(intptr_t)desc[1];
  int64_t offset = desc[2];
  const int64_t *sizes = desc + 3, *strides = desc + 3 + rank;
  int64_t count = 1;
  for (int i = 0; i < rank; i++) count *= sizes[i];
  int64_t idx[16] = {0};
  for (int64_t k = 0; k < count; k++) {
    int64_t e = offset;
    for (int i = 0; i < rank; i++) e += idx[i] * strides[i];
    fwrite(base + e * (int64_t)esize, 1, esize, f);
    for (int i = rank - 1; i >= 0; i--) {
      if (++idx[i] < sizes[i]) break;
      idx[i] = 0;
    }
  }
  fclose(f);
  printf("output %d -> %s\n", index, path);
  return 0;
}
