/* k_conv.c — 2-D convolution on the CPU: forward, backward-data,
 * backward-filter and bias gradient, with groups, strides, dilations and
 * top/left pads (bottom/right implied by oh/ow), PyTorch semantics in float32.
 *
 * How: im2col of a chunk of images into ONE column matrix (rows: cg*kh*kw,
 * columns: images x oh*ow), so one OpenBLAS sgemm covers many images (the
 * deep layers of a 32x32 ResNet have oh*ow = 1..16, where per-image GEMMs
 * would be hopeless). The only scratch memory is the planned workspace
 * `ws` of snrt_conv_ws_bytes(p) bytes (room for ws_images images' columns).
 * The kernel splits it itself: columns for `nb` images plus a (kg x nb*ohw)
 * staging matrix that re-lays the GEMM's (channel, image, pixel) result into
 * NCHW, with nb = ws / ((ckk + kg) * ohw). When fewer than 2 images fit that
 * way it falls back to one GEMM per image over the column block (no staging).
 *
 * Special cases: a 1x1 stride-1 unpadded conv needs no im2col (ws is NULL);
 * a conv with one input channel per group (depthwise, or a 1-channel first
 * layer) runs as direct loops, which beat GEMMs with M = 1.
 *
 * Not here: algorithm selection by timing (the CPU has one algorithm per
 * case), Winograd/FFT. Determinism: GEMMs run on the calling thread's OpenBLAS
 * (which splits M/N, never K, for a fixed thread count); every other loop gives
 * each output plane or channel to one thread.
 *
 * First, though, each entry point offers the conv to k_conv_dnnl.c (oneDNN,
 * where the library loads: the faster kernels for most float32 shapes); what
 * it does not take runs here. */
#include "kern.h"
#include <stdio.h>
#include <stdlib.h>

typedef struct conv_geo {
  int cg, kg, khw;     /* input/output channels per group, taps */
  int64_t hw, ohw, ckk;/* input plane, output plane, column rows (cg*kh*kw) */
  int one;             /* 1x1 stride-1 unpadded: x is its own column matrix */
  int nb;              /* images per chunk */
  int batched;         /* 1: one GEMM per chunk via the staging matrix */
  float *col, *tmp;    /* parts of ws */
  float *wbuf;         /* round_w: the block of rounded weights (after the columns) */
} conv_geo;

static conv_geo conv_geo_of(const snrt_conv_t *p, float *ws) {
  conv_geo q;
  q.cg = p->c / p->group;
  q.kg = p->k / p->group;
  q.khw = p->kh * p->kw;
  q.hw = (int64_t)p->h * p->w;
  q.ohw = (int64_t)p->oh * p->ow;
  q.ckk = (int64_t)q.cg * q.khw;
  q.col = ws;
  q.tmp = NULL;
  q.wbuf = ws ? ws + snrt_conv_col_bytes(p) / 4 : NULL;
  q.nb = 0;
  q.batched = 0;
  int64_t wsf = snrt_conv_col_bytes(p) / 4;
  q.one = snrt_conv_is_1x1(p);
  if (snrt_conv_wblock(p) && !ws) {
    fprintf(stderr, "snrt: internal error: conv with rounded weights and no workspace\n");
    abort();
  }
  if (q.one || q.cg == 1)
    return q;
  if (!ws || wsf < q.ckk * q.ohw) {
    fprintf(stderr, "snrt: internal error: conv workspace of %lld bytes is too small "
            "(ws_images %d)\n", (long long)wsf * 4, p->ws_images);
    abort();
  }
  int64_t nbb = snrt_conv_gemm_images(p);   /* (snrt.h: the compiler chunks by it too) */
  if (nbb >= 2) {
    q.batched = 1;
    q.nb = (int)kern_min(nbb, p->n);
    q.tmp = ws + q.ckk * q.nb * q.ohw;
  } else {
    q.nb = (int)kern_min(wsf / (q.ckk * q.ohw), p->n);
  }
  return q;
}

