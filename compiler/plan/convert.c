/* convert.c — the float32 working copies of a 16-bit step (--precision
 * bf16|fp16): which operands a step converts, in what chunks, and where each
 * copy lies in the step's workspace.
 *
 * Requires: shapes and node params (shape.c, autodiff.c) and storage dtypes
 * (precision_assign). Used by liveness.c and recompute.c (how many bytes a
 * step's workspace holds) and emit_convert.c (the code that converts); both
 * call convert_plan, so the plan sizes exactly what the program uses.
 *
 * The kernels compute in float32 on both targets (the CUDA target's
 * convolutions and GEMMs excepted: they read 16-bit operands on tensor cores,
 * g->tensor_cores; their float32 operands get 16-bit copies instead,
 * tensor_core_plan). A step that reads or writes a
 * 16-bit tensor, or a 16-bit op (conv, GEMM, MatMul) that reads a float32
 * operand (a weight, a bias, the data input: rounded to 16-bit precision, as
 * autocast does; the CPU conv kernels round their weights and bias
 * themselves, a block at a time, snrt_conv_t.round_w), runs on float32 copies: each 16-bit input widened into one,
 * each float32 input of a 16-bit op rounded into one, each 16-bit output
 * computed into one and rounded to nearest-even into the arena. The copies
 * never alias, so a step the planner made in place gives the bits it gives
 * out of place. They are the first convert_bytes bytes of the step's
 * workspace instance (a conv's im2col buffer follows them): the planner packs
 * them, the overlap checker checks them, budgets count them, --poison fills
 * them when the step ends, and the plan reports them.
 *
 * Chunks keep the copies small: a step whose kernel computes on a part of its
 * operands exactly the bits it computes there on the whole converts and runs
 * one chunk at a time, in g->convert_chunk elements or so:
 *   CHUNK_FLAT      elementwise ops without broadcasting (activations and
 *                   their gradients, Add/Sub/Mul/Div of equal shapes, or by a
 *                   scalar, and their gradients but the scalar's, gradient
 *                   accumulation, Sqrt/Erf/Neg/
 *                   Reciprocal/Pow, copies between dtypes): runs of elements;
 *   CHUNK_IMAGES    pools, LRN, convolution forward and backward-data: whole
 *                   images of the batch (at least one); each image's outputs
 *                   depend on that image alone. A convolution's chunks are
 *                   whole groups of the images its kernel puts in one GEMM
 *                   (snrt_conv_gemm_images), so that they make the very GEMM
 *                   calls of the whole batch (OpenBLAS may round a column
 *                   differently in a call of another size); backward-filter
 *                   too, the chunks after the first adding to dw in the
 *                   kernel's own order;
 *   CHUNK_CHANNELS  BatchNorm (training, recomputation, inference, backward):
 *                   whole channels (at least one); each channel's statistics
 *                   are summed by one thread in a fixed order over its own
 *                   elements.
 * Everything else (GEMM, MatMul, softmax, the loss, LayerNorm, the shape ops,
 * the backward-filter of a conv with one input channel per group, whose sum
 * over the batch runs in one piece) converts whole tensors. g->convert_chunk 0 converts whole tensors
 * everywhere (--convert-chunk 0: what tests compare the chunks against).
 */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

static bool is16(int dt) { return dt == DT_BFLOAT16 || dt == DT_FLOAT16; }

/* A float tensor in the arena (constants folded into node params have none). */
static bool arena_float(const Graph *g, int t) {
  if (t < 0 || g->t[t].kind == TK_CONST) return false;
  int dt = g->t[t].dtype;
  return dt == DT_FLOAT || dt == DT_BFLOAT16 || dt == DT_FLOAT16;
}

static bool comm_op(OpKind op) {
  return op == OP_ALLREDUCE || op == OP_COMM_WAIT || op == OP_REDUCE_SCATTER || op == OP_ALLGATHER;
}

/* A copy-class op (Reshape, Flatten...): between tensors of one dtype it
 * copies the bytes, no conversion. */
static bool copy_op(OpKind op) { return op_info[op].emit == emit_copy; }

