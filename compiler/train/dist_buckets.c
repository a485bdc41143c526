/* dist_buckets.c — data parallel (--dist) in the training graph: gradient
 * buckets, their all-reduce (or --zero 1's reduce-scatter) and waits, and
 * --zero 1's layout of the optimizer state in shards.
 *
 * Requires: train_build's backward pass (autodiff.c), which hands each
 * parameter here when its gradient is final (bucket_add), then calls
 * bucket_updates once after the backward pass.
 * Provides: ALLREDUCE / REDUCE_SCATTER nodes in the backward pass, COMM_WAIT
 * and the updates after it (--zero 1: ALLGATHER of the parameters and its
 * waits; Tensor.zero_flat, Graph.zero_ranks/zero_shard, the shard tensors).
 *
 * Not here: the exchanges themselves (runtime/dist/), their steps in the
 * program (emit_dist.c).
 */
#include "autodiff_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Data parallel (--dist): buckets of parameters whose gradients are final,
 * in the order they became final. Each bucket's all-reduce starts right
 * after the backward node that completes it (the gradients of a bucket of
 * at least bucket_bytes, or the last one) and overlaps the rest of the
 * backward pass; its COMM_WAIT and then its updates follow the backward
 * pass, so updates never read a gradient before every rank's share is in.
 * Gradients thereby live until their update after the backward pass (the
 * planner sees that through the COMM_WAIT and update readers). */
static struct { int *param, n, cap, open; int64_t bytes; int nbuckets; int *start; } bk;

static void bucket_close(Graph *g) {
  if (bk.open == bk.n) return;
  int cnt = bk.n - bk.open;
  int *in = xmalloc(sizeof(int) * (size_t)cnt);
  for (int k = 0; k < cnt; k++) in[k] = g->t[bk.param[bk.open + k]].grad;
  char name[48];
  snprintf(name, sizeof name, "bucket%d/allreduce", bk.nbuckets);
  int a = train_add_node(g, train_opts->zero_ranks ? OP_REDUCE_SCATTER : OP_ALLREDUCE, -1, name, PH_COMM,
                   cnt, in, 0, NULL, NULL);
  g->n[a].aux = bk.nbuckets;
  free(in);
  xgrow((void **)&bk.start, &bk.cap, bk.nbuckets + 2, sizeof(int));
  bk.start[bk.nbuckets++] = bk.open;
  bk.start[bk.nbuckets] = bk.n;
  bk.open = bk.n;
  bk.bytes = 0;
}

void bucket_add(Graph *g, int w) {
  if (g->t[w].grad < 0) return;   /* no gradient: no update (as add_update) */
  int cap = bk.n + 1;
  bk.param = xrealloc(bk.param, sizeof(int) * (size_t)cap);
  bk.param[bk.n++] = w;
  bk.bytes += tensor_bytes(&g->t[g->t[w].grad]);
  if (bk.bytes >= train_opts->bucket_bytes) bucket_close(g);
}

/* --zero 1 over N ranks: the parameters, in the order their gradients
 * become final, are laid end to end in one flat space of P elements; rank r
 * owns elements [r S, (r + 1) S), S = P / N rounded up (to 64), and holds the
 * optimizer state of just those: one shard tensor of S elements per kind of
 * state. A parameter may straddle ranks; each updates its own piece. */
static void zero_layout(Graph *g) {
  int64_t flat = 0;
  for (int k = 0; k < bk.n; k++) {
    g->t[bk.param[k]].zero_flat = flat;
    flat += tensor_numel(&g->t[bk.param[k]]);
  }
  int N = train_opts->zero_ranks;
  int64_t S = (flat + N - 1) / N;
  S = (S + 63) / 64 * 64;
  g->zero_ranks = N;
  g->zero_shard = S;
  const char *names[2][2] = {{"zero.momentum", NULL}, {"zero.adam_m", "zero.adam_v"}};
  int kind = train_opts->optim == OPTIM_SGD ? 0 : 1;
  for (int s = 0; s < 2; s++) {
    if (!names[kind][s]) continue;
    train_zero_state[s] = train_new_tensor(g, names[kind][s], TK_OPT, DT_FLOAT, 1, &S);
    g->t[train_zero_state[s]].init = SNRT_INIT_ZERO;
  }
}

/* After the backward pass: per bucket, its wait, then its updates (--zero:
 * then the broadcast of its parameters from their owners, waited for at the
 * end of the step; the waits write the parameters). */
void bucket_updates(Graph *g) {
  bucket_close(g);
  train_zero_state[0] = train_zero_state[1] = -1;
  if (train_opts->zero_ranks) zero_layout(g);
  for (int b = 0; b < bk.nbuckets; b++) {
    int cnt = bk.start[b + 1] - bk.start[b];
    int *in = xmalloc(sizeof(int) * (size_t)cnt);
    for (int k = 0; k < cnt; k++) in[k] = g->t[bk.param[bk.start[b] + k]].grad;
    char name[48];
    snprintf(name, sizeof name, "bucket%d/wait", b);
    int wn = train_add_node(g, OP_COMM_WAIT, -1, name, PH_COMM, cnt, in, 0, NULL, NULL);
    g->n[wn].aux = b;
    free(in);
    for (int k = bk.start[b]; k < bk.start[b + 1]; k++) train_add_update(g, bk.param[k]);
    if (train_opts->zero_ranks) {
      snprintf(name, sizeof name, "bucket%d/allgather", b);
      int an = train_add_node(g, OP_ALLGATHER, -1, name, PH_COMM, cnt, &bk.param[bk.start[b]], 0, NULL, NULL);
      g->n[an].aux = bk.nbuckets + b;
    }
  }
  for (int b = 0; train_opts->zero_ranks && b < bk.nbuckets; b++) {
    int cnt = bk.start[b + 1] - bk.start[b];
    char name[48];
    snprintf(name, sizeof name, "bucket%d/allgather_wait", b);
    int wn = train_add_node(g, OP_COMM_WAIT, -1, name, PH_COMM, cnt, &bk.param[bk.start[b]], cnt,
                      &bk.param[bk.start[b]], NULL);
    g->n[wn].aux = bk.nbuckets + b;
    for (int k = bk.start[b]; k < bk.start[b + 1]; k++) g->t[bk.param[k]].producer = -1;
  }
  train_zero_state[0] = train_zero_state[1] = -1;
  free(bk.param);
  free(bk.start);
}

void dist_buckets_reset(void) { memset(&bk, 0, sizeof bk); }
