/* k_pool.c — max and average pooling (and GlobalAveragePool, which is an
 * average pool whose window is the whole plane), forward and backward, NCHW.
 *
 * Semantics are PyTorch's: max pool scans its window row by row and keeps the
 * first maximum (a later value replaces it only if strictly greater, or NaN),
 * so backward routes the gradient to that same element (recomputed from x:
 * no index tensor is stored). Average pool divides by the window clipped to
 * the padded input (never past pb/pr) when count_include_pad, else by the
 * window clipped to the input; ceil_mode windows are simply clipped.
 *
 * Not here: indices output of MaxPool (not in our op set). Each (image,
 * channel) plane belongs to one thread, so results are deterministic. */
#include "kern.h"

/* First maximum of the window of output (oy, ox); -1 when the window holds no
 * input element. */
static inline int64_t max_index(const snrt_pool_t *p, const float *xp, int oy, int ox) {
  int64_t best_i = -1;
  float best = -INFINITY;
  int hs = oy * p->sh - p->pt, ws = ox * p->sw - p->pl;
  for (int ki = 0; ki < p->kh; ki++) {
    int iy = hs + ki * p->dh;
    if (iy < 0 || iy >= p->h) continue;
    for (int kj = 0; kj < p->kw; kj++) {
      int ix = ws + kj * p->dw;
      if (ix < 0 || ix >= p->w) continue;
      int64_t i = (int64_t)iy * p->w + ix;
      float v = xp[i];
      if (v > best || isnan(v) || best_i < 0) {
        best = v;
        best_i = i;
      }
    }
  }
  return best_i;
}

/* The outputs whose windows lie wholly inside the input: rows [*y0, *y1) and
 * columns [*x0, *x1) (empty ranges where none). There the general max pool
 * runs tap by tap over a whole output row (each tap one vectorizable loop of
 * selects, in the window's row order: the first-maximum rule of max_index),
 * and only the border outputs take max_index. */
static void inner_range(int o, int s, int pad, int k, int d, int in, int *a, int *b) {
  int lo = 0;
  while (lo < o && lo * s - pad < 0) lo++;
  int hi = lo;
  while (hi < o && hi * s - pad + (k - 1) * d < in) hi++;
  *a = lo;
  *b = hi;
}

#define POOL_ROW 256   /* outputs per block of a row (the index buffer) */

/* One block [x0, x1) of output row oy, all windows inside: the maximum of
 * output ox into yr[ox - x0] and, when bi != NULL, its tap index
 * (ki * kw + kj) into bi[ox - x0]. */
static void max_row_inner(const snrt_pool_t *p, const float *xp, int oy, int x0, int x1,
                          float *restrict yr, int *restrict bi) {
  const int hs = oy * p->sh - p->pt, sw = p->sw;
  const int64_t base = (int64_t)hs * p->w - p->pl;
  const float *r = xp + base;
  for (int ox = x0; ox < x1; ox++) yr[ox - x0] = r[(int64_t)ox * sw];
  if (bi)
    for (int ox = x0; ox < x1; ox++) bi[ox - x0] = 0;
  for (int ki = 0; ki < p->kh; ki++)
    for (int kj = 0; kj < p->kw; kj++) {
      if (ki == 0 && kj == 0) continue;
      const float *t = xp + base + (int64_t)ki * p->dh * p->w + (int64_t)kj * p->dw;
      const int tap = ki * p->kw + kj;
      if (bi) {
        for (int ox = x0; ox < x1; ox++) {
          const float v = t[(int64_t)ox * sw], b = yr[ox - x0];
          const int u = (v > b) | (v != v);
          yr[ox - x0] = u ? v : b;
          bi[ox - x0] = u ? tap : bi[ox - x0];
        }
      } else {
        for (int ox = x0; ox < x1; ox++) {
          const float v = t[(int64_t)ox * sw], b = yr[ox - x0];
          yr[ox - x0] = ((v > b) | (v != v)) ? v : b;
        }
      }
    }
}

/* The common 2x2 stride-2 window with no padding, every window inside the
 * input: the same first-maximum rule as max_index, on the four elements in
 * row order, with no bounds checks. Index 0..3 = (0,0) (0,1) (1,0) (1,1). */
static inline int pool22(const snrt_pool_t *p) {
  return p->kh == 2 && p->kw == 2 && p->sh == 2 && p->sw == 2 && p->pt == 0 && p->pl == 0 &&
         p->dh == 1 && p->dw == 1 && 2 * p->oh <= p->h && 2 * p->ow <= p->w;
}

/* Written with selects, not branches, so loops over ox vectorize. */
static inline int max4(const float *r0, const float *r1, float *out) {
  float best = r0[0], v;
  int bi = 0, t;
  v = r0[1]; t = (v > best) | (v != v); best = t ? v : best; bi = t ? 1 : bi;
  v = r1[0]; t = (v > best) | (v != v); best = t ? v : best; bi = t ? 2 : bi;
  v = r1[1]; t = (v > best) | (v != v); best = t ? v : best; bi = t ? 3 : bi;
  *out = best;
  return bi;
}