/* --precision bf16|fp16 (p->round_w): a float32 weight or bias as a 16-bit
 * op reads it. */
static inline float wround(const snrt_conv_t *p, float v) {
  if (p->round_w == 1) return snrt_bf16_to_f32(snrt_f32_to_bf16(v));
  if (p->round_w == 2) return snrt_f16_to_f32(snrt_f32_to_f16(v));
  return v;
}

/* C = W B (ta 0) or W^T B (ta 1) for a (rows x cols) weight matrix W whose
 * rows lie cols apart. With round_w, W is read rounded: a block of its rows
 * (ta 0) or columns (ta 1) at a time in q->wbuf, each block's GEMM the same
 * dot products over the whole shared dimension; the blocks depend on the
 * conv's shape alone, so a call on a chunk of the batch gives the bits of a
 * call on all of it. Without: one GEMM on W itself. */
static void gemm_w(const snrt_conv_t *p, const conv_geo *q, int ta, int rows, int cols,
                   const float *w, int n, const float *b, int ldb, float *c, int ldc) {
  if (!p->round_w) {
    if (!ta) kern_sgemm(0, 0, rows, n, cols, 1.0f, w, cols, b, ldb, 0.0f, c, ldc);
    else kern_sgemm(1, 0, cols, n, rows, 1.0f, w, cols, b, ldb, 0.0f, c, ldc);
    return;
  }
  const int64_t cap = snrt_conv_wblock(p);
  float *wb = q->wbuf;
  if (!ta) {
    const int rb = (int)kern_max(1, cap / cols);
    for (int r0 = 0; r0 < rows; r0 += rb) {
      const int r = (int)kern_min(rb, rows - r0);
      const float *src = w + (int64_t)r0 * cols;
#pragma omp parallel for schedule(static) if ((int64_t)r * cols > KERN_PAR_MIN)
      for (int64_t i = 0; i < (int64_t)r * cols; i++) wb[i] = wround(p, src[i]);
      kern_sgemm(0, 0, r, n, cols, 1.0f, wb, cols, b, ldb, 0.0f, c + (int64_t)r0 * ldc, ldc);
    }
  } else {
    const int cb = (int)kern_max(1, cap / rows);
    for (int c0 = 0; c0 < cols; c0 += cb) {
      const int m = (int)kern_min(cb, cols - c0);
#pragma omp parallel for schedule(static) if ((int64_t)rows * m > KERN_PAR_MIN)
      for (int i = 0; i < rows; i++)
        for (int j = 0; j < m; j++) wb[(int64_t)i * m + j] = wround(p, w[(int64_t)i * cols + c0 + j]);
      kern_sgemm(1, 0, m, n, rows, 1.0f, wb, m, b, ldb, 0.0f, c + (int64_t)c0 * ldc, ldc);
    }
  }
}

/* Valid output columns [*o0, *o1) for a tap whose input column is
 * ox*sw + off: those with 0 <= ox*sw + off < w. */
static inline void conv_range(int off, int sw, int w, int ow, int *o0, int *o1) {
  int64_t a = kern_cdiv(-off, sw), b = kern_cdiv(w - off, sw);
  a = kern_max(0, kern_min(a, ow));
  b = kern_max(a, kern_min(b, ow));
  *o0 = (int)a;
  *o1 = (int)b;
}

/* One kernel tap (ki, kj): the input offsets it reads at output (0, 0) and
 * the output rows [oy0, oy1) and columns [ox0, ox1) whose input is inside
 * the image (the rest reads padding). Computed once per call: the divisions
 * in conv_range cost more than copying a row of a small plane. */
typedef struct conv_tap {
  int offy, offx, oy0, oy1, ox0, ox1;
  int full;  /* strides 1 and ow == w: rows [oy0, oy1) are ONE contiguous run of x */
} conv_tap;

#define CONV_TAPS_MAX 256

