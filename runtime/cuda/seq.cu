/* seq.cu — CUDA kernels of the transformer ops (snrt.h): elementwise math
 * (Sqrt, Erf, Neg, Reciprocal, Pow), LayerNormalization, the embedding
 * lookup and its scatter-add gradient, the masked fill.
 *
 * Deterministic like the rest of the runtime: no float atomics. A LayerNorm
 * row is one block (fixed-order block sums); dscale/dbias and the embedding
 * gradient give each output column to one thread, which adds in row (index)
 * order. The embedding gradient is therefore serial over the indices per
 * column: exact and reproducible, not fast for long batches.
 *
 * Constant index and mask arrays (snrt_gather_t.idx, snrt_where_t.fill) are
 * static arrays of the emitted train.c, in host memory: the first call copies
 * each to the device once (the warm-up step runs eagerly before any graph
 * capture) and later calls, captured ones included, reuse the copy. */
#include "cuda_rt.h"

/* ---- constant arrays on the device ------------------------------------------ */

#define SEQ_MAX_CONSTS 4096
static struct { const void *host; void *dev; } seq_consts[SEQ_MAX_CONSTS];
static int seq_nconsts;

static const void *seq_device_copy(snrt_ctx *c, const void *host, size_t bytes) {
  for (int i = 0; i < seq_nconsts; i++)
    if (seq_consts[i].host == host) return seq_consts[i].dev;
  if (snrt_cu(c)->capturing)
    snrt_cu_fail("seq_device_copy", "a constant array was first used inside a graph capture",
                 __FILE__, __LINE__);
  if (seq_nconsts == SEQ_MAX_CONSTS)
    snrt_cu_fail("seq_device_copy", "too many constant index/mask arrays", __FILE__, __LINE__);
  void *d;
  CUDA_CHECK(cudaMalloc(&d, bytes ? bytes : 1));
  CUDA_CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
  seq_consts[seq_nconsts].host = host;
  seq_consts[seq_nconsts++].dev = d;
  return d;
}

const void *snrt_cu_const(snrt_ctx *c, const void *host, size_t bytes) {
  return seq_device_copy(c, host, bytes);
}

/* ---- math --------------------------------------------------------------------- */

__global__ void k_math_fwd(snrt_math_t p, const float *x, float *y) {
  SNRT_FOR(i, p.n) {
    float v = x[i];
    switch (p.kind) {
    case SNRT_SQRT: v = sqrtf(v); break;
    case SNRT_ERF: v = erff(v); break;
    case SNRT_NEG: v = -v; break;
    case SNRT_RECIPROCAL: v = 1.0f / v; break;
    case SNRT_POW: v = snrt_cu_pow(v, p.exponent); break;
    default: v = snrt_math_more(&p, v); break;
    }
    y[i] = v;
  }
}

__global__ void k_math_bwd(snrt_math_t p, const float *x, const float *y, const float *dy,
                           float *dx) {
  SNRT_FOR(i, p.n) {
    float g = dy[i], r = 0.0f;
    switch (p.kind) {
    case SNRT_SQRT: r = g / (2.0f * y[i]); break;
    case SNRT_ERF: r = g * 1.12837916709551257f * expf(-x[i] * x[i]); break;
    case SNRT_NEG: r = -g; break;
    case SNRT_RECIPROCAL: r = -g * y[i] * y[i]; break;
    case SNRT_POW:
      r = p.exponent == 2.0f ? g * 2.0f * x[i] : g * p.exponent * snrt_cu_pow(x[i], p.exponent - 1.0f);
      break;
    default: r = g * snrt_math_more_d(&p, x ? x[i] : 0.0f, y ? y[i] : 0.0f); break;
    }
    dx[i] = r;
  }
}

void snrt_math_fwd(snrt_ctx *c, const snrt_math_t *p, const float *x, float *y) {
  if (p->n <= 0) return;
  k_math_fwd<<<snrt_cu_blocks(p->n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, x, y);
  SNRT_LAUNCH_CHECK();
}

void snrt_math_bwd(snrt_ctx *c, const snrt_math_t *p, const float *x, const float *y,
                   const float *dy, float *dx) {
  if (p->n <= 0) return;
  k_math_bwd<<<snrt_cu_blocks(p->n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, x, y, dy, dx);
  SNRT_LAUNCH_CHECK();
}

