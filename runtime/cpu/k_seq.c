/* k_seq.c — CPU kernels of the transformer ops: elementwise math (Sqrt, Erf,
 * Neg, Reciprocal, Pow, Sin, Cos, Exp, Log, Abs, HardSigmoid, HardSwish),
 * LayerNormalization, the embedding lookup and its
 * scatter-add gradient, the masked fill.
 *
 * Determinism (kern.h): each output element is owned by one thread and sums
 * in a fixed order: LayerNorm rows per thread, its dscale/dbias by column
 * blocks over all rows in row order; the embedding gradient by column blocks
 * over all indices in index order. No scratch memory. */
#include "kern.h"

/* ---- math ------------------------------------------------------------------- */


void snrt_math_fwd(snrt_ctx *c, const snrt_math_t *p, const float *x, float *y) {
  (void)c;
  const int64_t n = p->n;
  const float e = p->exponent;
  switch (p->kind) {
  case SNRT_SQRT:
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i]);
    break;
  case SNRT_ERF:   /* kern_erff: the loop vectorizes (BERT's GELU) */
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN / 8)
    for (int64_t i = 0; i < n; i++) y[i] = kern_erff(x[i]);
    break;
  case SNRT_NEG:
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = -x[i];
    break;
  case SNRT_RECIPROCAL:
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = 1.0f / x[i];
    break;
  case SNRT_POW:
#pragma omp parallel for schedule(static) if (n > KERN_PAR_MIN / 8)
    for (int64_t i = 0; i < n; i++) y[i] = kern_pow(x[i], e);
    break;
  default:
#pragma omp parallel for schedule(static) if (n > KERN_PAR_MIN / 8)
    for (int64_t i = 0; i < n; i++) y[i] = snrt_math_more(p, x[i]);
    break;
  }
}

void snrt_math_bwd(snrt_ctx *c, const snrt_math_t *p, const float *x, const float *y,
                   const float *dy, float *dx) {
  (void)c;
  const int64_t n = p->n;
  const float e = p->exponent;
  switch (p->kind) {
  case SNRT_SQRT:   /* d sqrt(x) = 1 / (2 y) */
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
    for (int64_t i = 0; i < n; i++) dx[i] = dy[i] / (2.0f * y[i]);
    break;
  case SNRT_ERF:    /* 2/sqrt(pi) exp(-x^2) */
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN / 8)
    for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * 1.12837916709551257f * kern_expf(-x[i] * x[i]);
    break;
  case SNRT_NEG:
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
    for (int64_t i = 0; i < n; i++) dx[i] = -dy[i];
    break;
  case SNRT_RECIPROCAL:   /* -1/x^2 = -y^2 */
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
    for (int64_t i = 0; i < n; i++) dx[i] = -dy[i] * y[i] * y[i];
    break;
  case SNRT_POW:    /* e x^(e-1) */
#pragma omp parallel for schedule(static) if (n > KERN_PAR_MIN / 8)
    for (int64_t i = 0; i < n; i++)
      dx[i] = e == 2.0f ? dy[i] * 2.0f * x[i] : dy[i] * e * kern_pow(x[i], e - 1.0f);
    break;
  default:
#pragma omp parallel for schedule(static) if (n > KERN_PAR_MIN / 8)
    for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * snrt_math_more_d(p, x ? x[i] : 0.0f, y ? y[i] : 0.0f);
    break;
  }
}

/* ---- LayerNormalization --------------------------------------------------------- */

/* One element of y, as the forward writes it and a carried rebuild again. */
static inline float ln_y(float x, float m, float rs, float s, const float *bias, int64_t j) {
  float v = (x - m) * rs * s;
  return bias ? v + bias[j] : v;
}

void snrt_ln_fwd(snrt_ctx *c, const snrt_ln_t *p, const float *x, const float *scale,
                 const float *bias, float *y, float *mean, float *rstd) {
  (void)c;
  const int64_t R = p->rows, C = p->cols;
#pragma omp parallel for schedule(static) if (R * C > KERN_PAR_MIN)
  for (int64_t r = 0; r < R; r++) {
    const float *xr = x + r * C;
    float *yr = y + r * C;
    double s = 0, q = 0;
    for (int64_t j = 0; j < C; j++) s += xr[j];
    double m = s / (double)C;
    for (int64_t j = 0; j < C; j++) q += (xr[j] - m) * (xr[j] - m);
    float mf = (float)m, rs = (float)(1.0 / sqrt(q / (double)C + p->eps));
    for (int64_t j = 0; j < C; j++) yr[j] = ln_y(xr[j], mf, rs, scale[j], bias, j);
    if (mean) mean[r] = mf;
    if (rstd) rstd[r] = rs;
  }
}

