/* fold.c — constant folding during shape inference: the shape-computing
 * subgraphs that exporters write (PyTorch's ZeroPad2d: Shape, Gather, Sub,
 * ConstantOfShape, Concat, Reshape, Slice, Transpose, Cast -> Pad's pads;
 * F.relu6/clamp: Cast(Constant) -> Clip's bounds) are evaluated here, at
 * compile time, once the shapes they read are known.
 *
 * Requires: the node's inputs shaped (shape_infer walks nodes in order).
 * Provides: fold_node() evaluates one node whose inputs are all constants
 * (TK_CONST with data; for Shape, any tensor of known shape) and turns its
 * outputs into TK_CONST tensors with data; fold_remove() drops the folded
 * nodes from the graph, so that no later pass sees them.
 *
 * What it is not: an optimizer. Float arithmetic on constants is folded as
 * float32 would compute it (double, then one rounding: exact for + - * /),
 * and nothing that reads data (parameters, the input) is ever folded. Ops
 * whose shape function is shape_fold exist only to be folded: an unfolded
 * one is a clear error naming the node. */
#include "shape.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Folded values are shape vectors and small tensors; bigger ones would be
 * a model that computes its weights from constants, which we do not want to
 * bake into train.c. */
#define FOLD_MAX_ELEMS ((int64_t)1 << 24)

static bool is_const(const Graph *g, int t) {
  return t >= 0 && g->t[t].kind == TK_CONST && g->t[t].data && g->t[t].rank >= 0;
}

static bool is_float_dt(int dt) { return dt == DT_FLOAT || dt == DT_DOUBLE; }

static bool is_int_dt(int dt) {
  return dt == DT_INT64 || dt == DT_INT32 || dt == DT_INT16 || dt == DT_INT8 ||
         dt == DT_UINT8 || dt == DT_UINT16 || dt == DT_UINT32 || dt == DT_UINT64 ||
         dt == DT_BOOL;
}

static int64_t get_i(const Tensor *t, int64_t k) {
  const void *d = t->data;
  switch (t->dtype) {
  case DT_INT64: case DT_UINT64: return ((const int64_t *)d)[k];
  case DT_INT32: return ((const int32_t *)d)[k];
  case DT_UINT32: return ((const uint32_t *)d)[k];
  case DT_INT16: return ((const int16_t *)d)[k];
  case DT_UINT16: return ((const uint16_t *)d)[k];
  case DT_INT8: return ((const int8_t *)d)[k];
  case DT_UINT8: case DT_BOOL: return ((const uint8_t *)d)[k];
  case DT_FLOAT: return (int64_t)((const float *)d)[k];
  case DT_DOUBLE: return (int64_t)((const double *)d)[k];
  default: unreachable();
  }
}

static double get_f(const Tensor *t, int64_t k) {
  switch (t->dtype) {
  case DT_FLOAT: return ((const float *)t->data)[k];
  case DT_DOUBLE: return ((const double *)t->data)[k];
  default: return (double)get_i(t, k);
  }
}

