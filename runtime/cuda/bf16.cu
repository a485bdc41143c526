/* bf16.cu — 16-bit storage for the CUDA target (--precision bf16|fp16): the
 * conversions an emitted step wraps around a kernel whose operands are 16-bit
 * in the arena (snrt.h, "Mixed precision"), and fp16's dynamic loss scaling,
 * all on the compute stream (so they are captured into the step's CUDA graph
 * like any kernel).
 *
 * What it is: the same contract as runtime/cpu/k_half.c, with the same
 * rounding (snrt_f32_to_bf16, shared through snrt.h): the kernels of a 16-bit
 * step that take float32 (BatchNorm, activations, pools, softmax, losses...)
 * run on float32 copies in the step's planned workspace; convolutions and
 * GEMMs read 16-bit operands on tensor cores instead (conv.cu, matmul.cu),
 * their float32 operands narrowed here into 16-bit copies (the same store).
 *
 * What it is not: the planning of the copies (compiler/plan/convert.c). This file
 * has never run on a GPU: it compiles and links (tests/test_cuda_build.py);
 * tests/gpu/run.sh checks it where a GPU is lent. */
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

/* ---- fp16's dynamic loss scaling, decided on the device --------------------
 *
 * The scale, the overflow flag and the counts live in device memory
 * (snrt_cuda_scale): the loss gradient is multiplied by the scale there,
 * snrt_grad_unscale clears the flag, divides every parameter gradient by the
 * scale and raises the flag on an Inf or NaN, then one thread halves the scale
 * (an overflow: the step is skipped) or counts a clean step (doubling after
 * `interval` of them), as the CPU runtime does (k_half.c); the update kernels
 * read the flag and do nothing when it is raised. All of it is kernels on the
 * compute stream, so a captured CUDA graph replays the decision. */

__global__ void k_loss_scale(int64_t n, const snrt_cuda_scale *s, float *dy) {
  const float k = s->scale;
  SNRT_FOR(i, n) dy[i] *= k;
}

__global__ void k_scale_begin(snrt_cuda_scale *s) { s->overflow = 0; }

__global__ void k_unscale(int64_t n, snrt_cuda_scale *s, float *g) {
  /* The scale is a power of two, so 1/scale is exact (as on the CPU). */
  const float inv = 1.0f / s->scale;
  int bad = 0;
  SNRT_FOR(i, n) {
    float v = g[i] * inv;
    g[i] = v;
    bad |= !isfinite(v);
  }
  if (bad) s->overflow = 1;   /* every writer writes 1 */
}

__global__ void k_scale_end(snrt_cuda_scale *s) {
  if (s->overflow) {
    s->skipped++;
    s->scale *= 0.5f;
    s->good = 0;
  } else if (++s->good >= s->interval) {
    s->scale *= 2.0f;
    s->good = 0;
  }
}

static snrt_cuda_scale *scale_state(snrt_ctx *c) {
  snrt_cuda_scale *s = snrt_cu(c)->dscale;
  if (!s) snrt_cu_fail("loss scaling", "called in a program not compiled with --precision fp16",
                       __FILE__, __LINE__);
  return s;
}

void snrt_loss_scale(snrt_ctx *c, int64_t n, float *dy) {
  if (n <= 0) return;
  k_loss_scale<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(n, scale_state(c), dy);
  SNRT_LAUNCH_CHECK();
}

void snrt_grad_unscale(snrt_ctx *c, int n, float *const *g, const int64_t *cnt) {
  snrt_cuda_scale *s = scale_state(c);
  cudaStream_t st = snrt_cu_stream(c);
  k_scale_begin<<<1, 1, 0, st>>>(s);
  SNRT_LAUNCH_CHECK();
  for (int k = 0; k < n; k++) {
    if (cnt[k] <= 0) continue;
    k_unscale<<<snrt_cu_blocks(cnt[k]), SNRT_THREADS, 0, st>>>(cnt[k], s, g[k]);
    SNRT_LAUNCH_CHECK();
  }
  k_scale_end<<<1, 1, 0, st>>>(s);
  SNRT_LAUNCH_CHECK();
}

void snrt_dev_scale_sync(snrt_ctx *c, bool to_host) {
  snrt_cuda_scale *s = snrt_cu(c)->dscale;
  if (!s) return;
  snrt_cuda_scale h;
  if (to_host) {
    CUDA_CHECK(cudaStreamSynchronize(snrt_cu_stream(c)));
    CUDA_CHECK(cudaMemcpy(&h, s, sizeof h, cudaMemcpyDeviceToHost));
    c->loss_scale = h.scale;
    c->overflow = h.overflow;
    c->scale_good = h.good;
    c->skipped_steps = h.skipped;
  } else {
    h.scale = c->loss_scale;
    h.overflow = c->overflow;
    h.good = c->scale_good;
    h.skipped = c->skipped_steps;
    h.interval = c->scale_interval;
    CUDA_CHECK(cudaStreamSynchronize(snrt_cu_stream(c)));
    CUDA_CHECK(cudaMemcpy(s, &h, sizeof h, cudaMemcpyHostToDevice));
  }
}
