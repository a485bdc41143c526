/* norm.cu — BatchNormalization kernels: training (batch statistics), saved
 * statistics (recomputation), inference (running statistics), backward.
 *
 * What it is: our own kernels. The statistics take two passes over each
 * channel (the mean, then the sum of squared deviations, which is more
 * accurate than E[x^2] - E[x]^2), the backward one (the sums of dy and of
 * dy * xhat), then an elementwise pass applies them. A channel's m = n * hw
 * elements are cut into S contiguous slices, one block each, S from m alone
 * (one block per channel left an H200 idle where channels are few and
 * large: resnet50 b128's first BatchNormalization took 3.5 ms, and 121 ms
 * under --precision bf16, whose chunks hand it one channel at a time). The
 * slices' partial sums go to a __device__ scratch and are added in slice
 * order by the next kernel: no atomics, deterministic, and a channel's bits
 * do not depend on how many channels are computed with it (a --precision
 * chunk of channels computes the bits of the whole tensor:
 * docs/precision.md). Kernels run one after another on the compute stream,
 * so one scratch serves every BatchNormalization.
 * Semantics (snrt.h): saved inverse std = 1/sqrt(biased var + eps); running
 * mean/var = running * momentum + batch * (1 - momentum) (ONNX convention),
 * the running variance with the unbiased batch variance (as PyTorch).
 * What it is not: cuDNN's batch norm (whose running-average convention is the
 * other way round and which we would have to trust on the unbiased update). */
#include "cuda_rt.h"

#define BN_THREADS 256
#define BN_PART 65536            /* partial sums per launch: channels x slices */
__device__ float bn_part[2][BN_PART];
__device__ float bn_sums[2][BN_PART];

/* Channel ch's element k of (n, hw) in an (n, c, hw) tensor. */
__device__ __forceinline__ int64_t bn_at(int c, int64_t hw, int ch, int64_t k) {
  int64_t q = snrt_div(k, hw);
  return (q * c + ch) * hw + (k - q * hw);
}

/* Slices per channel, from the channel's size alone: about 8192 elements
 * each, 1 to 256. */
static int bn_slices(const snrt_bn_t *p) {
  int64_t S = (int64_t)p->n * p->hw / 8192;
  return S < 1 ? 1 : S > 256 ? 256 : (int)S;
}

/* Channels per launch: the scratch holds S partials of each. */
static int bn_chunk(int S) {
  int cb = BN_PART / S;
  return cb > 65535 ? 65535 : cb;
}

/* The sum of partials 0..S-1 of the launch's channel j, in order. */
__device__ __forceinline__ float bn_gather(int r, int j, int S) {
  float t = 0.0f;
  for (int k = 0; k < S; k++) t += bn_part[r][j * S + k];
  return t;
}

/* Slice s of channel ch: its elements k, the block's threads striding. */
#define BN_SLICE(p, S, ch, s, off, BODY)                                                       \
  {                                                                                            \
    int64_t m_ = (int64_t)(p).n * (p).hw, len_ = (m_ + (S) - 1) / (S);                         \
    int64_t lo_ = (int64_t)(s) * len_, hi_ = lo_ + len_ < m_ ? lo_ + len_ : m_;                 \
    for (int64_t k_ = lo_ + threadIdx.x; k_ < hi_; k_ += blockDim.x) {                         \
      int64_t off = bn_at((p).c, (p).hw, (ch), k_);                                            \
      BODY                                                                                     \
    }                                                                                          \
  }

/* Partial sums of x (pass 0), then of (x - mean)^2 (pass 1), the mean from
 * pass 0's partials. Grid: (S, channels of this launch from c0). */
__global__ void k_bn_part_stats(snrt_bn_t p, int S, int c0, int pass, const float *x) {
  int j = blockIdx.y, ch = c0 + j, s = blockIdx.x;
  float mean = pass ? bn_gather(0, j, S) / (float)((int64_t)p.n * p.hw) : 0.0f;
  float t = 0.0f;
  BN_SLICE(p, S, ch, s, o, { float d = x[o] - mean; t += pass ? d * d : d; })
  t = snrt_block_sum(t);
  if (threadIdx.x == 0) bn_part[pass][j * S + s] = t;
}

/* One thread per channel of the launch: the statistics from the partials. */
__global__ void k_bn_part_final(snrt_bn_t p, int S, int c0, int nc, float *rmean, float *rvar,
                                float *smean, float *sinvstd) {
  int64_t m = (int64_t)p.n * p.hw;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < nc; j += gridDim.x * blockDim.x) {
    int ch = c0 + j;
    float mean = bn_gather(0, j, S) / (float)m;
    float var = bn_gather(1, j, S) / (float)m;
    smean[ch] = mean;
    sinvstd[ch] = rsqrtf(var + p.eps);
    float unbiased = m > 1 ? var * ((float)m / (float)(m - 1)) : var;
    if (rmean) rmean[ch] = rmean[ch] * p.momentum + mean * (1.0f - p.momentum);
    if (rvar) rvar[ch] = rvar[ch] * p.momentum + unbiased * (1.0f - p.momentum);
  }
}

