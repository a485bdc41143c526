/* k_elementwise.c — elementwise kernels on the CPU: activations and their
 * gradients, broadcasting binary ops and their gradients, reduce/expand,
 * bias add and its gradient, y = a + b, fill, copy, dropout.
 *
 * Broadcasting works on a collapsed shape: dims of size 1 are dropped and
 * neighbouring dims that are contiguous for every operand are merged, so the
 * common cases (same shape, per-channel operand) become one or two loops.
 * A gradient onto a broadcast operand is a reduction: each element of the
 * small operand is owned by one thread, which sums its big-space elements in
 * a fixed order (double accumulator): deterministic for any thread count.
 *
 * Not here: loss functions (k_loss.c), shape ops (k_shape.c). */
#include "kern.h"

double kern_sum(const float *x, int64_t n) {
  double part[KERN_SUM_BLOCKS];
  int64_t bs = (n + KERN_SUM_BLOCKS - 1) / KERN_SUM_BLOCKS;
#pragma omp parallel for schedule(static) if (n > KERN_PAR_MIN)
  for (int b = 0; b < KERN_SUM_BLOCKS; b++) {
    double s = 0;
    int64_t e = kern_min(n, (b + 1) * bs);
    for (int64_t i = b * bs; i < e; i++) s += x[i];
    part[b] = s;
  }
  double s = 0;
  for (int b = 0; b < KERN_SUM_BLOCKS; b++) s += part[b];
  return s;
}

/* ---- unary ---------------------------------------------------------------- */

void snrt_unary_fwd(snrt_ctx *c, const snrt_unary_t *p, const float *x, float *y) {
  (void)c;
  const int64_t n = p->n;
  const float al = p->alpha, lo = p->lo, hi = p->hi;
  switch (p->kind) {
  case SNRT_RELU:
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0.0f;
    break;
  case SNRT_LEAKY_RELU:
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : x[i] * al;
    break;
  case SNRT_SIGMOID:   /* kern_expf: the loop vectorizes (SiLU = x sigmoid(x) in Llama) */
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN / 8)
    for (int64_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + kern_expf(-x[i]));
    break;
  case SNRT_TANH:
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN / 8)
    for (int64_t i = 0; i < n; i++) y[i] = kern_tanhf(x[i]);
    break;
  case SNRT_CLIP:
    /* PyTorch's clamp: NaN passes through. */
#pragma omp parallel for schedule(static) if (n > KERN_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
      float v = x[i];
      y[i] = v < lo ? lo : (v > hi ? hi : v);
    }
    break;
  }
}

void snrt_unary_bwd(snrt_ctx *c, const snrt_unary_t *p, const float *x, const float *y,
                    const float *dy, float *dx) {
  (void)c;
  const int64_t n = p->n;
  const float al = p->alpha, lo = p->lo, hi = p->hi;
  /* Relu/LeakyRelu/Clip decide on x; y gives the same decision (y > 0 iff
   * x > 0 for alpha >= 0; lo < y < hi iff lo < x < hi), so either works. */
  const float *d = x ? x : y;
  switch (p->kind) {
  case SNRT_RELU:
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
    for (int64_t i = 0; i < n; i++) dx[i] = d[i] > 0 ? dy[i] : 0.0f;
    break;
  case SNRT_LEAKY_RELU:
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
    for (int64_t i = 0; i < n; i++) dx[i] = d[i] > 0 ? dy[i] : dy[i] * al;
    break;
  case SNRT_CLIP:
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
    for (int64_t i = 0; i < n; i++) dx[i] = (d[i] > lo && d[i] < hi) ? dy[i] : 0.0f;
    break;
  case SNRT_SIGMOID:
    if (y) {
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
      for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
    } else {
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN / 8)
      for (int64_t i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + kern_expf(-x[i]));
        dx[i] = dy[i] * s * (1.0f - s);
      }
    }
    break;
  case SNRT_TANH:
    /* Two loops, not `y ? y[i] : kern_tanhf(x[i])`: gcc if-converts that
     * select and computes tanh for every element even when y is saved. */
    if (y) {
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
      for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
    } else {
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN / 8)
      for (int64_t i = 0; i < n; i++) {
        float t = kern_tanhf(x[i]);
        dx[i] = dy[i] * (1.0f - t * t);
      }
    }
    break;
  }
}

