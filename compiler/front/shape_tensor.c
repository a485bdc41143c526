/* shape_tensor.c — shape inference for the data-movement and broadcasting
 * ops: Flatten, Reshape, Add/Sub/Mul/Div, Concat, Split, Slice, Transpose,
 * Pad, Softmax, ReduceMean.
 *
 * Values that ONNX passes as inputs from some opset on (Reshape's shape,
 * Split's split, Slice's starts/ends/axes/steps, Pad's pads, ReduceMean's
 * axes) must be constants: import folds Constant nodes and initializers into
 * TK_CONST tensors, read here with const_ints(). The older attribute forms are
 * read when present. */
#include "shape.h"

#include <string.h>

void shape_flatten(Graph *g, Node *n) {
  Tensor *x = shape_in(g, n, 0);
  int axis = shape_axis(n, attr_int(n, "axis", 1), x->rank, true, "axis");
  int64_t dims[2] = {shape_prod(n, x->dims, 0, axis), shape_prod(n, x->dims, axis, x->rank)};
  shape_set_out(g, n, 0, x->dtype, 2, dims);
  n->p = NULL;
}

/* The batch in a Reshape target. torch bakes the export batch into view()
 * targets unless dynamic_axes is given: (b, T, C) from x.size(), or the
 * flattened (b*T, C). On a tensor computed from the data whose leading
 * dimension holds the batch (k*B rows, the batch outermost):
 *   - a target without -1 that holds the export's element count instead of
 *     this one's carries the export batch in its first dimension divisible
 *     by it: that dimension is rescaled to --batch;
 *   - a target with -1 whose leading literal is the export batch (or k times
 *     it, k*B being the rows) follows --batch, which the -1 would otherwise
 *     silently absorb.
 * An export batch of 1 cannot be told from a literal 1 where both fit: a
 * clear error naming the fixes. Targets computed from Shape(x) hold --batch
 * already and fit as they are. */
void shape_batch_target(Graph *g, Node *n, const Tensor *x, int64_t *shape, int r) {
  int eb = g->export_batch, B = g->batch;
  bool rows = x->batched || (x->producer >= 0 && x->rank >= 1 && x->dims[0] % B == 0 &&
                             x->dims[0] > 0 && x->kind != TK_CONST);
  if (eb <= 0 || eb == B || !rows || r < 1) return;
  int64_t numel = tensor_numel(x), known = 1;
  bool infer = false, zero = false;
  for (int i = 0; i < r; i++) {
    if (shape[i] == -1) infer = true;
    else if (shape[i] == 0) zero = true;
    else if (shape[i] > 0) known = mul_checked(known, shape[i], n->name);
  }
  if (zero || numel % B) return;
  int64_t exported = numel / B * eb;
  if (!infer) {
    if (known == numel || known != exported) return;
    for (int i = 0; i < r; i++)
      if (shape[i] > 0 && shape[i] % eb == 0) {
        shape[i] = shape[i] / eb * B;
        g->batch_reshapes++;
        return;
      }
    node_error(n, "the target holds the export batch (%d) in no dimension divisible by it; "
               "re-export with dynamic_axes on the batch, or compile with --batch %d", eb, eb);
  }
  int64_t k = x->dims[0] / B;
  if (shape[0] <= 0 || (shape[0] != eb && shape[0] != k * eb)) return;
  if (eb == 1)
    node_error(n, "the target's leading dimension %lld may be the export batch (1) or a literal "
               "on a tensor of batch %d; re-export with dynamic_axes on the batch, or compile "
               "with --batch 1", (long long)shape[0], B);
  shape[0] = shape[0] / eb * B;
  g->batch_reshapes++;
}

/* Expand, ConstantOfShape and Tile targets of rank 2 or more: a leading
 * literal equal to the export batch (2 or more) follows --batch (BERT's token
 * types expanded to (b, T) and its mask of ones, ViT's
 * cls_token.expand(b, -1, -1), Llama's key/value heads expanded to
 * (b, kv, rep, T, D)). A 1-D target is left alone: exporters build shape
 * vectors with ConstantOfShape([rank]), where the value is a rank. */