/* ---- LayerNormalization ----------------------------------------------------------- */

#define LN_THREADS 256

/* One element of y, as the forward writes it and a carried rebuild again. */
__device__ __forceinline__ float ln_y(float x, float m, float rs, float s, const float *bias, int64_t j) {
  float v = (x - m) * rs * s;
  return bias ? v + bias[j] : v;
}

__global__ void k_ln_fwd(snrt_ln_t p, const float *x, const float *scale, const float *bias,
                         float *y, float *mean, float *rstd) {
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const float *xr = x + r * p.cols;
    float *yr = y + r * p.cols;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < p.cols; j += blockDim.x) s += xr[j];
    float m = snrt_block_sum(s) / (float)p.cols;
    float q = 0.0f;
    for (int64_t j = threadIdx.x; j < p.cols; j += blockDim.x) q += (xr[j] - m) * (xr[j] - m);
    float rs = rsqrtf(snrt_block_sum(q) / (float)p.cols + p.eps);
    for (int64_t j = threadIdx.x; j < p.cols; j += blockDim.x) yr[j] = ln_y(xr[j], m, rs, scale[j], bias, j);
    if (threadIdx.x == 0) {
      if (mean) mean[r] = m;
      if (rstd) rstd[r] = rs;
    }
  }
}

/* y, bias: a carried rebuild's y, written from x before dx (which may be
 * written over dy, never over x); else NULL. */
__global__ void k_ln_bwd_dx(snrt_ln_t p, const float *x, const float *dy, const float *scale,
                            const float *mean, const float *rstd, float *dx, const float *bias,
                            float *y) {
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const float *xr = x + r * p.cols, *dr = dy + r * p.cols;
    float m = mean[r], rs = rstd[r], sg = 0.0f, sgx = 0.0f;
    if (y)
      for (int64_t j = threadIdx.x; j < p.cols; j += blockDim.x) y[r * p.cols + j] = ln_y(xr[j], m, rs, scale[j], bias, j);
    if (!dx) continue;   /* the same for every thread of the block */
    for (int64_t j = threadIdx.x; j < p.cols; j += blockDim.x) {
      float g = dr[j] * scale[j];
      sg += g;
      sgx += g * ((xr[j] - m) * rs);
    }
    float a = snrt_block_sum(sg) / (float)p.cols, b = snrt_block_sum(sgx) / (float)p.cols;
    for (int64_t j = threadIdx.x; j < p.cols; j += blockDim.x)
      dx[r * p.cols + j] = rs * (dr[j] * scale[j] - a - ((xr[j] - m) * rs) * b);
  }
}

__global__ void k_ln_bwd_params(snrt_ln_t p, const float *x, const float *dy, const float *mean,
                                const float *rstd, float *dscale, float *dbias) {
  SNRT_FOR(j, p.cols) {
    float as = 0.0f, ab = 0.0f;
    for (int64_t r = 0; r < p.rows; r++) {
      float d = dy[r * p.cols + j];
      as += d * ((x[r * p.cols + j] - mean[r]) * rstd[r]);
      ab += d;
    }
    if (dscale) dscale[j] = as;
    if (dbias) dbias[j] = ab;
  }
}

static unsigned ln_blocks(int64_t rows) { return (unsigned)(rows < 65536 ? (rows > 0 ? rows : 1) : 65536); }

void snrt_ln_fwd(snrt_ctx *c, const snrt_ln_t *p, const float *x, const float *scale,
                 const float *bias, float *y, float *mean, float *rstd) {
  if (p->rows <= 0) return;
  k_ln_fwd<<<ln_blocks(p->rows), LN_THREADS, 0, snrt_cu_stream(c)>>>(*p, x, scale, bias, y, mean, rstd);
  SNRT_LAUNCH_CHECK();
}

static void ln_bwd(snrt_ctx *c, const snrt_ln_t *p, const float *x, const float *dy,
                   const float *scale, const float *bias, const float *mean, const float *rstd,
                   float *dx, float *dscale, float *dbias, float *y) {
  if (p->rows <= 0) return;
  /* Parameter gradients first, as on the CPU. */
  if (dscale || dbias) {
    k_ln_bwd_params<<<snrt_cu_blocks(p->cols), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, x, dy, mean,
                                                                                 rstd, dscale, dbias);
    SNRT_LAUNCH_CHECK();
  }
  if (dx || y) {
    k_ln_bwd_dx<<<ln_blocks(p->rows), LN_THREADS, 0, snrt_cu_stream(c)>>>(*p, x, dy, scale, mean, rstd, dx,
                                                                         bias, y);
    SNRT_LAUNCH_CHECK();
  }
}