void snrt_maxpool_fwd(snrt_ctx *c, const snrt_pool_t *p, const float *x, float *y) {
  (void)c;
  const int64_t hw = (int64_t)p->h * p->w, ohw = (int64_t)p->oh * p->ow;
  const int64_t planes = (int64_t)p->n * p->c;
  if (pool22(p)) {
#pragma omp parallel for schedule(static) if (planes * hw > KERN_PAR_MIN)
    for (int64_t pl = 0; pl < planes; pl++)
      for (int oy = 0; oy < p->oh; oy++) {
        const float *r0 = x + pl * hw + (int64_t)2 * oy * p->w, *r1 = r0 + p->w;
        float *yr = y + pl * ohw + (int64_t)oy * p->ow;
        for (int ox = 0; ox < p->ow; ox++) max4(r0 + 2 * ox, r1 + 2 * ox, &yr[ox]);
      }
    return;
  }
  int y0, y1, x0, x1;
  inner_range(p->oh, p->sh, p->pt, p->kh, p->dh, p->h, &y0, &y1);
  inner_range(p->ow, p->sw, p->pl, p->kw, p->dw, p->w, &x0, &x1);
#pragma omp parallel for schedule(static) if (planes * hw > KERN_PAR_MIN)
  for (int64_t pl = 0; pl < planes; pl++) {
    const float *xp = x + pl * hw;
    float *yp = y + pl * ohw;
    for (int oy = 0; oy < p->oh; oy++) {
      float *yr = yp + (int64_t)oy * p->ow;
      const int inner = oy >= y0 && oy < y1 && x0 < x1;
      if (inner) max_row_inner(p, xp, oy, x0, x1, yr + x0, NULL);
      for (int ox = 0; ox < p->ow; ox++) {
        if (inner && ox == x0) ox = x1;
        if (ox >= p->ow) break;
        int64_t i = max_index(p, xp, oy, ox);
        yr[ox] = i < 0 ? -INFINITY : xp[i];
      }
    }
  }
}

void snrt_maxpool_bwd(snrt_ctx *c, const snrt_pool_t *p, const float *x, const float *dy,
                      float *dx) {
  (void)c;
  const int64_t hw = (int64_t)p->h * p->w, ohw = (int64_t)p->oh * p->ow;
  const int64_t planes = (int64_t)p->n * p->c;
  if (pool22(p)) {
    /* Windows do not overlap: each covered input gets its gradient or 0,
     * written without branches; only an odd last row/column needs the
     * memset. */
    const int cover = 2 * p->oh == p->h && 2 * p->ow == p->w;
#pragma omp parallel for schedule(static) if (planes * hw > KERN_PAR_MIN)
    for (int64_t pl = 0; pl < planes; pl++) {
      float *dp = dx + pl * hw;
      if (!cover) memset(dp, 0, sizeof(float) * hw);
      for (int oy = 0; oy < p->oh; oy++) {
        const float *restrict r0 = x + pl * hw + (int64_t)2 * oy * p->w;
        const float *restrict r1 = r0 + p->w;
        const float *restrict gr = dy + pl * ohw + (int64_t)oy * p->ow;
        float *restrict d0 = dp + (int64_t)2 * oy * p->w;
        float *restrict d1 = d0 + p->w;
        const int ow = p->ow;
        for (int ox = 0; ox < ow; ox++) {
          /* max4's rule unrolled: t1..t3 say whether b, c, d replace the
           * best so far; the gradient goes where the last replacement (or a)
           * is, the others get +0 (bit masks: no branches, so it vectorizes). */
          const float a = r0[2 * ox], b = r0[2 * ox + 1], c2 = r1[2 * ox], d = r1[2 * ox + 1];
          uint32_t g;
          memcpy(&g, &gr[ox], 4);
          const uint32_t t1 = (b > a) | (b != b);
          const float m1 = t1 ? b : a;
          const uint32_t t2 = (c2 > m1) | (c2 != c2);
          const float m2 = t2 ? c2 : m1;
          const uint32_t t3 = (d > m2) | (d != d);
          const uint32_t w3 = t3, w2 = t2 & ~t3, w1 = t1 & ~t2 & ~t3, w0 = ~(t1 | t2 | t3) & 1;
          uint32_t o0 = g & -w0, o1 = g & -w1, o2 = g & -w2, o3 = g & -w3;
          memcpy(&d0[2 * ox], &o0, 4);
          memcpy(&d0[2 * ox + 1], &o1, 4);
          memcpy(&d1[2 * ox], &o2, 4);
          memcpy(&d1[2 * ox + 1], &o3, 4);
        }
      }
    }
    return;
  }
  int y0, y1, x0, x1;
  inner_range(p->oh, p->sh, p->pt, p->kh, p->dh, p->h, &y0, &y1);
  inner_range(p->ow, p->sw, p->pl, p->kw, p->dw, p->w, &x0, &x1);
  /* Gradients are added in the order of the outputs (row by row), inner
   * blocks and border outputs alike, so an input in several windows sums
   * in one fixed order. */
#pragma omp parallel for schedule(static) if (planes * hw > KERN_PAR_MIN)
  for (int64_t pl = 0; pl < planes; pl++) {
    const float *xp = x + pl * hw, *gp = dy + pl * ohw;
    float *dp = dx + pl * hw;
    float best[POOL_ROW];
    int bi[POOL_ROW];
    memset(dp, 0, sizeof(float) * hw);
    for (int oy = 0; oy < p->oh; oy++) {
      const float *gr = gp + (int64_t)oy * p->ow;
      const int inner = oy >= y0 && oy < y1 && x0 < x1;
      for (int ox = 0; ox < p->ow;) {
        if (inner && ox >= x0 && ox < x1) {
          const int e = ox + POOL_ROW < x1 ? ox + POOL_ROW : x1;
          max_row_inner(p, xp, oy, ox, e, best, bi);
          const int64_t row = (int64_t)(oy * p->sh - p->pt) * p->w - p->pl;
          for (int o = ox; o < e; o++) {
            const int tap = bi[o - ox], ki = tap / p->kw, kj = tap - ki * p->kw;
            dp[row + (int64_t)o * p->sw + (int64_t)ki * p->dh * p->w + (int64_t)kj * p->dw] += gr[o];
          }
          ox = e;
          continue;
        }
        int64_t i = max_index(p, xp, oy, ox);
        if (i >= 0) dp[i] += gr[ox];
        ox++;
      }
    }
  }
}