/* ---- broadcast shapes ------------------------------------------------------ */

/* Up to 3 operands in the index space of dims: s[0] is the contiguous big
 * tensor, s[1], s[2] the operands' strides (0 where broadcast). */
typedef struct bshape {
  int rank;
  int64_t d[SNRT_MAX_RANK];
  int64_t s[3][SNRT_MAX_RANK];
} bshape;

static bshape bshape_of(int rank, const int64_t *dims, const int64_t *s1, const int64_t *s2) {
  bshape b;
  int64_t st = 1, big[SNRT_MAX_RANK];
  for (int i = rank - 1; i >= 0; i--) {
    big[i] = st;
    st *= dims[i];
  }
  b.rank = 0;
  for (int i = 0; i < rank; i++) {
    if (dims[i] == 1) continue;
    int64_t o[3] = {big[i], s1 ? s1[i] : 0, s2 ? s2[i] : 0};
    int r = b.rank;
    if (r > 0 && o[0] * dims[i] == b.s[0][r - 1] && o[1] * dims[i] == b.s[1][r - 1] &&
        o[2] * dims[i] == b.s[2][r - 1]) {
      b.d[r - 1] *= dims[i];
      for (int k = 0; k < 3; k++) b.s[k][r - 1] = o[k];
      continue;
    }
    b.d[r] = dims[i];
    for (int k = 0; k < 3; k++) b.s[k][r] = o[k];
    b.rank++;
  }
  if (b.rank == 0) {
    b.rank = 1;
    b.d[0] = 1;
    for (int k = 0; k < 3; k++) b.s[k][0] = 0;
  }
  return b;
}

/* Offsets of the operands at the start of row r (all dims but the last). */
static inline void bshape_row(const bshape *b, int64_t r, int64_t o[3]) {
  o[0] = o[1] = o[2] = 0;
  for (int d = b->rank - 2; d >= 0; d--) {
    int64_t i = r % b->d[d];
    r /= b->d[d];
    for (int k = 0; k < 3; k++) o[k] += i * b->s[k][d];
  }
}

static inline float bin_op(int kind, float a, float b) {
  switch (kind) {
  case SNRT_ADD: return a + b;
  case SNRT_SUB: return a - b;
  case SNRT_MUL: return a * b;
  case SNRT_MIN: return a < b || a != a ? a : b;
  case SNRT_MAX: return a > b || a != a ? a : b;
  default: return a / b;
  }
}

/* One flat run (the shapes collapse to one dimension: equal shapes, or a
 * scalar operand): the rows loop below would have one row and one thread,
 * so the run is split across the threads here, one loop per kind and
 * operand pattern (same per-element arithmetic as bin_op: same bits). */
#define FLAT_LOOP(n, body)                                                     \
  _Pragma("omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)")     \
  for (int64_t j = 0; j < n; j++) body