static void conv_taps(const snrt_conv_t *p, conv_tap *t) {
  for (int ki = 0; ki < p->kh; ki++)
    for (int kj = 0; kj < p->kw; kj++) {
      conv_tap *e = &t[ki * p->kw + kj];
      e->offy = ki * p->dh - p->pt;
      e->offx = kj * p->dw - p->pl;
      conv_range(e->offy, p->sh, p->h, p->oh, &e->oy0, &e->oy1);
      conv_range(e->offx, p->sw, p->w, p->ow, &e->ox0, &e->ox1);
      e->full = p->sw == 1 && p->sh == 1 && p->ow == p->w;
    }
}

/* The tap table on the stack, or (kernels over 16x16) on the heap. */
static conv_tap *conv_taps_get(const snrt_conv_t *p, conv_tap *stack) {
  int khw = p->kh * p->kw;
  conv_tap *t = stack;
  if (khw > CONV_TAPS_MAX) {
    t = malloc(sizeof *t * (size_t)khw);
    if (!t) {
      fprintf(stderr, "snrt: out of host memory (conv taps)\n");
      abort();
    }
  }
  conv_taps(p, t);
  return t;
}

static void conv_taps_put(conv_tap *t, conv_tap *stack) {
  if (t != stack) free(t);
}

/* One image's column row for tap e of input plane xp into cp (oh*ow floats). */
static inline void im2col_row(const snrt_conv_t *p, const conv_tap *e, const float *xp,
                              float *cp) {
  const int ow = p->ow, oy0 = e->oy0, oy1 = e->oy1, ox0 = e->ox0, ox1 = e->ox1;
  if (oy0 > 0) memset(cp, 0, sizeof(float) * (size_t)oy0 * ow);
  if (oy1 < p->oh) memset(cp + (int64_t)oy1 * ow, 0, sizeof(float) * (size_t)(p->oh - oy1) * ow);
  if (oy1 <= oy0) return;
  if (e->full) {
    /* Rows oy0..oy1-1 read x rows oy+offy at columns ox+offx: with ow == w
     * and stride 1 that is one run of x; the columns outside [ox0, ox1)
     * read the neighbouring row there and are zeroed after. */
    const int64_t n = (int64_t)(oy1 - oy0) * ow;
    const float *src = xp + (int64_t)(oy0 * p->sh + e->offy) * p->w + e->offx;
    float *dst = cp + (int64_t)oy0 * ow;
    int64_t a = 0, b = n;
    if (ox0 > 0) a = ox0;            /* the first row's head lies before src's row */
    if (ox1 < ow) b = n - (ow - ox1); /* the last row's tail lies past it */
    memcpy(dst + a, src + a, sizeof(float) * (size_t)(b - a));
    if (ox0 > 0 || ox1 < ow)
      for (int oy = oy0; oy < oy1; oy++) {
        float *row = cp + (int64_t)oy * ow;
        for (int ox = 0; ox < ox0; ox++) row[ox] = 0;
        for (int ox = ox1; ox < ow; ox++) row[ox] = 0;
      }
    return;
  }
  for (int oy = oy0; oy < oy1; oy++) {
    const float *xr = xp + (int64_t)(oy * p->sh + e->offy) * p->w + e->offx;
    float *row = cp + (int64_t)oy * ow;
    for (int ox = 0; ox < ox0; ox++) row[ox] = 0;
    if (p->sw == 1)
      memcpy(row + ox0, xr + ox0, sizeof(float) * (size_t)(ox1 - ox0));
    else
      for (int ox = ox0; ox < ox1; ox++) row[ox] = xr[(int64_t)ox * p->sw];
    for (int ox = ox1; ox < ow; ox++) row[ox] = 0;
  }
}

/* col[r][img*ohw + oy*ow + ox] for the images [i0, i0+nb) of group g.
 * Threads own rows r of col (one tap of one channel, all images). */
