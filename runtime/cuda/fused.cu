/* fused.cu — CUDA kernels of the fused elementwise chains (snrt_fused_t,
 * compiler/front/fuse.c).
 *
 * One thread per element runs the whole program with its registers in
 * thread-local storage: one read of each input and one write of the output
 * (forward), or of each input gradient (backward), per element. The op
 * switch is the same for every thread of a warp (no divergence). Each op
 * computes what its unfused kernel computes (elementwise.cu, seq.cu: tanhf,
 * expf, erff, snrt_cu_pow), so a fused forward gives the unfused steps' bits;
 * backward recomputes the registers and runs the adjoints in reverse (the
 * same terms as the unfused steps, possibly summed in another order). No
 * atomics: deterministic. */
#include "cuda_rt.h"

#define NREG (SNRT_FUSED_MAX_IN + SNRT_FUSED_MAX_OPS)

/* The input and gradient pointers, by value (the emitted call's arrays live
 * on the host). */
typedef struct { const float *p[SNRT_FUSED_MAX_IN]; } fused_in_t;
typedef struct { float *p[SNRT_FUSED_MAX_IN]; } fused_out_t;

__device__ __forceinline__ float op_fwd(int op, float A, float B, float k) {
  switch (op) {
  case SNRT_F_ADD: return A + B;
  case SNRT_F_SUB: return A - B;
  case SNRT_F_MUL: return A * B;
  case SNRT_F_DIV: return A / B;
  case SNRT_F_NEG: return -A;
  case SNRT_F_RELU: return A > 0.0f ? A : 0.0f;
  case SNRT_F_SIGMOID: return 1.0f / (1.0f + expf(-A));
  case SNRT_F_TANH: return tanhf(A);
  case SNRT_F_EXP: return expf(A);
  case SNRT_F_LOG: return logf(A);
  case SNRT_F_SQRT: return sqrtf(A);
  case SNRT_F_RECIPROCAL: return 1.0f / A;
  case SNRT_F_ERF: return erff(A);
  default: return snrt_cu_pow(A, k);   /* SNRT_F_POW */
  }
}

/* The registers of element i, forward. */
__device__ __forceinline__ void run_fwd(const snrt_fused_t &p, const fused_in_t &in, int64_t i,
                                        float *r) {
  for (int k = 0; k < p.nin; k++) r[k] = in.p[k][i];
  for (int j = 0; j < p.nops; j++) {
    const snrt_fused_op_t o = p.ops[j];
    float A = o.a >= 0 ? r[o.a] : o.imm, B = o.b >= 0 ? r[o.b] : o.imm;
    r[p.nin + j] = op_fwd(o.op, A, B, o.imm);
  }
}

__global__ void k_fused_fwd(snrt_fused_t p, fused_in_t in, float *y) {
  SNRT_FOR(i, p.n) {
    float r[NREG];
    run_fwd(p, in, i, r);
    y[i] = r[p.nin + p.nops - 1];
  }
}

/* avail: bit r set where register r is an input given or an op result
 * computable from them (the output excepted under use_y: it is read). */
