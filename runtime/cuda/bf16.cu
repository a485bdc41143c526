/* bf16.cu — 16-bit storage for the CUDA target (--precision bf16; fp16's
 * conversions too, though snc does not compile fp16 for CUDA yet): the
 * conversions an emitted step wraps around a kernel whose operands are bf16
 * in the arena (snrt.h, "Mixed precision"), on the compute stream (so they
 * are captured into the step's CUDA graph like any kernel).
 *
 * What it is: the same contract as runtime/cpu/k_bf16.c, with the same
 * rounding (snrt_f32_to_bf16, shared through snrt.h): the cuDNN/cuBLAS calls
 * of a bf16 program run in float32 on scratch copies, so a bf16 program on
 * the GPU gives the CPU's numerics and the planned arena sizes.
 *
 * What it is not: tensor-core bf16 (cuDNN/cuBLAS reading the bf16 tensors
 * directly, with fp32 accumulation): not written yet. The scratch (device
 * memory outside the planned arena, snrt_model.scratch_floats floats) is
 * allocated by device.cu. This file has never run on a GPU: it compiles and
 * links (tests/test_precision.py). */
#include "cuda_rt.h"

#include <stdio.h>
#include <stdlib.h>

float *snrt_scratch(snrt_ctx *c, int64_t at) { return c->scratch + at; }

__global__ void k_bf16_load(int64_t n, const uint16_t *src, float *y) {
  SNRT_FOR(i, n) y[i] = snrt_bf16_to_f32(src[i]);
}

__global__ void k_bf16_round(int64_t n, const float *src, float *y) {
  SNRT_FOR(i, n) y[i] = snrt_bf16_to_f32(snrt_f32_to_bf16(src[i]));
}

__global__ void k_bf16_store(int64_t n, const float *src, uint16_t *dst) {
  SNRT_FOR(i, n) dst[i] = snrt_f32_to_bf16(src[i]);
}

float *snrt_bf16_load(snrt_ctx *c, int64_t at, const uint16_t *src, int64_t n) {
  float *y = c->scratch + at;
  if (n <= 0) return y;
  k_bf16_load<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(n, src, y);
  SNRT_LAUNCH_CHECK();
  return y;
}

float *snrt_bf16_round(snrt_ctx *c, int64_t at, const float *src, int64_t n) {
  float *y = c->scratch + at;
  if (n <= 0) return y;
  k_bf16_round<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(n, src, y);
  SNRT_LAUNCH_CHECK();
  return y;
}

void snrt_bf16_store(snrt_ctx *c, const float *src, uint16_t *dst, int64_t n) {
  if (n <= 0) return;
  k_bf16_store<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(n, src, dst);
  SNRT_LAUNCH_CHECK();
}

__global__ void k_f16_load(int64_t n, const uint16_t *src, float *y) {
  SNRT_FOR(i, n) y[i] = snrt_f16_to_f32(src[i]);
}

__global__ void k_f16_round(int64_t n, const float *src, float *y) {
  SNRT_FOR(i, n) y[i] = snrt_f16_to_f32(snrt_f32_to_f16(src[i]));
}

__global__ void k_f16_store(int64_t n, const float *src, uint16_t *dst) {
  SNRT_FOR(i, n) dst[i] = snrt_f32_to_f16(src[i]);
}

float *snrt_f16_load(snrt_ctx *c, int64_t at, const uint16_t *src, int64_t n) {
  float *y = c->scratch + at;
  if (n <= 0) return y;
  k_f16_load<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(n, src, y);
  SNRT_LAUNCH_CHECK();
  return y;
}

float *snrt_f16_round(snrt_ctx *c, int64_t at, const float *src, int64_t n) {
  float *y = c->scratch + at;
  if (n <= 0) return y;
  k_f16_round<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(n, src, y);
  SNRT_LAUNCH_CHECK();
  return y;
}

void snrt_f16_store(snrt_ctx *c, const float *src, uint16_t *dst, int64_t n) {
  if (n <= 0) return;
  k_f16_store<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(n, src, dst);
  SNRT_LAUNCH_CHECK();
}

/* fp16's dynamic loss scaling decides on the host whether a step's updates
 * run, which a captured CUDA graph cannot: snc refuses --precision fp16
 * --target cuda, and these stop a program that calls them anyway. */
static void no_loss_scaling(void) {
  fprintf(stderr, "snrt: error: --precision fp16 (dynamic loss scaling) is not supported on the "
                  "CUDA target yet; compile with --precision bf16\n");
  exit(SNRT_EXIT_DEVICE);
}

void snrt_loss_scale(snrt_ctx *c, int64_t n, float *dy) { no_loss_scaling(); }
void snrt_grad_unscale(snrt_ctx *c, int n, float *const *g, const int64_t *cnt) { no_loss_scaling(); }
int snrt_overflow(snrt_ctx *c) {
  no_loss_scaling();
  return 0;
}
