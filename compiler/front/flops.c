/* flops.c — forward FLOP counts per node (the flops column of ops.h), used by
 * `snc inspect`, the planner's cost model and recompute_flops.
 *
 * A multiply-add counts 2. Elementwise ops count one per output element,
 * pooling one per window element, LRN about 3 per window element; views and
 * copies count 0. Counts need node->p (set by shape inference). */
#include "front.h"

static double numel_of(const Graph *g, int t) { return t < 0 ? 0 : (double)tensor_numel(&g->t[t]); }

double flops_conv(const Graph *g, const Node *n) {
  (void)g;
  const snrt_conv_t *p = n->p;
  if (!p) return 0;
  return 2.0 * p->n * p->k * p->oh * p->ow * (double)(p->c / p->group) * p->kh * p->kw;
}

/* Backward data and backward filter each cost what the forward conv does. */
double flops_conv_bwd(const Graph *g, const Node *n) { return flops_conv(g, n); }

static double mm_flops(const snrt_mm_t *p) {
  return p ? 2.0 * (double)p->batch * (double)p->m * (double)p->n * (double)p->k : 0;
}

double flops_gemm(const Graph *g, const Node *n) {
  (void)g;
  const GemmParams *p = n->p;
  return p ? mm_flops(&p->mm) : 0;
}

double flops_matmul(const Graph *g, const Node *n) { (void)g; return mm_flops(n->p); }
double flops_matmul_raw(const Graph *g, const Node *n) { (void)g; return mm_flops(n->p); }

double flops_einsum(const Graph *g, const Node *n) {
  (void)g;
  const snrt_einsum_t *p = n->p;
  return p ? 2.0 * (double)p->n_out * (double)p->n_sum : 0;
}

double flops_elementwise(const Graph *g, const Node *n) {
  return n->nout > 0 ? numel_of(g, n->out[0]) : 0;
}

double flops_pool(const Graph *g, const Node *n) {
  (void)g;
  const snrt_pool_t *p = n->p;
  if (!p) return 0;
  return (double)p->n * p->c * p->oh * p->ow * (double)p->kh * p->kw;
}

double flops_lrn(const Graph *g, const Node *n) {
  const snrt_lrn_t *p = n->p;
  if (!p || n->nout < 1) return 0;
  return numel_of(g, n->out[0]) * p->size * 3.0;
}

/* The chunked loss: the head's product (2 n k classes), and one more per
 * gradient it writes (dh, dW). */
double flops_lmce(const Graph *g, const Node *n) {
  (void)g;
  const snrt_lmce_t *p = n->p;
  return 2.0 * (double)p->n * (double)p->k * (double)p->classes * snrt_lmce_products(p);
}

double flops_in(const Graph *g, const Node *n) { return n->nin > 0 ? numel_of(g, n->in[0]) : 0; }
double flops_out(const Graph *g, const Node *n) { return n->nout > 0 ? numel_of(g, n->out[0]) : 0; }
double flops_zero(const Graph *g, const Node *n) { (void)g; (void)n; return 0; }
/* A fused chain: one FLOP per op and element; its backward recomputes the
 * chain and runs it again in reverse (twice that). */
double flops_fused(const Graph *g, const Node *n) {
  (void)g;
  const snrt_fused_t *p = n->p;
  if (!p) return 0;
  return (double)p->n * p->nops * (n->op == OP_FUSED_BWD ? 3 : 1);
}

double graph_forward_flops(const Graph *g) {
  double f = 0;
  int end = g->nfwd ? g->nfwd : g->nn;
  for (int i = 0; i < end; i++) f += op_info[g->n[i].op].flops(g, &g->n[i]);
  return f;
}
