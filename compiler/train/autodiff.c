/* autodiff.c — the training graph: loss, backward nodes, optimizer updates,
 * and the eval graph. With --dist the updates wait for the gradients'
 * all-reduce (dist_buckets.c), with --precision fp16 for the unscaling of
 * the gradients (loss_scale.c).
 *
 * Requires: a shape-inferred forward graph (nodes [0, nfwd), topologically
 * sorted, every node->p set). Maintains: g->n in route order —
 *   forward (PH_FORWARD) | loss (PH_LOSS) | backward and updates interleaved
 *   (PH_BACKWARD, PH_UPDATE) | eval (PH_EVAL)
 * Each parameter's update is appended right after the backward node that makes
 * its gradient final, so a gradient dies as early as possible.
 *
 * Gradients: the builder of a node (grad_* in the op table) reads the gradient
 * of its outputs (Tensor.grad) and produces one contribution per input that
 * needs a gradient; grad_add() accumulates contributions of a tensor read by
 * several nodes with ACCUMULATE nodes, in backward order (deterministic).
 * Only tensors that depend on a parameter need gradients; the data input
 * never gets one.
 */
#include "autodiff_internal.h"

#include <stdlib.h>
#include <string.h>

/* Pass state (the grad_* builders share the op table's (Graph*, int) signature). */
static bool *needs;        /* per tensor: a gradient must flow into it */
static int *pending;       /* per parameter tensor: forward reads not yet differentiated */
const TrainOpts *train_opts;   /* the pass's options (autodiff_internal.h) */

/* ---- small builders ---- */

static void *dup_params(const void *p, size_t n) { return memcpy(xmalloc(n), p, n); }

/* Per base name, the suffix to try next (a hint: the graph decides). Without
 * it, a tensor read by n nodes (n gradient pieces "x.grad.1"...) costs n^2
 * name lookups: minutes for a Concat of 60,000 inputs. Open addressing,
 * keys owned here; reset at the start of train_build, freed at its end. */
static struct { char **key; int *next; int cap, used; } hints;

static int *hint_slot(const char *base) {
  if (2 * (hints.used + 1) > hints.cap) {
    char **ok = hints.key;
    int *on = hints.next, oc = hints.cap;
    hints.cap = oc ? 2 * oc : 256;
    hints.key = xcalloc((size_t)hints.cap, sizeof *hints.key);
    hints.next = xcalloc((size_t)hints.cap, sizeof *hints.next);
    hints.used = 0;
    for (int i = 0; i < oc; i++)
      if (ok[i]) {
        int *sl = hint_slot(ok[i]);
        *sl = on[i];
        free(ok[i]);
      }
    free(ok);
    free(on);
  }
  size_t m = (size_t)hints.cap - 1, h = (size_t)hash_bytes(0, base, strlen(base)) & m;
  while (hints.key[h] && strcmp(hints.key[h], base)) h = (h + 1) & m;
  if (!hints.key[h]) hints.key[h] = xstrdup(base), hints.next[h] = 1, hints.used++;
  return &hints.next[h];
}

static void hints_free(void) {
  for (int i = 0; i < hints.cap; i++) free(hints.key[i]);
  free(hints.key);
  free(hints.next);
  memset(&hints, 0, sizeof hints);
}

/* A fresh tensor name: base, or base.1, base.2... */
static char *unique_name(const Graph *g, const char *base) {
  if (graph_find_tensor(g, base) < 0) return xstrdup(base);
  int *next = hint_slot(base);
  for (int i = *next;; i++) {
    char *s = xasprintf("%s.%d", base, i);
    if (graph_find_tensor(g, s) < 0) {
      *next = i + 1;
      return s;
    }
    free(s);
  }
}

int train_new_tensor(Graph *g, const char *base, TensorKind k, int dtype, int rank,
                     const int64_t *dims) {
  /* dims may point into g->t, which adding a tensor can move: copy first. */
  int64_t d[MAX_RANK];
  snc_assert(rank >= 0 && rank <= MAX_RANK);
  memcpy(d, dims, sizeof(int64_t) * (size_t)rank);
  char *name = unique_name(g, base);
  int t = graph_add_tensor(g, name, dtype, k);
  free(name);
  tensor_set_shape(&g->t[t], rank, d);
  return t;
}

static int tensor_like(Graph *g, int like, const char *suffix, TensorKind k) {
  char *base = xasprintf("%s%s", g->t[like].name, suffix);
  int64_t dims[MAX_RANK];   /* copied: adding a tensor may move g->t */
  memcpy(dims, g->t[like].dims, sizeof dims);
  int t = train_new_tensor(g, base, k, DT_FLOAT, g->t[like].rank, dims);
  free(base);
  return t;
}

int train_add_node(Graph *g, OpKind op, int fwd, const char *suffix, Phase ph, int nin,
                   const int *in, int nout, const int *out, void *p) {
  char *name = fwd >= 0 ? xasprintf("%s/%s", g->n[fwd].name, suffix) : xstrdup(suffix);
  int i = graph_add_node(g, op, name, nin, in, nout, out);
  free(name);
  Node *n = &g->n[i];
  n->phase = ph;
  n->fwd = fwd;
  n->p = p;
  for (int k = 0; k < nout; k++) g->t[out[k]].producer = i;
  return i;
}

/* A tensor to receive one gradient contribution for x. */
static int grad_slot(Graph *g, int x) {
  return tensor_like(g, x, ".grad", g->t[x].kind == TK_PARAM ? TK_PGRAD : TK_GRAD);
}

/* Adds contribution t to x's gradient (accumulating when x already has one).
 * Accumulation is in place (g = g + t, elementwise, so reading and writing
 * the same bytes is safe): a tensor read by several nodes keeps one gradient
 * buffer instead of one per partial sum. */
