/* k_shape.c — data movement kernels: concat, split, slice (forward and its
 * scatter backward, any step sign), constant pad (negative pads crop) and
 * its crop backward, transpose.
 *
 * All loops run over rows of the output's last dimension; a row's start
 * offsets are computed once per row (div/mod per row, never per element).
 * Pure copies: deterministic regardless of threading.
 * Not here: reshape/flatten/identity (the compiler aliases those: no kernel). */
#include "kern.h"
#include <stdlib.h>
#include <stdio.h>

/* Concat and split share one layout: rows of `outer`, each the parts'
 * chunks in order. Offsets within a row are a running sum, so nothing is
 * allocated in the step (a DenseNet concat can have thousands of parts). */
static int64_t row_len(const snrt_concat_t *p) {
  int64_t row = 0;
  for (int i = 0; i < p->parts; i++) row += p->chunk[i];
  return row;
}

void snrt_concat(snrt_ctx *c, const snrt_concat_t *p, const float *const *in, float *y) {
  (void)c;
  const int64_t row = row_len(p);
#pragma omp parallel for schedule(static) if (p->outer * row > KERN_PAR_MIN)
  for (int64_t r = 0; r < p->outer; r++) {
    int64_t o = r * row;
    for (int i = 0; i < p->parts; i++) {
      memcpy(y + o, in[i] + r * p->chunk[i], sizeof(float) * p->chunk[i]);
      o += p->chunk[i];
    }
  }
}

void snrt_split(snrt_ctx *c, const snrt_concat_t *p, const float *x, float *const *out) {
  (void)c;
  const int64_t row = row_len(p);
#pragma omp parallel for schedule(static) if (p->outer * row > KERN_PAR_MIN)
  for (int64_t r = 0; r < p->outer; r++) {
    int64_t o = r * row;
    for (int i = 0; i < p->parts; i++) {
      if (out[i]) memcpy(out[i] + r * p->chunk[i], x + o, sizeof(float) * p->chunk[i]);
      o += p->chunk[i];
    }
  }
}

static void strides_of(int rank, const int64_t *dims, int64_t *st) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    st[i] = s;
    s *= dims[i];
  }
}

/* For each output row r (all dims but the last): the input offset of its
 * first element, given per-dim input offsets base[d] + idx*mul[d]. */
static inline int64_t row_offset(int rank, const int64_t *odims, const int64_t *base,
                                 const int64_t *mul, int64_t r) {
  int64_t o = 0;
  for (int d = rank - 2; d >= 0; d--) {
    int64_t i = r % odims[d];
    r /= odims[d];
    o += base[d] + i * mul[d];
  }
  return o;
}

/* A slice as rows of its last dimension: per dimension the input offset of
 * the first element taken and the input stride of one output step; `rows`
 * rows of `inner` elements, m apart in the input, the first at b past the
 * row's offset (row_offset). */
typedef struct SliceRows {
  int64_t base[SNRT_MAX_RANK], mul[SNRT_MAX_RANK];
  int64_t inner, rows, b, m;
} SliceRows;

static SliceRows slice_rows(const snrt_slice_t *p) {
  SliceRows g;
  int64_t ist[SNRT_MAX_RANK];
  strides_of(p->rank, p->in_dims, ist);
  for (int d = 0; d < p->rank; d++) {
    g.base[d] = p->start[d] * ist[d];
    g.mul[d] = p->step[d] * ist[d];
  }
  const int l = p->rank - 1;
  g.inner = p->out_dims[l], g.rows = p->n_out / g.inner;
  g.b = g.base[l], g.m = g.mul[l];
  return g;
}

void snrt_slice_fwd(snrt_ctx *c, const snrt_slice_t *p, const float *x, float *y) {
  (void)c;
  if (p->n_out == 0) return;
  const SliceRows g = slice_rows(p);
  const int64_t inner = g.inner, m = g.m;
#pragma omp parallel for schedule(static) if (p->n_out > KERN_PAR_MIN)
  for (int64_t r = 0; r < g.rows; r++) {
    const float *xp = x + row_offset(p->rank, p->out_dims, g.base, g.mul, r) + g.b;
    float *yp = y + r * inner;
    for (int64_t j = 0; j < inner; j++) yp[j] = xp[j * m];
  }
}

void snrt_slice_bwd(snrt_ctx *c, const snrt_slice_t *p, const float *dy, float *dx) {
  (void)c;
  memset(dx, 0, sizeof(float) * p->n_in);
  if (p->n_out == 0) return;
  const SliceRows g = slice_rows(p);
  const int64_t inner = g.inner, m = g.m;
  /* Distinct output elements hit distinct input elements (steps are nonzero),
   * so rows can be scattered in parallel. */
#pragma omp parallel for schedule(static) if (p->n_out > KERN_PAR_MIN)
  for (int64_t r = 0; r < g.rows; r++) {
    float *xp = dx + row_offset(p->rank, p->out_dims, g.base, g.mul, r) + g.b;
    const float *yp = dy + r * inner;
    for (int64_t j = 0; j < inner; j++) xp[j * m] = yp[j];
  }
}

/* Copies the overlap of two boxes: out index = in index + before (per dim).
 * fwd: y (out_dims) from x (in_dims); the rest of y is `value`.
 * bwd: dx (in_dims) from dy (out_dims); the rest of dx is 0. */