static void im2col(const snrt_conv_t *p, const conv_geo *q, const float *x, int i0, int nb,
                   int g, float *col) {
  const int64_t L = nb * q->ohw;
  conv_tap stack[CONV_TAPS_MAX], *t = conv_taps_get(p, stack);
#pragma omp parallel for schedule(static) if (q->ckk * L > KERN_PAR_MIN)
  for (int64_t r = 0; r < q->ckk; r++) {
    const int ci = (int)(r / q->khw);
    const conv_tap *e = &t[r % q->khw];
    const float *xp = x + ((int64_t)i0 * p->c + g * q->cg + ci) * q->hw;
    float *cp = col + r * L;
    for (int img = 0; img < nb; img++)
      im2col_row(p, e, xp + (int64_t)img * p->c * q->hw, cp + img * q->ohw);
  }
  conv_taps_put(t, stack);
}

/* dx planes of images [i0, i0+nb), group g = sum of the columns that read
 * them, taps in order. Threads own input planes. */
static void col2im(const snrt_conv_t *p, const conv_geo *q, const float *col, int i0, int nb,
                   int g, float *dx) {
  const int64_t L = nb * q->ohw;
  conv_tap stack[CONV_TAPS_MAX], *t = conv_taps_get(p, stack);
#pragma omp parallel for collapse(2) schedule(static) if (q->ckk * L > KERN_PAR_MIN)
  for (int img = 0; img < nb; img++)
    for (int ci = 0; ci < q->cg; ci++) {
      float *dp = dx + ((int64_t)(i0 + img) * p->c + g * q->cg + ci) * q->hw;
      memset(dp, 0, sizeof(float) * q->hw);
      for (int kk = 0; kk < q->khw; kk++) {
        const conv_tap *e = &t[kk];
        const float *cp = col + ((int64_t)ci * q->khw + kk) * L + img * q->ohw;
        const int ox0 = e->ox0, ox1 = e->ox1;
        for (int oy = e->oy0; oy < e->oy1; oy++) {
          float *dr = dp + (int64_t)(oy * p->sh + e->offy) * p->w + e->offx;
          const float *cr = cp + (int64_t)oy * p->ow;
          if (p->sw == 1)
            for (int ox = ox0; ox < ox1; ox++) dr[ox] += cr[ox];
          else
            for (int ox = ox0; ox < ox1; ox++) dr[(int64_t)ox * p->sw] += cr[ox];
        }
      }
    }
  conv_taps_put(t, stack);
}

/* Staging matrix tmp (kg x nb*ohw) <-> NCHW planes of group g. */
static void stage_to_nchw(const snrt_conv_t *p, const conv_geo *q, const float *tmp, int i0,
                          int nb, int g, const float *b, float *y) {
  const int64_t L = nb * q->ohw;
#pragma omp parallel for collapse(2) schedule(static) if (q->kg * L > KERN_PAR_MIN)
  for (int img = 0; img < nb; img++)
    for (int k = 0; k < q->kg; k++) {
      float *yp = y + ((int64_t)(i0 + img) * p->k + g * q->kg + k) * q->ohw;
      const float *tp = tmp + k * L + img * q->ohw;
      float bv = b ? wround(p, b[g * q->kg + k]) : 0.0f;
      for (int64_t j = 0; j < q->ohw; j++) yp[j] = tp[j] + bv;
    }
}

static void nchw_to_stage(const snrt_conv_t *p, const conv_geo *q, const float *dy, int i0,
                          int nb, int g, float *tmp) {
  const int64_t L = nb * q->ohw;
#pragma omp parallel for collapse(2) schedule(static) if (q->kg * L > KERN_PAR_MIN)
  for (int img = 0; img < nb; img++)
    for (int k = 0; k < q->kg; k++)
      memcpy(tmp + k * L + img * q->ohw,
             dy + ((int64_t)(i0 + img) * p->k + g * q->kg + k) * q->ohw,
             sizeof(float) * q->ohw);
}

static void add_bias(const snrt_conv_t *p, const conv_geo *q, const float *b, float *y) {
#pragma omp parallel for collapse(2) schedule(static) if ((int64_t)p->n * p->k * q->ohw > KERN_PAR_MIN)
  for (int img = 0; img < p->n; img++)
    for (int k = 0; k < p->k; k++) {
      float *yp = y + ((int64_t)img * p->k + k) * q->ohw, bv = wround(p, b[k]);
      for (int64_t j = 0; j < q->ohw; j++) yp[j] += bv;
    }
}

