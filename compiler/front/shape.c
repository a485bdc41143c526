/* shape.c — shape inference: the driver and the simple ops.
 *
 * What it is: shape_infer() walks the forward nodes in order (import sorted
 * them) and calls each op's shape function from the op table. A shape function
 * validates its inputs (ranks, dtypes, channel counts...), sets the dtype and
 * dims of its outputs, and fills node->p with the runtime parameter struct the
 * emitter prints (see snc.h, "Node params"). Semantics are ONNX's, opsets 11
 * to 17 (older attribute forms are accepted where they are easy to tell apart).
 *
 * Constant subgraphs (the shape arithmetic exporters write) are evaluated by
 * eval.c as the walk reaches them, and their nodes dropped at the end.
 *
 * What it is not: a general ONNX shape inferencer: only the ops of ops.h.
 *
 * The op families live in shape_nn.c (conv, pooling, normalization, gemm,
 * matmul) and shape_tensor.c (reshape-like, broadcasting, slicing).
 */
#include "shape.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

/* Dropout ids are numbered in node order so recomputation and backward can
 * regenerate the same mask (snrt_dropout_t.id). Reset by each shape_infer. */
static uint32_t dropout_counter;

int64_t shape_opset(const Graph *g) { return g->opset > 0 ? g->opset : 17; }

bool shape_has_in(const Node *n, int i) { return i < n->nin && n->in[i] >= 0; }

Tensor *shape_in(Graph *g, Node *n, int i) {
  if (!shape_has_in(n, i)) node_error(n, "required input %d is missing", i);
  Tensor *t = &g->t[n->in[i]];
  if (t->rank < 0) node_error(n, "input %d ('%s') has no known shape", i, t->name);
  return t;
}

Tensor *shape_in_float(Graph *g, Node *n, int i, int rank) {
  Tensor *t = shape_in(g, n, i);
  if (t->dtype != DT_FLOAT)
    node_error(n, "input %d ('%s'%s) must be float32, not %s", i, t->name,
               tensor_source(g, n->in[i]), dtype_name(t->dtype));
  if (rank >= 0 && t->rank != rank)
    node_error(n, "input %d ('%s') must have rank %d, not %d %s", i, t->name, rank, t->rank,
               shape_str(t));
  return t;
}

void shape_set_out(Graph *g, Node *n, int i, int dtype, int rank, const int64_t *dims) {
  if (i >= n->nout || n->out[i] < 0) return;
  if (rank < 0 || rank > MAX_RANK) node_error(n, "output rank %d is out of range", rank);
  Tensor *t = &g->t[n->out[i]];
  for (int d = 0; d < rank; d++)
    if (dims[d] < 0) node_error(n, "output '%s' would have a negative dimension", t->name);
  t->dtype = dtype;
  tensor_set_shape(t, rank, dims);
  (void)tensor_numel(t);   /* "absurd size" error instead of overflow later */
}

int shape_int(const Node *n, int64_t v, const char *what) {
  if (v < 0 || v > INT32_MAX) node_error(n, "%s (%lld) is out of range", what, (long long)v);
  return (int)v;
}

int shape_axis(const Node *n, int64_t axis, int rank, bool inclusive, const char *what) {
  int64_t hi = inclusive ? rank : rank - 1;
  if (axis < -(int64_t)rank || axis > hi)
    node_error(n, "%s %lld is out of range for rank %d", what, (long long)axis, rank);
  return (int)(axis < 0 ? axis + rank : axis);
}

int64_t shape_prod(const Node *n, const int64_t *dims, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) p = mul_checked(p, dims[i], n->name);
  return p;
}

void *shape_alloc(size_t size) { return xcalloc(1, size); }

/* ---- the driver ---- */

static void check_node(Graph *g, Node *n) {
  const OpInfo *oi = &op_info[n->op];
  if (oi->shape == shape_internal)
    node_error(n, "internal op in a forward graph");
  if (n->nin < oi->min_in || (oi->max_in >= 0 && n->nin > oi->max_in))
    node_error(n, "has %d inputs; %s takes %d to %d", n->nin, op_name(n->op), oi->min_in,
               oi->max_in);
  if (n->nout < oi->min_out || (oi->max_out >= 0 && n->nout > oi->max_out))
    node_error(n, "has %d outputs; %s gives %d to %d", n->nout, op_name(n->op), oi->min_out,
               oi->max_out);
  if (n->nout < 1 || n->out[0] < 0) node_error(n, "output 0 is missing");
  for (int i = 0; i < n->nin; i++)
    if (n->in[i] >= g->nt || n->in[i] < -1) internal_error(__FILE__, __LINE__, "bad tensor index");
}

