/* k_bf16.c — bfloat16 storage for the CPU target (--precision bf16).
 *
 * What it is: the conversions an emitted step wraps around a kernel whose
 * operands are bf16 in the arena (snrt.h, "Mixed precision"): widen into the
 * scratch, round float32 weights to bf16 precision, round results back to
 * bf16. The kernels themselves stay float32, so the CPU computes exactly
 * what a GPU kernel that loads bf16, accumulates in fp32 and stores bf16
 * computes, up to the order of its sums.
 *
 * What it is not: the scratch's allocation (device.c, at start-up). */
#include "kern.h"

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
