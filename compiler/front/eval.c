/* eval.c — compile-time evaluation of everything constant: one evaluator,
 * one home, one table (EVAL_OPS below, like ops.h).
 *
 * Exporters compute much of a model from constants alone: shape arithmetic
 * (Shape, Gather, Concat -> Reshape's target), causal masks (Trilu, Range,
 * Less, Where), rotary tables (Range, MatMul, Sin, Cos), token-type buffers
 * (Expand of an int64 constant), window masks (ScatterND, Mod, Not). Any
 * node whose inputs are all known at compile time (initializers that are not
 * trainable parameters, Constant nodes, values computed here, and for Shape
 * and Size the shape of any tensor) is evaluated here, as shape inference
 * reaches it, on every standard dtype (float16/32/64, bfloat16, int8-64,
 * uint8-64, bool); its outputs become TK_CONST tensors with data and the node
 * is dropped (eval_remove), so no later pass sees it.
 *
 * The table holds every ONNX op the evaluator computes. An op that is also a
 * row of ops.h (Add, Reshape, Gather...) runs on data through that row; one
 * that is not (Sin, Trilu, ScatterND...) is imported as OP_EVAL with its
 * ONNX op_type in node->onnx_op, and is accepted only where its inputs are
 * constants: elsewhere a clear error names the node and the data input.
 *
 * Requires: inputs shaped (shape_infer walks the nodes in order).
 * Provides: eval_node(), eval_remove(), eval_find() for import, and
 * shape_fold (the shape column of ops that only evaluate).
 *
 * Semantics are ONNX's (opsets 7 to the newest): float arithmetic runs in
 * double and is rounded once to the output type (exact for + - * / in
 * float32, correctly rounded elementary functions up to libm); integers wrap
 * like the machine type; Cast of an out-of-range float to an integer and
 * integer division by zero are errors naming the node. Values above
 * EVAL_MAX_ELEMS elements are refused (a model computing its weights from
 * constants would bake them into train.c). */
#include "shape.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EVAL_MAX_ELEMS ((int64_t)1 << 24)

typedef void EvalFn(Graph *g, Node *n, const char *op);

/* name, inputs min..max, outputs min..max, evaluator. */
#define EVAL_OPS(X) \
  X("Identity", 1, 1, 1, 1, ev_identity) X("Reshape", 1, 2, 1, 1, ev_view) \
  X("Flatten", 1, 1, 1, 1, ev_view) X("Squeeze", 1, 2, 1, 1, ev_view) \
  X("Unsqueeze", 1, 2, 1, 1, ev_view) X("Transpose", 1, 1, 1, 1, ev_view) \
  X("Slice", 1, 5, 1, 1, ev_view) X("Concat", 1, -1, 1, 1, ev_view) \
  X("Split", 1, 2, 1, -1, ev_split) X("Shape", 1, 1, 1, 1, ev_shape) \
  X("Size", 1, 1, 1, 1, ev_size) X("ConstantOfShape", 1, 1, 1, 1, ev_constant_of_shape) \
  X("Range", 3, 3, 1, 1, ev_range) X("EyeLike", 1, 1, 1, 1, ev_eyelike) \
  X("Cast", 1, 1, 1, 1, ev_cast) X("CastLike", 2, 2, 1, 1, ev_cast) \
  X("Gather", 2, 2, 1, 1, ev_gather) X("GatherElements", 2, 2, 1, 1, ev_gather_elements) \
  X("GatherND", 2, 2, 1, 1, ev_gather_nd) X("ScatterND", 3, 3, 1, 1, ev_scatter_nd) \
  X("ScatterElements", 3, 3, 1, 1, ev_scatter_elements) X("Scatter", 3, 3, 1, 1, ev_scatter_elements) \
  X("Expand", 2, 2, 1, 1, ev_expand) X("Tile", 2, 2, 1, 1, ev_tile) \
  X("Trilu", 1, 2, 1, 1, ev_trilu) X("Where", 3, 3, 1, 1, ev_where) \
  X("Add", 2, 2, 1, 1, ev_binary) X("Sub", 2, 2, 1, 1, ev_binary) \
  X("Mul", 2, 2, 1, 1, ev_binary) X("Div", 2, 2, 1, 1, ev_binary) \
  X("Pow", 2, 2, 1, 1, ev_binary) X("Mod", 2, 2, 1, 1, ev_binary) \
  X("Less", 2, 2, 1, 1, ev_binary) X("LessOrEqual", 2, 2, 1, 1, ev_binary) \
  X("Greater", 2, 2, 1, 1, ev_binary) X("GreaterOrEqual", 2, 2, 1, 1, ev_binary) \
  X("Equal", 2, 2, 1, 1, ev_binary) X("And", 2, 2, 1, 1, ev_binary) \
  X("Or", 2, 2, 1, 1, ev_binary) X("Xor", 2, 2, 1, 1, ev_binary) \
  X("BitwiseAnd", 2, 2, 1, 1, ev_binary) X("BitwiseOr", 2, 2, 1, 1, ev_binary) \
  X("BitwiseXor", 2, 2, 1, 1, ev_binary) X("BitShift", 2, 2, 1, 1, ev_binary) \
  X("PRelu", 2, 2, 1, 1, ev_binary) \
  X("Min", 1, -1, 1, 1, ev_variadic) X("Max", 1, -1, 1, 1, ev_variadic) \
  X("Sum", 1, -1, 1, 1, ev_variadic) X("Mean", 1, -1, 1, 1, ev_variadic) \
  X("Abs", 1, 1, 1, 1, ev_unary) X("Neg", 1, 1, 1, 1, ev_unary) X("Sign", 1, 1, 1, 1, ev_unary) \
  X("Sqrt", 1, 1, 1, 1, ev_unary) X("Exp", 1, 1, 1, 1, ev_unary) X("Log", 1, 1, 1, 1, ev_unary) \
  X("Sin", 1, 1, 1, 1, ev_unary) X("Cos", 1, 1, 1, 1, ev_unary) X("Tan", 1, 1, 1, 1, ev_unary) \
  X("Asin", 1, 1, 1, 1, ev_unary) X("Acos", 1, 1, 1, 1, ev_unary) X("Atan", 1, 1, 1, 1, ev_unary) \
  X("Sinh", 1, 1, 1, 1, ev_unary) X("Cosh", 1, 1, 1, 1, ev_unary) \
  X("Asinh", 1, 1, 1, 1, ev_unary) X("Acosh", 1, 1, 1, 1, ev_unary) \
  X("Atanh", 1, 1, 1, 1, ev_unary) X("Tanh", 1, 1, 1, 1, ev_unary) \
  X("Sigmoid", 1, 1, 1, 1, ev_unary) X("Erf", 1, 1, 1, 1, ev_unary) \
  X("Floor", 1, 1, 1, 1, ev_unary) X("Ceil", 1, 1, 1, 1, ev_unary) X("Round", 1, 1, 1, 1, ev_unary) \
  X("Reciprocal", 1, 1, 1, 1, ev_unary) X("Relu", 1, 1, 1, 1, ev_unary) \
  X("Not", 1, 1, 1, 1, ev_unary) X("BitwiseNot", 1, 1, 1, 1, ev_unary) \
  X("IsNaN", 1, 1, 1, 1, ev_unary) X("IsInf", 1, 1, 1, 1, ev_unary) \
  X("Softplus", 1, 1, 1, 1, ev_unary) X("Softsign", 1, 1, 1, 1, ev_unary) \
  X("LeakyRelu", 1, 1, 1, 1, ev_unary) X("Elu", 1, 1, 1, 1, ev_unary) \
  X("Selu", 1, 1, 1, 1, ev_unary) X("Celu", 1, 1, 1, 1, ev_unary) \
  X("HardSigmoid", 1, 1, 1, 1, ev_unary) X("HardSwish", 1, 1, 1, 1, ev_unary) \
  X("Mish", 1, 1, 1, 1, ev_unary) X("ThresholdedRelu", 1, 1, 1, 1, ev_unary) \
  X("Shrink", 1, 1, 1, 1, ev_unary) X("Clip", 1, 3, 1, 1, ev_clip) \
  X("ReduceSum", 1, 2, 1, 1, ev_reduce) X("ReduceMean", 1, 2, 1, 1, ev_reduce) \
  X("ReduceMax", 1, 2, 1, 1, ev_reduce) X("ReduceMin", 1, 2, 1, 1, ev_reduce) \
  X("ReduceProd", 1, 2, 1, 1, ev_reduce) X("ReduceL1", 1, 2, 1, 1, ev_reduce) \
  X("ReduceL2", 1, 2, 1, 1, ev_reduce) X("ReduceSumSquare", 1, 2, 1, 1, ev_reduce) \
  X("ReduceLogSum", 1, 2, 1, 1, ev_reduce) X("ReduceLogSumExp", 1, 2, 1, 1, ev_reduce) \
  X("ArgMax", 1, 1, 1, 1, ev_argmax) X("ArgMin", 1, 1, 1, 1, ev_argmax) \
  X("CumSum", 2, 2, 1, 1, ev_cumsum) X("TopK", 2, 2, 2, 2, ev_topk) \
  X("OneHot", 3, 3, 1, 1, ev_onehot) X("NonZero", 1, 1, 1, 1, ev_nonzero) \
  X("MatMul", 2, 2, 1, 1, ev_matmul) X("Pad", 1, 4, 1, 1, ev_pad) \
  X("Dropout", 1, 3, 1, 2, ev_dropout) X("Softmax", 1, 1, 1, 1, ev_softmax) \
  X("LogSoftmax", 1, 1, 1, 1, ev_softmax) X("Hardmax", 1, 1, 1, 1, ev_softmax) \
  X("CumProd", 2, 2, 1, 1, ev_cumsum) X("Gelu", 1, 1, 1, 1, ev_unary) X("Swish", 1, 1, 1, 1, ev_unary) \
  X("LpNormalization", 1, 1, 1, 1, ev_lpnorm) X("BitCast", 1, 1, 1, 1, ev_bitcast) \
  X("DepthToSpace", 1, 1, 1, 1, ev_depth_space) X("SpaceToDepth", 1, 1, 1, 1, ev_depth_space) \
  X("GlobalMaxPool", 1, 1, 1, 1, ev_global_pool) X("GlobalAveragePool", 1, 1, 1, 1, ev_global_pool) \
  X("Compress", 2, 2, 1, 1, ev_compress) X("ReverseSequence", 2, 2, 1, 1, ev_reverse_sequence) \
  X("MeanVarianceNormalization", 1, 1, 1, 1, ev_mvn)

#define EVAL_DECL(name, a, b, c, d, fn) static EvalFn fn;
EVAL_OPS(EVAL_DECL)
#undef EVAL_DECL

static const struct EvalOp {
  const char *name;
  int min_in, max_in, min_out, max_out;
  EvalFn *fn;
} eval_ops[] = {
#define EVAL_ROW(name, a, b, c, d, fn) {name, a, b, c, d, fn},
    EVAL_OPS(EVAL_ROW)
#undef EVAL_ROW
};
enum { EVAL_NOPS = sizeof eval_ops / sizeof eval_ops[0] };

int eval_find(const char *onnx_op) {
  for (int i = 0; i < EVAL_NOPS; i++)
    if (strcmp(eval_ops[i].name, onnx_op) == 0) return i;
  return -1;
}

const char *eval_op_name(int k) { return eval_ops[k].name; }