static void grad_add(Graph *g, int x, int t, int fwd) {
  g->t[t].grad_of = x;
  if (g->t[x].grad < 0) {
    g->t[x].grad = t;
    return;
  }
  int sum = g->t[x].grad;
  int in[2] = {sum, t};
  int a = train_add_node(g, OP_ACCUMULATE, fwd, "accumulate", PH_BACKWARD, 2, in, 1, &sum, NULL);
  (void)a;
}

static bool shape_has_bias(const Node *n) { return n->nin > 2 && n->in[2] >= 0; }
static bool need(const Node *n, int k) { return k < n->nin && n->in[k] >= 0 && needs[n->in[k]]; }
static int dy(const Graph *g, const Node *n, int k) { return g->t[n->out[k]].grad; }

/* One backward node computing a single input's gradient from `nin` inputs. */
static void bwd1(Graph *g, int node, OpKind op, const char *suffix, int x, int nin,
                 const int *in, void *p) {
  int dx = grad_slot(g, x);
  train_add_node(g, op, node, suffix, PH_BACKWARD, nin, in, 1, &dx, p);
  grad_add(g, x, dx, node);
}

/* ---- gradient builders (op table column `grad`) ---- */

void grad_conv(Graph *g, int node) {
  Node n = g->n[node];
  int d = dy(g, &n, 0);
  /* Filter gradient first: it is the last reader of x, so x can die before dx
   * is allocated (one activation less at the step's peak). */
  if (need(&n, 1)) bwd1(g, node, OP_CONV_BWD_FILTER, "bwd_filter", n.in[1], 2, (int[]){n.in[0], d}, n.p);
  if (need(&n, 0)) bwd1(g, node, OP_CONV_BWD_DATA, "bwd_data", n.in[0], 2, (int[]){d, n.in[1]}, n.p);
  if (need(&n, 2)) bwd1(g, node, OP_CONV_BWD_BIAS, "bwd_bias", n.in[2], 1, &d, n.p);
}

void grad_batchnorm(Graph *g, int node) {
  Node n = g->n[node];
  /* BN_BWD writes dx, dscale, dbias together; unneeded ones are dead outputs. */
  int out[3];
  for (int k = 0; k < 3; k++) out[k] = grad_slot(g, n.in[k]);
  int in[5] = {n.in[0], dy(g, &n, 0), n.in[1], n.out[1], n.out[2]};
  train_add_node(g, OP_BN_BWD, node, "bwd", PH_BACKWARD, 5, in, 3, out, n.p);
  for (int k = 0; k < 3; k++)
    if (need(&n, k)) grad_add(g, n.in[k], out[k], node);
}

void grad_unary(Graph *g, int node) {
  Node n = g->n[node];
  if (!need(&n, 0)) return;
  /* Relu, Sigmoid and Tanh differentiate from their output, LeakyRelu and Clip
   * from their input (aux says which, for the emitter). */
  bool from_y = n.op == OP_RELU || n.op == OP_SIGMOID || n.op == OP_TANH;
  int in[2] = {from_y ? n.out[0] : n.in[0], dy(g, &n, 0)};
  int dx = grad_slot(g, n.in[0]);
  int b = train_add_node(g, OP_UNARY_BWD, node, "bwd", PH_BACKWARD, 2, in, 1, &dx, n.p);
  g->n[b].aux = from_y;
  grad_add(g, n.in[0], dx, node);
}

void grad_maxpool(Graph *g, int node) {
  Node n = g->n[node];
  if (need(&n, 0)) bwd1(g, node, OP_MAXPOOL_BWD, "bwd", n.in[0], 2, (int[]){n.in[0], dy(g, &n, 0)}, n.p);
}

void grad_avgpool(Graph *g, int node) {
  Node n = g->n[node];
  if (need(&n, 0)) bwd1(g, node, OP_AVGPOOL_BWD, "bwd", n.in[0], 1, (int[]){dy(g, &n, 0)}, n.p);
}

void grad_lrn(Graph *g, int node) {
  Node n = g->n[node];
  if (need(&n, 0))
    bwd1(g, node, OP_LRN_BWD, "bwd", n.in[0], 3, (int[]){n.in[0], n.out[0], dy(g, &n, 0)}, n.p);
}

/* Flatten, Reshape, Identity: the gradient is the same bytes, reshaped. */
void grad_reshape(Graph *g, int node) {
  Node n = g->n[node];
  if (need(&n, 0)) bwd1(g, node, OP_IDENTITY, "bwd", n.in[0], 1, (int[]){dy(g, &n, 0)}, NULL);
}

static void mm_node(Graph *g, int node, const char *suffix, int x, int a, int b,
                    snrt_mm_t mm) {
  bwd1(g, node, OP_MATMUL_RAW, suffix, x, 2, (int[]){a, b}, dup_params(&mm, sizeof mm));
}

/* Where B is a parameter and A is not, B's gradient (which reads A) goes
 * first: it is A's last reader, so A can die before dA is allocated (one
 * activation less at the pair's peak, as in grad_conv). Otherwise dA first. */
static bool weight_grad_first(const Graph *g, const Node *n) {
  return need(n, 0) && need(n, 1) && g->t[n->in[1]].kind == TK_PARAM &&
         g->t[n->in[0]].kind != TK_PARAM;
}

/* Y = alpha op(A) op(B) + beta C, with op(A) (M, K) and op(B) (K, N):
 * operand k's gradient. */
