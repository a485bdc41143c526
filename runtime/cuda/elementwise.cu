/* elementwise.cu — CUDA kernels for elementwise and broadcast ops of snrt.h:
 * fill/copy/add, activations, broadcasting binary ops and their backward
 * reductions, reduce/expand, bias, dropout.
 *
 * What it is: straightforward grid-stride kernels on the compute stream.
 * What it is not: tuned (no vectorized loads); the heavy work of a step is in
 * cuDNN and cuBLAS.
 *
 * Reductions (gradients of broadcast operands, ReduceSum/Mean, bias
 * gradients) never use float atomics: each output element is summed by one
 * thread or one block in a fixed order, so results are deterministic. */
#include "cuda_rt.h"

#include <string.h>

/* ---- fill, copy, add ---------------------------------------------------- */

__global__ void k_fill(float *y, int64_t n, float v) {
  SNRT_FOR(i, n) y[i] = v;
}

void snrt_cu_fill(snrt_ctx *c, float *y, int64_t n, float v) {
  if (n <= 0) return;
  k_fill<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(y, n, v);
  SNRT_LAUNCH_CHECK();
}

void snrt_fill(snrt_ctx *c, int64_t n, float value, float *y) { snrt_cu_fill(c, y, n, value); }

void snrt_copy(snrt_ctx *c, int64_t bytes, const void *src, void *dst) {
  if (bytes <= 0 || src == dst) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToDevice,
                             snrt_cu_stream(c)));
}

__global__ void k_add(int64_t n, const float *a, const float *b, float *y) {
  SNRT_FOR(i, n) y[i] = a[i] + b[i];
}

void snrt_add(snrt_ctx *c, int64_t n, const float *a, const float *b, float *y) {
  if (n <= 0) return;
  k_add<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(n, a, b, y);
  SNRT_LAUNCH_CHECK();
}

/* ---- activations --------------------------------------------------------- */

__global__ void k_unary_fwd(snrt_unary_t p, const float *x, float *y) {
  SNRT_FOR(i, p.n) {
    float v = x[i];
    switch (p.kind) {
    case SNRT_RELU: v = v > 0.0f ? v : 0.0f; break;
    case SNRT_LEAKY_RELU: v = v > 0.0f ? v : p.alpha * v; break;
    case SNRT_SIGMOID: v = 1.0f / (1.0f + expf(-v)); break;
    case SNRT_TANH: v = tanhf(v); break;
    /* torch.clamp's forward, as the CPU's: NaN passes through (fminf/fmaxf
     * would turn it into a bound and hide a diverging model). */
    case SNRT_CLIP: v = v < p.lo ? p.lo : (v > p.hi ? p.hi : v); break;
    }
    y[i] = v;
  }
}

/* Gradients as PyTorch defines them: relu/leaky pass where x > 0; Clip
 * passes where lo < x < hi, strictly, as ReLU6/Hardtanh (both targets; see
 * the README's "Clip's gradient": torch.clamp's own gradient also passes at
 * x == lo and x == hi). Where only y is given, the same tests on y give the
 * same answer (y > 0 iff x > 0 for alpha >= 0; lo < y < hi iff lo < x < hi). */
__global__ void k_unary_bwd(snrt_unary_t p, const float *x, const float *y, const float *dy,
                            float *dx) {
  SNRT_FOR(i, p.n) {
    float g = dy[i], d;
    switch (p.kind) {
    case SNRT_RELU: d = (x ? x[i] : y[i]) > 0.0f ? g : 0.0f; break;
    case SNRT_LEAKY_RELU: d = (x ? x[i] : y[i]) > 0.0f ? g : p.alpha * g; break;
    case SNRT_SIGMOID: {
      float s = y ? y[i] : 1.0f / (1.0f + expf(-x[i]));
      d = g * s * (1.0f - s);
      break;
    }
    case SNRT_TANH: {
      float t = y ? y[i] : tanhf(x[i]);
      d = g * (1.0f - t * t);
      break;
    }
    case SNRT_CLIP: {
      float v = x ? x[i] : y[i];
      d = (v > p.lo && v < p.hi) ? g : 0.0f;
      break;
    }
    default: d = g;
    }
    dx[i] = d;
  }
}

