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
 * Op classes (cost_class): one per kind of CPU kernel, so a class's rate is
 * the rate of the kernels its steps really run. conv and conv_bwd (backward
 * data and backward filter) split by the inner dimension of the
 * convolution's GEMM, K = c/group x kh x kw: below COST_SMALL_K the
 * runtime's kernels run far below their large-K rate (a first layer,
 * depthwise convolutions), so those get a class of their own ("_small"),
 * and so do 1x1 convolutions ("_1x1": one GEMM per image and no im2col on
 * a large plane, a copy and batched GEMMs on a small one: the nearest
 * measured shape's rate); a
 * convolution also costs a fixed time per call (overhead_s: oneDNN's
 * reorders and parallel region) and per image of the batch (per_image_s);
 * where the profile lists the convolutions it measured (conv_shapes), a
 * convolution takes, beyond those fixed costs, the FLOP rate of the nearest
 * one of its kind (its forward, backward-data or backward-filter kernel's
 * own rate, over the measured time less the same fixed costs);
 * gemm (Gemm, MatMul and their gradients: the rate of the nearest GEMM the
 * profile measured, gemm_shapes, else the class rate plus a cost per matrix
 * of a batched product, one sgemm each); pool (max and average pooling,
 * forward and backward, rated in window elements visited per second: n x c
 * x oh x ow x kh x kw; where the profile lists the poolings it measured,
 * pool_shapes, the rate of the nearest one of the same kind, max or
 * average: the kernels differ 5x per window element between a 2x2 window
 * and a 3x3 one, and a global pooling of a 1x1 map is all fixed cost);
 * norm (batch and layer normalization, LRN, softmax backward, a
 * convolution's bias gradient: per-row loops, so a cost per contiguous row
 * (per_row_s) beside the bandwidth: a BN over 1x1 maps costs 10x more per
 * element than over 16x16 ones); update (SGD steps) and adam (Adam and
 * AdamW steps, about 3x slower per byte on the CPU); strided (kernels that
 * walk a broadcast or permuted index space: Add/Sub/Mul/Div with
 * broadcasting and their gradients, which reduce, ReduceMean, Expand,
 * Transpose: 3-5x below a contiguous kernel's bandwidth on the CPU); math
 * (a transcendental function or a hash per element: Erf, Sigmoid, Tanh, Pow
 * with an exponent the kernels do not multiply out, their gradients,
 * softmax, dropout's counter-based mask); loss (the softmax cross-entropy
 * and its gradient: a double-precision exp per logit, the forward one
 * serial; a cost per row too); elementwise (everything else: activations,
 * contiguous adds, copies, concatenation, gathers, the masked fill, Sqrt,
 * Neg, Reciprocal, Pow by 1, 2 or 3). A profile without the strided or math
 * class (written before they were) rates them as elementwise, one without
 * loss rates it as math.
 * Where the profile gives parallel_min_elements, a step whose largest
 * operand has more elements runs as a parallel region on the CPU (as
 * runtime/cpu/kern.h decides; the transcendental kernels at an eighth of
 * it, dropout at a quarter, the loss's forward never) and costs the class's
 * parallel_s more: the thread team's wake-up, which snc-calibrate measured
 * (tens to hundreds of microseconds on a VM, as much as a 1 MiB kernel's
 * own time).
 *
 * Copies: a fixed cost per copy plus bytes over the copy rate of their
 * direction; a copy that runs
 * beside compute costs that compute cost_copy_loss (the CPU target's copy
 * engine is a thread on the same cores: snc-calibrate measured compute
 * slowed by more than the copy's own time there; GPUs and the built-in
 * profiles: nothing).
 *
 * Not here: which steps exist (the passes), overlap of copies with compute
 * (offload.c places copies against the timeline cost_step_times gives). */
#include "plan.h"

#include <math.h>
#include <stdlib.h>

enum { COST_SMALL_K = 64 };   /* see the header comment: the "_small" conv classes */

static const char *const class_names[CC_COUNT] = {
    "conv",  "conv_small", "conv_1x1", "conv_bwd",    "conv_bwd_small",
    "conv_bwd_1x1", "gemm", "pool", "norm",   "elementwise", "update", "adam", "strided", "math",
    "loss"};

const char *cost_class_name(CostClass c) { return c >= 0 && c < CC_COUNT ? class_names[c] : "?"; }

/* 0: the large-K class, 1: small K, 2: a 1x1 convolution (snc-calibrate
 * labels its measured shapes so: every 1x1 kernel, whichever path the
 * runtime takes, one GEMM per image on a large plane or im2col's copy and
 * one GEMM over many images on a small one: snrt_conv_is_1x1; the nearest
 * measured shape's rate tells them apart). */
static int conv_kind(const Node *n) {
  const snrt_conv_t *p = n->p;
  if (!p || p->group <= 0) return 0;
  if ((int64_t)(p->c / p->group) * p->kh * p->kw < COST_SMALL_K) return 1;
  return p->kh == 1 && p->kw == 1 ? 2 : 0;
}

/* Pow by these exponents is a multiply (or a copy, or sqrtf) in the
 * kernels (k_seq.c's pow_k), any other exponent powf. */
static bool pow_cheap(float e) { return e == 1.0f || e == 2.0f || e == 3.0f || e == 0.5f; }

/* A math op (snrt_math_t) whose kernel calls a transcendental function per
 * element: erf and its gradient (expf), Pow by other exponents (the
 * gradient of x^e is e x^(e-1): x*2 for 2, pow_k otherwise). */
static bool math_transcendental(const Node *n) {
  const snrt_math_t *p = n->p;
  if (!p) return true;
  if (p->kind == SNRT_ERF || p->kind == SNRT_SIN || p->kind == SNRT_COS || p->kind == SNRT_EXP ||
      p->kind == SNRT_LOG)
    return true;
  if (p->kind != SNRT_POW) return false;
  if (n->op == OP_MATH_BWD) return p->exponent != 2.0f && !pow_cheap(p->exponent - 1.0f);
  return !pow_cheap(p->exponent);
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
  case OP_LN_BWD: case OP_LRN: case OP_LRN_BWD: case OP_SOFTMAX_BWD: case OP_CONV_BWD_BIAS:
    return CC_NORM;
  case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_BINARY_BWD: case OP_REDUCEMEAN:
  case OP_REDUCE: case OP_EXPAND: case OP_BROADCAST: case OP_TRANSPOSE: case OP_MIN: case OP_MAX:
  case OP_REDUCESUM: case OP_REDUCEMAX: case OP_REDUCEL2: case OP_REDUCE_BWD: case OP_TILE:
    return CC_STRIDED;
  case OP_POW: case OP_MATH_BWD: case OP_ERF: case OP_SIN: case OP_COS: case OP_EXP: case OP_LOG:
    return math_transcendental(n) ? CC_MATH : CC_ELEMENTWISE;
  case OP_SIGMOID: case OP_TANH: case OP_SOFTMAX: case OP_DROPOUT: case OP_DROPOUT_BWD:
    return CC_MATH;
  case OP_SOFTMAX_CE: case OP_SOFTMAX_CE_BWD: return CC_LOSS;
  case OP_LMHEAD_CE: return CC_GEMM;   /* sgemm calls dominate */
  case OP_FUSED: case OP_FUSED_BWD: {   /* math when one op is transcendental */
    const snrt_fused_t *p = n->p;
    for (int j = 0; p && j < p->nops; j++)
      if (p->ops[j].op >= SNRT_F_SIGMOID && p->ops[j].op != SNRT_F_SQRT &&
          p->ops[j].op != SNRT_F_RECIPROCAL && !(p->ops[j].op == SNRT_F_POW && pow_cheap(p->ops[j].imm)))
        return CC_MATH;
    return CC_ELEMENTWISE;
  }
  case OP_SGD: return CC_UPDATE;
  case OP_ADAM: return CC_ADAM;
  default: return CC_ELEMENTWISE;
  }
}

/* The per-unit count of a node of class c (CostRates.per_unit): images of a
 * convolution (where no measured shape gives its rate), sgemm calls of a
 * GEMM, contiguous rows of a norm step (a BN channel of one image, a
 * LayerNorm or softmax row, a conv bias gradient's channel of one image) or
 * of the loss (the logits of one sample). */
static double cost_units(const Node *n, CostClass c) {
  if (!n->p) return 0;
  switch (n->op) {
  case OP_CONV: case OP_CONV_BWD_DATA: case OP_CONV_BWD_FILTER: return ((const snrt_conv_t *)n->p)->n;
  case OP_CONV_BWD_BIAS: {
    const snrt_conv_t *p = n->p;
    return (double)p->n * p->k;
  }
  case OP_GEMM: return (double)((const GemmParams *)n->p)->mm.batch;
  case OP_MATMUL: case OP_MATMUL_RAW: return (double)((const snrt_mm_t *)n->p)->batch;
  case OP_LMHEAD_CE: {   /* sgemm calls: one per chunk and product */
    const snrt_lmce_t *p = n->p;
    double chunks = (double)((p->n + p->chunk - 1) / p->chunk);
    return chunks * snrt_lmce_products(p);
  }
  case OP_BATCHNORM: case OP_BN_BWD: case OP_BN_SAVED: case OP_BN_INFER: {
    const snrt_bn_t *p = n->p;
    return (double)p->n * p->c;
  }
  case OP_LAYERNORM: case OP_LN_BWD: return (double)((const snrt_ln_t *)n->p)->rows;
  case OP_SOFTMAX_BWD: {
    const snrt_softmax_t *p = n->p;
    return (double)p->outer * p->inner;
  }
  case OP_SOFTMAX_CE: case OP_SOFTMAX_CE_BWD: return c == CC_LOSS ? ((const snrt_loss_t *)n->p)->n : 0;
  default: return 0;
  }
}

/* Whether the node's CPU kernel runs as a parallel region: its largest
 * operand above the profile's threshold, divided as the kernels' `if`
 * clauses divide it (k_seq.c, k_elementwise.c, k_loss.c). */
static bool runs_parallel(const Graph *g, const Node *n, const CostRates *r);

/* The FLOP rate of the measured convolution nearest to p (same kind; the
 * distance adds |log| ratios of inner dimension, output positions, output
 * channels, stride (a strided 1x1 convolution takes the im2col path) and
 * batch) for kernel `which` (0 forward, 1 backward data, 2 backward filter),
 * or 0 where the profile measured none of that kind. Linear in the shapes
 * measured (a few dozen). */
static double nearest_conv_rate(const CostRates *r, const snrt_conv_t *p, int kind, int which) {
  double best = 1e300, rate = 0;
  double K = (double)(p->c / p->group) * p->kh * p->kw, pos = (double)p->oh * p->ow;
  for (int i = 0; i < r->nshapes; i++) {
    const CostShape *q = &r->shapes[i];
    if (q->kind != kind) continue;
    double o = conv_shape_out(q);
    double dist = fabs(log(K / (q->c * q->ksize * q->ksize))) + fabs(log(pos / (o * o))) +
                  fabs(log(p->k / q->k)) + fabs(log((p->sh > 0 ? p->sh : 1) / q->stride)) +
                  0.5 * fabs(log(p->n / q->n));
    if (dist < best) {
      best = dist;
      rate = which == 0 ? q->fwd_rate : which == 1 && q->bwd_data_rate > 0 ? q->bwd_data_rate
             : which == 2 && q->bwd_filter_rate > 0 ? q->bwd_filter_rate : q->bwd_rate;
    }
  }
  return rate;
}

/* The FLOP rate of the measured GEMM nearest to p (|log| ratios of m, n, k
 * and the batch, which counts the sgemm calls; a transpose that differs adds
 * a little), or 0 where the profile measured none. Linear in the shapes. */
static double nearest_gemm_rate(const CostRates *r, const snrt_mm_t *p) {
  double best = 1e300, rate = 0;
  for (int i = 0; i < r->ngemms; i++) {
    const CostGemm *q = &r->gemms[i];
    double dist = fabs(log((double)p->m / q->m)) + fabs(log((double)p->n / q->n)) +
                  fabs(log((double)p->k / q->k)) + fabs(log((double)p->batch / q->batch)) +
                  0.25 * ((p->trans_a != 0) != q->trans_a) + 0.25 * ((p->trans_b != 0) != q->trans_b);
    if (dist < best) best = dist, rate = q->rate;
  }
  return rate;
}

/* The rate (window elements per second) of the measured pooling nearest to
 * p of the same kind (|log| ratios of the work and the window, the stride),
 * or 0 where the profile measured none. */
static double nearest_pool_rate(const CostRates *r, const snrt_pool_t *p, int avg, bool bwd) {
  double best = 1e300, rate = 0;
  double work = (double)p->n * p->c * p->oh * p->ow * p->kh * p->kw, win = (double)p->kh * p->kw;
  for (int i = 0; i < r->npools; i++) {
    const CostPool *q = &r->pools[i];
    if (q->avg != avg) continue;
    double dist = fabs(log(work / q->work)) + fabs(log(win / q->window)) +
                  fabs(log((p->sh > 0 ? p->sh : 1) / q->stride));
    if (dist < best) best = dist, rate = bwd ? q->bwd_rate : q->fwd_rate;
  }
  return rate;
}

/* Elements of the node's largest operand (which decides whether a CPU
 * kernel runs as a parallel region). */
static double largest_operand(const Graph *g, const Node *n) {
  double m = 0;
  for (int k = 0; k < n->nin + n->nout; k++) {
    int t = k < n->nin ? n->in[k] : n->out[k - n->nin];
    if (t >= 0 && (double)tensor_numel(&g->t[t]) > m) m = (double)tensor_numel(&g->t[t]);
  }
  return m;
}

static bool runs_parallel(const Graph *g, const Node *n, const CostRates *r) {
  if (r->parallel_min <= 0 || n->op == OP_SOFTMAX_CE || n->op == OP_MSE) return false;
  double div = 1;
  if (n->op == OP_ERF || n->op == OP_POW || n->op == OP_MATH_BWD || n->op == OP_SIN ||
      n->op == OP_COS || n->op == OP_EXP || n->op == OP_LOG || n->op == OP_ABS ||
      n->op == OP_HARDSIGMOID || n->op == OP_HARDSWISH) {
    const snrt_math_t *p = n->p;
    div = p && p->kind != SNRT_SQRT && p->kind != SNRT_NEG && p->kind != SNRT_RECIPROCAL ? 8 : 1;
  } else if (n->op == OP_SIGMOID || n->op == OP_TANH || n->op == OP_FUSED || n->op == OP_FUSED_BWD) {
    div = 8;
  } else if (n->op == OP_DROPOUT || n->op == OP_DROPOUT_BWD) {
    div = 4;
  }
  return largest_operand(g, n) > r->parallel_min / div;
}

double cost_node_seconds(const Graph *g, const Node *n, double bytes, const DeviceProfile *d) {
  double fl = op_info[n->op].flops(g, n);
  const CostRates *r = d->rates;
  if (!r) {
    double tc = fl / d->flops, tm = bytes / d->mem_bw;
    return tc > tm ? tc : tm;
  }
  CostClass c = cost_class(g, n);
  if (c == CC_POOL && n->p) {   /* window elements visited, forward or backward */
    const snrt_pool_t *p = n->p;
    fl = (double)p->n * p->c * p->oh * p->ow * p->kh * p->kw;
    bool avg = n->op == OP_AVGPOOL || n->op == OP_GLOBALAVGPOOL || n->op == OP_AVGPOOL_BWD;
    double rate = nearest_pool_rate(r, p, avg, n->op == OP_MAXPOOL_BWD || n->op == OP_AVGPOOL_BWD);
    if (rate > 0) return fl / rate + r->overhead[c];
  }
  if (c <= CC_CONV_BWD_1X1 && n->p) {
    double rate = nearest_conv_rate(r, n->p, conv_kind(n), n->op == OP_CONV_BWD_DATA     ? 1
                                                           : n->op == OP_CONV_BWD_FILTER ? 2 : 0);
    /* the measured shape's rate beyond its class's fixed costs (devices.c),
     * and those costs for this call */
    if (rate > 0) return fl / rate + r->overhead[c] + cost_units(n, c) * r->per_unit[c];
  }
  if (c == CC_GEMM && n->p && fl > 0) {
    const snrt_mm_t *mm = n->op == OP_GEMM ? &((const GemmParams *)n->p)->mm : n->p;
    double rate = nearest_gemm_rate(r, mm);
    if (rate > 0) return fl / rate + r->overhead[c];
  }
  double par = r->parallel[c] > 0 && runs_parallel(g, n, r) ? r->parallel[c] : 0;
  double tc = r->class_flops[c] > 0 ? fl / r->class_flops[c] : 0;
  double tm = r->class_bw[c] > 0 ? bytes / r->class_bw[c] : 0;
  return (tc > tm ? tc : tm) + r->overhead[c] + cost_units(n, c) * r->per_unit[c] + par;
}

double cost_copy_seconds(double bytes, CopyDir dir, const DeviceProfile *d) {
  if (!d->rates) return bytes / d->link_bw;
  const CostRates *r = d->rates;
  return dir == COPY_D2H ? r->d2h_s + bytes / r->d2h_bw : r->h2d_s + bytes / r->h2d_bw;
}

double cost_copy_loss(double overlap, CopyDir dir, const DeviceProfile *d) {
  if (!d->rates || overlap <= 0) return 0;
  return overlap * (dir == COPY_D2H ? d->rates->d2h_loss : d->rates->h2d_loss);
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
