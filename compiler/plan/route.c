/* route.c — the execution route: one linear list of steps.
 *
 * Requires: a training graph from train_build(): g->n holds the forward nodes
 * (PH_FORWARD, topologically sorted), the loss (PH_LOSS), backward nodes in an
 * execution order (PH_BACKWARD), optimizer updates each right after its
 * gradient is final (PH_UPDATE), then the eval pass (PH_EVAL). The node order
 * IS the route, so this pass only copies it: training steps are the non-eval
 * nodes in order, eval steps follow (Route.train_steps marks the split).
 *
 * Provides: Route with one Step per node. Step.in/out are allocated (aligned
 * with node->in/out) and set to -1; liveness_compute fills them with instance
 * indices, and Step.ws with the step's workspace instance. Later passes
 * (recompute, offload) insert steps of their own.
 *
 * Not here: any reordering. Autodiff owns the order; we check only that eval
 * nodes do not read what training nodes have not written (done in liveness). */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

const char *step_kind_name(StepKind k) {
  static const char *names[] = {"forward", "loss", "backward", "update", "recompute",
                                "offload", "prefetch", "eval", "allreduce", "comm_wait",
                                "reduce_scatter", "allgather"};
  return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

static StepKind kind_of_phase(const Node *n) {
  switch (n->phase) {
  case PH_FORWARD: return SK_FORWARD;
  case PH_LOSS: return SK_LOSS;
  case PH_BACKWARD: return SK_BACKWARD;
  case PH_UPDATE: return SK_UPDATE;
  case PH_EVAL: return SK_EVAL;
  case PH_RECOMPUTE: return SK_RECOMPUTE;
  case PH_COMM:
    return n->op == OP_ALLREDUCE ? SK_ALLREDUCE : n->op == OP_REDUCE_SCATTER ? SK_REDUCE_SCATTER
           : n->op == OP_ALLGATHER ? SK_ALLGATHER : SK_COMM_WAIT;
  }
  unreachable();
}

/* n ints (at least one) for a step's in/out lists: carved from chunks the
 * route owns (a route is rebuilt many times per plan; one allocation per list
 * was a quarter of the planning time on deep networks). */
static int *route_ints(Route *r, int n) {
  if (n < 1) n = 1;
  if (r->left < n) {
    int size = n > 16384 ? n : 16384;
    xgrow((void **)&r->chunk, &r->capchunk, r->nchunk + 1, sizeof *r->chunk);
    r->next = r->chunk[r->nchunk++] = xmalloc(sizeof(int) * (size_t)size);
    r->left = size;
  }
  int *p = r->next;
  r->next += n, r->left -= n;
  return p;
}

static void add_step(Route *r, const Node *n, int node) {
  xgrow((void **)&r->s, &r->caps, r->ns + 1, sizeof *r->s);
  Step *s = &r->s[r->ns++];
  *s = (Step){.kind = kind_of_phase(n), .node = node, .tensor = -1,
              .nin = n->nin, .nout = n->nout, .ws = -1, .event = -1};
  s->in = route_ints(r, n->nin);
  s->out = route_ints(r, n->nout);
  for (int i = 0; i < n->nin; i++) s->in[i] = -1;
  for (int i = 0; i < n->nout; i++) s->out[i] = -1;
}

Route *route_build(const Graph *g) {
  Route *r = xcalloc(1, sizeof *r);
  /* Two passes keep eval after training even if autodiff interleaved them. */
  for (int i = 0; i < g->nn; i++)
    if (g->n[i].phase != PH_EVAL && g->n[i].phase != PH_RECOMPUTE) add_step(r, &g->n[i], i);
  r->train_steps = r->ns;
  for (int i = 0; i < g->nn; i++)
    if (g->n[i].phase == PH_EVAL) add_step(r, &g->n[i], i);
  return r;
}

static void dump_names(const Graph *g, const int *t, int n, FILE *f) {
  for (int i = 0; i < n; i++)
    fprintf(f, "%s%s", i ? ", " : "", t[i] < 0 ? "-" : g->t[t[i]].name);
}

/* One line per step: index, kind, op, node, and the tensors it reads and
 * writes (by name, from the node: the route does not depend on liveness). */
void route_dump(const Graph *g, const Route *r, FILE *f) {
  fprintf(f, "route: %d steps (%d training, %d eval)\n", r->ns, r->train_steps,
          r->ns - r->train_steps);
  for (int i = 0; i < r->ns; i++) {
    const Step *s = &r->s[i];
    fprintf(f, "%6d  %-9s ", i, step_kind_name(s->kind));
    if (s->node < 0) {
      fprintf(f, "%-16s %s\n", "copy", s->tensor >= 0 ? g->t[s->tensor].name : "-");
      continue;
    }
    const Node *n = &g->n[s->node];
    fprintf(f, "%-16s %s  (", op_name(n->op), n->name);
    dump_names(g, n->in, n->nin, f);
    fprintf(f, ") -> (");
    dump_names(g, n->out, n->nout, f);
    fprintf(f, ")\n");
  }
}

/* Appends a copy of `proto` (its in/out/wait/keep arrays copied too): the
 * passes that rebuild the route (recompute, offload) use it. */
Step *route_push(Route *r, const Step *proto) {
  xgrow((void **)&r->s, &r->caps, r->ns + 1, sizeof *r->s);
  Step *s = &r->s[r->ns++];
  *s = *proto;
  s->in = route_ints(r, proto->nin);
  s->out = route_ints(r, proto->nout);
  memcpy(s->in, proto->in, sizeof(int) * (size_t)proto->nin);
  memcpy(s->out, proto->out, sizeof(int) * (size_t)proto->nout);
  s->wait = proto->nwait ? xmalloc(sizeof(int) * (size_t)proto->nwait) : NULL;
  s->keep = proto->nkeep ? xmalloc(sizeof(int) * (size_t)proto->nkeep) : NULL;
  if (proto->nwait) memcpy(s->wait, proto->wait, sizeof(int) * (size_t)proto->nwait);
  if (proto->nkeep) memcpy(s->keep, proto->keep, sizeof(int) * (size_t)proto->nkeep);
  return s;
}

Route *route_clone(const Route *r) {
  Route *c = xcalloc(1, sizeof *c);
  c->caps = r->ns ? r->ns : 1;
  c->s = xmalloc(sizeof *c->s * (size_t)c->caps);
  for (int i = 0; i < r->ns; i++) route_push(c, &r->s[i]);
  c->train_steps = r->train_steps;
  return c;
}

void route_free(Route *r) {
  if (!r) return;
  for (int s = 0; s < r->ns; s++) {
    Step *st = &r->s[s];
    free(st->wait), free(st->keep);
  }
  for (int c = 0; c < r->nchunk; c++) free(r->chunk[c]);
  free(r->chunk);
  free(r->s);
  free(r);
}
