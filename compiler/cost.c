/* cost.c — the cost model: how long a step, a copy or a recomputation takes
 * on a device profile. Every pass that weighs time (offload.c's copy
 * placement, plan.c's estimate, recompute choices through it, the plan
 * review) asks here, so the planner and the printed estimate never disagree.
 *
 * Two models, chosen by the profile:
 *   - simple (the built-in profiles of devices.c): a compute step takes
 *     max(FLOPs / FLOP rate, bytes touched / memory bandwidth), a copy
 *     bytes / link bandwidth;
 *   - calibrated (a profile file build/snc-calibrate wrote): the same max
 *     with the rates of the node's op class (measured on the runtime's own
 *     kernels), plus the class's fixed cost per step (a call, a parallel
 *     region's start), and a copy rate per direction.
 * Bytes touched: the step's inputs, outputs and workspace, each once.
 *
 * Op classes (cost_class): conv and conv_bwd (backward data and backward
 * filter) split by the inner dimension of the convolution's GEMM, K =
 * c/group x kh x kw: below COST_SMALL_K the runtime's kernels run far below
 * their large-K rate (a first layer, depthwise convolutions), so those get
 * a class of their own ("_small"), and so do 1x1 convolutions ("_1x1": one
 * GEMM per image on the CPU); a convolution also costs a fixed time per image
 * of the batch (per_image_s); where the profile lists the convolutions it
 * measured (conv_shapes), a convolution takes the FLOP rate of the nearest
 * one of its kind instead; gemm (Gemm, MatMul and their gradients); pool
 * (max and average pooling, forward and backward, rated in window elements
 * visited per second: n x c x oh x ow x kh x kw);
 * norm (batch and layer normalization, LRN, softmax, forward and backward);
 * update (SGD steps) and adam (Adam and AdamW steps, about 3x slower per
 * byte on the CPU); elementwise (everything else: activations,
 * pooling, adds, copies, the loss).
 *
 * Not here: which steps exist (the passes), overlap of copies with compute
 * (offload.c places copies against the timeline cost_step_times gives). */
#include "snc.h"

#include <math.h>
#include <stdlib.h>

enum { COST_SMALL_K = 64 };   /* see the header comment: the "_small" conv classes */

static const char *const class_names[CC_COUNT] = {
    "conv",  "conv_small", "conv_1x1", "conv_bwd",    "conv_bwd_small",
    "conv_bwd_1x1", "gemm", "pool", "norm",   "elementwise", "update", "adam"};

const char *cost_class_name(CostClass c) { return c >= 0 && c < CC_COUNT ? class_names[c] : "?"; }

/* 0: the large-K class, 1: small K, 2: a 1x1 convolution (the runtime's
 * kernels run one GEMM per image there, with no im2col). */
static int conv_kind(const Node *n) {
  const snrt_conv_t *p = n->p;
  if (!p || p->group <= 0) return 0;
  if ((int64_t)(p->c / p->group) * p->kh * p->kw < COST_SMALL_K) return 1;
  return p->kh == 1 && p->kw == 1 ? 2 : 0;
}

CostClass cost_class(const Graph *g, const Node *n) {
  (void)g;
  switch (n->op) {
  case OP_CONV: return (CostClass)(CC_CONV + conv_kind(n));
  case OP_CONV_BWD_DATA:
  case OP_CONV_BWD_FILTER: return (CostClass)(CC_CONV_BWD + conv_kind(n));
  case OP_GEMM: case OP_MATMUL: case OP_MATMUL_RAW: return CC_GEMM;
  case OP_MAXPOOL: case OP_AVGPOOL: case OP_GLOBALAVGPOOL: case OP_MAXPOOL_BWD: case OP_AVGPOOL_BWD:
    return CC_POOL;
  case OP_BATCHNORM: case OP_BN_BWD: case OP_BN_SAVED: case OP_BN_INFER: case OP_LAYERNORM:
  case OP_LN_BWD: case OP_LRN: case OP_LRN_BWD: case OP_SOFTMAX: case OP_SOFTMAX_BWD:
    return CC_NORM;
  case OP_SGD: return CC_UPDATE;
  case OP_ADAM: return CC_ADAM;
  default: return CC_ELEMENTWISE;
  }
}