static bool binary_fwd_flat(int kind, int64_t n, const float *a, int64_t ia, const float *b,
                            int64_t ib, float *y) {
  if (kind == SNRT_MIN || kind == SNRT_MAX || !((ia == 1 && ib == 1) || (ia == 1 && ib == 0) ||
                                                (ia == 0 && ib == 1)))
    return false;
  if (ia == 1 && ib == 1) {
    if (kind == SNRT_ADD) FLAT_LOOP(n, y[j] = a[j] + b[j];)
    else if (kind == SNRT_SUB) FLAT_LOOP(n, y[j] = a[j] - b[j];)
    else if (kind == SNRT_MUL) FLAT_LOOP(n, y[j] = a[j] * b[j];)
    else FLAT_LOOP(n, y[j] = a[j] / b[j];)
  } else if (ia == 1) {
    const float v = b[0];
    if (kind == SNRT_ADD) FLAT_LOOP(n, y[j] = a[j] + v;)
    else if (kind == SNRT_SUB) FLAT_LOOP(n, y[j] = a[j] - v;)
    else if (kind == SNRT_MUL) FLAT_LOOP(n, y[j] = a[j] * v;)
    else FLAT_LOOP(n, y[j] = a[j] / v;)
  } else {
    const float v = a[0];
    if (kind == SNRT_ADD) FLAT_LOOP(n, y[j] = v + b[j];)
    else if (kind == SNRT_SUB) FLAT_LOOP(n, y[j] = v - b[j];)
    else if (kind == SNRT_MUL) FLAT_LOOP(n, y[j] = v * b[j];)
    else FLAT_LOOP(n, y[j] = v / b[j];)
  }
  return true;
}

void snrt_binary_fwd(snrt_ctx *c, const snrt_binary_t *p, const float *a, const float *b, float *y) {
  (void)c;
  bshape s = bshape_of(p->rank, p->dims, p->sa, p->sb);
  const int64_t inner = s.d[s.rank - 1], rows = p->n / (inner ? inner : 1);
  const int64_t ia = s.s[1][s.rank - 1], ib = s.s[2][s.rank - 1];
  const int kind = p->kind;
  if (s.rank == 1 && binary_fwd_flat(kind, inner, a, ia, b, ib, y)) return;
#pragma omp parallel for schedule(static) if (p->n > KERN_PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    int64_t o[3];
    bshape_row(&s, r, o);
    const float *ap = a + o[1], *bp = b + o[2];
    float *yp = y + o[0];
    if (ia == 1 && ib == 1)
      for (int64_t j = 0; j < inner; j++) yp[j] = bin_op(kind, ap[j], bp[j]);
    else if (ia == 1 && ib == 0)
      for (int64_t j = 0; j < inner; j++) yp[j] = bin_op(kind, ap[j], bp[0]);
    else if (ia == 0 && ib == 1)
      for (int64_t j = 0; j < inner; j++) yp[j] = bin_op(kind, ap[0], bp[j]);
    else
      for (int64_t j = 0; j < inner; j++) yp[j] = bin_op(kind, ap[j * ia], bp[j * ib]);
  }
}

/* Gradient of a OP b with respect to operand `which` (0: a, 1: b) at one
 * element, times the incoming gradient g. */
static inline float bin_grad(int kind, int which, float g, float a, float b) {
  switch (kind) {
  case SNRT_ADD: return g;
  case SNRT_SUB: return which ? -g : g;
  case SNRT_MUL: return which ? g * a : g * b;
  case SNRT_MIN: case SNRT_MAX: {
    float mine = which ? b : a, other = which ? a : b;
    if (mine == other) return 0.5f * g;
    return (kind == SNRT_MAX) == (mine > other) ? g : 0.0f;
  }
  default: return which ? -g * a / (b * b) : g / b;
  }
}

/* out[small] = sum over the big elements that map to it of
 * bin_grad(kind, which, dy, a, b); the small operand is operand 1+which of s.
 * Each small element is owned by one thread; the big elements are visited in
 * index order (an odometer over the reduced dims). */
/* The common broadcast of a bias or a scale over rows: (rows, C) against
 * (C), reduced over the rows. The general loop below walks each column down
 * the rows (a stride of C floats per element); here each thread takes a
 * block of columns and adds the rows in order into one float per column:
 * the same additions in the same order as the general loop's `part` (one
 * reduced dimension), so the same bits. */
