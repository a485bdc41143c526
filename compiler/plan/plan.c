/* plan.c — the planning driver: runs the passes for a policy over the route,
 * estimates the step time and enforces the device and host budgets.
 *
 * Policies: none (every instance its own region), liveness (greedy packing
 * of lifetimes), recompute (cheap layers rebuilt, memory-centric down to the
 * layer peak; with --segment, checkpoint segments rebuilt once each),
 * offload (what hides fully), superneurons (both, copies synchronous: the
 * smallest footprint) and auto (search.c: the fastest plan that fits both
 * budgets; `snc plan --dump auto` prints its candidates). Plan.planned
 * records which kind of plan auto chose.
 *
 * Cost model (cost.c): each training step takes max(flops / device FLOP
 * rate, bytes touched / memory bandwidth), bytes touched being its inputs,
 * outputs and workspace (per op class with a calibrated profile); copies
 * overlap compute except for their exposed part (offload.c). Eval steps are
 * not part of the training step.
 *
 * Not here: the passes themselves (route.c, liveness.c, recompute.c,
 * offload.c, offsets.c), auto's search (search.c) or output formats
 * (plan_print.c). */
#include "plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *policy_names[] = {"none", "liveness", "recompute", "offload",
                                     "superneurons", "auto"};
const char *policy_name(Policy p) { return policy_names[p]; }
int policy_parse(const char *s) {
  for (int i = 0; i < (int)(sizeof policy_names / sizeof policy_names[0]); i++)
    if (strcmp(s, policy_names[i]) == 0) return i;
  return -1;
}

double plan_rebuild_seconds(const Graph *g, const Plan *pl, int s, double t,
                            const DeviceProfile *dev) {
  const Step *st = &pl->route->s[s];
  if (st->kind == SK_RECOMPUTE) return t;
  if (st->node < 0 || !node_carries(&g->n[st->node])) return 0;
  return t - rc_node_seconds(g, pl, &g->n[g->n[st->node].twin], dev);
}

/* The estimated step time: compute and recompute steps each take
 * max(flops / rate, bytes / bandwidth); copies overlap compute except for the
 * exposed part (offload.c), and never go faster than the link allows. */
void plan_estimate(const Graph *g, Plan *pl, const DeviceProfile *dev) {
  const Route *r = pl->route;
  double *t = cost_step_times(g, pl, dev);
  free(pl->step_seconds), free(pl->step_rebuild);
  pl->nstep_seconds = r->train_steps;
  pl->step_seconds = xcalloc((size_t)(r->train_steps ? r->train_steps : 1), sizeof(double));
  pl->step_rebuild = xcalloc((size_t)(r->train_steps ? r->train_steps : 1), sizeof(double));
  pl->compute_seconds = pl->recompute_seconds = pl->step_flops = pl->recompute_flops = 0;
  double copy_off = 0, copy_pf = 0;
  for (int s = 0; s < r->train_steps; s++) {
    const Step *st = &r->s[s];
    if (st->node < 0) {
      double tau = cost_step_seconds(g, pl, s, dev);
      pl->step_seconds[s] = tau;
      if (st->kind == SK_OFFLOAD) copy_off += tau;
      else copy_pf += tau;
      continue;
    }
    const Node *n = &g->n[st->node];
    double fl = op_info[n->op].flops(g, n);
    pl->step_flops += fl;
    pl->step_seconds[s] = t[s];
    if (st->kind == SK_RECOMPUTE) {
      pl->recompute_flops += fl;
      pl->recompute_seconds += t[s];
    } else if (node_carries(n)) {   /* a carrier: its plain step's time is compute */
      pl->step_rebuild[s] = plan_rebuild_seconds(g, pl, s, t[s], dev);
      pl->compute_seconds += t[s] - pl->step_rebuild[s];
      pl->recompute_seconds += pl->step_rebuild[s];
    } else {
      pl->compute_seconds += t[s];
    }
  }
  free(t);
  /* One copy engine per direction: its total time bounds the step too. */
  double busy = pl->compute_seconds + pl->recompute_seconds;
  double serial = (copy_off > copy_pf ? copy_off : copy_pf) - busy;
  if (serial > pl->exposed_seconds) pl->exposed_seconds = serial;
  pl->est_step_seconds = busy + pl->exposed_seconds;
}

/* Tensors under this size are never offloaded. */
enum { OFFLOAD_MIN_BYTES = 4 << 10 };

