/* shape_seq.c — shape inference for the ops transformers add: elementwise
 * math (Sqrt, Erf, Neg, Reciprocal, Pow with a constant exponent, Sin, Cos,
 * Exp, Log, Abs, HardSigmoid, HardSwish),
 * LayerNormalization, Gather (the embedding lookup), Where with a constant
 * condition (torch's masked_fill of a causal mask) and Expand.
 *
 * Requires: inputs shaped (shape.c walks the nodes in order); Gather and
 * Where whose inputs are all constants were evaluated before (eval.c).
 * Provides: output shapes and node->p (snrt_math_t, snrt_ln_t,
 * snrt_gather_t, snrt_where_t, snrt_reduce_t for Expand).
 *
 * What it is not: general Gather or Where. Gather on data reads a float
 * table on any axis (axis 0: an embedding) at int indices that are the data
 * input or constants; Where takes a constant condition and one constant scalar
 * branch (a mask), the other branch being data of the output's shape. */
#include "shape.h"

#include <stdlib.h>
#include <string.h>

/* ---- Sqrt, Erf, Neg, Reciprocal, Pow, Sin, Cos, Exp, Log, Abs, HardSigmoid,
 * HardSwish ---- */

void shape_math(Graph *g, Node *n) {
  Tensor *x = shape_in_float(g, n, 0, -1);
  snrt_math_t *p = shape_alloc(sizeof *p);
  switch (n->op) {
  case OP_SQRT: p->kind = SNRT_SQRT; break;
  case OP_ERF: p->kind = SNRT_ERF; break;
  case OP_NEG: p->kind = SNRT_NEG; break;
  case OP_RECIPROCAL: p->kind = SNRT_RECIPROCAL; break;
  case OP_POW: {
    p->kind = SNRT_POW;
    const Tensor *e = shape_in(g, n, 1);
    if (e->kind != TK_CONST || !e->data || e->ndata != 1)
      node_error(n, "the exponent ('%s') must be a constant scalar", e->name);
    p->exponent = const_float(g, n, 1, 1.0f);
    break;
  }
  case OP_SIN: p->kind = SNRT_SIN; break;
  case OP_COS: p->kind = SNRT_COS; break;
  case OP_EXP: p->kind = SNRT_EXP; break;
  case OP_LOG: p->kind = SNRT_LOG; break;
  case OP_ABS: p->kind = SNRT_ABS; break;
  case OP_HARDSWISH: p->kind = SNRT_HARDSWISH; break;
  case OP_HARDSIGMOID:
    p->kind = SNRT_HARDSIGMOID;
    p->alpha = attr_float(n, "alpha", 0.2f);
    p->beta = attr_float(n, "beta", 0.5f);
    break;
  default: unreachable();
  }
  p->n = tensor_numel(x);
  shape_set_out(g, n, 0, DT_FLOAT, x->rank, x->dims);
  n->aux = p->kind;
  n->p = p;
}

/* ---- LayerNormalization (opset 17) ---- */

void shape_layernorm(Graph *g, Node *n) {
  Tensor *x = shape_in_float(g, n, 0, -1);
  if (x->rank < 1) node_error(n, "input must have rank 1 or more");
  int axis = shape_axis(n, attr_int(n, "axis", -1), x->rank, false, "axis");
  for (int k = 1; k <= 2; k++) {
    if (!shape_has_in(n, k)) continue;
    Tensor *s = shape_in_float(g, n, k, -1);
    bool ok = s->rank == x->rank - axis;
    for (int d = 0; ok && d < s->rank; d++) ok = s->dims[d] == x->dims[axis + d];
    if (!ok)
      node_error(n, "%s ('%s') is %s; it must be the normalized shape of %s from axis %d",
                 k == 1 ? "scale" : "bias", s->name, shape_str(s), shape_str(x), axis);
  }
  snrt_ln_t *p = shape_alloc(sizeof *p);
  p->rows = shape_prod(n, x->dims, 0, axis);
  p->cols = shape_prod(n, x->dims, axis, x->rank);
  p->eps = attr_float(n, "epsilon", 1e-5f);
  if (!(p->eps >= 0)) node_error(n, "epsilon %g must be >= 0", p->eps);
  if (p->cols < 1) node_error(n, "normalizes over no elements %s", shape_str(x));
  shape_set_out(g, n, 0, DT_FLOAT, x->rank, x->dims);
  int64_t sd[MAX_RANK];
  for (int d = 0; d < x->rank; d++) sd[d] = d < axis ? x->dims[d] : 1;
  shape_set_out(g, n, 1, DT_FLOAT, x->rank, sd);
  shape_set_out(g, n, 2, DT_FLOAT, x->rank, sd);
  n->p = p;
}