void snrt_unary_fwd(snrt_ctx *c, const snrt_unary_t *p, const float *x, float *y) {
  if (p->n <= 0) return;
  k_unary_fwd<<<snrt_cu_blocks(p->n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, x, y);
  SNRT_LAUNCH_CHECK();
}

void snrt_unary_bwd(snrt_ctx *c, const snrt_unary_t *p, const float *x, const float *y,
                    const float *dy, float *dx) {
  if (p->n <= 0) return;
  k_unary_bwd<<<snrt_cu_blocks(p->n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, x, y, dy, dx);
  SNRT_LAUNCH_CHECK();
}

/* ---- broadcast reduction machinery --------------------------------------- */

/* Sum a "big" contiguous index space into a "small" tensor: the big dims are
 * split into kept dims (the small tensor has them) and reduced dims (it
 * broadcasts there). kd/kb/ks: kept dims, their big strides, their small
 * strides; rd/rb: reduced dims and big strides. */
typedef struct red_t {
  int nk, nr;
  int64_t kd[SNRT_MAX_RANK], kb[SNRT_MAX_RANK], ks[SNRT_MAX_RANK];
  int64_t rd[SNRT_MAX_RANK], rb[SNRT_MAX_RANK];
  int64_t nsmall, count;     /* kept elements; big elements per kept element */
} red_t;

static red_t make_red(int rank, const int64_t *dims, const int64_t *ss) {
  red_t r;
  memset(&r, 0, sizeof r);
  int64_t bs[SNRT_MAX_RANK], s = 1;
  for (int d = rank - 1; d >= 0; d--) bs[d] = s, s *= dims[d];
  r.nsmall = r.count = 1;
  for (int d = 0; d < rank; d++) {
    if (dims[d] == 1) continue;
    if (ss[d] == 0) {
      r.rd[r.nr] = dims[d], r.rb[r.nr] = bs[d], r.nr++;
      r.count *= dims[d];
    } else {
      r.kd[r.nk] = dims[d], r.kb[r.nk] = bs[d], r.ks[r.nk] = ss[d], r.nk++;
      r.nsmall *= dims[d];
    }
  }
  return r;
}

/* Big offset and small offset of kept element j. */
__device__ __forceinline__ void red_kept(const red_t &r, int64_t j, int64_t *big, int64_t *small) {
  int64_t b = 0, s = 0;
  for (int d = r.nk - 1; d >= 0; d--) {
    int64_t q = j % r.kd[d];
    j /= r.kd[d];
    b += q * r.kb[d];
    s += q * r.ks[d];
  }
  *big = b;
  *small = s;
}

__device__ __forceinline__ int64_t red_reduced(const red_t &r, int64_t k) {
  int64_t b = 0;
  for (int d = r.nr - 1; d >= 0; d--) {
    b += (k % r.rd[d]) * r.rb[d];
    k /= r.rd[d];
  }
  return b;
}

/* Few big elements per output: one thread per output. */
template <class F>
__global__ void k_red_thread(red_t r, F f, float *out) {
  SNRT_FOR(j, r.nsmall) {
    int64_t base, so;
    red_kept(r, j, &base, &so);
    float s = 0.0f;
    for (int64_t k = 0; k < r.count; k++) s += f(base + red_reduced(r, k));
    out[so] = s;
  }
}

/* Many: one block per output, a fixed-order block sum. */
template <class F>
__global__ void k_red_block(red_t r, F f, float *out) {
  for (int64_t j = blockIdx.x; j < r.nsmall; j += gridDim.x) {
    int64_t base, so;
    red_kept(r, j, &base, &so);
    float s = 0.0f;
    for (int64_t k = threadIdx.x; k < r.count; k += blockDim.x) s += f(base + red_reduced(r, k));
    s = snrt_block_sum(s);
    if (threadIdx.x == 0) out[so] = s;
  }
}