static void gemm_grad(Graph *g, int node, int k) {
  Node n = g->n[node];
  const GemmParams *gp = n.p;
  int64_t M = gp->mm.m, N = gp->mm.n, K = gp->mm.k;
  int ta = gp->mm.trans_a, tb = gp->mm.trans_b, d = dy(g, &n, 0);
  snrt_mm_t mm = {.batch = 1, .alpha = gp->mm.alpha};
  if (k == 0) {
    if (!ta) {  /* dA (M, K) = dY op(B)^T */
      mm.m = M, mm.n = K, mm.k = N, mm.trans_a = 0, mm.trans_b = !tb;
      mm_node(g, node, "bwd_a", n.in[0], d, n.in[1], mm);
    } else {    /* dA (K, M) = op(B) dY^T */
      mm.m = K, mm.n = M, mm.k = N, mm.trans_a = tb, mm.trans_b = 1;
      mm_node(g, node, "bwd_a", n.in[0], n.in[1], d, mm);
    }
  } else if (!tb) {  /* dB (K, N) = op(A)^T dY */
    mm.m = K, mm.n = N, mm.k = M, mm.trans_a = !ta, mm.trans_b = 0;
    mm_node(g, node, "bwd_b", n.in[1], n.in[0], d, mm);
  } else {           /* dB (N, K) = dY^T op(A) */
    mm.m = N, mm.n = K, mm.k = M, mm.trans_a = 1, mm.trans_b = ta;
    mm_node(g, node, "bwd_b", n.in[1], d, n.in[0], mm);
  }
}

void grad_gemm(Graph *g, int node) {
  Node n = g->n[node];
  const GemmParams *gp = n.p;
  int first = weight_grad_first(g, &n), d = dy(g, &n, 0);
  for (int i = 0; i < 2; i++)
    if (need(&n, first ^ i)) gemm_grad(g, node, first ^ i);
  if (gp->has_c && need(&n, 2))
    bwd1(g, node, OP_BIAS_BWD, "bwd_c", n.in[2], 1, &d, dup_params(&gp->bias, sizeof gp->bias));
}

/* Batched Y[b] = A[b] B[b]: A (b, M, K), B (b, K, N) with batch stride 0 on a
 * broadcast operand. */
/* Y = op(A) op(B), op(A) (M, K), op(B) (K, N); an operand is stored
 * transposed where its trans flag is set (fuse.c folds a Transpose so). Each
 * gradient is written in its operand's stored layout:
 *   dA = dY op(B)^T, or stored (K, M): op(B) dY^T;
 *   dB = op(A)^T dY, or stored (N, K): dY^T op(A);
 * a B shared by the batch (stride 0, a weight) gets one product over all
 * rows of the batch (fuse.c folds no transposed A into such a product).
 * Operand k's gradient. */
static void matmul_grad(Graph *g, int node, int k) {
  Node n = g->n[node];
  const snrt_mm_t *p = n.p;
  int d = dy(g, &n, 0);
  int64_t M = p->m, N = p->n, K = p->k, B = p->batch;
  int ta = p->trans_a, tb = p->trans_b;
  if (k == 0) {
    if (p->stride_a == 0 && B > 1)
      node_error(&n, "the gradient of a MatMul whose first operand is broadcast over the batch is not supported");
    if (!ta)
      mm_node(g, node, "bwd_a", n.in[0], d, n.in[1],
              (snrt_mm_t){.batch = B, .m = M, .n = K, .k = N, .trans_b = !tb, .alpha = p->alpha,
                          .stride_a = M * N, .stride_b = p->stride_b, .stride_y = M * K});
    else
      mm_node(g, node, "bwd_a", n.in[0], n.in[1], d,
              (snrt_mm_t){.batch = B, .m = K, .n = M, .k = N, .trans_a = tb, .trans_b = 1, .alpha = p->alpha,
                          .stride_a = p->stride_b, .stride_b = M * N, .stride_y = M * K});
    return;
  }
  snrt_mm_t mm;
  if (p->stride_b == 0) {   /* B shared by the batch: one product over all rows */
    snc_assert(!ta || B == 1);
    mm = !tb ? (snrt_mm_t){.batch = 1, .m = K, .n = N, .k = B * M, .trans_a = !ta, .alpha = p->alpha}
             : (snrt_mm_t){.batch = 1, .m = N, .n = K, .k = B * M, .trans_a = 1, .trans_b = ta, .alpha = p->alpha};
  } else {
    /* (A's own batch stride: 0 where a constant A is shared by the batch) */
    mm = !tb ? (snrt_mm_t){.batch = B, .m = K, .n = N, .k = M, .trans_a = !ta, .alpha = p->alpha,
                           .stride_a = p->stride_a, .stride_b = M * N, .stride_y = K * N}
             : (snrt_mm_t){.batch = B, .m = N, .n = K, .k = M, .trans_a = 1, .trans_b = ta, .alpha = p->alpha,
                           .stride_a = M * N, .stride_b = p->stride_a, .stride_y = N * K};
  }
  if (!tb) mm_node(g, node, "bwd_b", n.in[1], n.in[0], d, mm);
  else mm_node(g, node, "bwd_b", n.in[1], d, n.in[0], mm);
}

void grad_matmul(Graph *g, int node) {
  Node n = g->n[node];
  int first = weight_grad_first(g, &n);
  for (int i = 0; i < 2; i++)
    if (need(&n, first ^ i)) matmul_grad(g, node, first ^ i);
}

void grad_binary(Graph *g, int node) {
  Node n = g->n[node];
  bool na = need(&n, 0), nb = need(&n, 1);
  if (!na && !nb) return;
  /* Only what the derivative reads: Add/Sub read neither operand, Mul reads the
   * other one, Div reads b (and a for db). */
  bool minmax = n.op == OP_MIN || n.op == OP_MAX;   /* which one was chosen: both */
  bool read_a = (n.op == OP_MUL && nb) || (n.op == OP_DIV && nb) || minmax;
  bool read_b = (n.op == OP_MUL && na) || n.op == OP_DIV || minmax;
  int in[3] = {read_a ? n.in[0] : -1, read_b ? n.in[1] : -1, dy(g, &n, 0)};
  int out[2], nout = 0;
  if (na) out[nout++] = grad_slot(g, n.in[0]);
  if (nb) out[nout++] = grad_slot(g, n.in[1]);
  int b = train_add_node(g, OP_BINARY_BWD, node, "bwd", PH_BACKWARD, 3, in, nout, out, n.p);
  g->n[b].aux = (na ? 1 : 0) | (nb ? 2 : 0);
  nout = 0;
  if (na) grad_add(g, n.in[0], out[nout++], node);
  if (nb) grad_add(g, n.in[1], out[nout++], node);
}

