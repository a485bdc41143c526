/* plan.c — the planning driver: runs the passes for a policy, estimates the
 * step time, enforces the budget, and answers max-batch.
 *
 * Policies planned today: none (every instance its own region) and liveness
 * (greedy packing of lifetimes). recompute, offload, superneurons and auto
 * fall back to the liveness plan for now; Plan.planned records what was
 * actually planned and every printer says so (no silent substitution).
 *
 * Cost model (a first one; the offload issue refines it): each training step
 * takes max(flops / device FLOP rate, bytes touched / memory bandwidth), bytes
 * touched being its inputs, outputs and workspace. Eval steps are not part of
 * the training step and are not counted.
 *
 * Not here: the passes themselves (route.c, liveness.c, offsets.c) or output
 * formats (plan_print.c). */
#include "snc.h"

#include <stdlib.h>
#include <string.h>

static void estimate(const Graph *g, Plan *pl, const DeviceProfile *dev) {
  const Route *r = pl->route;
  pl->est_step_seconds = pl->step_flops = pl->recompute_flops = 0;
  for (int s = 0; s < r->train_steps; s++) {
    const Step *st = &r->s[s];
    if (st->node < 0) continue;
    const Node *n = &g->n[st->node];
    double fl = op_info[n->op].flops(g, n);
    double bytes = 0;
    for (int k = 0; k < st->nin; k++)
      if (st->in[k] >= 0) bytes += (double)pl->inst[st->in[k]].bytes;
    for (int k = 0; k < st->nout; k++)
      if (st->out[k] >= 0) bytes += (double)pl->inst[st->out[k]].bytes;
    if (st->ws >= 0) bytes += (double)pl->inst[st->ws].bytes;
    double tc = fl / dev->flops, tm = bytes / dev->mem_bw;
    pl->est_step_seconds += tc > tm ? tc : tm;
    pl->step_flops += fl;
    if (st->kind == SK_RECOMPUTE) pl->recompute_flops += fl;
  }
}

/* The plan without the budget check (max-batch probes plans that do not fit). */
static Plan *build(Graph *g, const PlanOpts *o) {
  const DeviceProfile *dev = device_find(o->device ? o->device : "h200");
  Plan *pl = xcalloc(1, sizeof *pl);
  pl->opts = *o;
  pl->opts.device = dev->name;
  pl->batch = g->batch;
  pl->budget = o->budget ? o->budget : dev->mem_bytes;
  pl->planned = o->policy == POL_NONE ? POL_NONE
                : o->policy == POL_RECOMPUTE ? POL_RECOMPUTE : POL_LIVENESS;
  pl->route = route_build(g);
  liveness_compute(g, pl);
  /* The baseline is the none policy's arena: the primary instances, each in
   * its own region (instances added by later passes are not in it). */
  int64_t baseline = pl->baseline_bytes;
  if (pl->planned == POL_RECOMPUTE) {
    /* Memory target: the layer peak (speed-centric segments where it holds). */
    recompute_plan(g, pl, pl->layer_peak_bytes);
  }
  pl->baseline_bytes = baseline;
  offsets_assign(pl, pl->planned != POL_NONE);
  /* The checker is O(n log n): every plan snc produces is verified. */
  if (offsets_check(g, pl, stderr))
    internal_error(__FILE__, __LINE__, "the offset plan has overlapping instances");
  estimate(g, pl, dev);
  return pl;
}

Plan *plan_build(Graph *g, const PlanOpts *o) {
  Plan *pl = build(g, o);
  /* An explicit budget binds every policy; auto is bound by the device's
   * memory too. none/liveness without --budget only report. */
  if ((o->budget || o->policy == POL_AUTO) && pl->arena_bytes > pl->budget) {
    if (pl->planned != o->policy)
      fatal(EXIT_BADINPUT, "budget %s is too small: the smallest budget that fits is %s "
            "(policy %s falls back to liveness for now: recomputation and offload are not "
            "implemented yet)", fmt_bytes(pl->budget), fmt_bytes(pl->arena_bytes),
            policy_name(o->policy));
    fatal(EXIT_BADINPUT, "budget %s is too small: policy %s needs %s (%lld bytes)",
          fmt_bytes(pl->budget), policy_name(o->policy), fmt_bytes(pl->arena_bytes),
          (long long)pl->arena_bytes);
  }
  return pl;
}

void plan_dump(const Graph *g, const Plan *pl, const char *pass, FILE *f) {
  if (strcmp(pass, "route") == 0) route_dump(g, pl->route, f);
  else if (strcmp(pass, "liveness") == 0) liveness_dump(g, pl, f);
  else if (strcmp(pass, "offsets") == 0) offsets_dump(g, pl, f);
  else if (strcmp(pass, "recompute") == 0) recompute_dump(g, pl, f);
  else if (strcmp(pass, "offload") == 0)
    fprintf(f, "%s: not implemented yet (policy %s was planned as %s)\n", pass,
            policy_name(pl->opts.policy), policy_name(pl->planned));
  else {
    fprintf(stderr, "snc: error: unknown pass '%s' for --dump (route, liveness, recompute, "
            "offload, offsets)\n", pass);
    exit(EXIT_USAGE);
  }
}

/* Imports and plans the model at one batch size; frees the tensor data
 * (initializers) at once, since planning needs only shapes: max-batch imports
 * the model a dozen times. The graphs themselves are kept (ir.c keys its name
 * maps by graph address, so freeing one could alias the next). */
static int64_t arena_at(const char *model, const char *input, const TrainOpts *t,
                        const PlanOpts *o, int batch) {
  Graph *g = onnx_import(model, input);
  shape_infer(g, batch);
  train_build(g, t);
  Plan *pl = build(g, o);
  for (int i = 0; i < g->nt; i++) free(g->t[i].data), g->t[i].data = NULL;
  int64_t a = pl->arena_bytes;
  free(pl->inst), free(pl->tensor_inst), free(pl->live_bytes), free(pl->high_water);
  for (int s = 0; s < pl->route->ns; s++) free(pl->route->s[s].in), free(pl->route->s[s].out);
  free(pl->route->s), free(pl->route), free(pl);
  return a;
}

/* Doubling then bisection: O(log B) plans, assuming the arena grows with the
 * batch (it does: every activation scales with it). */
int plan_max_batch(const char *model, const char *input, const TrainOpts *t, const PlanOpts *o) {
  const DeviceProfile *dev = device_find(o->device ? o->device : "h200");
  int64_t budget = o->budget ? o->budget : dev->mem_bytes;
  const int cap = 1000000;             // --batch's own limit
  if (arena_at(model, input, t, o, 1) > budget) return 0;
  int lo = 1, hi = 2;                  // lo fits; hi is untested or too big
  while (hi <= cap && arena_at(model, input, t, o, hi) <= budget) {
    lo = hi;
    hi *= 2;
  }
  if (hi > cap) hi = cap + 1;
  while (hi - lo > 1) {
    int mid = lo + (hi - lo) / 2;
    if (arena_at(model, input, t, o, mid) <= budget) lo = mid;
    else hi = mid;
  }
  return lo;
}