/* ---- direct loops for one input channel per group ---------------------- */

static void direct_fwd(const snrt_conv_t *p, const conv_geo *q, const float *x, const float *w,
                       const float *b, float *y) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int img = 0; img < p->n; img++)
    for (int k = 0; k < p->k; k++) {
      float *yp = y + ((int64_t)img * p->k + k) * q->ohw;
      const float *xp = x + ((int64_t)img * p->c + k / q->kg) * q->hw;
      float bv = b ? wround(p, b[k]) : 0.0f;
      for (int64_t j = 0; j < q->ohw; j++) yp[j] = bv;
      for (int ki = 0; ki < p->kh; ki++)
        for (int kj = 0; kj < p->kw; kj++) {
          float wv = wround(p, w[(int64_t)k * q->khw + ki * p->kw + kj]);
          int offx = kj * p->dw - p->pl, ox0, ox1;
          conv_range(offx, p->sw, p->w, p->ow, &ox0, &ox1);
          for (int oy = 0; oy < p->oh; oy++) {
            int iy = oy * p->sh - p->pt + ki * p->dh;
            if (iy < 0 || iy >= p->h) continue;
            const float *xr = xp + (int64_t)iy * p->w + offx;
            float *yr = yp + (int64_t)oy * p->ow;
            if (p->sw == 1)
              for (int ox = ox0; ox < ox1; ox++) yr[ox] += wv * xr[ox];
            else
              for (int ox = ox0; ox < ox1; ox++) yr[ox] += wv * xr[(int64_t)ox * p->sw];
          }
        }
    }
}

static void direct_bwd_data(const snrt_conv_t *p, const conv_geo *q, const float *dy,
                            const float *w, float *dx) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int img = 0; img < p->n; img++)
    for (int ci = 0; ci < p->c; ci++) {
      float *dp = dx + ((int64_t)img * p->c + ci) * q->hw;
      memset(dp, 0, sizeof(float) * q->hw);
      for (int k = ci * q->kg; k < (ci + 1) * q->kg; k++) {
        const float *yp = dy + ((int64_t)img * p->k + k) * q->ohw;
        for (int ki = 0; ki < p->kh; ki++)
          for (int kj = 0; kj < p->kw; kj++) {
            float wv = wround(p, w[(int64_t)k * q->khw + ki * p->kw + kj]);
            int offx = kj * p->dw - p->pl, ox0, ox1;
            conv_range(offx, p->sw, p->w, p->ow, &ox0, &ox1);
            for (int oy = 0; oy < p->oh; oy++) {
              int iy = oy * p->sh - p->pt + ki * p->dh;
              if (iy < 0 || iy >= p->h) continue;
              float *dr = dp + (int64_t)iy * p->w + offx;
              const float *yr = yp + (int64_t)oy * p->ow;
              if (p->sw == 1)
                for (int ox = ox0; ox < ox1; ox++) dr[ox] += wv * yr[ox];
              else
                for (int ox = ox0; ox < ox1; ox++) dr[(int64_t)ox * p->sw] += wv * yr[ox];
            }
          }
      }
    }
}