/* ---- Gather: the embedding lookup (axis 0), or any axis of data ---- */

void shape_gather(Graph *g, Node *n) {
  Tensor *t = shape_in_float(g, n, 0, -1), *ix = shape_in(g, n, 1);
  if (t->rank < 1) node_error(n, "the table '%s' must have rank 1 or more", t->name);
  int axis = shape_axis(n, attr_int(n, "axis", 0), t->rank, false, "axis");
  if (ix->dtype != DT_INT64 && ix->dtype != DT_INT32)
    node_error(n, "indices ('%s') must be int64 or int32, not %s", ix->name, dtype_name(ix->dtype));
  if (ix->rank + t->rank - 1 > MAX_RANK) node_error(n, "output rank is above %d", MAX_RANK);
  snrt_gather_t *p = shape_alloc(sizeof *p);
  p->rows = t->dims[axis];
  p->dim = shape_prod(n, t->dims, axis + 1, t->rank);
  if (axis > 0) p->outer = shape_prod(n, t->dims, 0, axis);
  p->n_idx = tensor_numel(ix);
  if (p->rows < 1 || p->rows > INT32_MAX) node_error(n, "the table '%s' %s has no rows or too many",
                                                     t->name, shape_str(t));
  if (ix->kind == TK_CONST && ix->data) {
    if (ix->ndata < p->n_idx) node_error(n, "the constant indices '%s' hold fewer values than their shape %s",
                                         ix->name, shape_str(ix));
    int32_t *v = xcalloc((size_t)(p->n_idx ? p->n_idx : 1), sizeof *v);
    for (int64_t i = 0; i < p->n_idx; i++) {
      int64_t k = ix->dtype == DT_INT64 ? ((const int64_t *)ix->data)[i] : ((const int32_t *)ix->data)[i];
      if (k < -p->rows || k >= p->rows)
        node_error(n, "index %lld at position %lld is outside axis %d of '%s' %s",
                   (long long)k, (long long)i, axis, t->name, shape_str(t));
      v[i] = (int32_t)(k < 0 ? k + p->rows : k);
    }
    p->idx = v;
  } else if (ix->kind != TK_INPUT && graph_token_source(g, n->in[1]) < 0) {
    node_error(n, "indices ('%s'%s) must be the data input (token ids), its elements moved "
               "(Reshape, Flatten, Squeeze, Unsqueeze, Identity), or a constant", ix->name,
               tensor_source(g, n->in[1]));
  }
  /* Output: the table's dims before the axis, the indices' dims, the rest
   * (a scalar index drops the axis: a select). */
  int64_t dims[MAX_RANK];
  int r = 0;
  for (int d = 0; d < axis; d++) dims[r++] = t->dims[d];
  for (int d = 0; d < ix->rank; d++) dims[r++] = ix->dims[d];
  for (int d = axis + 1; d < t->rank; d++) dims[r++] = t->dims[d];
  shape_set_out(g, n, 0, DT_FLOAT, r, dims);
  n->p = p;
}

/* ---- Where with a constant condition: a masked fill ---- */

static bool const_scalar(const Tensor *t) {
  return t->kind == TK_CONST && t->data && t->ndata == 1 && t->dtype == DT_FLOAT;
}

/* Where whose condition is computed from data: WHERE_DATA, numpy
 * broadcasting of the three inputs. */