void shape_batch_leading(Graph *g, const Node *n, int64_t *shape, int r) {
  int eb = g->export_batch;
  if (eb >= 2 && eb != g->batch && r >= 2 && shape[0] == eb) {
    shape[0] = g->batch;
    g->batch_reshapes++;
  }
}

void shape_reshape(Graph *g, Node *n) {
  Tensor *x = shape_in(g, n, 0);
  int64_t shape[MAX_RANK];
  int r = const_ints(g, n, 1, shape, MAX_RANK);
  bool allowzero = attr_int(n, "allowzero", 0) != 0;
  shape_batch_target(g, n, x, shape, r);
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < r; i++) {
    if (shape[i] == 0 && !allowzero) {
      if (i >= x->rank) node_error(n, "shape[%d] = 0 copies a dimension the input %s lacks", i,
                                   shape_str(x));
      shape[i] = x->dims[i];
    }
    if (shape[i] == -1) {
      if (infer >= 0) node_error(n, "shape has more than one -1");
      infer = i;
    } else if (shape[i] < 0) {
      node_error(n, "shape[%d] = %lld is invalid", i, (long long)shape[i]);
    } else {
      known = mul_checked(known, shape[i], n->name);
    }
  }
  int64_t numel = tensor_numel(x);
  if (infer >= 0) {
    if (known == 0 || numel % known)
      node_error(n, "cannot reshape %s (%lld elements) with a -1 dimension", shape_str(x),
                 (long long)numel);
    shape[infer] = numel / known;
  } else if (known != numel) {
    node_error(n, "cannot reshape %s (%lld elements) into %lld elements", shape_str(x),
               (long long)numel, (long long)known);
  }
  shape_set_out(g, n, 0, x->dtype, r, shape);
  n->p = NULL;
}

/* A constant that the exporter computed at the export batch (BERT's extended
 * attention mask, folded by torch into a (b, 1, 1, T) literal) meeting data
 * of --batch rows: when its b leading slices are equal it does not depend
 * on the sample, and its first slice broadcasts to any batch (the constant
 * keeps it alone); otherwise a clear error. */
void shape_batch_const(Graph *g, Node *n, Tensor *c, const Tensor *x) {
  int eb = g->export_batch, B = g->batch;
  if (eb <= 0 || eb == B || c->kind != TK_CONST || !c->data || c->rank < 1 ||
      c->rank != x->rank || c->dims[0] != eb || x->dims[0] != B || x->kind == TK_CONST)
    return;
  int64_t per = tensor_numel(c) / eb;
  size_t bytes = (size_t)(per * dtype_size(c->dtype));
  for (int s = 1; s < eb; s++)
    if (memcmp((const char *)c->data + s * bytes, c->data, bytes))
      node_error(n, "the constant '%s' %s holds the export batch %d as its leading dimension, "
                 "with different values per sample, and meets data of batch %d; re-export with "
                 "dynamic_axes on the batch, or compile with --batch %d", c->name, shape_str(c),
                 eb, B, eb);
  c->dims[0] = 1;
  c->ndata = per;
  g->batch_reshapes++;
}

/* Multidirectional (numpy) broadcasting. */
void shape_binary(Graph *g, Node *n) {
  /* Min and Max are variadic in ONNX; on data snc takes two operands (a
   * constant list of any length was evaluated before this). */
  if ((n->op == OP_MIN || n->op == OP_MAX) && n->nin != 2)
    node_error(n, "%s of data takes exactly two inputs here, not %d", op_name(n->op), n->nin);
  Tensor *a = shape_in_float(g, n, 0, -1), *b = shape_in_float(g, n, 1, -1);
  shape_batch_const(g, n, a, b);
  shape_batch_const(g, n, b, a);
  snrt_binary_t *p = shape_alloc(sizeof *p);
  int r = a->rank > b->rank ? a->rank : b->rank;
  int64_t stra = 1, strb = 1;
  for (int i = r - 1; i >= 0; i--) {
    int ia = i - (r - a->rank), ib = i - (r - b->rank);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1)
      node_error(n, "shapes %s and %s do not broadcast", shape_str(a), shape_str(b));
    p->dims[i] = da == 1 ? db : da;
    /* A size-1 dim is read at index 0 whatever the output index: stride 0. */
    p->sa[i] = da == 1 ? 0 : stra;
    p->sb[i] = db == 1 ? 0 : strb;
    stra *= da;
    strb *= db;
  }
  static const int kinds[] = {[OP_ADD] = SNRT_ADD, [OP_SUB] = SNRT_SUB, [OP_MUL] = SNRT_MUL,
                              [OP_DIV] = SNRT_DIV, [OP_MIN] = SNRT_MIN, [OP_MAX] = SNRT_MAX};
  p->kind = kinds[n->op];
  p->rank = r;
  p->na = tensor_numel(a);
  p->nb = tensor_numel(b);
  shape_set_out(g, n, 0, DT_FLOAT, r, p->dims);
  p->n = tensor_numel(&g->t[n->out[0]]);
  n->aux = p->kind;
  n->p = p;
}