__global__ void k_fused_bwd(snrt_fused_t p, fused_in_t in, const float *yp, const float *dy,
                            fused_out_t dx, uint64_t avail, float *y_put) {
  SNRT_FOR(i, p.n) {
    float r[NREG], g[NREG];
    for (int k = 0; k < p.nin; k++) r[k] = avail >> k & 1 ? in.p[k][i] : 0.0f;
    for (int j = 0; j < p.nops; j++) {
      const snrt_fused_op_t o = p.ops[j];
      if (!(avail >> (p.nin + j) & 1)) {
        r[p.nin + j] = 0.0f;
        continue;
      }
      float A = o.a >= 0 ? r[o.a] : o.imm, B = o.b >= 0 ? r[o.b] : o.imm;
      r[p.nin + j] = op_fwd(o.op, A, B, o.imm);
    }
    if (p.use_y) r[p.nin + p.nops - 1] = yp[i];
    else if (y_put) y_put[i] = r[p.nin + p.nops - 1];   /* the forward's bits: same op_fwd */
    for (int k = 0; k < p.nin + p.nops; k++) g[k] = 0.0f;
    g[p.nin + p.nops - 1] = dy[i];
    for (int j = p.nops - 1; j >= 0; j--) {
      const snrt_fused_op_t o = p.ops[j];
      const float G = g[p.nin + j], y = r[p.nin + j], k = o.imm;
      const float A = o.a >= 0 ? r[o.a] : k, B = o.b >= 0 ? r[o.b] : k;
      float da = 0.0f, db = 0.0f;
      switch (o.op) {
      case SNRT_F_ADD: da = G, db = G; break;
      case SNRT_F_SUB: da = G, db = -G; break;
      case SNRT_F_MUL: da = G * B, db = G * A; break;
      case SNRT_F_DIV: da = G / B, db = -G * y / B; break;
      case SNRT_F_NEG: da = -G; break;
      case SNRT_F_RELU: da = y > 0.0f ? G : 0.0f; break;   /* y > 0 iff A > 0 */
      case SNRT_F_SIGMOID: da = G * y * (1.0f - y); break;
      case SNRT_F_TANH: da = G * (1.0f - y * y); break;
      case SNRT_F_EXP: da = G * y; break;
      case SNRT_F_LOG: da = G / A; break;
      case SNRT_F_SQRT: da = G / (2.0f * y); break;
      case SNRT_F_RECIPROCAL: da = -G * y * y; break;
      case SNRT_F_ERF: da = G * 1.12837916709551257f * expf(-A * A); break;
      default: da = k == 2.0f ? G * 2.0f * A : G * k * snrt_cu_pow(A, k - 1.0f); break;
      }
      if (o.a >= 0) g[o.a] += da;
      if (o.b >= 0) g[o.b] += db;
    }
    for (int k = 0, w = 0; k < p.nin; k++)
      if (p.need >> k & 1) dx.p[w++][i] = g[k];
  }
}

void snrt_fused_fwd(snrt_ctx *c, const snrt_fused_t *p, const float *const *in, float *y) {
  if (p->n <= 0) return;
  fused_in_t a = {};
  for (int k = 0; k < p->nin; k++) a.p[k] = in[k];
  k_fused_fwd<<<snrt_cu_blocks(p->n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, a, y);
  SNRT_LAUNCH_CHECK();
}

static void fused_bwd(snrt_ctx *c, const snrt_fused_t *p, const float *const *in, const float *y,
                      const float *dy, float *const *dx, float *y_put) {
  if (p->n <= 0) return;
  fused_in_t a = {};
  fused_out_t d = {};
  uint64_t avail = 0;
  for (int k = 0; k < p->nin; k++) {
    a.p[k] = in[k];
    if (p->have >> k & 1) avail |= 1ull << k;
  }
  for (int j = 0; j < p->nops; j++) {
    const snrt_fused_op_t *o = &p->ops[j];
    if ((o->a < 0 || (avail >> o->a & 1)) && (o->b < 0 || (avail >> o->b & 1)))
      avail |= 1ull << (p->nin + j);
  }
  if (p->use_y) avail &= ~(1ull << (p->nin + p->nops - 1));
  for (int k = 0, w = 0; k < p->nin; k++)
    if (p->need >> k & 1) d.p[w] = dx[w], w++;
  k_fused_bwd<<<snrt_cu_blocks(p->n), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(*p, a, y, dy, d, avail, y_put);
  SNRT_LAUNCH_CHECK();
}

void snrt_fused_bwd(snrt_ctx *c, const snrt_fused_t *p, const float *const *in, const float *y,
                    const float *dy, float *const *dx) {
  fused_bwd(c, p, in, y, dy, dx, NULL);
}

/* Every input given (the compiler's promise): the output register is computed. */
void snrt_fused_bwd_y(snrt_ctx *c, const snrt_fused_t *p, const float *const *in, const float *dy,
                      float *const *dx, float *y_put) {
  fused_bwd(c, p, in, NULL, dy, dx, y_put);
}