static void shape_where_data(Graph *g, Node *n, Tensor *c, Tensor *a, Tensor *b) {
  if (c->dtype != DT_BOOL)
    node_error(n, "the condition ('%s') must be bool, not %s", c->name, dtype_name(c->dtype));
  if (a->dtype != DT_FLOAT || b->dtype != DT_FLOAT)
    node_error(n, "the branches ('%s', '%s') must be float32", a->name, b->name);
  const Tensor *x[3] = {c, a, b};
  snrt_where3_t *p = shape_alloc(sizeof *p);
  int r = 0;
  for (int k = 0; k < 3; k++) r = x[k]->rank > r ? x[k]->rank : r;
  int64_t st[3] = {1, 1, 1}, *s[3] = {p->sc, p->sa, p->sb};
  for (int i = r - 1; i >= 0; i--) {
    int64_t dim = 1;
    for (int k = 0; k < 3; k++) {
      int ik = i - (r - x[k]->rank);
      int64_t dk = ik >= 0 ? x[k]->dims[ik] : 1;
      if (dk != 1 && dim != 1 && dk != dim)
        node_error(n, "shapes %s, %s and %s do not broadcast", shape_str(c), shape_str(a), shape_str(b));
      if (dk != 1) dim = dk;
    }
    p->dims[i] = dim;
    for (int k = 0; k < 3; k++) {
      int ik = i - (r - x[k]->rank);
      int64_t dk = ik >= 0 ? x[k]->dims[ik] : 1;
      s[k][i] = dk == 1 ? 0 : st[k];
      st[k] *= dk;
    }
  }
  p->rank = r;
  p->na = tensor_numel(a);
  p->nb = tensor_numel(b);
  shape_set_out(g, n, 0, DT_FLOAT, r, p->dims);
  p->n = tensor_numel(&g->t[n->out[0]]);
  n->op = OP_WHERE_DATA;
  n->p = p;
}

void shape_where(Graph *g, Node *n) {
  Tensor *c = shape_in(g, n, 0), *a = shape_in(g, n, 1), *b = shape_in(g, n, 2);
  if (c->kind != TK_CONST && c->kind != TK_CONSTVAL) {
    shape_where_data(g, n, c, a, b);
    return;
  }
  if (c->kind != TK_CONST || !c->data || c->dtype != DT_BOOL)
    node_error(n, "the condition ('%s'%s) must be a constant bool tensor (a mask); Where on a "
               "condition computed from data is not supported", c->name,
               tensor_source(g, n->in[0]));
  bool fill_a = const_scalar(a), fill_b = const_scalar(b);
  if (fill_a == fill_b)
    node_error(n, "exactly one branch must be a constant float scalar (a masked fill); '%s' and "
               "'%s' are %s", a->name, b->name, fill_a ? "both constants" : "both data");
  Tensor *x = fill_a ? b : a, *v = fill_a ? a : b;
  if (x->dtype != DT_FLOAT) node_error(n, "the data branch '%s' must be float32", x->name);
  if (c->rank > x->rank) node_error(n, "the condition %s has a higher rank than the data %s",
                                    shape_str(c), shape_str(x));
  /* The mask covers out dims [lead, rank): the first dim where the
   * (right-aligned) condition is not 1; it repeats over the dims before. */
  int r = x->rank, off = r - c->rank, lead = r;
  for (int d = 0; d < c->rank; d++) {
    if (c->dims[d] != 1 && c->dims[d] != x->dims[off + d])
      node_error(n, "the condition %s does not broadcast to the data %s", shape_str(c), shape_str(x));
    if (c->dims[d] != 1 && lead == r) lead = off + d;
  }
  if (lead == r) lead = r - 1 < 0 ? 0 : r - 1;
  if (c->ndata < tensor_numel(c))
    node_error(n, "the condition '%s' holds fewer values than its shape %s", c->name, shape_str(c));
  snrt_where_t *p = shape_alloc(sizeof *p);
  p->n = tensor_numel(x);
  p->inner = shape_prod(n, x->dims, lead, r);
  /* The mask is a byte array in train.c: keep it to a sane size. */
  if (p->inner > ((int64_t)1 << 26))
    node_error(n, "the mask would take %lld bytes (at most %lld)", (long long)p->inner,
               (long long)1 << 26);
  p->value = ((const float *)v->data)[0];
  uint8_t *fill = xcalloc((size_t)(p->inner ? p->inner : 1), 1);
  int64_t cst[MAX_RANK], idx[MAX_RANK] = {0}, s = 1;
  for (int d = r - 1; d >= 0; d--) {
    int cd = d - off;
    cst[d] = cd >= 0 && c->dims[cd] != 1 ? s : 0;
    if (cd >= 0) s *= c->dims[cd];
  }
  const uint8_t *cv = c->data;
  for (int64_t i = 0; i < p->inner; i++) {
    int64_t o = 0;
    for (int d = lead; d < r; d++) o += idx[d] * cst[d];
    fill[i] = (cv[o] != 0) == fill_a;
    for (int d = r - 1; d >= lead; d--) {
      if (++idx[d] < x->dims[d]) break;
      idx[d] = 0;
    }
  }
  p->fill = fill;
  shape_set_out(g, n, 0, DT_FLOAT, r, x->dims);
  n->aux = fill_a ? 2 : 1;   /* the data branch's input slot */
  n->p = p;
}

