/* layout.cu — data movement kernels: concat/split (2-D strided copies),
 * slice, pad and transpose (index-mapping kernels), forward and backward.
 *
 * What it is: each output element computed by one thread from its
 * multi-index; backward passes write every element of their output (zeros
 * where no gradient flows), so they need no separate zero-fill ordering.
 * What it is not: tuned (no shared-memory tiling for transposes). */
#include "cuda_rt.h"

/* Part i of a concat occupies columns [off_i, off_i + chunk_i) of an
 * (outer, total) row-major matrix. One row (outer == 1, e.g. a batch-1 or
 * channel-last concat): one plain copy. Otherwise one cudaMemcpy2DAsync per
 * part, unless a pitch exceeds the device's memPitch (cudaDeviceProp, about
 * 2^31 - 1 bytes), which cudaMemcpy2DAsync refuses: then one copy per row. */
static int64_t concat_total(const snrt_concat_t *p) {
  int64_t t = 0;
  for (int i = 0; i < p->parts; i++) t += p->chunk[i];
  return t;
}

/* rows x width bytes from src (pitch spitch) to dst (pitch dpitch). */
static void copy_rows(snrt_ctx *c, char *dst, int64_t dpitch, const char *src, int64_t spitch,
                      int64_t width, int64_t rows) {
  cudaStream_t s = snrt_cu_stream(c);
  if (rows == 1) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)width, cudaMemcpyDeviceToDevice, s));
    return;
  }
  int64_t lim = (int64_t)snrt_cu(c)->prop.memPitch;
  if (dpitch <= lim && spitch <= lim) {
    CUDA_CHECK(cudaMemcpy2DAsync(dst, (size_t)dpitch, src, (size_t)spitch, (size_t)width,
                                 (size_t)rows, cudaMemcpyDeviceToDevice, s));
    return;
  }
  for (int64_t r = 0; r < rows; r++)
    CUDA_CHECK(cudaMemcpyAsync(dst + r * dpitch, src + r * spitch, (size_t)width,
                               cudaMemcpyDeviceToDevice, s));
}

void snrt_concat(snrt_ctx *c, const snrt_concat_t *p, const float *const *in, float *y) {
  int64_t total = concat_total(p), off = 0;
  for (int i = 0; i < p->parts; i++) {
    int64_t ch = p->chunk[i];
    if (ch > 0 && p->outer > 0 && in[i])
      copy_rows(c, (char *)(y + off), total * 4, (const char *)in[i], ch * 4, ch * 4, p->outer);
    off += ch;
  }
}

void snrt_split(snrt_ctx *c, const snrt_concat_t *p, const float *x, float *const *out) {
  int64_t total = concat_total(p), off = 0;
  for (int i = 0; i < p->parts; i++) {
    int64_t ch = p->chunk[i];
    if (ch > 0 && p->outer > 0 && out[i])
      copy_rows(c, (char *)out[i], ch * 4, (const char *)(x + off), total * 4, ch * 4, p->outer);
    off += ch;
  }
}

/* ---- slice ------------------------------------------------------------------ */

/* Input offset of output element i of a slice. */
__device__ __forceinline__ int64_t slice_src(const snrt_slice_t &p, int64_t i) {
  int64_t o = 0, stride = 1;
  for (int d = p.rank - 1; d >= 0; d--) {
    int64_t q = i % p.out_dims[d];
    i /= p.out_dims[d];
    o += (p.start[d] + q * p.step[d]) * stride;
    stride *= p.in_dims[d];
  }
  return o;
}

__global__ void k_slice_fwd(snrt_slice_t p, const float *x, float *y) {
  SNRT_FOR(i, p.n_out) y[i] = x[slice_src(p, i)];
}

/* dx[j] = dy[i] where the slice read j at output i, else 0: per input
 * element, invert the slice per dimension. */
__global__ void k_slice_bwd(snrt_slice_t p, const float *dy, float *dx) {
  SNRT_FOR(j, p.n_in) {
    int64_t k = j, o = 0, stride = 1;
    bool hit = true;
    for (int d = p.rank - 1; d >= 0 && hit; d--) {
      int64_t q = k % p.in_dims[d];
      k /= p.in_dims[d];
      int64_t t = q - p.start[d], s = p.step[d];
      if (s == 0 || t % s != 0) { hit = false; break; }
      int64_t idx = t / s;
      if (idx < 0 || idx >= p.out_dims[d]) { hit = false; break; }
      o += idx * stride;
      stride *= p.out_dims[d];
    }
    dx[j] = hit ? dy[o] : 0.0f;
  }
}

void snrt_slice_fwd(snrt_ctx *c, const snrt_slice_t *p, const float *x, float *y) {
  if (p->n_out <= 0) return;
  k_slice_fwd<<<snrt_cu_blocks(p->n_out), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, x, y);
  SNRT_LAUNCH_CHECK();
}

