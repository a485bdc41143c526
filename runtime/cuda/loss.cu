/* loss.cu — softmax, the losses and the optimizer updates.
 *
 * What it is: softmax over (outer, len, inner) with one block per row; the
 * softmax cross-entropy and MSE losses (mean over the batch, one block, fixed
 * order: deterministic); SGD and Adam/AdamW with torch.optim's semantics.
 * The learning rate and step come from the device copy of snrt_cuda_vars, so
 * a captured CUDA graph stays right when they change.
 * NaN: the row maxima use fmaxf, which skips NaN, but a NaN logit still
 * reaches the sum of exponentials, so the loss and the row's gradient are NaN
 * as on the CPU (the main loop then stops with exit 3).
 * What it is not: fused with the layers around it. */
#include "cuda_rt.h"

#define ROW_THREADS 128

/* ---- softmax ------------------------------------------------------------------ */

/* Element o of x as the softmax reads it: value where the mask (fill, the
 * device copy of p.fill; NULL: none) says so. */
__device__ float softmax_in(const snrt_softmax_t &p, const uint8_t *fill, const float *x, int64_t o) {
  return fill && fill[o % p.fill_n] ? p.value : x[o];
}

__global__ void k_softmax_fwd(snrt_softmax_t p, const uint8_t *fill, const float *x, float *y) {
  for (int64_t r = blockIdx.x; r < p.outer * p.inner; r += gridDim.x) {
    int64_t base = r / p.inner * p.len * p.inner + r % p.inner;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < p.len; j += blockDim.x)
      mx = fmaxf(mx, softmax_in(p, fill, x, base + j * p.inner));
    mx = snrt_block_max(mx);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < p.len; j += blockDim.x)
      s += expf(softmax_in(p, fill, x, base + j * p.inner) - mx);
    s = snrt_block_sum(s);
    for (int64_t j = threadIdx.x; j < p.len; j += blockDim.x)
      y[base + j * p.inner] = expf(softmax_in(p, fill, x, base + j * p.inner) - mx) / s;
  }
}

/* dx = y * (dy - sum(dy * y)) */
__global__ void k_softmax_bwd(snrt_softmax_t p, const uint8_t *fill, const float *y, const float *dy,
                              float *dx) {
  for (int64_t r = blockIdx.x; r < p.outer * p.inner; r += gridDim.x) {
    int64_t base = r / p.inner * p.len * p.inner + r % p.inner;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < p.len; j += blockDim.x) {
      int64_t o = base + j * p.inner;
      s += dy[o] * y[o];
    }
    s = snrt_block_sum(s);
    for (int64_t j = threadIdx.x; j < p.len; j += blockDim.x) {
      int64_t o = base + j * p.inner;
      dx[o] = fill && fill[o % p.fill_n] ? 0.0f : y[o] * (dy[o] - s);
    }
  }
}

static unsigned row_blocks(int64_t rows) {
  return rows > 65535 ? 65535u : (unsigned)(rows > 0 ? rows : 1);
}

void snrt_softmax_fwd(snrt_ctx *c, const snrt_softmax_t *p, const float *x, float *y) {
  if (p->outer * p->inner * p->len <= 0) return;
  const uint8_t *fill = p->fill ? (const uint8_t *)snrt_cu_const(c, p->fill, (size_t)p->fill_n) : NULL;
  k_softmax_fwd<<<row_blocks(p->outer * p->inner), ROW_THREADS, 0, snrt_cu_stream(c)>>>(*p, fill, x,
                                                                                        y);
  SNRT_LAUNCH_CHECK();
}

void snrt_softmax_bwd(snrt_ctx *c, const snrt_softmax_t *p, const float *y, const float *dy,
                      float *dx) {
  if (p->outer * p->inner * p->len <= 0) return;
  const uint8_t *fill = p->fill ? (const uint8_t *)snrt_cu_const(c, p->fill, (size_t)p->fill_n) : NULL;
  k_softmax_bwd<<<row_blocks(p->outer * p->inner), ROW_THREADS, 0, snrt_cu_stream(c)>>>(*p, fill, y,
                                                                                        dy, dx);
  SNRT_LAUNCH_CHECK();
}

/* ---- softmax cross-entropy ------------------------------------------------------- */

/* A row's maximum and sum of exp(x - max), every thread of the block. */
__device__ void ce_max_sum(const float *x, int64_t classes, float *mx_out, float *s_out) {
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = snrt_block_max(mx);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) s += expf(x[j] - mx);
  *mx_out = mx, *s_out = snrt_block_sum(s);
}