void eval_arity(int k, int *min_in, int *max_in, int *min_out, int *max_out) {
  *min_in = eval_ops[k].min_in, *max_in = eval_ops[k].max_in;
  *min_out = eval_ops[k].min_out, *max_out = eval_ops[k].max_out;
}

/* ---- element access on every dtype ---- */

static bool dt_float(int dt) {
  return dt == DT_FLOAT || dt == DT_DOUBLE || dt == DT_FLOAT16 || dt == DT_BFLOAT16;
}
static bool dt_int(int dt) {
  return dt == DT_INT64 || dt == DT_INT32 || dt == DT_INT16 || dt == DT_INT8 || dt == DT_UINT8 ||
         dt == DT_UINT16 || dt == DT_UINT32 || dt == DT_UINT64 || dt == DT_BOOL;
}
static bool dt_unsigned(int dt) {
  return dt == DT_UINT8 || dt == DT_UINT16 || dt == DT_UINT32 || dt == DT_UINT64 || dt == DT_BOOL;
}

static float half_to_float(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY)
                                                    : ldexpf((float)(m | 1024), e - 25);
  return h & 0x8000 ? -v : v;
}

static uint16_t float_to_half(float f) {
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  float a = fabsf(f);
  if (isnan(f)) return 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;           /* rounds to infinity */
  if (a < ldexpf(1, -14)) {                           /* subnormal: units of 2^-24 */
    return sign | (uint16_t)nearbyintf(ldexpf(a, 24));
  }
  int e;
  float fr = frexpf(a, &e);                           /* a = fr * 2^e, fr in [0.5, 1) */
  int m = (int)nearbyintf(ldexpf(fr, 11));            /* 11 significant bits */
  if (m == 2048) m = 1024, e++;
  return sign | (uint16_t)(((e + 14) << 10) | (m - 1024));
}

static float bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);                      /* round to nearest even */
  return (uint16_t)(u >> 16);
}

static int64_t geti(const Tensor *t, int64_t k) {
  const void *d = t->data;
  switch (t->dtype) {
  case DT_INT64: case DT_UINT64: return ((const int64_t *)d)[k];
  case DT_INT32: return ((const int32_t *)d)[k];
  case DT_UINT32: return ((const uint32_t *)d)[k];
  case DT_INT16: return ((const int16_t *)d)[k];
  case DT_UINT16: return ((const uint16_t *)d)[k];
  case DT_INT8: return ((const int8_t *)d)[k];
  case DT_UINT8: case DT_BOOL: return ((const uint8_t *)d)[k];
  default: break;
  }
  double f = t->dtype == DT_FLOAT ? ((const float *)d)[k]
           : t->dtype == DT_DOUBLE ? ((const double *)d)[k]
           : t->dtype == DT_FLOAT16 ? half_to_float(((const uint16_t *)d)[k])
           : bf16_to_float(((const uint16_t *)d)[k]);
  return fabs(f) < 9.2e18 ? (int64_t)f : 0;
}

static double getf(const Tensor *t, int64_t k) {
  const void *d = t->data;
  switch (t->dtype) {
  case DT_FLOAT: return ((const float *)d)[k];
  case DT_DOUBLE: return ((const double *)d)[k];
  case DT_FLOAT16: return half_to_float(((const uint16_t *)d)[k]);
  case DT_BFLOAT16: return bf16_to_float(((const uint16_t *)d)[k]);
  case DT_UINT64: return (double)(uint64_t)((const int64_t *)d)[k];
  default: return (double)geti(t, k);
  }
}

/* Stores element k: float dtypes from f, integer ones from i. */
static void put(Tensor *t, int64_t k, double f, int64_t i) {
  void *d = t->data;
  switch (t->dtype) {
  case DT_FLOAT: ((float *)d)[k] = (float)f; break;
  case DT_DOUBLE: ((double *)d)[k] = f; break;
  case DT_FLOAT16: ((uint16_t *)d)[k] = float_to_half((float)f); break;
  case DT_BFLOAT16: ((uint16_t *)d)[k] = float_to_bf16((float)f); break;
  case DT_INT64: case DT_UINT64: ((int64_t *)d)[k] = i; break;
  case DT_INT32: ((int32_t *)d)[k] = (int32_t)i; break;
  case DT_UINT32: ((uint32_t *)d)[k] = (uint32_t)i; break;
  case DT_INT16: ((int16_t *)d)[k] = (int16_t)i; break;
  case DT_UINT16: ((uint16_t *)d)[k] = (uint16_t)i; break;
  case DT_INT8: ((int8_t *)d)[k] = (int8_t)i; break;
  case DT_UINT8: ((uint8_t *)d)[k] = (uint8_t)i; break;
  case DT_BOOL: ((uint8_t *)d)[k] = i != 0; break;
  default: unreachable();
  }
}

/* Stores a double into t's dtype (integers: truncated, checked). */
static void putf(const Node *n, Tensor *t, int64_t k, double f) {
  if (dt_float(t->dtype)) { put(t, k, f, 0); return; }
  if (t->dtype == DT_BOOL) { put(t, k, 0, f != 0); return; }
  if (!(fabs(f) < 9.2e18)) node_error(n, "the value %g does not fit %s", f, dtype_name(t->dtype));
  put(t, k, 0, (int64_t)f);
}

/* Copies element ks of s into element kd of d (same dtype). */
static void copy_el(Tensor *d, int64_t kd, const Tensor *s, int64_t ks) {
  size_t es = (size_t)dtype_size(d->dtype);
  memcpy((char *)d->data + (size_t)kd * es, (const char *)s->data + (size_t)ks * es, es);
}

static bool is_const(const Graph *g, int t) {
  return t >= 0 && g->t[t].kind == TK_CONST && g->t[t].data && g->t[t].rank >= 0;
}

static Tensor *in_t(Graph *g, Node *n, int i) {
  Tensor *t = shape_in(g, n, i);
  if (!dt_float(t->dtype) && !dt_int(t->dtype))
    node_error(n, "input %d ('%s') is %s, which snc does not evaluate", i, t->name,
               dtype_name(t->dtype));
  if (t->ndata < tensor_numel(t))
    node_error(n, "input %d ('%s') holds fewer values than its shape %s", i, t->name, shape_str(t));
  return t;
}

/* Gives output o of n dtype and dims and fresh zeroed data; returns it. */
static Tensor *out_t(Graph *g, Node *n, int o, int dtype, int rank, const int64_t *dims) {
  if (dtype_size(dtype) == 0) node_error(n, "cannot evaluate a value of type %s", dtype_name(dtype));
  if (o >= n->nout || n->out[o] < 0) {
    static Tensor sink;      /* an absent optional output: computed, dropped */
    free(sink.data);
    sink = (Tensor){.dtype = dtype, .rank = rank};
    for (int d = 0; d < rank; d++) sink.dims[d] = dims[d];
    int64_t c = shape_prod(n, dims, 0, rank);
    sink.data = xcalloc((size_t)(c ? c : 1), (size_t)dtype_size(dtype));
    sink.ndata = c;
    return &sink;
  }
  shape_set_out(g, n, o, dtype, rank, dims);
  Tensor *y = &g->t[n->out[o]];
  int64_t cnt = tensor_numel(y);
  if (cnt > EVAL_MAX_ELEMS)
    node_error(n, "evaluates to a constant of %lld elements (at most %lld)", (long long)cnt,
               (long long)EVAL_MAX_ELEMS);
  free(y->data);
  y->data = xcalloc((size_t)(cnt ? cnt : 1), (size_t)dtype_size(dtype));
  y->ndata = cnt;
  return y;
}

/* Integer values of constant input i (any integer dtype); count returned. */
static int ints_of(Graph *g, Node *n, int i, int64_t *v, int max) {
  const Tensor *t = in_t(g, n, i);
  if (!dt_int(t->dtype)) node_error(n, "input %d ('%s') must be integer, not %s", i, t->name,
                                    dtype_name(t->dtype));
  int64_t c = tensor_numel(t);
  if (c > max) node_error(n, "input %d ('%s') has %lld values, at most %d", i, t->name,
                          (long long)c, max);
  for (int64_t k = 0; k < c; k++) v[k] = geti(t, k);
  return (int)c;
}

static void strides_of(int rank, const int64_t *dims, int64_t *st) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) st[d] = s, s *= dims[d];
}

/* Advances a row-major multi-index; false when it wraps around. */
static bool next_index(int rank, const int64_t *dims, int64_t *idx) {
  for (int d = rank - 1; d >= 0; d--) {
    if (++idx[d] < dims[d]) return true;
    idx[d] = 0;
  }
  return false;
}

/* Axes from the attribute `name`, or from input `in` when present. */
static int axes_of(Graph *g, Node *n, const char *name, int in, int64_t *axes) {
  const int64_t *v;
  int na = attr_ints(n, name, &v);
  if (na > MAX_RANK) node_error(n, "too many %s", name);
  if (na) { memcpy(axes, v, sizeof(int64_t) * (size_t)na); return na; }
  if (shape_has_in(n, in)) return ints_of(g, n, in, axes, MAX_RANK);
  return 0;
}

/* ---- ops that have a row in ops.h move elements as its shape function
 * says (node params), here at compile time ---- */

static void ev_identity(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0);
  Tensor *y = out_t(g, n, 0, x->dtype, x->rank, x->dims);
  if (y->ndata) memcpy(y->data, x->data, (size_t)tensor_bytes(x));
}

static void ev_view(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0);
  for (int i = 1; i < n->nin; i++) if (shape_has_in(n, i)) in_t(g, n, i);
  void *xdata = x->data;
  bool reshape = n->op == OP_RESHAPE, tr = n->op == OP_TRANSPOSE, sl = n->op == OP_SLICE,
       cat = n->op == OP_CONCAT;
  /* The row's shape function validates, sets the output shape and n->p;
   * Reshape's reads the batch only for tensors computed from the data. */
  op_info[n->op].shape(g, n);
  Tensor *y0 = &g->t[n->out[0]];
  int dt = y0->dtype, r = y0->rank;
  int64_t dims[MAX_RANK];
  memcpy(dims, y0->dims, sizeof dims);
  Tensor *y = out_t(g, n, 0, dt, r, dims);
  size_t es = (size_t)dtype_size(dt);
  char *dst = y->data;
  const char *src = xdata;
  int64_t cnt = y->ndata;
  if (sl) {
    const snrt_slice_t *p = n->p;
    int64_t ist[MAX_RANK], idx[MAX_RANK] = {0};
    strides_of(p->rank, p->in_dims, ist);
    for (int64_t k = 0; k < cnt; k++) {
      int64_t off = 0;
      for (int d = 0; d < p->rank; d++) off += (p->start[d] + idx[d] * p->step[d]) * ist[d];
      memcpy(dst + (size_t)k * es, src + (size_t)off * es, es);
      next_index(p->rank, p->out_dims, idx);
    }
  } else if (tr) {
    const snrt_transpose_t *p = n->p;
    int64_t ist[MAX_RANK], idx[MAX_RANK] = {0};
    strides_of(p->rank, p->in_dims, ist);
    for (int64_t k = 0; k < cnt; k++) {
      int64_t off = 0;
      for (int d = 0; d < p->rank; d++) off += idx[d] * ist[p->perm[d]];
      memcpy(dst + (size_t)k * es, src + (size_t)off * es, es);
      next_index(p->rank, dims, idx);
    }
  } else if (cat) {
    const snrt_concat_t *p = n->p;
    size_t o = 0;
    for (int64_t rr = 0; rr < p->outer; rr++)
      for (int i = 0; i < p->parts; i++) {
        const char *s = g->t[n->in[i]].data;
        size_t bytes = (size_t)p->chunk[i] * es;
        if (bytes) memcpy(dst + o, s + (size_t)rr * bytes, bytes);
        o += bytes;
      }
    free((void *)p->chunk);
  } else {   /* Reshape, Flatten, Unsqueeze, Squeeze: the same order */
    (void)reshape;
    if (cnt) memcpy(dst, src, (size_t)cnt * es);
  }
  free(n->p);
  n->p = NULL;
}