/* Concat's gradient is a split of dy (every part written; unneeded parts die). */
void grad_concat(Graph *g, int node) {
  Node n = g->n[node];
  int *out = xmalloc(sizeof(int) * (size_t)n.nin);
  for (int k = 0; k < n.nin; k++) out[k] = grad_slot(g, n.in[k]);
  int d = dy(g, &n, 0);
  train_add_node(g, OP_SPLIT, node, "bwd", PH_BACKWARD, 1, &d, n.nin, out, n.p);
  for (int k = 0; k < n.nin; k++)
    if (need(&n, k)) grad_add(g, n.in[k], out[k], node);
  free(out);
}

void grad_split(Graph *g, int node) {
  Node n = g->n[node];
  if (!need(&n, 0)) return;
  int *in = xmalloc(sizeof(int) * (size_t)n.nout);
  for (int k = 0; k < n.nout; k++) {
    in[k] = dy(g, &n, k);
    if (in[k] < 0)
      node_error(&n, "output %d ('%s') is unused; the gradient of a Split with an unused output is not supported",
                 k, g->t[n.out[k]].name);
  }
  bwd1(g, node, OP_CONCAT, "bwd", n.in[0], n.nout, in, n.p);
  free(in);
}

void grad_slice(Graph *g, int node) {
  Node n = g->n[node];
  if (need(&n, 0)) bwd1(g, node, OP_SLICE_BWD, "bwd", n.in[0], 1, (int[]){dy(g, &n, 0)}, n.p);
}

void grad_transpose(Graph *g, int node) {
  Node n = g->n[node];
  if (!need(&n, 0)) return;
  const snrt_transpose_t *p = n.p;
  snrt_transpose_t inv = {.rank = p->rank, .n = p->n};
  for (int i = 0; i < p->rank; i++) {
    inv.in_dims[i] = p->in_dims[p->perm[i]];   /* dy's dims */
    inv.perm[p->perm[i]] = i;
  }
  bwd1(g, node, OP_TRANSPOSE, "bwd", n.in[0], 1, (int[]){dy(g, &n, 0)}, dup_params(&inv, sizeof inv));
}

void grad_pad(Graph *g, int node) {
  Node n = g->n[node];
  if (need(&n, 0)) bwd1(g, node, OP_PAD_BWD, "bwd", n.in[0], 1, (int[]){dy(g, &n, 0)}, n.p);
}

void grad_dropout(Graph *g, int node) {
  Node n = g->n[node];
  if (need(&n, 0)) bwd1(g, node, OP_DROPOUT_BWD, "bwd", n.in[0], 1, (int[]){dy(g, &n, 0)}, n.p);
}

void grad_softmax(Graph *g, int node) {
  Node n = g->n[node];
  if (need(&n, 0))
    bwd1(g, node, OP_SOFTMAX_BWD, "bwd", n.in[0], 2, (int[]){n.out[0], dy(g, &n, 0)}, n.p);
}

void grad_reducemean(Graph *g, int node) {
  Node n = g->n[node];
  if (need(&n, 0)) bwd1(g, node, OP_EXPAND, "bwd", n.in[0], 1, (int[]){dy(g, &n, 0)}, n.p);
}

/* Where on data: da and db from the condition and dy (WHERE_DATA_BWD writes
 * the needed ones; aux bits 1: da, 2: db). */
void grad_where_data(Graph *g, int node) {
  Node n = g->n[node];
  bool na = need(&n, 1), nb = need(&n, 2);
  if (!na && !nb) return;
  int out[2], nout = 0;
  if (na) out[nout++] = grad_slot(g, n.in[1]);
  if (nb) out[nout++] = grad_slot(g, n.in[2]);
  int b = train_add_node(g, OP_WHERE_DATA_BWD, node, "bwd", PH_BACKWARD, 2, (int[]){n.in[0], dy(g, &n, 0)},
                   nout, out, n.p);
  g->n[b].aux = (na ? 1 : 0) | (nb ? 2 : 0);
  nout = 0;
  if (na) grad_add(g, n.in[1], out[nout++], node);
  if (nb) grad_add(g, n.in[2], out[nout++], node);
}

/* GatherElements: dx gathers dy by the precomputed inverse positions. */
void grad_take(Graph *g, int node) {
  Node n = g->n[node];
  if (need(&n, 0)) bwd1(g, node, OP_TAKE_BWD, "bwd", n.in[0], 1, (int[]){dy(g, &n, 0)}, n.p);
}

/* ReduceMax, ReduceL2: from x, y and dy. */
void grad_reduce_ex(Graph *g, int node) {
  Node n = g->n[node];
  if (need(&n, 0))
    bwd1(g, node, OP_REDUCE_BWD, "bwd", n.in[0], 3, (int[]){n.in[0], n.out[0], dy(g, &n, 0)}, n.p);
}

/* Einsum: dA = einsum(dy, B), dB = einsum(dy, A) (the forms shape_einsum made). */
void grad_einsum(Graph *g, int node) {
  Node n = g->n[node];
  EinsumParams *p = n.p;
  int d = dy(g, &n, 0);
  if (need(&n, 1)) bwd1(g, node, OP_EINSUM, "bwd_b", n.in[1], 2, (int[]){d, n.in[0]}, &p->db);
  if (need(&n, 0)) bwd1(g, node, OP_EINSUM, "bwd_a", n.in[0], 2, (int[]){d, n.in[1]}, &p->da);
}

/* ---- transformer ops ---- */

/* Sqrt, Reciprocal and Exp differentiate from their output, Neg from
 * neither, the others from their input (aux = 1: input 0 is y; 0: x; -1
 * absent). */