static bool flat_op(const Node *n) {
  switch (n->op) {
  case OP_RELU: case OP_LEAKYRELU: case OP_SIGMOID: case OP_TANH: case OP_CLIP: case OP_UNARY_BWD:
  case OP_ACCUMULATE: case OP_SQRT: case OP_ERF: case OP_NEG: case OP_RECIPROCAL: case OP_POW:
  case OP_MATH_BWD: case OP_SIN: case OP_COS: case OP_EXP: case OP_LOG: case OP_ABS:
  case OP_HARDSIGMOID: case OP_HARDSWISH: case OP_FUSED: case OP_FUSED_BWD:
    return true;
  case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_BINARY_BWD: case OP_MIN: case OP_MAX: {
    /* Equal shapes, or one operand a scalar whose gradient (a sum over every
     * element) the step does not compute. */
    const snrt_binary_t *p = n->p;
    if (!p) return false;
    bool fa = p->na == p->n, fb = p->nb == p->n;
    if (n->op == OP_BINARY_BWD && ((!fa && (n->aux & 1)) || (!fb && (n->aux & 2)))) return false;
    return (fa || p->na == 1) && (fb || p->nb == 1);
  }
  default:
    return copy_op(n->op);
  }
}

static bool image_op(const Node *n) {
  switch (n->op) {
  case OP_CONV: case OP_CONV_BWD_DATA: case OP_MAXPOOL: case OP_AVGPOOL: case OP_GLOBALAVGPOOL:
  case OP_MAXPOOL_BWD: case OP_AVGPOOL_BWD: case OP_LRN: case OP_LRN_BWD:
    return true;
  case OP_CONV_BWD_FILTER:   /* unless its sum over the batch runs in one piece */
    return snrt_conv_gemm_images(n->p) > 0;
  default:
    return false;
  }
}

static bool channel_op(OpKind op) {
  return op == OP_BATCHNORM || op == OP_BN_SAVED || op == OP_BN_INFER || op == OP_BN_BWD;
}

/* The operands of an image op that are (batch, ...) and follow its images:
 * a convolution's activations and their gradients, not its weights, bias or
 * weight gradient (whose first dimension may equal the batch by chance);
 * every operand of a pool or LRN. */
static bool image_slot(OpKind op, bool input, int k) {
  switch (op) {
  case OP_CONV: case OP_CONV_BWD_DATA: return k == 0;
  case OP_CONV_BWD_FILTER: return input && k <= 1;
  default: return true;
  }
}

/* The chunk view of slot tensor t along the axis: `outer` rows of `inner`
 * elements per unit (false: it does not follow the chunks). */
static bool slot_view(const Graph *g, const Node *n, ChunkAxis axis, int64_t units, bool input,
                      int k, int t, int64_t *outer, int64_t *inner) {
  const Tensor *x = &g->t[t];
  int64_t numel = tensor_numel(x);
  switch (axis) {
  case CHUNK_FLAT:
    *outer = 1, *inner = 1;
    return numel == units;
  case CHUNK_IMAGES:
    if (!image_slot(n->op, input, k) || x->rank < 1 || x->dims[0] != units) return false;
    *outer = 1, *inner = numel / units;
    return true;
  case CHUNK_CHANNELS: {
    const snrt_bn_t *p = n->p;
    /* x, y, dy, dx: (n, c, hw); scale, bias, statistics and their gradients: (c). */
    if (numel == (int64_t)p->n * p->c * p->hw && x->rank >= 2 && x->dims[1] == p->c) {
      *outer = p->n, *inner = p->hw;
      return true;
    }
    if (numel == p->c) {
      *outer = 1, *inner = 1;
      return true;
    }
    return false;
  }
  default:
    return false;
  }
}