static void ev_split(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0);
  if (shape_has_in(n, 1)) in_t(g, n, 1);
  const char *src = x->data;
  shape_split(g, n);
  snrt_concat_t *p = n->p;
  size_t es = (size_t)dtype_size(x->dtype);
  for (int i = 0; i < n->nout; i++) {
    if (n->out[i] < 0) continue;
    Tensor *y = &g->t[n->out[i]];
    int64_t dims[MAX_RANK];
    memcpy(dims, y->dims, sizeof dims);
    out_t(g, n, i, y->dtype, y->rank, dims);
  }
  size_t off = 0;
  for (int64_t r = 0; r < p->outer; r++)
    for (int i = 0; i < p->parts; i++) {
      size_t bytes = (size_t)p->chunk[i] * es;
      if (n->out[i] >= 0 && bytes)
        memcpy((char *)g->t[n->out[i]].data + (size_t)r * bytes, src + off, bytes);
      off += bytes;
    }
  free((void *)p->chunk);
  free(n->p);
  n->p = NULL;
}

/* ---- shapes and generators ---- */

static void ev_shape(Graph *g, Node *n, const char *op) {
  Tensor *x = shape_in(g, n, 0);
  int r = x->rank;
  int64_t start = attr_int(n, "start", 0), end = attr_int(n, "end", r), dims[MAX_RANK];
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = start < 0 ? 0 : start > r ? r : start;
  end = end < start ? start : end > r ? r : end;
  int64_t len = end - start;
  memcpy(dims, x->dims, sizeof dims);
  Tensor *y = out_t(g, n, 0, DT_INT64, 1, &len);
  for (int64_t k = 0; k < len; k++) ((int64_t *)y->data)[k] = dims[start + k];
}

static void ev_size(Graph *g, Node *n, const char *op) {
  int64_t c = tensor_numel(shape_in(g, n, 0));
  Tensor *y = out_t(g, n, 0, DT_INT64, 0, NULL);
  ((int64_t *)y->data)[0] = c;
}

static void ev_constant_of_shape(Graph *g, Node *n, const char *op) {
  int64_t dims[MAX_RANK];
  const Tensor *s = in_t(g, n, 0);
  if (s->rank != 1) node_error(n, "the shape input must be 1-D");
  int r = ints_of(g, n, 0, dims, MAX_RANK);
  shape_batch_leading(g, n, dims, r);
  for (int d = 0; d < r; d++)
    if (dims[d] < 0) node_error(n, "shape[%d] = %lld is negative", d, (long long)dims[d]);
  const Attr *a = attr_find(n, "value");
  const Tensor *v = a && a->type == AT_TENSOR && a->tensor >= 0 ? &g->t[a->tensor] : NULL;
  if (v && (!v->data || v->ndata != 1)) node_error(n, "'value' must hold one element");
  if (v && !dt_float(v->dtype) && !dt_int(v->dtype))
    node_error(n, "'value' is %s", dtype_name(v->dtype));
  Tensor *y = out_t(g, n, 0, v ? v->dtype : DT_FLOAT, r, dims);
  for (int64_t k = 0; k < y->ndata; k++)
    if (v) copy_el(y, k, v, 0);
}

static void ev_range(Graph *g, Node *n, const char *op) {
  Tensor *s = in_t(g, n, 0), *l = in_t(g, n, 1), *d = in_t(g, n, 2);
  if (s->ndata != 1 || l->ndata != 1 || d->ndata != 1)
    node_error(n, "start, limit and delta must be scalars");
  if (s->dtype != l->dtype || s->dtype != d->dtype)
    node_error(n, "start, limit and delta differ in type");
  int dt = s->dtype;
  bool fl = dt_float(dt);
  double fs = getf(s, 0), fd = getf(d, 0);
  int64_t is = geti(s, 0), id = geti(d, 0), len;
  if (fl ? fd == 0 : id == 0) node_error(n, "delta must not be 0");
  if (fl) {
    double c = ceil((getf(l, 0) - fs) / fd);
    if (!(c < (double)EVAL_MAX_ELEMS)) node_error(n, "the range is too long");
    len = c > 0 ? (int64_t)c : 0;
  } else {
    int64_t span = geti(l, 0) - is;
    len = span / id + (span % id != 0 && (span > 0) == (id > 0));
    if (len < 0) len = 0;
    if (len > EVAL_MAX_ELEMS) node_error(n, "the range is too long");
  }
  Tensor *y = out_t(g, n, 0, dt, 1, &len);
  /* Each element is start + k * delta, as ONNX's reference loop adds. */
  double acc = fs;
  for (int64_t k = 0; k < len; k++) {
    put(y, k, dt == DT_FLOAT ? (double)(float)acc : acc, is + k * id);
    acc = dt == DT_FLOAT ? (double)((float)acc + (float)fd) : acc + fd;
  }
}

static void ev_eyelike(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0);
  if (x->rank != 2) node_error(n, "input must be 2-D");
  int dt = (int)attr_int(n, "dtype", x->dtype);
  int64_t kk = attr_int(n, "k", 0), dims[2] = {x->dims[0], x->dims[1]};
  Tensor *y = out_t(g, n, 0, dt, 2, dims);
  for (int64_t i = 0; i < dims[0]; i++)
    if (i + kk >= 0 && i + kk < dims[1]) put(y, i * dims[1] + i + kk, 1, 1);
}

static void ev_cast(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0);
  int to = n->nin > 1 ? in_t(g, n, 1)->dtype : (int)attr_int(n, "to", DT_UNDEF);
  if (!dt_float(to) && !dt_int(to)) node_error(n, "Cast to %s is not supported", dtype_name(to));
  Tensor *y = out_t(g, n, 0, to, x->rank, x->dims);
  bool xf = dt_float(x->dtype);
  for (int64_t k = 0; k < y->ndata; k++) {
    if (!xf) {
      int64_t i = geti(x, k);
      put(y, k, x->dtype == DT_UINT64 ? (double)(uint64_t)i : (double)i, i);
      continue;
    }
    double f = getf(x, k);
    if (to == DT_BOOL) put(y, k, 0, f != 0);
    else if (dt_float(to)) put(y, k, f, 0);
    else if (!(fabs(f) < 9.2e18)) node_error(n, "cannot cast %g to %s", f, dtype_name(to));
    else put(y, k, 0, (int64_t)f);
  }
}

/* ---- gathers and scatters ---- */

static int64_t norm_index(const Node *n, int64_t i, int64_t len) {
  if (i < -len || i >= len)
    node_error(n, "index %lld is out of range for an axis of length %lld", (long long)i,
               (long long)len);
  return i < 0 ? i + len : i;
}

static void ev_gather(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0), *ind = in_t(g, n, 1);
  if (ind->dtype != DT_INT64 && ind->dtype != DT_INT32)
    node_error(n, "indices must be int64 or int32, not %s", dtype_name(ind->dtype));
  if (x->rank < 1) node_error(n, "data must have rank 1 or more");
  int axis = shape_axis(n, attr_int(n, "axis", 0), x->rank, false, "axis");
  int r = x->rank - 1 + ind->rank;
  if (r > MAX_RANK) node_error(n, "output rank %d is too high", r);
  int64_t dims[MAX_RANK];
  int o = 0;
  for (int d = 0; d < axis; d++) dims[o++] = x->dims[d];
  for (int d = 0; d < ind->rank; d++) dims[o++] = ind->dims[d];
  for (int d = axis + 1; d < x->rank; d++) dims[o++] = x->dims[d];
  Tensor *y = out_t(g, n, 0, x->dtype, r, dims);
  int64_t outer = shape_prod(n, x->dims, 0, axis), inner = shape_prod(n, x->dims, axis + 1, x->rank);
  int64_t len = x->dims[axis], ni = tensor_numel(ind);
  for (int64_t a = 0; a < outer; a++)
    for (int64_t j = 0; j < ni; j++) {
      int64_t i = norm_index(n, geti(ind, j), len);
      for (int64_t c = 0; c < inner; c++)
        copy_el(y, (a * ni + j) * inner + c, x, (a * len + i) * inner + c);
    }
}

static void ev_gather_elements(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0), *ind = in_t(g, n, 1);
  if (ind->rank != x->rank) node_error(n, "indices and data must have the same rank");
  int axis = shape_axis(n, attr_int(n, "axis", 0), x->rank, false, "axis");
  Tensor *y = out_t(g, n, 0, x->dtype, ind->rank, ind->dims);
  int64_t xst[MAX_RANK], idx[MAX_RANK] = {0};
  strides_of(x->rank, x->dims, xst);
  for (int64_t k = 0; k < y->ndata; k++) {
    int64_t off = 0;
    for (int d = 0; d < x->rank; d++) {
      int64_t v = d == axis ? norm_index(n, geti(ind, k), x->dims[d]) : idx[d];
      if (v >= x->dims[d]) node_error(n, "indices %s exceed data %s", shape_str(ind), shape_str(x));
      off += v * xst[d];
    }
    copy_el(y, k, x, off);
    next_index(ind->rank, ind->dims, idx);
  }
}

/* GatherND/ScatterND: the last axis of the indices addresses data's leading
 * axes (after batch_dims shared ones). */
static void ev_gather_nd(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0), *ind = in_t(g, n, 1);
  int b = (int)attr_int(n, "batch_dims", 0);
  if (ind->rank < 1 || b < 0 || b >= ind->rank || b >= x->rank)
    node_error(n, "batch_dims %d does not fit the ranks", b);
  int m = (int)ind->dims[ind->rank - 1];
  if (m < 1 || b + m > x->rank) node_error(n, "indices' last dimension %d is too large", m);
  int64_t dims[MAX_RANK];
  int r = 0;
  for (int d = 0; d < ind->rank - 1; d++) dims[r++] = ind->dims[d];
  for (int d = b + m; d < x->rank; d++) {
    if (r >= MAX_RANK) node_error(n, "output rank is too high");
    dims[r++] = x->dims[d];
  }
  for (int d = 0; d < b; d++)
    if (x->dims[d] != ind->dims[d]) node_error(n, "batch dimensions differ");
  Tensor *y = out_t(g, n, 0, x->dtype, r, dims);
  int64_t xst[MAX_RANK];
  strides_of(x->rank, x->dims, xst);
  int64_t inner = shape_prod(n, x->dims, b + m, x->rank);
  int64_t batch = shape_prod(n, x->dims, 0, b);
  int64_t nt = shape_prod(n, ind->dims, 0, ind->rank - 1), per = batch ? nt / batch : 0;
  for (int64_t t = 0; t < nt; t++) {
    int64_t bi = per ? t / per : 0, off = bi * (b ? xst[b - 1] : 0);
    for (int j = 0; j < m; j++)
      off += norm_index(n, geti(ind, t * m + j), x->dims[b + j]) * xst[b + j];
    for (int64_t c = 0; c < inner; c++) copy_el(y, t * inner + c, x, off + c);
  }
}

