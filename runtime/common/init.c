/* init.c — initial values of the model's tensors, and host access to
 * persistent tensors.
 *
 * What it is: SNRT_INIT_FILE tensors read from params.bin beside the
 * executable (snc writes the ONNX initializers there); KAIMING and BIAS drawn
 * as PyTorch's defaults do (U(-1/sqrt(fan_in), 1/sqrt(fan_in))) from the
 * counter-based generator, so the same --seed gives the same start on every
 * runtime; ZERO/ONE; optimizer state always starts at zero.
 *
 * What it is not: checkpoint loading (checkpoint.c overwrites these values
 * on --resume). */
#include "rt.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The generator's `step` for initial values: far from any training step, so
 * init draws never coincide with dropout masks. */
#define INIT_STREAM 0xFFFFFFFFFFFF0000ull

int64_t rt_tensor_elems(const snrt_tensor *t) {
  return t->nbytes / 4;
}

void rt_tensor_read(snrt_ctx *c, int ti, void *dst) {
  const snrt_tensor *t = &c->m->tensors[ti];
  if (t->offset >= 0) {
    snrt_dev_sync(c);
    snrt_dev_download(c, dst, t->offset, t->nbytes);
  } else if (t->host_offset >= 0) {
    snrt_dev_sync(c);
    memcpy(dst, c->host + t->host_offset, (size_t)t->nbytes);
  } else {
    memset(dst, 0, (size_t)t->nbytes);
  }
}

void rt_tensor_write(snrt_ctx *c, int ti, const void *src) {
  const snrt_tensor *t = &c->m->tensors[ti];
  if (t->offset >= 0) snrt_dev_upload(c, t->offset, src, t->nbytes);
  else if (t->host_offset >= 0) memcpy(c->host + t->host_offset, src, (size_t)t->nbytes);
}

static FILE *open_params(char *path, size_t n) {
  snprintf(path, n, "%s/params.bin", rt_exe_dir());
  FILE *f = fopen(path, "rb");
  if (!f) rt_fail(SNRT_EXIT_DATA, "cannot open %s: %s (snc compile writes it beside train)",
                  path, strerror(errno));
  return f;
}

void rt_init_tensors(snrt_ctx *c) {
  const snrt_model *m = c->m;
  FILE *params = NULL;
  char ppath[4096];
  int64_t maxb = 4;
  for (int i = 0; i < m->ntensors; i++)
    if (m->tensors[i].nbytes > maxb) maxb = m->tensors[i].nbytes;
  float *buf = rt_xmalloc((size_t)maxb);
  for (int i = 0; i < m->ntensors; i++) {
    const snrt_tensor *t = &m->tensors[i];
    int init = t->init;
    if (t->kind == SNRT_T_OPT) init = SNRT_INIT_ZERO;
    if (init == SNRT_INIT_NONE) continue;
    int64_t n = rt_tensor_elems(t);
    switch (init) {
    case SNRT_INIT_FILE:
      if (!params) params = open_params(ppath, sizeof ppath);
      if (fseeko(params, t->file_offset, SEEK_SET) != 0 ||
          fread(buf, 1, (size_t)t->nbytes, params) != (size_t)t->nbytes)
        rt_fail(SNRT_EXIT_DATA, "%s is truncated: no %lld bytes for '%s' at offset %lld",
                ppath, (long long)t->nbytes, t->name, (long long)t->file_offset);
      break;
    case SNRT_INIT_ZERO:
      memset(buf, 0, (size_t)t->nbytes);
      break;
    case SNRT_INIT_ONE:
      for (int64_t j = 0; j < n; j++) buf[j] = 1.0f;
      break;
    case SNRT_INIT_KAIMING:
    case SNRT_INIT_BIAS: {
      float bound = t->fan_in > 0 ? 1.0f / sqrtf((float)t->fan_in) : 0.0f;
      for (int64_t j = 0; j < n; j++)
        buf[j] = (2.0f * snrt_uniform(c->seed, INIT_STREAM, (uint32_t)i, (uint64_t)j) - 1.0f) * bound;
      break;
    }
    default:
      rt_fail(SNRT_EXIT_DATA, "tensor '%s' has unknown init kind %d", t->name, init);
    }
    rt_tensor_write(c, i, buf);
  }
  if (params) fclose(params);
  free(buf);
}