/* The axes a step may chunk along, with the units each splits. */
static int step_axes(const Graph *g, const Node *n, ChunkAxis *axis, int64_t *units) {
  int na = 0;
  if (flat_op(n)) {
    axis[na] = CHUNK_FLAT, units[na++] = tensor_numel(&g->t[n->out[0]]);
  } else if (channel_op(n->op) && n->p) {
    axis[na] = CHUNK_CHANNELS, units[na++] = ((const snrt_bn_t *)n->p)->c;
  } else {
    if (n->p && image_op(n) && n->in[0] >= 0)   /* input 0 is (batch, ...) */
      axis[na] = CHUNK_IMAGES, units[na++] = g->t[n->in[0]].dims[0];
  }
  return na;
}

/* Float32 inputs a 16-bit op's kernel rounds itself as it reads them: the
 * CPU conv's weights and bias (snrt_conv_t.round_w). */
static bool kernel_rounds(const Node *n, int k) {
  return (n->op == OP_CONV || n->op == OP_CONV_BWD_DATA) && k >= 1 && n->p &&
         ((const snrt_conv_t *)n->p)->round_w;
}

static int64_t align_floats(int64_t f) { return (f + 63) / 64 * 64; }   /* 256 bytes */

/* Lays the copies out with chunks along `axis` (CHUNK_WHOLE: none); returns
 * false where the axis does not fit the step. */
static bool layout(const Graph *g, const Node *n, Convert *cv, ChunkAxis axis, int64_t units) {
  cv->axis = axis;
  cv->units = units;
  cv->accumulates = false;
  int64_t unit_max = 0;
  for (int k = 0; k < n->nin + n->nout; k++) {
    bool out = k >= n->nin;
    int j = out ? k - n->nin : k;
    ConvertSlot *s = out ? &cv->out[j] : &cv->in[j];
    s->chunked = false;
    if (s->tensor < 0 || axis == CHUNK_WHOLE ||
        !slot_view(g, n, axis, units, !out, j, s->tensor, &s->outer, &s->inner))
      continue;
    s->chunked = true;
    if (s->outer * s->inner > unit_max) unit_max = s->outer * s->inner;
    /* A float32 operand that is not one run per chunk would need a copy too. */
    if (!s->copy && s->outer > 1) return false;
  }
  if (axis != CHUNK_WHOLE && unit_max <= 0) return false;
  if (axis == CHUNK_WHOLE) {
    cv->chunk = units;
  } else {
    cv->chunk = g->convert_chunk / unit_max;
    if (cv->chunk < 1) cv->chunk = 1;
    if (n->op == OP_CONV || n->op == OP_CONV_BWD_DATA || n->op == OP_CONV_BWD_FILTER) {
      /* Whole groups of the kernel's GEMMs: each chunk makes the very GEMM
       * calls the whole batch makes there (OpenBLAS 0.3.21 gives some
       * columns other bits in a call of another size: measured); the
       * backward-filter's later chunks add to dw. The direct loops (0) run
       * image by image. */
      int64_t grp = snrt_conv_gemm_images(n->p);
      if (grp < 1) grp = 1;
      cv->chunk = (cv->chunk + grp - 1) / grp * grp;
      cv->accumulates = n->op == OP_CONV_BWD_FILTER;
    }
    if (cv->chunk > units) cv->chunk = units;
    if (cv->chunk == units) cv->accumulates = false;
  }
  /* Copies: inputs in order, then outputs, each 256-byte aligned. */
  int64_t at = 0;
  for (int k = 0; k < n->nin + n->nout; k++) {
    bool out = k >= n->nin;
    ConvertSlot *s = out ? &cv->out[k - n->nin] : &cv->in[k];
    if (s->tensor < 0 || !s->copy || s->same >= 0) continue;
    s->floats = s->chunked ? s->outer * cv->chunk * s->inner : tensor_numel(&g->t[s->tensor]);
    s->at = at;
    at += 4 * align_floats(s->floats);
  }
  cv->bytes = arena_align(at);
  return true;
}

/* The bias input of a conv or GEMM: float32 on tensor cores too (added to
 * the 16-bit output in float32). */
static bool bias_input(const Node *n, int k) {
  return k == 2 && (n->op == OP_CONV || n->op == OP_GEMM);
}

/* Slot k of node n (its inputs, then its outputs): its tensor and dtype;
 * NULL (tensor -1) when it is no float operand in the arena. */