static double reduce2(const Node *n, const char *red, double a, double b) {
  if (!strcmp(red, "none")) return b;
  if (!strcmp(red, "add")) return a + b;
  if (!strcmp(red, "mul")) return a * b;
  if (!strcmp(red, "max")) return a > b ? a : b;
  if (!strcmp(red, "min")) return a < b ? a : b;
  node_error(n, "reduction '%s' is not supported", red);
}

static void ev_scatter_nd(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0), *ind = in_t(g, n, 1), *u = in_t(g, n, 2);
  if (u->dtype != x->dtype) node_error(n, "updates and data differ in type");
  const char *red = attr_string(n, "reduction", "none");
  if (ind->rank < 1) node_error(n, "indices must have rank 1 or more");
  int m = (int)ind->dims[ind->rank - 1];
  if (m < 1 || m > x->rank) node_error(n, "indices' last dimension %d is too large", m);
  void *xdata = x->data;
  int64_t xd[MAX_RANK];
  int xr = x->rank, dt = x->dtype;
  memcpy(xd, x->dims, sizeof xd);
  Tensor *y = out_t(g, n, 0, dt, xr, xd);
  memcpy(y->data, xdata, (size_t)(y->ndata * dtype_size(dt)));
  int64_t xst[MAX_RANK];
  strides_of(xr, xd, xst);
  int64_t inner = shape_prod(n, xd, m, xr), nt = shape_prod(n, ind->dims, 0, ind->rank - 1);
  if (tensor_numel(u) != nt * inner) node_error(n, "updates %s do not match the indices", shape_str(u));
  for (int64_t t = 0; t < nt; t++) {
    int64_t off = 0;
    for (int j = 0; j < m; j++) off += norm_index(n, geti(ind, t * m + j), xd[j]) * xst[j];
    for (int64_t c = 0; c < inner; c++) {
      int64_t k = off + c;
      if (dt_float(dt)) put(y, k, reduce2(n, red, getf(y, k), getf(u, t * inner + c)), 0);
      else put(y, k, 0, (int64_t)reduce2(n, red, (double)geti(y, k), (double)geti(u, t * inner + c)));
    }
  }
}

static void ev_scatter_elements(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0), *ind = in_t(g, n, 1), *u = in_t(g, n, 2);
  if (u->dtype != x->dtype) node_error(n, "updates and data differ in type");
  if (ind->rank != x->rank || u->rank != ind->rank) node_error(n, "ranks differ");
  for (int d = 0; d < ind->rank; d++)
    if (u->dims[d] != ind->dims[d]) node_error(n, "updates and indices differ in shape");
  const char *red = attr_string(n, "reduction", "none");
  int axis = shape_axis(n, attr_int(n, "axis", 0), x->rank, false, "axis");
  void *xdata = x->data;
  int64_t xd[MAX_RANK];
  int xr = x->rank, dt = x->dtype;
  memcpy(xd, x->dims, sizeof xd);
  Tensor *y = out_t(g, n, 0, dt, xr, xd);
  memcpy(y->data, xdata, (size_t)(y->ndata * dtype_size(dt)));
  int64_t xst[MAX_RANK], idx[MAX_RANK] = {0};
  strides_of(xr, xd, xst);
  for (int64_t k = 0; k < tensor_numel(ind); k++) {
    int64_t off = 0;
    for (int d = 0; d < xr; d++) {
      int64_t v = d == axis ? norm_index(n, geti(ind, k), xd[d]) : idx[d];
      if (v >= xd[d]) node_error(n, "indices exceed the data");
      off += v * xst[d];
    }
    if (dt_float(dt)) put(y, off, reduce2(n, red, getf(y, off), getf(u, k)), 0);
    else put(y, off, 0, (int64_t)reduce2(n, red, (double)geti(y, off), (double)geti(u, k)));
    next_index(ind->rank, ind->dims, idx);
  }
}

/* ---- broadcasting ---- */

static int bcast_dims(const Node *n, Tensor **ins, int k, int64_t *dims) {
  int r = 0;
  for (int i = 0; i < k; i++) if (ins[i]->rank > r) r = ins[i]->rank;
  for (int d = 0; d < r; d++) dims[d] = 1;
  for (int i = 0; i < k; i++)
    for (int d = 0; d < ins[i]->rank; d++) {
      int64_t v = ins[i]->dims[d], *o = &dims[r - ins[i]->rank + d];
      if (v != 1 && *o != 1 && v != *o)
        node_error(n, "constant operands %s and %s do not broadcast", shape_str(ins[0]),
                   shape_str(ins[i]));
      if (v != 1) *o = v;
    }
  return r;
}

static int64_t bcast_at(const Tensor *t, int r, const int64_t *idx) {
  int64_t off = 0;
  for (int d = 0; d < t->rank; d++) {
    int64_t v = t->dims[d];
    off = off * v + (v == 1 ? 0 : idx[r - t->rank + d]);
  }
  return off;
}

static void ev_expand(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0);
  int64_t shape[MAX_RANK];
  int ns = ints_of(g, n, 1, shape, MAX_RANK);
  shape_batch_leading(g, n, shape, ns);
  Tensor sh = {.rank = ns};
  for (int d = 0; d < ns; d++) {
    if (shape[d] < 0) node_error(n, "shape[%d] = %lld is negative", d, (long long)shape[d]);
    sh.dims[d] = shape[d];
  }
  Tensor *ins[2] = {x, &sh};
  int64_t dims[MAX_RANK], idx[MAX_RANK] = {0};
  int r = bcast_dims(n, ins, 2, dims);
  Tensor xs = *x;
  Tensor *y = out_t(g, n, 0, x->dtype, r, dims);
  for (int64_t k = 0; k < y->ndata; k++) {
    copy_el(y, k, &xs, bcast_at(&xs, r, idx));
    next_index(r, dims, idx);
  }
}

static void ev_tile(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0);
  int64_t rep[MAX_RANK], dims[MAX_RANK], idx[MAX_RANK] = {0}, xst[MAX_RANK];
  int nr = ints_of(g, n, 1, rep, MAX_RANK);
  if (nr != x->rank) node_error(n, "repeats has %d values for rank %d", nr, x->rank);
  if (nr >= 1 && x->dims[0] == 1) shape_batch_leading(g, n, rep, nr);
  for (int d = 0; d < nr; d++) {
    if (rep[d] < 0) node_error(n, "repeats[%d] is negative", d);
    dims[d] = mul_checked(x->dims[d], rep[d], n->name);
  }
  Tensor xs = *x;
  strides_of(xs.rank, xs.dims, xst);
  Tensor *y = out_t(g, n, 0, x->dtype, nr, dims);
  for (int64_t k = 0; k < y->ndata; k++) {
    int64_t off = 0;
    for (int d = 0; d < nr; d++) off += (idx[d] % xs.dims[d]) * xst[d];
    copy_el(y, k, &xs, off);
    next_index(nr, dims, idx);
  }
}

static void ev_trilu(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0);
  if (x->rank < 2) node_error(n, "input must have rank 2 or more");
  int64_t kk = 0;
  if (shape_has_in(n, 1)) {
    int64_t v[1];
    if (ints_of(g, n, 1, v, 1) != 1) node_error(n, "k must be a scalar");
    kk = v[0];
  }
  bool upper = attr_int(n, "upper", 1) != 0;
  Tensor xs = *x;
  Tensor *y = out_t(g, n, 0, x->dtype, x->rank, x->dims);
  int64_t rows = xs.dims[xs.rank - 2], cols = xs.dims[xs.rank - 1];
  for (int64_t k = 0; k < y->ndata; k++) {
    int64_t i = (k / cols) % rows, j = k % cols;
    bool keep = upper ? j - i >= kk : j - i <= kk;
    if (keep) copy_el(y, k, &xs, k);
  }
}

static void ev_where(Graph *g, Node *n, const char *op) {
  Tensor *ins[3];
  for (int i = 0; i < 3; i++) ins[i] = in_t(g, n, i);
  if (ins[0]->dtype != DT_BOOL) node_error(n, "the condition must be bool, not %s",
                                           dtype_name(ins[0]->dtype));
  if (ins[1]->dtype != ins[2]->dtype)
    node_error(n, "operands are %s and %s", dtype_name(ins[1]->dtype), dtype_name(ins[2]->dtype));
  int64_t dims[MAX_RANK], idx[MAX_RANK] = {0};
  int r = bcast_dims(n, ins, 3, dims);
  Tensor c = *ins[0], a = *ins[1], b = *ins[2];
  Tensor *y = out_t(g, n, 0, a.dtype, r, dims);
  for (int64_t k = 0; k < y->ndata; k++) {
    if (geti(&c, bcast_at(&c, r, idx))) copy_el(y, k, &a, bcast_at(&a, r, idx));
    else copy_el(y, k, &b, bcast_at(&b, r, idx));
    next_index(r, dims, idx);
  }
}

/* ---- arithmetic ---- */

static int64_t ipow(int64_t b, int64_t e) {
  uint64_t r = 1, x = (uint64_t)b;
  if (e < 0) return b == 1 ? 1 : b == -1 ? (e % 2 ? -1 : 1) : 0;
  while (e) { if (e & 1) r *= x; x *= x; e >>= 1; }
  return (int64_t)r;
}

static void ev_binary(Graph *g, Node *n, const char *op) {
  Tensor *ins[2] = {in_t(g, n, 0), in_t(g, n, 1)};
  Tensor a = *ins[0], b = *ins[1];
  bool pw = !strcmp(op, "Pow"), shift = !strcmp(op, "BitShift");
  if (a.dtype != b.dtype && !pw && !shift)
    node_error(n, "operands are %s and %s", dtype_name(a.dtype), dtype_name(b.dtype));
  bool cmp = !strcmp(op, "Less") || !strcmp(op, "LessOrEqual") || !strcmp(op, "Greater") ||
             !strcmp(op, "GreaterOrEqual") || !strcmp(op, "Equal");
  bool logic = !strcmp(op, "And") || !strcmp(op, "Or") || !strcmp(op, "Xor");
  if (logic && a.dtype != DT_BOOL) node_error(n, "operands must be bool");
  int64_t dims[MAX_RANK], idx[MAX_RANK] = {0};
  int r = bcast_dims(n, ins, 2, dims);
  Tensor *y = out_t(g, n, 0, cmp ? DT_BOOL : a.dtype, r, dims);
  bool fl = dt_float(a.dtype), un = dt_unsigned(a.dtype);
  bool fmod_ = attr_int(n, "fmod", 0) != 0;
  const char *dir = attr_string(n, "direction", "LEFT");
  for (int64_t k = 0; k < y->ndata; k++) {
    int64_t ia = bcast_at(&a, r, idx), ib = bcast_at(&b, r, idx);
    double fa = getf(&a, ia), fb = getf(&b, ib), f = 0;
    /* geti converts a float operand (Pow's exponent) itself, 0 where it is
     * out of int64's range or NaN (a cast of such a double is undefined:
     * the fuzzer found one). */
    int64_t xa = fl ? 0 : geti(&a, ia), xb = geti(&b, ib), v = 0;
    uint64_t ua = (uint64_t)xa, ub = (uint64_t)xb;
    switch (op[0]) {
    case 'A':
      if (op[1] == 'd') f = fa + fb, v = (int64_t)(ua + ub);
      else v = xa && xb;   /* And */
      break;
    case 'S': f = fa - fb, v = (int64_t)(ua - ub); break;
    case 'M':
      if (op[1] == 'u') { f = fa * fb, v = (int64_t)(ua * ub); break; }
      /* Mod: integer mod takes the divisor's sign (fmod=0) or the dividend's. */
      if (fl) { f = fmod(fa, fb); if (!fmod_ && f != 0 && (f < 0) != (fb < 0)) f += fb; break; }
      if (xb == 0) node_error(n, "integer modulo by zero");
      if (un) { v = (int64_t)(ua % ub); break; }
      v = xb == -1 ? 0 : xa % xb;
      if (!fmod_ && v != 0 && (v < 0) != (xb < 0)) v += xb;
      break;
    case 'D':
      f = fa / fb;
      if (fl) break;
      if (xb == 0 || (xb == -1 && xa == INT64_MIN && !un)) node_error(n, "integer division by zero");
      v = un ? (int64_t)(ua / ub) : xa / xb;
      break;
    case 'P':
      if (op[1] == 'o') { f = pow(fa, fb); v = ipow(xa, xb); }
      else { f = fa < 0 ? fa * fb : fa; v = xa < 0 ? xa * xb : xa; }   /* PRelu */
      break;
    case 'L':
      v = op[4] ? (fl ? fa <= fb : un ? ua <= ub : xa <= xb) : (fl ? fa < fb : un ? ua < ub : xa < xb);
      break;
    case 'G':
      v = op[7] ? (fl ? fa >= fb : un ? ua >= ub : xa >= xb) : (fl ? fa > fb : un ? ua > ub : xa > xb);
      break;
    case 'E': v = fl ? fa == fb : xa == xb; break;
    case 'O': v = xa || xb; break;
    case 'X': v = (xa != 0) != (xb != 0); break;
    case 'B':
      if (fl) node_error(n, "%s needs integer operands", op);
      if (!strcmp(op, "BitwiseAnd")) v = xa & xb;
      else if (!strcmp(op, "BitwiseOr")) v = xa | xb;
      else if (!strcmp(op, "BitwiseXor")) v = xa ^ xb;
      else if (strcmp(dir, "RIGHT")) v = ub >= 64 ? 0 : (int64_t)(ua << ub);
      else if (un) v = ub >= 64 ? 0 : (int64_t)(ua >> ub);
      else v = ub >= 64 ? (xa < 0 ? -1 : 0) : xa >> ub;   /* arithmetic; amounts unsigned */
      break;
    default: unreachable();
    }
    if (cmp || logic) put(y, k, 0, v);
    else put(y, k, f, v);
    next_index(r, dims, idx);
  }
}