/* Backward: partial sums of dy (row 0) and dy * xhat (row 1). */
__global__ void k_bn_part_bwd(snrt_bn_t p, int S, int c0, const float *x, const float *dy,
                              const float *smean, const float *sinvstd) {
  int j = blockIdx.y, ch = c0 + j, s = blockIdx.x;
  float mean = smean[ch], is = sinvstd[ch];
  float sd = 0.0f, sdx = 0.0f;
  BN_SLICE(p, S, ch, s, o, { float g = dy[o]; sd += g; sdx += g * (x[o] - mean) * is; })
  sd = snrt_block_sum(sd);
  sdx = snrt_block_sum(sdx);
  if (threadIdx.x == 0) {
    bn_part[0][j * S + s] = sd;
    bn_part[1][j * S + s] = sdx;
  }
}

__global__ void k_bn_part_bwd_final(int S, int c0, int nc, float *dscale, float *dbias) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < nc; j += gridDim.x * blockDim.x) {
    float sd = bn_gather(0, j, S), sdx = bn_gather(1, j, S);
    bn_sums[0][j] = sd;
    bn_sums[1][j] = sdx;
    if (dbias) dbias[c0 + j] = sd;
    if (dscale) dscale[c0 + j] = sdx;
  }
}

/* dx = scale * invstd / m * (m dy - sum dy - xhat sum(dy xhat)) over the
 * launch's channels [c0, c0 + nc), elementwise. */
__global__ void k_bn_part_dx(snrt_bn_t p, int c0, int nc, const float *x, const float *dy,
                             const float *scale, const float *smean, const float *sinvstd,
                             float *dx) {
  int64_t m = (int64_t)p.n * p.hw, total = m * nc;
  SNRT_FOR(i, total) {
    int64_t k = snrt_div(i, (int64_t)nc * p.hw), r = i - k * nc * p.hw;   /* image, rest */
    int j = (int)snrt_div(r, p.hw);
    int ch = c0 + j;
    int64_t o = (k * p.c + ch) * p.hw + (r - (int64_t)j * p.hw);
    float is = sinvstd[ch];
    float xh = (x[o] - smean[ch]) * is;
    dx[o] = scale[ch] * is / (float)m * ((float)m * dy[o] - bn_sums[0][j] - xh * bn_sums[1][j]);
  }
}

/* The channel of element i of an (n, c, hw) tensor. */
__device__ __forceinline__ int bn_chan(int64_t i, int64_t hw, int c) {
  return (int)snrt_mod(snrt_div(i, hw), c);
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

void snrt_bn_fwd_train(snrt_ctx *c, const snrt_bn_t *p, const float *x, const float *scale,
                       const float *bias, float *rmean, float *rvar, float *y, float *smean,
                       float *sinvstd) {
  if (p->c <= 0 || p->n <= 0 || p->hw <= 0) return;
  int S = bn_slices(p), cb = bn_chunk(S);
  for (int c0 = 0; c0 < p->c; c0 += cb) {
    int nc = p->c - c0 < cb ? p->c - c0 : cb;
    for (int pass = 0; pass < 2; pass++) {
      k_bn_part_stats<<<dim3((unsigned)S, (unsigned)nc), BN_THREADS, 0, snrt_cu_stream(c)>>>(
          *p, S, c0, pass, x);
      SNRT_LAUNCH_CHECK();
    }
    k_bn_part_final<<<(nc + 255) / 256, 256, 0, snrt_cu_stream(c)>>>(*p, S, c0, nc, rmean, rvar,
                                                                      smean, sinvstd);
    SNRT_LAUNCH_CHECK();
  }
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

/* Per channel: dbias = sum dy, dscale = sum dy * xhat (the partials, then
 * their ordered sums); then dx = scale * invstd / m * (m dy - dbias - xhat
 * dscale). */
void snrt_bn_bwd(snrt_ctx *c, const snrt_bn_t *p, const float *x, const float *dy,
                 const float *scale, const float *smean, const float *sinvstd, float *dx,
                 float *dscale, float *dbias) {
  if (p->c <= 0 || p->n <= 0 || p->hw <= 0) return;
  int S = bn_slices(p), cb = bn_chunk(S);
  for (int c0 = 0; c0 < p->c; c0 += cb) {
    int nc = p->c - c0 < cb ? p->c - c0 : cb;
    k_bn_part_bwd<<<dim3((unsigned)S, (unsigned)nc), BN_THREADS, 0, snrt_cu_stream(c)>>>(
        *p, S, c0, x, dy, smean, sinvstd);
    SNRT_LAUNCH_CHECK();
    k_bn_part_bwd_final<<<(nc + 255) / 256, 256, 0, snrt_cu_stream(c)>>>(S, c0, nc, dscale, dbias);
    SNRT_LAUNCH_CHECK();
    if (!dx) continue;
    int64_t total = (int64_t)p->n * nc * p->hw;
    k_bn_part_dx<<<snrt_cu_blocks(total), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(
        *p, c0, nc, x, dy, scale, smean, sinvstd, dx);
    SNRT_LAUNCH_CHECK();
  }
}