void grad_math(Graph *g, int node) {
  Node n = g->n[node];
  if (!need(&n, 0)) return;
  bool from_y = n.op == OP_SQRT || n.op == OP_RECIPROCAL || n.op == OP_EXP;
  int v = n.op == OP_NEG ? -1 : from_y ? n.out[0] : n.in[0];
  int dx = grad_slot(g, n.in[0]);
  int b = train_add_node(g, OP_MATH_BWD, node, "bwd", PH_BACKWARD, 2, (int[]){v, dy(g, &n, 0)}, 1, &dx, n.p);
  g->n[b].aux = from_y;
  grad_add(g, n.in[0], dx, node);
}

/* A fused chain's backward writes the gradient of each input that needs
 * one (params.need); it reads what fuse_backward_reads says: some inputs
 * (it recomputes the chain from them) and perhaps the output, then dy. */
void grad_fused(Graph *g, int node) {
  Node n = g->n[node];
  snrt_fused_t *p = dup_params(n.p, sizeof *p);
  int in[SNRT_FUSED_MAX_IN + 2], out[SNRT_FUSED_MAX_IN], nout = 0;
  p->need = 0;
  for (int k = 0; k < n.nin; k++)
    if (need(&n, k)) p->need |= 1 << k, out[nout++] = grad_slot(g, n.in[k]);
  if (!nout) {
    free(p);
    return;
  }
  fuse_backward_reads(p);
  for (int k = 0; k < n.nin; k++) in[k] = p->have >> k & 1 ? n.in[k] : -1;
  in[n.nin] = p->use_y ? n.out[0] : -1;
  in[n.nin + 1] = dy(g, &n, 0);
  train_add_node(g, OP_FUSED_BWD, node, "bwd", PH_BACKWARD, n.nin + 2, in, nout, out, p);
  for (int k = 0, w = 0; k < n.nin; k++)
    if (p->need >> k & 1) grad_add(g, n.in[k], out[w++], node);
}

/* LN_BWD writes dx, dscale (and dbias when there is one) together, from the
 * saved mean and 1/std; unneeded ones are dead outputs (as BN_BWD). */
void grad_layernorm(Graph *g, int node) {
  Node n = g->n[node];
  int nout = shape_has_bias(&n) ? 3 : 2, out[3];
  for (int k = 0; k < nout; k++) out[k] = grad_slot(g, n.in[k]);
  int in[5] = {n.in[0], dy(g, &n, 0), n.in[1], n.out[1], n.out[2]};
  train_add_node(g, OP_LN_BWD, node, "bwd", PH_BACKWARD, 5, in, nout, out, n.p);
  for (int k = 0; k < nout; k++)
    if (need(&n, k)) grad_add(g, n.in[k], out[k], node);
}

/* The table's gradient: a scatter-add of dy into a zeroed table (constant
 * indices are in the params; data indices are read again). A table read by
 * another node too (tied input and output embeddings) accumulates. */
void grad_gather(Graph *g, int node) {
  Node n = g->n[node];
  const snrt_gather_t *p = n.p;
  if (need(&n, 0))
    bwd1(g, node, OP_GATHER_BWD, "bwd", n.in[0], 2, (int[]){p->idx ? -1 : n.in[1], dy(g, &n, 0)}, n.p);
}

/* A masked fill passes dy where the data was kept: the same fill, value 0
 * (Trilu too: its data is input 0, aux 0). */
void grad_where(Graph *g, int node) {
  Node n = g->n[node];
  if (!need(&n, n.aux)) return;
  snrt_where_t *p = dup_params(n.p, sizeof *p);
  p->value = 0.0f;
  int dx = grad_slot(g, n.in[n.aux]);
  int b = train_add_node(g, OP_WHERE, node, "bwd", PH_BACKWARD, 3, (int[]){-1, dy(g, &n, 0), -1}, 1, &dx, p);
  g->n[b].aux = 1;
  grad_add(g, n.in[n.aux], dx, node);
}

/* Expand's gradient sums dy over the broadcast dimensions. */
void grad_broadcast(Graph *g, int node) {
  Node n = g->n[node];
  if (need(&n, 0)) bwd1(g, node, OP_REDUCE, "bwd", n.in[0], 1, (int[]){dy(g, &n, 0)}, n.p);
}

/* ---- the pass ---- */

/* Training-mode rewrites of forward nodes: BatchNormalization writes y and the
 * saved batch statistics (its ONNX running-stat outputs must be unused: the
 * runtime updates the running statistics in place); Dropout and MaxPool drop
 * their mask/indices outputs. */
static void rewrite_training_outputs(Graph *g) {
  int *readers = xcalloc((size_t)g->nt, sizeof(int));
  for (int i = 0; i < g->nfwd; i++)
    for (int k = 0; k < g->n[i].nin; k++)
      if (g->n[i].in[k] >= 0) readers[g->n[i].in[k]]++;
  for (int i = 0; i < g->nfwd; i++) {
    Node *n = &g->n[i];
    if (n->op != OP_BATCHNORM && n->op != OP_DROPOUT && n->op != OP_MAXPOOL &&
        n->op != OP_LAYERNORM) continue;
    for (int k = 1; k < n->nout; k++) {
      if (n->out[k] < 0) continue;   /* an absent optional output ("") */
      Tensor *t = &g->t[n->out[k]];
      if (readers[n->out[k]])
        node_error(n, "output %d ('%s') is read by another node; snc supports only output 0 of this op",
                   k, t->name);
      t->kind = TK_CONST;   /* an orphan: takes no memory, never emitted */
      t->producer = -1;
      t->is_output = false;
    }
    n->nout = 1;
    if (n->op == OP_BATCHNORM) {
      const snrt_bn_t *p = n->p;
      int64_t c = p->c;
      int sm = train_new_tensor(g, xasprintf("%s.saved_mean", n->name), TK_AUX, DT_FLOAT, 1, &c);
      int si = train_new_tensor(g, xasprintf("%s.saved_invstd", n->name), TK_AUX, DT_FLOAT, 1, &c);
      n = &g->n[i];
      n->out = xrealloc(n->out, 3 * sizeof(int));
      n->out[1] = sm, n->out[2] = si, n->nout = 3;
      g->t[sm].producer = g->t[si].producer = i;
    }
    if (n->op == OP_LAYERNORM) {   /* mean and 1/std per row, for backward */
      int64_t rows = ((const snrt_ln_t *)n->p)->rows;
      int sm = train_new_tensor(g, xasprintf("%s.saved_mean", n->name), TK_AUX, DT_FLOAT, 1, &rows);
      int si = train_new_tensor(g, xasprintf("%s.saved_rstd", n->name), TK_AUX, DT_FLOAT, 1, &rows);
      n = &g->n[i];
      n->out = xrealloc(n->out, 3 * sizeof(int));
      n->out[1] = sm, n->out[2] = si, n->nout = 3;
      g->t[sm].producer = g->t[si].producer = i;
    }
  }
  free(readers);
}