static void ev_variadic(Graph *g, Node *n, const char *op) {
  if (n->nin > 16) node_error(n, "too many inputs");
  Tensor *ins[16], cp[16];
  for (int i = 0; i < n->nin; i++) {
    ins[i] = in_t(g, n, i);
    if (ins[i]->dtype != ins[0]->dtype) node_error(n, "inputs differ in type");
    cp[i] = *ins[i];
  }
  int64_t dims[MAX_RANK], idx[MAX_RANK] = {0};
  int r = bcast_dims(n, ins, n->nin, dims);
  Tensor *y = out_t(g, n, 0, cp[0].dtype, r, dims);
  bool fl = dt_float(cp[0].dtype), un = dt_unsigned(cp[0].dtype);
  for (int64_t k = 0; k < y->ndata; k++) {
    double f = getf(&cp[0], bcast_at(&cp[0], r, idx));
    int64_t v = geti(&cp[0], bcast_at(&cp[0], r, idx));
    bool nan = fl && isnan(f);
    for (int i = 1; i < n->nin; i++) {
      int64_t o = bcast_at(&cp[i], r, idx);
      double fb = getf(&cp[i], o);
      int64_t vb = geti(&cp[i], o);
      nan |= fl && isnan(fb);
      switch (op[1]) {
      case 'i': f = fb < f ? fb : f; v = un ? ((uint64_t)vb < (uint64_t)v ? vb : v) : vb < v ? vb : v; break;
      case 'a': f = fb > f ? fb : f; v = un ? ((uint64_t)vb > (uint64_t)v ? vb : v) : vb > v ? vb : v; break;
      default: f += fb; v = (int64_t)((uint64_t)v + (uint64_t)vb);
      }
    }
    if (nan && op[1] != 'u' && op[1] != 'e') f = NAN;
    if (op[1] == 'e') f /= n->nin, v /= n->nin;   /* Mean */
    put(y, k, f, v);
    next_index(r, dims, idx);
  }
}

static double erf_(double x) { return erf(x); }

static void ev_unary(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0);
  bool isbool = !strcmp(op, "IsNaN") || !strcmp(op, "IsInf");
  bool fl = dt_float(x->dtype);
  if (!strcmp(op, "Not") && x->dtype != DT_BOOL) node_error(n, "Not needs a bool input");
  Tensor xs = *x;
  Tensor *y = out_t(g, n, 0, isbool ? DT_BOOL : x->dtype, x->rank, x->dims);
  double alpha = attr_float(n, "alpha", !strcmp(op, "LeakyRelu") ? 0.01f
                            : !strcmp(op, "HardSigmoid") ? 0.2f
                            : !strcmp(op, "Selu") ? 1.67326319217681884765625f : 1.0f);
  double beta = attr_float(n, "beta", 0.5f), gamma = attr_float(n, "gamma", 1.05070102214813232421875f);
  double bias = attr_float(n, "bias", 0.0f), lambd = attr_float(n, "lambd", 0.5f);
  bool dneg = attr_int(n, "detect_negative", 1) != 0, dpos = attr_int(n, "detect_positive", 1) != 0;
  for (int64_t k = 0; k < y->ndata; k++) {
    double f = getf(&xs, k), r = 0;
    int64_t i = geti(&xs, k);
    if (!fl && !isbool) {   /* integer inputs: the exact ops */
      if (!strcmp(op, "Abs")) put(y, k, 0, dt_unsigned(xs.dtype) ? i : i < 0 ? -i : i);
      else if (!strcmp(op, "Neg")) put(y, k, 0, (int64_t)(0 - (uint64_t)i));
      else if (!strcmp(op, "Sign")) put(y, k, 0, dt_unsigned(xs.dtype) ? i != 0 : (i > 0) - (i < 0));
      else if (!strcmp(op, "Relu")) put(y, k, 0, i < 0 ? 0 : i);
      else if (!strcmp(op, "Not")) put(y, k, 0, !i);
      else if (!strcmp(op, "BitwiseNot")) put(y, k, 0, ~i);
      else node_error(n, "%s needs a float input, not %s", op, dtype_name(xs.dtype));
      continue;
    }
    switch (op[0]) {
    case 'A':
      r = !strcmp(op, "Abs") ? fabs(f) : !strcmp(op, "Asin") ? asin(f) : !strcmp(op, "Acos") ? acos(f)
        : !strcmp(op, "Atan") ? atan(f) : !strcmp(op, "Asinh") ? asinh(f)
        : !strcmp(op, "Acosh") ? acosh(f) : atanh(f);
      break;
    case 'C':
      r = !strcmp(op, "Cos") ? cos(f) : !strcmp(op, "Cosh") ? cosh(f) : !strcmp(op, "Ceil") ? ceil(f)
        : f > 0 ? f : alpha * expm1(f / alpha);   /* Celu */
      break;
    case 'E': r = !strcmp(op, "Exp") ? exp(f) : !strcmp(op, "Erf") ? erf_(f) : f > 0 ? f : alpha * expm1(f); break;
    case 'F': r = floor(f); break;
    case 'G':
      r = strcmp(attr_string(n, "approximate", "none"), "tanh")
        ? 0.5 * f * (1 + erf(f / sqrt(2.0)))
        : 0.5 * f * (1 + tanh(sqrt(2.0 / M_PI) * (f + 0.044715 * f * f * f)));
      break;
    case 'H':
      r = !strcmp(op, "HardSigmoid") ? fmax(0, fmin(1, alpha * f + beta))
        : f * fmax(0, fmin(1, f / 6 + 0.5));
      break;
    case 'I': r = !strcmp(op, "IsNaN") ? isnan(f) : isinf(f) && ((f > 0 && dpos) || (f < 0 && dneg)); break;
    case 'L': r = !strcmp(op, "Log") ? log(f) : f < 0 ? alpha * f : f; break;
    case 'M': r = f * tanh(log1p(exp(f))); break;
    case 'N': r = !strcmp(op, "Neg") ? -f : f == 0; break;   /* Not on bool went above */
    case 'R':
      r = !strcmp(op, "Round") ? nearbyint(f) : !strcmp(op, "Relu") ? (f < 0 ? 0 : f) : 1 / f;
      break;
    case 'S':
      if (!strcmp(op, "Sqrt")) r = sqrt(f);
      else if (!strcmp(op, "Sin")) r = sin(f);
      else if (!strcmp(op, "Sinh")) r = sinh(f);
      else if (!strcmp(op, "Sign")) r = f > 0 ? 1 : f < 0 ? -1 : f;
      else if (!strcmp(op, "Sigmoid")) r = 1 / (1 + exp(-f));
      else if (!strcmp(op, "Softplus")) r = f > 30 ? f : log1p(exp(f));
      else if (!strcmp(op, "Softsign")) r = f / (1 + fabs(f));
      else if (!strcmp(op, "Selu")) r = gamma * (f > 0 ? f : alpha * expm1(f));
      else if (!strcmp(op, "Swish")) r = f / (1 + exp(-alpha * f));
      else r = f < -lambd ? f + bias : f > lambd ? f - bias : 0;   /* Shrink */
      break;
    case 'T':
      r = !strcmp(op, "Tan") ? tan(f) : !strcmp(op, "Tanh") ? tanh(f) : f > alpha ? f : 0;
      break;
    default: node_error(n, "%s is not evaluated", op);
    }
    if (isbool) put(y, k, 0, r != 0);
    else put(y, k, r, 0);
  }
}

static void ev_clip(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0);
  Tensor xs = *x;
  bool fl = dt_float(xs.dtype);
  double lo = -INFINITY, hi = INFINITY;
  if (attr_find(n, "min")) lo = attr_float(n, "min", 0);
  if (attr_find(n, "max")) hi = attr_float(n, "max", 0);
  if (shape_has_in(n, 1)) lo = getf(in_t(g, n, 1), 0);
  if (shape_has_in(n, 2)) hi = getf(in_t(g, n, 2), 0);
  Tensor *y = out_t(g, n, 0, xs.dtype, xs.rank, xs.dims);
  for (int64_t k = 0; k < y->ndata; k++) {
    double f = getf(&xs, k);
    f = f < lo ? lo : f;
    f = f > hi ? hi : f;
    if (fl) put(y, k, f, 0);
    else put(y, k, 0, (int64_t)f);
  }
}

/* ---- reductions ---- */

/* Marks the reduced axes; false when the op is a copy (noop_with_empty_axes). */
static bool reduced_axes(Graph *g, Node *n, const Tensor *x, bool *red) {
  int64_t axes[MAX_RANK];
  int na = axes_of(g, n, "axes", 1, axes);
  memset(red, 0, sizeof(bool) * MAX_RANK);
  if (na == 0) {
    if (attr_int(n, "noop_with_empty_axes", 0)) return false;
    for (int d = 0; d < x->rank; d++) red[d] = true;
  }
  for (int i = 0; i < na; i++) red[shape_axis(n, axes[i], x->rank, false, "axis")] = true;
  return true;
}

