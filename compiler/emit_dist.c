/* emit_dist.c — the data-parallel steps of train.c (--dist mpi).
 *
 * Requires: ALLREDUCE and COMM_WAIT nodes from autodiff (bucket number in
 * node->aux; inputs: the bucket's final parameter gradients, planned like
 * any other reads). Emits, per bucket, a table of (arena offset, float count)
 * pairs and the runtime calls: snrt_allreduce_start when the bucket is
 * complete, snrt_allreduce_wait before its first update. The runtime averages
 * over the ranks in place (runtime/dist/mpi.c). */
#include "emit.h"

static void bucket_table(Emit *e, const Node *n, char *name, size_t len) {
  snprintf(name, len, "bucket%d", n->aux);
  if (n->op != OP_ALLREDUCE) return;   /* the start declared it */
  fprintf(e->decl, "static const int64_t %s[] = {", name);
  for (int k = 0; k < n->nin; k++) {
    const Instance *in = &e->pl->inst[e->st->in[k]];
    if (in->offset < 0)
      internal_error(__FILE__, __LINE__, "gradient '%s' of bucket %d is not in the device arena",
                     e->g->t[n->in[k]].name, n->aux);
    fprintf(e->decl, "%s0x%llx, %lld", k ? ", " : "", (unsigned long long)in->offset,
            (long long)tensor_numel(&e->g->t[n->in[k]]));
  }
  fprintf(e->decl, "};  /* (offset, floats) of each gradient */\n");
}

void emit_allreduce(Emit *e, const Graph *g, const Node *n) {
  char name[32];
  bucket_table(e, n, name, sizeof name);
  fprintf(e->f, "  snrt_allreduce_start(c, %d, %d, %s);\n", n->aux, n->nin, name);
}

void emit_comm_wait(Emit *e, const Graph *g, const Node *n) {
  fprintf(e->f, "  snrt_allreduce_wait(c, %d);\n", n->aux);
}