/* Stores element k: float dtypes from f, integer ones from i. */
static void put(Tensor *t, int64_t k, double f, int64_t i) {
  void *d = t->data;
  switch (t->dtype) {
  case DT_FLOAT: ((float *)d)[k] = (float)f; break;
  case DT_DOUBLE: ((double *)d)[k] = f; break;
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

/* Gives output o of n dtype and dims and fresh zeroed data; returns it. */
static Tensor *out_data(Graph *g, Node *n, int o, int dtype, int rank, const int64_t *dims) {
  if (dtype_size(dtype) == 0) node_error(n, "cannot fold a value of type %s", dtype_name(dtype));
  shape_set_out(g, n, o, dtype, rank, dims);
  Tensor *y = &g->t[n->out[o]];
  int64_t cnt = tensor_numel(y);
  if (cnt > FOLD_MAX_ELEMS)
    node_error(n, "folds to a constant of %lld elements (at most %lld)", (long long)cnt,
               (long long)FOLD_MAX_ELEMS);
  free(y->data);
  y->data = xcalloc((size_t)(cnt ? cnt : 1), (size_t)dtype_size(dtype));
  y->ndata = cnt;
  return y;
}

/* ---- ops that only move elements: the op's own shape function gives the
 * output shape and the index map (node params), we copy at compile time ---- */

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

static void fold_movement(Graph *g, Node *n) {
  const Tensor *x = &g->t[n->in[0]];
  op_info[n->op].shape(g, n);     /* validates, sets the output shape and n->p */
  Tensor *y = &g->t[n->out[0]];
  void *xdata = x->data;
  int dt = y->dtype;
  size_t es = (size_t)dtype_size(dt);
  y = out_data(g, n, 0, dt, y->rank, y->dims);
  char *dst = y->data;
  const char *src = xdata;
  int64_t cnt = y->ndata;
  switch (n->op) {
  case OP_SLICE: {
    const snrt_slice_t *p = n->p;
    int64_t ist[MAX_RANK], idx[MAX_RANK] = {0};
    strides_of(p->rank, p->in_dims, ist);
    for (int64_t k = 0; k < cnt; k++) {
      int64_t off = 0;
      for (int d = 0; d < p->rank; d++) off += (p->start[d] + idx[d] * p->step[d]) * ist[d];
      memcpy(dst + (size_t)k * es, src + (size_t)off * es, es);
      next_index(p->rank, p->out_dims, idx);
    }
    break;
  }
  case OP_TRANSPOSE: {
    const snrt_transpose_t *p = n->p;
    int64_t ist[MAX_RANK], idx[MAX_RANK] = {0};
    strides_of(p->rank, p->in_dims, ist);
    for (int64_t k = 0; k < cnt; k++) {
      int64_t off = 0;
      for (int d = 0; d < p->rank; d++) off += idx[d] * ist[p->perm[d]];
      memcpy(dst + (size_t)k * es, src + (size_t)off * es, es);
      next_index(p->rank, y->dims, idx);
    }
    break;
  }
  case OP_CONCAT: {
    const snrt_concat_t *p = n->p;
    size_t o = 0;
    for (int64_t r = 0; r < p->outer; r++)
      for (int i = 0; i < p->parts; i++) {
        const char *s = g->t[n->in[i]].data;
        size_t bytes = (size_t)p->chunk[i] * es;
        memcpy(dst + o, s + (size_t)r * bytes, bytes);
        o += bytes;
      }
    free((void *)p->chunk);
    break;
  }
  default:   /* Reshape, Flatten, Identity, Unsqueeze, Squeeze: same order */
    if (cnt) memcpy(dst, src, (size_t)cnt * es);
  }
  free(n->p);
  n->p = NULL;
}

/* ---- broadcasting arithmetic and comparisons ---- */

/* Output dims of numpy broadcasting over ins[0..k). */
static int bcast_dims(const Node *n, Tensor **ins, int k, int64_t *dims) {
  int r = 0;
  for (int i = 0; i < k; i++) if (ins[i]->rank > r) r = ins[i]->rank;
  for (int d = 0; d < r; d++) dims[d] = 1;
  for (int i = 0; i < k; i++)
    for (int d = 0; d < ins[i]->rank; d++) {
      int64_t v = ins[i]->dims[d], *o = &dims[r - ins[i]->rank + d];
      if (v != 1 && *o != 1 && v != *o) node_error(n, "constant operands do not broadcast");
      if (v != 1) *o = v;
    }
  return r;
}

/* Element of t read for the output multi-index idx (rank r). */
static int64_t bcast_at(const Tensor *t, int r, const int64_t *idx) {
  int64_t off = 0;
  for (int d = 0; d < t->rank; d++) {
    int64_t v = t->dims[d];
    off = off * v + (v == 1 ? 0 : idx[r - t->rank + d]);
  }
  return off;
}

static void fold_elementwise(Graph *g, Node *n) {
  Tensor *ins[3];
  for (int i = 0; i < n->nin; i++) ins[i] = shape_in(g, n, i);
  int64_t dims[MAX_RANK], idx[MAX_RANK] = {0};
  int r = bcast_dims(n, ins, n->nin, dims);
  Tensor *a = ins[n->op == OP_WHERE ? 1 : 0], *b = ins[n->op == OP_WHERE ? 2 : 1];
  if (a->dtype != b->dtype)
    node_error(n, "operands are %s and %s", dtype_name(a->dtype), dtype_name(b->dtype));
  if (!is_float_dt(a->dtype) && !is_int_dt(a->dtype))
    node_error(n, "cannot fold operands of type %s", dtype_name(a->dtype));
  if (n->op == OP_WHERE && ins[0]->dtype != DT_BOOL) node_error(n, "condition must be bool");
  Tensor *y = out_data(g, n, 0, n->op == OP_EQUAL ? DT_BOOL : a->dtype, r, dims);
  bool fl = is_float_dt(a->dtype);
  for (int64_t k = 0; k < y->ndata; k++) {
    int64_t ia = bcast_at(a, r, idx), ib = bcast_at(b, r, idx);
    double fa = get_f(a, ia), fb = get_f(b, ib), f = 0;
    /* Integer views only of integer operands: a float such as -inf (a mask
     * value) has none. */
    int64_t xa = fl ? 0 : get_i(a, ia), xb = fl ? 0 : get_i(b, ib), v = 0;
    switch (n->op) {
    case OP_ADD: f = fa + fb, v = (int64_t)((uint64_t)xa + (uint64_t)xb); break;
    case OP_SUB: f = fa - fb, v = (int64_t)((uint64_t)xa - (uint64_t)xb); break;
    case OP_MUL: f = fa * fb, v = (int64_t)((uint64_t)xa * (uint64_t)xb); break;
    case OP_DIV:
      f = fa / fb;
      if (!fl && (xb == 0 || (xb == -1 && xa == INT64_MIN))) node_error(n, "integer division by zero");
      v = fl ? 0 : xa / xb;
      break;
    case OP_EQUAL: v = fl ? fa == fb : xa == xb; break;
    case OP_WHERE: {
      bool c = get_i(ins[0], bcast_at(ins[0], r, idx)) != 0;
      f = c ? fa : fb, v = c ? xa : xb;
      break;
    }
    default: unreachable();
    }
    put(y, k, f, v);
    next_index(r, dims, idx);
  }
}

/* ---- the ops that exist only to be folded ---- */

static void fold_cast(Graph *g, Node *n) {
  Tensor *x = shape_in(g, n, 0);
  int to = (int)attr_int(n, "to", DT_UNDEF);
  if (!is_float_dt(to) && !is_int_dt(to))
    node_error(n, "Cast to %s is not supported", dtype_name(to));
  Tensor *y = out_data(g, n, 0, to, x->rank, x->dims);
  for (int64_t k = 0; k < y->ndata; k++) {
    double f = get_f(x, k);
    if (is_float_dt(x->dtype) && !is_float_dt(to) && to != DT_BOOL && !(fabs(f) < 9.2e18))
      node_error(n, "cannot cast %g to %s", f, dtype_name(to));
    /* A float to bool is f != 0, which get_i's truncation would get wrong for 0.5. */
    int64_t i = is_float_dt(x->dtype) && to == DT_BOOL ? f != 0 : get_i(x, k);
    put(y, k, f, i);
  }
}

static void fold_shape(Graph *g, Node *n) {
  Tensor *x = shape_in(g, n, 0);
  int r = x->rank;
  int64_t start = attr_int(n, "start", 0), end = attr_int(n, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = start < 0 ? 0 : start > r ? r : start;
  end = end < start ? start : end > r ? r : end;
  int64_t len = end - start, dims[MAX_RANK];
  memcpy(dims, x->dims, sizeof dims);
  Tensor *y = out_data(g, n, 0, DT_INT64, 1, &len);
  for (int64_t k = 0; k < len; k++) ((int64_t *)y->data)[k] = dims[start + k];
}

static void fold_gather(Graph *g, Node *n) {
  Tensor *x = shape_in(g, n, 0), *ind = shape_in(g, n, 1);
  if (ind->dtype != DT_INT64 && ind->dtype != DT_INT32)
    node_error(n, "indices must be int64 or int32, not %s", dtype_name(ind->dtype));
  if (x->rank < 1) node_error(n, "data must have rank 1 or more");
  int axis = shape_axis(n, attr_int(n, "axis", 0), x->rank, false, "axis");
  int r = x->rank - 1 + ind->rank;
  if (r > MAX_RANK) node_error(n, "output rank %d is too high", r);
  int64_t dims[MAX_RANK], xdims[MAX_RANK];
  int o = 0;
  for (int d = 0; d < axis; d++) dims[o++] = x->dims[d];
  for (int d = 0; d < ind->rank; d++) dims[o++] = ind->dims[d];
  for (int d = axis + 1; d < x->rank; d++) dims[o++] = x->dims[d];
  memcpy(xdims, x->dims, sizeof xdims);
  int xr = x->rank, dt = x->dtype;
  Tensor *y = out_data(g, n, 0, dt, r, dims);
  int64_t outer = shape_prod(n, xdims, 0, axis), inner = shape_prod(n, xdims, axis + 1, xr);
  int64_t len = xdims[axis], ni = tensor_numel(ind);
  size_t es = (size_t)dtype_size(dt);
  char *dst = y->data;
  for (int64_t a = 0; a < outer; a++)
    for (int64_t j = 0; j < ni; j++) {
      int64_t i = get_i(ind, j);
      if (i < -len || i >= len) node_error(n, "index %lld is out of range for axis length %lld",
                                           (long long)i, (long long)len);
      if (i < 0) i += len;
      memcpy(dst + (size_t)((a * ni + j) * inner) * es,
             (const char *)x->data + (size_t)((a * len + i) * inner) * es, (size_t)inner * es);
    }
}

static void fold_constant_of_shape(Graph *g, Node *n) {
  int64_t dims[MAX_RANK];
  const Tensor *s = shape_in(g, n, 0);
  if (s->rank != 1) node_error(n, "the shape input must be 1-D");
  int r = const_ints(g, n, 0, dims, MAX_RANK);
  for (int d = 0; d < r; d++)
    if (dims[d] < 0) node_error(n, "shape[%d] = %lld is negative", d, (long long)dims[d]);
  const Attr *a = attr_find(n, "value");
  const Tensor *v = a && a->type == AT_TENSOR && a->tensor >= 0 ? &g->t[a->tensor] : NULL;
  if (v && (!v->data || v->ndata != 1)) node_error(n, "'value' must hold one element");
  Tensor *y = out_data(g, n, 0, v ? v->dtype : DT_FLOAT, r, dims);
  for (int64_t k = 0; k < y->ndata; k++)
    put(y, k, v ? get_f(v, 0) : 0.0, v ? get_i(v, 0) : 0);
}

static void fold_range(Graph *g, Node *n) {
  Tensor *s = shape_in(g, n, 0), *l = shape_in(g, n, 1), *d = shape_in(g, n, 2);
  if (s->ndata != 1 || l->ndata != 1 || d->ndata != 1)
    node_error(n, "start, limit and delta must be scalars");
  if (s->dtype != l->dtype || s->dtype != d->dtype) node_error(n, "start, limit and delta differ in type");
  int dt = s->dtype;
  bool fl = is_float_dt(dt);
  double fs = get_f(s, 0), fd = get_f(d, 0);
  int64_t is = get_i(s, 0), id = get_i(d, 0), len;
  if (fl ? fd == 0 : id == 0) node_error(n, "delta must not be 0");
  if (fl) {
    double c = ceil((get_f(l, 0) - fs) / fd);
    if (!(c < (double)FOLD_MAX_ELEMS)) node_error(n, "the range is too long");
    len = c > 0 ? (int64_t)c : 0;
  } else {
    int64_t span = get_i(l, 0) - is;   /* shape values: no overflow worth guarding */
    len = span / id + (span % id != 0 && (span > 0) == (id > 0));
    if (len < 0) len = 0;
  }
  Tensor *y = out_data(g, n, 0, dt, 1, &len);
  for (int64_t k = 0; k < len; k++) put(y, k, fs + (double)k * fd, is + k * id);
}

/* ---- the entry points ---- */

static bool foldable(OpKind op) {
  switch (op) {
  case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_EQUAL: case OP_WHERE:
  case OP_CONCAT: case OP_RESHAPE: case OP_FLATTEN: case OP_IDENTITY: case OP_SLICE:
  case OP_TRANSPOSE: case OP_UNSQUEEZE: case OP_SQUEEZE: case OP_CAST: case OP_SHAPE:
  case OP_GATHER: case OP_CONSTANTOFSHAPE: case OP_RANGE: case OP_CONSTANT:
    return true;
  default:
    return false;
  }
}

bool fold_node(Graph *g, Node *n) {
  if (!foldable(n->op)) return false;
  if (n->op == OP_SHAPE) {
    shape_in(g, n, 0);   /* any tensor: only its shape is read */
  } else {
    for (int i = 0; i < n->nin; i++)
      if (n->in[i] >= 0 && !is_const(g, n->in[i])) return false;
  }
  switch (n->op) {
  case OP_CONSTANT: shape_constant(g, n); break;
  case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_EQUAL: case OP_WHERE:
    fold_elementwise(g, n);
    break;
  case OP_CAST: fold_cast(g, n); break;
  case OP_SHAPE: fold_shape(g, n); break;
  case OP_GATHER: fold_gather(g, n); break;
  case OP_CONSTANTOFSHAPE: fold_constant_of_shape(g, n); break;
  case OP_RANGE: fold_range(g, n); break;
  default: fold_movement(g, n);
  }
  for (int o = 0; o < n->nout; o++) {
    if (n->out[o] < 0) continue;
    Tensor *y = &g->t[n->out[o]];
    if (!y->data) internal_error(__FILE__, __LINE__, "fold left '%s' without a value", y->name);
    y->kind = TK_CONST;
  }
  return true;
}

/* The shape function of the ops that exist only to be folded. */
void shape_fold(Graph *g, Node *n) {
  for (int i = 0; i < n->nin; i++)
    if (n->in[i] >= 0 && !is_const(g, n->in[i]))
      node_error(n, "op %s is supported only on constant inputs (snc evaluates it at compile "
                 "time), and input %d ('%s') is computed from data", op_name(n->op), i,
                 g->t[n->in[i]].name);
  internal_error(__FILE__, __LINE__, "node '%s' has constant inputs but was not folded", n->name);
}

void fold_remove(Graph *g, const bool *folded) {
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
  if (!used)
    fatal(EXIT_BADINPUT, "the model output '%s' depends on the data input '%s' only through its "
          "shape", g->t[g->output].name, g->t[g->input].name);
}