static void ev_reduce(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0);
  Tensor xs = *x;
  bool red[MAX_RANK];
  if (!reduced_axes(g, n, &xs, red)) {
    Tensor *y = out_t(g, n, 0, xs.dtype, xs.rank, xs.dims);
    if (y->ndata) memcpy(y->data, xs.data, (size_t)tensor_bytes(&xs));
    return;
  }
  bool keep = attr_int(n, "keepdims", 1) != 0;
  int64_t dims[MAX_RANK], kd[MAX_RANK], ost[MAX_RANK], idx[MAX_RANK] = {0};
  int r = 0;
  for (int d = 0; d < xs.rank; d++) {
    kd[d] = red[d] ? 1 : xs.dims[d];
    if (!red[d] || keep) dims[r++] = kd[d];
  }
  strides_of(xs.rank, kd, ost);
  int64_t no = shape_prod(n, kd, 0, xs.rank), nx = tensor_numel(&xs);
  double *acc = xcalloc((size_t)(no ? no : 1), sizeof(double));
  int64_t *cnt = xcalloc((size_t)(no ? no : 1), sizeof(int64_t));
  int64_t *iacc = xcalloc((size_t)(no ? no : 1), sizeof(int64_t));
  bool fl = dt_float(xs.dtype);
  const char *s = op + 6;   /* after "Reduce" */
  for (int64_t k = 0; k < nx; k++) {
    int64_t o = 0;
    for (int d = 0; d < xs.rank; d++) o += (red[d] ? 0 : idx[d]) * ost[d];
    double f = getf(&xs, k);
    int64_t i = geti(&xs, k);
    bool first = cnt[o]++ == 0;
    if (!strcmp(s, "Max")) { if (first || f > acc[o]) acc[o] = f; if (first || i > iacc[o]) iacc[o] = i; }
    else if (!strcmp(s, "Min")) { if (first || f < acc[o]) acc[o] = f; if (first || i < iacc[o]) iacc[o] = i; }
    else if (!strcmp(s, "Prod")) { acc[o] = first ? f : acc[o] * f; iacc[o] = first ? i : iacc[o] * i; }
    else if (!strcmp(s, "L1")) acc[o] += fabs(f), iacc[o] += i < 0 ? -i : i;
    else if (!strcmp(s, "L2") || !strcmp(s, "SumSquare")) acc[o] += f * f, iacc[o] += i * i;
    else if (!strcmp(s, "LogSumExp")) acc[o] += exp(f);
    else acc[o] += f, iacc[o] += i;   /* Sum, Mean, LogSum */
    next_index(xs.rank, xs.dims, idx);
  }
  Tensor *y = out_t(g, n, 0, xs.dtype, r, dims);
  for (int64_t o = 0; o < no; o++) {
    if (!cnt[o] && (!strcmp(s, "Max") || !strcmp(s, "Min")))
      node_error(n, "reduces an empty axis");
    double f = acc[o];
    if (!strcmp(s, "Mean")) f = cnt[o] ? f / (double)cnt[o] : NAN;
    else if (!strcmp(s, "L2")) f = sqrt(f);
    else if (!strcmp(s, "LogSum") || !strcmp(s, "LogSumExp")) f = log(f);
    else if (!strcmp(s, "Prod") && !cnt[o]) f = 1, iacc[o] = 1;
    if (fl) put(y, o, f, 0);
    else if (!strcmp(s, "Mean")) put(y, o, 0, cnt[o] ? iacc[o] / cnt[o] : 0);
    else if (!strcmp(s, "L2") || !strcmp(s, "LogSum") || !strcmp(s, "LogSumExp")) putf(n, y, o, f);
    else put(y, o, 0, iacc[o]);
  }
  free(acc), free(cnt), free(iacc);
}

static void ev_argmax(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0);
  Tensor xs = *x;
  if (xs.rank < 1) node_error(n, "input must have rank 1 or more");
  int axis = shape_axis(n, attr_int(n, "axis", 0), xs.rank, false, "axis");
  bool keep = attr_int(n, "keepdims", 1) != 0, last = attr_int(n, "select_last_index", 0) != 0;
  bool mx = !strcmp(op, "ArgMax");
  int64_t dims[MAX_RANK];
  int r = 0;
  for (int d = 0; d < xs.rank; d++)
    if (d != axis) dims[r++] = xs.dims[d];
    else if (keep) dims[r++] = 1;
  int64_t outer = shape_prod(n, xs.dims, 0, axis), len = xs.dims[axis];
  int64_t inner = shape_prod(n, xs.dims, axis + 1, xs.rank);
  if (len == 0) node_error(n, "the axis is empty");
  Tensor *y = out_t(g, n, 0, DT_INT64, r, dims);
  for (int64_t a = 0; a < outer; a++)
    for (int64_t c = 0; c < inner; c++) {
      int64_t best = 0;
      double bv = getf(&xs, a * len * inner + c);
      for (int64_t j = 1; j < len; j++) {
        double v = getf(&xs, (a * len + j) * inner + c);
        if (mx ? (v > bv || (last && v == bv)) : (v < bv || (last && v == bv))) best = j, bv = v;
      }
      ((int64_t *)y->data)[a * inner + c] = best;
    }
}

static void ev_cumsum(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0);
  Tensor xs = *x;
  int64_t av[1];
  if (ints_of(g, n, 1, av, 1) != 1) node_error(n, "axis must be a scalar");
  int axis = shape_axis(n, av[0], xs.rank, false, "axis");
  bool excl = attr_int(n, "exclusive", 0) != 0, rev = attr_int(n, "reverse", 0) != 0;
  bool prod = op[3] == 'P';
  Tensor *y = out_t(g, n, 0, xs.dtype, xs.rank, xs.dims);
  int64_t outer = shape_prod(n, xs.dims, 0, axis), len = xs.dims[axis];
  int64_t inner = shape_prod(n, xs.dims, axis + 1, xs.rank);
  for (int64_t a = 0; a < outer; a++)
    for (int64_t c = 0; c < inner; c++) {
      double f = prod;
      int64_t v = prod;
      for (int64_t jj = 0; jj < len; jj++) {
        int64_t j = rev ? len - 1 - jj : jj, k = (a * len + j) * inner + c;
        double xf = getf(&xs, k);
        int64_t xi = geti(&xs, k);
        if (!excl) { if (prod) f *= xf, v *= xi; else f += xf, v += xi; }
        put(y, k, f, v);
        if (excl) { if (prod) f *= xf, v *= xi; else f += xf, v += xi; }
      }
    }
}

static void ev_topk(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0);
  Tensor xs = *x;
  int64_t kv[1];
  if (ints_of(g, n, 1, kv, 1) != 1) node_error(n, "K must hold one value");
  int axis = shape_axis(n, attr_int(n, "axis", -1), xs.rank, false, "axis");
  bool largest = attr_int(n, "largest", 1) != 0;
  int64_t len = xs.dims[axis], K = kv[0], dims[MAX_RANK];
  if (K < 0 || K > len) node_error(n, "K = %lld is out of range for axis length %lld",
                                   (long long)K, (long long)len);
  memcpy(dims, xs.dims, sizeof dims);
  dims[axis] = K;
  Tensor *vy = out_t(g, n, 0, xs.dtype, xs.rank, dims);
  Tensor vys = *vy;
  Tensor *iy = out_t(g, n, 1, DT_INT64, xs.rank, dims);
  int64_t outer = shape_prod(n, xs.dims, 0, axis), inner = shape_prod(n, xs.dims, axis + 1, xs.rank);
  char *used = xmalloc((size_t)(len ? len : 1));
  for (int64_t a = 0; a < outer; a++)
    for (int64_t c = 0; c < inner; c++) {
      memset(used, 0, (size_t)(len ? len : 1));
      for (int64_t t = 0; t < K; t++) {
        int64_t best = -1;
        double bv = 0;
        for (int64_t j = 0; j < len; j++) {   /* ties: the lower index first */
          if (used[j]) continue;
          double v = getf(&xs, (a * len + j) * inner + c);
          if (best < 0 || (largest ? v > bv : v < bv)) best = j, bv = v;
        }
        used[best] = 1;
        int64_t o = (a * K + t) * inner + c;
        copy_el(&vys, o, &xs, (a * len + best) * inner + c);
        ((int64_t *)iy->data)[o] = best;
      }
    }
  free(used);
}

static void ev_onehot(Graph *g, Node *n, const char *op) {
  Tensor *ind = in_t(g, n, 0), *dep = in_t(g, n, 1), *val = in_t(g, n, 2);
  if (tensor_numel(dep) != 1 || tensor_numel(val) != 2)
    node_error(n, "depth must be a scalar and values hold two elements");
  int64_t depth = (int64_t)getf(dep, 0);
  if (depth < 1) node_error(n, "depth %lld must be positive", (long long)depth);
  int r = ind->rank + 1;
  if (r > MAX_RANK) node_error(n, "output rank is too high");
  int axis = shape_axis(n, attr_int(n, "axis", -1), r, false, "axis");
  int64_t dims[MAX_RANK];
  for (int d = 0, k = 0; d < r; d++) dims[d] = d == axis ? depth : ind->dims[k++];
  Tensor is = *ind, vs = *val;
  Tensor *y = out_t(g, n, 0, vs.dtype, r, dims);
  int64_t outer = shape_prod(n, dims, 0, axis), inner = shape_prod(n, dims, axis + 1, r);
  for (int64_t a = 0; a < outer; a++)
    for (int64_t j = 0; j < depth; j++)
      for (int64_t c = 0; c < inner; c++) {
        int64_t v = (int64_t)getf(&is, a * inner + c);
        if (v < 0) v += depth;
        copy_el(y, (a * depth + j) * inner + c, &vs, v == j ? 1 : 0);
      }
}

static void ev_nonzero(Graph *g, Node *n, const char *op) {
  Tensor *x = in_t(g, n, 0);
  Tensor xs = *x;
  int64_t nz = 0, cnt = tensor_numel(&xs), idx[MAX_RANK] = {0};
  for (int64_t k = 0; k < cnt; k++) nz += getf(&xs, k) != 0;
  int64_t dims[2] = {xs.rank, nz};
  Tensor *y = out_t(g, n, 0, DT_INT64, 2, dims);
  int64_t j = 0;
  for (int64_t k = 0; k < cnt; k++) {
    if (getf(&xs, k) != 0) {
      for (int d = 0; d < xs.rank; d++) ((int64_t *)y->data)[d * nz + j] = idx[d];
      j++;
    }
    next_index(xs.rank, xs.dims, idx);
  }
}

/* MatMul of constants (a rotary table: inverse frequencies x positions). */
static void ev_matmul(Graph *g, Node *n, const char *op) {
  Tensor a = *in_t(g, n, 0), b = *in_t(g, n, 1);
  if (a.dtype != b.dtype) node_error(n, "operands are %s and %s", dtype_name(a.dtype), dtype_name(b.dtype));
  if (a.rank < 1 || b.rank < 1) node_error(n, "operands must have rank 1 or more");
  /* 1-D operands: a row vector on the left, a column on the right. */
  Tensor A = a, B = b;
  if (a.rank == 1) A.rank = 2, A.dims[0] = 1, A.dims[1] = a.dims[0];
  if (b.rank == 1) B.rank = 2, B.dims[0] = b.dims[0], B.dims[1] = 1;
  int64_t M = A.dims[A.rank - 2], K = A.dims[A.rank - 1], N = B.dims[B.rank - 1];
  if (B.dims[B.rank - 2] != K) node_error(n, "inner dimensions %lld and %lld differ",
                                          (long long)K, (long long)B.dims[B.rank - 2]);
  Tensor ba = A, bb = B;   /* batch parts, broadcast */
  ba.rank -= 2, bb.rank -= 2;
  Tensor *bs[2] = {&ba, &bb};
  int64_t dims[MAX_RANK], idx[MAX_RANK] = {0};
  int r = bcast_dims(n, bs, 2, dims);
  int64_t nb = shape_prod(n, dims, 0, r);
  int64_t od[MAX_RANK];
  int orank = 0;
  for (int d = 0; d < r; d++) od[orank++] = dims[d];
  if (a.rank > 1) od[orank++] = M;
  if (b.rank > 1) od[orank++] = N;
  Tensor *y = out_t(g, n, 0, a.dtype, orank, od);
  bool fl = dt_float(a.dtype);
  for (int64_t t = 0; t < nb; t++) {
    int64_t oa = bcast_at(&ba, r, idx) * M * K, ob = bcast_at(&bb, r, idx) * K * N;
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double f = 0;
        int64_t v = 0;
        for (int64_t k = 0; k < K; k++) {
          f += getf(&a, oa + i * K + k) * getf(&b, ob + k * N + j);
          if (!fl) v += geti(&a, oa + i * K + k) * geti(&b, ob + k * N + j);
        }
        put(y, (t * M + i) * N + j, f, v);
      }
    next_index(r, dims, idx);
  }
}

