/* fuse.c — fusion: a decomposed LayerNorm becomes one LAYERNORM node, and a
 * chain of elementwise ops one FUSED step, whose intermediates are never
 * stored.
 *
 * First, LayerNorm: PyTorch exports nn.LayerNorm below opset 17 as nine
 * nodes (ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul scale,
 * Add shift, over the last axis; fuse_layernorms has the exact pattern).
 * Where nothing else reads their intermediates they become one LAYERNORM
 * node (x, scale, shift; epsilon from the Add), named "<last>/layernorm":
 * the op an opset-17 export has, with its two kernels instead of nine steps
 * forward and a dozen backward. It computes the statistics in double
 * (runtime/cpu/k_seq.c), so its values differ from the nine float32 steps'
 * in rounding. Second, transposes: a Transpose swapping the last two axes
 * whose only reader is a MatMul (a Linear layer's weight as PyTorch
 * exports it) becomes the MatMul's trans flag (fold_transposes): no copy
 * forward, and autodiff writes the weight's gradient in its own layout, so
 * the transposed gradient's copy goes too. Third, a bias add after such a
 * product becomes the C of one GEMM node (fold_bias_adds), a constant
 * scalar Mul after a product its alpha (fold_scales), and a constant masked
 * fill (Where) before a Softmax the Softmax's mask (fold_masks). Then the
 * elementwise chains:
 *
 * Requires: a shape-inferred forward graph (nodes [0, nfwd) topologically
 * sorted, node->p set), before autodiff. Provides: the same graph with each
 * group of two or more fusable nodes replaced by one OP_FUSED node (params
 * snrt_fused_t) at the place of the group's last node, named after it
 * ("<last>/fusedN", N ops); the group's intermediate tensors lose their
 * producer and every reader (no step writes or reads them). Autodiff gives a
 * FUSED node one FUSED_BWD node (grad_fused); the planner, the cost model
 * and the emitter see the fused steps only.
 *
 * Fusable: Add, Sub, Mul, Div whose two operands are each either of the
 * output's shape or a float constant scalar (it becomes the op's immediate);
 * Relu, Sigmoid, Tanh, Neg, Reciprocal, Exp, Log, Sqrt, Erf, Pow (constant
 * exponent) on a float input of the output's shape. Not here: broadcast
 * operands other than constant scalars (a bias add, LayerNorm's mean), so
 * no fused step reduces anything; Min/Max, Clip, LeakyRelu, Where, Dropout,
 * the reductions, the optimizer updates.
 *
 * Groups grow backward from a sink (a fusable node whose output leaves the
 * group: read by a non-fusable node or by two groups, a graph output, or
 * unread): a fusable producer joins the group of its output's readers when
 * all of them are in that one group, its output is no graph output, and the
 * group stays within SNRT_FUSED_MAX_OPS ops and SNRT_FUSED_MAX_IN inputs.
 * So each group has one output, and no path leaves a group and comes back
 * (a member's output is read inside the group only): the fused node may
 * stand at the sink's place.
 *
 * --no-fuse (or --fuse none) skips the pass. --dump fuse (snc plan) prints
 * every group: its members, inputs and program.
 */
#include "front.h"

#include <stdlib.h>
#include <string.h>

/* One rewrite of the forward nodes [0, nf): the readers of each tensor as
 * they were when it began (CSR: rd[cnt[t]] to rd[cnt[t + 1] - 1], a node
 * once per slot), and the nodes it dropped (gone; removed by rewrite_end). */
typedef struct {
  int nf;
  int *cnt, *rd;
  bool *gone;
  int dropped;
} Rewrite;

static Rewrite rewrite_begin(const Graph *g) {
  Rewrite w = {.nf = g->nfwd ? g->nfwd : g->nn};
  w.cnt = xcalloc((size_t)g->nt + 1, sizeof *w.cnt);
  for (int i = 0; i < w.nf; i++)
    for (int k = 0; k < g->n[i].nin; k++)
      if (g->n[i].in[k] >= 0) w.cnt[g->n[i].in[k] + 1]++;
  for (int t = 0; t < g->nt; t++) w.cnt[t + 1] += w.cnt[t];
  w.rd = xmalloc(sizeof(int) * (size_t)(w.cnt[g->nt] ? w.cnt[g->nt] : 1));
  int *fill = xmalloc(sizeof(int) * (size_t)(g->nt ? g->nt : 1));
  memcpy(fill, w.cnt, sizeof(int) * (size_t)g->nt);
  for (int i = 0; i < w.nf; i++)
    for (int k = 0; k < g->n[i].nin; k++)
      if (g->n[i].in[k] >= 0) w.rd[fill[g->n[i].in[k]]++] = i;
  free(fill);
  w.gone = xcalloc((size_t)(w.nf ? w.nf : 1), sizeof *w.gone);
  return w;
}