/* (No accumulate: the compiler never splits this sum, snrt_conv_gemm_images.) */
static void direct_bwd_filter(const snrt_conv_t *p, const conv_geo *q, const float *x,
                              const float *dy, float *dw) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int k = 0; k < p->k; k++)
    for (int t = 0; t < q->khw; t++) {
      int ki = t / p->kw, kj = t % p->kw;
      int offx = kj * p->dw - p->pl, ox0, ox1;
      conv_range(offx, p->sw, p->w, p->ow, &ox0, &ox1);
      /* Per row, KERN_LANES float lanes (fixed order, vectorized), added
       * to the double total in row order. */
      double s = 0;
      for (int img = 0; img < p->n; img++) {
        const float *xp = x + ((int64_t)img * p->c + k / q->kg) * q->hw;
        const float *yp = dy + ((int64_t)img * p->k + k) * q->ohw;
        for (int oy = 0; oy < p->oh; oy++) {
          int iy = oy * p->sh - p->pt + ki * p->dh;
          if (iy < 0 || iy >= p->h) continue;
          const float *xr = xp + (int64_t)iy * p->w + offx;
          const float *yr = yp + (int64_t)oy * p->ow;
          float acc[KERN_LANES] = {0};
          int ox = ox0;
          if (p->sw == 1)
            for (; ox + KERN_LANES <= ox1; ox += KERN_LANES)
              for (int l = 0; l < KERN_LANES; l++) acc[l] += yr[ox + l] * xr[ox + l];
          for (int l = 0; ox < ox1; ox++, l = (l + 1) % KERN_LANES)
            acc[l] += yr[ox] * xr[(int64_t)ox * p->sw];
          float rs = 0;
          for (int l = 0; l < KERN_LANES; l++) rs += acc[l];
          s += rs;
        }
      }
      dw[(int64_t)k * q->khw + t] = (float)s;
    }
}

/* ---- the API ------------------------------------------------------------ */

void snrt_conv_fwd(snrt_ctx *c, const snrt_conv_t *p, const float *x, const float *w,
                   const float *b, float *y, float *ws) {
  (void)c;
  if (snrt_conv_dnnl_fwd(p, x, w, b, y)) return;
  conv_geo q = conv_geo_of(p, ws);
  if (q.cg == 1) {
    direct_fwd(p, &q, x, w, b, y);
    return;
  }
  if (q.one) {
    for (int img = 0; img < p->n; img++)
      for (int g = 0; g < p->group; g++)
        gemm_w(p, &q, 0, q.kg, q.cg, w + (int64_t)g * q.kg * q.ckk, (int)q.hw,
               x + ((int64_t)img * p->c + g * q.cg) * q.hw, (int)q.hw,
               y + ((int64_t)img * p->k + g * q.kg) * q.ohw, (int)q.ohw);
    if (b) add_bias(p, &q, b, y);
    return;
  }
  for (int i0 = 0; i0 < p->n; i0 += q.nb) {
    int cnt = (int)kern_min(q.nb, p->n - i0);
    int L = (int)(cnt * q.ohw);
    for (int g = 0; g < p->group; g++) {
      const float *wg = w + (int64_t)g * q.kg * q.ckk;
      im2col(p, &q, x, i0, cnt, g, q.col);
      if (q.batched) {
        gemm_w(p, &q, 0, q.kg, (int)q.ckk, wg, L, q.col, L, q.tmp, L);
        stage_to_nchw(p, &q, q.tmp, i0, cnt, g, b, y);
      } else {
        for (int img = 0; img < cnt; img++)
          gemm_w(p, &q, 0, q.kg, (int)q.ckk, wg, (int)q.ohw, q.col + img * q.ohw, L,
                 y + ((int64_t)(i0 + img) * p->k + g * q.kg) * q.ohw, (int)q.ohw);
      }
    }
  }
  if (!q.batched && b) add_bias(p, &q, b, y);
}

