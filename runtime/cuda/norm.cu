/* norm.cu — BatchNormalization kernels: training (batch statistics), saved
 * statistics (recomputation), inference (running statistics), backward.
 *
 * What it is: our own kernels, one block per channel for the statistics (two
 * passes over the channel: mean, then the sum of squared deviations, which is
 * more accurate than E[x^2] - E[x]^2) and an elementwise pass. Fixed-order
 * block sums, no atomics: deterministic.
 * Semantics (snrt.h): saved inverse std = 1/sqrt(biased var + eps); running
 * mean/var = running * momentum + batch * (1 - momentum) (ONNX convention),
 * the running variance with the unbiased batch variance (as PyTorch).
 * What it is not: cuDNN's batch norm (whose running-average convention is the
 * other way round and which we would have to trust on the unbiased update). */
#include "cuda_rt.h"

#define BN_THREADS 512

/* Channel ch's element k of (n, hw) in an (n, c, hw) tensor. */
__device__ __forceinline__ int64_t bn_at(int c, int64_t hw, int ch, int64_t k) {
  return (k / hw * c + ch) * hw + k % hw;
}

__global__ void k_bn_stats(snrt_bn_t p, const float *x, float *rmean, float *rvar, float *smean,
                           float *sinvstd) {
  int64_t m = (int64_t)p.n * p.hw;
  for (int ch = blockIdx.x; ch < p.c; ch += gridDim.x) {
    float s = 0.0f;
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x) s += x[bn_at(p.c, p.hw, ch, k)];
    float mean = snrt_block_sum(s) / (float)m;
    float q = 0.0f;
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
      float d = x[bn_at(p.c, p.hw, ch, k)] - mean;
      q += d * d;
    }
    float var = snrt_block_sum(q) / (float)m;
    if (threadIdx.x == 0) {
      smean[ch] = mean;
      sinvstd[ch] = rsqrtf(var + p.eps);
      float unbiased = m > 1 ? var * ((float)m / (float)(m - 1)) : var;
      if (rmean) rmean[ch] = rmean[ch] * p.momentum + mean * (1.0f - p.momentum);
      if (rvar) rvar[ch] = rvar[ch] * p.momentum + unbiased * (1.0f - p.momentum);
    }
  }
}

/* y = (x - mean) * invstd * scale + bias; invstd from var if `var` is given
 * (inference), else read from `inv`. */
__global__ void k_bn_apply(snrt_bn_t p, const float *x, const float *scale, const float *bias,
                           const float *mean, const float *inv, const float *var, float *y) {
  int64_t n = (int64_t)p.n * p.c * p.hw;
  SNRT_FOR(i, n) {
    int ch = (int)(i / p.hw % p.c);
    float is = var ? rsqrtf(var[ch] + p.eps) : inv[ch];
    y[i] = (x[i] - mean[ch]) * is * scale[ch] + bias[ch];
  }
}

static void bn_apply(snrt_ctx *c, const snrt_bn_t *p, const float *x, const float *scale,
                     const float *bias, const float *mean, const float *inv, const float *var,
                     float *y) {
  int64_t n = (int64_t)p->n * p->c * p->hw;
  if (n <= 0) return;
  k_bn_apply<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, x, scale, bias, mean,
                                                                         inv, var, y);
  SNRT_LAUNCH_CHECK();
}

static unsigned chan_blocks(int c) { return c > 65535 ? 65535u : (unsigned)(c > 0 ? c : 1); }

void snrt_bn_fwd_train(snrt_ctx *c, const snrt_bn_t *p, const float *x, const float *scale,
                       const float *bias, float *rmean, float *rvar, float *y, float *smean,
                       float *sinvstd) {
  if (p->c <= 0) return;
  k_bn_stats<<<chan_blocks(p->c), BN_THREADS, 0, snrt_cu_stream(c)>>>(*p, x, rmean, rvar, smean,
                                                                       sinvstd);
  SNRT_LAUNCH_CHECK();
  bn_apply(c, p, x, scale, bias, smean, sinvstd, NULL, y);
}

void snrt_bn_fwd_saved(snrt_ctx *c, const snrt_bn_t *p, const float *x, const float *scale,
                       const float *bias, const float *smean, const float *sinvstd, float *y) {
  bn_apply(c, p, x, scale, bias, smean, sinvstd, NULL, y);
}

void snrt_bn_fwd_infer(snrt_ctx *c, const snrt_bn_t *p, const float *x, const float *scale,
                       const float *bias, const float *rmean, const float *rvar, float *y) {
  bn_apply(c, p, x, scale, bias, rmean, NULL, rvar, y);
}

/* Per channel: dbias = sum dy, dscale = sum dy * xhat; then
 * dx = scale * invstd / m * (m dy - dbias - xhat dscale). The block keeps the
 * two sums and applies dx itself, so the channel is read twice in all. */
__global__ void k_bn_bwd(snrt_bn_t p, const float *x, const float *dy, const float *scale,
                         const float *smean, const float *sinvstd, float *dx, float *dscale,
                         float *dbias) {
  int64_t m = (int64_t)p.n * p.hw;
  for (int ch = blockIdx.x; ch < p.c; ch += gridDim.x) {
    float mean = smean[ch], is = sinvstd[ch];
    float sd = 0.0f, sdx = 0.0f;
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
      int64_t o = bn_at(p.c, p.hw, ch, k);
      float g = dy[o];
      sd += g;
      sdx += g * (x[o] - mean) * is;
    }
    sd = snrt_block_sum(sd);
    sdx = snrt_block_sum(sdx);
    if (threadIdx.x == 0) {
      if (dbias) dbias[ch] = sd;
      if (dscale) dscale[ch] = sdx;
    }
    if (!dx) continue;
    float f = scale[ch] * is / (float)m;
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
      int64_t o = bn_at(p.c, p.hw, ch, k);
      float xh = (x[o] - mean) * is;
      dx[o] = f * ((float)m * dy[o] - sd - xh * sdx);
    }
  }
}

void snrt_bn_bwd(snrt_ctx *c, const snrt_bn_t *p, const float *x, const float *dy,
                 const float *scale, const float *smean, const float *sinvstd, float *dx,
                 float *dscale, float *dbias) {
  if (p->c <= 0) return;
  k_bn_bwd<<<chan_blocks(p->c), BN_THREADS, 0, snrt_cu_stream(c)>>>(*p, x, dy, scale, smean,
                                                                     sinvstd, dx, dscale, dbias);
  SNRT_LAUNCH_CHECK();
}