static bool bin_grad_reduce_rows(const bshape *s, int kind, int which, const float *dy,
                                 const float *a, const float *b, float scale, float *out) {
  const int x = 1 + which, o = 2 - which;
  if (s->rank != 2 || scale != 1.0f || s->s[x][0] != 0 || s->s[x][1] != 1 ||
      s->s[0][1] != 1 || s->s[0][0] != s->d[1])
    return false;
  const float *other = which ? a : b;
  if (kind == SNRT_MUL && (!other || s->s[o][1] != 1 || s->s[o][0] != s->d[1])) return false;
  if (kind != SNRT_ADD && kind != SNRT_SUB && kind != SNRT_MUL) return false;
  const int64_t rows = s->d[0], C = s->d[1];
  enum { BLK = 64 };
  const float sg = kind == SNRT_SUB && which ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static) if (rows * C > KERN_PAR_MIN)
  for (int64_t c0 = 0; c0 < C; c0 += BLK) {
    const int64_t w = C - c0 < BLK ? C - c0 : BLK;
    float acc[BLK];
    for (int64_t j = 0; j < w; j++) acc[j] = 0.0f;
    for (int64_t r = 0; r < rows; r++) {
      const float *g = dy + r * C + c0;
      if (kind == SNRT_MUL) {
        const float *v = other + r * C + c0;
#pragma omp simd
        for (int64_t j = 0; j < w; j++) acc[j] += g[j] * v[j];
      } else if (sg < 0) {
#pragma omp simd
        for (int64_t j = 0; j < w; j++) acc[j] += -g[j];
      } else {
#pragma omp simd
        for (int64_t j = 0; j < w; j++) acc[j] += g[j];
      }
    }
    for (int64_t j = 0; j < w; j++) out[c0 + j] = acc[j];
  }
  return true;
}

static void bin_grad_reduce(const bshape *s, int kind, int which, int64_t nsmall, const float *dy,
                            const float *a, const float *b, float scale, float *out) {
  const int x = 1 + which;
  if (dy && bin_grad_reduce_rows(s, kind, which, dy, a, b, scale, out)) return;
  int kept[SNRT_MAX_RANK], red[SNRT_MAX_RANK], nk = 0, nr = 0;
  for (int d = 0; d < s->rank; d++) {
    if (s->s[x][d]) kept[nk++] = d;
    else red[nr++] = d;
  }
  int64_t total_red = 1;
  for (int i = 0; i < nr; i++) total_red *= s->d[red[i]];
#pragma omp parallel for schedule(static) if (nsmall * total_red > KERN_PAR_MIN)
  for (int64_t e = 0; e < nsmall; e++) {
    int64_t o[3] = {0, 0, 0}, r = e;
    for (int i = nk - 1; i >= 0; i--) {
      int d = kept[i];
      int64_t id = r % s->d[d];
      r /= s->d[d];
      for (int k = 0; k < 3; k++) o[k] += id * s->s[k][d];
    }
    double acc = 0;
    if (nr == 0) {
      acc = bin_grad(kind, which, dy ? dy[o[0]] : 1.0f, a ? a[o[1]] : 0, b ? b[o[2]] : 0);
    } else {
      int64_t idx[SNRT_MAX_RANK] = {0};
      const int in = red[nr - 1];
      const int64_t len = s->d[in], s0 = s->s[0][in], s1 = s->s[1][in], s2 = s->s[2][in];
      for (;;) {
        int64_t q[3] = {o[0], o[1], o[2]};
        for (int i = 0; i < nr - 1; i++)
          for (int k = 0; k < 3; k++) q[k] += idx[i] * s->s[k][red[i]];
        float part = 0;
        for (int64_t j = 0; j < len; j++)
          part += bin_grad(kind, which, dy[q[0] + j * s0], a ? a[q[1] + j * s1] : 0,
                           b ? b[q[2] + j * s2] : 0);
        acc += part;
        int i = nr - 2;
        for (; i >= 0; i--) {
          if (++idx[i] < s->d[red[i]]) break;
          idx[i] = 0;
        }
        if (i < 0) break;
      }
    }
    out[e] = (float)(acc * scale);
  }
}