/* Nothing reduced and the same layout (a gradient of an operand as large as
 * the output): out[j] = f(j), no index arithmetic. */
template <class F>
__global__ void k_red_ident(int64_t n, F f, float *out) {
  SNRT_FOR(j, n) out[j] = f(j);
}

static bool red_is_ident(const red_t &r) {
  if (r.nr != 0) return false;
  for (int d = 0; d < r.nk; d++)
    if (r.kb[d] != r.ks[d]) return false;
  return true;
}

/* The kept elements the innermost block of the big index space and the
 * reduced ones the rows around it (a bias's gradient: [rows, cols] summed
 * into [cols]): big index = row * cols + j. */
static bool red_is_cols(const red_t &r) {
  if (r.nk == 0 || r.nr == 0) return false;
  int64_t s = 1;
  for (int d = r.nk - 1; d >= 0; d--) {
    if (r.kb[d] != s || r.ks[d] != s) return false;
    s *= r.kd[d];
  }
  for (int d = r.nr - 1; d >= 0; d--) {
    if (r.rb[d] != s) return false;
    s *= r.rd[d];
  }
  return true;
}

/* 32 columns a block, 16 row lanes: lane y sums rows y, y + 16, ... of its
 * column (coalesced: a warp reads 32 adjacent floats), then lane 0 adds the
 * 16 in order. Deterministic. (A block per column read each row 4 KiB
 * apart, with 64-bit index arithmetic per element.) */
#define COL_LANES 16
template <class F>
__global__ void k_red_cols(int64_t cols, int64_t rows, F f, float *out) {
  __shared__ float part[COL_LANES][33];
  int64_t j = (int64_t)blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (j < cols)
    for (int64_t r = threadIdx.y; r < rows; r += COL_LANES) s += f(r * cols + j);
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    float t = 0.0f;
    for (int k = 0; k < COL_LANES; k++) t += part[k][threadIdx.x];
    out[j] = t;
  }
}

template <class F>
static void launch_red(snrt_ctx *c, const red_t &r, F f, float *out) {
  if (r.nsmall <= 0) return;
  if (red_is_ident(r)) {
    k_red_ident<<<snrt_cu_blocks(r.nsmall), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(r.nsmall, f, out);
  } else if (r.count >= 16 && red_is_cols(r)) {
    k_red_cols<<<(unsigned)((r.nsmall + 31) / 32), dim3(32, COL_LANES), 0, snrt_cu_stream(c)>>>(
        r.nsmall, r.count, f, out);
  } else if (r.count < 128) {
    k_red_thread<<<snrt_cu_blocks(r.nsmall), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(r, f, out);
  } else {
    unsigned blocks = r.nsmall > 65536 ? 65536 : (unsigned)r.nsmall;
    k_red_block<<<blocks, SNRT_THREADS, 0, snrt_cu_stream(c)>>>(r, f, out);
  }
  SNRT_LAUNCH_CHECK();
}

/* ---- broadcasting binary ops --------------------------------------------- */

/* How an operand is read at output index i: at i (as large as the output),
 * at 0 (a scalar), at i mod its size (broadcast over leading dimensions
 * only: a bias over [..., C]), or through the strides. The first three need
 * no 64-bit division per dimension (the second H200 run: 1.7-3.5 ms for a
 * GPT's or resnet50's elementwise Mul/Add backward, 10x what its bytes take). */
enum { BO_FULL, BO_SCALAR, BO_INNER, BO_STRIDED };

static int bin_mode(const snrt_binary_t *p, const int64_t *st, int64_t nx) {
  if (nx == p->n) return BO_FULL;
  if (nx == 1) return BO_SCALAR;
  int64_t c = 1;
  int d = p->rank - 1;
  for (; d >= 0 && c < nx; d--) {
    if (p->dims[d] == 1) continue;
    if (st[d] != c) return BO_STRIDED;
    c *= p->dims[d];
  }
  if (c != nx) return BO_STRIDED;
  for (; d >= 0; d--)
    if (p->dims[d] != 1 && st[d] != 0) return BO_STRIDED;
  return BO_INNER;
}