void shape_concat(Graph *g, Node *n) {
  Tensor *x0 = shape_in(g, n, 0);
  if (!attr_find(n, "axis")) node_error(n, "attribute 'axis' is required");
  int axis = shape_axis(n, attr_int(n, "axis", 0), x0->rank, false, "axis");
  int64_t dims[MAX_RANK];
  memcpy(dims, x0->dims, sizeof dims);
  dims[axis] = 0;
  int64_t inner = shape_prod(n, x0->dims, axis + 1, x0->rank);
  snrt_concat_t *p = shape_alloc(sizeof *p);
  int64_t *chunk = xcalloc((size_t)n->nin, sizeof *chunk);
  for (int i = 0; i < n->nin; i++) {
    Tensor *x = shape_in(g, n, i);
    if (x->rank != x0->rank || x->dtype != x0->dtype)
      node_error(n, "input %d ('%s') %s does not match input 0 %s", i, x->name, shape_str(x),
                 shape_str(x0));
    for (int d = 0; d < x->rank; d++)
      if (d != axis && x->dims[d] != x0->dims[d])
        node_error(n, "input %d ('%s') %s differs from input 0 %s outside axis %d", i, x->name,
                   shape_str(x), shape_str(x0), axis);
    dims[axis] += x->dims[axis];
    chunk[i] = mul_checked(x->dims[axis], inner, n->name);
  }
  shape_set_out(g, n, 0, x0->dtype, x0->rank, dims);
  *p = (snrt_concat_t){.parts = n->nin, .outer = shape_prod(n, x0->dims, 0, axis), .chunk = chunk};
  n->p = p;
}

/* Split sizes: the 'split' attribute (opset < 13), the optional input 1
 * (13+), else equal parts (opset 18's num_outputs: the last part smaller). */
