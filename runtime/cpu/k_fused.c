/* k_fused.c — CPU kernels of the fused elementwise chains (snrt_fused_t,
 * compiler/front/fuse.c).
 *
 * The program runs a block of FB elements at a time: each op is one loop
 * over the block (it vectorizes like the op's own kernel), its register a
 * block of FB floats on the thread's stack, so the chain's intermediates stay
 * in L1 and never reach the arena. Blocks are split across threads; every
 * element is computed by one thread in a fixed order (deterministic).
 *
 * Forward: each op computes exactly what its unfused kernel computes
 * (k_elementwise.c, k_seq.c: kern_tanhf, kern_expf, kern_erff, kern_pow...), so the
 * output is bit-identical to the steps it replaces. Backward: the registers
 * are recomputed from the inputs, then the adjoints run through the ops in
 * reverse; a register read by several ops sums their contributions in
 * reverse op order, where the unfused graph sums them in an ACCUMULATE step:
 * the same terms, possibly another rounding. */
#include "kern.h"

#define FB 128   /* elements per block */
#define NREG (SNRT_FUSED_MAX_IN + SNRT_FUSED_MAX_OPS)

/* d = a OP b over m elements, where an operand is a register's block or the
 * constant k (x NULL). Three loops per op so that each vectorizes. */
#define FUSED_BIN(EXPR)                                                        \
  do {                                                                         \
    if (a && b) for (int i = 0; i < m; i++) { float A = a[i], B = b[i]; d[i] = (EXPR); } \
    else if (a) for (int i = 0; i < m; i++) { float A = a[i], B = k; d[i] = (EXPR); }    \
    else for (int i = 0; i < m; i++) { float A = k, B = b[i]; d[i] = (EXPR); }           \
  } while (0)
#define FUSED_UN(EXPR) \
  do { for (int i = 0; i < m; i++) { float A = a[i]; d[i] = (EXPR); } } while (0)

static void op_fwd(const snrt_fused_op_t *o, const float *a, const float *b, float k, float *d, int m) {
  switch (o->op) {
  case SNRT_F_ADD: FUSED_BIN(A + B); break;
  case SNRT_F_SUB: FUSED_BIN(A - B); break;
  case SNRT_F_MUL: FUSED_BIN(A * B); break;
  case SNRT_F_DIV: FUSED_BIN(A / B); break;
  case SNRT_F_NEG: FUSED_UN(-A); break;
  case SNRT_F_RELU: FUSED_UN(A > 0 ? A : 0.0f); break;
  case SNRT_F_SIGMOID: FUSED_UN(1.0f / (1.0f + kern_expf(-A))); break;
  case SNRT_F_TANH: FUSED_UN(kern_tanhf(A)); break;
  case SNRT_F_EXP: FUSED_UN(expf(A)); break;
  case SNRT_F_LOG: FUSED_UN(logf(A)); break;
  case SNRT_F_SQRT: FUSED_UN(sqrtf(A)); break;
  case SNRT_F_RECIPROCAL: FUSED_UN(1.0f / A); break;
  case SNRT_F_ERF: FUSED_UN(kern_erff(A)); break;
  case SNRT_F_POW: FUSED_UN(kern_pow(A, k)); break;
  }
}

/* The block of operand register r (NULL for the constant). */
static inline const float *operand(int r, const float *const *reg) { return r >= 0 ? reg[r] : NULL; }

void snrt_fused_fwd(snrt_ctx *c, const snrt_fused_t *p, const float *const *in, float *y) {
  (void)c;
  const int64_t n = p->n, nb = kern_cdiv(n, FB);
#pragma omp parallel for schedule(static) if (n > KERN_PAR_MIN / 8)
  for (int64_t blk = 0; blk < nb; blk++) {
    float store[SNRT_FUSED_MAX_OPS][FB];
    const float *reg[NREG];
    const int64_t i0 = blk * FB;
    const int m = (int)kern_min(FB, n - i0);
    for (int k = 0; k < p->nin; k++) reg[k] = in[k] + i0;
    for (int j = 0; j < p->nops; j++) {
      const snrt_fused_op_t *o = &p->ops[j];
      float *d = j == p->nops - 1 ? y + i0 : store[j];
      op_fwd(o, operand(o->a, reg), operand(o->b, reg), o->imm, d, m);
      reg[p->nin + j] = d;
    }
  }
}