void shape_infer(Graph *g, int batch) {
  dropout_counter = 0;
  if (g->input < 0) fatal(EXIT_BADINPUT, "the model has no data input");
  Tensor *x = &g->t[g->input];
  if (x->rank < 1) fatal(EXIT_BADINPUT, "the data input '%s' needs a known rank of 1 or more",
                         x->name);
  /* Token ids: int64 in ONNX (as torch exports nn.Embedding's input), held
   * as int32 in the arena (the loader checks them against the vocabulary). */
  if (x->dtype == DT_INT64) x->dtype = DT_INT32;
  g->export_batch = x->dims[0] > 0 && x->dims[0] <= INT32_MAX ? (int)x->dims[0] : 0;
  g->batch_reshapes = 0;
  x->batched = true;
  if (batch > 0) x->dims[0] = batch;
  else if (x->dims[0] <= 0)
    fatal(EXIT_BADINPUT, "the data input '%s' has a symbolic batch dimension; give --batch N",
          x->name);
  g->batch = (int)x->dims[0];
  for (int i = 0; i < g->nt; i++) {
    Tensor *t = &g->t[i];
    if (t->producer >= 0 || t->rank < 0) continue;
    for (int d = 0; d < t->rank; d++)
      if (t->dims[d] < 0)
        fatal(EXIT_BADINPUT, "tensor '%s' has an unknown dimension %d %s; snc needs static "
              "shapes (only the data input's batch may be symbolic)", t->name, d, shape_str(t));
    (void)tensor_numel(t);
  }
  if (g->nfwd == 0) g->nfwd = g->nn;
  bool *folded = xcalloc((size_t)g->nfwd + 1, sizeof(bool)), any = false;
  for (int i = 0; i < g->nfwd; i++) {
    Node *n = &g->n[i];
    check_node(g, n);
    /* Constant subgraphs (shape arithmetic) are evaluated here and dropped. */
    if (eval_node(g, n)) {
      folded[i] = any = true;
    } else {
      op_info[n->op].shape(g, n);
      /* Batch tracking (shape_reshape reads it): an output computed from the
       * data input whose leading dimension is the batch carries it. */
      bool from_data = false;
      for (int k = 0; k < n->nin; k++) from_data |= n->in[k] >= 0 && g->t[n->in[k]].batched;
      for (int o = 0; o < n->nout; o++) {
        Tensor *t = n->out[o] >= 0 ? &g->t[n->out[o]] : NULL;
        if (t) t->batched = from_data && t->rank >= 1 && t->dims[0] == g->batch;
      }
    }
    for (int o = 0; o < n->nout; o++)
      if (n->out[o] >= 0 && g->t[n->out[o]].rank < 0)
        internal_error(__FILE__, __LINE__, "node '%s' left output %d without a shape", n->name, o);
  }
  if (any) eval_remove(g, folded);
  free(folded);
}

/* ---- unary ops, Identity, Clip, Dropout, Constant ---- */

static snrt_unary_t *unary_params(Graph *g, Node *n, int kind) {
  Tensor *x = shape_in_float(g, n, 0, -1);
  shape_set_out(g, n, 0, x->dtype, x->rank, x->dims);
  snrt_unary_t *p = shape_alloc(sizeof *p);
  *p = (snrt_unary_t){.n = tensor_numel(x), .kind = kind, .alpha = 0, .lo = -FLT_MAX,
                      .hi = FLT_MAX};
  n->aux = kind;
  n->p = p;
  return p;
}

/* Output = input 0's shape. Relu, LeakyRelu, Sigmoid and Tanh also get their
 * snrt_unary_t; Identity gets none (a copy). */