static ConvertSlot *slot_open(const Graph *g, const Node *n, Convert *cv, int k) {
  bool out = k >= n->nin;
  int j = out ? k - n->nin : k;
  ConvertSlot *s = out ? &cv->out[j] : &cv->in[j];
  s->tensor = out ? n->out[j] : n->in[j];
  s->same = -1;
  if (!arena_float(g, s->tensor)) {
    s->tensor = -1;
    return NULL;
  }
  s->dtype = g->t[s->tensor].dtype;
  return s;
}

/* Input slot j shares the copy of an earlier input slot of the same tensor. */
static void slot_same(Convert *cv, int j) {
  for (int i = 0; i < j; i++)
    if (cv->in[i].tensor == cv->in[j].tensor) cv->in[j].same = i;
}

/* Tensor cores (the CUDA target): a conv, GEMM or MatMul reads 16-bit
 * operands; each float32 one (a weight, the data input) gets a 16-bit copy
 * in the step's workspace, made before the call, and so does a float32
 * output of a convolution (cuDNN writes its output in its inputs' type:
 * backward-filter's parameter gradient), widened after it. cuBLAS writes
 * float32 outputs itself. Whole tensors: the copies are 2 bytes an element. */
static void tensor_core_plan(const Graph *g, const Node *n, Convert *cv) {
  bool conv = n->op == OP_CONV || n->op == OP_CONV_BWD_DATA || n->op == OP_CONV_BWD_FILTER;
  cv->half = true;
  cv->in = xcalloc((size_t)n->nin + 1, sizeof *cv->in);
  cv->out = xcalloc((size_t)n->nout + 1, sizeof *cv->out);
  int64_t at = 0;
  for (int k = 0; k < n->nin + n->nout; k++) {
    bool out = k >= n->nin;
    int j = out ? k - n->nin : k;
    ConvertSlot *s = slot_open(g, n, cv, k);
    if (!s) continue;
    s->copy = !is16(s->dtype) && (out ? conv : !bias_input(n, j));
    if (!out) slot_same(cv, j);
    if (!s->copy || s->same >= 0) continue;
    s->floats = tensor_numel(&g->t[s->tensor]);
    s->at = at;
    at += arena_align(2 * s->floats);
    cv->wrapped = true;
  }
  cv->axis = CHUNK_WHOLE;
  cv->units = cv->chunk = 1;
  cv->bytes = arena_align(at);
}

void convert_plan(const Graph *g, const Node *n, Convert *cv) {
  memset(cv, 0, sizeof *cv);
  cv->nin = n->nin, cv->nout = n->nout;
  if (g->precision == PREC_FP32 || comm_op(n->op)) return;
  bool low = precision_low_op(n->op);
  if (low && g->tensor_cores) {
    tensor_core_plan(g, n, cv);
    return;
  }
  bool any = false, same = true;
  int dt0 = -1;
  for (int k = 0; k < n->nin + n->nout; k++) {
    bool out = k >= n->nin;
    int t = out ? n->out[k - n->nin] : n->in[k];
    if (!arena_float(g, t)) continue;
    int dt = g->t[t].dtype;
    if (dt0 < 0) dt0 = dt;
    same &= dt == dt0;
    any |= is16(dt) || (low && !out);
  }
  if (!any || (copy_op(n->op) && same)) return;
  cv->wrapped = true;
  cv->in = xcalloc((size_t)n->nin + 1, sizeof *cv->in);
  cv->out = xcalloc((size_t)n->nout + 1, sizeof *cv->out);
  /* Slots: which convert. */
  for (int k = 0; k < n->nin + n->nout; k++) {
    bool out = k >= n->nin;
    int j = out ? k - n->nin : k;
    ConvertSlot *s = slot_open(g, n, cv, k);
    if (!s) continue;
    s->copy = is16(s->dtype) || (low && !out && !kernel_rounds(n, j));
    if (!out) slot_same(cv, j);
  }
  /* The axis whose chunks take the fewest bytes (whole tensors where none
   * fits, or --convert-chunk 0). */
  ChunkAxis axes[4];
  int64_t units[4];
  int na = g->convert_chunk > 0 ? step_axes(g, n, axes, units) : 0;
  int best = -1;
  int64_t best_bytes = 0;
  for (int a = 0; a < na; a++)
    if (layout(g, n, cv, axes[a], units[a]) && (best < 0 || cv->bytes < best_bytes))
      best = a, best_bytes = cv->bytes;
  if (best < 0) layout(g, n, cv, CHUNK_WHOLE, 1);
  else layout(g, n, cv, axes[best], units[best]);
}