/* g_a (+)= contribution, where `first` says whether g_a holds one yet. */
#define ADJ(dst, first, EXPR)                                           \
  do {                                                                  \
    float *restrict q_ = (dst);                                         \
    if (first) for (int i = 0; i < m; i++) { q_[i] = (EXPR); }          \
    else for (int i = 0; i < m; i++) { q_[i] += (EXPR); }               \
  } while (0)

/* Which registers need an adjoint: the inputs whose gradient is written, and
 * every op result computed from one of them (in program order, an op's
 * operands come before it). */
static void adjoint_needed(const snrt_fused_t *p, bool *need) {
  for (int r = 0; r < NREG; r++) need[r] = r < p->nin && (p->need >> r & 1);
  for (int j = 0; j < p->nops; j++) {
    const snrt_fused_op_t *o = &p->ops[j];
    need[p->nin + j] = (o->a >= 0 && need[o->a]) || (o->b >= 0 && need[o->b]);
  }
}

/* Which op results the backward recomputes: those whose operands it has
 * (the inputs given, the results before), the output excepted when it comes
 * from y. */
static void computable(const snrt_fused_t *p, bool *avail) {
  for (int k = 0; k < p->nin; k++) avail[k] = p->have >> k & 1;
  for (int j = 0; j < p->nops; j++) {
    const snrt_fused_op_t *o = &p->ops[j];
    avail[p->nin + j] = (o->a < 0 || avail[o->a]) && (o->b < 0 || avail[o->b]);
  }
}