/* ---- Trilu on data: a masked fill with zero over the last two dims ---- */

void shape_trilu(Graph *g, Node *n) {
  Tensor *x = shape_in_float(g, n, 0, -1);
  if (x->rank < 2) node_error(n, "input must have rank 2 or more, not %s", shape_str(x));
  int64_t k = 0;
  if (shape_has_in(n, 1)) {
    int64_t v[1];
    if (const_ints(g, n, 1, v, 1) != 1) node_error(n, "k must be a scalar");
    k = v[0];
  }
  bool upper = attr_int(n, "upper", 1) != 0;
  int64_t R = x->dims[x->rank - 2], C = x->dims[x->rank - 1];
  snrt_where_t *p = shape_alloc(sizeof *p);
  p->n = tensor_numel(x);
  p->inner = shape_prod(n, x->dims, x->rank - 2, x->rank);
  if (p->inner > ((int64_t)1 << 26))
    node_error(n, "the mask would take %lld bytes (at most %lld)", (long long)p->inner,
               (long long)1 << 26);
  uint8_t *fill = xcalloc((size_t)(p->inner ? p->inner : 1), 1);
  for (int64_t i = 0; i < R; i++)
    for (int64_t j = 0; j < C; j++) fill[i * C + j] = upper ? j - i < k : j - i > k;
  p->fill = fill;
  p->value = 0.0f;
  shape_set_out(g, n, 0, DT_FLOAT, x->rank, x->dims);
  n->aux = 0;   /* the data is input 0 */
  n->p = p;
}

/* ---- GatherElements with constant indices: a take by precomputed positions ---- */