void snrt_slice_bwd(snrt_ctx *c, const snrt_slice_t *p, const float *dy, float *dx) {
  if (p->n_in <= 0) return;
  k_slice_bwd<<<snrt_cu_blocks(p->n_in), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, dy, dx);
  SNRT_LAUNCH_CHECK();
}

/* ---- pad ---------------------------------------------------------------------- */

__global__ void k_pad_fwd(snrt_pad_t p, const float *x, float *y) {
  SNRT_FOR(i, p.n_out) {
    int64_t k = i, o = 0, stride = 1;
    bool in = true;
    for (int d = p.rank - 1; d >= 0; d--) {
      int64_t q = k % p.out_dims[d] - p.before[d];
      k /= p.out_dims[d];
      if (q < 0 || q >= p.in_dims[d]) in = false;
      o += q * stride;
      stride *= p.in_dims[d];
    }
    y[i] = in ? x[o] : p.value;
  }
}

/* dx = dy cropped; input elements that a negative pad cropped get 0. */
__global__ void k_pad_bwd(snrt_pad_t p, const float *dy, float *dx) {
  SNRT_FOR(j, p.n_in) {
    int64_t k = j, o = 0, stride = 1;
    bool in = true;
    for (int d = p.rank - 1; d >= 0; d--) {
      int64_t q = k % p.in_dims[d] + p.before[d];
      k /= p.in_dims[d];
      if (q < 0 || q >= p.out_dims[d]) in = false;
      o += q * stride;
      stride *= p.out_dims[d];
    }
    dx[j] = in ? dy[o] : 0.0f;
  }
}

/* Reflect / edge (snrt.h's shared index helpers; the gradient gathers, in
 * output order: deterministic). */
__global__ void k_pad_mode_fwd(snrt_pad_t p, const float *x, float *y) {
  SNRT_FOR(i, p.n_out) {
    int64_t k = i, o = 0, stride = 1;
    for (int d = p.rank - 1; d >= 0; d--) {
      o += snrt_pad_src1(p.mode, k % p.out_dims[d], p.before[d], p.in_dims[d]) * stride;
      k /= p.out_dims[d];
      stride *= p.in_dims[d];
    }
    y[i] = x[o];
  }
}

__global__ void k_pad_mode_bwd(snrt_pad_t p, const float *dy, float *dx) {
  SNRT_FOR(j, p.n_in) dx[j] = snrt_pad_grad_at(&p, j, dy);
}

void snrt_pad_fwd(snrt_ctx *c, const snrt_pad_t *p, const float *x, float *y) {
  if (p->n_out <= 0) return;
  if (p->mode != SNRT_PAD_CONSTANT)
    k_pad_mode_fwd<<<snrt_cu_blocks(p->n_out), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, x, y);
  else
    k_pad_fwd<<<snrt_cu_blocks(p->n_out), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, x, y);
  SNRT_LAUNCH_CHECK();
}

void snrt_pad_bwd(snrt_ctx *c, const snrt_pad_t *p, const float *dy, float *dx) {
  if (p->n_in <= 0) return;
  if (p->mode != SNRT_PAD_CONSTANT)
    k_pad_mode_bwd<<<snrt_cu_blocks(p->n_in), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, dy, dx);
  else
    k_pad_bwd<<<snrt_cu_blocks(p->n_in), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, dy, dx);
  SNRT_LAUNCH_CHECK();
}

/* ---- transpose ------------------------------------------------------------------ */

typedef struct tr_t {
  int rank;
  int64_t n;
  int64_t out_dims[SNRT_MAX_RANK];
  int64_t src_stride[SNRT_MAX_RANK];  /* input stride of output dim d */
} tr_t;

__global__ void k_transpose(tr_t t, const float *x, float *y) {
  SNRT_FOR(i, t.n) {
    int64_t k = i, o = 0;
    for (int d = t.rank - 1; d >= 0; d--) {
      o += (k % t.out_dims[d]) * t.src_stride[d];
      k /= t.out_dims[d];
    }
    y[i] = x[o];
  }
}

void snrt_transpose(snrt_ctx *c, const snrt_transpose_t *p, const float *x, float *y) {
  if (p->n <= 0) return;
  tr_t t;
  int64_t in_stride[SNRT_MAX_RANK], s = 1;
  for (int d = p->rank - 1; d >= 0; d--) in_stride[d] = s, s *= p->in_dims[d];
  t.rank = p->rank;
  t.n = p->n;
  for (int d = 0; d < p->rank; d++) {
    t.out_dims[d] = p->in_dims[p->perm[d]];
    t.src_stride[d] = in_stride[p->perm[d]];
  }
  k_transpose<<<snrt_cu_blocks(p->n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(t, x, y);
  SNRT_LAUNCH_CHECK();
}