/* Chunk rows of the chunked loss: a sixteenth of the rows, so the chunk's
 * logits are a sixteenth of the whole (GPT-2 small at batch 8, T 1024: 512
 * rows, 103 MB of 1.65 GB). */
enum { LOSS_CHUNKS = 16 };

static void param_done(Graph *g, int t);
static bool absorbed_head;     /* the head's MatMul became the chunked loss */
static snrt_lmce_t head_lmce;  /* its chunks, for the eval copy */
static int head_in[2];         /* its h and W */
static char *head_name;        /* its node's name */

/* The chunked loss: the sequence loss's logits made by the last forward node,
 * a MatMul of the hidden state h (rows, k) by a weight W shared by every row
 * (the LM head, tied or not), float32. That node becomes LMHEAD_CE and
 * g->nfwd ends before it: chunk by chunk it computes the loss and, from the
 * same chunk's logits, h's and W's gradients (three products, as the head's
 * forward and backward; the gradients of the loss are known once it is: no
 * backward step needs the logits again). The eval pass runs the same
 * chunks without gradients (add_eval): per row its loss term and argmax,
 * which --eval reads; --predict and --generate have the runtime copy each
 * chunk's logits to the host (snrt_lmce). Returns false (nothing changed)
 * where the pattern does not hold. */
static bool chunk_loss(Graph *g) {
  int mi = g->nfwd - 1;
  const Tensor *y = &g->t[g->output];
  if (train_opts->no_chunk_loss || train_opts->precision != PREC_FP32 || y->rank != 3 || mi < 0 ||
      y->producer != mi || g->n[mi].op != OP_MATMUL)
    return false;
  const Node *m = &g->n[mi];
  const snrt_mm_t *p = m->p;
  bool rows = p->batch == 1 || (p->stride_b == 0 && p->stride_a == p->m * p->k &&
                                p->stride_y == p->m * p->n);
  int h = m->in[0], w = m->in[1];
  if (!rows || p->trans_a || p->beta != 0 || h < 0 || w < 0 || g->t[w].kind == TK_CONST ||
      p->n != y->dims[2] || y->dims[0] != g->batch || p->batch * p->m != y->dims[0] * y->dims[1])
    return false;
  for (int t = 0; t < g->nt; t++)
    if (g->t[t].is_output && t != g->output) return false;   /* --all-outputs */
  snrt_lmce_t *q = xcalloc(1, sizeof *q);
  int64_t n = p->batch * p->m;
  *q = (snrt_lmce_t){.n = n, .classes = p->n, .k = p->k, .chunk = (n + LOSS_CHUNKS - 1) / LOSS_CHUNKS,
                     .trans_b = p->trans_b, .alpha = p->alpha,
                     .need = (needs[h] ? 1 : 0) | (needs[w] ? 2 : 0)};
  head_lmce = *q;
  head_lmce.need = 0;
  head_in[0] = h, head_in[1] = w;
  absorbed_head = true;
  g->nfwd = mi;
  g->t[g->output].producer = -1;
  /* The loss node takes the MatMul's place in the route. */
  Node *l = &g->n[mi];
  free(l->in), free(l->out);
  head_name = l->name;   /* kept for the eval copy's name (the graph owns it) */
  l->name = xstrdup("loss");
  l->op = OP_LMHEAD_CE, l->phase = PH_LOSS, l->p = q, l->fwd = -1;
  int out[3] = {g->loss}, nout = 1;
  if (q->need & 1) out[nout++] = grad_slot(g, h);
  if (q->need & 2) out[nout++] = grad_slot(g, w);
  l->nin = 3, l->nout = nout;
  l->in = xmalloc(3 * sizeof(int)), l->out = xmalloc((size_t)nout * sizeof(int));
  l->in[0] = h, l->in[1] = w, l->in[2] = g->label;
  memcpy(l->out, out, (size_t)nout * sizeof(int));
  for (int k = 0; k < nout; k++) g->t[out[k]].producer = mi;
  nout = 1;
  if (q->need & 1) grad_add(g, h, out[nout++], -1);
  if (q->need & 2) grad_add(g, w, out[nout++], -1);
  if (g->t[w].kind == TK_PARAM && --pending[w] == 0) param_done(g, w);
  return true;
}

