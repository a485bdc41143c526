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

/* One converter per direction and format, on the compute stream; the _rows
 * forms index row r, element j of rows x len. */
#define HALF_FORMAT(fmt, to32, from32)                                                          \
  __global__ void k_##fmt##_load(int64_t n, const uint16_t *src, float *y) {                   \
    SNRT_FOR(i, n) y[i] = to32(src[i]);                                                        \
  }                                                                                            \
  __global__ void k_##fmt##_round(int64_t n, const float *src, float *y) {                     \
    SNRT_FOR(i, n) y[i] = to32(from32(src[i]));                                                \
  }                                                                                            \
  __global__ void k_##fmt##_store(int64_t n, const float *src, uint16_t *dst) {                \
    SNRT_FOR(i, n) dst[i] = from32(src[i]);                                                    \
  }                                                                                            \
  __global__ void k_##fmt##_load_rows(int64_t n, int64_t len, int64_t stride,                  \
                                      const uint16_t *src, float *y) {                         \
    SNRT_FOR(i, n) y[i] = to32(src[i / len * stride + i % len]);                               \
  }                                                                                            \
  __global__ void k_##fmt##_store_rows(int64_t n, int64_t len, int64_t stride,                 \
                                       const float *src, uint16_t *dst) {                      \
    SNRT_FOR(i, n) dst[i / len * stride + i % len] = from32(src[i]);                           \
  }                                                                                            \
  void snrt_##fmt##_load(snrt_ctx *c, const uint16_t *src, float *dst, int64_t n) {             \
    if (n <= 0) return;                                                                        \
    k_##fmt##_load<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(n, src, dst);    \
    SNRT_LAUNCH_CHECK();                                                                       \
  }                                                                                            \
  void snrt_##fmt##_round(snrt_ctx *c, const float *src, float *dst, int64_t n) {               \
    if (n <= 0) return;                                                                        \
    k_##fmt##_round<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(n, src, dst);   \
    SNRT_LAUNCH_CHECK();                                                                       \
  }                                                                                            \
  void snrt_##fmt##_store(snrt_ctx *c, const float *src, uint16_t *dst, int64_t n) {            \
    if (n <= 0) return;                                                                        \
    k_##fmt##_store<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(n, src, dst);   \
    SNRT_LAUNCH_CHECK();                                                                       \
  }                                                                                            \
  void snrt_##fmt##_load_rows(snrt_ctx *c, const uint16_t *src, int64_t stride, float *dst,     \
                              int64_t rows, int64_t len) {                                     \
    int64_t n = rows * len;                                                                    \
    if (n <= 0) return;                                                                        \
    k_##fmt##_load_rows<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(n, len, stride, \
                                                                                   src, dst); \
    SNRT_LAUNCH_CHECK();                                                                       \
  }                                                                                            \
  void snrt_##fmt##_store_rows(snrt_ctx *c, const float *src, uint16_t *dst, int64_t stride,    \
                               int64_t rows, int64_t len) {                                    \
    int64_t n = rows * len;                                                                    \
    if (n <= 0) return;                                                                        \
    k_##fmt##_store_rows<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(n, len, stride, \
                                                                                    src, dst); \
    SNRT_LAUNCH_CHECK();                                                                       \
  }

HALF_FORMAT(bf16, snrt_bf16_to_f32, snrt_f32_to_bf16)
HALF_FORMAT(f16, snrt_f16_to_f32, snrt_f32_to_f16)

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

void snrt_dev_scale_sync(snrt_ctx *c, bool to_host) {}