__device__ __forceinline__ int64_t bin_off1(int mode, int64_t i, int64_t nx) {
  if (mode == BO_FULL) return i;
  if (mode == BO_SCALAR) return 0;
  return snrt_mod(i, nx);
}

__device__ __forceinline__ void bin_offsets(const snrt_binary_t &p, int ma, int mb, int64_t i,
                                            int64_t *oa, int64_t *ob) {
  if (ma != BO_STRIDED && mb != BO_STRIDED) {
    *oa = bin_off1(ma, i, p.na);
    *ob = bin_off1(mb, i, p.nb);
    return;
  }
  int64_t a = 0, b = 0;
  for (int d = p.rank - 1; d >= 0; d--) {
    int64_t q = i % p.dims[d];
    i /= p.dims[d];
    a += q * p.sa[d];
    b += q * p.sb[d];
  }
  *oa = a;
  *ob = b;
}

__device__ __forceinline__ float bin_op(int kind, float a, float b) {
  switch (kind) {
  case SNRT_ADD: return a + b;
  case SNRT_SUB: return a - b;
  case SNRT_MUL: return a * b;
  case SNRT_MIN: return a < b || a != a ? a : b;
  case SNRT_MAX: return a > b || a != a ? a : b;
  default: return a / b;
  }
}

__global__ void k_binary_same(snrt_binary_t p, const float *a, const float *b, float *y) {
  SNRT_FOR(i, p.n) y[i] = bin_op(p.kind, a[i], b[i]);
}

__global__ void k_binary_bcast(snrt_binary_t p, int ma, int mb, const float *a, const float *b,
                               float *y) {
  SNRT_FOR(i, p.n) {
    int64_t oa, ob;
    bin_offsets(p, ma, mb, i, &oa, &ob);
    y[i] = bin_op(p.kind, a[oa], b[ob]);
  }
}