/* The FLOP rate of the measured convolution nearest to p (same kind; the
 * distance adds |log| ratios of inner dimension, output positions, output
 * channels and batch), or 0 where the profile measured none of that kind.
 * Linear in the shapes measured (a few dozen). */
static double nearest_conv_rate(const CostRates *r, const snrt_conv_t *p, int kind, bool bwd) {
  double best = 1e300, rate = 0;
  double K = (double)(p->c / p->group) * p->kh * p->kw, pos = (double)p->oh * p->ow;
  for (int i = 0; i < r->nshapes; i++) {
    const CostShape *q = &r->shapes[i];
    if (q->kind != kind) continue;
    double o = (q->hw + 2 * (int)(q->ksize / 2) - q->ksize) / q->stride + 1;
    double dist = fabs(log(K / (q->c * q->ksize * q->ksize))) + fabs(log(pos / (o * o))) +
                  fabs(log(p->k / q->k)) + 0.5 * fabs(log(p->n / q->n));
    if (dist < best) best = dist, rate = bwd ? q->bwd_rate : q->fwd_rate;
  }
  return rate;
}

double cost_node_seconds(const Graph *g, const Node *n, double bytes, const DeviceProfile *d) {
  double fl = op_info[n->op].flops(g, n);
  const CostRates *r = d->rates;
  if (!r) {
    double tc = fl / d->flops, tm = bytes / d->mem_bw;
    return tc > tm ? tc : tm;
  }
  CostClass c = cost_class(g, n);
  double images = 0;
  if (c == CC_POOL && n->p) {   /* window elements visited, forward or backward */
    const snrt_pool_t *p = n->p;
    fl = (double)p->n * p->c * p->oh * p->ow * p->kh * p->kw;
  }
  if (c <= CC_CONV_BWD_1X1 && n->p) {
    const snrt_conv_t *p = n->p;
    double rate = nearest_conv_rate(r, p, conv_kind(n), c >= CC_CONV_BWD);
    if (rate > 0) return fl / rate + r->overhead[c];   /* the measured shape's rate says it all */
    images = p->n;
  }
  double tc = r->class_flops[c] > 0 ? fl / r->class_flops[c] : 0;
  double tm = r->class_bw[c] > 0 ? bytes / r->class_bw[c] : 0;
  return (tc > tm ? tc : tm) + r->overhead[c] + images * r->per_image[c];
}

double cost_copy_seconds(double bytes, CopyDir dir, const DeviceProfile *d) {
  if (!d->rates) return bytes / d->link_bw;
  return bytes / (dir == COPY_D2H ? d->rates->d2h_bw : d->rates->h2d_bw);
}

double cost_step_seconds(const Graph *g, const Plan *pl, int s, const DeviceProfile *d) {
  const Step *st = &pl->route->s[s];
  if (st->node < 0) {
    if ((st->kind != SK_OFFLOAD && st->kind != SK_PREFETCH) || st->nin < 1 || st->in[0] < 0)
      return 0;
    return cost_copy_seconds((double)pl->inst[st->in[0]].bytes,
                             st->kind == SK_OFFLOAD ? COPY_D2H : COPY_H2D, d);
  }
  double bytes = 0;
  for (int k = 0; k < st->nin; k++)
    if (st->in[k] >= 0) bytes += (double)pl->inst[st->in[k]].bytes;
  for (int k = 0; k < st->nout; k++)
    if (st->out[k] >= 0) bytes += (double)pl->inst[st->out[k]].bytes;
  if (st->ws >= 0) bytes += (double)pl->inst[st->ws].bytes;
  return cost_node_seconds(g, &g->n[st->node], bytes, d);
}

double *cost_step_times(const Graph *g, const Plan *pl, const DeviceProfile *d) {
  const Route *r = pl->route;
  double *t = xcalloc((size_t)r->ns + 1, sizeof(double));
  for (int s = 0; s < r->train_steps; s++)
    if (r->s[s].node >= 0) t[s] = cost_step_seconds(g, pl, s, d);
  return t;
}
