/* pool.cu — max/average pooling and LRN kernels (forward and backward).
 *
 * What it is: our own kernels with exactly PyTorch's semantics, so that the
 * CUDA and CPU runtimes agree with the reference bit-for-bit in structure:
 * - max pool: padded positions never win; ties keep the first maximum in
 *   row-major window order (as PyTorch); the gradient goes to that element.
 * - average pool: window [oh*sh - pt, oh*sh - pt + kh) clipped to h + pb for
 *   the count_include_pad divisor and to [0, h) for the sum (PyTorch's
 *   formula, with snrt.h's explicit bottom/right pads). ceil_mode is already
 *   in oh/ow.
 * - LRN (ONNX): sq = sum of x^2 over channels [c - (size-1)/2, c + size/2],
 *   y = x / (bias + alpha/size * sq)^beta.
 *
 * Backward kernels gather (one thread per input element, looping over the
 * outputs that read it) instead of scattering with atomics: deterministic.
 * What it is not: cuDNN's pooling (whose padding rules differ in corners). */
#include "cuda_rt.h"

/* Index of the max in output (n, c, oy, ox)'s window, or -1 if all padding. */
__device__ __forceinline__ int64_t max_arg(const snrt_pool_t &p, const float *xc, int oy, int ox) {
  int64_t best = -1;
  float bv = 0.0f;
  for (int i = 0; i < p.kh; i++) {
    int iy = oy * p.sh - p.pt + i * p.dh;
    if (iy < 0 || iy >= p.h) continue;
    for (int j = 0; j < p.kw; j++) {
      int ix = ox * p.sw - p.pl + j * p.dw;
      if (ix < 0 || ix >= p.w) continue;
      float v = xc[(int64_t)iy * p.w + ix];
      /* NaN propagates, as PyTorch's (v > bv || isnan(v)): a later NaN
       * replaces an earlier one, so the last NaN of the window wins, as on
       * the CPU (runtime/cpu/k_pool.c). */
      if (best < 0 || v > bv || isnan(v)) {
        best = (int64_t)iy * p.w + ix;
        bv = v;
      }
    }
  }
  return best;
}

__global__ void k_maxpool_fwd(snrt_pool_t p, const float *x, float *y) {
  int64_t n = (int64_t)p.n * p.c * p.oh * p.ow;
  SNRT_FOR(i, n) {
    int ox = (int)(i % p.ow), oy = (int)(i / p.ow % p.oh);
    int64_t nc = i / ((int64_t)p.oh * p.ow);
    const float *xc = x + nc * p.h * p.w;
    int64_t a = max_arg(p, xc, oy, ox);
    y[i] = a < 0 ? -INFINITY : xc[a];
  }
}

/* Output rows (or columns) whose window can read input position `in`. */
__device__ __forceinline__ void out_range(int in, int pad, int k, int s, int d, int out,
                                          int *lo, int *hi) {
  int top = in + pad - (k - 1) * d;  /* o*s >= top */
  int l = top <= 0 ? 0 : (top + s - 1) / s;
  int h = (in + pad) / s;
  *lo = l;
  *hi = h < out - 1 ? h : out - 1;
}

__global__ void k_maxpool_bwd(snrt_pool_t p, const float *x, const float *dy, float *dx) {
  int64_t n = (int64_t)p.n * p.c * p.h * p.w;
  SNRT_FOR(i, n) {
    int ix = (int)(i % p.w), iy = (int)(i / p.w % p.h);
    int64_t nc = i / ((int64_t)p.h * p.w);
    const float *xc = x + nc * p.h * p.w;
    const float *dyc = dy + nc * p.oh * p.ow;
    int64_t self = (int64_t)iy * p.w + ix;
    int y0, y1, x0, x1;
    out_range(iy, p.pt, p.kh, p.sh, p.dh, p.oh, &y0, &y1);
    out_range(ix, p.pl, p.kw, p.sw, p.dw, p.ow, &x0, &x1);
    float g = 0.0f;
    for (int oy = y0; oy <= y1; oy++) {
      if ((iy + p.pt - oy * p.sh) % p.dh) continue;
      for (int ox = x0; ox <= x1; ox++) {
        if ((ix + p.pl - ox * p.sw) % p.dw) continue;
        if (max_arg(p, xc, oy, ox) == self) g += dyc[(int64_t)oy * p.ow + ox];
      }
    }
    dx[i] = g;
  }
}

/* Window bounds and divisor of an average-pool output, PyTorch's way. */
__device__ __forceinline__ void avg_window(const snrt_pool_t &p, int oy, int ox, int *y0, int *y1,
                                           int *x0, int *x1, float *div) {
  int hs = oy * p.sh - p.pt, ws = ox * p.sw - p.pl;
  int he = min(hs + p.kh, p.h + p.pb), we = min(ws + p.kw, p.w + p.pr);
  int pool = (he - hs) * (we - ws);
  hs = max(hs, 0), ws = max(ws, 0);
  he = min(he, p.h), we = min(we, p.w);
  int cnt = p.count_include_pad ? pool : (he - hs) * (we - ws);
  *y0 = hs, *y1 = he, *x0 = ws, *x1 = we;
  *div = cnt > 0 ? (float)cnt : 1.0f;
}

__global__ void k_avgpool_fwd(snrt_pool_t p, const float *x, float *y) {
  int64_t n = (int64_t)p.n * p.c * p.oh * p.ow;
  SNRT_FOR(i, n) {
    int ox = (int)(i % p.ow), oy = (int)(i / p.ow % p.oh);
    const float *xc = x + i / ((int64_t)p.oh * p.ow) * p.h * p.w;
    int y0, y1, x0, x1;
    float div;
    avg_window(p, oy, ox, &y0, &y1, &x0, &x1, &div);
    float s = 0.0f;
    for (int iy = y0; iy < y1; iy++)
      for (int ix = x0; ix < x1; ix++) s += xc[(int64_t)iy * p.w + ix];
    y[i] = s / div;
  }
}