/* loss = mean over rows of logsumexp(row) - row[label]. Block b takes rows
 * b, b + CE_BLOCKS, ... (a block per row: GPT-2's 8192 rows of 50304 took
 * 53 ms in one block on the second H200 run) and writes its partial sum to
 * ce_part; one more block adds the partials in order: a fixed order,
 * deterministic. A label outside [0, classes) makes the loss NaN (the main
 * loop then stops with exit code 3). */
#define CE_BLOCKS 1024
__device__ float ce_part[CE_BLOCKS];

__global__ void k_ce_rows(snrt_loss_t p, const float *logits, const int32_t *labels) {
  float acc = 0.0f;
  for (int r = blockIdx.x; r < p.n; r += gridDim.x) {
    const float *x = logits + (int64_t)r * p.classes;
    float mx, s;
    ce_max_sum(x, p.classes, &mx, &s);
    int lab = labels[r];
    float lx = (lab >= 0 && lab < p.classes) ? x[lab] : __int_as_float(0x7fc00000);
    acc += logf(s) + mx - lx;   /* the same in every thread */
  }
  if (threadIdx.x == 0) ce_part[blockIdx.x] = acc;
}

__global__ void k_ce_total(int blocks, int n, float *loss) {
  float s = 0.0f;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) s += ce_part[i];
  s = snrt_block_sum(s);
  if (threadIdx.x == 0) *loss = s / (float)n;
}

/* Rows of logits into (softmax - onehot) * inv_n (in place allowed: a row is
 * read whole before it is written); a label outside [0, classes): the whole
 * row NaN, as the CPU's. */
__global__ void k_ce_bwd(int64_t rows, int64_t classes, float inv_n, const float *logits,
                         const int32_t *labels, float *dl) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *x = logits + r * classes;
    float *d = dl + r * classes;
    float mx, s;
    ce_max_sum(x, classes, &mx, &s);
    int lab = labels[r];
    bool bad = lab < 0 || lab >= classes;
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x)
      d[j] = bad ? __int_as_float(0x7fc00000) : (expf(x[j] - mx) / s - (j == lab ? 1.0f : 0.0f)) * inv_n;
  }
}

void snrt_softmax_ce_fwd(snrt_ctx *c, const snrt_loss_t *p, const float *logits,
                         const int32_t *labels, float *loss) {
  int blocks = p->n < CE_BLOCKS ? (p->n > 0 ? p->n : 1) : CE_BLOCKS;
  k_ce_rows<<<blocks, 256, 0, snrt_cu_stream(c)>>>(*p, logits, labels);
  SNRT_LAUNCH_CHECK();
  k_ce_total<<<1, 1024, 0, snrt_cu_stream(c)>>>(blocks, p->n, loss);
  SNRT_LAUNCH_CHECK();
}

void snrt_softmax_ce_bwd(snrt_ctx *c, const snrt_loss_t *p, const float *logits,
                         const int32_t *labels, float *dlogits) {
  if (p->n <= 0) return;
  k_ce_bwd<<<row_blocks(p->n), ROW_THREADS, 0, snrt_cu_stream(c)>>>(p->n, p->classes, 1.0f / (float)p->n,
                                                                     logits, labels, dlogits);
  SNRT_LAUNCH_CHECK();
}

/* ---- mean squared error (torch.nn.MSELoss: mean over every element) -------------- */

__global__ void k_mse_fwd(int64_t n, const float *out, const float *target, float *loss) {
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float d = out[i] - target[i];
    s += d * d;
  }
  s = snrt_block_sum(s);
  if (threadIdx.x == 0) *loss = s / (float)n;
}

__global__ void k_mse_bwd(int64_t n, const float *out, const float *target, float *dout) {
  float f = 2.0f / (float)n;
  SNRT_FOR(i, n) dout[i] = f * (out[i] - target[i]);
}

void snrt_mse_fwd(snrt_ctx *c, const snrt_loss_t *p, const float *out, const float *target,
                  float *loss) {
  k_mse_fwd<<<1, 1024, 0, snrt_cu_stream(c)>>>((int64_t)p->n * p->classes, out, target, loss);
  SNRT_LAUNCH_CHECK();
}