static void add_loss(Graph *g) {
  const Tensor *y = &g->t[g->output];
  if (y->dtype != DT_FLOAT) fatal(EXIT_BADINPUT, "the model output '%s' is %s; training needs float32",
                                  y->name, dtype_name(y->dtype));
  if (y->rank < 1 || y->dims[0] < 1 || tensor_numel(y) < 1)
    fatal(EXIT_BADINPUT, "the model output '%s' is %s; training needs a (batch, ...) output with "
          "at least one element per sample", y->name, shape_str(y));
  int64_t n = y->dims[0], numel = tensor_numel(y);
  if (numel / n > INT32_MAX || n > INT32_MAX)
    fatal(EXIT_BADINPUT, "the model output '%s' %s is too large for the loss", y->name, shape_str(y));
  snrt_loss_t *p = xcalloc(1, sizeof *p);
  p->n = (int)n;
  p->classes = (int)(numel / n);
  if (train_opts->loss == LOSS_SOFTMAX_CE) {
    /* (batch, classes), or a sequence (batch, T, vocab): one label per
     * position, the loss averaged over all batch x T positions. */
    if (y->rank != 2 && y->rank != 3)
      fatal(EXIT_BADINPUT, "softmax cross-entropy needs a (batch, classes) or (batch, T, vocab) "
            "model output; '%s' is %s", y->name, shape_str(y));
    int64_t ld[2] = {y->dims[0], y->rank == 3 ? y->dims[1] : 1};
    p->n = (int)(n * ld[1]);
    p->classes = (int)y->dims[y->rank - 1];
    if (numel / y->dims[y->rank - 1] > INT32_MAX)
      fatal(EXIT_BADINPUT, "the model output '%s' %s is too large for the loss", y->name, shape_str(y));
    g->label = train_new_tensor(g, "labels", TK_LABEL, DT_INT32, y->rank - 1, ld);
  } else {
    g->label = train_new_tensor(g, "targets", TK_LABEL, DT_FLOAT, y->rank, y->dims);
  }
  int64_t one = 1;
  g->loss = train_new_tensor(g, "loss", TK_LOSS, DT_FLOAT, 1, &one);
  bool ce = train_opts->loss == LOSS_SOFTMAX_CE;
  if (ce && chunk_loss(g)) {
    free(p);
    return;
  }
  int in[2] = {g->output, g->label};
  train_add_node(g, ce ? OP_SOFTMAX_CE : OP_MSE, -1, "loss", PH_LOSS, 2, in, 1, &g->loss, p);
  int dlogits = grad_slot(g, g->output);
  train_add_node(g, ce ? OP_SOFTMAX_CE_BWD : OP_MSE_BWD, -1, "loss/bwd", PH_BACKWARD, 2, in, 1,
           &dlogits, p);
  g->t[dlogits].grad_of = g->output;
  g->t[g->output].grad = dlogits;
}

/* Parameter t's gradient is final: its update (or its bucket's). */
static void param_done(Graph *g, int t) {
  if (train_opts->dist) bucket_add(g, t);
  else if (train_opts->precision == PREC_FP16) scaled_add(t);
  else train_add_update(g, t);
}

/* --zero 1: the shared optimizer-state shards (-1: none); add_update reads
 * and writes them instead of per-parameter state (set by dist_buckets.c). */
int train_zero_state[2] = {-1, -1};

void train_add_update(Graph *g, int w) {
  int gw = g->t[w].grad;
  if (gw < 0) return;   /* no gradient reaches it: PyTorch leaves it untouched too */
  g->t[gw].kind = TK_PGRAD;
  int64_t n = tensor_numel(&g->t[w]);
  if (train_opts->optim == OPTIM_SGD) {
    snrt_sgd_t *p = xcalloc(1, sizeof *p);
    *p = (snrt_sgd_t){.n = n, .momentum = train_opts->momentum, .weight_decay = train_opts->weight_decay,
                      .param = w};
    if (train_opts->momentum != 0) {
      int m = train_zero_state[0] >= 0 ? train_zero_state[0] : tensor_like(g, w, ".momentum", TK_OPT);
      g->t[m].init = SNRT_INIT_ZERO;
      train_add_node(g, OP_SGD, -1, xasprintf("%s/sgd", g->t[w].name), PH_UPDATE, 3,
               (int[]){w, gw, m}, 2, (int[]){w, m}, p);
    } else {
      train_add_node(g, OP_SGD, -1, xasprintf("%s/sgd", g->t[w].name), PH_UPDATE, 2,
               (int[]){w, gw}, 1, (int[]){w}, p);
    }
  } else {
    snrt_adam_t *p = xcalloc(1, sizeof *p);
    *p = (snrt_adam_t){.n = n, .beta1 = train_opts->beta1, .beta2 = train_opts->beta2, .eps = train_opts->eps,
                       .weight_decay = train_opts->weight_decay,
                       .decoupled = train_opts->optim == OPTIM_ADAMW, .param = w};
    int m = train_zero_state[0] >= 0 ? train_zero_state[0] : tensor_like(g, w, ".adam_m", TK_OPT);
    int v = train_zero_state[1] >= 0 ? train_zero_state[1] : tensor_like(g, w, ".adam_v", TK_OPT);
    g->t[m].init = g->t[v].init = SNRT_INIT_ZERO;
    train_add_node(g, OP_ADAM, -1, xasprintf("%s/adam", g->t[w].name), PH_UPDATE, 4,
             (int[]){w, gw, m, v}, 3, (int[]){w, m, v}, p);
  }
  /* Parameters are written in place: the update is their producer in the step. */
  g->t[w].producer = -1;
}

/* Forward with inference semantics: BN from running statistics, Dropout off.
 * Activations get their own "@eval" tensors; parameters, state and the input
 * are shared with the training step. */