void shape_split(Graph *g, Node *n) {
  Tensor *x = shape_in(g, n, 0);
  int axis = shape_axis(n, attr_int(n, "axis", 0), x->rank, false, "axis");
  int64_t len = x->dims[axis], sizes[4096];
  int parts = n->nout;
  if (parts > 4096) node_error(n, "too many outputs (%d)", parts);
  const int64_t *v;
  int cnt = attr_ints(n, "split", &v);
  if (cnt) {
    if (cnt != parts) node_error(n, "'split' has %d values for %d outputs", cnt, parts);
    memcpy(sizes, v, sizeof(int64_t) * (size_t)cnt);
  } else if (shape_has_in(n, 1)) {
    cnt = const_ints(g, n, 1, sizes, 4096);
    if (cnt != parts) node_error(n, "split input has %d values for %d outputs", cnt, parts);
  } else {
    int64_t each = (len + parts - 1) / parts;
    if (!attr_find(n, "num_outputs") && len % parts)
      node_error(n, "axis %d (length %lld) does not split into %d equal parts", axis,
                 (long long)len, parts);
    for (int i = 0; i < parts; i++) {
      int64_t left = len - each * i;
      sizes[i] = left < 0 ? 0 : left < each ? left : each;
    }
  }
  int64_t sum = 0;
  for (int i = 0; i < parts; i++) {
    if (sizes[i] < 0) node_error(n, "split size %lld is negative", (long long)sizes[i]);
    sum += sizes[i];
    if (sum > len) break;
  }
  if (sum != len)
    node_error(n, "split sizes do not add up to the axis length %lld", (long long)len);
  int64_t inner = shape_prod(n, x->dims, axis + 1, x->rank);
  int64_t *chunk = xcalloc((size_t)parts, sizeof *chunk);
  for (int i = 0; i < parts; i++) {
    int64_t dims[MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    dims[axis] = sizes[i];
    shape_set_out(g, n, i, x->dtype, x->rank, dims);
    chunk[i] = sizes[i] * inner;
  }
  snrt_concat_t *p = shape_alloc(sizeof *p);
  *p = (snrt_concat_t){.parts = parts, .outer = shape_prod(n, x->dims, 0, axis), .chunk = chunk};
  n->p = p;
}

/* Slice: ONNX clamping. For step > 0, start and end clamp to [0, dim]; for
 * step < 0, start clamps to [0, dim-1] and end to [-1, dim-1]; negative values
 * first count from the end. Length: ceil((end - start) / step), at least 0. */
void shape_slice(Graph *g, Node *n) {
  Tensor *x = shape_in(g, n, 0);
  int r = x->rank;
  int64_t starts[MAX_RANK], ends[MAX_RANK], axes[MAX_RANK], steps[MAX_RANK];
  int ns, ne, na, nst;
  const int64_t *v;
  if ((ns = attr_ints(n, "starts", &v))) {   /* opset < 10 */
    if (ns > MAX_RANK) node_error(n, "too many starts");
    memcpy(starts, v, sizeof(int64_t) * (size_t)ns);
    ne = attr_ints(n, "ends", &v);
    if (ne > MAX_RANK) node_error(n, "too many ends");
    if (ne) memcpy(ends, v, sizeof(int64_t) * (size_t)ne);
    na = attr_ints(n, "axes", &v);
    if (na > MAX_RANK) node_error(n, "too many axes");
    if (na) memcpy(axes, v, sizeof(int64_t) * (size_t)na);
    nst = 0;
  } else {
    ns = const_ints(g, n, 1, starts, MAX_RANK);
    ne = const_ints(g, n, 2, ends, MAX_RANK);
    na = shape_has_in(n, 3) ? const_ints(g, n, 3, axes, MAX_RANK) : 0;
    nst = shape_has_in(n, 4) ? const_ints(g, n, 4, steps, MAX_RANK) : 0;
  }
  if (ne != ns || (na && na != ns) || (nst && nst != ns))
    node_error(n, "starts, ends, axes and steps must have the same length");
  if (!na) for (int i = 0; i < ns; i++) axes[i] = i;
  if (!nst) for (int i = 0; i < ns; i++) steps[i] = 1;
  snrt_slice_t *p = shape_alloc(sizeof *p);
  p->rank = r;
  bool seen[MAX_RANK] = {false};
  for (int d = 0; d < r; d++) {
    p->in_dims[d] = p->out_dims[d] = x->dims[d];
    p->start[d] = 0;
    p->step[d] = 1;
  }
  for (int i = 0; i < ns; i++) {
    int a = shape_axis(n, axes[i], r, false, "axis");
    if (seen[a]) node_error(n, "axis %d is sliced twice", a);
    seen[a] = true;
    int64_t dim = x->dims[a], s = starts[i], e = ends[i], st = steps[i];
    if (st == 0) node_error(n, "step must not be 0");
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (st > 0) {
      s = s < 0 ? 0 : s > dim ? dim : s;
      e = e < 0 ? 0 : e > dim ? dim : e;
    } else {
      s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
      e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
    }
    int64_t len = st > 0 ? (e - s + st - 1) / st : (s - e + (-st) - 1) / (-st);
    if (len < 0) len = 0;
    p->start[a] = len ? s : 0;
    p->step[a] = st;
    p->out_dims[a] = len;
  }
  shape_set_out(g, n, 0, x->dtype, r, p->out_dims);
  p->n_in = tensor_numel(x);
  p->n_out = tensor_numel(&g->t[n->out[0]]);
  n->p = p;
}

void shape_transpose(Graph *g, Node *n) {
  Tensor *x = shape_in(g, n, 0);
  int r = x->rank;
  snrt_transpose_t *p = shape_alloc(sizeof *p);
  const int64_t *perm;
  int cnt = attr_ints(n, "perm", &perm);
  if (cnt && cnt != r) node_error(n, "perm has %d values for rank %d", cnt, r);
  bool seen[MAX_RANK] = {false};
  int64_t dims[MAX_RANK];
  for (int i = 0; i < r; i++) {
    int64_t pi = cnt ? perm[i] : r - 1 - i;
    if (pi < 0 || pi >= r || seen[pi]) node_error(n, "perm is not a permutation of 0..%d", r - 1);
    seen[pi] = true;
    p->perm[i] = (int)pi;
    p->in_dims[i] = x->dims[i];
    dims[i] = x->dims[pi];
  }
  p->rank = r;
  p->n = tensor_numel(x);
  shape_set_out(g, n, 0, x->dtype, r, dims);
  n->p = p;
}

/* Pad, modes constant, reflect and edge. pads = [x1_begin, x2_begin, ...,
 * x1_end, ...]: an input from opset 11, the 'pads' attribute before. */
void shape_pad(Graph *g, Node *n) {
  Tensor *x = shape_in_float(g, n, 0, -1);
  const char *mode = attr_string(n, "mode", "constant");
  int pm = !strcmp(mode, "constant") ? SNRT_PAD_CONSTANT : !strcmp(mode, "reflect") ? SNRT_PAD_REFLECT
         : !strcmp(mode, "edge") ? SNRT_PAD_EDGE : -1;
  if (pm < 0) node_error(n, "Pad mode '%s' is not supported (constant, reflect or edge)", mode);
  int r = x->rank;
  int64_t pads[2 * MAX_RANK];
  const int64_t *v;
  int cnt = attr_ints(n, "pads", &v);
  float value = attr_float(n, "value", 0.0f);
  if (cnt) {
    if (cnt > 2 * MAX_RANK) node_error(n, "too many pads");
    memcpy(pads, v, sizeof(int64_t) * (size_t)cnt);
  } else {
    cnt = const_ints(g, n, 1, pads, 2 * MAX_RANK);
    value = const_float(g, n, 2, value);
  }
  if (cnt != 2 * r) node_error(n, "pads has %d values; the input %s needs %d", cnt, shape_str(x), 2 * r);
  snrt_pad_t *p = shape_alloc(sizeof *p);
  p->rank = r;
  p->value = value;
  for (int d = 0; d < r; d++) {
    p->in_dims[d] = x->dims[d];
    p->before[d] = pads[d];
    /* Range first: the sum below must not overflow on absurd pads. */
    if (pads[d] < -x->dims[d] || pads[d + r] < -x->dims[d] ||
        pads[d] > ((int64_t)1 << 40) || pads[d + r] > ((int64_t)1 << 40) ||
        x->dims[d] + pads[d] + pads[d + r] < 0)
      node_error(n, "pads for axis %d (%lld, %lld) are out of range for %s", d,
                 (long long)pads[d], (long long)pads[d + r], shape_str(x));
    p->out_dims[d] = x->dims[d] + pads[d] + pads[d + r];
    if (pm != SNRT_PAD_CONSTANT && x->dims[d] == 0 && p->out_dims[d] > 0)
      node_error(n, "%s padding of an empty axis %d of %s has nothing to repeat", mode, d, shape_str(x));
    /* Reflect: each input position is read at most SNRT_PAD_MAX_RANGES times. */
    if (pm == SNRT_PAD_REFLECT && x->dims[d] > 1 &&
        p->out_dims[d] > (SNRT_PAD_MAX_RANGES / 2 - 1) * 2 * (x->dims[d] - 1))
      node_error(n, "reflect pads for axis %d (%lld, %lld) are too wide for %s (at most %d times the "
                 "axis)", d, (long long)pads[d], (long long)pads[d + r], shape_str(x),
                 SNRT_PAD_MAX_RANGES / 2 - 2);
  }
  p->mode = pm;
  shape_set_out(g, n, 0, x->dtype, r, p->out_dims);
  p->n_in = tensor_numel(x);
  p->n_out = tensor_numel(&g->t[n->out[0]]);
  n->p = p;
}

/* Softmax: before opset 13 the input is coerced to 2-D at `axis` (default 1)
 * and normalized over everything after it; from 13 over one axis (default -1). */
void shape_softmax(Graph *g, Node *n) {
  Tensor *x = shape_in_float(g, n, 0, -1);
  int r = x->rank;
  snrt_softmax_t *p = shape_alloc(sizeof *p);
  if (shape_opset(g) < 13) {
    int axis = shape_axis(n, attr_int(n, "axis", 1), r, true, "axis");
    *p = (snrt_softmax_t){.outer = shape_prod(n, x->dims, 0, axis),
                          .len = shape_prod(n, x->dims, axis, r), .inner = 1};
    n->aux = axis;
  } else {
    if (r < 1) node_error(n, "input must have rank 1 or more");
    int axis = shape_axis(n, attr_int(n, "axis", -1), r, false, "axis");
    *p = (snrt_softmax_t){.outer = shape_prod(n, x->dims, 0, axis), .len = x->dims[axis],
                          .inner = shape_prod(n, x->dims, axis + 1, r)};
    n->aux = axis;
  }
  shape_set_out(g, n, 0, x->dtype, r, x->dims);
  n->p = p;
}

/* ReduceMean, ReduceSum, ReduceMax, ReduceL2: axes from the attribute (< 18) or the optional input 1 (18+);
 * none means all axes (or, with noop_with_empty_axes, a copy). */
void shape_reducemean(Graph *g, Node *n) {
  Tensor *x = shape_in_float(g, n, 0, -1);
  int r = x->rank;
  int64_t axes[MAX_RANK];
  const int64_t *v;
  int na = attr_ints(n, "axes", &v);
  if (na > MAX_RANK) node_error(n, "too many axes");
  if (na) memcpy(axes, v, sizeof(int64_t) * (size_t)na);
  else if (shape_has_in(n, 1)) na = const_ints(g, n, 1, axes, MAX_RANK);
  bool keep = attr_int(n, "keepdims", 1) != 0;
  bool reduced[MAX_RANK] = {false};
  if (na == 0 && !attr_int(n, "noop_with_empty_axes", 0))
    for (int d = 0; d < r; d++) reduced[d] = true;
  for (int i = 0; i < na; i++) {
    int a = shape_axis(n, axes[i], r, false, "axis");
    if (reduced[a]) node_error(n, "axis %d is listed twice", a);
    reduced[a] = true;
  }
  snrt_reduce_t *p = shape_alloc(sizeof *p);
  int64_t dims[MAX_RANK], stride = 1, count = 1;
  int ro = 0;
  p->rank = r;
  for (int d = r - 1; d >= 0; d--) {
    p->dims[d] = x->dims[d];
    p->ss[d] = reduced[d] || x->dims[d] == 1 ? 0 : stride;
    if (reduced[d]) count *= x->dims[d];
    else stride *= x->dims[d];
  }
  for (int d = 0; d < r; d++)
    if (!reduced[d]) dims[ro++] = x->dims[d];
    else if (keep) dims[ro++] = 1;
  shape_set_out(g, n, 0, x->dtype, ro, dims);
  p->n_big = tensor_numel(x);
  p->n_small = tensor_numel(&g->t[n->out[0]]);
  p->scale = n->op == OP_REDUCESUM ? 1.0f : count ? 1.0f / (float)count : 0.0f;
  if (n->op == OP_REDUCEMAX || n->op == OP_REDUCEL2) {
    p->kind = n->op == OP_REDUCEMAX ? SNRT_RED_MAX : SNRT_RED_L2;
    p->scale = 1.0f;
    if (n->op == OP_REDUCEMAX && count == 0)
      node_error(n, "ReduceMax over an empty axis of %s has no value", shape_str(x));
  }
  n->p = p;
}

/* Tile: out dims d_i * r_i. Viewed as (r0, d0, r1, d1, ...) (a dim with
 * one repeat stays one dim) it is x expanded over the repeat dims:
 * snrt_expand, and its gradient the reduction. */
void shape_tile(Graph *g, Node *n) {
  Tensor *x = shape_in_float(g, n, 0, -1);
  int64_t rep[MAX_RANK], dims[MAX_RANK];
  int nr = const_ints(g, n, 1, rep, MAX_RANK);
  if (nr != x->rank)
    node_error(n, "repeats has %d values; the input %s needs %d", nr, shape_str(x), x->rank);
  snrt_reduce_t *p = shape_alloc(sizeof *p);
  int big = 0;
  for (int d = 0; d < x->rank; d++) {
    if (rep[d] < 0 || rep[d] > ((int64_t)1 << 40))
      node_error(n, "repeat %lld for axis %d is out of range", (long long)rep[d], d);
    big += rep[d] != 1 ? 2 : 1;
    dims[d] = mul_checked(x->dims[d], rep[d], "Tile output");
  }
  if (big > MAX_RANK)
    node_error(n, "Tile of %s repeats more axes than snc's kernels index (rank %d at most, "
               "counting each repeated axis twice)", shape_str(x), MAX_RANK);
  int64_t stride = 1;
  int k = big;
  for (int d = x->rank - 1; d >= 0; d--) {
    k--;
    p->dims[k] = x->dims[d];
    p->ss[k] = x->dims[d] == 1 ? 0 : stride;
    stride *= x->dims[d];
    if (rep[d] != 1) {
      k--;
      p->dims[k] = rep[d];
      p->ss[k] = 0;
    }
  }
  p->rank = big;
  p->scale = 1.0f;
  shape_set_out(g, n, 0, DT_FLOAT, x->rank, dims);
  p->n_big = tensor_numel(&g->t[n->out[0]]);
  p->n_small = tensor_numel(x);
  n->p = p;
}

/* Unsqueeze/Squeeze: axes from the attribute (< 13) or the optional input 1
 * (13+). On data they are copies, like Reshape. */
static int squeeze_axes(Graph *g, Node *n, int64_t *axes) {
  const int64_t *v;
  int na = attr_ints(n, "axes", &v);
  if (na > MAX_RANK) node_error(n, "too many axes");
  if (na) memcpy(axes, v, sizeof(int64_t) * (size_t)na);
  else if (shape_has_in(n, 1)) na = const_ints(g, n, 1, axes, MAX_RANK);
  return na;
}

void shape_unsqueeze(Graph *g, Node *n) {
  Tensor *x = shape_in(g, n, 0);
  int64_t axes[MAX_RANK], dims[MAX_RANK];
  int na = squeeze_axes(g, n, axes);
  if (na == 0) node_error(n, "needs axes");
  int r = x->rank + na;
  if (r > MAX_RANK) node_error(n, "output rank %d is above %d", r, MAX_RANK);
  bool added[MAX_RANK] = {false};
  for (int i = 0; i < na; i++) {
    int a = shape_axis(n, axes[i], r, false, "axis");
    if (added[a]) node_error(n, "axis %d is listed twice", a);
    added[a] = true;
  }
  for (int d = 0, k = 0; d < r; d++) dims[d] = added[d] ? 1 : x->dims[k++];
  shape_set_out(g, n, 0, x->dtype, r, dims);
  n->p = NULL;
}

void shape_squeeze(Graph *g, Node *n) {
  Tensor *x = shape_in(g, n, 0);
  int64_t axes[MAX_RANK], dims[MAX_RANK];
  int na = squeeze_axes(g, n, axes), r = 0;
  bool drop[MAX_RANK] = {false};
  for (int i = 0; i < na; i++) {
    int a = shape_axis(n, axes[i], x->rank, false, "axis");
    if (x->dims[a] != 1) node_error(n, "axis %d of %s is not 1", a, shape_str(x));
    drop[a] = true;
  }
  for (int d = 0; d < x->rank; d++)
    if (!(na ? drop[d] : x->dims[d] == 1)) dims[r++] = x->dims[d];
  shape_set_out(g, n, 0, x->dtype, r, dims);
  n->p = NULL;
}

/* Cast of data (constants are folded): only float32 to float32, a copy. */
void shape_cast(Graph *g, Node *n) {
  Tensor *x = shape_in(g, n, 0);
  int to = (int)attr_int(n, "to", DT_UNDEF);
  if (x->dtype != DT_FLOAT || to != DT_FLOAT)
    node_error(n, "Cast from %s to %s is supported only on constant inputs (snc evaluates it at "
               "compile time); on data, only float32 to float32", dtype_name(x->dtype),
               dtype_name(to));
  shape_set_out(g, n, 0, x->dtype, x->rank, x->dims);
  n->p = NULL;
}