#define LN_COLS 64   /* columns per block of the parameter gradients */

/* y, bias: a carried rebuild's (else NULL). */
static void ln_bwd(const snrt_ln_t *p, const float *x, const float *dy, const float *scale,
                   const float *bias, const float *mean, const float *rstd, float *dx,
                   float *dscale, float *dbias, float *y) {
  const int64_t R = p->rows, C = p->cols;
  /* Parameter gradients first: dx may be written over dy by a later plan. */
  if (dscale || dbias) {
    int64_t nblk = (C + LN_COLS - 1) / LN_COLS;
#pragma omp parallel for schedule(static) if (R * C > KERN_PAR_MIN)
    for (int64_t b = 0; b < nblk; b++) {
      int64_t j0 = b * LN_COLS, j1 = kern_min(C, j0 + LN_COLS);
      double as[LN_COLS] = {0}, ab[LN_COLS] = {0};
      for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * C, *dr = dy + r * C;
        float m = mean[r], rs = rstd[r];
        for (int64_t j = j0; j < j1; j++) {
          as[j - j0] += (double)dr[j] * ((xr[j] - m) * rs);
          ab[j - j0] += dr[j];
        }
      }
      for (int64_t j = j0; j < j1; j++) {
        if (dscale) dscale[j] = (float)as[j - j0];
        if (dbias) dbias[j] = (float)ab[j - j0];
      }
    }
  }
  if (y) {
#pragma omp parallel for schedule(static) if (R * C > KERN_PAR_MIN)
    for (int64_t r = 0; r < R; r++)
      for (int64_t j = 0; j < C; j++) y[r * C + j] = ln_y(x[r * C + j], mean[r], rstd[r], scale[j], bias, j);
  }
  if (!dx) return;
#pragma omp parallel for schedule(static) if (R * C > KERN_PAR_MIN)
  for (int64_t r = 0; r < R; r++) {
    const float *xr = x + r * C, *dr = dy + r * C;
    float *o = dx + r * C;
    float m = mean[r], rs = rstd[r];
    double sg = 0, sgx = 0;
    for (int64_t j = 0; j < C; j++) {
      double g = (double)dr[j] * scale[j];
      sg += g;
      sgx += g * ((xr[j] - m) * rs);
    }
    float a = (float)(sg / (double)C), bb = (float)(sgx / (double)C);
    for (int64_t j = 0; j < C; j++) {
      float xh = (xr[j] - m) * rs;
      o[j] = rs * (dr[j] * scale[j] - a - xh * bb);
    }
  }
}

void snrt_ln_bwd(snrt_ctx *c, const snrt_ln_t *p, const float *x, const float *dy,
                 const float *scale, const float *mean, const float *rstd, float *dx,
                 float *dscale, float *dbias) {
  (void)c;
  ln_bwd(p, x, dy, scale, NULL, mean, rstd, dx, dscale, dbias, NULL);
}

void snrt_ln_bwd_y(snrt_ctx *c, const snrt_ln_t *p, const float *x, const float *dy,
                   const float *scale, const float *bias, const float *mean, const float *rstd,
                   float *dx, float *dscale, float *dbias, float *y) {
  (void)c;
  ln_bwd(p, x, dy, scale, bias, mean, rstd, dx, dscale, dbias, y);
}

/* ---- embedding ------------------------------------------------------------------- */

void snrt_gather_fwd(snrt_ctx *c, const snrt_gather_t *p, const float *table, const int32_t *idx,
                     float *y) {
  (void)c;
  const int32_t *ix = idx ? idx : p->idx;
  const int64_t D = p->dim, N = p->n_idx, outer = p->outer > 1 ? p->outer : 1;
#pragma omp parallel for schedule(static) if (outer * N * D > KERN_PAR_MIN)
  for (int64_t e = 0; e < outer * N; e++) {
    int64_t o = e / N, i = e % N, k = ix[i];
    if (k < 0 || k >= p->rows) {   /* the loader rejects such ids; never read outside */
      for (int64_t j = 0; j < D; j++) y[e * D + j] = NAN;
      continue;
    }
    memcpy(y + e * D, table + (o * p->rows + k) * D, sizeof(float) * (size_t)D);
  }
}

