/* k_half.c — 16-bit storage for the CPU target (--precision bf16|fp16).
 *
 * What it is: the conversions an emitted step wraps around a kernel whose
 * operands are 16-bit in the arena (snrt.h, "Mixed precision"): widen into
 * the scratch, round float32 weights to 16-bit precision, round results back.
 * The kernels themselves stay float32, so the CPU computes exactly what a GPU
 * kernel that loads 16-bit values, accumulates in fp32 and stores 16-bit
 * values computes, up to the order of its sums. Also fp16's dynamic loss
 * scaling (scale the loss gradient, unscale and check the parameter
 * gradients, skip the updates on overflow).
 *
 * What it is not: the scratch's allocation (device.c, at start-up). */
#include "kern.h"

#include <stdio.h>

float *snrt_scratch(snrt_ctx *c, int64_t at) { return c->scratch + at; }

float *snrt_bf16_load(snrt_ctx *c, int64_t at, const uint16_t *src, int64_t n) {
  float *y = c->scratch + at;
#pragma omp parallel for schedule(static) if (n > KERN_PAR_MIN)
  for (int64_t i = 0; i < n; i++) y[i] = snrt_bf16_to_f32(src[i]);
  return y;
}

float *snrt_bf16_round(snrt_ctx *c, int64_t at, const float *src, int64_t n) {
  float *y = c->scratch + at;
#pragma omp parallel for schedule(static) if (n > KERN_PAR_MIN)
  for (int64_t i = 0; i < n; i++) y[i] = snrt_bf16_to_f32(snrt_f32_to_bf16(src[i]));
  return y;
}

void snrt_bf16_store(snrt_ctx *c, const float *src, uint16_t *dst, int64_t n) {
  (void)c;
#pragma omp parallel for schedule(static) if (n > KERN_PAR_MIN)
  for (int64_t i = 0; i < n; i++) dst[i] = snrt_f32_to_bf16(src[i]);
}

float *snrt_f16_load(snrt_ctx *c, int64_t at, const uint16_t *src, int64_t n) {
  float *y = c->scratch + at;
#pragma omp parallel for schedule(static) if (n > KERN_PAR_MIN)
  for (int64_t i = 0; i < n; i++) y[i] = snrt_f16_to_f32(src[i]);
  return y;
}

float *snrt_f16_round(snrt_ctx *c, int64_t at, const float *src, int64_t n) {
  float *y = c->scratch + at;
#pragma omp parallel for schedule(static) if (n > KERN_PAR_MIN)
  for (int64_t i = 0; i < n; i++) y[i] = snrt_f16_to_f32(snrt_f32_to_f16(src[i]));
  return y;
}

void snrt_f16_store(snrt_ctx *c, const float *src, uint16_t *dst, int64_t n) {
  (void)c;
#pragma omp parallel for schedule(static) if (n > KERN_PAR_MIN)
  for (int64_t i = 0; i < n; i++) dst[i] = snrt_f32_to_f16(src[i]);
}

/* ---- dynamic loss scaling (fp16) ------------------------------------------ */

/* GradScaler's defaults. */
#define SCALE_GROWTH_INTERVAL 2000

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
  } else if (++c->scale_good == SCALE_GROWTH_INTERVAL) {
    c->loss_scale *= 2.0f;
    c->scale_good = 0;
  }
}

int snrt_overflow(snrt_ctx *c) { return c->overflow; }
