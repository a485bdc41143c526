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

/* The channel of element i of an (n, c, hw) tensor; 32-bit division where
 * the index fits (a 64-bit one is many times slower on the GPU). */
__device__ __forceinline__ int bn_chan(int64_t i, int64_t hw, int c) {
  if (i < 4294967296ll && hw < 4294967296ll)
    return (int)((unsigned)i / (unsigned)hw % (unsigned)c);
  return (int)(i / hw % c);
}

/* y = (x - mean) * invstd * scale + bias; invstd from var if `var` is given
 * (inference), else read from `inv`. */
__global__ void k_bn_apply(snrt_bn_t p, const float *x, const float *scale, const float *bias,
                           const float *mean, const float *inv, const float *var, float *y) {
  int64_t n = (int64_t)p.n * p.c * p.hw;
  SNRT_FOR(i, n) {
    int ch = bn_chan(i, p.hw, p.c);
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

/* ---- a channel split over many blocks ------------------------------------
 * One block per channel leaves an H200 idle where channels are few and large
 * (resnet50 b128's first BatchNormalization: 64 channels of 1.6M elements,
 * 3.5 ms; under --precision bf16 a chunk of one channel at a time, 121 ms on
 * the second H200 run). So each channel's elements are cut into pieces (an
 * image's plane, BN_PIECE elements at most), and S blocks per channel take
 * the pieces s, s + S, ...; their partial sums go to bn_part, which the next
 * kernel adds in a fixed order: deterministic, as the one-block kernels. The
 * kernels run one after another on the compute stream, so one scratch serves
 * every BatchNormalization. */
#define BN_PIECE 4096
#define BN_PART 65536
__device__ float bn_part[2][BN_PART];
__device__ float bn_sums[2][BN_PART];

typedef struct bn_split {
  int S;                     /* blocks per channel */
  int64_t ppr;               /* pieces per image plane */
} bn_split;

/* S = 0: not split (more than BN_PART channels: the one-block kernels). */
static bn_split bn_plan(const snrt_bn_t *p) {
  bn_split b;
  b.ppr = (p->hw + BN_PIECE - 1) / BN_PIECE;
  if (b.ppr < 1) b.ppr = 1;
  int64_t items = (int64_t)p->n * b.ppr;
  int64_t S = (1024 + p->c - 1) / p->c;   /* about 1024 blocks in all */
  if (S > items) S = items;
  if (S > 256) S = 256;
  if (S * p->c > BN_PART) S = BN_PART / p->c;
  if (S < 1 || p->c > 65535) S = 0;
  b.S = (int)S;
  return b;
}

/* The sum of channel ch's partials 0..S-1 in row r of bn_part, in order. */
__device__ __forceinline__ float bn_gather(int r, int ch, int S) {
  float t = 0.0f;
  for (int k = 0; k < S; k++) t += bn_part[r][ch * S + k];
  return t;
}

/* Pieces s, s + S, ... of channel ch: base offset and [lo, hi) of each, the
 * block's threads striding over it. */
#define BN_PIECES(p, b, ch, s, off, BODY)                                                      \
  for (int64_t w_ = (s); w_ < (int64_t)(p).n * (b).ppr; w_ += (b).S) {                          \
    int64_t img_ = w_ / (b).ppr, lo_ = w_ % (b).ppr * BN_PIECE;                                 \
    int64_t hi_ = lo_ + BN_PIECE < (p).hw ? lo_ + BN_PIECE : (p).hw;                            \
    int64_t base_ = (img_ * (p).c + (ch)) * (p).hw;                                             \
    for (int64_t j_ = lo_ + threadIdx.x; j_ < hi_; j_ += blockDim.x) {                          \
      int64_t off = base_ + j_;                                                                 \
      BODY                                                                                      \
    }                                                                                           \
  }

/* Partial sums of x (pass 0), then of (x - mean)^2 (pass 1) with the mean
 * from pass 0's partials. Grid: (S, c). */
__global__ void k_bn_part_stats(snrt_bn_t p, bn_split b, int pass, const float *x) {
  int ch = blockIdx.y, s = blockIdx.x;
  float mean = pass ? bn_gather(0, ch, b.S) / (float)((int64_t)p.n * p.hw) : 0.0f;
  float t = 0.0f;
  BN_PIECES(p, b, ch, s, o, { float d = x[o] - mean; t += pass ? d * d : d; })
  t = snrt_block_sum(t);
  if (threadIdx.x == 0) bn_part[pass][ch * b.S + s] = t;
}

/* One thread per channel: the statistics from the partials. */
__global__ void k_bn_part_final(snrt_bn_t p, bn_split b, float *rmean, float *rvar, float *smean,
                                float *sinvstd) {
  int64_t m = (int64_t)p.n * p.hw;
  for (int ch = blockIdx.x * blockDim.x + threadIdx.x; ch < p.c; ch += gridDim.x * blockDim.x) {
    float mean = bn_gather(0, ch, b.S) / (float)m;
    float var = bn_gather(1, ch, b.S) / (float)m;
    smean[ch] = mean;
    sinvstd[ch] = rsqrtf(var + p.eps);
    float unbiased = m > 1 ? var * ((float)m / (float)(m - 1)) : var;
    if (rmean) rmean[ch] = rmean[ch] * p.momentum + mean * (1.0f - p.momentum);
    if (rvar) rvar[ch] = rvar[ch] * p.momentum + unbiased * (1.0f - p.momentum);
  }
}

/* Backward: partial sums of dy (row 0) and dy * xhat (row 1). */
__global__ void k_bn_part_bwd(snrt_bn_t p, bn_split b, const float *x, const float *dy,
                              const float *smean, const float *sinvstd) {
  int ch = blockIdx.y, s = blockIdx.x;
  float mean = smean[ch], is = sinvstd[ch];
  float sd = 0.0f, sdx = 0.0f;
  BN_PIECES(p, b, ch, s, o, { float g = dy[o]; sd += g; sdx += g * (x[o] - mean) * is; })
  sd = snrt_block_sum(sd);
  sdx = snrt_block_sum(sdx);
  if (threadIdx.x == 0) {
    bn_part[0][ch * b.S + s] = sd;
    bn_part[1][ch * b.S + s] = sdx;
  }
}

__global__ void k_bn_part_bwd_final(snrt_bn_t p, bn_split b, float *dscale, float *dbias) {
  for (int ch = blockIdx.x * blockDim.x + threadIdx.x; ch < p.c; ch += gridDim.x * blockDim.x) {
    float sd = bn_gather(0, ch, b.S), sdx = bn_gather(1, ch, b.S);
    bn_sums[0][ch] = sd;
    bn_sums[1][ch] = sdx;
    if (dbias) dbias[ch] = sd;
    if (dscale) dscale[ch] = sdx;
  }
}

/* dx = scale * invstd / m * (m dy - sum dy - xhat sum(dy xhat)), elementwise. */
__global__ void k_bn_part_dx(snrt_bn_t p, const float *x, const float *dy, const float *scale,
                             const float *smean, const float *sinvstd, float *dx) {
  int64_t n = (int64_t)p.n * p.c * p.hw, m = (int64_t)p.n * p.hw;
  SNRT_FOR(i, n) {
    int ch = bn_chan(i, p.hw, p.c);
    float is = sinvstd[ch];
    float xh = (x[i] - smean[ch]) * is;
    dx[i] = scale[ch] * is / (float)m * ((float)m * dy[i] - bn_sums[0][ch] - xh * bn_sums[1][ch]);
  }
}

void snrt_bn_fwd_train(snrt_ctx *c, const snrt_bn_t *p, const float *x, const float *scale,
                       const float *bias, float *rmean, float *rvar, float *y, float *smean,
                       float *sinvstd) {
  if (p->c <= 0) return;
  bn_split b = bn_plan(p);
  if (b.S > 0 && p->n > 0 && p->hw > 0) {
    dim3 grid((unsigned)b.S, (unsigned)p->c);
    for (int pass = 0; pass < 2; pass++) {
      k_bn_part_stats<<<grid, 256, 0, snrt_cu_stream(c)>>>(*p, b, pass, x);
      SNRT_LAUNCH_CHECK();
    }
    k_bn_part_final<<<(p->c + 255) / 256, 256, 0, snrt_cu_stream(c)>>>(*p, b, rmean, rvar, smean,
                                                                        sinvstd);
  } else {
    k_bn_stats<<<chan_blocks(p->c), BN_THREADS, 0, snrt_cu_stream(c)>>>(*p, x, rmean, rvar,
                                                                         smean, sinvstd);
  }
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
  bn_split b = bn_plan(p);
  if (b.S > 0 && p->n > 0 && p->hw > 0) {
    k_bn_part_bwd<<<dim3((unsigned)b.S, (unsigned)p->c), 256, 0, snrt_cu_stream(c)>>>(
        *p, b, x, dy, smean, sinvstd);
    SNRT_LAUNCH_CHECK();
    k_bn_part_bwd_final<<<(p->c + 255) / 256, 256, 0, snrt_cu_stream(c)>>>(*p, b, dscale, dbias);
    SNRT_LAUNCH_CHECK();
    int64_t n = (int64_t)p->n * p->c * p->hw;
    if (dx) k_bn_part_dx<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(
        *p, x, dy, scale, smean, sinvstd, dx);
  } else {
    k_bn_bwd<<<chan_blocks(p->c), BN_THREADS, 0, snrt_cu_stream(c)>>>(*p, x, dy, scale, smean,
                                                                       sinvstd, dx, dscale, dbias);
  }
  SNRT_LAUNCH_CHECK();
}
