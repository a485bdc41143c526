/* k_half.c — 16-bit storage for the CPU target (--precision bf16|fp16).
 *
 * What it is: the conversions an emitted step wraps around a kernel whose
 * operands are 16-bit in the arena (snrt.h, "Mixed precision"): widen into
 * the step's float32 copies, round float32 weights to 16-bit precision,
 * round results back.
 * The kernels themselves stay float32, so the CPU computes exactly what a GPU
 * kernel that loads 16-bit values, accumulates in fp32 and stores 16-bit
 * values computes, up to the order of its sums. Also fp16's dynamic loss
 * scaling (scale the loss gradient, unscale and check the parameter
 * gradients, skip the updates on overflow).
 *
 * What it is not: where the copies live (the plan puts them in each step's
 * workspace, compiler/plan/convert.c). */
#include "kern.h"

#include <stdio.h>

/* One converter per direction and format; the _rows forms run the same loop
 * per row (rows x len elements in all). */
#define CVT_LOOP(n, body) \
  _Pragma("omp parallel for schedule(static) if ((n) > KERN_PAR_MIN)") \
  for (int64_t i = 0; i < (n); i++) body
#define ROWS_LOOP(rows, len, body) \
  _Pragma("omp parallel for schedule(static) if ((rows) * (len) > KERN_PAR_MIN)") \
  for (int64_t r = 0; r < (rows); r++) \
    for (int64_t j = 0; j < (len); j++) body

#define HALF_FORMAT(fmt, to32, from32)                                                         \
  void snrt_##fmt##_load(snrt_ctx *c, const uint16_t *src, float *dst, int64_t n) {            \
    (void)c;                                                                                  \
    CVT_LOOP(n, dst[i] = to32(src[i]););                                                      \
  }                                                                                           \
  void snrt_##fmt##_round(snrt_ctx *c, const float *src, float *dst, int64_t n) {              \
    (void)c;                                                                                  \
    CVT_LOOP(n, dst[i] = to32(from32(src[i])););                                              \
  }                                                                                           \
  void snrt_##fmt##_store(snrt_ctx *c, const float *src, uint16_t *dst, int64_t n) {           \
    (void)c;                                                                                  \
    CVT_LOOP(n, dst[i] = from32(src[i]););                                                    \
  }                                                                                           \
  void snrt_##fmt##_load_rows(snrt_ctx *c, const uint16_t *src, int64_t stride, float *dst,    \
                              int64_t rows, int64_t len) {                                    \
    (void)c;                                                                                  \
    ROWS_LOOP(rows, len, dst[r * len + j] = to32(src[r * stride + j]););                     \
  }                                                                                           \
  void snrt_##fmt##_store_rows(snrt_ctx *c, const float *src, uint16_t *dst, int64_t stride,   \
                               int64_t rows, int64_t len) {                                   \
    (void)c;                                                                                  \
    ROWS_LOOP(rows, len, dst[r * stride + j] = from32(src[r * len + j]););                   \
  }

HALF_FORMAT(bf16, snrt_bf16_to_f32, snrt_f32_to_bf16)
HALF_FORMAT(f16, snrt_f16_to_f32, snrt_f32_to_f16)

/* ---- dynamic loss scaling (fp16) ------------------------------------------ */

void snrt_loss_scale(snrt_ctx *c, int64_t n, float *dy) {
  float s = c->loss_scale;
  for (int64_t i = 0; i < n; i++) dy[i] *= s;
}

void snrt_grad_unscale(snrt_ctx *c, int n, float *const *g, const int64_t *cnt) {
  /* The scale is a power of two, so 1/scale is exact and so is the product
   * (unless it goes subnormal). */
  float inv = 1.0f / c->loss_scale;
  int bad = 0;
  for (int k = 0; k < n; k++) {
    float *x = g[k];
    int64_t m = cnt[k];
    int b = 0;
#pragma omp parallel for schedule(static) reduction(| : b) if (m > KERN_PAR_MIN)
    for (int64_t i = 0; i < m; i++) {
      x[i] *= inv;
      b |= !isfinite(x[i]);
    }
    bad |= b;
  }
  c->overflow = bad;
  if (bad) {
    c->skipped_steps++;
    c->loss_scale *= 0.5f;
    c->scale_good = 0;
  } else if (++c->scale_good >= c->scale_interval) {
    c->loss_scale *= 2.0f;
    c->scale_good = 0;
  }
}