__global__ void k_avgpool_bwd(snrt_pool_t p, const float *dy, float *dx) {
  int64_t n = (int64_t)p.n * p.c * p.h * p.w;
  SNRT_FOR(i, n) {
    int ix = (int)(i % p.w), iy = (int)(i / p.w % p.h);
    const float *dyc = dy + i / ((int64_t)p.h * p.w) * p.oh * p.ow;
    int oy0, oy1, ox0, ox1;
    out_range(iy, p.pt, p.kh, p.sh, 1, p.oh, &oy0, &oy1);
    out_range(ix, p.pl, p.kw, p.sw, 1, p.ow, &ox0, &ox1);
    float g = 0.0f;
    for (int oy = oy0; oy <= oy1; oy++)
      for (int ox = ox0; ox <= ox1; ox++) {
        int y0, y1, x0, x1;
        float div;
        avg_window(p, oy, ox, &y0, &y1, &x0, &x1, &div);
        if (iy >= y0 && iy < y1 && ix >= x0 && ix < x1) g += dyc[(int64_t)oy * p.ow + ox] / div;
      }
    dx[i] = g;
  }
}

#define POOL_LAUNCH(kernel, count, ...)                                                     \
  do {                                                                                      \
    int64_t n_ = (count);                                                                   \
    if (n_ <= 0) return;                                                                    \
    kernel<<<snrt_cu_blocks(n_), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(__VA_ARGS__);        \
    SNRT_LAUNCH_CHECK();                                                                    \
  } while (0)

void snrt_maxpool_fwd(snrt_ctx *c, const snrt_pool_t *p, const float *x, float *y) {
  POOL_LAUNCH(k_maxpool_fwd, (int64_t)p->n * p->c * p->oh * p->ow, *p, x, y);
}
void snrt_maxpool_bwd(snrt_ctx *c, const snrt_pool_t *p, const float *x, const float *dy,
                      float *dx) {
  POOL_LAUNCH(k_maxpool_bwd, (int64_t)p->n * p->c * p->h * p->w, *p, x, dy, dx);
}
void snrt_avgpool_fwd(snrt_ctx *c, const snrt_pool_t *p, const float *x, float *y) {
  POOL_LAUNCH(k_avgpool_fwd, (int64_t)p->n * p->c * p->oh * p->ow, *p, x, y);
}
void snrt_avgpool_bwd(snrt_ctx *c, const snrt_pool_t *p, const float *dy, float *dx) {
  POOL_LAUNCH(k_avgpool_bwd, (int64_t)p->n * p->c * p->h * p->w, *p, dy, dx);
}

/* ---- LRN ---------------------------------------------------------------------- */

/* bias + alpha/size * (sum of x^2 over the window of channel ch). */
__device__ __forceinline__ float lrn_scale(const snrt_lrn_t &p, const float *x, int64_t img,
                                           int ch, int64_t j) {
  int lo = ch - (p.size - 1) / 2, hi = ch + p.size / 2;
  lo = max(lo, 0), hi = min(hi, p.c - 1);
  float s = 0.0f;
  for (int k = lo; k <= hi; k++) {
    float v = x[(img * p.c + k) * p.hw + j];
    s += v * v;
  }
  return p.bias + p.alpha / p.size * s;
}

__global__ void k_lrn_fwd(snrt_lrn_t p, const float *x, float *y) {
  int64_t n = (int64_t)p.n * p.c * p.hw;
  SNRT_FOR(i, n) {
    int64_t j = i % p.hw, img = i / p.hw / p.c;
    int ch = (int)(i / p.hw % p.c);
    y[i] = x[i] * powf(lrn_scale(p, x, img, ch, j), -p.beta);
  }
}

/* dx_i = dy_i s_i^-beta - 2 alpha beta / size * x_i * sum_{j reads i} dy_j y_j / s_j,
 * where channel j's window holds i iff j in [i - size/2, i + (size-1)/2]. */
__global__ void k_lrn_bwd(snrt_lrn_t p, const float *x, const float *y, const float *dy,
                          float *dx) {
  int64_t n = (int64_t)p.n * p.c * p.hw;
  SNRT_FOR(i, n) {
    int64_t j = i % p.hw, img = i / p.hw / p.c;
    int ch = (int)(i / p.hw % p.c);
    int lo = max(ch - p.size / 2, 0), hi = min(ch + (p.size - 1) / 2, p.c - 1);
    float acc = 0.0f;
    for (int k = lo; k <= hi; k++) {
      int64_t o = (img * p.c + k) * p.hw + j;
      acc += dy[o] * y[o] / lrn_scale(p, x, img, k, j);
    }
    float s = lrn_scale(p, x, img, ch, j);
    dx[i] = dy[i] * powf(s, -p.beta) - 2.0f * p.alpha * p.beta / p.size * x[i] * acc;
  }
}

void snrt_lrn_fwd(snrt_ctx *c, const snrt_lrn_t *p, const float *x, float *y) {
  POOL_LAUNCH(k_lrn_fwd, (int64_t)p->n * p->c * p->hw, *p, x, y);
}
void snrt_lrn_bwd(snrt_ctx *c, const snrt_lrn_t *p, const float *x, const float *y,
                  const float *dy, float *dx) {
  POOL_LAUNCH(k_lrn_bwd, (int64_t)p->n * p->c * p->hw, *p, x, y, dy, dx);
}