bool *plan_offload_candidates(const Graph *g) {
  bool *sel = xcalloc((size_t)g->nt + 1, sizeof(bool));
  for (int t = 0; t < g->nt; t++) {
    const Tensor *x = &g->t[t];
    if ((x->kind != TK_ACT && x->kind != TK_AUX) || x->producer < 0) continue;
    const Node *n = &g->n[x->producer];
    if (n->phase != PH_FORWARD) continue;
    /* Tiny tensors (BN's saved statistics, a few hundred bytes) cost a copy's
     * fixed overhead and an event for nothing: they stay. */
    if (tensor_bytes(x) < OFFLOAD_MIN_BYTES) continue;
    sel[t] = true;
  }
  return sel;
}

bool *plan_saved_tensors(const Graph *g) {
  bool *saved = xcalloc((size_t)g->nt + 1, sizeof(bool));
  for (int i = 0; i < g->nn; i++) {
    const Node *n = &g->n[i];
    if (n->phase != PH_BACKWARD) continue;
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] >= 0) saved[n->in[k]] = true;
  }
  return saved;
}

bool plan_moves_to_host(TensorKind k, int hs) {
  return (hs >= 1 && k == TK_OPT) || (hs >= 2 && k == TK_PARAM);
}

int64_t plan_moved_bytes(const Graph *g, int hs) {
  int64_t b = 0;
  for (int t = 0; t < g->nt; t++)
    if (plan_moves_to_host(g->t[t].kind, hs)) b += arena_align(tensor_bytes(&g->t[t]));
  return b;
}

Plan *plan_base(Graph *g, const Route *r, const PlanOpts *o, const DeviceProfile *dev) {
  Plan *pl = xcalloc(1, sizeof *pl);
  pl->opts = *o;
  pl->opts.device = dev->name;
  pl->batch = g->batch;
  pl->budget = o->budget ? o->budget : device_budget(dev);
  pl->host_budget = o->host_budget ? o->host_budget : device_host_budget(dev);
  pl->planned = o->policy;
  pl->route = route_clone(r);
  liveness_compute(g, pl);
  /* The baseline is the none policy's arena: the primary instances, each in
   * its own region (instances added by later passes are not in it). */
  pl->baseline_bytes += pl->aliased_bytes;
  return pl;
}

static void *dup_array(const void *p, size_t n, size_t size) {
  if (!p) return NULL;
  void *q = xmalloc(n * size > 0 ? n * size : 1);
  memcpy(q, p, n * size);
  return q;
}

Plan *plan_clone(const Plan *pl) {
  Plan *c = xmalloc(sizeof *c);
  *c = *pl;
  c->route = route_clone(pl->route);
  c->capinst = pl->ninst ? pl->ninst : 1;
  c->inst = xmalloc(sizeof *c->inst * (size_t)c->capinst);
  memcpy(c->inst, pl->inst, sizeof *c->inst * (size_t)pl->ninst);
  /* tensor_inst has one entry per tensor of the graph it was planned on */
  c->tensor_inst = dup_array(pl->tensor_inst, (size_t)pl->ntensors, sizeof(int));
  c->live_bytes = dup_array(pl->live_bytes, (size_t)(pl->route->ns ? pl->route->ns : 1),
                            sizeof(int64_t));
  c->high_water = dup_array(pl->high_water, (size_t)(pl->route->ns ? pl->route->ns : 1),
                            sizeof(int64_t));
  c->ckpt = dup_array(pl->ckpt, (size_t)pl->checkpoints, sizeof(int));
  c->step_seconds = pl->step_seconds
      ? dup_array(pl->step_seconds, (size_t)(pl->nstep_seconds ? pl->nstep_seconds : 1), sizeof(double))
      : NULL;
  c->step_rebuild = pl->step_rebuild
      ? dup_array(pl->step_rebuild, (size_t)(pl->nstep_seconds ? pl->nstep_seconds : 1), sizeof(double))
      : NULL;
  c->auto_log = NULL;
  return c;
}

void plan_free(Plan *pl) {
  if (!pl) return;
  route_free(pl->route);
  free(pl->inst), free(pl->tensor_inst), free(pl->live_bytes), free(pl->high_water);
  free(pl->auto_log), free(pl->ckpt), free(pl->step_seconds), free(pl->step_rebuild), free(pl);
}

void plan_pack(const Graph *g, Plan *pl) {
  if (!pl->host_packed) offsets_host(pl), pl->host_packed = true;
  offsets_assign(pl, pl->planned != POL_NONE);
  if (offsets_check(g, pl, stderr))
    internal_error(__FILE__, __LINE__, "the offset plan has overlapping instances");
}