static void add_eval(Graph *g) {
  int *map = xmalloc(sizeof(int) * (size_t)g->nt);
  for (int t = 0; t < g->nt; t++) map[t] = t;
  for (int i = 0; i < g->nfwd; i++) {
    Node n = g->n[i];
    if (n.op == OP_DROPOUT) {
      map[n.out[0]] = map[n.in[0]];
      continue;
    }
    int *in = xmalloc(sizeof(int) * (size_t)(n.nin ? n.nin : 1));
    for (int k = 0; k < n.nin; k++) in[k] = n.in[k] < 0 ? -1 : map[n.in[k]];
    int out = tensor_like(g, n.out[0], "@eval", TK_ACT);
    map[n.out[0]] = out;
    OpKind op = n.op == OP_BATCHNORM ? OP_BN_INFER : n.op;
    int nout = 1;
    int *outs = &out;
    int *many = NULL;
    if (n.nout > 1 && n.op == OP_SPLIT) {
      many = xmalloc(sizeof(int) * (size_t)n.nout);
      many[0] = out;
      for (int k = 1; k < n.nout; k++) many[k] = map[n.out[k]] = tensor_like(g, n.out[k], "@eval", TK_ACT);
      outs = many, nout = n.nout;
    }
    int e = train_add_node(g, op, i, "eval", PH_EVAL, n.nin, in, nout, outs, n.p);
    g->n[e].aux = n.aux;
    g->n[e].nattr = n.nattr, g->n[e].attrs = n.attrs;
    free(in);
    free(many);
  }
  if (absorbed_head) {   /* the chunked loss's head: per row, its loss term and argmax */
    char *base = xasprintf("%s@eval", g->t[g->output].name);
    int out = train_new_tensor(g, base, TK_ACT, DT_FLOAT, 2, (int64_t[]){head_lmce.n, 2});
    free(base);
    map[g->output] = out;
    char *name = xasprintf("%s/eval", head_name);
    train_add_node(g, OP_LMHEAD_CE, -1, name, PH_EVAL, 3,
                   (int[]){map[head_in[0]], map[head_in[1]], g->label}, 1, &out,
                   dup_params(&head_lmce, sizeof head_lmce));
    free(name);
    g->eval_rows = true;
  }
  g->eval_output = map[g->output];
  /* The other graph outputs' eval copies (computed ones, each once), for
   * --predict: live to the end of the eval step, in the tensor table. */
  g->neval_outs = 0;
  for (int t = 0; t < g->nt; t++)
    if (g->t[t].is_output && t != g->output && map[t] != t && !graph_is_eval_output(g, map[t])) {
      g->eval_outs = xrealloc(g->eval_outs, sizeof(int) * (size_t)(g->neval_outs + 1));
      g->eval_outs[g->neval_outs++] = map[t];
    }
  free(map);
}

/* Constants a kernel reads as data (not folded into params) live in the arena,
 * loaded once like parameters. */
static void mark_constant_data(Graph *g) {
  for (int i = 0; i < g->nfwd; i++) {
    const Node *n = &g->n[i];
    for (int k = 0; k < n->nin; k++) {
      Tensor *t = n->in[k] >= 0 ? &g->t[n->in[k]] : NULL;
      if (!t || t->kind != TK_CONST || !op_slot_is_data(n->op, k)) continue;
      if (t->dtype != DT_FLOAT || !t->data)
        node_error(n, "input %d ('%s') is a %s constant; snc's kernels read float32 data here",
                   k, t->name, dtype_name(t->dtype));
      t->kind = TK_CONSTVAL;
    }
  }
}

void train_build(Graph *g, const TrainOpts *o) {
  train_opts = o;
  /* Forgotten, not freed: a fuzzer run abandoned by an error released them. */
  memset(&hints, 0, sizeof hints);
  dist_buckets_reset();
  loss_scale_reset();
  absorbed_head = false;   /* (head_name is the graph's, forgotten with it) */
  head_name = NULL;
  rewrite_training_outputs(g);
  mark_constant_data(g);
  if (g->output < 0) fatal(EXIT_BADINPUT, "the model has no output");

  /* Which tensors need gradients: parameters and whatever depends on one. */
  needs = xcalloc((size_t)g->nt * 4 + 64, sizeof(bool));
  pending = xcalloc((size_t)g->nt * 4 + 64, sizeof(int));
  for (int t = 0; t < g->nt; t++) needs[t] = g->t[t].kind == TK_PARAM;
  for (int i = 0; i < g->nfwd; i++) {
    Node *n = &g->n[i];
    bool any = false;
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] >= 0) {
        any |= needs[n->in[k]];
        if (g->t[n->in[k]].kind == TK_PARAM) pending[n->in[k]]++;
      }
    /* BN's saved statistics are by-products, not differentiable outputs. */
    int nout = n->op == OP_BATCHNORM || n->op == OP_LAYERNORM ? 1 : n->nout;
    for (int k = 0; k < nout; k++) needs[n->out[k]] = any;
  }
  /* A model with nothing to train (a pooling layer, a preprocessing graph,
   * an ONNX node test) still compiles: its training step computes the loss
   * and changes nothing, and the program refuses to train it (exit 1) but
   * runs --predict. */
  add_loss(g);
  if (!needs[g->output])
    fprintf(stderr, "snc: note: the model output '%s' depends on no trainable parameter: the "
                    "program only runs --predict (docs/predict.md)\n", g->t[g->output].name);

  /* Backward, in reverse topological order. The arrays above are sized for the
   * tensors created here (new tensors never need the flags, which stay 0). */
  int nfwd = g->nfwd;
  for (int i = nfwd - 1; i >= 0; i--) {
    Node *n = &g->n[i];
    bool has_dy = false;
    for (int k = 0; k < n->nout; k++) has_dy |= g->t[n->out[k]].grad >= 0;
    bool any_need = false;
    for (int k = 0; k < n->nin; k++) any_need |= n->in[k] >= 0 && needs[n->in[k]];
    if (has_dy && any_need) op_info[n->op].grad(g, i);
    /* add_update appends nodes (g->n may move): index, don't hold n. */
    for (int k = 0; k < g->n[i].nin; k++) {
      int t = g->n[i].in[k];
      if (t >= 0 && g->t[t].kind == TK_PARAM && --pending[t] == 0) param_done(g, t);
    }
  }
  if (o->dist) bucket_updates(g);
  if (o->precision == PREC_FP16) scaled_updates(g);
  add_eval(g);
  hints_free();
  free(needs);
  free(pending);
  needs = NULL;
  pending = NULL;
}