/* The gradient of one flat run (see binary_fwd_flat), as bin_grad computes
 * it per element; the other operand contiguous (stride 1) or a scalar. */
static bool binary_bwd_flat(int kind, int which, int64_t n, const float *dy, const float *a,
                            int64_t ia, const float *b, int64_t ib, float *out) {
  if (kind == SNRT_ADD || (kind == SNRT_SUB && !which)) {
    FLAT_LOOP(n, out[j] = dy[j];)
    return true;
  }
  if (kind == SNRT_SUB) {
    FLAT_LOOP(n, out[j] = -dy[j];)
    return true;
  }
  if (kind == SNRT_MUL) {
    const float *o = which ? a : b;
    const int64_t io = which ? ia : ib;
    if (!o || io > 1) return false;
    if (io == 1) FLAT_LOOP(n, out[j] = dy[j] * o[j];)
    else {
      const float v = o[0];
      FLAT_LOOP(n, out[j] = dy[j] * v;)
    }
    return true;
  }
  if (kind == SNRT_DIV && !which && b && ib == 1) {
    FLAT_LOOP(n, out[j] = dy[j] / b[j];)
    return true;
  }
  if (kind == SNRT_DIV && which && a && b && ia == 1 && ib == 1) {
    FLAT_LOOP(n, out[j] = -dy[j] * a[j] / (b[j] * b[j]);)
    return true;
  }
  return false;
}

void snrt_binary_bwd(snrt_ctx *c, const snrt_binary_t *p, const float *a, const float *b,
                     const float *dy, float *da, float *db) {
  (void)c;
  bshape s = bshape_of(p->rank, p->dims, p->sa, p->sb);
  const int64_t inner = s.d[s.rank - 1], rows = p->n / (inner ? inner : 1);
  float *outs[2] = {da, db};
  const int64_t ns[2] = {p->na, p->nb};
  for (int which = 0; which < 2; which++) {
    float *out = outs[which];
    if (!out) continue;
    const int x = 1 + which;
    if (ns[which] != p->n) {
      bin_grad_reduce(&s, p->kind, which, ns[which], dy, a, b, 1.0f, out);
      continue;
    }
    /* Not broadcast: one gradient element per output element. Add and Sub
     * read neither input (the emitter passes NULL for them). */
    const int64_t ia = s.s[1][s.rank - 1], ib = s.s[2][s.rank - 1], ix = s.s[x][s.rank - 1];
    const int kind = p->kind;
    if (s.rank == 1 && ix == 1 && binary_bwd_flat(kind, which, inner, dy, a, ia, b, ib, out))
      continue;
    if (kind == SNRT_ADD || kind == SNRT_SUB) {
      const float sg = (kind == SNRT_SUB && which) ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static) if (p->n > KERN_PAR_MIN)
      for (int64_t r = 0; r < rows; r++) {
        int64_t o[3];
        bshape_row(&s, r, o);
        for (int64_t j = 0; j < inner; j++) out[o[x] + j * ix] = sg * dy[o[0] + j];
      }
      continue;
    }
#pragma omp parallel for schedule(static) if (p->n > KERN_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
      int64_t o[3];
      bshape_row(&s, r, o);
      for (int64_t j = 0; j < inner; j++)
        out[o[x] + j * ix] = bin_grad(kind, which, dy[o[0] + j], a ? a[o[1] + j * ia] : 0.0f,
                                      b ? b[o[2] + j * ib] : 0.0f);
    }
  }
}

/* ---- reduce / expand --------------------------------------------------------- */

/* ReduceMax / ReduceL2 and their gradients: each small element owned by one
 * thread, which visits its big elements in index order. */
