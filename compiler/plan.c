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

/* The estimated step time: compute and recompute steps each take
 * max(flops / rate, bytes / bandwidth); copies overlap compute except for the
 * exposed part (offload.c), and never go faster than the link allows. */
static void estimate(const Graph *g, Plan *pl, const DeviceProfile *dev) {
  const Route *r = pl->route;
  double *t = offload_step_times(g, pl, dev);
  pl->compute_seconds = pl->recompute_seconds = pl->step_flops = pl->recompute_flops = 0;
  double copy_off = 0, copy_pf = 0;
  for (int s = 0; s < r->train_steps; s++) {
    const Step *st = &r->s[s];
    if (st->node < 0) {
      double tau = (double)pl->inst[st->in[0]].bytes / dev->link_bw;
      if (st->kind == SK_OFFLOAD) copy_off += tau;
      else copy_pf += tau;
      continue;
    }
    const Node *n = &g->n[st->node];
    double fl = op_info[n->op].flops(g, n);
    pl->step_flops += fl;
    if (st->kind == SK_RECOMPUTE) {
      pl->recompute_flops += fl;
      pl->recompute_seconds += t[s];
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

/* Forward activations (and BN's saved statistics): offload_plan takes those
 * still read by the backward pass after recomputation (the checkpoints). */
static bool *offload_candidates(const Graph *g) {
  bool *sel = xcalloc((size_t)g->nt + 1, sizeof(bool));
  for (int t = 0; t < g->nt; t++) {
    const Tensor *x = &g->t[t];
    if ((x->kind != TK_ACT && x->kind != TK_AUX) || x->producer < 0) continue;
    const Node *n = &g->n[x->producer];
    if (n->phase != PH_FORWARD) continue;
    sel[t] = true;
  }
  return sel;
}

/* Keeps only the first `k` selected tensors in forward order (the ones idle
 * longest between forward and backward). */
static bool *first_k(const Graph *g, const bool *sel, int k) {
  bool *out = xcalloc((size_t)g->nt + 1, sizeof(bool));
  for (int i = 0; i < g->nfwd && k > 0; i++) {
    const Node *n = &g->n[i];
    for (int o = 0; o < n->nout && k > 0; o++)
      if (n->out[o] >= 0 && sel[n->out[o]]) out[n->out[o]] = true, k--;
  }
  return out;
}

static int count_sel(const Graph *g, const bool *sel) {
  int n = 0;
  for (int t = 0; t < g->nt; t++) n += sel[t];
  return n;
}

/* One plan: the passes in order. `recompute_target` < 0: no recomputation;
 * `sel` NULL: no offload. */
static Plan *plan_once(Graph *g, const PlanOpts *o, const DeviceProfile *dev, Policy planned,
                       int64_t recompute_target, const bool *sel, bool hidden_only, int lead,
                       int host_state) {
  Plan *pl = xcalloc(1, sizeof *pl);
  pl->opts = *o;
  pl->opts.device = dev->name;
  pl->batch = g->batch;
  pl->budget = o->budget ? o->budget : device_budget(dev);
  pl->planned = planned;
  pl->route = route_build(g);
  liveness_compute(g, pl);
  /* The baseline is the none policy's arena: the primary instances, each in
   * its own region (instances added by later passes are not in it). */
  int64_t baseline = pl->baseline_bytes + pl->aliased_bytes, layer_peak = pl->layer_peak_bytes;
  /* Recompute chains: unbounded alone (fewest checkpoints kept), 2 steps when
   * checkpoints are offloaded (a rebuild needs all its checkpoints prefetched
   * at once). */
  if (recompute_target >= 0)
    recompute_plan(g, pl, recompute_target ? recompute_target : layer_peak, sel ? 2 : INT32_MAX);
  if (sel) offload_plan(g, pl, sel, dev, hidden_only, lead);
  /* host_state 1: optimizer state on the host; 2: parameters too. */
  if (host_state) offload_persistent(g, pl, dev, host_state > 1);
  /* In-place elementwise steps pay where recomputed and prefetched copies
   * are short-lived; the plain liveness plan is left as packed. */
  if (recompute_target >= 0 || sel) liveness_inplace(g, pl);
  pl->baseline_bytes = baseline;
  offsets_assign(pl, planned != POL_NONE);
  offsets_host(pl);
  /* The checker is O(n log n): every plan snc produces is verified. */
  if (offsets_check(g, pl, stderr))
    internal_error(__FILE__, __LINE__, "the offset plan has overlapping instances");
  estimate(g, pl, dev);
  return pl;
}

static void plan_free(Plan *pl) {
  if (!pl) return;
  route_free(pl->route);
  free(pl->inst), free(pl->tensor_inst), free(pl->live_bytes), free(pl->high_water), free(pl);
}

/* auto: the fastest estimated plan that fits the budget. Candidates, from
 * cheapest: liveness; offload of what hides fully; recomputation; both; then
 * recomputation plus offload of the first k checkpoints (exposed copies
 * allowed), with the smallest k that fits found by bisection: as few
 * offloads as the budget requires, the longest-idle ones first; then the
 * superneurons plan; then that plus optimizer state in host memory; then
 * parameters in host memory too (depth limited by host memory). If
 * nothing fits, the error names the smallest arena seen. */
static Plan *plan_auto(Graph *g, const PlanOpts *o, const DeviceProfile *dev, int64_t budget,
                       int64_t *smallest) {
  Plan *best = NULL;
  *smallest = INT64_MAX;
  bool *acts = offload_candidates(g);
  for (int c = 0; c < 4; c++) {
    bool rec = c >= 2, off = c & 1;
    Plan *pl = plan_once(g, o, dev, c == 0 ? POL_LIVENESS : c == 1 ? POL_OFFLOAD : c == 2
                         ? POL_RECOMPUTE : POL_SUPERNEURONS, rec ? budget : -1,
                         off ? acts : NULL, true, 0, false);
    if (pl->arena_bytes < *smallest) *smallest = pl->arena_bytes;
    if (pl->arena_bytes <= budget && (!best || pl->est_step_seconds < best->est_step_seconds)) {
      plan_free(best);
      best = pl;
    } else {
      plan_free(pl);
    }
  }
  if (!best) {
    /* Bisection on k; invariant: `fit` is the plan at hi, which fits. */
    int K = count_sel(g, acts), lo = 0, hi = K;
    Plan *fit = plan_once(g, o, dev, POL_SUPERNEURONS, budget, acts, false, 1, 0);
    if (fit->arena_bytes < *smallest) *smallest = fit->arena_bytes;
    if (fit->arena_bytes > budget) {
      /* Last resort: the smallest footprint (recompute as memory-centric as
       * the layer peak asks). */
      plan_free(fit);
      fit = plan_once(g, o, dev, POL_SUPERNEURONS, 0, acts, false, -1, 0);
      if (fit->arena_bytes < *smallest) *smallest = fit->arena_bytes;
      if (fit->arena_bytes > budget) {
        /* ... then optimizer state, then parameters too, on the host. */
        for (int hs = 1; hs <= 2 && fit && fit->arena_bytes > budget; hs++) {
          plan_free(fit);
          fit = plan_once(g, o, dev, POL_SUPERNEURONS, 0, acts, false, -1, hs);
          if (fit->arena_bytes < *smallest) *smallest = fit->arena_bytes;
        }
        if (fit->arena_bytes > budget) plan_free(fit), fit = NULL;
      }
      lo = hi;
    }
    while (fit && lo < hi) {
      int mid = lo + (hi - lo) / 2;
      bool *sel = first_k(g, acts, mid);
      Plan *pl = plan_once(g, o, dev, POL_SUPERNEURONS, budget, sel, false, 1, 0);
      free(sel);
      if (pl->arena_bytes <= budget) {
        plan_free(fit);
        fit = pl;
        hi = mid;
      } else {
        plan_free(pl);
        lo = mid + 1;
      }
    }
    best = fit;
  }
  free(acts);
  return best;
}

/* The plan for o->policy, without the budget check. */
static Plan *build(Graph *g, const PlanOpts *o, int64_t *smallest) {
  const DeviceProfile *dev = device_find(o->device ? o->device : "h200");
  int64_t budget = o->budget ? o->budget : device_budget(dev);
  *smallest = -1;
  switch (o->policy) {
  case POL_NONE: return plan_once(g, o, dev, POL_NONE, -1, NULL, false, 0, 0);
  case POL_LIVENESS: return plan_once(g, o, dev, POL_LIVENESS, -1, NULL, false, 0, 0);
  case POL_RECOMPUTE: return plan_once(g, o, dev, POL_RECOMPUTE, 0, NULL, false, 0, 0);
  case POL_OFFLOAD: {
    bool *sel = offload_candidates(g);
    Plan *pl = plan_once(g, o, dev, POL_OFFLOAD, -1, sel, true, 0, 0);
    free(sel);
    return pl;
  }
  case POL_SUPERNEURONS: {
    /* Cheap layers recomputed; everything still read by backward (conv
     * outputs and the checkpoints recomputation keeps) offloaded, waits at
     * the next step: the smallest footprint. */
    bool *sel = offload_candidates(g);
    Plan *pl = plan_once(g, o, dev, POL_SUPERNEURONS, 0, sel, false, -1, 0);
    free(sel);
    return pl;
  }
  case POL_AUTO: {
    Plan *pl = plan_auto(g, o, dev, budget, smallest);
    if (pl) pl->opts.policy = POL_AUTO;
    return pl;
  }
  }
  unreachable();
}

Plan *plan_build(Graph *g, const PlanOpts *o) {
  int64_t smallest;
  Plan *pl = build(g, o, &smallest);
  const DeviceProfile *dev = device_find(o->device ? o->device : "h200");
  int64_t budget = o->budget ? o->budget : device_budget(dev);
  if (!pl)
    fatal(EXIT_BADINPUT, "budget %s is too small for this model at batch %d: the smallest "
          "budget that fits is %s (%lld bytes)", fmt_bytes(budget), g->batch,
          fmt_bytes(smallest), (long long)smallest);
  /* An explicit budget binds every policy; auto is bound by the device's
   * memory too. */
  if (o->budget && pl->arena_bytes > budget)
    fatal(EXIT_BADINPUT, "budget %s is too small: policy %s needs %s (%lld bytes); "
          "policy auto picks the fastest plan that fits a budget",
          fmt_bytes(budget), policy_name(o->policy), fmt_bytes(pl->arena_bytes),
          (long long)pl->arena_bytes);
  return pl;
}

void plan_dump(const Graph *g, const Plan *pl, const char *pass, FILE *f) {
  if (strcmp(pass, "route") == 0) route_dump(g, pl->route, f);
  else if (strcmp(pass, "liveness") == 0) liveness_dump(g, pl, f);
  else if (strcmp(pass, "offsets") == 0) offsets_dump(g, pl, f);
  else if (strcmp(pass, "recompute") == 0) recompute_dump(g, pl, f);
  else if (strcmp(pass, "offload") == 0) offload_dump(g, pl, f);
  else {
    fprintf(stderr, "snc: error: unknown pass '%s' for --dump (route, liveness, recompute, "
            "offload, offsets, schedule)\n", pass);
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
  int64_t smallest;
  Plan *pl = build(g, o, &smallest);
  for (int i = 0; i < g->nt; i++) free(g->t[i].data), g->t[i].data = NULL;
  if (!pl) return smallest;
  int64_t a = pl->arena_bytes;
  plan_free(pl);
  return a;
}

/* Doubling then bisection: O(log B) plans, assuming the arena grows with the
 * batch (it does: every activation scales with it). */
int plan_max_batch(const char *model, const char *input, const TrainOpts *t, const PlanOpts *o) {
  const DeviceProfile *dev = device_find(o->device ? o->device : "h200");
  int64_t budget = o->budget ? o->budget : device_budget(dev);
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