void snrt_conv_bwd_data(snrt_ctx *c, const snrt_conv_t *p, const float *dy, const float *w,
                        float *dx, float *ws) {
  (void)c;
  if (snrt_conv_dnnl_bwd_data(p, dy, w, dx)) return;
  conv_geo q = conv_geo_of(p, ws);
  if (q.cg == 1) {
    direct_bwd_data(p, &q, dy, w, dx);
    return;
  }
  if (q.one) {
    for (int img = 0; img < p->n; img++)
      for (int g = 0; g < p->group; g++)
        gemm_w(p, &q, 1, q.kg, q.cg, w + (int64_t)g * q.kg * q.ckk, (int)q.hw,
               dy + ((int64_t)img * p->k + g * q.kg) * q.ohw, (int)q.ohw,
               dx + ((int64_t)img * p->c + g * q.cg) * q.hw, (int)q.hw);
    return;
  }
  for (int i0 = 0; i0 < p->n; i0 += q.nb) {
    int cnt = (int)kern_min(q.nb, p->n - i0);
    int L = (int)(cnt * q.ohw);
    for (int g = 0; g < p->group; g++) {
      const float *wg = w + (int64_t)g * q.kg * q.ckk;
      if (q.batched) {
        nchw_to_stage(p, &q, dy, i0, cnt, g, q.tmp);
        gemm_w(p, &q, 1, q.kg, (int)q.ckk, wg, L, q.tmp, L, q.col, L);
      } else {
        for (int img = 0; img < cnt; img++)
          gemm_w(p, &q, 1, q.kg, (int)q.ckk, wg, (int)q.ohw,
                 dy + ((int64_t)(i0 + img) * p->k + g * q.kg) * q.ohw, (int)q.ohw,
                 q.col + img * q.ohw, L);
      }
      col2im(p, &q, q.col, i0, cnt, g, dx);
    }
  }
}

void snrt_conv_bwd_filter(snrt_ctx *c, const snrt_conv_t *p, const float *x, const float *dy,
                          float *dw, float *ws) {
  (void)c;
  if (snrt_conv_dnnl_bwd_filter(p, x, dy, dw)) return;
  conv_geo q = conv_geo_of(p, ws);
  if (q.cg == 1) {
    direct_bwd_filter(p, &q, x, dy, dw);
    return;
  }
  if (q.one) {
    for (int g = 0; g < p->group; g++)
      for (int img = 0; img < p->n; img++)
        kern_sgemm(0, 1, q.kg, q.cg, (int)q.hw, 1.0f,
                    dy + ((int64_t)img * p->k + g * q.kg) * q.ohw, (int)q.ohw,
                    x + ((int64_t)img * p->c + g * q.cg) * q.hw, (int)q.hw,
                    img == 0 && !p->accumulate ? 0.0f : 1.0f, dw + (int64_t)g * q.kg * q.ckk,
                    (int)q.ckk);
    return;
  }
  for (int i0 = 0; i0 < p->n; i0 += q.nb) {
    int cnt = (int)kern_min(q.nb, p->n - i0);
    int L = (int)(cnt * q.ohw);
    for (int g = 0; g < p->group; g++) {
      float *dwg = dw + (int64_t)g * q.kg * q.ckk;
      im2col(p, &q, x, i0, cnt, g, q.col);
      if (q.batched) {
        nchw_to_stage(p, &q, dy, i0, cnt, g, q.tmp);
        kern_sgemm(0, 1, q.kg, (int)q.ckk, L, 1.0f, q.tmp,
                    L, q.col, L, i0 == 0 && !p->accumulate ? 0.0f : 1.0f, dwg, (int)q.ckk);
      } else {
        for (int img = 0; img < cnt; img++)
          kern_sgemm(0, 1, q.kg, (int)q.ckk, (int)q.ohw,
                      1.0f, dy + ((int64_t)(i0 + img) * p->k + g * q.kg) * q.ohw, (int)q.ohw,
                      q.col + img * q.ohw, L, (i0 == 0 && img == 0 && !p->accumulate) ? 0.0f : 1.0f, dwg,
                      (int)q.ckk);
      }
    }
  }
}

void snrt_conv_bwd_bias(snrt_ctx *c, const snrt_conv_t *p, const float *dy, float *db) {
  (void)c;
  const int64_t ohw = (int64_t)p->oh * p->ow;
#pragma omp parallel for schedule(static) if ((int64_t)p->n * p->k * ohw > KERN_PAR_MIN)
  for (int k = 0; k < p->k; k++) {
    double acc[KERN_LANES] = {0};
    for (int img = 0; img < p->n; img++) kern_lsum(acc, dy + ((int64_t)img * p->k + k) * ohw, ohw);
    db[k] = (float)kern_lanes_total(acc);
  }
}