bool plan_finish(Graph *g, Plan *pl, const DeviceProfile *dev, const PlanVariant *v,
                 bool recomputed, int64_t baseline, const int64_t floor[2]) {
  pl->planned = v->planned;
  if (v->sel) offload_plan(g, pl, v->sel, dev, v->hidden_only, v->lead);
  if (floor) {
    int64_t dev_floor, host_floor;
    liveness_floors(g, pl, NULL, &dev_floor, &host_floor);
    if (!v->hs) dev_floor += pl->persistent_bytes;
    if (dev_floor > floor[0] || host_floor > floor[1]) {
      pl->peak_live_bytes = dev_floor, pl->host_bytes = host_floor;
      pl->est_step_seconds = NAN;
      return false;
    }
  }
  if (v->hs) offload_persistent(g, pl, dev, v->hs > 1);
  /* In-place elementwise steps pay where recomputed and prefetched copies
   * are short-lived; the plain liveness plan is left as packed. */
  if (recomputed || v->sel) liveness_inplace(g, pl);
  pl->baseline_bytes = baseline;
  if (floor) {
    int64_t dev_floor;   /* the host arena packs to at least its live bytes */
    liveness_floors(g, pl, NULL, &dev_floor, &pl->host_bytes);
    pl->host_packed = false;
  } else {
    offsets_host(pl), pl->host_packed = true;
  }
  plan_estimate(g, pl, dev);
  return true;
}

/* A fixed policy's plan, packed and checked. */
static Plan *plan_fixed(Graph *g, const Route *r, const PlanOpts *o, const DeviceProfile *dev) {
  Plan *pl = plan_base(g, r, o, dev);
  int64_t baseline = pl->baseline_bytes;
  PlanVariant v = {.planned = o->policy};
  bool *sel = NULL, rec = false;
  RecomputeOpts ro = {.target = pl->layer_peak_bytes, .max_chain = PLAN_RECOMPUTE_CHAIN};
  switch (o->policy) {
  case POL_NONE: case POL_LIVENESS: break;
  case POL_RECOMPUTE:
    /* --segment: checkpoint segments rebuilt once each (Chen et al.'s
     * checkpointing, speed-centric throughout). */
    rec = true;
    if (o->segment) ro.target = INT64_MAX, ro.seg_bytes = o->segment;
    break;
  case POL_OFFLOAD: case POL_SUPERNEURONS:
    /* offload: what hides fully. superneurons: cheap layers recomputed;
     * everything still read by backward (conv outputs and the checkpoints
     * recomputation keeps) offloaded, waits at the next step: the smallest
     * footprint. */
    v.sel = sel = plan_offload_candidates(g);
    if (o->policy == POL_OFFLOAD) v.hidden_only = true;
    else rec = true, v.lead = -1, ro.max_chain = 2, ro.ck_offloaded = true;
    break;
  case POL_AUTO: unreachable();
  }
  if (rec) {
    pl->checkpoints = recompute_plan(g, pl, &ro);
    pl->seg_bytes = ro.seg_bytes;
  }
  plan_finish(g, pl, dev, &v, rec, baseline, NULL);
  plan_pack(g, pl);
  free(sel);
  return pl;
}

double plan_smallest_search_seconds = 0;

Plan *plan_try(Graph *g, const Route *r, const PlanOpts *o) {
  const DeviceProfile *dev = device_find(o->device ? o->device : "h200");
  if (o->policy != POL_AUTO) return plan_fixed(g, r, o, dev);
  int64_t budget = o->budget ? o->budget : device_budget(dev);
  int64_t host = o->host_budget ? o->host_budget : device_host_budget(dev);
  return search_auto(g, r, o, dev, budget, host);
}