void shape_gather_elements(Graph *g, Node *n) {
  Tensor *x = shape_in_float(g, n, 0, -1), *ix = shape_in(g, n, 1);
  if (x->rank < 1) node_error(n, "the data '%s' must have rank 1 or more", x->name);
  int axis = shape_axis(n, attr_int(n, "axis", 0), x->rank, false, "axis");
  if (ix->rank != x->rank)
    node_error(n, "indices %s must have the rank of the data %s", shape_str(ix), shape_str(x));
  for (int d = 0; d < x->rank; d++)
    if (d != axis && ix->dims[d] > x->dims[d])
      node_error(n, "indices %s are larger than the data %s on axis %d", shape_str(ix), shape_str(x), d);
  if (ix->kind != TK_CONST || !ix->data)
    node_error(n, "indices ('%s') must be a constant; GatherElements at indices computed from data "
               "is not supported", ix->name);
  int64_t no = tensor_numel(ix), ni = tensor_numel(x);
  if (ix->ndata < no) node_error(n, "the constant indices '%s' hold fewer values than their shape %s",
                                 ix->name, shape_str(ix));
  if (no > INT32_MAX || ni > INT32_MAX) node_error(n, "too many elements for a constant take");
  snrt_take_t *p = shape_alloc(sizeof *p);
  int32_t *src = xcalloc((size_t)(no ? no : 1), sizeof *src);
  int32_t *start = xcalloc((size_t)ni + 2, sizeof *start), *inv = xcalloc((size_t)(no ? no : 1), sizeof *inv);
  int64_t xs[MAX_RANK], s = 1, idx[MAX_RANK] = {0};
  for (int d = x->rank - 1; d >= 0; d--) xs[d] = s, s *= x->dims[d];
  for (int64_t i = 0; i < no; i++) {
    int64_t k = ix->dtype == DT_INT64 ? ((const int64_t *)ix->data)[i] : ((const int32_t *)ix->data)[i];
    if (k < -x->dims[axis] || k >= x->dims[axis])
      node_error(n, "index %lld at position %lld is outside axis %d of '%s' %s", (long long)k,
                 (long long)i, axis, x->name, shape_str(x));
    if (k < 0) k += x->dims[axis];
    int64_t o = 0;
    for (int d = 0; d < x->rank; d++) o += (d == axis ? k : idx[d]) * xs[d];
    src[i] = (int32_t)o;
    start[o + 1]++;
    for (int d = ix->rank - 1; d >= 0; d--) {
      if (++idx[d] < ix->dims[d]) break;
      idx[d] = 0;
    }
  }
  for (int64_t j = 0; j < ni; j++) start[j + 1] += start[j];
  int32_t *fillp = xcalloc((size_t)ni + 1, sizeof *fillp);
  for (int64_t i = 0; i < no; i++) inv[start[src[i]] + fillp[src[i]]++] = (int32_t)i;
  free(fillp);
  *p = (snrt_take_t){.n_in = ni, .n_out = no, .src = src, .inv_start = start, .inv = inv};
  shape_set_out(g, n, 0, DT_FLOAT, ix->rank, ix->dims);
  n->p = p;
}

/* ---- Einsum of two operands ---- */

/* The params of out = sum over the other letters of A * B, where each
 * operand is a string of distinct letters (its dims in size[letter]). */
static snrt_einsum_t einsum_form(const Node *n, const char *out, const char *a, const char *b,
                                 const int64_t *size) {
  snrt_einsum_t p = {0};
  char order[SNRT_MAX_RANK + 1];
  int r = 0;
  for (const char *c = out; *c; c++) order[r++] = *c;
  p.nout = r;
  for (const char *c = a; *c; c++)
    if (!memchr(order, *c, (size_t)r)) order[r++] = *c;
  for (const char *c = b; *c; c++)
    if (!memchr(order, *c, (size_t)r)) {
      if (r == SNRT_MAX_RANK) node_error(n, "Einsum uses more than %d distinct indices", SNRT_MAX_RANK);
      order[r++] = *c;
    }
  p.rank = r;
  p.n_out = p.n_sum = 1;
  for (int d = 0; d < r; d++) {
    unsigned char l = (unsigned char)order[d];
    p.dims[d] = size[l];
    if (d < p.nout) p.n_out = mul_checked(p.n_out, size[l], "Einsum output");
    else p.n_sum = mul_checked(p.n_sum, size[l], "Einsum sum");
    const char *ops[2] = {a, b};
    int64_t *st[2] = {p.sa, p.sb};
    for (int k = 0; k < 2; k++) {
      const char *pos = strchr(ops[k], order[d]);
      int64_t s = 0;
      if (pos) {
        s = 1;
        for (const char *q = pos + 1; *q; q++) s *= size[(unsigned char)*q];
      }
      st[k][d] = s;
    }
  }
  return p;
}