/* y_put: the output register written there too (snrt_fused_bwd_y). */
static void fused_bwd(const snrt_fused_t *p, const float *const *in, const float *y_out,
                      const float *dy, float *const *dx, float *y_put) {
  const int64_t n = p->n, nb = kern_cdiv(n, FB);
  const int nin = p->nin, nops = p->nops;
  bool need[NREG], avail[NREG];
  adjoint_needed(p, need);
  computable(p, avail);
  if (p->use_y) avail[nin + nops - 1] = false;
  float *out[SNRT_FUSED_MAX_IN] = {0};
  for (int k = 0, w = 0; k < nin; k++)
    if (p->need >> k & 1) out[k] = dx[w++];
#pragma omp parallel for schedule(static) if (n > KERN_PAR_MIN / 8)
  for (int64_t blk = 0; blk < nb; blk++) {
    float store[SNRT_FUSED_MAX_OPS][FB];
    float adj[NREG][FB];
    bool have[NREG] = {0};
    const float *reg[NREG];
    const int64_t i0 = blk * FB;
    const int m = (int)kern_min(FB, n - i0);
    for (int k = 0; k < nin; k++) reg[k] = avail[k] ? in[k] + i0 : NULL;
    for (int j = 0; j < nops; j++) {
      const snrt_fused_op_t *o = &p->ops[j];
      reg[nin + j] = NULL;
      if (!avail[nin + j]) continue;
      op_fwd(o, operand(o->a, reg), operand(o->b, reg), o->imm, store[j], m);
      reg[nin + j] = store[j];
    }
    if (p->use_y) reg[nin + nops - 1] = y_out + i0;
    else if (y_put) memcpy(y_put + i0, reg[nin + nops - 1], sizeof(float) * (size_t)m);
    /* The output's adjoint is dy itself. */
    const float *gy = dy + i0;
    for (int j = nops - 1; j >= 0; j--) {
      const snrt_fused_op_t *o = &p->ops[j];
      const int r = nin + j;
      if (!need[r]) continue;
      const float *g = j == nops - 1 ? gy : adj[r];
      if (j != nops - 1 && !have[r]) continue;   /* no path from the output */
      const float *a = operand(o->a, reg), *b = operand(o->b, reg), *y = reg[r];
      const float k = o->imm;
      const bool na = o->a >= 0 && need[o->a], nb_ = o->b >= 0 && need[o->b];
      float *ga = na ? adj[o->a] : NULL, *gb = nb_ ? adj[o->b] : NULL;
      bool fa = na && !have[o->a];
      switch (o->op) {
      case SNRT_F_ADD:
        if (na) ADJ(ga, fa, g[i]);
        if (nb_) ADJ(gb, o->b == o->a ? false : !have[o->b], g[i]);
        break;
      case SNRT_F_SUB:
        if (na) ADJ(ga, fa, g[i]);
        if (nb_) ADJ(gb, o->b == o->a ? false : !have[o->b], -g[i]);
        break;
      case SNRT_F_MUL:
        if (na) {
          if (o->b >= 0) ADJ(ga, fa, g[i] * b[i]);
          else ADJ(ga, fa, g[i] * k);
        }
        if (nb_) {
          bool fb = o->b == o->a ? false : !have[o->b];
          if (o->a >= 0) ADJ(gb, fb, g[i] * a[i]);
          else ADJ(gb, fb, g[i] * k);
        }
        break;
      case SNRT_F_DIV:   /* d(a/b): 1/b and -a/b^2 = -y/b */
        if (na) {
          if (o->b >= 0) ADJ(ga, fa, g[i] / b[i]);
          else ADJ(ga, fa, g[i] / k);
        }
        if (nb_) {
          bool fb = o->b == o->a ? false : !have[o->b];
          ADJ(gb, fb, -g[i] * y[i] / b[i]);   /* nb_: b is a register */
        }
        break;
      case SNRT_F_NEG: if (na) ADJ(ga, fa, -g[i]); break;
      case SNRT_F_RELU: if (na) ADJ(ga, fa, y[i] > 0 ? g[i] : 0.0f); break;   /* y > 0 iff a > 0 */
      case SNRT_F_SIGMOID: if (na) ADJ(ga, fa, g[i] * y[i] * (1.0f - y[i])); break;
      case SNRT_F_TANH: if (na) ADJ(ga, fa, g[i] * (1.0f - y[i] * y[i])); break;
      case SNRT_F_EXP: if (na) ADJ(ga, fa, g[i] * y[i]); break;
      case SNRT_F_LOG: if (na) ADJ(ga, fa, g[i] / a[i]); break;
      case SNRT_F_SQRT: if (na) ADJ(ga, fa, g[i] / (2.0f * y[i])); break;
      case SNRT_F_RECIPROCAL: if (na) ADJ(ga, fa, -g[i] * y[i] * y[i]); break;
      case SNRT_F_ERF:
        if (na) ADJ(ga, fa, g[i] * 1.12837916709551257f * kern_expf(-a[i] * a[i]));
        break;
      case SNRT_F_POW:
        if (na) {
          if (k == 2.0f) ADJ(ga, fa, g[i] * 2.0f * a[i]);
          else ADJ(ga, fa, g[i] * k * kern_pow(a[i], k - 1.0f));
        }
        break;
      }
      if (na) have[o->a] = true;
      if (nb_) have[o->b] = true;
    }
    for (int k = 0; k < nin; k++) {
      if (!out[k]) continue;
      float *d = out[k] + i0;
      if (have[k]) memcpy(d, adj[k], sizeof(float) * (size_t)m);
      else memset(d, 0, sizeof(float) * (size_t)m);
    }
  }
}

void snrt_fused_bwd(snrt_ctx *c, const snrt_fused_t *p, const float *const *in, const float *y_out,
                    const float *dy, float *const *dx) {
  (void)c;
  fused_bwd(p, in, y_out, dy, dx, NULL);
}

void snrt_fused_bwd_y(snrt_ctx *c, const snrt_fused_t *p, const float *const *in, const float *dy,
                      float *const *dx, float *y_put) {
  (void)c;
  /* The compiler emits it only where every input is given (have: all bits,
   * use_y 0), so the output register is computed. */
  fused_bwd(p, in, NULL, dy, dx, y_put);
}