static void pad_copy(const snrt_pad_t *p, int fwd, const float *src, float *dst, float fill) {
  const int rank = p->rank;
  const int64_t *ddims = fwd ? p->out_dims : p->in_dims, *sdims = fwd ? p->in_dims : p->out_dims;
  const int64_t ndst = fwd ? p->n_out : p->n_in;
  if (ndst == 0) return;
  int64_t sst[SNRT_MAX_RANK];
  strides_of(rank, sdims, sst);
  const int l = rank - 1;
  const int64_t inner = ddims[l], rows = ndst / inner;
  /* dst index i maps to src index i - sh (sh = before for fwd, -before for bwd). */
  int64_t sh[SNRT_MAX_RANK];
  for (int d = 0; d < rank; d++) sh[d] = fwd ? p->before[d] : -p->before[d];
  const int64_t j0 = kern_max(0, kern_min(inner, sh[l]));
  const int64_t j1 = kern_max(j0, kern_min(inner, sdims[l] + sh[l]));
#pragma omp parallel for schedule(static) if (ndst > KERN_PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    float *dp = dst + r * inner;
    int64_t rem = r, so = 0;
    int inside = 1;
    for (int d = rank - 2; d >= 0; d--) {
      int64_t i = rem % ddims[d] - sh[d];
      rem /= ddims[d];
      if (i < 0 || i >= sdims[d]) inside = 0;
      so += i * sst[d];
    }
    if (!inside) {
      for (int64_t j = 0; j < inner; j++) dp[j] = fill;
      continue;
    }
    const float *sp = src + so - sh[l];
    for (int64_t j = 0; j < j0; j++) dp[j] = fill;
    memcpy(dp + j0, sp + j0, sizeof(float) * (j1 - j0));
    for (int64_t j = j1; j < inner; j++) dp[j] = fill;
  }
}

void snrt_pad_fwd(snrt_ctx *c, const snrt_pad_t *p, const float *x, float *y) {
  (void)c;
  if (p->mode == SNRT_PAD_CONSTANT) {
    pad_copy(p, 1, x, y, p->value);
    return;
  }
#pragma omp parallel for schedule(static) if (p->n_out > KERN_PAR_MIN)
  for (int64_t i = 0; i < p->n_out; i++) {
    int64_t k = i, o = 0, stride = 1;
    for (int d = p->rank - 1; d >= 0; d--) {
      o += snrt_pad_src1(p->mode, k % p->out_dims[d], p->before[d], p->in_dims[d]) * stride;
      k /= p->out_dims[d];
      stride *= p->in_dims[d];
    }
    y[i] = x[o];
  }
}

void snrt_pad_bwd(snrt_ctx *c, const snrt_pad_t *p, const float *dy, float *dx) {
  (void)c;
  if (p->mode == SNRT_PAD_CONSTANT) {
    pad_copy(p, 0, dy, dx, 0.0f);
    return;
  }
#pragma omp parallel for schedule(static) if (p->n_out > KERN_PAR_MIN / 16)
  for (int64_t j = 0; j < p->n_in; j++) dx[j] = snrt_pad_grad_at(p, j, dy);
}

enum { TR_BLOCK = 8 };

void snrt_transpose(snrt_ctx *c, const snrt_transpose_t *p, const float *x, float *y) {
  (void)c;
  if (p->n == 0) return;
  int64_t ist[SNRT_MAX_RANK] = {0}, odims[SNRT_MAX_RANK] = {0}, mul[SNRT_MAX_RANK] = {0},
          zero[SNRT_MAX_RANK] = {0};
  strides_of(p->rank, p->in_dims, ist);
  for (int d = 0; d < p->rank; d++) {
    odims[d] = p->in_dims[p->perm[d]];
    mul[d] = ist[p->perm[d]];
    zero[d] = 0;
  }
  const int l = p->rank - 1;
  const int64_t inner = odims[l], rows = p->n / inner, m = mul[l];
  if (m > 1 && p->rank >= 2 && mul[l - 1] == 1 && odims[l - 1] % TR_BLOCK == 0) {
    /* The input's innermost dimension is the output's second-to-last: blocks
     * of TR_BLOCK output rows, whose inputs sit side by side, moved as
     * TR_BLOCK x TR_BLOCK tiles: each read and each write takes TR_BLOCK
     * contiguous floats instead of one per cache line (the weights'
     * transposes of a GPT's Linear layers, a 2-D [1024, 256]). */
    const int64_t blocks = rows / TR_BLOCK;
#pragma omp parallel for schedule(static) if (p->n > KERN_PAR_MIN)
    for (int64_t b = 0; b < blocks; b++) {
      const float *xp = x + row_offset(p->rank, odims, zero, mul, b * TR_BLOCK);
      float *yp = y + b * TR_BLOCK * inner;
      int64_t j = 0;
      for (; j + TR_BLOCK <= inner; j += TR_BLOCK) {   /* a TR_BLOCK x TR_BLOCK tile */
        float t[TR_BLOCK][TR_BLOCK];
        for (int jj = 0; jj < TR_BLOCK; jj++)
          for (int k = 0; k < TR_BLOCK; k++) t[jj][k] = xp[(j + jj) * m + k];
        for (int k = 0; k < TR_BLOCK; k++)
          for (int jj = 0; jj < TR_BLOCK; jj++) yp[k * inner + j + jj] = t[jj][k];
      }
      for (; j < inner; j++)
        for (int k = 0; k < TR_BLOCK; k++) yp[k * inner + j] = xp[j * m + k];
    }
    return;
  }
#pragma omp parallel for schedule(static) if (p->n > KERN_PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    const float *xp = x + row_offset(p->rank, odims, zero, mul, r);
    float *yp = y + r * inner;
    for (int64_t j = 0; j < inner; j++) yp[j] = xp[j * m];
  }
}