void shape_einsum(Graph *g, Node *n) {
  const char *eq = attr_string(n, "equation", NULL);
  if (!eq) node_error(n, "Einsum needs an equation");
  if (n->nin != 2) node_error(n, "Einsum '%s': snc supports exactly two operands, not %d", eq, n->nin);
  Tensor *x[2] = {shape_in_float(g, n, 0, -1), shape_in_float(g, n, 1, -1)};
  /* Parse "ab,bc->ac" (spaces allowed); the implicit form "ab,bc" outputs
   * the letters used once, in alphabetical order. */
  char term[3][SNRT_MAX_RANK + 1];
  int len[3] = {0, 0, 0}, t = 0;
  bool arrow = false;
  for (const char *c = eq; *c; c++) {
    if (*c == ' ') continue;
    if (*c == ',') {
      if (t != 0 || arrow) node_error(n, "Einsum '%s': snc supports exactly two operands", eq);
      t = 1;
    } else if (c[0] == '-' && c[1] == '>') {
      if (t != 1 || arrow) node_error(n, "Einsum '%s': malformed equation", eq);
      t = 2, arrow = true, c++;
    } else if (*c == '.') {
      node_error(n, "Einsum '%s': an ellipsis ('...') is not supported", eq);
    } else if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')) {
      if (len[t] == SNRT_MAX_RANK) node_error(n, "Einsum '%s': a term has more than %d indices", eq, SNRT_MAX_RANK);
      if (memchr(term[t], *c, (size_t)len[t]))
        node_error(n, "Einsum '%s': index '%c' repeats within a term (a diagonal or trace) is not supported",
                   eq, *c);
      term[t][len[t]++] = *c;
    } else {
      node_error(n, "Einsum '%s': unexpected character '%c'", eq, *c);
    }
  }
  if (t < 1) node_error(n, "Einsum '%s': snc supports exactly two operands", eq);
  for (int k = 0; k < 3; k++) term[k][len[k]] = 0;
  if (!arrow) {
    for (char l = 'A'; l <= 'z'; l++) {
      int cnt = (memchr(term[0], l, (size_t)len[0]) != NULL) + (memchr(term[1], l, (size_t)len[1]) != NULL);
      if (cnt == 1) {
        if (len[2] == SNRT_MAX_RANK) node_error(n, "Einsum '%s': too many output indices", eq);
        term[2][len[2]++] = l;
      }
    }
    term[2][len[2]] = 0;
  }
  int64_t size[128];
  for (int k = 0; k < 128; k++) size[k] = -1;
  for (int k = 0; k < 2; k++) {
    if (len[k] != x[k]->rank)
      node_error(n, "Einsum '%s': operand %d ('%s') is %s, but its term '%s' has %d indices", eq, k,
                 x[k]->name, shape_str(x[k]), term[k], len[k]);
    for (int d = 0; d < len[k]; d++) {
      unsigned char l = (unsigned char)term[k][d];
      if (size[l] >= 0 && size[l] != x[k]->dims[d])
        node_error(n, "Einsum '%s': index '%c' is %lld in one operand and %lld in another", eq, l,
                   (long long)size[l], (long long)x[k]->dims[d]);
      size[l] = x[k]->dims[d];
    }
  }
  int64_t dims[MAX_RANK];
  for (int d = 0; d < len[2]; d++) {
    unsigned char l = (unsigned char)term[2][d];
    if (size[l] < 0) node_error(n, "Einsum '%s': output index '%c' is in no operand", eq, l);
    dims[d] = size[l];
  }
  EinsumParams *p = shape_alloc(sizeof *p);
  p->fwd = einsum_form(n, term[2], term[0], term[1], size);
  p->da = einsum_form(n, term[0], term[2], term[1], size);   /* dA = dy * B */
  p->db = einsum_form(n, term[1], term[2], term[0], size);   /* dB = dy * A */
  shape_set_out(g, n, 0, DT_FLOAT, len[2], dims);
  n->p = p;
}

/* MatMul in the cases snrt_mm_t's one batch stride per operand cannot say
 * (a 1-D operand; batch dims broadcast on both sides): the node becomes an
 * Einsum. Output batch dims are 'A'.., an operand's size-1 dim under a larger
 * output dim a private letter of its own (summed over its one value; its
 * gradient sums over the output's), m, k, n the matrix dims. */