void snrt_ln_bwd(snrt_ctx *c, const snrt_ln_t *p, const float *x, const float *dy,
                 const float *scale, const float *mean, const float *rstd, float *dx,
                 float *dscale, float *dbias) {
  ln_bwd(c, p, x, dy, scale, NULL, mean, rstd, dx, dscale, dbias, NULL);
}

void snrt_ln_bwd_y(snrt_ctx *c, const snrt_ln_t *p, const float *x, const float *dy,
                   const float *scale, const float *bias, const float *mean, const float *rstd,
                   float *dx, float *dscale, float *dbias, float *y) {
  ln_bwd(c, p, x, dy, scale, bias, mean, rstd, dx, dscale, dbias, y);
}

/* ---- embedding --------------------------------------------------------------------- */

__global__ void k_gather_fwd(snrt_gather_t p, const float *table, const int32_t *idx, float *y) {
  int64_t outer = p.outer > 1 ? p.outer : 1;
  SNRT_FOR(e, outer * p.n_idx * p.dim) {
    int64_t r = e / p.dim, j = e % p.dim, o = r / p.n_idx, k = idx[r % p.n_idx];
    y[e] = k >= 0 && k < p.rows ? table[(o * p.rows + k) * p.dim + j] : __int_as_float(0x7fc00000);
  }
}

__global__ void k_gather_bwd(snrt_gather_t p, const int32_t *idx, const float *dy, float *dtable) {
  int64_t outer = p.outer > 1 ? p.outer : 1;
  SNRT_FOR(oj, outer * p.dim) {
    int64_t o = oj / p.dim, j = oj % p.dim;
    for (int64_t i = 0; i < p.n_idx; i++) {
      int64_t k = idx[i];
      if (k >= 0 && k < p.rows) dtable[(o * p.rows + k) * p.dim + j] += dy[(o * p.n_idx + i) * p.dim + j];
    }
  }
}

static const int32_t *gather_idx(snrt_ctx *c, const snrt_gather_t *p, const int32_t *idx) {
  return idx ? idx : (const int32_t *)seq_device_copy(c, p->idx, sizeof(int32_t) * (size_t)p->n_idx);
}

void snrt_gather_fwd(snrt_ctx *c, const snrt_gather_t *p, const float *table, const int32_t *idx,
                     float *y) {
  int64_t outer = p->outer > 1 ? p->outer : 1;
  if (outer * p->n_idx * p->dim <= 0) return;
  const int32_t *ix = gather_idx(c, p, idx);
  k_gather_fwd<<<snrt_cu_blocks(outer * p->n_idx * p->dim), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(
      *p, table, ix, y);
  SNRT_LAUNCH_CHECK();
}

void snrt_gather_bwd(snrt_ctx *c, const snrt_gather_t *p, const int32_t *idx, const float *dy,
                     float *dtable) {
  int64_t outer = p->outer > 1 ? p->outer : 1;
  snrt_cu_fill(c, dtable, outer * p->rows * p->dim, 0.0f);
  if (outer * p->n_idx * p->dim <= 0) return;
  const int32_t *ix = gather_idx(c, p, idx);
  k_gather_bwd<<<snrt_cu_blocks(outer * p->dim), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, ix, dy,
                                                                                       dtable);
  SNRT_LAUNCH_CHECK();
}

/* ---- where on data ---------------------------------------------------------------- */

__global__ void k_where3_fwd(snrt_where3_t p, const uint8_t *cond, const float *a, const float *b,
                             float *y) {
  SNRT_FOR(i, p.n) {
    int64_t oc, oa, ob;
    snrt_where3_at(&p, i, &oc, &oa, &ob);
    y[i] = cond[oc] ? a[oa] : b[ob];
  }
}

__global__ void k_where3_bwd(snrt_where3_t p, int which, int64_t cnt, const uint8_t *cond,
                             const float *dy, float *out) {
  SNRT_FOR(e, cnt) out[e] = snrt_where3_grad_at(&p, which, e, cond, dy);
}