/* Forgets node i: its output tensors lose their producer. */
static void drop_node(Graph *g, Rewrite *w, int i) {
  for (int k = 0; k < g->n[i].nout; k++)
    if (g->n[i].out[k] >= 0) g->t[g->n[i].out[k]].producer = -1;
  free(g->n[i].name);
  free(g->n[i].in);
  free(g->n[i].out);
  w->gone[i] = true;
  w->dropped++;
}

/* Node i becomes op (name taken over, inputs copied, params p); its
 * outputs stay. */
static void replace_node(Graph *g, int i, OpKind op, char *name, int nin, const int *in, void *p) {
  Node *n = &g->n[i];
  free(n->name);
  free(n->in);
  n->name = name;
  n->op = op;
  n->nin = nin;
  n->in = xmalloc(sizeof(int) * (size_t)(nin ? nin : 1));
  memcpy(n->in, in, sizeof(int) * (size_t)nin);
  n->nattr = 0;
  n->attrs = NULL;
  n->p = p;
  n->aux = 0;
  n->onnx_op = NULL;
}

/* Removes the dropped nodes and closes the gaps (producers follow their
 * nodes); frees the rewrite's tables. */
static void rewrite_end(Graph *g, Rewrite *w) {
  if (w->dropped) {
    int k = 0;
    for (int i = 0; i < g->nn; i++) {
      if (i < w->nf && w->gone[i]) continue;
      if (k != i) g->n[k] = g->n[i];
      for (int o = 0; o < g->n[k].nout; o++)
        if (g->n[k].out[o] >= 0) g->t[g->n[k].out[o]].producer = k;
      k++;
    }
    g->nn = k;
    if (g->nfwd) g->nfwd -= w->dropped;
  }
  free(w->cnt);
  free(w->rd);
  free(w->gone);
}

/* The fused op code of a node, or -1 when it is not fusable. */
static int fused_kind(const Graph *g, const Node *n) {
  if (n->nout != 1 || !n->p || g->t[n->out[0]].dtype != DT_FLOAT) return -1;
  switch (n->op) {
  case OP_ADD: return SNRT_F_ADD;
  case OP_SUB: return SNRT_F_SUB;
  case OP_MUL: return SNRT_F_MUL;
  case OP_DIV: return SNRT_F_DIV;
  case OP_RELU: case OP_SIGMOID: case OP_TANH: {
    const snrt_unary_t *p = n->p;
    return p->kind == SNRT_RELU ? SNRT_F_RELU : p->kind == SNRT_SIGMOID ? SNRT_F_SIGMOID
         : p->kind == SNRT_TANH ? SNRT_F_TANH : -1;
  }
  case OP_NEG: return SNRT_F_NEG;
  case OP_RECIPROCAL: return SNRT_F_RECIPROCAL;
  case OP_EXP: return SNRT_F_EXP;
  case OP_LOG: return SNRT_F_LOG;
  case OP_SQRT: return SNRT_F_SQRT;
  case OP_ERF: return SNRT_F_ERF;
  case OP_POW: return SNRT_F_POW;
  default: return -1;
  }
}

