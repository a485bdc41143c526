/* npy.c — .npy output for --dump-grads and --dump-params.
 *
 * What it is: a float32, C-order .npy writer (format version 1.0, header padded
 * to a multiple of 64 bytes as numpy does) and the two dumps built on it.
 * File names are the ONNX names with every character outside [A-Za-z0-9._-]
 * replaced by '_' (docs/reference.md, "Dumps").
 *
 * What it is not: .npy reading (data.c). */
#include "rt.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void rt_mkdir_p(const char *dir) {
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
    rt_fail(SNRT_EXIT_DATA, "path too long: %s", dir);
  for (char *p = buf + 1;; p++) {
    bool last = *p == 0;
    if (*p == '/' || last) {
      char save = *p;
      *p = 0;
      if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        rt_fail(SNRT_EXIT_DATA, "cannot create directory %s: %s", buf, strerror(errno));
      *p = save;
    }
    if (last) break;
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    rt_fail(SNRT_EXIT_DATA, "%s is not a directory", dir);
}

void rt_npy_path(char *buf, size_t n, const char *dir, const char *name) {
  int k = snprintf(buf, n, "%s/", dir);
  size_t i = (size_t)k;
  for (const char *s = name; *s && i + 5 < n; s++) {
    char ch = *s;
    bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-';
    buf[i++] = ok ? ch : '_';
  }
  snprintf(buf + i, n - i, ".npy");
}

void rt_npy_write(const char *path, const float *data, int rank, const int64_t *dims) {
  char shape[256];
  size_t k = 0;
  int64_t count = 1;
  k += (size_t)snprintf(shape + k, sizeof shape - k, "(");
  for (int i = 0; i < rank; i++) {
    k += (size_t)snprintf(shape + k, sizeof shape - k, "%lld,%s", (long long)dims[i],
                          i + 1 < rank ? " " : "");
    count *= dims[i];
  }
  if (rank > 1) k--;   /* numpy writes (2, 3) but (2,) */
  snprintf(shape + k, sizeof shape - k, ")");
  char header[512];
  int h = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }", shape);
  int total = 10 + h + 1;
  int pad = (64 - total % 64) % 64;
  memset(header + h, ' ', (size_t)pad);
  header[h + pad] = '\n';
  int hl = h + pad + 1;
  FILE *f = fopen(path, "wb");
  if (!f) rt_fail(SNRT_EXIT_DATA, "cannot write %s: %s", path, strerror(errno));
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff),
                           (unsigned char)(hl >> 8)};
  bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(header, 1, (size_t)hl, f) == (size_t)hl &&
            fwrite(data, sizeof(float), (size_t)count, f) == (size_t)count;
  if (fclose(f) != 0) ok = false;
  if (!ok) rt_fail(SNRT_EXIT_DATA, "cannot write %s: %s", path, strerror(errno));
}

void rt_dump_params(snrt_ctx *c, const char *dir) {
  const snrt_model *m = c->m;
  rt_mkdir_p(dir);
  for (int i = 0; i < m->ntensors; i++) {
    const snrt_tensor *t = &m->tensors[i];
    if (t->kind != SNRT_T_PARAM && t->kind != SNRT_T_STATE) continue;
    float *buf = rt_xmalloc((size_t)t->nbytes + 4);
    rt_tensor_read(c, i, buf);
    char path[PATH_MAX];
    rt_npy_path(path, sizeof path, dir, t->name);
    rt_npy_write(path, buf, t->rank, t->dims);
    free(buf);
  }
}

void rt_dump_grads(snrt_ctx *c, const char *dir, float loss) {
  const snrt_model *m = c->m;
  rt_mkdir_p(dir);
  for (int i = 0; i < m->ntensors; i++) {
    const snrt_tensor *t = &m->tensors[i];
    if (t->kind != SNRT_T_PARAM || !c->grad_copy[i]) continue;
    char path[PATH_MAX];
    rt_npy_path(path, sizeof path, dir, t->name);
    rt_npy_write(path, c->grad_copy[i], t->rank, t->dims);
  }
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/loss.npy", dir);
  rt_npy_write(path, &loss, 0, NULL);
}