static void ev_pad(Graph *g, Node *n, const char *op) {
  Tensor xs = *in_t(g, n, 0);
  int r = xs.rank;
  int64_t pads[2 * MAX_RANK], axes[MAX_RANK], pv[2 * MAX_RANK];
  const int64_t *v;
  int cnt = attr_ints(n, "pads", &v), na = r;
  double value = attr_float(n, "value", 0.0f);
  if (cnt) {
    if (cnt > 2 * MAX_RANK) node_error(n, "too many pads");
    memcpy(pv, v, sizeof(int64_t) * (size_t)cnt);
  } else {
    cnt = ints_of(g, n, 1, pv, 2 * MAX_RANK);
    if (shape_has_in(n, 2) && tensor_numel(in_t(g, n, 2))) value = getf(in_t(g, n, 2), 0);
  }
  if (shape_has_in(n, 3)) na = ints_of(g, n, 3, axes, MAX_RANK);
  else for (int d = 0; d < r; d++) axes[d] = d;
  if (cnt != 2 * na) node_error(n, "pads has %d values for %d axes", cnt, na);
  for (int d = 0; d < 2 * r; d++) pads[d] = 0;
  for (int i = 0; i < na; i++) {
    int a = shape_axis(n, axes[i], r, false, "axis");
    pads[a] = pv[i], pads[a + r] = pv[i + na];
  }
  const char *mode = attr_string(n, "mode", "constant");
  int64_t dims[MAX_RANK], idx[MAX_RANK] = {0}, xst[MAX_RANK];
  for (int d = 0; d < r; d++) {
    dims[d] = xs.dims[d] + pads[d] + pads[d + r];
    if (dims[d] < 0 || pads[d] > ((int64_t)1 << 30) || pads[d + r] > ((int64_t)1 << 30))
      node_error(n, "pads for axis %d are out of range", d);
  }
  strides_of(r, xs.dims, xst);
  Tensor *y = out_t(g, n, 0, xs.dtype, r, dims);
  for (int64_t k = 0; k < y->ndata; k++) {
    int64_t off = 0;
    bool in = true;
    for (int d = 0; d < r && in; d++) {
      int64_t i = idx[d] - pads[d], len = xs.dims[d];
      if (i < 0 || i >= len) {
        if (!strcmp(mode, "constant") || len == 0) { in = false; break; }
        if (!strcmp(mode, "edge")) i = i < 0 ? 0 : len - 1;
        else if (!strcmp(mode, "reflect")) {
          if (len == 1) i = 0;
          else { int64_t p = 2 * (len - 1); i = ((i % p) + p) % p; if (i >= len) i = p - i; }
        } else if (!strcmp(mode, "wrap")) i = ((i % len) + len) % len;
        else node_error(n, "Pad mode '%s' is not supported", mode);
      }
      off += i * xst[d];
    }
    if (in) copy_el(y, k, &xs, off);
    else putf(n, y, k, value);
    next_index(r, dims, idx);
  }
}

/* Dropout of a constant: inference (ratio 0 or training_mode false) only. */
static void ev_dropout(Graph *g, Node *n, const char *op) {
  Tensor xs = *in_t(g, n, 0);
  bool train = shape_has_in(n, 2) && geti(in_t(g, n, 2), 0);
  double ratio = shape_has_in(n, 1) ? getf(in_t(g, n, 1), 0) : attr_float(n, "ratio", 0.5f);
  if (train && ratio != 0) node_error(n, "a training-mode Dropout of a constant is random");
  Tensor *y = out_t(g, n, 0, xs.dtype, xs.rank, xs.dims);
  if (y->ndata) memcpy(y->data, xs.data, (size_t)tensor_bytes(&xs));
  Tensor *m = out_t(g, n, 1, DT_BOOL, xs.rank, xs.dims);
  for (int64_t k = 0; k < m->ndata; k++) put(m, k, 0, 1);
}

static void ev_softmax(Graph *g, Node *n, const char *op) {
  Tensor xs = *in_t(g, n, 0);
  if (!dt_float(xs.dtype)) node_error(n, "input must be float");
  int r = xs.rank;
  int64_t outer, len, inner;
  if (shape_opset(g) < 13) {
    int axis = shape_axis(n, attr_int(n, "axis", 1), r, true, "axis");
    outer = shape_prod(n, xs.dims, 0, axis), len = shape_prod(n, xs.dims, axis, r), inner = 1;
  } else {
    int axis = shape_axis(n, attr_int(n, "axis", -1), r, false, "axis");
    outer = shape_prod(n, xs.dims, 0, axis), len = xs.dims[axis];
    inner = shape_prod(n, xs.dims, axis + 1, r);
  }
  bool lg = op[0] == 'L', hard = op[0] == 'H';
  Tensor *y = out_t(g, n, 0, xs.dtype, r, xs.dims);
  for (int64_t a = 0; a < outer; a++)
    for (int64_t c = 0; c < inner; c++) {
      double m = -INFINITY, s = 0;
      int64_t arg = -1;
      for (int64_t j = 0; j < len; j++) {
        double v = getf(&xs, (a * len + j) * inner + c);
        if (arg < 0 || v > m) m = v, arg = j;
      }
      if (hard) {
        for (int64_t j = 0; j < len; j++) put(y, (a * len + j) * inner + c, j == arg, 0);
        continue;
      }
      for (int64_t j = 0; j < len; j++) s += exp(getf(&xs, (a * len + j) * inner + c) - m);
      for (int64_t j = 0; j < len; j++) {
        int64_t k = (a * len + j) * inner + c;
        double e = getf(&xs, k) - m;
        put(y, k, lg ? e - log(s) : exp(e) / s, 0);
      }
    }
}

static void ev_lpnorm(Graph *g, Node *n, const char *op) {
  Tensor xs = *in_t(g, n, 0);
  int axis = shape_axis(n, attr_int(n, "axis", -1), xs.rank, false, "axis");
  int64_t p = attr_int(n, "p", 2);
  if (p != 1 && p != 2) node_error(n, "p must be 1 or 2");
  Tensor *y = out_t(g, n, 0, xs.dtype, xs.rank, xs.dims);
  int64_t outer = shape_prod(n, xs.dims, 0, axis), len = xs.dims[axis];
  int64_t inner = shape_prod(n, xs.dims, axis + 1, xs.rank);
  for (int64_t a = 0; a < outer; a++)
    for (int64_t c = 0; c < inner; c++) {
      double s = 0;
      for (int64_t j = 0; j < len; j++) {
        double v = getf(&xs, (a * len + j) * inner + c);
        s += p == 1 ? fabs(v) : v * v;
      }
      if (p == 2) s = sqrt(s);
      for (int64_t j = 0; j < len; j++) {
        int64_t k = (a * len + j) * inner + c;
        put(y, k, s == 0 ? 0 : getf(&xs, k) / s, 0);
      }
    }
}

static void ev_bitcast(Graph *g, Node *n, const char *op) {
  Tensor xs = *in_t(g, n, 0);
  int to = (int)attr_int(n, "to", DT_UNDEF), from = dtype_size(xs.dtype), ts = dtype_size(to);
  if (!ts || (!dt_float(to) && !dt_int(to))) node_error(n, "BitCast to %s is not supported",
                                                        dtype_name(to));
  int64_t dims[MAX_RANK];
  int r = xs.rank;
  memcpy(dims, xs.dims, sizeof dims);
  if (ts < from) {
    if (r >= MAX_RANK) node_error(n, "output rank is too high");
    dims[r++] = from / ts;
  } else if (ts > from) {
    if (r < 1 || dims[r - 1] != ts / from) node_error(n, "the last dimension must be %d", ts / from);
    r--;
  }
  Tensor *y = out_t(g, n, 0, to, r, dims);
  if (y->ndata) memcpy(y->data, xs.data, (size_t)tensor_bytes(y));
}

static void ev_depth_space(Graph *g, Node *n, const char *op) {
  Tensor xs = *in_t(g, n, 0);
  if (xs.rank != 4) node_error(n, "input must be 4-D");
  int64_t b = attr_int(n, "blocksize", 0), N = xs.dims[0], C = xs.dims[1], H = xs.dims[2],
          W = xs.dims[3];
  if (b < 1) node_error(n, "blocksize must be positive");
  bool d2s = op[0] == 'D', crd = !strcmp(attr_string(n, "mode", "DCR"), "CRD");
  int64_t dims[4];
  if (d2s) {
    if (C % (b * b)) node_error(n, "channels %lld are not a multiple of blocksize^2", (long long)C);
    dims[0] = N, dims[1] = C / (b * b), dims[2] = H * b, dims[3] = W * b;
  } else {
    if (H % b || W % b) node_error(n, "height and width must be multiples of blocksize");
    dims[0] = N, dims[1] = C * b * b, dims[2] = H / b, dims[3] = W / b;
  }
  Tensor *y = out_t(g, n, 0, xs.dtype, 4, dims);
  int64_t idx[4] = {0};
  for (int64_t k = 0; k < y->ndata; k++) {
    int64_t nn = idx[0], c = idx[1], h = idx[2], w = idx[3], sc, sh, sw;
    if (d2s) {   /* output (c, h, w) <- input channel from (c, h % b, w % b) */
      int64_t bh = h % b, bw = w % b, oc = dims[1];
      sc = crd ? (c * b + bh) * b + bw : (bh * b + bw) * oc + c;
      sh = h / b, sw = w / b;
    } else {     /* output channel c = (bh * b + bw) * C + ic (DCR), ic * b * b + ... (CRD) */
      int64_t ic = crd ? c / (b * b) : c % C, blk = crd ? c % (b * b) : c / C;
      int64_t bh = blk / b, bw = blk % b;
      sc = ic, sh = h * b + bh, sw = w * b + bw;
    }
    copy_el(y, k, &xs, ((nn * C + sc) * H + sh) * W + sw);
    next_index(4, dims, idx);
  }
}