void snrt_where3_fwd(snrt_ctx *c, const snrt_where3_t *p, const uint8_t *cond, const float *a,
                     const float *b, float *y) {
  if (p->n <= 0) return;
  k_where3_fwd<<<snrt_cu_blocks(p->n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, cond, a, b, y);
  SNRT_LAUNCH_CHECK();
}

void snrt_where3_bwd(snrt_ctx *c, const snrt_where3_t *p, const uint8_t *cond, const float *dy,
                     float *da, float *db) {
  if (da && p->na > 0) {
    k_where3_bwd<<<snrt_cu_blocks(p->na), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, 0, p->na, cond, dy, da);
    SNRT_LAUNCH_CHECK();
  }
  if (db && p->nb > 0) {
    k_where3_bwd<<<snrt_cu_blocks(p->nb), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, 1, p->nb, cond, dy, db);
    SNRT_LAUNCH_CHECK();
  }
}

/* ---- take (GatherElements) ------------------------------------------------------ */

__global__ void k_take_fwd(snrt_take_t p, const int32_t *src, const float *x, float *y) {
  SNRT_FOR(i, p.n_out) y[i] = x[src[i]];
}

__global__ void k_take_bwd(snrt_take_t p, const int32_t *start, const int32_t *inv, const float *dy,
                           float *dx) {
  SNRT_FOR(j, p.n_in) {
    float s = 0.0f;
    for (int32_t k = start[j]; k < start[j + 1]; k++) s += dy[inv[k]];
    dx[j] = s;
  }
}

void snrt_take_fwd(snrt_ctx *c, const snrt_take_t *p, const float *x, float *y) {
  if (p->n_out <= 0) return;
  const int32_t *src = (const int32_t *)seq_device_copy(c, p->src, sizeof(int32_t) * (size_t)p->n_out);
  k_take_fwd<<<snrt_cu_blocks(p->n_out), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, src, x, y);
  SNRT_LAUNCH_CHECK();
}

void snrt_take_bwd(snrt_ctx *c, const snrt_take_t *p, const float *dy, float *dx) {
  if (p->n_in <= 0) return;
  const int32_t *start = (const int32_t *)seq_device_copy(c, p->inv_start,
                                                          sizeof(int32_t) * (size_t)(p->n_in + 1));
  const int32_t *inv = (const int32_t *)seq_device_copy(c, p->inv, sizeof(int32_t) * (size_t)p->n_out);
  k_take_bwd<<<snrt_cu_blocks(p->n_in), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, start, inv, dy, dx);
  SNRT_LAUNCH_CHECK();
}

/* ---- einsum ----------------------------------------------------------------------- */

__global__ void k_einsum(snrt_einsum_t p, const float *a, const float *b, float *y) {
  SNRT_FOR(e, p.n_out) {
    int64_t oa = 0, ob = 0, r = e;
    for (int d = p.nout - 1; d >= 0; d--) {
      int64_t i = r % p.dims[d];
      r /= p.dims[d];
      oa += i * p.sa[d];
      ob += i * p.sb[d];
    }
    double acc = 0;
    for (int64_t k = 0; k < p.n_sum; k++) {
      int64_t qa = oa, qb = ob, q = k;
      for (int d = p.rank - 1; d >= p.nout; d--) {
        int64_t i = q % p.dims[d];
        q /= p.dims[d];
        qa += i * p.sa[d];
        qb += i * p.sb[d];
      }
      acc += (double)a[qa] * b[qb];
    }
    y[e] = (float)acc;
  }
}

void snrt_einsum(snrt_ctx *c, const snrt_einsum_t *p, const float *a, const float *b, float *y) {
  if (p->n_out <= 0) return;
  k_einsum<<<snrt_cu_blocks(p->n_out), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, a, b, y);
  SNRT_LAUNCH_CHECK();
}

/* ---- masked fill --------------------------------------------------------------------- */

__global__ void k_where(snrt_where_t p, const uint8_t *fill, const float *x, float *y) {
  SNRT_FOR(i, p.n) y[i] = fill[i % p.inner] ? p.value : x[i];
}

void snrt_where(snrt_ctx *c, const snrt_where_t *p, const float *x, float *y) {
  if (p->n <= 0) return;
  const uint8_t *fill = (const uint8_t *)seq_device_copy(c, p->fill, (size_t)p->inner);
  k_where<<<snrt_cu_blocks(p->n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, fill, x, y);
  SNRT_LAUNCH_CHECK();
}