static void reduce_groups(const snrt_reduce_t *p, const float *x, const float *y, const float *dy,
                          float *out, int bwd) {
  bshape s = bshape_of(p->rank, p->dims, p->ss, NULL);
  int kept[SNRT_MAX_RANK], red[SNRT_MAX_RANK], nk = 0, nr = 0;
  for (int d = 0; d < s.rank; d++) {
    if (s.s[1][d]) kept[nk++] = d;
    else red[nr++] = d;
  }
  int64_t count = 1;
  for (int i = 0; i < nr; i++) count *= s.d[red[i]];
  const int kind = p->kind;
#pragma omp parallel for schedule(static) if (p->n_big > KERN_PAR_MIN)
  for (int64_t e = 0; e < p->n_small; e++) {
    int64_t base = 0, r = e;
    for (int i = nk - 1; i >= 0; i--) {
      int64_t id = r % s.d[kept[i]];
      r /= s.d[kept[i]];
      base += id * s.s[0][kept[i]];
    }
    double acc = 0;
    float m = -INFINITY;
    int found = 0;
    for (int64_t k = 0; k < count; k++) {
      int64_t o = base, q = k;
      for (int i = nr - 1; i >= 0; i--) {
        o += (q % s.d[red[i]]) * s.s[0][red[i]];
        q /= s.d[red[i]];
      }
      float v = x[o];
      if (!bwd) {
        if (kind == SNRT_RED_MAX) m = v > m || v != v ? v : m;
        else acc += (double)v * v;
      } else if (kind == SNRT_RED_MAX) {
        int hit = !found && (v == y[e] || (v != v && y[e] != y[e]));
        out[o] = hit ? dy[e] : 0.0f;
        found |= hit;
      } else {
        out[o] = y[e] != 0.0f ? dy[e] * v / y[e] : 0.0f;
      }
    }
    if (!bwd) out[e] = kind == SNRT_RED_MAX ? m : (float)sqrt(acc);
  }
}

void snrt_reduce_bwd(snrt_ctx *c, const snrt_reduce_t *p, const float *x, const float *y,
                     const float *dy, float *dx) {
  (void)c;
  reduce_groups(p, x, y, dy, dx, 1);
}

void snrt_reduce(snrt_ctx *c, const snrt_reduce_t *p, const float *big, float *small) {
  (void)c;
  if (p->kind != SNRT_RED_SUM) {
    reduce_groups(p, big, NULL, NULL, small, 0);
    return;
  }
  bshape s = bshape_of(p->rank, p->dims, p->ss, NULL);
  bin_grad_reduce(&s, SNRT_ADD, 0, p->n_small, big, NULL, NULL, p->scale, small);
}

void snrt_expand(snrt_ctx *c, const snrt_reduce_t *p, const float *small, float *big) {
  (void)c;
  bshape s = bshape_of(p->rank, p->dims, p->ss, NULL);
  const int64_t inner = s.d[s.rank - 1], rows = p->n_big / (inner ? inner : 1);
  const int64_t is = s.s[1][s.rank - 1];
  const float sc = p->scale;
#pragma omp parallel for schedule(static) if (p->n_big > KERN_PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    int64_t o[3];
    bshape_row(&s, r, o);
    for (int64_t j = 0; j < inner; j++) big[o[0] + j] = sc * small[o[1] + j * is];
  }
}

/* ---- bias -------------------------------------------------------------------- */

void snrt_bias_fwd(snrt_ctx *c, const snrt_bias_t *p, const float *b, float *y) {
  (void)c;
  const int64_t rows = p->rows, cols = p->cols;
  const float sc = p->scale;
#pragma omp parallel for schedule(static) if (rows * cols > KERN_PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    float *yr = y + r * cols;
    switch (p->kind) {
    case SNRT_BIAS_SCALAR: for (int64_t j = 0; j < cols; j++) yr[j] += sc * b[0]; break;
    case SNRT_BIAS_ROW: for (int64_t j = 0; j < cols; j++) yr[j] += sc * b[j]; break;
    case SNRT_BIAS_COL: for (int64_t j = 0; j < cols; j++) yr[j] += sc * b[r]; break;
    default: for (int64_t j = 0; j < cols; j++) yr[j] += sc * b[r * cols + j]; break;
    }
  }
}