void snrt_gather_bwd(snrt_ctx *c, const snrt_gather_t *p, const int32_t *idx, const float *dy,
                     float *dtable) {
  (void)c;
  const int32_t *ix = idx ? idx : p->idx;
  const int64_t D = p->dim, N = p->n_idx, outer = p->outer > 1 ? p->outer : 1;
  memset(dtable, 0, sizeof(float) * (size_t)(outer * p->rows * D));
  int64_t nblk = (D + LN_COLS - 1) / LN_COLS;
#pragma omp parallel for schedule(static) if (outer * N * D > KERN_PAR_MIN)
  for (int64_t ob = 0; ob < outer * nblk; ob++) {
    int64_t o = ob / nblk, b = ob % nblk;
    int64_t j0 = b * LN_COLS, j1 = kern_min(D, j0 + LN_COLS);
    for (int64_t i = 0; i < N; i++) {
      int64_t k = ix[i];
      if (k < 0 || k >= p->rows) continue;
      float *t = dtable + (o * p->rows + k) * D;
      const float *d = dy + (o * N + i) * D;
      for (int64_t j = j0; j < j1; j++) t[j] += d[j];
    }
  }
}

/* ---- where on data ---------------------------------------------------------------- */

void snrt_where3_fwd(snrt_ctx *c, const snrt_where3_t *p, const uint8_t *cond, const float *a,
                     const float *b, float *y) {
  (void)c;
#pragma omp parallel for schedule(static) if (p->n > KERN_PAR_MIN)
  for (int64_t i = 0; i < p->n; i++) {
    int64_t oc, oa, ob;
    snrt_where3_at(p, i, &oc, &oa, &ob);
    y[i] = cond[oc] ? a[oa] : b[ob];
  }
}

void snrt_where3_bwd(snrt_ctx *c, const snrt_where3_t *p, const uint8_t *cond, const float *dy,
                     float *da, float *db) {
  (void)c;
  float *out[2] = {da, db};
  const int64_t cnt[2] = {p->na, p->nb};
  for (int w = 0; w < 2; w++) {
    if (!out[w]) continue;
    float *o = out[w];
#pragma omp parallel for schedule(static) if (p->n > KERN_PAR_MIN)
    for (int64_t e = 0; e < cnt[w]; e++) o[e] = snrt_where3_grad_at(p, w, e, cond, dy);
  }
}

/* ---- take (GatherElements) ------------------------------------------------------ */

void snrt_take_fwd(snrt_ctx *c, const snrt_take_t *p, const float *x, float *y) {
  (void)c;
#pragma omp parallel for schedule(static) if (p->n_out > KERN_PAR_MIN)
  for (int64_t i = 0; i < p->n_out; i++) y[i] = x[p->src[i]];
}

void snrt_take_bwd(snrt_ctx *c, const snrt_take_t *p, const float *dy, float *dx) {
  (void)c;
#pragma omp parallel for schedule(static) if (p->n_in > KERN_PAR_MIN)
  for (int64_t j = 0; j < p->n_in; j++) {
    float s = 0.0f;
    for (int32_t k = p->inv_start[j]; k < p->inv_start[j + 1]; k++) s += dy[p->inv[k]];
    dx[j] = s;
  }
}

/* ---- einsum ----------------------------------------------------------------------- */

void snrt_einsum(snrt_ctx *c, const snrt_einsum_t *p, const float *a, const float *b, float *y) {
  (void)c;
  const int R = p->rank, O = p->nout;
#pragma omp parallel for schedule(static) if (p->n_out * p->n_sum > KERN_PAR_MIN)
  for (int64_t e = 0; e < p->n_out; e++) {
    int64_t oa = 0, ob = 0, r = e;
    for (int d = O - 1; d >= 0; d--) {
      int64_t i = r % p->dims[d];
      r /= p->dims[d];
      oa += i * p->sa[d];
      ob += i * p->sb[d];
    }
    double acc = 0;
    for (int64_t k = 0; k < p->n_sum; k++) {
      int64_t qa = oa, qb = ob, q = k;
      for (int d = R - 1; d >= O; d--) {
        int64_t i = q % p->dims[d];
        q /= p->dims[d];
        qa += i * p->sa[d];
        qb += i * p->sb[d];
      }
      acc += (double)a[qa] * b[qb];
    }
    y[e] = (float)acc;
  }
}

/* ---- masked fill --------------------------------------------------------------------- */

void snrt_where(snrt_ctx *c, const snrt_where_t *p, const float *x, float *y) {
  (void)c;
  const int64_t in = p->inner, outer = p->n / p->inner;
  const float v = p->value;
#pragma omp parallel for schedule(static) if (p->n > KERN_PAR_MIN)
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < in; i++) y[o * in + i] = p->fill[i] ? v : x[o * in + i];
}