static bool same_shape(const Tensor *a, const Tensor *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* A float constant scalar (becomes an immediate). */
static bool const_scalar(const Tensor *t) {
  return t->kind == TK_CONST && t->data && t->dtype == DT_FLOAT && tensor_numel(t) == 1;
}

/* The node's data operands: 2 for the binary ops, 1 for the others (Pow's
 * exponent is in its params). */
static int operands(const Node *n) {
  return n->op == OP_ADD || n->op == OP_SUB || n->op == OP_MUL || n->op == OP_DIV ? 2 : 1;
}

/* Fusable, with every operand of the output's shape or a constant scalar
 * (the unary ops: of the output's shape). */
static bool fusable(const Graph *g, const Node *n) {
  if (fused_kind(g, n) < 0) return false;
  const Tensor *y = &g->t[n->out[0]];
  int no = operands(n);
  if (n->nin < no) return false;
  int scalars = 0;
  for (int k = 0; k < no; k++) {
    const Tensor *x = &g->t[n->in[k]];
    if (no == 1 && const_scalar(x)) return false;   /* (folded at compile time anyway) */
    if (no == 2 && const_scalar(x)) scalars++;
    else if (x->dtype != DT_FLOAT || !same_shape(x, y)) return false;
  }
  return scalars < no;
}

typedef struct {
  int sink;                   /* the node whose output leaves the group */
  int nops;
  int nin, in[SNRT_FUSED_MAX_IN];   /* external inputs (tensors) */
} Group;

/* Whether tensor t is among the group's inputs. */
static bool has_input(const Group *gr, int t) {
  for (int k = 0; k < gr->nin; k++)
    if (gr->in[k] == t) return true;
  return false;
}

/* The inputs the group would have if node n (producing one of its inputs)
 * joined: n's non-constant operands replace its output. False when they
 * would exceed SNRT_FUSED_MAX_IN. */
static bool join_inputs(const Graph *g, const Group *gr, const Node *n, Group *out) {
  *out = *gr;
  int k = 0;
  for (int i = 0; i < out->nin; i++)
    if (out->in[i] != n->out[0]) out->in[k++] = out->in[i];
  out->nin = k;
  for (int s = 0; s < operands(n); s++) {
    int t = n->in[s];
    if (const_scalar(&g->t[t]) || has_input(out, t)) continue;
    if (out->nin == SNRT_FUSED_MAX_IN) return false;
    out->in[out->nin++] = t;
  }
  out->nops++;
  return out->nops <= SNRT_FUSED_MAX_OPS;
}

/* Per register, the bit mask of the inputs it is computed from. */
static void reg_inputs(const snrt_fused_t *p, unsigned *m) {
  for (int k = 0; k < p->nin; k++) m[k] = 1u << k;
  for (int j = 0; j < p->nops; j++) {
    const snrt_fused_op_t *o = &p->ops[j];
    m[p->nin + j] = (o->a >= 0 ? m[o->a] : 0) | (o->b >= 0 ? m[o->b] : 0);
  }
}

static int popcount(unsigned m) { return __builtin_popcount(m); }

void fuse_backward_reads(snrt_fused_t *p) {
  enum { NREG = SNRT_FUSED_MAX_IN + SNRT_FUSED_MAX_OPS };
  bool dep[NREG] = {0}, read[NREG] = {0};
  for (int k = 0; k < p->nin; k++) dep[k] = p->need >> k & 1;
  for (int j = 0; j < p->nops; j++) {
    const snrt_fused_op_t *o = &p->ops[j];
    int y = p->nin + j;
    dep[y] = (o->a >= 0 && dep[o->a]) || (o->b >= 0 && dep[o->b]);
    if (!dep[y]) continue;
    bool na = o->a >= 0 && dep[o->a], nb = o->b >= 0 && dep[o->b];
    switch (o->op) {
    case SNRT_F_ADD: case SNRT_F_SUB: case SNRT_F_NEG:
      break;
    case SNRT_F_MUL:
      if (na && o->b >= 0) read[o->b] = true;
      if (nb && o->a >= 0) read[o->a] = true;
      break;
    case SNRT_F_DIV:   /* 1/b; -y/b */
      if ((na || nb) && o->b >= 0) read[o->b] = true;
      if (nb) read[y] = true;
      break;
    case SNRT_F_LOG: case SNRT_F_ERF: case SNRT_F_POW:
      read[o->a] = true;
      break;
    default:   /* Relu, Sigmoid, Tanh, Exp, Sqrt, Reciprocal: from their output */
      read[y] = true;
      break;
    }
  }
  int last = p->nin + p->nops - 1;
  unsigned all = 0, rest = 0, from[NREG] = {0};
  reg_inputs(p, from);
  for (int r = 0; r < NREG; r++)
    if (read[r]) {
      all |= from[r];
      if (r != last) rest |= from[r];
    }
  bool y = read[last] && popcount(rest) + 1 < popcount(all);
  p->have = (int)(y ? rest : all);
  p->use_y = y;
}

static const char *fused_names[] = {"add", "sub", "mul", "div", "neg", "relu", "sigmoid", "tanh",
                                    "exp", "log", "sqrt", "reciprocal", "erf", "pow"};

const char *fuse_op_name(int op) {
  return op >= 0 && op < (int)(sizeof fused_names / sizeof *fused_names) ? fused_names[op] : "?";
}

/* The program of a group: members in graph order, inputs numbered as in
 * gr->in. reg[t] maps a member's output tensor to its register. */
static snrt_fused_t *build_program(const Graph *g, const Group *gr, const int *members, int nm) {
  snrt_fused_t *p = xcalloc(1, sizeof *p);
  p->n = tensor_numel(&g->t[g->n[gr->sink].out[0]]);
  p->nin = gr->nin;
  p->nops = nm;
  for (int j = 0; j < nm; j++) {
    const Node *n = &g->n[members[j]];
    snrt_fused_op_t *o = &p->ops[j];
    o->op = (int8_t)fused_kind(g, n);
    o->a = o->b = -1;
    for (int s = 0; s < operands(n); s++) {
      int t = n->in[s], r = -1;
      for (int k = 0; k < gr->nin && r < 0; k++)
        if (gr->in[k] == t) r = k;
      for (int q = 0; q < j && r < 0; q++)
        if (g->n[members[q]].out[0] == t) r = gr->nin + q;
      if (r < 0) {
        snc_assert(const_scalar(&g->t[t]));
        o->imm = *(const float *)g->t[t].data;
      }
      if (s == 0) o->a = (int8_t)r;
      else o->b = (int8_t)r;
    }
    if (n->op == OP_POW) o->imm = ((const snrt_math_t *)n->p)->exponent;
  }
  return p;
}

static void dump_group(const Graph *g, const char *name, const Group *gr, const snrt_fused_t *p,
                       const int *members, FILE *out) {
  fprintf(out, "fused %s: %d ops, %d input%s, %lld elements\n", name, p->nops, p->nin,
          p->nin == 1 ? "" : "s", (long long)p->n);
  for (int k = 0; k < p->nin; k++) fprintf(out, "  r%d = %s\n", k, g->t[gr->in[k]].name);
  for (int j = 0; j < p->nops; j++) {
    const snrt_fused_op_t *o = &p->ops[j];
    char a[32], b[32];
    if (o->a >= 0) snprintf(a, sizeof a, "r%d", o->a);
    else snprintf(a, sizeof a, "%.9g", (double)o->imm);
    if (o->b >= 0) snprintf(b, sizeof b, "r%d", o->b);
    else snprintf(b, sizeof b, "%.9g", (double)o->imm);
    /* Binary ops and Pow (its exponent) have a second operand. */
    if (o->op <= SNRT_F_DIV || o->op == SNRT_F_POW)
      fprintf(out, "  r%d = %s(%s, %s)    <- %s\n", p->nin + j, fuse_op_name(o->op), a, b,
              g->n[members[j]].name);
    else
      fprintf(out, "  r%d = %s(%s)    <- %s\n", p->nin + j, fuse_op_name(o->op), a, g->n[members[j]].name);
  }
  fprintf(out, "  out = r%d -> %s\n", p->nin + p->nops - 1, g->t[g->n[gr->sink].out[0]].name);
}

/* ---- decomposed LayerNormalization -------------------------------------- */

/* The only reader of tensor t (an intermediate: no graph output), or -1;
 * -1 too where that reader is gone (the table predates the rewrite's
 * changes: a node it names may have been dropped). */
static int sole_reader(const Graph *g, const Rewrite *w, int t) {
  if (t < 0 || g->t[t].is_output || t == g->output || w->cnt[t + 1] - w->cnt[t] != 1) return -1;
  int r = w->rd[w->cnt[t]];
  return w->gone[r] ? -1 : r;
}

/* A ReduceMean of x over its last axis alone, keeping it (x's shape, last 1). */
static bool mean_last_axis(const Graph *g, const Node *n, int x) {
  if (n->op != OP_REDUCEMEAN || n->in[0] != x || !n->p) return false;
  const snrt_reduce_t *p = n->p;
  const Tensor *X = &g->t[x], *M = &g->t[n->out[0]];
  if (p->kind != SNRT_RED_SUM || X->rank < 1 || M->rank != X->rank || X->dims[X->rank - 1] < 2)
    return false;
  for (int d = 0; d < X->rank; d++)
    if (M->dims[d] != (d == X->rank - 1 ? 1 : X->dims[d])) return false;
  return p->rank >= 1 && p->ss[p->rank - 1] == 0 && p->n_small * X->dims[X->rank - 1] == p->n_big;
}

/* The binary op n with operand `t` on one side: the other operand, or -1. */
static int other_operand(const Node *n, OpKind op, int t, bool commutes) {
  if (n->op != op || n->nin != 2) return -1;
  if (n->in[0] == t) return n->in[1];
  if (commutes && n->in[1] == t) return n->in[0];
  return -1;
}

/* A float vector of C values (the affine scale or shift). */
static bool vector_of(const Graph *g, int t, int64_t c) {
  const Tensor *v = &g->t[t];
  return t >= 0 && v->dtype == DT_FLOAT && v->rank == 1 && v->dims[0] == c;
}

/* PyTorch exports nn.LayerNorm below opset 17 as
 *   m = ReduceMean(x), d = x - m, v = ReduceMean(d ^ 2), s = Sqrt(v + eps),
 *   y = d / s * scale + shift     (ReduceMean over the last axis)
 * Each such chain whose intermediates nothing else reads becomes one
 * LAYERNORM node (x, scale, shift): two steps of work forward, one backward,
 * where the chain takes nine and twelve. Returns how many. */
static int fuse_layernorms(Graph *g, FILE *dump) {
  Rewrite w = rewrite_begin(g);
  const bool *gone = w.gone;
  int found = 0;
  for (int i = 0; i < w.nf; i++) {
    Node *sub = &g->n[i];
    if (gone[i] || sub->op != OP_SUB || sub->nin != 2) continue;
    int x = sub->in[0], mt = sub->in[1], d = sub->out[0];
    const Tensor *X = &g->t[x];
    int mi = g->t[mt].producer;
    if (mi < 0 || mi >= w.nf || gone[mi] || !mean_last_axis(g, &g->n[mi], x) || sole_reader(g, &w, mt) != i)
      continue;
    /* d's two readers: Pow(d, 2) and Div(d, s). */
    if (d == g->output || g->t[d].is_output || w.cnt[d + 1] - w.cnt[d] != 2) continue;
    int pw = -1, dv = -1;
    for (int r = w.cnt[d]; r < w.cnt[d + 1]; r++) {
      if (gone[w.rd[r]]) continue;
      const Node *c = &g->n[w.rd[r]];
      if (c->op == OP_POW && c->in[0] == d && ((const snrt_math_t *)c->p)->exponent == 2.0f) pw = w.rd[r];
      else if (c->op == OP_DIV && c->in[0] == d) dv = w.rd[r];
    }
    if (pw < 0 || dv < 0) continue;
    int vm = sole_reader(g, &w, g->n[pw].out[0]);
    if (vm < 0 || !mean_last_axis(g, &g->n[vm], g->n[pw].out[0])) continue;
    int ad = sole_reader(g, &w, g->n[vm].out[0]);
    int eps_t = ad >= 0 ? other_operand(&g->n[ad], OP_ADD, g->n[vm].out[0], true) : -1;
    if (eps_t < 0 || !const_scalar(&g->t[eps_t])) continue;
    int sq = sole_reader(g, &w, g->n[ad].out[0]);
    if (sq < 0 || g->n[sq].op != OP_SQRT || sole_reader(g, &w, g->n[sq].out[0]) != dv ||
        g->n[dv].in[1] != g->n[sq].out[0])
      continue;
    /* The affine part: * scale, then + shift (either may be absent after
     * the scale; a LayerNorm without a scale stays as it is). */
    int64_t C = X->dims[X->rank - 1];
    int mu = sole_reader(g, &w, g->n[dv].out[0]);   /* dv: not gone (a reader of d) */
    int scale = mu >= 0 ? other_operand(&g->n[mu], OP_MUL, g->n[dv].out[0], true) : -1;
    if (!vector_of(g, scale, C)) continue;
    int last = mu, shift = -1;
    int ab = sole_reader(g, &w, g->n[mu].out[0]);
    int sh = ab >= 0 ? other_operand(&g->n[ab], OP_ADD, g->n[mu].out[0], true) : -1;
    if (vector_of(g, sh, C)) last = ab, shift = sh;
    int members[] = {mi, i, pw, vm, ad, sq, dv, mu, ab};
    int nm = last == ab ? 9 : 8;
    snrt_ln_t *p = xcalloc(1, sizeof *p);
    p->cols = C;
    p->rows = tensor_numel(X) / C;
    p->eps = *(const float *)g->t[eps_t].data;
    Node *L = &g->n[last];
    if (dump)
      fprintf(dump, "layernorm %s: %d nodes (%s .. %s) over the last %lld of %s, eps %g\n", L->name, nm,
              g->n[mi].name, L->name, (long long)C, shape_str(X), (double)p->eps);
    for (int j = 0; j < nm; j++)
      if (members[j] != last) drop_node(g, &w, members[j]);
    replace_node(g, last, OP_LAYERNORM, xasprintf("%s/layernorm", g->n[last].name), shift >= 0 ? 3 : 2,
                 (int[]){x, scale, shift}, p);
    found++;
  }
  rewrite_end(g, &w);
  return found;
}

/* ---- transposes into the matrix product ------------------------------- */

/* A Transpose that swaps the last two axes and keeps the others. */
static bool swaps_last_two(const Node *n) {
  if (n->op != OP_TRANSPOSE || !n->p) return false;
  const snrt_transpose_t *p = n->p;
  int r = p->rank;
  if (r < 2) return false;
  for (int d = 0; d < r - 2; d++)
    if (p->perm[d] != d) return false;
  return p->perm[r - 2] == r - 1 && p->perm[r - 1] == r - 2;
}

/* MatMul(a, Transpose(w)) with the Transpose swapping the last two axes
 * (a Linear layer's weight as PyTorch exports it, k^T of attention) reads w
 * with trans_b set, and likewise for a: no copy forward, none for the
 * gradient backward (autodiff's grad_matmul writes the gradient of w in w's
 * layout). Only where the MatMul is the transposed tensor's sole reader.
 * Returns how many. */
static int fold_transposes(Graph *g, FILE *dump) {
  Rewrite w = rewrite_begin(g);
  for (int i = 0; i < w.nf; i++) {
    Node *n = &g->n[i];
    if (n->op != OP_MATMUL || !n->p || n->nin != 2) continue;
    snrt_mm_t *p = n->p;
    for (int s = 0; s < 2; s++) {
      int t = n->in[s], tp = t >= 0 ? g->t[t].producer : -1;
      int *trans = s == 0 ? &p->trans_a : &p->trans_b;
      if (*trans || tp < 0 || tp >= w.nf || w.gone[tp] || !swaps_last_two(&g->n[tp]) ||
          sole_reader(g, &w, t) != i)
        continue;
      /* (grad_matmul sums a shared B's gradient over the batch as one
       * product of A's rows: A must not be transposed there.) */
      if (s == 0 && p->stride_b == 0 && p->batch > 1) continue;
      if (dump)
        fprintf(dump, "transpose %s: into %s as trans_%c\n", g->n[tp].name, n->name, s ? 'b' : 'a');
      n->in[s] = g->n[tp].in[0];
      *trans = 1;
      drop_node(g, &w, tp);
    }
  }
  int folded = w.dropped;
  rewrite_end(g, &w);
  return folded;
}

/* ---- constant scales into the matrix product --------------------------- */

/* Mul(MatMul(a, b), c) with c a float constant scalar (attention's
 * 1/sqrt(d) after Q K^T), where the product's output is read by that Mul
 * alone: one MatMul with alpha = c (the product scaled as it is written).
 * One pass over the scores less forward, and one less backward
 * (grad_matmul scales its products by alpha). Returns how many. */
static int fold_scales(Graph *g, FILE *dump) {
  Rewrite w = rewrite_begin(g);
  for (int i = 0; i < w.nf; i++) {
    Node *mmn = &g->n[i];
    if (w.gone[i] || mmn->op != OP_MATMUL || !mmn->p || mmn->nin != 2) continue;
    int y = mmn->out[0], mi = sole_reader(g, &w, y);
    if (mi < 0 || g->n[mi].op != OP_MUL) continue;
    int c = other_operand(&g->n[mi], OP_MUL, y, true);
    if (c < 0 || c == y || !const_scalar(&g->t[c]) ||
        !same_shape(&g->t[g->n[mi].out[0]], &g->t[y]) || g->t[g->n[mi].out[0]].dtype != DT_FLOAT)
      continue;
    snrt_mm_t *p = xmalloc(sizeof *p);
    *p = *(const snrt_mm_t *)mmn->p;
    p->alpha *= ((const float *)g->t[c].data)[0];
    if (dump) fprintf(dump, "scale %s: into %s as alpha %g\n", g->n[mi].name, mmn->name, p->alpha);
    replace_node(g, mi, OP_MATMUL, xasprintf("%s*scale", mmn->name), 2,
                 (int[]){mmn->in[0], mmn->in[1]}, p);
    drop_node(g, &w, i);
  }
  int folded = w.dropped;
  rewrite_end(g, &w);
  return folded;
}

/* ---- masks into the softmax -------------------------------------------- */

/* Where(mask, x, value) with a constant mask and value (OP_WHERE, a masked
 * fill: a causal attention mask) read only by a Softmax over the last axis,
 * the mask repeating per whole rows: the Softmax reads x and the mask itself
 * (snrt_softmax_t.fill), so the filled copy is never stored, forward or
 * rebuilt, and its gradient is the softmax's with the masked places 0.
 * Returns how many. */
static int fold_masks(Graph *g, FILE *dump) {
  Rewrite w = rewrite_begin(g);
  for (int i = 0; i < w.nf; i++) {
    Node *wn = &g->n[i];
    if (w.gone[i] || wn->op != OP_WHERE || !wn->p || wn->aux < 0 || wn->aux >= wn->nin) continue;
    const snrt_where_t *wp = wn->p;
    int x = wn->in[wn->aux], y = wn->out[0], si = sole_reader(g, &w, y);
    if (x < 0 || si < 0 || g->n[si].op != OP_SOFTMAX || !g->n[si].p || g->n[si].in[0] != y ||
        g->t[x].dtype != DT_FLOAT || !same_shape(&g->t[x], &g->t[y]))
      continue;
    const snrt_softmax_t *sp = g->n[si].p;
    if (sp->inner != 1 || sp->fill || sp->len < 1 || wp->inner % sp->len || wp->n != sp->outer * sp->len)
      continue;
    snrt_softmax_t *p = xmalloc(sizeof *p);
    *p = *sp;
    p->fill = wp->fill, p->fill_n = wp->inner, p->value = wp->value;
    if (dump) fprintf(dump, "mask %s: into %s\n", wn->name, g->n[si].name);
    int aux = g->n[si].aux;
    replace_node(g, si, OP_SOFTMAX, xstrdup(g->n[si].name), 1, (int[]){x}, p);
    g->n[si].aux = aux;
    drop_node(g, &w, i);
  }
  int folded = w.dropped;
  rewrite_end(g, &w);
  return folded;
}

/* ---- bias adds into the matrix product -------------------------------- */

/* MatMul(x, w) + b, with w a matrix shared by the batch (stride 0: a
 * Linear layer's weight, transposed or not), x's items contiguous, and b a
 * float vector of the output's last dimension, where the product's output
 * is read by that Add alone: one GEMM node (x, w, b), its
 * batch flattened into the rows (y = x w + b over batch x m rows). The
 * bias is added by the GEMM's step (snrt_bias_fwd) and its gradient is
 * BIAS_BWD's reduction of dy: no separate Add step forward, and backward no
 * copy of dy into the product's gradient. Returns how many. */
static int fold_bias_adds(Graph *g, FILE *dump) {
  Rewrite w = rewrite_begin(g);
  for (int i = 0; i < w.nf; i++) {
    Node *mmn = &g->n[i];
    if (w.gone[i] || mmn->op != OP_MATMUL || !mmn->p || mmn->nin != 2) continue;
    const snrt_mm_t *p = mmn->p;
    if (p->stride_b != 0 || p->trans_a || (p->batch > 1 && (p->stride_a != p->m * p->k ||
                                                            p->stride_y != p->m * p->n)))
      continue;
    int y = mmn->out[0], ai = sole_reader(g, &w, y);
    if (ai < 0 || g->n[ai].op != OP_ADD || g->n[ai].nin != 2) continue;
    int b = other_operand(&g->n[ai], OP_ADD, y, true);
    if (b < 0 || b == y || !vector_of(g, b, p->n) || !same_shape(&g->t[g->n[ai].out[0]], &g->t[y]))
      continue;
    GemmParams *gp = xcalloc(1, sizeof *gp);
    gp->mm = *p;
    gp->mm.m = p->batch * p->m;
    gp->mm.batch = 1;
    gp->mm.stride_a = gp->mm.m * p->k;
    gp->mm.stride_b = p->k * p->n;
    gp->mm.stride_y = gp->mm.m * p->n;
    gp->bias = (snrt_bias_t){.rows = gp->mm.m, .cols = p->n, .kind = SNRT_BIAS_ROW, .scale = 1.0f};
    gp->has_c = true;
    if (dump) fprintf(dump, "bias %s: into %s as a GEMM with C\n", g->n[ai].name, mmn->name);
    replace_node(g, ai, OP_GEMM, xasprintf("%s+bias", mmn->name), 3,
                 (int[]){mmn->in[0], mmn->in[1], b}, gp);
    drop_node(g, &w, i);
  }
  int folded = w.dropped;
  rewrite_end(g, &w);
  return folded;
}

/* ---- elementwise chains ------------------------------------------------- */

void fuse_elementwise(Graph *g, bool on, FILE *dump) {
  int nf = g->nfwd ? g->nfwd : g->nn;
  if (!on || nf == 0) {
    if (dump) fprintf(dump, "fuse: %s\n", on ? "no nodes" : "off (--no-fuse)");
    return;
  }
  int nln = fuse_layernorms(g, dump);
  int ntr = fold_transposes(g, dump);
  int nscale = fold_scales(g, dump);
  int nmask = fold_masks(g, dump);
  int nbias = fold_bias_adds(g, dump);
  Rewrite w = rewrite_begin(g);
  nf = w.nf;
  const int *cnt = w.cnt, *rd = w.rd;

  /* Backward over the nodes: each fusable node starts a group or joins the
   * one group all its readers are in. */
  int *grp = xmalloc(sizeof(int) * (size_t)nf);
  Group *gs = NULL;
  int ng = 0, capg = 0;
  for (int i = nf - 1; i >= 0; i--) {
    grp[i] = -1;
    const Node *n = &g->n[i];
    if (!fusable(g, n)) continue;
    int y = n->out[0], G = -1;
    bool joins = !g->t[y].is_output && y != g->output && cnt[y + 1] > cnt[y];
    for (int r = cnt[y]; joins && r < cnt[y + 1]; r++) {
      int c = rd[r];
      if (grp[c] < 0 || (G >= 0 && grp[c] != G)) joins = false;
      else G = grp[c];
    }
    Group next;
    if (joins && join_inputs(g, &gs[G], n, &next)) {
      gs[G] = next;
      grp[i] = G;
      continue;
    }
    xgrow((void **)&gs, &capg, ng + 1, sizeof *gs);
    Group *ngp = &gs[ng];
    memset(ngp, 0, sizeof *ngp);
    ngp->sink = i;
    ngp->nops = 1;
    for (int s = 0; s < operands(n); s++)
      if (!const_scalar(&g->t[n->in[s]]) && !has_input(ngp, n->in[s])) ngp->in[ngp->nin++] = n->in[s];
    grp[i] = ng++;
  }

  /* Each group of two or more: its sink becomes the FUSED node. */
  int *members = xmalloc(sizeof(int) * SNRT_FUSED_MAX_OPS);
  int nfused = 0;
  for (int G = ng - 1; G >= 0; G--) {   /* made last to first: graph order */
    Group *gr = &gs[G];
    if (gr->nops < 2) continue;
    int nm = 0;
    for (int i = 0; i <= gr->sink; i++)
      if (grp[i] == G) members[nm++] = i;
    snc_assert(nm == gr->nops);
    snrt_fused_t *p = build_program(g, gr, members, nm);
    char *name = xasprintf("%s/fused%d", g->n[gr->sink].name, nm);
    if (dump) dump_group(g, name, gr, p, members, dump);
    for (int j = 0; j < nm - 1; j++) drop_node(g, &w, members[j]);
    replace_node(g, gr->sink, OP_FUSED, name, gr->nin, gr->in, p);
    nfused++;
  }
  int nremoved = w.dropped;
  rewrite_end(g, &w);
  if (dump)
    fprintf(dump, "fuse: %d decomposed LayerNorm%s into LAYERNORM; %d Transpose%s into MatMul; "
            "%d scale%s into MatMul; %d mask%s into Softmax; %d bias add%s into GEMM; %d group%s, "
            "%d nodes into %d steps\n",
            nln, nln == 1 ? "" : "s", ntr, ntr == 1 ? "" : "s", nscale, nscale == 1 ? "" : "s",
            nmask, nmask == 1 ? "" : "s", nbias, nbias == 1 ? "" : "s", nfused, nfused == 1 ? "" : "s", nremoved + nfused, nfused);
  free(members);
  free(gs);
  free(grp);
}