void shape_matmul_einsum(Graph *g, Node *n, const Tensor *a, const Tensor *b) {
  char ta[MAX_RANK + 1], tb[MAX_RANK + 1], to[MAX_RANK + 1];
  int64_t size[128];
  int la = 0, lb = 0, lo = 0;
  int ra = a->rank >= 2 ? a->rank - 2 : 0, rb = b->rank >= 2 ? b->rank - 2 : 0;
  int r = ra > rb ? ra : rb;
  for (int i = 0; i < r; i++) {
    int ia = i - (r - ra), ib = i - (r - rb);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1)
      node_error(n, "batch dimensions of A %s and B %s do not broadcast", shape_str(a), shape_str(b));
    char o = (char)('A' + i);
    size[(unsigned char)o] = da > db ? da : db;
    to[lo++] = o;
    if (ia >= 0) {
      char l = da == size[(unsigned char)o] ? o : (char)('I' + i);
      size[(unsigned char)l] = da;
      ta[la++] = l;
    }
    if (ib >= 0) {
      char l = db == size[(unsigned char)o] ? o : (char)('Q' + i);
      size[(unsigned char)l] = db;
      tb[lb++] = l;
    }
  }
  int64_t K = a->dims[a->rank - 1], Kb = b->rank >= 2 ? b->dims[b->rank - 2] : b->dims[0];
  if (K != Kb) node_error(n, "inner dimensions differ: A %s, B %s", shape_str(a), shape_str(b));
  size['k'] = K;
  if (a->rank >= 2) {
    size['m'] = a->dims[a->rank - 2];
    ta[la++] = 'm';
    to[lo++] = 'm';
  }
  ta[la++] = 'k';
  tb[lb++] = 'k';
  if (b->rank >= 2) {
    size['n'] = b->dims[b->rank - 1];
    tb[lb++] = 'n';
    to[lo++] = 'n';
  }
  ta[la] = tb[lb] = to[lo] = 0;
  int64_t dims[MAX_RANK];
  for (int d = 0; d < lo; d++) dims[d] = size[(unsigned char)to[d]];
  EinsumParams *p = shape_alloc(sizeof *p);
  p->fwd = einsum_form(n, to, ta, tb, size);
  p->da = einsum_form(n, ta, to, tb, size);
  p->db = einsum_form(n, tb, to, ta, size);
  shape_set_out(g, n, 0, DT_FLOAT, lo, dims);
  n->op = OP_EINSUM;
  n->p = p;
}

/* ---- Expand: numpy broadcasting to a constant shape ---- */

void shape_broadcast(Graph *g, Node *n) {
  Tensor *x = shape_in_float(g, n, 0, -1);
  int64_t shape[MAX_RANK], dims[MAX_RANK];
  int ns = const_ints(g, n, 1, shape, MAX_RANK);
  shape_batch_leading(g, n, shape, ns);
  int r = ns > x->rank ? ns : x->rank;
  snrt_reduce_t *p = shape_alloc(sizeof *p);
  int64_t stride = 1;
  for (int i = r - 1; i >= 0; i--) {
    int ix = i - (r - x->rank), is = i - (r - ns);
    int64_t dx = ix >= 0 ? x->dims[ix] : 1, ds = is >= 0 ? shape[is] : 1;
    if (dx != ds && dx != 1 && ds != 1)
      node_error(n, "%s does not broadcast to the shape given", shape_str(x));
    dims[i] = dx == 1 ? ds : dx;
    p->dims[i] = dims[i];
    p->ss[i] = dx == 1 ? 0 : stride;
    stride *= dx;
  }
  p->rank = r;
  shape_set_out(g, n, 0, DT_FLOAT, r, dims);
  p->n_big = tensor_numel(&g->t[n->out[0]]);
  p->n_small = tensor_numel(x);
  p->scale = 1.0f;
  n->p = p;
}