void snrt_mse_bwd(snrt_ctx *c, const snrt_loss_t *p, const float *out, const float *target,
                  float *dout) {
  int64_t n = (int64_t)p->n * p->classes;
  if (n <= 0) return;
  k_mse_bwd<<<snrt_cu_blocks(n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(n, out, target, dout);
  SNRT_LAUNCH_CHECK();
}

/* ---- optimizers ------------------------------------------------------------------- */

/* torch.optim.SGD: g += wd * w; with momentum, buf = g at the first step
 * (step 0), else buf = momentum * buf + (1 - dampening) * g; nesterov uses
 * g + momentum * buf; w -= lr * that. */
__global__ void k_sgd(snrt_sgd_t p, const snrt_cuda_vars *v, const int *skip, float *w,
                      const float *g, float *mom) {
  if (skip && *skip) return;   /* --precision fp16: the step's gradients overflowed */
  float lr = v->lr;
  bool first = v->step == 0;
  SNRT_FOR(i, p.n) {
    float d = g[i];
    if (p.weight_decay != 0.0f) d += p.weight_decay * w[i];
    if (p.momentum != 0.0f && mom) {
      float b = first ? d : p.momentum * mom[i] + (1.0f - p.dampening) * d;
      mom[i] = b;
      d = p.nesterov ? d + p.momentum * b : b;
    }
    w[i] -= lr * d;
  }
}

void snrt_sgd(snrt_ctx *c, const snrt_sgd_t *p, float *w, const float *g, float *mom) {
  snrt_grad_ready(c, p->param, g, p->n);
  if (p->n <= 0) return;
  k_sgd<<<snrt_cu_blocks(p->n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, snrt_cu_vars(c),
                                                                       snrt_cu_skip(c), w, g, mom);
  SNRT_LAUNCH_CHECK();
}

/* torch.optim.Adam / AdamW: snrt_adam.h's formula, the same as the CPU's; the
 * per-step scalars come from the host (vars->adam[slot], snrt_adam_coefs in
 * double), the element update is snrt_adam_elem. */
__global__ void k_adam(snrt_adam_t p, const snrt_cuda_vars *vars, int slot, const int *skip,
                       float *w, const float *g, float *m, float *v) {
  if (skip && *skip) return;   /* --precision fp16: the step's gradients overflowed */
  const snrt_adam_coef k = vars->adam[slot];
  SNRT_FOR(i, p.n) snrt_adam_elem(p.beta1, p.beta2, p.eps, k, &w[i], g[i], &m[i], &v[i]);
}

/* The slot of p's configuration, added (and the device copy marked stale) on
 * first sight. */
static int adam_slot(snrt_ctx *c, const snrt_adam_t *p) {
  snrt_cuda *d = snrt_cu(c);
  for (int i = 0; i < d->nadam; i++) {
    const snrt_adam_t *q = &d->adam_key[i];
    if (q->beta1 == p->beta1 && q->beta2 == p->beta2 && q->weight_decay == p->weight_decay &&
        q->decoupled == p->decoupled)
      return i;
  }
  if (d->nadam == SNRT_CU_ADAM_SLOTS)
    snrt_cu_fail("snrt_adam", "more than 8 distinct Adam configurations in one model",
                 __FILE__, __LINE__);
  d->adam_key[d->nadam] = *p;
  d->hvars_ok = false;
  return d->nadam++;
}

void snrt_adam(snrt_ctx *c, const snrt_adam_t *p, float *w, const float *g, float *m, float *v) {
  snrt_grad_ready(c, p->param, g, p->n);
  if (p->n <= 0) return;
  int slot = adam_slot(c, p);
  k_adam<<<snrt_cu_blocks(p->n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, snrt_cu_vars(c), slot,
                                                                        snrt_cu_skip(c), w, g, m, v);
  SNRT_LAUNCH_CHECK();
}

/* ---- the chunked LM head and cross-entropy (snrt_lmce_t) ------------------------- */

/* The index of x's largest element, the first of equal ones (as the
 * CPU's): each thread its strided share in order, then a tree over shared
 * memory that keeps the larger value, or the lower index of equal ones.
 * Every thread of the block (ROW_THREADS, a power of two) calls it. */
__device__ int64_t block_argmax(const float *x, int64_t n) {
  __shared__ float sv[ROW_THREADS];
  __shared__ int64_t si[ROW_THREADS];
  float bv = -INFINITY;
  int64_t bi = -1;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    if (bi < 0 || x[j] > bv) bv = x[j], bi = j;
  sv[threadIdx.x] = bv, si[threadIdx.x] = bi;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      float v = sv[threadIdx.x + s];
      int64_t i = si[threadIdx.x + s], mine = si[threadIdx.x];
      if (i >= 0 && (mine < 0 || v > sv[threadIdx.x] || (v == sv[threadIdx.x] && i < mine)))
        sv[threadIdx.x] = v, si[threadIdx.x] = i;
    }
    __syncthreads();
  }
  int64_t best = si[0];
  __syncthreads();   /* before a next call writes the arrays again */
  return best;
}

