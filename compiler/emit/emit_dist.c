/* emit_dist.c — the data-parallel steps of train.c (--dist mpi, --zero 1).
 *
 * Requires: ALLREDUCE / REDUCE_SCATTER / ALLGATHER and COMM_WAIT nodes from
 * autodiff (the exchange's number in node->aux; inputs: the bucket's final
 * parameter gradients, or its parameters for ALLGATHER), planned like any
 * other reads. Emits per exchange a table of (arena offset, float count,
 * root rank) triples and the runtime calls: snrt_comm_start when the bucket
 * is complete, snrt_comm_wait before its first reader (runtime/dist/mpi.c).
 * Root -1: all-reduce (the average lands on every rank); root r: the piece
 * is reduced to, or broadcast from, rank r, which owns those elements of the
 * flat parameter space under --zero 1 (autodiff.c, zero_layout). */
#include "emit_internal.h"

/* The piece of parameter w (elements [lo, hi) of the flat space) that rank r
 * owns; false where it owns none. */
static bool owned(const Graph *g, int w, int r, int64_t *lo, int64_t *hi) {
  int64_t f = g->t[w].zero_flat, n = tensor_numel(&g->t[w]), S = g->zero_shard;
  *lo = f > r * S ? f : r * S;
  *hi = f + n < (r + 1) * S ? f + n : (r + 1) * S;
  return *lo < *hi;
}

static int64_t offset_of(Emit *e, int k) {
  const Instance *in = &e->pl->inst[e->st->in[k]];
  if (in->offset < 0)
    internal_error(__FILE__, __LINE__, "'%s' of an exchange is not in the device arena",
                   e->g->t[e->g->n[e->st->node].in[k]].name);
  return in->offset;
}

/* The parameter of input k: itself (ALLGATHER) or the one it is the gradient of. */
static int param_of(const Graph *g, const Node *n, int k) {
  int t = n->in[k];
  if (g->t[t].kind != TK_PARAM) t = g->t[t].grad_of;
  if (t < 0 || g->t[t].kind != TK_PARAM)
    internal_error(__FILE__, __LINE__, "'%s' of exchange %d is not a parameter's gradient",
                   g->t[n->in[k]].name, n->aux);
  return t;
}

static void start(Emit *e, const Graph *g, const Node *n, const char *kind, bool pieces) {
  int cnt = 0;
  fprintf(e->decl, "static const int64_t comm%d[] = {", n->aux);
  for (int k = 0; k < n->nin; k++) {
    int64_t off = offset_of(e, k);
    if (!pieces) {
      fprintf(e->decl, "%s0x%llx, %lld, -1", cnt++ ? ", " : "", (unsigned long long)off,
              (long long)tensor_numel(&g->t[n->in[k]]));
      continue;
    }
    int w = param_of(g, n, k);
    for (int r = 0; r < g->zero_ranks; r++) {
      int64_t lo, hi;
      if (!owned(g, w, r, &lo, &hi)) continue;
      fprintf(e->decl, "%s0x%llx, %lld, %d", cnt++ ? ", " : "",
              (unsigned long long)(off + 4 * (lo - g->t[w].zero_flat)), (long long)(hi - lo), r);
    }
  }
  fprintf(e->decl, "};  /* (offset, floats, root) of each piece */\n");
  fprintf(e->f, "  snrt_comm_start(c, %d, %s, %d, comm%d);\n", n->aux, kind, cnt, n->aux);
}

void emit_allreduce(Emit *e, const Graph *g, const Node *n) {
  start(e, g, n, "SNRT_COMM_ALLREDUCE", false);
}

void emit_reduce_scatter(Emit *e, const Graph *g, const Node *n) {
  start(e, g, n, "SNRT_COMM_REDUCE", true);
}

void emit_allgather(Emit *e, const Graph *g, const Node *n) {
  start(e, g, n, "SNRT_COMM_BCAST", true);
}

void emit_comm_wait(Emit *e, const Graph *g, const Node *n) {
  fprintf(e->f, "  snrt_comm_wait(c, %d);\n", n->aux);
}

/* --zero 1: each rank updates the piece of the parameter it owns, with its
 * piece of the optimizer-state shard (SGD and Adam are elementwise). */
void emit_zero_update(Emit *e, const Graph *g, const Node *n) {
  int w = n->in[0];
  int64_t f = g->t[w].zero_flat, S = g->zero_shard;
  int64_t wo = offset_of(e, 0), go = offset_of(e, 1);
  for (int r = 0; r < g->zero_ranks; r++) {
    int64_t lo, hi;
    if (!owned(g, w, r, &lo, &hi)) continue;
    int64_t a = lo - f, so = lo - r * S;
    char body[512];
    void *key = xmalloc(1);   /* one params struct per piece */
    if (n->op == OP_SGD) {
      const snrt_sgd_t *p = n->p;
      snprintf(body, sizeof body, ".n = %lld, .momentum = %s, .weight_decay = %s, .dampening = %s, "
               ".nesterov = %d, .param = %d", (long long)(hi - lo), emit_float(p->momentum),
               emit_float(p->weight_decay), emit_float(p->dampening), p->nesterov, e->table[p->param]);
      const char *ps = emit_params(e, key, "snrt_sgd_t", body);
      fprintf(e->f, "  if (snrt_rank(c) == %d) snrt_sgd(c, %s, F(0x%llx), F(0x%llx), F(0x%llx));\n",
              r, ps, (unsigned long long)(wo + 4 * a), (unsigned long long)(go + 4 * a),
              (unsigned long long)(offset_of(e, 2) + 4 * so));
    } else {
      const snrt_adam_t *p = n->p;
      snprintf(body, sizeof body, ".n = %lld, .beta1 = %s, .beta2 = %s, .eps = %s, .weight_decay = %s, "
               ".decoupled = %d, .param = %d", (long long)(hi - lo), emit_float(p->beta1),
               emit_float(p->beta2), emit_float(p->eps), emit_float(p->weight_decay), p->decoupled,
               e->table[p->param]);
      const char *ps = emit_params(e, key, "snrt_adam_t", body);
      fprintf(e->f, "  if (snrt_rank(c) == %d) snrt_adam(c, %s, F(0x%llx), F(0x%llx), F(0x%llx), "
              "F(0x%llx));\n", r, ps, (unsigned long long)(wo + 4 * a),
              (unsigned long long)(go + 4 * a), (unsigned long long)(offset_of(e, 2) + 4 * so),
              (unsigned long long)(offset_of(e, 3) + 4 * so));
    }
  }
}