/* Window of output (oy, ox) clipped to the input, and its divisor. */
typedef struct avg_win { int h0, h1, w0, w1; float div; } avg_win;

static inline avg_win avg_window(const snrt_pool_t *p, int oy, int ox) {
  avg_win a;
  int hs = oy * p->sh - p->pt, ws = ox * p->sw - p->pl;
  int he = hs + p->kh, we = ws + p->kw;
  if (he > p->h + p->pb) he = p->h + p->pb;
  if (we > p->w + p->pr) we = p->w + p->pr;
  int padded = (he - hs) * (we - ws);
  a.h0 = hs < 0 ? 0 : hs;
  a.w0 = ws < 0 ? 0 : ws;
  a.h1 = he > p->h ? p->h : he;
  a.w1 = we > p->w ? p->w : we;
  int inside = (a.h1 - a.h0) * (a.w1 - a.w0);
  a.div = (float)(p->count_include_pad ? padded : inside);
  return a;
}

void snrt_avgpool_fwd(snrt_ctx *c, const snrt_pool_t *p, const float *x, float *y) {
  (void)c;
  const int64_t hw = (int64_t)p->h * p->w, ohw = (int64_t)p->oh * p->ow;
  const int64_t planes = (int64_t)p->n * p->c;
#pragma omp parallel for schedule(static) if (planes * hw > KERN_PAR_MIN)
  for (int64_t pl = 0; pl < planes; pl++) {
    const float *xp = x + pl * hw;
    float *yp = y + pl * ohw;
    for (int oy = 0; oy < p->oh; oy++)
      for (int ox = 0; ox < p->ow; ox++) {
        avg_win a = avg_window(p, oy, ox);
        float s = 0;
        for (int iy = a.h0; iy < a.h1; iy++)
          for (int ix = a.w0; ix < a.w1; ix++) s += xp[(int64_t)iy * p->w + ix];
        yp[(int64_t)oy * p->ow + ox] = s / a.div;
      }
  }
}

void snrt_avgpool_bwd(snrt_ctx *c, const snrt_pool_t *p, const float *dy, float *dx) {
  (void)c;
  const int64_t hw = (int64_t)p->h * p->w, ohw = (int64_t)p->oh * p->ow;
  const int64_t planes = (int64_t)p->n * p->c;
#pragma omp parallel for schedule(static) if (planes * hw > KERN_PAR_MIN)
  for (int64_t pl = 0; pl < planes; pl++) {
    const float *gp = dy + pl * ohw;
    float *dp = dx + pl * hw;
    memset(dp, 0, sizeof(float) * hw);
    for (int oy = 0; oy < p->oh; oy++)
      for (int ox = 0; ox < p->ow; ox++) {
        avg_win a = avg_window(p, oy, ox);
        float g = gp[(int64_t)oy * p->ow + ox] / a.div;
        for (int iy = a.h0; iy < a.h1; iy++)
          for (int ix = a.w0; ix < a.w1; ix++) dp[(int64_t)iy * p->w + ix] += g;
      }
  }
}