/* One block per row of the chunk (rows r0 .. r0 + rows): its term
 * logsumexp - logit[label] into row_loss[r0 + i] (NaN for a bad label);
 * with rows_out (the eval step), the term and the row's argmax there too. */
__global__ void k_lmce_rows(int64_t rows, int64_t classes, const float *z, const int32_t *labels,
                            float *row_loss, float *rows_out) {
  for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const float *x = z + i * classes;
    float mx, s;
    ce_max_sum(x, classes, &mx, &s);
    int lab = labels[i];
    float lx = (lab >= 0 && lab < classes) ? x[lab] : __int_as_float(0x7fc00000);
    float term = logf(s) + mx - lx;
    if (threadIdx.x == 0) row_loss[i] = term;
    if (rows_out) {
      int64_t best = block_argmax(x, classes);
      if (threadIdx.x == 0) rows_out[2 * i] = term, rows_out[2 * i + 1] = (float)best;
    }
  }
}

/* The mean of the n rows' terms: one block, each thread a fixed stride, so
 * the order is fixed (deterministic). */
__global__ void k_lmce_total(int64_t n, const float *row_loss, float *loss) {
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += row_loss[i];
  s = snrt_block_sum(s);
  if (threadIdx.x == 0) *loss = s / (float)n;
}

static void lmce_logits(snrt_ctx *c, const snrt_lmce_t *p, const float *h, const float *w,
                        int64_t r, int64_t rows, float *z) {
  snrt_mm_t mm = {};
  mm.batch = 1, mm.m = rows, mm.n = p->classes, mm.k = p->k, mm.trans_b = p->trans_b;
  mm.alpha = p->alpha;
  snrt_matmul(c, &mm, h + r * p->k, w, z);
}

/* Per chunk: its logits (copied to the host sink where one is set, in
 * stream order: the next chunk's product waits for the copy), each row's
 * loss term (k_lmce_rows; the eval step's summary), the logits in place
 * into the gradient (k_ce_bwd), dh's rows and dW (added to after the first
 * chunk); at the end the mean of the terms in a fixed order. */
void snrt_lmce(snrt_ctx *c, const snrt_lmce_t *p, const float *h, const float *w,
               const int32_t *labels, float *loss, float *dh, float *dw, float *rows_out,
               float *ws) {
  if (p->n <= 0) return;
  float *row_loss = ws;   /* the workspace's first n doubles: n floats here */
  float *z = (float *)((double *)ws + p->n);
  cudaStream_t st = snrt_cu_stream(c);
  for (int64_t r = 0; r < p->n; r += p->chunk) {
    int64_t rows = p->n - r < p->chunk ? p->n - r : p->chunk;
    lmce_logits(c, p, h, w, r, rows, z);
    if (c->lm_sink)
      CUDA_CHECK(cudaMemcpyAsync(c->lm_sink + r * p->classes, z,
                                 sizeof(float) * (size_t)(rows * p->classes),
                                 cudaMemcpyDeviceToHost, st));
    k_lmce_rows<<<row_blocks(rows), ROW_THREADS, 0, st>>>(rows, p->classes, z, labels + r,
                                                          row_loss + r,
                                                          rows_out ? rows_out + 2 * r : NULL);
    SNRT_LAUNCH_CHECK();
    if (!(p->need & 3)) continue;
    k_ce_bwd<<<row_blocks(rows), ROW_THREADS, 0, st>>>(rows, p->classes, 1.0f / (float)p->n, z,
                                                      labels + r, z);
    SNRT_LAUNCH_CHECK();
    if (p->need & 1) {
      snrt_mm_t mm = {};
      mm.batch = 1, mm.m = rows, mm.n = p->k, mm.k = p->classes, mm.trans_b = !p->trans_b;
      mm.alpha = p->alpha;
      snrt_matmul(c, &mm, z, w, dh + r * p->k);
    }
    if (p->need & 2) {
      snrt_mm_t mm = {};
      mm.batch = 1, mm.k = rows, mm.trans_a = 1, mm.alpha = p->alpha, mm.beta = r ? 1.0f : 0.0f;
      mm.m = p->trans_b ? p->classes : p->k;
      mm.n = p->trans_b ? p->k : p->classes;
      if (p->trans_b) snrt_matmul(c, &mm, z, h + r * p->k, dw);
      else snrt_matmul(c, &mm, h + r * p->k, z, dw);
    }
  }
  if (!loss) return;
  k_lmce_total<<<1, 1024, 0, st>>>(p->n, row_loss, loss);
  SNRT_LAUNCH_CHECK();
}