void convert_free(Convert *cv) {
  free(cv->in);
  free(cv->out);
  cv->in = cv->out = NULL;
}

int64_t convert_bytes(const Graph *g, const Node *n) {
  Convert cv;
  convert_plan(g, n, &cv);
  int64_t b = cv.bytes;
  convert_free(&cv);
  return b;
}

void *convert_chunk_params(const Node *n, ChunkAxis axis, int64_t m, bool first) {
  switch (n->op) {
  case OP_CONV: case OP_CONV_BWD_DATA: case OP_CONV_BWD_FILTER: {
    snrt_conv_t *p = xmalloc(sizeof *p);
    *p = *(const snrt_conv_t *)n->p;
    p->n = (int)m;
    p->accumulate = n->op == OP_CONV_BWD_FILTER && !first;
    return p;
  }
  case OP_MAXPOOL: case OP_AVGPOOL: case OP_GLOBALAVGPOOL: case OP_MAXPOOL_BWD: case OP_AVGPOOL_BWD: {
    snrt_pool_t *p = xmalloc(sizeof *p);
    *p = *(const snrt_pool_t *)n->p;
    p->n = (int)m;
    return p;
  }
  case OP_LRN: case OP_LRN_BWD: {
    snrt_lrn_t *p = xmalloc(sizeof *p);
    *p = *(const snrt_lrn_t *)n->p;
    p->n = (int)m;
    return p;
  }
  case OP_BATCHNORM: case OP_BN_SAVED: case OP_BN_INFER: case OP_BN_BWD: {
    snrt_bn_t *p = xmalloc(sizeof *p);
    *p = *(const snrt_bn_t *)n->p;
    p->c = (int)m;
    return p;
  }
  case OP_RELU: case OP_LEAKYRELU: case OP_SIGMOID: case OP_TANH: case OP_CLIP: case OP_UNARY_BWD: {
    snrt_unary_t *p = xmalloc(sizeof *p);
    *p = *(const snrt_unary_t *)n->p;
    p->n = m;
    return p;
  }
  case OP_SQRT: case OP_ERF: case OP_NEG: case OP_RECIPROCAL: case OP_POW: case OP_MATH_BWD:
  case OP_SIN: case OP_COS: case OP_EXP: case OP_LOG: case OP_ABS: case OP_HARDSIGMOID:
  case OP_HARDSWISH: {
    snrt_math_t *p = xmalloc(sizeof *p);
    *p = *(const snrt_math_t *)n->p;
    p->n = m;
    return p;
  }
  case OP_FUSED: case OP_FUSED_BWD: {
    snrt_fused_t *p = xmalloc(sizeof *p);
    *p = *(const snrt_fused_t *)n->p;
    p->n = m;
    return p;
  }
  case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_BINARY_BWD: case OP_MIN:
  case OP_MAX: {
    /* One contiguous run of m elements for every full operand; a scalar
     * operand broadcasts (stride 0). */
    const snrt_binary_t *q = n->p;
    snrt_binary_t *p = xcalloc(1, sizeof *p);
    p->kind = q->kind;
    p->rank = 1;
    p->n = m;
    p->dims[0] = m;
    p->na = q->na == q->n ? m : 1;
    p->nb = q->nb == q->n ? m : 1;
    p->sa[0] = q->na == q->n;
    p->sb[0] = q->nb == q->n;
    return p;
  }
  default:
    return NULL;   /* ACCUMULATE, copies: the emitter takes the count from Emit */
  }
}