void snrt_binary_fwd(snrt_ctx *c, const snrt_binary_t *p, const float *a, const float *b,
                     float *y) {
  if (p->n <= 0) return;
  if (p->na == p->n && p->nb == p->n)
    k_binary_same<<<snrt_cu_blocks(p->n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, a, b, y);
  else
    k_binary_bcast<<<snrt_cu_blocks(p->n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(
        *p, bin_mode(p, p->sa, p->na), bin_mode(p, p->sb, p->nb), a, b, y);
  SNRT_LAUNCH_CHECK();
}

/* d(a OP b)/da * dy (which = 0) or d/db * dy (which = 1) at output index i. */
struct BinGrad {
  snrt_binary_t p;
  const float *a, *b, *dy;
  int which;
  int ma, mb;                /* bin_mode of a and of b */
  __device__ float operator()(int64_t i) const {
    float g = dy[i];
    if (p.kind == SNRT_ADD) return g;   /* no operand read: no offsets */
    if (p.kind == SNRT_SUB) return which ? -g : g;
    int64_t oa, ob;
    bin_offsets(p, ma, mb, i, &oa, &ob);
    switch (p.kind) {
    case SNRT_MUL: return which ? g * a[oa] : g * b[ob];
    case SNRT_MIN: case SNRT_MAX: {
      float mine = which ? b[ob] : a[oa], other = which ? a[oa] : b[ob];
      if (mine == other) return 0.5f * g;
      return (p.kind == SNRT_MAX) == (mine > other) ? g : 0.0f;
    }
    default: {
      float bv = b[ob];
      return which ? -g * a[oa] / (bv * bv) : g / bv;
    }
    }
  }
};

void snrt_binary_bwd(snrt_ctx *c, const snrt_binary_t *p, const float *a, const float *b,
                     const float *dy, float *da, float *db) {
  if (p->n <= 0) return;
  if (da) {
    BinGrad f = {*p, a, b, dy, 0, bin_mode(p, p->sa, p->na), bin_mode(p, p->sb, p->nb)};
    launch_red(c, make_red(p->rank, p->dims, p->sa), f, da);
  }
  if (db) {
    BinGrad f = {*p, a, b, dy, 1, bin_mode(p, p->sa, p->na), bin_mode(p, p->sb, p->nb)};
    launch_red(c, make_red(p->rank, p->dims, p->sb), f, db);
  }
}

/* ---- reduce / expand ------------------------------------------------------ */

struct ScaledRead {
  const float *x;
  float scale;
  __device__ float operator()(int64_t i) const { return x[i] * scale; }
};

/* ReduceMax / ReduceL2 (forward: out = small; backward: out = dx), one
 * thread per small element visiting its big elements in index order. */
__global__ void k_reduce_groups(red_t r, int kind, const float *x, const float *y,
                                const float *dy, float *out, int bwd) {
  SNRT_FOR(j, r.nsmall) {
    int64_t base, so;
    red_kept(r, j, &base, &so);
    float m = -INFINITY, acc = 0.0f;
    int found = 0;
    for (int64_t k = 0; k < r.count; k++) {
      int64_t o = base + red_reduced(r, k);
      float v = x[o];
      if (!bwd) {
        if (kind == SNRT_RED_MAX) m = v > m || v != v ? v : m;
        else acc += v * v;
      } else if (kind == SNRT_RED_MAX) {
        int hit = !found && (v == y[so] || (v != v && y[so] != y[so]));
        out[o] = hit ? dy[so] : 0.0f;
        found |= hit;
      } else {
        out[o] = y[so] != 0.0f ? dy[so] * v / y[so] : 0.0f;
      }
    }
    if (!bwd) out[so] = kind == SNRT_RED_MAX ? m : sqrtf(acc);
  }
}

static void reduce_groups(snrt_ctx *c, const snrt_reduce_t *p, const float *x, const float *y,
                          const float *dy, float *out, int bwd) {
  red_t r = make_red(p->rank, p->dims, p->ss);
  if (r.nsmall <= 0) return;
  k_reduce_groups<<<snrt_cu_blocks(r.nsmall), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(r, p->kind, x, y,
                                                                                    dy, out, bwd);
  SNRT_LAUNCH_CHECK();
}

void snrt_reduce_bwd(snrt_ctx *c, const snrt_reduce_t *p, const float *x, const float *y,
                     const float *dy, float *dx) {
  reduce_groups(c, p, x, y, dy, dx, 1);
}

void snrt_reduce(snrt_ctx *c, const snrt_reduce_t *p, const float *big, float *small) {
  if (p->kind != SNRT_RED_SUM) {
    reduce_groups(c, p, big, NULL, NULL, small, 0);
    return;
  }
  ScaledRead f = {big, p->scale};
  launch_red(c, make_red(p->rank, p->dims, p->ss), f, small);
}

__global__ void k_expand(snrt_reduce_t p, const float *small, float *big) {
  SNRT_FOR(i, p.n_big) {
    int64_t k = i, o = 0;
    for (int d = p.rank - 1; d >= 0; d--) {
      o += (k % p.dims[d]) * p.ss[d];
      k /= p.dims[d];
    }
    big[i] = p.scale * small[o];
  }
}

void snrt_expand(snrt_ctx *c, const snrt_reduce_t *p, const float *small, float *big) {
  if (p->n_big <= 0) return;
  k_expand<<<snrt_cu_blocks(p->n_big), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, small, big);
  SNRT_LAUNCH_CHECK();
}

/* ---- bias ------------------------------------------------------------------ */

__global__ void k_bias_fwd(snrt_bias_t p, const float *b, float *y) {
  SNRT_FOR(i, p.rows * p.cols) {
    int64_t bi = 0;
    switch (p.kind) {
    case SNRT_BIAS_ROW: bi = i % p.cols; break;
    case SNRT_BIAS_COL: bi = i / p.cols; break;
    case SNRT_BIAS_FULL: bi = i; break;
    default: bi = 0;
    }
    y[i] += p.scale * b[bi];
  }
}