Plan *plan_build(Graph *g, const Route *r, const PlanOpts *o) {
  const DeviceProfile *dev = device_find(o->device ? o->device : "h200");
  int64_t budget = o->budget ? o->budget : device_budget(dev);
  int64_t host = o->host_budget ? o->host_budget : device_host_budget(dev);
  Plan *pl;
  if (o->policy == POL_AUTO) {
    pl = search_auto(g, r, o, dev, budget, host);
    if (!pl) {
      SearchSmallest sm = search_smallest(g, r, o, dev, budget, host,
                                          plan_smallest_search_seconds);
      const char *most = sm.exact ? "" : "at most ";
      if (sm.arena != INT64_MAX && sm.host != INT64_MAX)
        fatal(EXIT_BADINPUT, "budget %s and host budget %s are too small for this model at batch "
              "%d: the smallest budget that fits is %s%s (%lld bytes), under the host budget %s; "
              "the smallest host budget that fits is %s%s (%lld bytes), under the budget %s",
              fmt_bytes(budget), fmt_bytes(host), g->batch, most, fmt_bytes(sm.arena),
              (long long)sm.arena, fmt_bytes(host), most, fmt_bytes(sm.host), (long long)sm.host,
              fmt_bytes(budget));
      if (sm.arena != INT64_MAX)
        fatal(EXIT_BADINPUT, "budget %s is too small for this model at batch %d: the smallest "
              "budget that fits is %s%s (%lld bytes), under the host budget %s",
              fmt_bytes(budget), g->batch, most, fmt_bytes(sm.arena), (long long)sm.arena,
              fmt_bytes(host));
      if (sm.host != INT64_MAX)
        fatal(EXIT_BADINPUT, "host budget %s is too small for this model at batch %d under the "
              "device budget %s: the smallest host budget that fits is %s%s (%lld bytes); "
              "give --host-budget or a larger --budget", fmt_bytes(host), g->batch,
              fmt_bytes(budget), most, fmt_bytes(sm.host), (long long)sm.host);
      if (sm.any != INT64_MAX)
        fatal(EXIT_BADINPUT, "budget %s is too small for this model at batch %d: no plan fits "
              "under the host budget %s; without it, a device arena of at least %s (%lld bytes) "
              "would be needed; give a larger --host-budget", fmt_bytes(budget), g->batch,
              fmt_bytes(host), fmt_bytes(sm.any), (long long)sm.any);
      fatal(EXIT_BADINPUT, "budget %s is too small for this model at batch %d: no plan was "
            "found within the search's time; give a larger --budget or --host-budget",
            fmt_bytes(budget), g->batch);
    }
    return pl;
  }
  pl = plan_fixed(g, r, o, dev);
  /* An explicit budget binds every policy; the host budget binds every policy. */
  if (o->budget && pl->arena_bytes > budget)
    fatal(EXIT_BADINPUT, "budget %s is too small: policy %s needs %s (%lld bytes); "
          "policy auto picks the fastest plan that fits a budget",
          fmt_bytes(budget), policy_name(o->policy), fmt_bytes(pl->arena_bytes),
          (long long)pl->arena_bytes);
  if (pl->host_bytes > host)
    fatal(EXIT_BADINPUT, "host budget %s is too small: policy %s needs a %s (%lld bytes) pinned "
          "host arena; give --host-budget SIZE, or policy auto", fmt_bytes(host),
          policy_name(o->policy), fmt_bytes(pl->host_bytes), (long long)pl->host_bytes);
  return pl;
}

void plan_dump(const Graph *g, const Plan *pl, const char *pass, FILE *f) {
  if (strcmp(pass, "route") == 0) route_dump(g, pl->route, f);
  else if (strcmp(pass, "liveness") == 0) liveness_dump(g, pl, f);
  else if (strcmp(pass, "offsets") == 0) offsets_dump(g, pl, f);
  else if (strcmp(pass, "recompute") == 0) recompute_dump(g, pl, f);
  else if (strcmp(pass, "offload") == 0) offload_dump(g, pl, f);
  else if (strcmp(pass, "auto") == 0) {
    if (!pl->auto_log) {
      fprintf(f, "auto: policy %s was given, no candidates were compared\n",
              policy_name(pl->opts.policy));
      return;
    }
    fprintf(f, "auto: candidates compared (device budget %s, host budget %s); chosen: the "
            "fastest that fits.\nThe candidates do not depend on the budgets (search.c); a "
            "bound skips what cannot fit or cannot\nbe faster than the best found. An arena '>=' "
            "was not packed: its live bytes (a lower bound).\n'fits': fits by them and is the "
            "fastest so far; the last one is packed at the end (the\nchosen line gives its "
            "arenas). 'cut short': lower bounds of its arenas already exceed a\nbudget; "
            "'skipped': what every plan of that chain holds when the backward pass starts\n"
            "exceeds the budgets; 'dominated': the same plan without offload (or with the state "
            "on\nthe device) fits or is slower than the best, and copies only add time; 'bound': "
            "compute,\none rebuild of what the chain drops and its persistent state's copies "
            "already reach the best\n"
            "%3s  %-6s %11s %10s %13s  %s\n%s", fmt_bytes(pl->budget),
            fmt_bytes(pl->host_budget), "#", "", "arena", "host", "est. step", "plan",
            pl->auto_log);
  } else {
    fprintf(stderr, "snc: error: unknown pass '%s' for --dump (route, liveness, recompute, "
            "offload, offsets, schedule, auto)\n", pass);
    exit(EXIT_USAGE);
  }
}