void snrt_bias_bwd(snrt_ctx *c, const snrt_bias_t *p, const float *dy, float *db) {
  (void)c;
  const int64_t rows = p->rows, cols = p->cols;
  const double sc = p->scale;
  switch (p->kind) {
  case SNRT_BIAS_SCALAR:
    db[0] = (float)(kern_sum(dy, rows * cols) * sc);
    break;
  case SNRT_BIAS_ROW: {
    /* Column blocks of 64 per thread; rows summed in order. */
    const int64_t nblk = (cols + 63) / 64;
#pragma omp parallel for schedule(static) if (rows * cols > KERN_PAR_MIN)
    for (int64_t bk = 0; bk < nblk; bk++) {
      double acc[64] = {0};
      int64_t j0 = bk * 64, j1 = kern_min(cols, j0 + 64);
      for (int64_t r = 0; r < rows; r++)
        for (int64_t j = j0; j < j1; j++) acc[j - j0] += dy[r * cols + j];
      for (int64_t j = j0; j < j1; j++) db[j] = (float)(acc[j - j0] * sc);
    }
    break;
  }
  case SNRT_BIAS_COL:
#pragma omp parallel for schedule(static) if (rows * cols > KERN_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
      double s = 0;
      for (int64_t j = 0; j < cols; j++) s += dy[r * cols + j];
      db[r] = (float)(s * sc);
    }
    break;
  default:
#pragma omp parallel for schedule(static) if (rows * cols > KERN_PAR_MIN)
    for (int64_t i = 0; i < rows * cols; i++) db[i] = (float)(dy[i] * sc);
    break;
  }
}

/* ---- add / fill / copy / dropout ---------------------------------------------- */

void snrt_add(snrt_ctx *c, int64_t n, const float *a, const float *b, float *y) {
  (void)c;
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
  for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void snrt_fill(snrt_ctx *c, int64_t n, float value, float *y) {
  (void)c;
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
  for (int64_t i = 0; i < n; i++) y[i] = value;
}

void snrt_copy(snrt_ctx *c, int64_t bytes, const void *src, void *dst) {
  (void)c;
  if (src != dst && bytes > 0) memmove(dst, src, (size_t)bytes);
}

/* Kept where snrt_uniform(seed, step, id, i) >= ratio; kept values scaled by
 * 1/(1-ratio). Forward and backward regenerate the same mask. */
static void dropout_apply(const snrt_ctx *c, const snrt_dropout_t *p, const float *x, float *y) {
  const int64_t n = p->n;
  if (p->ratio <= 0) {
    if (x != y) memmove(y, x, sizeof(float) * n);
    return;
  }
  const float ratio = p->ratio, scale = p->ratio >= 1 ? 0.0f : 1.0f / (1.0f - p->ratio);
  const uint64_t seed = c->seed, step = (uint64_t)c->step;
  const uint32_t id = p->id;
#pragma omp parallel for schedule(static) if (n > KERN_PAR_MIN / 4)
  for (int64_t i = 0; i < n; i++)
    y[i] = snrt_uniform(seed, step, id, (uint64_t)i) >= ratio ? x[i] * scale : 0.0f;
}

void snrt_dropout_fwd(snrt_ctx *c, const snrt_dropout_t *p, const float *x, float *y) {
  dropout_apply(c, p, x, y);
}

void snrt_dropout_bwd(snrt_ctx *c, const snrt_dropout_t *p, const float *dy, float *dx) {
  dropout_apply(c, p, dy, dx);
}