void snrt_bias_fwd(snrt_ctx *c, const snrt_bias_t *p, const float *b, float *y) {
  int64_t n = p->rows * p->cols;
  if (n <= 0) return;
  k_bias_fwd<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, b, y);
  SNRT_LAUNCH_CHECK();
}

/* The same on a 16-bit y: widened, the bias added in float32, rounded back. */
template <int FMT>
__global__ void k_bias_fwd16(snrt_bias_t p, const float *b, uint16_t *y) {
  SNRT_FOR(i, p.rows * p.cols) {
    int64_t bi = 0;
    switch (p.kind) {
    case SNRT_BIAS_ROW: bi = i % p.cols; break;
    case SNRT_BIAS_COL: bi = i / p.cols; break;
    case SNRT_BIAS_FULL: bi = i; break;
    default: bi = 0;
    }
    float v = (FMT == SNRT_BF16 ? snrt_bf16_to_f32(y[i]) : snrt_f16_to_f32(y[i])) + p.scale * b[bi];
    y[i] = FMT == SNRT_BF16 ? snrt_f32_to_bf16(v) : snrt_f32_to_f16(v);
  }
}

void snrt_bias_fwd16(snrt_ctx *c, const snrt_bias_t *p, int fmt, const float *b, uint16_t *y) {
  int64_t n = p->rows * p->cols;
  if (n <= 0) return;
  if (fmt == SNRT_BF16)
    k_bias_fwd16<SNRT_BF16><<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, b, y);
  else
    k_bias_fwd16<SNRT_F16><<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, b, y);
  SNRT_LAUNCH_CHECK();
}

/* db = scale * (dy summed the other way): the gradient of y += scale * b. */
void snrt_bias_bwd(snrt_ctx *c, const snrt_bias_t *p, const float *dy, float *db) {
  int64_t dims[2] = {p->rows, p->cols}, ss[2];
  switch (p->kind) {
  case SNRT_BIAS_ROW: ss[0] = 0, ss[1] = 1; break;
  case SNRT_BIAS_COL: ss[0] = 1, ss[1] = 0; break;
  case SNRT_BIAS_FULL: ss[0] = p->cols, ss[1] = 1; break;
  default: ss[0] = ss[1] = 0;
  }
  ScaledRead f = {dy, p->scale};
  launch_red(c, make_red(2, dims, ss), f, db);
}

/* ---- dropout ---------------------------------------------------------------- */

/* Element i is kept iff snrt_uniform(seed, step, id, i) >= ratio: the same
 * test as the CPU runtime, so both runtimes draw the same mask. */
__global__ void k_dropout(snrt_dropout_t p, const snrt_cuda_vars *v, const float *x, float *y) {
  uint64_t seed = v->seed, step = (uint64_t)v->step;
  float scale = 1.0f / (1.0f - p.ratio);
  SNRT_FOR(i, p.n) {
    bool keep = snrt_uniform(seed, step, p.id, (uint64_t)i) >= p.ratio;
    y[i] = keep ? x[i] * scale : 0.0f;
  }
}

void snrt_dropout_fwd(snrt_ctx *c, const snrt_dropout_t *p, const float *x, float *y) {
  if (p->n <= 0) return;
  if (p->ratio <= 0.0f) {
    snrt_copy(c, p->n * 4, x, y);
    return;
  }
  k_dropout<<<snrt_cu_blocks(p->n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, snrt_cu_vars(c), x, y);
  SNRT_LAUNCH_CHECK();
}

/* The mask is regenerated: backward is the same function of dy. */
void snrt_dropout_bwd(snrt_ctx *c, const snrt_dropout_t *p, const float *dy, float *dx) {
  snrt_dropout_fwd(c, p, dy, dx);
}