static void ev_global_pool(Graph *g, Node *n, const char *op) {
  Tensor xs = *in_t(g, n, 0);
  if (xs.rank < 3) node_error(n, "input must have rank 3 or more");
  int64_t dims[MAX_RANK];
  for (int d = 0; d < xs.rank; d++) dims[d] = d < 2 ? xs.dims[d] : 1;
  int64_t rows = xs.dims[0] * xs.dims[1], len = shape_prod(n, xs.dims, 2, xs.rank);
  Tensor *y = out_t(g, n, 0, xs.dtype, xs.rank, dims);
  bool mx = op[6] == 'M';
  for (int64_t r = 0; r < rows; r++) {
    double s = mx ? -INFINITY : 0;
    for (int64_t j = 0; j < len; j++) {
      double v = getf(&xs, r * len + j);
      s = mx ? fmax(s, v) : s + v;
    }
    put(y, r, mx ? s : s / (double)len, 0);
  }
}

static void ev_compress(Graph *g, Node *n, const char *op) {
  Tensor xs = *in_t(g, n, 0), cs = *in_t(g, n, 1);
  const Attr *ax = attr_find(n, "axis");
  int64_t dims[MAX_RANK];
  int64_t len = ax ? xs.dims[shape_axis(n, ax->i, xs.rank, false, "axis")] : tensor_numel(&xs);
  int64_t nc = tensor_numel(&cs), kept = 0;
  for (int64_t j = 0; j < nc && j < len; j++) kept += geti(&cs, j) != 0;
  if (!ax) {
    Tensor *y = out_t(g, n, 0, xs.dtype, 1, &kept);
    for (int64_t j = 0, o = 0; j < nc && j < len; j++) if (geti(&cs, j)) copy_el(y, o++, &xs, j);
    return;
  }
  int axis = shape_axis(n, ax->i, xs.rank, false, "axis");
  memcpy(dims, xs.dims, sizeof dims);
  dims[axis] = kept;
  Tensor *y = out_t(g, n, 0, xs.dtype, xs.rank, dims);
  int64_t outer = shape_prod(n, xs.dims, 0, axis), inner = shape_prod(n, xs.dims, axis + 1, xs.rank);
  int64_t o = 0;
  for (int64_t a = 0; a < outer; a++)
    for (int64_t j = 0; j < nc && j < len; j++)
      if (geti(&cs, j))
        for (int64_t c = 0; c < inner; c++) copy_el(y, o++, &xs, (a * len + j) * inner + c);
}

static void ev_reverse_sequence(Graph *g, Node *n, const char *op) {
  Tensor xs = *in_t(g, n, 0), ls = *in_t(g, n, 1);
  if (xs.rank < 2) node_error(n, "input must have rank 2 or more");
  int ba = (int)attr_int(n, "batch_axis", 1), ta = (int)attr_int(n, "time_axis", 0);
  if (ba < 0 || ba > 1 || ta < 0 || ta > 1 || ba == ta) node_error(n, "axes must be 0 and 1");
  Tensor *y = out_t(g, n, 0, xs.dtype, xs.rank, xs.dims);
  int64_t idx[MAX_RANK] = {0}, st[MAX_RANK];
  strides_of(xs.rank, xs.dims, st);
  for (int64_t k = 0; k < y->ndata; k++) {
    int64_t L = geti(&ls, idx[ba]), t = idx[ta];
    if (L < 0 || L > xs.dims[ta]) node_error(n, "sequence length %lld is out of range", (long long)L);
    int64_t src = k + (t < L ? (L - 1 - t - t) * st[ta] : 0);
    copy_el(y, k, &xs, src);
    next_index(xs.rank, xs.dims, idx);
  }
}

static void ev_mvn(Graph *g, Node *n, const char *op) {
  Tensor xs = *in_t(g, n, 0);
  int64_t axes[MAX_RANK];
  const int64_t *v;
  int na = attr_ints(n, "axes", &v);
  bool red[MAX_RANK] = {false};
  if (na) { if (na > MAX_RANK) node_error(n, "too many axes"); memcpy(axes, v, sizeof(int64_t) * (size_t)na); }
  else { na = 3; axes[0] = 0, axes[1] = 2, axes[2] = 3; }
  for (int i = 0; i < na; i++) red[shape_axis(n, axes[i], xs.rank, false, "axis")] = true;
  int64_t kd[MAX_RANK], ost[MAX_RANK], idx[MAX_RANK] = {0};
  for (int d = 0; d < xs.rank; d++) kd[d] = red[d] ? 1 : xs.dims[d];
  strides_of(xs.rank, kd, ost);
  int64_t no = shape_prod(n, kd, 0, xs.rank), nx = tensor_numel(&xs);
  double *s1 = xcalloc((size_t)(no ? no : 1), sizeof(double)), *s2 = xcalloc((size_t)(no ? no : 1), sizeof(double));
  int64_t *oi = xmalloc(sizeof(int64_t) * (size_t)(nx ? nx : 1));
  for (int64_t k = 0; k < nx; k++) {
    int64_t o = 0;
    for (int d = 0; d < xs.rank; d++) o += (red[d] ? 0 : idx[d]) * ost[d];
    oi[k] = o;
    double f = getf(&xs, k);
    s1[o] += f, s2[o] += f * f;
    next_index(xs.rank, xs.dims, idx);
  }
  double cnt = no ? (double)nx / (double)no : 1;
  Tensor *y = out_t(g, n, 0, xs.dtype, xs.rank, xs.dims);
  for (int64_t k = 0; k < nx; k++) {
    double m = s1[oi[k]] / cnt, var = s2[oi[k]] / cnt - m * m;
    put(y, k, (getf(&xs, k) - m) / (sqrt(var) + 1e-9), 0);
  }
  free(s1), free(s2), free(oi);
}

/* ---- the entry points ---- */

const char *eval_node_op(const Node *n) {
  return n->op == OP_EVAL ? n->onnx_op : op_info[n->op].onnx;
}

/* The ops.h rows whose constant nodes are evaluated here: every one the
 * table names (an ONNX op snc also runs on data), and OP_EVAL. */
static int eval_index(const Node *n) {
  if (n->op == OP_EVAL) return n->aux;
  if (n->op == OP_CONSTANT || !op_info[n->op].onnx[0]) return -1;
  return eval_find(op_info[n->op].onnx);
}

bool eval_node(Graph *g, Node *n) {
  if (n->op == OP_CONSTANT) {
    shape_constant(g, n);
    return true;
  }
  int k = eval_index(n);
  if (k < 0) return false;
  const char *op = eval_ops[k].name;
  bool shape_only = !strcmp(op, "Shape") || !strcmp(op, "Size");
  if (shape_only) {
    shape_in(g, n, 0);   /* any tensor: only its shape is read */
  } else {
    for (int i = 0; i < n->nin; i++)
      if (n->in[i] >= 0 && !is_const(g, n->in[i])) return false;
  }
  eval_ops[k].fn(g, n, op);
  for (int o = 0; o < n->nout; o++) {
    if (n->out[o] < 0) continue;
    Tensor *y = &g->t[n->out[o]];
    if (!y->data) internal_error(__FILE__, __LINE__, "eval left '%s' without a value", y->name);
    y->kind = TK_CONST;
    y->batched = false;
  }
  return true;
}

/* The shape column of the ops that only evaluate (OP_EVAL and the rows
 * with shape_fold): reached when an input is computed from data. */
void shape_fold(Graph *g, Node *n) {
  for (int i = 0; i < n->nin; i++)
    if (n->in[i] >= 0 && !is_const(g, n->in[i]))
      node_error(n, "op %s is supported only on constant inputs (snc evaluates it at compile "
                 "time), and input %d ('%s'%s) is computed from data", eval_node_op(n), i,
                 g->t[n->in[i]].name, tensor_source(g, n->in[i]));
  internal_error(__FILE__, __LINE__, "node '%s' has constant inputs but was not evaluated", n->name);
}

void eval_remove(Graph *g, const bool *folded) {
  int *map = xmalloc(sizeof(int) * (size_t)(g->nn + 1));
  int k = 0;
  for (int i = 0; i < g->nn; i++) {
    if (i < g->nfwd && folded[i]) {
      Node *n = &g->n[i];
      for (int o = 0; o < n->nout; o++)
        if (n->out[o] >= 0) g->t[n->out[o]].producer = -1;
      free(n->name), free(n->in), free(n->out);
      map[i] = -1;
      continue;
    }
    map[i] = k;
    g->n[k++] = g->n[i];
  }
  int removed = g->nn - k;
  g->nn = k;
  g->nfwd -= removed;
  for (int t = 0; t < g->nt; t++)
    if (g->t[t].producer >= 0) g->t[t].producer = map[g->t[t].producer];
  for (int i = 0; i < g->nn; i++)
    if (g->n[i].fwd >= 0) g->n[i].fwd = map[g->n[i].fwd];
  free(map);
  if (g->output >= 0 && g->t[g->output].producer < 0)
    fatal(EXIT_BADINPUT, "the model output '%s' is a constant (it does not depend on the data "
          "input)", g->t[g->output].name);
  bool used = false;
  for (int i = 0; i < g->nfwd && !used; i++)
    for (int j = 0; j < g->n[i].nin; j++) used |= g->n[i].in[j] == g->input;
  if (!used && g->output >= 0 && g->input >= 0)
    fatal(EXIT_BADINPUT, "the model output '%s' depends on the data input '%s' only through its "
          "shape", g->t[g->output].name, g->t[g->input].name);
  if (!used)
    fatal(EXIT_BADINPUT, "no node reads the data input%s%s%s once the constants are evaluated",
          g->input >= 0 ? " '" : "", g->input >= 0 ? g->t[g->input].name : "",
          g->input >= 0 ? "'" : "");
}

/* ---- snc inspect --dump eval ---- */

static void dump_value(FILE *f, const Tensor *t, int64_t k) {
  if (dt_float(t->dtype)) {
    double v = getf(t, k);
    if (isnan(v)) fputs("\"nan\"", f);
    else if (isinf(v)) fputs(v > 0 ? "\"inf\"" : "\"-inf\"", f);
    else fprintf(f, t->dtype == DT_DOUBLE ? "%.17g" : "%.9g", v);
  } else if (t->dtype == DT_UINT64) {
    fprintf(f, "%llu", (unsigned long long)geti(t, k));
  } else {
    fprintf(f, "%lld", (long long)geti(t, k));
  }
}

void eval_dump(Graph *g, FILE *f) {
  for (int t = 0; t < g->nt; t++)
    if (g->t[t].data && g->t[t].producer < 0 && t != g->input) g->t[t].kind = TK_CONST;
  g->batch = 1;
  for (int i = 0; i < g->nn; i++) {
    Node *n = &g->n[i];
    if (!eval_node(g, n))
      node_error(n, "is not evaluated at compile time (an input is not a constant, or the op "
                 "has no evaluator)");
  }
  fputs("{\"outputs\": [", f);
  bool first = true;
  for (int t = 0; t < g->nt; t++) {
    const Tensor *y = &g->t[t];
    if (!y->is_output) continue;
    if (!y->data || y->rank < 0) fatal(EXIT_BADINPUT, "graph output '%s' has no value", y->name);
    fputs(first ? "\n  {\"name\": \"" : ",\n  {\"name\": \"", f);
    first = false;
    for (const char *c = y->name; *c; c++)
      if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
      else if ((unsigned char)*c < 0x20) fprintf(f, "\\u%04x", *c);
      else fputc(*c, f);
    fprintf(f, "\", \"dtype\": \"%s\", \"shape\": [", dtype_name(y->dtype));
    for (int d = 0; d < y->rank; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)y->dims[d]);
    fputs("], \"values\": [", f);
    int64_t cnt = tensor_numel(y);
    for (int64_t k = 0; k < cnt; k++) {
      if (k) fputs(", ", f);
      dump_value(f, y, k);
    }
    fputs("]}", f);
  }
  fputs("\n]}\n", f);
}