void shape_same(Graph *g, Node *n) {
  switch (n->op) {
  case OP_RELU: unary_params(g, n, SNRT_RELU); return;
  case OP_LEAKYRELU: unary_params(g, n, SNRT_LEAKY_RELU)->alpha = attr_float(n, "alpha", 0.01f);
    return;
  case OP_SIGMOID: unary_params(g, n, SNRT_SIGMOID); return;
  case OP_TANH: unary_params(g, n, SNRT_TANH); return;
  default: {
    Tensor *x = shape_in(g, n, 0);
    shape_set_out(g, n, 0, x->dtype, x->rank, x->dims);
    n->p = NULL;
  }
  }
}

/* Clip: bounds are attributes before opset 11 and optional constant inputs
 * from 11 on. Attributes are honoured whenever present (they cannot be
 * confused with inputs). */
void shape_clip(Graph *g, Node *n) {
  snrt_unary_t *p = unary_params(g, n, SNRT_CLIP);
  if (attr_find(n, "min") || attr_find(n, "max") || shape_opset(g) < 11) {
    p->lo = attr_float(n, "min", -FLT_MAX);
    p->hi = attr_float(n, "max", FLT_MAX);
  }
  if (shape_has_in(n, 1)) p->lo = const_float(g, n, 1, p->lo);
  if (shape_has_in(n, 2)) p->hi = const_float(g, n, 2, p->hi);
  if (p->lo > p->hi) node_error(n, "min %g is above max %g", p->lo, p->hi);
}

/* Dropout: ratio is an attribute before opset 12, an optional constant input
 * from 12 on (default 0.5). The optional mask output is bool, same shape. */
void shape_dropout(Graph *g, Node *n) {
  Tensor *x = shape_in_float(g, n, 0, -1);
  float ratio = attr_float(n, "ratio", 0.5f);
  if (shape_has_in(n, 1)) ratio = const_float(g, n, 1, ratio);
  if (!(ratio >= 0.0f && ratio < 1.0f)) node_error(n, "ratio %g must be in [0, 1)", ratio);
  shape_set_out(g, n, 0, x->dtype, x->rank, x->dims);
  shape_set_out(g, n, 1, DT_BOOL, x->rank, x->dims);
  snrt_dropout_t *p = shape_alloc(sizeof *p);
  *p = (snrt_dropout_t){.n = tensor_numel(x), .ratio = ratio, .id = dropout_counter++};
  n->p = p;
}

/* A Constant that import did not fold (a hand-built graph): its value
 * becomes the output, a TK_CONST tensor (eval.c then drops the node). */
void shape_constant(Graph *g, Node *n) {
  Tensor *y = &g->t[n->out[0]];
  const Attr *a = attr_find(n, "value");
  if (a && a->type == AT_TENSOR && a->tensor >= 0 && a->tensor < g->nt) {
    const Tensor *v = &g->t[a->tensor];
    if (v->rank < 0) node_error(n, "the value tensor has no shape");
    y->dtype = v->dtype;
    tensor_set_shape(y, v->rank, v->dims);
    y->data = v->data;
    y->ndata = v->ndata;
  } else if ((a = attr_find(n, "value_float")) || (a = attr_find(n, "value_int"))) {
    bool f = a->type == AT_FLOAT;
    y->dtype = f ? DT_FLOAT : DT_INT64;
    tensor_set_shape(y, 0, NULL);
    if (f) { float *d = xmalloc(sizeof *d); *d = a->f; y->data = d; }
    else { int64_t *d = xmalloc(sizeof *d); *d = a->i; y->data = d; }
    y->ndata = 1;
  } else if ((a = attr_find(n, "value_floats")) || (a = attr_find(n, "value_ints"))) {
    bool f = a->type == AT_FLOATS;
    int64_t d0 = a->n;
    y->dtype = f ? DT_FLOAT : DT_INT64;
    tensor_set_shape(y, 1, &d0);
    size_t sz = f ? sizeof(float) : sizeof(int64_t);
    y->data = xmalloc(sz * (size_t)(a->n ? a->n : 1));
    if (a->n) memcpy(y->data, f ? (void *)a->floats : (void *)a->ints, sz * (size_t)a->n);
    y->ndata = a->n;
  } else {
    node_error(n, "Constant needs a 'value' tensor (or value_float(s)/value_int(s))");
  }
  y->kind = TK_CONST;
  n->p = NULL;
}
