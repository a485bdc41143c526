/* plan.c — the planning driver: runs the passes for a policy, estimates the
 * step time, enforces the device and host budgets, and answers max-batch.
 *
 * Policies: none (every instance its own region), liveness (greedy packing
 * of lifetimes), recompute (cheap layers rebuilt, memory-centric down to the
 * layer peak), offload (what hides fully), superneurons (both, copies
 * synchronous: the smallest footprint) and auto (the fastest plan that fits,
 * from the candidates listed at plan_auto; `snc plan --dump auto` prints
 * them). Plan.planned records which kind of plan auto chose.
 *
 * Cost model (cost.c): each training step takes max(flops / device FLOP
 * rate, bytes touched / memory bandwidth), bytes touched being its inputs,
 * outputs and workspace (per op class with a calibrated profile); copies
 * overlap compute except for their exposed part (offload.c). Eval steps are not part of the training step.
 *
 * Not here: the passes themselves (route.c, liveness.c, recompute.c,
 * offload.c, offsets.c) or output formats (plan_print.c). */
#include "snc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The estimated step time: compute and recompute steps each take
 * max(flops / rate, bytes / bandwidth); copies overlap compute except for the
 * exposed part (offload.c), and never go faster than the link allows. */
static void estimate(const Graph *g, Plan *pl, const DeviceProfile *dev) {
  const Route *r = pl->route;
  double *t = cost_step_times(g, pl, dev);
  pl->compute_seconds = pl->recompute_seconds = pl->step_flops = pl->recompute_flops = 0;
  double copy_off = 0, copy_pf = 0;
  for (int s = 0; s < r->train_steps; s++) {
    const Step *st = &r->s[s];
    if (st->node < 0) {
      double tau = cost_step_seconds(g, pl, s, dev);
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

enum { OFFLOAD_MIN_BYTES = 4 << 10 };
/* Recomputation alone: the longest chain of cheap layers rebuilt from one
 * checkpoint (a deep ResNet stage's block outputs would otherwise all be
 * rebuilt from the stage's first, and memory-centric rebuilds of such a
 * chain cost its length squared). */
enum { RECOMPUTE_CHAIN = 64 };
/* Forward nodes above which auto's ladder stops at the first clearly slower
 * rung (a 2,498-layer ResNet has 8,335). */
enum { LARGE_GRAPH_NODES = 2000 };

/* Forward activations (and BN's saved statistics): offload_plan takes those
 * still read by the backward pass after recomputation (the checkpoints). */
static bool *offload_candidates(const Graph *g) {
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

/* One candidate plan's decisions. */
typedef struct Cand {
  Policy planned;
  int64_t rc_target;       // < 0: no recomputation; 0: the layer peak; else live-byte target
  int64_t seg_bytes;       // 0: cheap layers rebuilt; > 0: checkpoint segments (recompute.c)
  const bool *sel;         // tensors to offload (NULL: none)
  bool hidden_only;        // offload only copies that hide fully
  int lead;                // offload_plan's max_lead
  int host_state;          // 1: optimizer state on the host; 2: parameters too
  bool strict;             // host_state: the moved state still counts against rc_target
} Cand;

/* Persistent kinds offload_persistent moves at host-state level hs. */
static bool moves_to_host(TensorKind k, int hs) {
  return (hs >= 1 && k == TK_OPT) || (hs >= 2 && k == TK_PARAM);
}

/* Their arena bytes. */
static int64_t moved_bytes(const Graph *g, int hs) {
  int64_t b = 0;
  for (int t = 0; t < g->nt; t++)
    if (moves_to_host(g->t[t].kind, hs)) b += arena_align(tensor_bytes(&g->t[t]));
  return b;
}

/* One plan: the passes in order, all but the device arena's packing (the
 * host arena is packed; the estimate made). With `floor` (auto's search), a
 * plan that cannot fit the budgets is cut short after recomputation and
 * activation offload: where the lower bounds of liveness_floors already
 * exceed them, the later passes (persistent state on the host, in-place
 * steps, the host arena, the estimate) are not run; *cut says so, and
 * peak_live_bytes and host_bytes are then those bounds, est_step_seconds NaN. */
static Plan *plan_passes(Graph *g, const PlanOpts *o, const DeviceProfile *dev, const Cand *c,
                         const int64_t floor[2], bool *cut) {
  Plan *pl = xcalloc(1, sizeof *pl);
  pl->opts = *o;
  pl->opts.device = dev->name;
  pl->batch = g->batch;
  pl->budget = o->budget ? o->budget : device_budget(dev);
  pl->host_budget = o->host_budget ? o->host_budget : device_host_budget(dev);
  pl->planned = c->planned;
  pl->seg_bytes = c->seg_bytes;
  pl->route = route_build(g);
  liveness_compute(g, pl);
  /* The baseline is the none policy's arena: the primary instances, each in
   * its own region (instances added by later passes are not in it). */
  int64_t baseline = pl->baseline_bytes + pl->aliased_bytes, layer_peak = pl->layer_peak_bytes;
  /* Recompute chains: unbounded alone (fewest checkpoints kept), 2 steps when
   * checkpoints are offloaded (a rebuild needs all its checkpoints prefetched
   * at once). */
  if (c->rc_target >= 0) {
    /* The live-byte target is the device budget once persistent state has
     * moved to the host (offload_persistent, below): the bytes that move
     * do not count against it here, but the device copies of those the
     * steps at hand use do (at most twice the most one node uses). */
    int64_t target = c->rc_target;
    if (c->host_state && !c->strict && target > 0 && target < INT64_MAX / 2) {
      int64_t moved = moved_bytes(g, c->host_state), most = 0;
      for (int i = 0; i < g->nn; i++) {
        const Node *n = &g->n[i];
        int64_t b = 0;
        for (int k = 0; k < n->nin + n->nout; k++) {
          int t = k < n->nin ? n->in[k] : n->out[k - n->nin];
          if (t >= 0 && moves_to_host(g->t[t].kind, c->host_state))
            b += arena_align(tensor_bytes(&g->t[t]));
        }
        if (b > most) most = b;
      }
      if (moved > 2 * most) target += moved - 2 * most;
    }
    RecomputeOpts ro = {.target = target ? target : layer_peak,
                        .max_chain = c->sel && !c->seg_bytes ? 2 : RECOMPUTE_CHAIN,
                        .seg_bytes = c->seg_bytes,
                        .ck_offloaded = c->sel != NULL};
    pl->checkpoints = recompute_plan(g, pl, &ro);
  }
  if (c->sel) offload_plan(g, pl, c->sel, dev, c->hidden_only, c->lead);
  if (cut) *cut = false;
  if (floor) {
    int64_t dev_floor, host_floor;
    liveness_floors(g, pl, &dev_floor, &host_floor);
    if (!c->host_state) dev_floor += pl->persistent_bytes;
    if (dev_floor > floor[0] || host_floor > floor[1]) {
      pl->peak_live_bytes = dev_floor, pl->host_bytes = host_floor;
      pl->est_step_seconds = NAN;
      *cut = true;
      return pl;
    }
  }
  if (c->host_state) offload_persistent(g, pl, dev, c->host_state > 1);
  /* In-place elementwise steps pay where recomputed and prefetched copies
   * are short-lived; the plain liveness plan is left as packed. */
  if (c->rc_target >= 0 || c->sel) liveness_inplace(g, pl);
  pl->baseline_bytes = baseline;
  offsets_host(pl);
  estimate(g, pl, dev);
  return pl;
}

/* Places the device instances and checks the whole plan. The checker is
 * O(n log n): every plan snc produces is verified. */
static void plan_pack(const Graph *g, Plan *pl) {
  offsets_assign(pl, pl->planned != POL_NONE);
  if (offsets_check(g, pl, stderr))
    internal_error(__FILE__, __LINE__, "the offset plan has overlapping instances");
}

static Plan *plan_once(Graph *g, const PlanOpts *o, const DeviceProfile *dev, const Cand *c) {
  Plan *pl = plan_passes(g, o, dev, c, NULL, NULL);
  plan_pack(g, pl);
  return pl;
}

static void plan_free(Plan *pl) {
  if (!pl) return;
  route_free(pl->route);
  free(pl->inst), free(pl->tensor_inst), free(pl->live_bytes), free(pl->high_water);
  free(pl->auto_log), free(pl->ckpt), free(pl);
}

/* The search in plan_auto: the fastest plan that fits both budgets, and the
 * smallest arena and host arena seen (for the error when nothing fits). */
/* A candidate whose live bytes and host arena fit (its device arena not yet
 * packed), kept for the end of the search (finish()). */
typedef struct Fit {
  Cand c;                  // c.sel owned (a copy)
  double est;
  int tried;               // its number in the log
} Fit;

typedef struct Search {
  int64_t budget, host_budget;
  Plan *best;              // the fastest fit so far (by live bytes; packed by finish())
  int best_tried;
  bool best_packed;        // ... already packed (consider(): a tight fit)
  Fit *fit;                // every candidate that fits by live bytes
  int nfit, capfit;
  int nt;                  // tensors (the size of a Cand.sel)
  int64_t smallest;        // smallest arena among plans within the host budget
  int64_t smallest_host;   // smallest host arena among plans within the device budget
  int64_t smallest_any;    // smallest arena of all
  int tried;
  int last_checkpoints;    // the last candidate's Plan.checkpoints
  int64_t last_arena;      // ... and arena (live bytes where not packed)
  double last_est;         // ... and estimate
  char *log;               // the candidates, a line each (Plan.auto_log)
  size_t nlog;
  int64_t turn;            // held_at_turn()
  int64_t pers;            // bytes of the persistent state
  int64_t moved[3];        // ... of it on the host at host-state level 0, 1, 2
  bool no_skip;            // plan every candidate (the error path's smallest arenas)
  bool skipped;            // a candidate was skipped by `held`
} Search;

static const char *cand_name(const Cand *c, const Plan *pl) {
  static char buf[160];
  int n = snprintf(buf, sizeof buf, "%s", policy_name(c->planned));
  if (c->seg_bytes)
    n += snprintf(buf + n, sizeof buf - (size_t)n, ", checkpoints every %s (%d kept)",
                  fmt_bytes(c->seg_bytes), pl->checkpoints);
  else if (c->rc_target >= 0)
    n += snprintf(buf + n, sizeof buf - (size_t)n, ", cheap layers rebuilt");
  if (c->sel) {
    n += snprintf(buf + n, sizeof buf - (size_t)n, ", offload %s",
                  c->hidden_only ? "where hidden" : "exposed allowed");
    if (c->lead < 0) n += snprintf(buf + n, sizeof buf - (size_t)n, ", synchronous");
    else if (c->lead) n += snprintf(buf + n, sizeof buf - (size_t)n, ", lead <= %d", c->lead);
  }
  if (c->host_state) snprintf(buf + n, sizeof buf - (size_t)n, ", %s on the host%s",
                              c->host_state > 1 ? "parameters and optimizer state"
                                                : "optimizer state",
                              c->strict ? " (counted in the recomputation target)" : "");
  return buf;
}

typedef enum { C_NOFIT, C_FITS, C_SLOWER } Verdict;

static bool fits(const Search *sr, const Plan *pl) {
  return pl->arena_bytes <= sr->budget && pl->host_bytes <= sr->host_budget;
}

static void log_line(Search *sr, const char *line);
static void log_cand(Search *sr, const Cand *c, const Plan *pl, Verdict v, bool packed) {
  char arena[32];
  snprintf(arena, sizeof arena, "%s%s", packed ? "" : ">=",
           fmt_bytes(packed ? pl->arena_bytes : pl->peak_live_bytes));
  bool cut = isnan(pl->est_step_seconds);
  char host[32], est[32] = "(cut short)";
  snprintf(host, sizeof host, "%s%s", cut ? ">=" : "", fmt_bytes(pl->host_bytes));
  if (!cut) snprintf(est, sizeof est, "%10.3f ms", pl->est_step_seconds * 1e3);
  char *line = xasprintf("%3d  %-6s %11s %10s %13s  %s\n", sr->tried,
                         v == C_FITS ? "fits" : v == C_SLOWER ? "slower" : "-", arena, host, est,
                         cand_name(c, pl));
  log_line(sr, line);
  free(line);
}

/* A lower bound, for every plan without checkpoint recomputation, of the
 * bytes held on the device and the host together when the backward pass
 * starts: the outputs of expensive forward layers that a backward step reads.
 * The cheap rule never drops them (recompute.c), so each is there, in the
 * device arena or, offloaded, in the host arena. */
static int64_t held_at_turn(const Graph *g) {
  bool *seen = xcalloc((size_t)g->nt + 1, sizeof(bool));
  int64_t b = 0;
  for (int i = 0; i < g->nn; i++) {
    const Node *n = &g->n[i];
    if (n->phase != PH_BACKWARD) continue;
    for (int k = 0; k < n->nin; k++) {
      int t = n->in[k];
      if (t < 0 || seen[t] || g->t[t].kind != TK_ACT || g->t[t].producer < 0) continue;
      const Node *p = &g->n[g->t[t].producer];
      if (p->phase != PH_FORWARD || node_cost(g, p) != COST_EXPENSIVE) continue;
      seen[t] = true;
      b += tensor_bytes(&g->t[t]);
    }
  }
  free(seen);
  return b;
}

/* Plans candidate c; keeps it if it is the fastest fit so far. A plan fits
 * here when its live bytes (a lower bound of the device arena) and its host
 * arena fit the budgets; its device arena is packed at the end (finish()),
 * once, for the fastest of them, unless it is a tight fit (packed at once).
 * Also packed: while nothing fits yet, a plan that may have the smallest
 * host arena under the device budget (for the error message). */
static Verdict consider(Search *sr, Graph *g, const PlanOpts *o, const DeviceProfile *dev,
                        const Cand *c) {
  /* Without checkpoints, what must be held when the backward pass starts
   * cannot fit both budgets together, or (nothing offloaded) the device
   * budget: not planned (the verdict it would get). */
  int64_t held = sr->turn + sr->pers, held_dev = sr->turn + sr->pers - sr->moved[c->host_state];
  bool skip = !c->seg_bytes && !sr->no_skip && sr->turn &&
              (held > sr->budget + sr->host_budget || (!c->sel && held_dev > sr->budget));
  if (skip) {
    sr->tried++, sr->skipped = true;
    sr->last_checkpoints = 0, sr->last_arena = 0, sr->last_est = NAN;
    char *line = xasprintf("%3d  %-6s %11s %10s %13s  %s; %s held at the turn%s\n", sr->tried,
                           "-", "", "", "(skipped)", cand_name(c, &(Plan){0}),
                           fmt_bytes(c->sel ? held : held_dev), c->sel ? "" : " on the device");
    log_line(sr, line);
    free(line);
    return C_NOFIT;
  }
  bool cut;
  Plan *pl = plan_passes(g, o, dev, c, (const int64_t[2]){sr->budget, sr->host_budget}, &cut);
  sr->tried++;
  /* The bound is checked wherever such a plan is made: its arenas hold at
   * least the expensive layers' outputs (finished: and the persistent state). */
  if (!c->seg_bytes && sr->turn &&
      (pl->peak_live_bytes + pl->host_bytes < (cut ? sr->turn : held) ||
       (!c->sel && pl->peak_live_bytes < (cut ? sr->turn : held_dev))))
    internal_error(__FILE__, __LINE__, "a plan without checkpoints holds less than the outputs "
                   "of expensive layers read by backward");
  sr->last_checkpoints = pl->checkpoints;
  sr->last_arena = pl->peak_live_bytes;
  sr->last_est = pl->est_step_seconds;
  bool host_ok = pl->host_bytes <= sr->host_budget, live_ok = pl->peak_live_bytes <= sr->budget;
  bool faster = !sr->best || pl->est_step_seconds < sr->best->est_step_seconds;
  /* Packed where it can be the best, or (nothing fitting yet) where it may
   * be the smallest host arena under the device budget; the smallest device
   * arenas are tracked by live bytes (a lower bound; plan_build's error
   * finds the true smallest budget by bisection). */
  bool fit = !cut && live_ok && host_ok;
  /* Within 1/8 of the budget, packing may not fit (fragmentation): such a
   * plan is packed now, so that the search goes on where it does not. */
  bool tight = pl->peak_live_bytes > sr->budget - sr->budget / 8;
  bool pack = !cut && ((fit && faster && tight) ||
                       (!fit && !sr->best && live_ok && pl->host_bytes < sr->smallest_host));
  int64_t arena = pl->peak_live_bytes;
  if (pack) {
    plan_pack(g, pl);
    arena = pl->arena_bytes;
    if (pl->arena_bytes <= sr->budget && pl->host_bytes < sr->smallest_host)
      sr->smallest_host = pl->host_bytes;
    fit = fit && fits(sr, pl);
  }
  Verdict v = !fit ? C_NOFIT : faster ? C_FITS : C_SLOWER;
  if (arena < sr->smallest_any) sr->smallest_any = arena;
  if (host_ok && arena < sr->smallest) sr->smallest = arena;
  log_cand(sr, c, pl, v, pack);
  if (fit) {
    xgrow((void **)&sr->fit, &sr->capfit, sr->nfit + 1, sizeof *sr->fit);
    Fit *f = &sr->fit[sr->nfit++];
    *f = (Fit){.c = *c, .est = pl->est_step_seconds, .tried = sr->tried};
    if (c->sel) {
      bool *sel = xmalloc((size_t)sr->nt + 1);
      memcpy(sel, c->sel, (size_t)sr->nt + 1);
      f->c.sel = sel;
    }
  }
  if (v == C_FITS) {
    plan_free(sr->best);
    sr->best = pl, sr->best_tried = sr->tried, sr->best_packed = pack;
  } else {
    plan_free(pl);
  }
  return v;
}

static int by_est(const void *a, const void *b) {
  const Fit *x = a, *y = b;
  if (x->est != y->est) return x->est < y->est ? -1 : 1;
  return x->tried - y->tried;
}

static void log_line(Search *sr, const char *line) {
  size_t n = strlen(line);
  sr->log = xrealloc(sr->log, sr->nlog + n + 1);
  memcpy(sr->log + sr->nlog, line, n + 1);
  sr->nlog += n;
}

/* The end of the search: the fastest fit's device arena packed; where
 * packing leaves it over the budget (fragmentation), the next fastest fits
 * are planned again and packed, in order, until one fits (NULL if none). */
static Plan *finish(Search *sr, Graph *g, const PlanOpts *o, const DeviceProfile *dev) {
  Plan *pl = sr->best;
  sr->best = NULL;
  if (sr->nfit) qsort(sr->fit, (size_t)sr->nfit, sizeof *sr->fit, by_est);
  for (int k = -1; k < sr->nfit; k++) {
    int tried = sr->best_tried;
    if (k >= 0) {
      if (sr->fit[k].tried == sr->best_tried) continue;
      pl = plan_passes(g, o, dev, &sr->fit[k].c, NULL, NULL);
      tried = sr->fit[k].tried;
    }
    if (!pl) continue;
    if (k >= 0 || !sr->best_packed) plan_pack(g, pl);
    char *line = xasprintf("chosen: #%d, packed: arena %s%s\n", tried, fmt_bytes(pl->arena_bytes),
                           fits(sr, pl) ? "" : ", over the budget (fragmentation); next fastest");
    log_line(sr, line);
    free(line);
    if (fits(sr, pl)) break;
    if (pl->host_bytes <= sr->host_budget && pl->arena_bytes < sr->smallest)
      sr->smallest = pl->arena_bytes;
    plan_free(pl);
    pl = NULL;
  }
  for (int k = 0; k < sr->nfit; k++) free((void *)sr->fit[k].c.sel);
  free(sr->fit);
  sr->fit = NULL, sr->nfit = 0;
  return pl;
}

/* Bytes of the forward activations: the scale of the checkpoint ladder. */
static int64_t forward_act_bytes(const Graph *g) {
  int64_t a = 0;
  for (int i = 0; i < g->nfwd; i++)
    for (int k = 0; k < g->n[i].nout; k++) {
      int t = g->n[i].out[k];
      if (t >= 0 && g->t[t].kind == TK_ACT) a += tensor_bytes(&g->t[t]);
    }
  return a;
}

/* The checkpoint ladder (see plan_auto) with persistent state `hs`. */
static void run_ladder(Search *sr, Graph *g, const PlanOpts *o, const DeviceProfile *dev,
                       const bool *acts, int64_t A, int hs) {
  int64_t budget = sr->budget;
  static const int ladder[] = {2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256};
  int prev_ck = -1, slower = 0;
  /* Small segments first: they rebuild least per backward step, so the
   * first that fits tends to be the fastest and later ones are not packed. */
  for (size_t k = sizeof ladder / sizeof ladder[0]; k-- > 0;) {
    int64_t seg = A / ladder[k];
    if (seg < 1) continue;
    /* A rebuilt segment is live at once: one larger than the budget cannot
     * fit without rebuilding it again and again (and planning that costs
     * the segment's length squared). */
    if (seg > budget) continue;
    /* Variants: alone; checkpoints offloaded where the copies hide; all
     * checkpoints offloaded, exposed copies allowed. Segments go nested,
     * then memory-centric, where live bytes exceed the budget. */
    /* In this order; the first that fits ends the rung: each is at least
     * as fast as the ones after it (the same recomputation, more of the
     * copies exposed), but for the leads, where it is only likely. */
    static const int lead[] = {0, 0, 16, 4, 1, -1};
    double before = sr->best ? sr->best->est_step_seconds : INFINITY;
    bool gain = true;
    for (int v = 0; v < 6; v++) {
      bool off = v > 0;
      Cand cd = {.planned = off ? POL_SUPERNEURONS : POL_RECOMPUTE, .rc_target = budget,
                 .seg_bytes = seg, .sel = off ? acts : NULL, .hidden_only = v == 1,
                 .lead = lead[v], .host_state = hs};
      Verdict vd = consider(sr, g, o, dev, &cd);
      /* With state on the host, a target that no longer counts it can
       * leave too much to rebuild at once: once more counting it. */
      if (vd == C_NOFIT && hs) {
        cd.strict = true;
        vd = consider(sr, g, o, dev, &cd);
      }
      /* The same checkpoints as the rung before: the same plans. */
      if (!v && sr->last_checkpoints == prev_ck) break;
      if (!v) prev_ck = sr->last_checkpoints, slower = vd == C_SLOWER ? slower + 1 : 0;
      if (vd != C_NOFIT) {
        gain = sr->last_est < 0.99 * before;
        break;
      }
    }
    /* Larger segments only rebuild more: after three rungs in a row that
     * fit but are slower than the best, the rest are not planned; on large
     * graphs (planning time grows with them) already after one 10% slower,
     * or after one that fits but gains less than 1% on the best before it.
     * These make the candidates depend on the budget a little more. */
    if (slower >= 3 || (g->nfwd > LARGE_GRAPH_NODES && slower && sr->best &&
                        sr->last_est > 1.1 * sr->best->est_step_seconds))
      break;
    if (g->nfwd > LARGE_GRAPH_NODES && !gain) break;
  }
}

/* auto: the fastest estimated plan that fits the device and host budgets.
 * Candidates, in this order: liveness; offload of what hides fully;
 * recomputation of cheap layers; both. Then checkpoint recomputation
 * (expensive layers rebuilt too: recompute.c's checkpoint mode) over a
 * ladder of segment sizes, from half the forward activations down to a
 * 256th of them (rungs with a segment larger than the budget skipped), each
 * alone, then with its checkpoints offloaded where the copies hide, then
 * with all of them offloaded and copies allowed to run 16, 4 or 1 steps
 * ahead or synchronous (exposed time counted). Then the fixed recompute and superneurons
 * plans, and cheap recomputation plus offload of the first k activations
 * with the smallest k that fits (bisection). Only when nothing fits:
 * persistent state on the host. A candidate costs one pass over the route,
 * cut short where lower bounds already exceed a budget; only the fastest fit
 * is packed, at the end (finish(); tight fits at once, consider()).
 *
 * The candidates depend on the budget only through the live-byte target of
 * nested and memory-centric recomputation (and the skipped rungs); the
 * estimate not growing with the budget is a property tests check
 * (tests/test_planner.py), not one this construction guarantees. */
static Plan *plan_auto(Graph *g, const PlanOpts *o, const DeviceProfile *dev, Search *sr) {
  int64_t budget = sr->budget;
  bool *acts = offload_candidates(g);
  int64_t A = forward_act_bytes(g);
  /* Where the persistent state alone exceeds the budget, the search starts
   * with it on the host (optimizer state; parameters too if that is not
   * enough). */
  int64_t opt = 0, pers = 0;
  for (int t = 0; t < g->nt; t++) {
    TensorKind k = g->t[t].kind;
    if (k == TK_OPT) opt += arena_align(tensor_bytes(&g->t[t]));
    if (tensor_kind_persistent(k)) pers += arena_align(tensor_bytes(&g->t[t]));
  }
  int hs0 = pers < budget ? 0 : pers - opt < budget ? 1 : 2;
  sr->turn = held_at_turn(g), sr->pers = pers;
  for (int hs = 1; hs <= 2; hs++) sr->moved[hs] = moved_bytes(g, hs);
  for (int hs = hs0; hs <= 2; hs++) {
    /* Persistent state on the host (hs 1: optimizer state, 2: parameters
     * too) only where nothing fits with less there, or the best plan so far
     * pays more beyond its compute than moving that state would cost (a copy
     * of it in and out per step): moving optimizer state can beat copying
     * or rebuilding activations. On large graphs (planning time) only where
     * the best plan is slow (twice its compute alone). */
    if (hs > hs0 && sr->best) {
      const Plan *b = sr->best;
      int64_t moved = moved_bytes(g, hs);
      double move = cost_copy_seconds((double)moved, COPY_D2H, dev) +
                    cost_copy_seconds((double)moved, COPY_H2D, dev);
      bool worth = g->nfwd > LARGE_GRAPH_NODES ? b->est_step_seconds > 2 * b->compute_seconds
                                               : b->est_step_seconds - b->compute_seconds > move;
      if (!worth) break;
    }
    for (int c = 0; c < 4; c++) {
      bool rec = c >= 2, off = c & 1;
      Cand cd = {.planned = c == 0 ? POL_LIVENESS : c == 1 ? POL_OFFLOAD
                            : c == 2 ? POL_RECOMPUTE : POL_SUPERNEURONS,
                 .rc_target = rec ? budget : -1, .sel = off ? acts : NULL, .hidden_only = true,
                 .host_state = hs};
      consider(sr, g, o, dev, &cd);
    }
    run_ladder(sr, g, o, dev, acts, A, hs);
    /* The fixed policies' own plans (recompute, superneurons; liveness and
     * offload are the first candidates): auto is never slower than a fixed
     * policy whose plan fits. */
    Cand fx = {.planned = POL_RECOMPUTE, .rc_target = 0, .host_state = hs};
    consider(sr, g, o, dev, &fx);
    fx = (Cand){.planned = POL_SUPERNEURONS, .rc_target = 0, .sel = acts, .lead = -1,
                .host_state = hs};
    consider(sr, g, o, dev, &fx);
    /* Chen et al.'s sqrt(N) checkpointing: about sqrt(N) segments, each
     * rebuilt once (bench/tradeoff's reference point). */
    fx = (Cand){.planned = POL_RECOMPUTE, .rc_target = INT64_MAX,
                .seg_bytes = (int64_t)((double)A / sqrt((double)(g->nfwd > 1 ? g->nfwd : 1))),
                .host_state = hs};
    if (fx.seg_bytes > 0) consider(sr, g, o, dev, &fx);
    /* Cheap layers rebuilt plus offload of the first k activations (exposed
     * copies allowed), the longest-idle first, with the smallest k that
     * fits found by bisection (invariant: the plan at hi fits). */
    int K = count_sel(g, acts), lo = 0, hi = K;
    Cand cd = {.planned = POL_SUPERNEURONS, .rc_target = budget, .sel = acts, .lead = 1,
               .host_state = hs};
    if (consider(sr, g, o, dev, &cd) != C_FITS) lo = hi;
    while (lo < hi) {
      int mid = lo + (hi - lo) / 2;
      bool *sel = first_k(g, acts, mid);
      cd = (Cand){.planned = POL_SUPERNEURONS, .rc_target = budget, .sel = sel, .lead = 1,
                  .host_state = hs};
      if (consider(sr, g, o, dev, &cd) == C_FITS) hi = mid;
      else lo = mid + 1;
      free(sel);
    }
  }
  free(acts);
  return finish(sr, g, o, dev);
}

/* The plan for o->policy, without the budget checks (auto: NULL if nothing
 * fits; sr then has the smallest arenas seen). */
static Plan *build(Graph *g, const PlanOpts *o, Search *sr, bool no_skip) {
  const DeviceProfile *dev = device_find(o->device ? o->device : "h200");
  *sr = (Search){.budget = o->budget ? o->budget : device_budget(dev),
                 .host_budget = o->host_budget ? o->host_budget : device_host_budget(dev),
                 .smallest = INT64_MAX, .smallest_host = INT64_MAX, .smallest_any = INT64_MAX,
                 .nt = g->nt, .no_skip = no_skip};
  Cand c = {.planned = o->policy, .rc_target = -1};
  switch (o->policy) {
  case POL_NONE: case POL_LIVENESS: return plan_once(g, o, dev, &c);
  case POL_RECOMPUTE:
    /* --segment: checkpoint segments rebuilt once each (Chen et al.'s
     * checkpointing, speed-centric throughout). */
    c.rc_target = o->segment ? INT64_MAX : 0;
    c.seg_bytes = o->segment;
    return plan_once(g, o, dev, &c);
  case POL_OFFLOAD: case POL_SUPERNEURONS: {
    /* offload: what hides fully. superneurons: cheap layers recomputed;
     * everything still read by backward (conv outputs and the checkpoints
     * recomputation keeps) offloaded, waits at the next step: the smallest
     * footprint. */
    bool *sel = offload_candidates(g);
    c.sel = sel;
    if (o->policy == POL_OFFLOAD) c.hidden_only = true;
    else c.rc_target = 0, c.lead = -1;
    Plan *pl = plan_once(g, o, dev, &c);
    free(sel);
    return pl;
  }
  case POL_AUTO: {
    Plan *pl = plan_auto(g, o, dev, sr);
    if (pl) pl->opts.policy = POL_AUTO, pl->auto_log = sr->log;
    else free(sr->log);
    return pl;
  }
  }
  unreachable();
}

double plan_smallest_search_seconds = 0;

/* Whether auto finds a plan within device budget b (and o's host budget). */
static bool auto_fits(Graph *g, const PlanOpts *o, int64_t b) {
  PlanOpts q = *o;
  q.budget = b;
  Search sr;
  Plan *pl = build(g, &q, &sr, false);
  plan_free(pl);
  return pl != NULL;
}

/* The smallest device budget auto fits, given that `bad` does not fit and
 * `hint` is the smallest arena it saw there: auto's candidates depend on the
 * budget (their recomputation targets), so that arena is confirmed, or
 * doubled until it fits, then bisected in SNRT_ALIGN steps. By default the
 * search runs to the end on graphs up to LARGE_GRAPH_NODES forward nodes (its
 * answer must not depend on the machine's load) and stops after 20 s on
 * larger ones (plan_smallest_search_seconds, where set, on any graph); *exact
 * is false where it stopped early (the result fits but a smaller budget may
 * too). A negative result: none fits up to its magnitude. */
static double seconds_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

static int64_t smallest_budget(Graph *g, const PlanOpts *o, int64_t bad, int64_t hint,
                               bool *exact) {
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (hint <= bad) hint = bad + SNRT_ALIGN;
  int64_t lo = bad / SNRT_ALIGN, hi = (hint + SNRT_ALIGN - 1) / SNRT_ALIGN;   // lo fails
  *exact = true;
  double limit = plan_smallest_search_seconds > 0 ? plan_smallest_search_seconds
                 : g->nfwd > LARGE_GRAPH_NODES ? 20.0 : INFINITY;
  for (int k = 0; !auto_fits(g, o, hi * SNRT_ALIGN); k++) {
    if (k == 8 || seconds_since(&t0) > limit || hi > INT64_MAX / 1024)
      return -hi * SNRT_ALIGN;   /* none found up to there */
    lo = hi, hi *= 2;
  }
  while (hi - lo > 1) {
    if (seconds_since(&t0) > limit) {
      *exact = false;
      break;
    }
    int64_t mid = lo + (hi - lo) / 2;
    if (auto_fits(g, o, mid * SNRT_ALIGN)) hi = mid;
    else lo = mid;
  }
  return hi * SNRT_ALIGN;
}

Plan *plan_build(Graph *g, const PlanOpts *o) {
  Search sr;
  Plan *pl = build(g, o, &sr, false);
  int64_t budget = sr.budget, host = sr.host_budget;
  /* Nothing fits: the smallest arenas below come from every candidate,
   * those skipped (consider()) too. */
  if (!pl && sr.skipped) pl = build(g, o, &sr, true);
  if (!pl) {
    if (sr.smallest != INT64_MAX) {
      bool exact;
      int64_t b = smallest_budget(g, o, budget, sr.smallest, &exact);
      if (b > 0)
        fatal(EXIT_BADINPUT, "budget %s is too small for this model at batch %d: the smallest "
              "budget that fits is %s%s (%lld bytes), under the host budget %s",
              fmt_bytes(budget), g->batch, exact ? "" : "at most ", fmt_bytes(b), (long long)b,
              fmt_bytes(host));
      if (sr.smallest_host == INT64_MAX)
        fatal(EXIT_BADINPUT, "budget %s is too small for this model at batch %d: no plan was "
              "found under the host budget %s with a device budget up to %s; give a larger "
              "--budget or --host-budget", fmt_bytes(budget), g->batch, fmt_bytes(host),
              fmt_bytes(-b));
    }
    if (sr.smallest_host != INT64_MAX)
      fatal(EXIT_BADINPUT, "host budget %s is too small for this model at batch %d under the "
            "device budget %s: the smallest host budget that fits is %s (%lld bytes); "
            "give --host-budget or a larger --budget", fmt_bytes(host), g->batch,
            fmt_bytes(budget), fmt_bytes(sr.smallest_host), (long long)sr.smallest_host);
    fatal(EXIT_BADINPUT, "budget %s is too small for this model at batch %d: no plan fits "
          "under the host budget %s; without it, a device arena of at least %s (%lld bytes) "
          "would be needed; give a larger --host-budget", fmt_bytes(budget), g->batch,
          fmt_bytes(host), fmt_bytes(sr.smallest_any), (long long)sr.smallest_any);
  }
  /* An explicit budget binds every policy; auto is bound by the device's
   * memory too. The host budget binds every policy. */
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
            "fastest that fits.\nAn arena '>=' was not packed: its live bytes (a lower bound); "
            "only the chosen plan is packed\n(at the end), and a tight fit (within 1/8 of the "
            "budget) at once. 'cut short': not finished,\nlower bounds of its arenas after "
            "recomputation and offload already exceed a budget; 'skipped': not planned,\n"
            "without checkpoints the outputs of expensive layers read by backward and the "
            "persistent state\nexceed both budgets together\n"
            "%3s  %-6s %11s %10s %13s  %s\n%s", fmt_bytes(pl->budget),
            fmt_bytes(pl->host_budget), "#", "", "arena", "host", "est. step", "plan",
            pl->auto_log);
  } else {
    fprintf(stderr, "snc: error: unknown pass '%s' for --dump (route, liveness, recompute, "
            "offload, offsets, schedule, auto)\n", pass);
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
  Search sr;
  Plan *pl = build(g, o, &sr, false);
  for (int i = 0; i < g->nt; i++) free(g->t[i].data), g->t[i].data = NULL;
  if (!pl) return INT64_MAX;
  /* A plan over the host budget fits no device budget. */
  int64_t a = pl->host_bytes <= sr.host_budget ? pl->arena_bytes : INT64_MAX;
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
