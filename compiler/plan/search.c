/* search.c — auto: the fastest estimated plan whose device arena fits the
 * budget and whose host arena fits the host budget.
 *
 * The candidates form one fixed set that does not depend on either budget;
 * the budgets only say which of them fit. auto returns the candidate with
 * the smallest estimate among those that fit (the first found among equals),
 * so its estimate can never grow with the budget: a larger budget lets more
 * candidates fit and takes nothing away. The search skips a candidate only
 * where a bound proves it cannot fit or cannot be faster than one already
 * found, so on graphs of up to LARGE_GRAPH_NODES (2,000) forward nodes what
 * it returns is exactly that minimum. Above that the candidate set is
 * smaller and the bounds skip with SEARCH_SLACK (3%): the plan returned is
 * within 3% of the fastest candidate of that smaller set (below).
 *
 * Candidates. A chain is one recomputation scheme with persistent state at
 * one host-state level (0: on the device; 1: optimizer state on the host;
 * 2: parameters too):
 *   - none: nothing rebuilt;
 *   - cheap: the cheap rule (recompute.c: activations, pools, BN, ... rebuilt
 *     from the outputs of expensive layers);
 *   - checkpoints every S bytes (S = A/2 .. A/256, A the forward activations'
 *     bytes; every layer between two checkpoints rebuilt, expensive ones
 *     too), and S = A/sqrt(N) (Chen et al.'s sqrt(N) checkpointing);
 *   - the fixed recompute and superneurons policies' own plans;
 *   - rebuilds chosen per tensor: select.c's nested drop sets (graphs up to
 *     LARGE_GRAPH_NODES), each planned speed-centric only (they do not walk
 *     the ladder), with nothing offloaded or offloading where it hides; what
 *     every plan of one holds at the turn: the outputs of expensive layers
 *     read by backward that its set does not drop.
 *   - the optimal persistent checkpointing schedules (optimal.c: graphs up
 *     to LARGE_GRAPH_NODES), each planned as it is (recompute.c's keep
 *     rule), nothing offloaded; what every plan of one holds at the turn:
 *     as for the per-tensor sets, what its schedule does not drop.
 * Each chain has states: the first keeps every segment speed-centric
 * (rebuilt once); the next ones escalate (recompute.c: segments nested, then
 * memory-centric) toward the targets of one ladder, L, L 2^-1/8, L 2^-1/4 ...
 * down to the layer peak (L: the liveness plan's peak), each state starting
 * from the one before, so a state's recomputation only grows along the
 * chain. Each state is planned with each of its chain's variants (what is
 * offloaded: nothing; what hides fully; all checkpoints with copies led by
 * at most 16, 4 or 1 steps, or synchronous; cheap recomputation with the
 * first k/8 of the activations offloaded) and is a candidate.
 *
 * Bounds (sound: each is checked where the plan that could break it is made;
 * internal_error if one does not hold):
 *   - time: every candidate of a chain takes at least the compute steps plus
 *     one rebuild of every forward node the chain drops (rc_chain_rebuild_lb);
 *     along a chain, a state's compute plus recompute seconds never fall, and
 *     no variant of it is faster than that. Chains are tried in the order of
 *     their bound; once one is at least the best estimate found, every chain
 *     after it is skipped, and a chain's walk stops at the first state whose
 *     compute plus recompute reaches it.
 *   - memory: what every plan of a chain holds at the backward pass's start
 *     (checkpoints, or the outputs of expensive layers read by backward, and
 *     the persistent state left on the device); a checkpoint chain's first
 *     state, what its segments rebuild and hold at once
 *     (rc_chain_first_floor: the state is not built where that cannot fit);
 *     liveness_floors after offload (a candidate cut short).
 *   - dominance: copies only add time to the same plan, so where a state's
 *     plan without offload fits or is not faster than the best, its
 *     offloading variants are skipped, and where a variant with the
 *     persistent state on the device does, the same variant with the state
 *     on the host (offload_plan does not depend on the level; checked where
 *     both are planned).
 * The best so far is the fastest candidate that fits by live bytes (the
 * arena packing gives is at least those; it is the same in nearly every
 * plan). It is packed at the end: where its packed arena fits, no candidate
 * that fits can be faster (every one fits by live bytes too, and the bounds
 * skipped only what could not beat an estimate that is a real fit's). Where
 * fragmentation makes it exceed the budget, the search runs again packing
 * every new best at once, so its best is always one that really fits.
 *
 * `snc plan --dump auto` prints every candidate planned and every chain
 * skipped, with the bound that skipped it. search_smallest walks every chain
 * to its end (no time bound applies where nothing fits) for the infeasible
 * budget's message.
 *
 * Not here: the passes (recompute.c, offload.c, ...), the fixed policies
 * (plan.c). */
#include "plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { SC_NONE, SC_CHEAP, SC_CKPT, SC_FIXED, SC_SELECT, SC_OPT } Scheme;

enum { MAX_VARIANTS = 12, FIRST_K_STEPS = 8 };
/* The target ladder's step: 2^-1/8 (about 9%); on large graphs 2^-1/4. */
#define LADDER_STEP 0.9170040432046712
/* Forward nodes above which the candidate set is smaller (planning time
 * grows with the graph; a 2,498-layer ResNet has 8,335): only chains that
 * offload nothing and keep the persistent state on the device walk the
 * target ladder (the others are planned speed-centric only), cheap
 * recomputation has no first-k variants, and the ladder's steps are twice
 * as large. */
enum { LARGE_GRAPH_NODES = 2000 };
/* On large graphs the bounds skip what cannot be more than 3% faster than the
 * best found: auto's estimate is then within 3% of the fastest candidate's,
 * and never more than 3% above its estimate at any smaller budget. */
#define SEARCH_SLACK 0.03

typedef struct Chain {
  Scheme scheme;
  RecomputeOpts ro;        // SC_FIXED: its target; the others walk the ladder
  int hs;                  // host-state level of every variant
  PlanVariant v[MAX_VARIANTS];
  int nv;
  int order;               // position in the list (ties in the bound)
  int group;               // chains with the same first state (what is dropped) share it
  bool walks;              // walks the target ladder (else: its first state only)
  double lb;               // every candidate's estimate is at least this
  double lb_busy;          // ... its compute and recompute steps at least this
  int64_t held;            // bytes every candidate holds at the turn (device or host)
  int64_t held_dev;        // ... on the device where nothing is offloaded
  int64_t first_floor;     // checkpoint chains: device bytes their first state holds at a step
                           // at least, persistent state not counted (rc_chain_first_floor)
  int nck;                 // checkpoint mode: checkpoints
  int *ckpt;               // ... the checkpoint tensors (duplicate chains are skipped)
  bool dup;                // the same plans as an earlier chain
  int nsel;                // SC_SELECT: tensors its set drops
  bool carries;            // SC_SELECT: its set has carried rebuilds (recompute.c)
  double hs_lb;            // the host state's copies every plan of it adds at least
  int64_t sel_bytes;       // ... of them, the bytes of those a backward step reads
  const OptSchedule *opt;  // SC_OPT: its schedule
} Chain;

typedef struct Search {
  Graph *g;
  const PlanOpts *o;
  const DeviceProfile *dev;
  int64_t budget, host_budget;
  Plan *base;              // route and liveness (every chain starts from a copy)
  double compute;          // seconds of the compute steps (the same in every plan)
  int64_t layer_peak;
  int64_t pers;            // persistent bytes
  int64_t moved[3];        // ... of them on the host at host-state level 0, 1, 2
  int64_t adj[3];          // what a level adds to the recomputation targets
  double hs_seconds[3];    // ... its copies add to every plan at least
  int64_t *ladder;         // recomputation targets, decreasing, the layer peak last
  int nladder;
  Chain *ch;
  int nch, capch;
  bool *saved;             // per tensor: read by a backward step
  bool **owned;            // offload selections the chains point to
  int nowned;
  bool **drops;            // select.c's drop sets the SC_SELECT chains point to
  int ndrops;
  OptSchedule *opt;        // optimal.c's schedules the SC_OPT chains point to
  int nopt;
  double shared_busy;      // busy seconds of the first state shared by a group
  /* per variant index of the shared state's chains at host-state level 0:
   * the variant, whether its plan was finished and fits or is not faster
   * than the best (settled), and its estimate (NAN: cut short) */
  bool vknown[MAX_VARIANTS], vsettled[MAX_VARIANTS];
  PlanVariant vsig[MAX_VARIANTS];
  double vest[MAX_VARIANTS];
  double *group_busy;      // ... per group (NAN: not planned)
  long gen;                // changes with the state candidates are planned from
  int64_t check_floor;     // the first_floor the state planned from must reach (-1: none)
  struct { long gen; const bool *sel; int64_t dev, host; } floors[8];   // liveness_floors of it
  int nfloors;
  bool settled[3];         // ... planned without offload at a level: fits or not faster
  double slack;            // a chain or state is skipped where its bound reaches (1 - slack) x
                           // the best estimate (0: exact; SEARCH_SLACK on large graphs)
  Plan *best;              // the fastest fit (by live bytes; packed at once where !defer)
  bool defer;              // pack only the final best (see the header)
  int best_tried;
  double last_est;         // the estimate of the last candidate (NAN: cut short)
  int tried;               // candidates planned
  char *log;
  size_t nlog;
  /* search_smallest */
  bool enumerate;          // every candidate, no time bound (nothing fits)
  double deadline;         // seconds (0: none)
  struct timespec t0;
  bool stopped;            // ... passed
  SearchSmallest sm;
} Search;

static void log_line(Search *sr, const char *line) {
  size_t n = strlen(line);
  sr->log = xrealloc(sr->log, sr->nlog + n + 1);
  memcpy(sr->log + sr->nlog, line, n + 1);
  sr->nlog += n;
}

static const char *chain_name(const Search *sr, const Chain *ch, const PlanVariant *v) {
  static char buf[200];
  int n = snprintf(buf, sizeof buf, "%s", policy_name(v ? v->planned : POL_RECOMPUTE));
  if (ch->scheme == SC_FIXED)
    n += snprintf(buf + n, sizeof buf - (size_t)n, ", the fixed policy's plan");
  if (ch->ro.seg_bytes)
    n += snprintf(buf + n, sizeof buf - (size_t)n, ", checkpoints every %s (%d kept)%s",
                  fmt_bytes(ch->ro.seg_bytes), ch->nck,
                  ch->ro.recursive ? ", segments recursive" : "");
  else if (ch->scheme == SC_SELECT)
    n += snprintf(buf + n, sizeof buf - (size_t)n, ", %d tensors rebuilt (%s read by backward), "
                  "chosen per tensor%s", ch->nsel, fmt_bytes(ch->sel_bytes),
                  ch->ro.carry == CARRY_NONE ? ", none by a backward step"
                  : ch->ro.carry == CARRY_CHAINS ? ", LayerNorm outputs not by a backward step" : "");
  else if (ch->scheme == SC_OPT)
    n += snprintf(buf + n, sizeof buf - (size_t)n, ", the optimal persistent schedule for %s "
                  "(%d of %d cuts kept from forward)", fmt_bytes(ch->opt->bytes), ch->opt->kept,
                  ch->opt->tree.n - 1);
  else if (ch->scheme != SC_NONE)
    n += snprintf(buf + n, sizeof buf - (size_t)n, ", cheap layers rebuilt");
  if (v && v->sel) {
    n += snprintf(buf + n, sizeof buf - (size_t)n, ", offload %s",
                  v->hidden_only ? "where hidden" : "exposed allowed");
    int k = 0, all = 0;
    for (int t = 0; t < sr->g->nt; t++) k += v->sel[t], all += sr->owned[0][t];
    if (k < all) n += snprintf(buf + n, sizeof buf - (size_t)n, " (first %d of %d)", k, all);
    if (v->lead < 0) n += snprintf(buf + n, sizeof buf - (size_t)n, ", synchronous");
    else if (v->lead) n += snprintf(buf + n, sizeof buf - (size_t)n, ", lead <= %d", v->lead);
  }
  if (ch->hs) snprintf(buf + n, sizeof buf - (size_t)n, ", %s on the host",
                       ch->hs > 1 ? "parameters and optimizer state" : "optimizer state");
  return buf;
}

static bool fits(const Search *sr, const Plan *pl) {
  return pl->arena_bytes <= sr->budget && pl->host_bytes <= sr->host_budget;
}

/* The bytes of the outputs of expensive forward layers that a backward step
 * reads. Without checkpoint recomputation nothing drops them (recompute.c's
 * cheap rule keeps them), so every such plan holds them all, on the device
 * or (offloaded) on the host, when the backward pass starts. With `drop`
 * (a per-tensor set, select.c): those it does not drop. */
static int64_t held_at_turn(const Graph *g, const bool *drop) {
  bool *seen = xcalloc((size_t)g->nt + 1, sizeof(bool));
  int64_t b = 0;
  for (int i = 0; i < g->nn; i++) {
    const Node *n = &g->n[i];
    if (n->phase != PH_BACKWARD) continue;
    for (int k = 0; k < n->nin; k++) {
      int t = n->in[k];
      if (t < 0 || seen[t] || g->t[t].kind != TK_ACT || g->t[t].producer < 0 || (drop && drop[t]))
        continue;
      const Node *p = &g->n[g->t[t].producer];
      if (p->phase != PH_FORWARD || node_cost(g, p) != COST_EXPENSIVE) continue;
      seen[t] = true;
      b += arena_align(tensor_bytes(&g->t[t]));
    }
  }
  free(seen);
  return b;
}

/* Bytes of the forward activations: the scale of the checkpoint segments. */
static int64_t forward_act_bytes(const Graph *g) {
  int64_t a = 0;
  for (int i = 0; i < g->nfwd; i++)
    for (int k = 0; k < g->n[i].nout; k++) {
      int t = g->n[i].out[k];
      if (t >= 0 && g->t[t].kind == TK_ACT) a += tensor_bytes(&g->t[t]);
    }
  return a;
}

/* The first `k` selected tensors in forward order (the ones idle longest
 * between forward and backward). */
static bool *first_k(const Graph *g, const bool *sel, int k) {
  bool *out = xcalloc((size_t)g->nt + 1, sizeof(bool));
  for (int i = 0; i < g->nfwd && k > 0; i++) {
    const Node *n = &g->n[i];
    for (int o = 0; o < n->nout && k > 0; o++)
      if (n->out[o] >= 0 && sel[n->out[o]]) out[n->out[o]] = true, k--;
  }
  return out;
}

static Chain *add_chain(Search *sr, Scheme sc, int hs, RecomputeOpts ro) {
  xgrow((void **)&sr->ch, &sr->capch, sr->nch + 1, sizeof *sr->ch);
  Chain *ch = &sr->ch[sr->nch];
  *ch = (Chain){.scheme = sc, .ro = ro, .hs = hs, .order = sr->nch,
                .walks = sc == SC_CHEAP || sc == SC_CKPT};
  /* Large graphs: only the chains without offload or state on the host walk
   * the ladder (planning time); the others are their first state. */
  if (sr->g->nfwd > LARGE_GRAPH_NODES && (hs || ro.ck_offloaded)) ch->walks = false;
  sr->nch++;
  return ch;
}

static void add_variant(Chain *ch, Policy planned, const bool *sel, bool hidden, int lead) {
  if (ch->nv == MAX_VARIANTS) internal_error(__FILE__, __LINE__, "too many variants");
  ch->v[ch->nv++] = (PlanVariant){.planned = planned, .sel = sel, .hidden_only = hidden,
                                  .lead = lead, .hs = ch->hs};
}

/* The candidate set: chains and their variants (see the header). */
static void make_chains(Search *sr) {
  Graph *g = sr->g;
  bool large = g->nfwd > LARGE_GRAPH_NODES;
  bool *acts = plan_offload_candidates(g);
  int K = 0;
  for (int t = 0; t < g->nt; t++) K += acts[t];
  sr->owned = xcalloc(FIRST_K_STEPS + 1, sizeof(bool *));
  sr->owned[sr->nowned++] = acts;
  bool *firstk[FIRST_K_STEPS];
  int nfk = 0;
  for (int j = 1; j < FIRST_K_STEPS; j++) {
    int k = (int)(((int64_t)K * j + FIRST_K_STEPS - 1) / FIRST_K_STEPS);
    if (k < 1 || k >= K || (nfk && k == K * (j - 1) / FIRST_K_STEPS)) continue;
    firstk[nfk++] = sr->owned[sr->nowned++] = first_k(g, acts, k);
  }
  if (!large) sr->ndrops = select_rebuild_sets(g, sr->base, sr->dev, &sr->drops);
  int *carry = sr->ndrops ? rc_carry_steps(g, sr->base->route) : NULL;
  if (!large) sr->nopt = optimal_schedules(g, sr->base, sr->dev, sr->compute, &sr->opt);
  int64_t A = forward_act_bytes(g);
  static const int ladder[] = {256, 192, 128, 96, 64, 48, 32, 24, 16, 12, 8, 6, 4, 3, 2};
  int64_t sqrt_seg = (int64_t)((double)A / sqrt((double)(g->nfwd > 1 ? g->nfwd : 1)));
  for (int hs = 0; hs <= 2; hs++) {
    /* a level that moves nothing more than the one before */
    if (hs && sr->moved[hs] == sr->moved[hs - 1]) continue;
    Chain *ch = add_chain(sr, SC_NONE, hs, (RecomputeOpts){0});
    add_variant(ch, POL_LIVENESS, NULL, false, 0);
    add_variant(ch, POL_OFFLOAD, acts, true, 0);
    RecomputeOpts cheap = {.max_chain = PLAN_RECOMPUTE_CHAIN};
    ch = add_chain(sr, SC_CHEAP, hs, cheap);
    add_variant(ch, POL_RECOMPUTE, NULL, false, 0);
    /* Offloading plans rebuild short chains: a rebuild needs all its
     * checkpoints prefetched at once. */
    RecomputeOpts cheap2 = {.max_chain = 2, .ck_offloaded = true};
    ch = add_chain(sr, SC_CHEAP, hs, cheap2);
    add_variant(ch, POL_SUPERNEURONS, acts, true, 0);
    for (int j = 0; j < nfk && !large; j++) add_variant(ch, POL_SUPERNEURONS, firstk[j], false, 1);
    add_variant(ch, POL_SUPERNEURONS, acts, false, 1);
    for (size_t k = 0; k < sizeof ladder / sizeof ladder[0]; k++) {
      int64_t seg = A / ladder[k];
      if (seg < 1) continue;
      RecomputeOpts ck = {.max_chain = PLAN_RECOMPUTE_CHAIN, .seg_bytes = seg};
      ch = add_chain(sr, SC_CKPT, hs, ck);
      add_variant(ch, POL_RECOMPUTE, NULL, false, 0);
      ck.recursive = true;
      ch = add_chain(sr, SC_CKPT, hs, ck);
      add_variant(ch, POL_RECOMPUTE, NULL, false, 0);
      ck.recursive = false, ck.ck_offloaded = true;
      static const int lead[] = {16, 4, 1, -1};
      for (int r = 0; r < 2; r++) {
        ck.recursive = r;
        ch = add_chain(sr, SC_CKPT, hs, ck);
        add_variant(ch, POL_SUPERNEURONS, acts, true, 0);
        for (int v = 0; v < 4; v++) add_variant(ch, POL_SUPERNEURONS, acts, false, lead[v]);
      }
    }
    /* The fixed policies' own plans (liveness and offload are the none
     * chain's): auto is never slower than a fixed policy whose plan fits.
     * And Chen et al.'s sqrt(N) checkpointing: about sqrt(N) segments, each
     * rebuilt once (bench/tradeoff's reference point). */
    RecomputeOpts fx = {.target = sr->layer_peak, .max_chain = PLAN_RECOMPUTE_CHAIN};
    ch = add_chain(sr, SC_FIXED, hs, fx);
    add_variant(ch, POL_RECOMPUTE, NULL, false, 0);
    fx = (RecomputeOpts){.target = sr->layer_peak, .max_chain = 2, .ck_offloaded = true};
    if (!hs || !large) {   /* large graphs: the fixed policy's own plan only */
      ch = add_chain(sr, SC_FIXED, hs, fx);
      add_variant(ch, POL_SUPERNEURONS, acts, false, -1);
    }
    if (sqrt_seg > 0) {
      fx = (RecomputeOpts){.target = INT64_MAX, .max_chain = PLAN_RECOMPUTE_CHAIN,
                           .seg_bytes = sqrt_seg};
      ch = add_chain(sr, SC_FIXED, hs, fx);
      add_variant(ch, POL_RECOMPUTE, NULL, false, 0);
    }
    /* Rebuilds chosen per tensor (select.c), nothing offloaded; where a
     * set has carried rebuilds (recompute.c), the same set without them too,
     * and where it has both kinds, with the fused chains' only: a carrier
     * holds the output it rebuilds beside its own step's tensors, and the
     * steps deferred past it hold theirs longer, which at a tight budget
     * can be the peak. */
    for (int k = 0; k < sr->ndrops; k++) {
      bool chains = false, norms = false;
      for (int t = 0; t < g->nt && carry; t++) {
        if (!sr->drops[k][t] || carry[t] < 0) continue;
        if (g->n[sr->base->route->s[carry[t]].node].op == OP_FUSED_BWD) chains = true;
        else norms = true;
      }
      for (int mode = CARRY_ALL; mode <= CARRY_CHAINS; mode++) {
        if ((mode == CARRY_NONE && !chains && !norms) || (mode == CARRY_CHAINS && !(chains && norms)))
          continue;
        ch = add_chain(sr, SC_SELECT, hs, (RecomputeOpts){.drop = sr->drops[k], .carry = mode});
        ch->carries = mode == CARRY_ALL ? chains || norms : mode == CARRY_CHAINS;
        add_variant(ch, POL_RECOMPUTE, NULL, false, 0);
        add_variant(ch, POL_SUPERNEURONS, acts, true, 0);
        for (int t = 0; t < g->nt; t++)
          if (sr->drops[k][t])
            ch->nsel++, ch->sel_bytes += sr->saved[t] ? arena_align(tensor_bytes(&g->t[t])) : 0;
      }
    }
    /* The optimal persistent checkpointing schedules (optimal.c). */
    for (int k = 0; k < sr->nopt; k++) {
      const OptSchedule *o = &sr->opt[k];
      ch = add_chain(sr, SC_OPT, hs, (RecomputeOpts){.drop = o->drop, .tree = &o->tree});
      ch->opt = o;
      add_variant(ch, POL_RECOMPUTE, NULL, false, 0);
    }
  }
  free(carry);
}

/* Per chain, before any of its plans is made: the time bound, what it holds
 * at the turn, its checkpoints (chains with the same ones as an earlier
 * chain of the same kind are the same plans). */
static void bound_chains(Search *sr) {
  Graph *g = sr->g;
  int64_t turn = held_at_turn(g, NULL);
  for (int c = 0; c < sr->nch; c++) {
    Chain *ch = &sr->ch[c];
    int64_t pers_dev = sr->pers - sr->moved[ch->hs];
    ch->lb_busy = sr->compute;
    /* the cheap rule keeps the outputs of expensive layers */
    ch->held = turn + sr->pers, ch->held_dev = turn + pers_dev;
    ch->group = c;
    const Chain *e = NULL;   // the group's first chain: the same decisions
    for (int d = 0; d < c && !e; d++)
      if (sr->ch[d].scheme == ch->scheme && ch->scheme != SC_FIXED &&
          sr->ch[d].ro.seg_bytes == ch->ro.seg_bytes && sr->ch[d].ro.max_chain == ch->ro.max_chain &&
          sr->ch[d].ro.drop == ch->ro.drop && sr->ch[d].ro.carry == ch->ro.carry)
        e = &sr->ch[d];
    /* a fixed policy's chain plans its own first state, but what it drops
     * (so its bound and checkpoints) is that of any earlier chain with the
     * same segments and chain length (recompute.c: rc_chain_new) */
    const Chain *twin = NULL;
    for (int d = 0; d < c && !twin && ch->scheme == SC_FIXED; d++)
      if (sr->ch[d].scheme != SC_NONE && sr->ch[d].scheme != SC_SELECT &&
          sr->ch[d].scheme != SC_OPT &&
          sr->ch[d].ro.seg_bytes == ch->ro.seg_bytes &&
          sr->ch[d].ro.max_chain == ch->ro.max_chain)
        twin = &sr->ch[d];
    if (ch->scheme == SC_NONE) {
      ch->hs_lb = sr->hs_seconds[ch->hs];
      ch->lb = ch->lb_busy + ch->hs_lb;
      continue;
    }
    if (e || twin) {
      if (e) ch->group = e->group;
      else e = twin;
      ch->lb_busy = e->lb_busy, ch->nck = e->nck, ch->first_floor = e->first_floor;
      ch->ckpt = ch->nck ? xmalloc(sizeof(int) * (size_t)ch->nck) : NULL;
      if (ch->nck) memcpy(ch->ckpt, e->ckpt, sizeof(int) * (size_t)ch->nck);
    } else {
      /* what is dropped, on the base plan (the chain is never started;
       * the checkpoints it sets there are taken back) */
      RcChain *rc = rc_chain_new(g, sr->base, &ch->ro);
      ch->lb_busy += rc_chain_rebuild_lb(rc, sr->dev);
      ch->nck = rc_chain_checkpoints(rc);
      if (ch->ro.seg_bytes) ch->first_floor = rc_chain_first_floor(rc);
      ch->ckpt = sr->base->ckpt;
      sr->base->ckpt = NULL, sr->base->checkpoints = 0;
      rc_chain_discard(rc);
    }
    /* state on the host: its copies are synchronous, and there are at least
     * as many as in the route without recomputation */
    ch->hs_lb = sr->hs_seconds[ch->hs];
    /* ... but a carried rebuild moves weight gradients and updates, which
     * can bring two uses of a parameter on the host together (one trip
     * fewer than in the route without recomputation): no bound from them */
    if (ch->carries) ch->hs_lb = 0;
    ch->lb = ch->lb_busy + ch->hs_lb;
    if (ch->scheme == SC_SELECT || ch->scheme == SC_OPT) {
      /* it keeps the outputs of expensive layers that it does not drop */
      int64_t kept = held_at_turn(g, ch->ro.drop);
      ch->held = kept + sr->pers, ch->held_dev = kept + pers_dev;
      continue;
    }
    if (!ch->ro.seg_bytes) continue;
    /* the checkpoints a backward step reads are kept from forward to backward */
    int64_t ck = 0;
    for (int k = 0; k < ch->nck; k++)
      if (sr->saved[ch->ckpt[k]]) ck += arena_align(tensor_bytes(&g->t[ch->ckpt[k]]));
    ch->held = ck + sr->pers, ch->held_dev = ck + pers_dev;
    for (int d = 0; d < c; d++) {
      const Chain *f = &sr->ch[d];
      if (f->scheme == SC_CKPT && ch->scheme == SC_CKPT && f->hs == ch->hs &&
          f->ro.ck_offloaded == ch->ro.ck_offloaded && f->ro.recursive == ch->ro.recursive &&
          f->nck == ch->nck &&
          (!ch->nck || !memcmp(f->ckpt, ch->ckpt, sizeof(int) * (size_t)ch->nck)))
        ch->dup = true;
    }
  }
}

static int by_bound(const void *a, const void *b) {
  const Chain *x = a, *y = b;
  if (x->lb_busy != y->lb_busy) return x->lb_busy < y->lb_busy ? -1 : 1;
  if (x->group != y->group) return x->group - y->group;
  if (x->hs != y->hs) return x->hs - y->hs;
  return x->order - y->order;
}

static double seconds_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* A variant cannot fit where what it must hold at the turn exceeds the
 * budgets (on the device alone where nothing is offloaded), or the
 * persistent state left on the device alone exceeds the device budget. */
static bool cannot_fit(const Search *sr, const Chain *ch, const PlanVariant *v) {
  if (sr->pers - sr->moved[ch->hs] > sr->budget) return true;
  return v->sel ? ch->held > sr->budget + sr->host_budget : ch->held_dev > sr->budget;
}

/* Seconds of the compute and recompute steps of a chain's current state. */
static double busy_seconds(const Search *sr, const Plan *pl) {
  double s = sr->compute;
  const Route *r = pl->route;
  for (int k = 0; k < r->train_steps; k++) {
    const Step *st = &r->s[k];
    if (st->kind == SK_RECOMPUTE || (st->node >= 0 && node_carries(&sr->g->n[st->node])))
      s += plan_rebuild_seconds(sr->g, pl, k, cost_step_seconds(sr->g, pl, k, sr->dev), sr->dev);
  }
  return s;
}

static void log_cand(Search *sr, const Chain *ch, const PlanVariant *v, const Plan *pl,
                     const char *verdict, bool packed) {
  char arena[32], host[32], est[32] = "(cut short)";
  bool cut = isnan(pl->est_step_seconds);
  snprintf(arena, sizeof arena, "%s%s", packed ? "" : ">=",
           fmt_bytes(packed ? pl->arena_bytes : pl->peak_live_bytes));
  snprintf(host, sizeof host, "%s%s", cut || (!pl->host_packed && pl->host_bytes) ? ">=" : "", fmt_bytes(pl->host_bytes));
  if (!cut) snprintf(est, sizeof est, "%10.3f ms", pl->est_step_seconds * 1e3);
  char *line = xasprintf("%3d  %-6s %11s %10s %13s  %s\n", sr->tried, verdict, arena, host,
                         est, chain_name(sr, ch, v));
  log_line(sr, line);
  free(line);
}

/* A candidate not planned because its device arena is at least dev_floor,
 * over the budget: counted and logged. */
static void log_cut(Search *sr, const Chain *ch, const PlanVariant *v, int64_t dev_floor) {
  sr->tried++;
  char arena[32];
  snprintf(arena, sizeof arena, ">=%s", fmt_bytes(dev_floor));
  char *line = xasprintf("%3d  %-6s %11s %10s %13s  %s\n", sr->tried, "-", arena, "",
                         "(cut short)", chain_name(sr, ch, v));
  log_line(sr, line);
  free(line);
}

/* liveness_floors of the state candidates are planned from, with an offload
 * selection: the same for every variant and host-state level that selects
 * the same tensors, so computed once per state (sr->gen) and selection. */
static void state_floors(Search *sr, const Plan *state, const bool *sel, int64_t *dev,
                         int64_t *host) {
  if (sr->nfloors && sr->floors[0].gen != sr->gen) sr->nfloors = 0;
  for (int k = 0; k < sr->nfloors; k++)
    if (sr->floors[k].sel == sel) {
      *dev = sr->floors[k].dev, *host = sr->floors[k].host;
      return;
    }
  liveness_floors(sr->g, state, sel, dev, host);
  if (sr->nfloors < (int)(sizeof sr->floors / sizeof sr->floors[0]))
    sr->floors[sr->nfloors].gen = sr->gen, sr->floors[sr->nfloors].sel = sel,
    sr->floors[sr->nfloors].dev = *dev, sr->floors[sr->nfloors++].host = *host;
}

/* Plans one candidate from a chain's state; keeps it if it is the fastest
 * fit so far (search) or records its arenas (search_smallest). True where
 * it was finished and fits or is not faster than the best: then no plan of
 * the same state that adds copies to it can be faster than the best found. */
static bool candidate(Search *sr, const Chain *ch, const PlanVariant *v, const Plan *state,
                      bool recomputed) {
  Graph *g = sr->g;
  sr->last_est = NAN;
  if (!sr->enumerate) {
    /* what any offload of v->sel leaves on the device: over the budget, the
     * plan is not made */
    int64_t dev_floor, host_floor;
    state_floors(sr, state, v->sel, &dev_floor, &host_floor);
    if (dev_floor < sr->check_floor)
      internal_error(__FILE__, __LINE__, "%s: its first state holds %lld bytes at most, under the "
                     "chain's bound %lld", chain_name(sr, ch, v), (long long)dev_floor,
                     (long long)sr->check_floor);
    if (!v->hs) dev_floor += state->persistent_bytes;
    if (dev_floor > sr->budget) {
      log_cut(sr, ch, v, dev_floor);
      return false;
    }
  }
  Plan *pl = plan_clone(state);
  pl->seg_bytes = ch->ro.seg_bytes;
  pl->selected = ch->nsel, pl->selected_bytes = ch->sel_bytes;
  if (ch->opt)
    pl->opt_cuts = ch->opt->tree.n - 1, pl->opt_kept = ch->opt->kept, pl->opt_bytes = ch->opt->bytes,
    pl->opt_seconds = ch->opt->seconds;
  int64_t floor[2] = {sr->budget, sr->host_budget};
  if (sr->enumerate) floor[0] = floor[1] = INT64_MAX;
  bool done = plan_finish(g, pl, sr->dev, v, recomputed, sr->base->baseline_bytes, floor);
  sr->tried++;
  if (done && pl->est_step_seconds < ch->lb * (1 - 1e-9))
    internal_error(__FILE__, __LINE__, "%s: estimate %g s under its bound %g s",
                   chain_name(sr, ch, v), pl->est_step_seconds, ch->lb);
  if (done && fabs(pl->compute_seconds - sr->compute) > 1e-9 * sr->compute)
    internal_error(__FILE__, __LINE__, "a plan's compute steps take %g s, the liveness plan's "
                   "%g s", pl->compute_seconds, sr->compute);
  /* the chain's bound at the turn: checked on every plan finished */
  if (done && (v->sel ? pl->peak_live_bytes + pl->host_bytes < ch->held
                      : pl->peak_live_bytes < ch->held_dev))
    internal_error(__FILE__, __LINE__, "a plan of %s holds less than its chain's bound at the "
                   "turn", chain_name(sr, ch, v));
  if (sr->enumerate) {
    /* the smallest arenas: packed where it can be smaller than the smallest seen */
    if (done && !pl->host_packed) offsets_host(pl), pl->host_packed = true;
    bool host_ok = pl->host_bytes <= sr->host_budget;
    if (pl->peak_live_bytes < sr->sm.any || (host_ok && pl->peak_live_bytes < sr->sm.arena) ||
        (pl->peak_live_bytes <= sr->budget && pl->host_bytes < sr->sm.host)) {
      plan_pack(g, pl);
      if (pl->arena_bytes < sr->sm.any) sr->sm.any = pl->arena_bytes;
      if (host_ok && pl->arena_bytes < sr->sm.arena) sr->sm.arena = pl->arena_bytes;
      if (pl->arena_bytes <= sr->budget && pl->host_bytes < sr->sm.host)
        sr->sm.host = pl->host_bytes;
    }
    plan_free(pl);
    return false;
  }
  const char *verdict = "-";
  bool packed = false, fit = false;
  if (done && pl->peak_live_bytes <= sr->budget && pl->host_bytes <= sr->host_budget) {
    verdict = "slower";
    if (!sr->best || pl->est_step_seconds < sr->best->est_step_seconds) {
      if (!sr->defer) plan_pack(g, pl), packed = true;
      fit = !packed || fits(sr, pl);
      verdict = fit ? "fits" : "-";
    }
  }
  log_cand(sr, ch, v, pl, verdict, packed);
  bool settled = done && (fit || (sr->best && pl->est_step_seconds >= sr->best->est_step_seconds));
  if (done) sr->last_est = pl->est_step_seconds;
  if (fit) {
    plan_free(sr->best);
    sr->best = pl, sr->best_tried = sr->tried;
  } else {
    plan_free(pl);
  }
  return settled;
}

static bool time_up(Search *sr) {
  if (sr->deadline > 0 && seconds_since(&sr->t0) > sr->deadline) sr->stopped = true;
  return sr->stopped;
}

/* The variants of a chain that may fit (NULL if none: logged). */
static bool chain_live(Search *sr, const Chain *ch, bool live[MAX_VARIANTS]) {
  bool any = false;
  for (int k = 0; k < ch->nv; k++) any |= live[k] = sr->enumerate || !cannot_fit(sr, ch, &ch->v[k]);
  if (!any) {
    char *line = xasprintf("%3s  %-6s %11s %10s %13s  %s; %s held at the turn%s\n", "", "-",
                           "", "", "(skipped)", chain_name(sr, ch, &ch->v[0]),
                           fmt_bytes(ch->nv && ch->v[0].sel ? ch->held : ch->held_dev),
                           ch->nv && ch->v[0].sel ? "" : " on the device");
    log_line(sr, line);
    free(line);
  }
  return any;
}

/* Checks the time bounds on a chain's state; false where the state, and
 * every later one, cannot be faster than the best (with the slack). */
static bool state_worth(Search *sr, const Chain *ch, double busy, double *prev) {
  if (busy < ch->lb_busy * (1 - 1e-9) || busy < *prev * (1 - 1e-9))
    internal_error(__FILE__, __LINE__, "recomputation of %s takes %g s, under its bound %g s "
                   "(or the state before's %g s)", chain_name(sr, ch, NULL), busy - sr->compute,
                   ch->lb_busy - sr->compute, *prev - sr->compute);
  *prev = busy;
  return sr->enumerate || !sr->best ||
         busy + ch->hs_lb < (1 - sr->slack) * sr->best->est_step_seconds;
}

/* A chain's first state: its own plan (fixed policies) or the one every
 * segment speed-centric, shared by the chains of its group (*shared, kept
 * between calls while the group lasts). */
static void first_state(Search *sr, const Chain *ch, Plan **shared, int *shared_group) {
  bool live[MAX_VARIANTS];
  /* a recursive chain's first state is its nested twin's (the same group) */
  if (ch->ro.recursive) return;
  if (!chain_live(sr, ch, live)) return;
  if (ch->scheme == SC_NONE) {
    sr->gen++;
    for (int k = 0; k < ch->nv; k++)
      if (live[k]) candidate(sr, ch, &ch->v[k], sr->base, false);
    return;
  }
  Plan *pl;
  bool fresh = ch->scheme == SC_FIXED || *shared_group != ch->group;
  /* A checkpoint chain whose first state cannot fit (its first_floor, and
   * the persistent state where it stays on the device) is not built: each
   * variant is cut short as candidate() would cut it. */
  if (!sr->enumerate && ch->scheme == SC_CKPT && fresh) {
    bool any = false;
    for (int k = 0; k < ch->nv; k++)
      any |= live[k] && ch->first_floor + (ch->v[k].hs ? 0 : sr->base->persistent_bytes) <= sr->budget;
    if (!any) {
      for (int k = 0; k < ch->nv; k++)
        if (live[k])
          log_cut(sr, ch, &ch->v[k],
                  ch->first_floor + (ch->v[k].hs ? 0 : sr->base->persistent_bytes));
      return;
    }
  }
  if (fresh) {
    pl = plan_clone(sr->base);
    RcChain *rc = rc_chain_new(sr->g, pl, &ch->ro);
    rc_chain_start(rc);
    if (ch->scheme == SC_FIXED) rc_chain_escalate(rc, ch->ro.target);
    rc_chain_finish(rc);
    if (ch->scheme != SC_FIXED) plan_free(*shared), *shared = pl, *shared_group = ch->group;
  } else {
    pl = *shared;
  }
  /* the shared state's busy seconds, once per group */
  if (fresh) {
    sr->gen++;
    sr->shared_busy = busy_seconds(sr, pl);
    if (ch->scheme != SC_FIXED) sr->group_busy[ch->group] = sr->shared_busy;
    memset(sr->settled, 0, sizeof sr->settled);
    memset(sr->vknown, 0, sizeof sr->vknown);
  }
  double prev = 0;
  /* Offload adds copy steps and exposed time to a state and takes nothing
   * away (persistent state's trips only split): where the same state with
   * the same host-state level and nothing offloaded fits, or is not faster
   * than the best, an offloading variant cannot be faster than the best. */
  if (!sr->enumerate && ch->scheme != SC_FIXED && ch->v[0].sel && sr->settled[ch->hs]) {
    char *line = xasprintf("%3s  %-6s %11s %10s %13s  %s: no faster than the same plan "
                           "without offload\n", "", "-", "", "", "(dominated)",
                           chain_name(sr, ch, NULL));
    log_line(sr, line);
    free(line);
  } else if (state_worth(sr, ch, sr->shared_busy, &prev)) {
    if (ch->scheme == SC_CKPT) sr->check_floor = ch->first_floor;
    for (int k = 0; k < ch->nv; k++) {
      if (!live[k]) continue;
      /* The persistent state on the host adds its copies to the same plan
       * (offload_plan runs first, on the same state, and does not depend on
       * the level): where the plan with the state on the device (a chain of
       * this group at level 0, the same variant) fits or is not faster than
       * the best, this one cannot be faster than the best. Checked: a level
       * above 0 that is planned is never faster than level 0's plan. */
      const PlanVariant *v = &ch->v[k];
      bool same = ch->scheme != SC_FIXED && sr->vknown[k] && sr->vsig[k].planned == v->planned &&
                  sr->vsig[k].sel == v->sel && sr->vsig[k].hidden_only == v->hidden_only &&
                  sr->vsig[k].lead == v->lead;
      if (!sr->enumerate && ch->hs && same && sr->vsettled[k]) {
        char *line = xasprintf("%3s  %-6s %11s %10s %13s  %s: no faster than the same plan with "
                               "the state on the device\n", "", "-", "", "", "(dominated)",
                               chain_name(sr, ch, v));
        log_line(sr, line);
        free(line);
        continue;
      }
      bool st = candidate(sr, ch, v, pl, true);
      if (st && !v->sel && ch->scheme != SC_FIXED) sr->settled[ch->hs] = true;
      if (ch->scheme == SC_FIXED) continue;
      if (!ch->hs) {
        sr->vknown[k] = true, sr->vsig[k] = *v, sr->vsettled[k] = st, sr->vest[k] = sr->last_est;
      } else if (same && !isnan(sr->vest[k]) && !isnan(sr->last_est) &&
                 sr->last_est < sr->vest[k] * (1 - 1e-9)) {
        internal_error(__FILE__, __LINE__, "%s: estimate %g s under the same plan's with the "
                       "state on the device, %g s", chain_name(sr, ch, v), sr->last_est, sr->vest[k]);
      }
    }
    sr->check_floor = -1;
  }
  if (ch->scheme == SC_FIXED) plan_free(pl);
}

/* The rest of a chain that walks the ladder: its states after the first, in
 * order, each planned with the variants that may fit, until a state's
 * compute and recompute alone reach the best estimate or the ladder ends. */
static void walk_rest(Search *sr, const Chain *ch) {
  bool live[MAX_VARIANTS];
  if (ch->scheme == SC_NONE || ch->scheme == SC_FIXED || !ch->walks) return;
  bool any = false;
  for (int k = 0; k < ch->nv; k++) any |= live[k] = sr->enumerate || !cannot_fit(sr, ch, &ch->v[k]);
  if (!any) return;
  /* The walk starts from the group's first state, planned in the first
   * round: where its compute and recompute already reach the best, so does
   * every later state's, and the route is not built again. */
  double gb = sr->group_busy[ch->group];
  if (!sr->enumerate && sr->best && !isnan(gb) &&
      gb + ch->hs_lb >= (1 - sr->slack) * sr->best->est_step_seconds)
    return;
  Plan *pl = plan_clone(sr->base);
  RcChain *rc = rc_chain_new(sr->g, pl, &ch->ro);
  rc_chain_start(rc);
  sr->gen++;
  double start = busy_seconds(sr, pl);
  if (!isnan(gb) && fabs(start - gb) > 1e-9 * gb)
    internal_error(__FILE__, __LINE__, "%s starts at %g s of compute and recompute, its "
                   "group's first state took %g s", chain_name(sr, ch, NULL), start, gb);
  int64_t adj = sr->adj[ch->hs];
  double prev = 0;
  for (int j = 0; state_worth(sr, ch, start, &prev) && !time_up(sr);) {
    /* the next state: the next target of the ladder below this one's peak
     * that changes something */
    bool changed = false;
    while (!changed && j < sr->nladder) {
      int64_t t = sr->ladder[j++] + adj;
      if (t < rc_chain_peak(rc)) changed = rc_chain_escalate(rc, t);
    }
    sr->gen++;
    if (!changed) break;
    start = busy_seconds(sr, pl);
    if (!state_worth(sr, ch, start, &prev)) break;
    for (int k = 0; k < ch->nv; k++)
      if (live[k]) candidate(sr, ch, &ch->v[k], pl, true);
  }
  rc_chain_finish(rc);
  plan_free(pl);
}

/* Every chain in the order of its bound, in two rounds: first states (one
 * route for a group's chains; they give a good best early), then the rest
 * of the ladders. A chain whose bound reaches the best ends the round. */
static void run_chains(Search *sr) {
  Plan *shared = NULL;
  int group = -1;
  for (int round = 0; round < 2; round++) {
    int skipped = 0, left = 0;
    for (int c = 0; c < sr->nch && !time_up(sr); c++) {
      const Chain *ch = &sr->ch[c];
      if (ch->dup) continue;
      double cut = sr->best ? (1 - sr->slack) * sr->best->est_step_seconds : INFINITY;
      if (!sr->enumerate && ch->lb_busy >= cut) {   /* sorted by it: so are the rest */
        left = sr->nch - c;
        break;
      }
      if (!sr->enumerate && ch->lb >= cut) {
        skipped++;
        continue;
      }
      if (!round) first_state(sr, ch, &shared, &group);
      else walk_rest(sr, ch);
    }
    if (skipped || left) {
      char *line = xasprintf("%3s  %-6s %11s %10s %13s  %d chains%s skipped: none of their plans "
                             "can be faster than %.3f ms%s (compute %.3f ms, one rebuild of what "
                             "each drops, its state's copies)\n", "", "-", "", "", "(bound)",
                             skipped + left, round ? "' ladders" : "",
                             sr->best->est_step_seconds * 1e3,
                             sr->slack > 0 ? " by the slack" : "", sr->compute * 1e3);
      log_line(sr, line);
      free(line);
    }
    plan_free(shared), shared = NULL, group = -1;
  }
}

static void search_init(Search *sr, Graph *g, const Route *r, const PlanOpts *o,
                        const DeviceProfile *dev, int64_t budget, int64_t host_budget) {
  *sr = (Search){.g = g, .o = o, .dev = dev, .budget = budget, .host_budget = host_budget,
                 .check_floor = -1,
                 .slack = g->nfwd > LARGE_GRAPH_NODES ? SEARCH_SLACK : 0};
  clock_gettime(CLOCK_MONOTONIC, &sr->t0);
  sr->base = plan_base(g, r, o, dev);
  Plan *liv = plan_clone(sr->base);
  plan_finish(g, liv, dev, &(PlanVariant){.planned = POL_LIVENESS}, false,
              sr->base->baseline_bytes, NULL);
  sr->compute = liv->compute_seconds;
  plan_free(liv);
  sr->layer_peak = sr->base->layer_peak_bytes;
  sr->saved = plan_saved_tensors(g);
  for (int t = 0; t < g->nt; t++)
    if (tensor_kind_persistent(g->t[t].kind)) sr->pers += arena_align(tensor_bytes(&g->t[t]));
  for (int hs = 1; hs <= 2; hs++) {
    sr->moved[hs] = plan_moved_bytes(g, hs);
    /* With state on the host, the moved bytes do not count against the
     * recomputation target, but the device copies of those the steps at hand
     * use do (at most twice the most one node uses). */
    int64_t most = 0;
    for (int i = 0; i < g->nn; i++) {
      const Node *n = &g->n[i];
      int64_t b = 0;
      for (int k = 0; k < n->nin + n->nout; k++) {
        int t = k < n->nin ? n->in[k] : n->out[k - n->nin];
        if (t >= 0 && plan_moves_to_host(g->t[t].kind, hs)) b += arena_align(tensor_bytes(&g->t[t]));
      }
      if (b > most) most = b;
    }
    sr->adj[hs] = sr->moved[hs] > 2 * most ? sr->moved[hs] - 2 * most : 0;
    sr->hs_seconds[hs] = offload_persistent_seconds(g, sr->base, dev, hs > 1);
  }
  /* The ladder of targets: from the liveness plan's peak down to the layer peak. */
  int cap = 0;
  double step = g->nfwd > LARGE_GRAPH_NODES ? LADDER_STEP * LADDER_STEP : LADDER_STEP;
  for (double t = (double)sr->base->peak_live_bytes * step; t > (double)sr->layer_peak;
       t *= step) {
    xgrow((void **)&sr->ladder, &cap, sr->nladder + 1, sizeof(int64_t));
    sr->ladder[sr->nladder++] = (int64_t)t;
  }
  xgrow((void **)&sr->ladder, &cap, sr->nladder + 1, sizeof(int64_t));
  sr->ladder[sr->nladder++] = sr->layer_peak;
  make_chains(sr);
  bound_chains(sr);
  sr->group_busy = xmalloc(sizeof(double) * (size_t)(sr->nch ? sr->nch : 1));
  for (int c = 0; c < sr->nch; c++) sr->group_busy[c] = NAN;
  qsort(sr->ch, (size_t)sr->nch, sizeof *sr->ch, by_bound);
  clock_gettime(CLOCK_MONOTONIC, &sr->t0);
}

static void search_free(Search *sr) {
  for (int c = 0; c < sr->nch; c++) free(sr->ch[c].ckpt);
  free(sr->ch);
  for (int k = 0; k < sr->nowned; k++) free(sr->owned[k]);
  free(sr->owned);
  for (int k = 0; k < sr->ndrops; k++) free(sr->drops[k]);
  free(sr->drops);
  optimal_free(sr->opt, sr->nopt);
  free(sr->ladder), free(sr->saved), free(sr->group_busy);
  plan_free(sr->base);
}

Plan *search_auto(Graph *g, const Route *r, const PlanOpts *o, const DeviceProfile *dev,
                  int64_t budget, int64_t host_budget) {
  Search sr;
  search_init(&sr, g, r, o, dev, budget, host_budget);
  sr.defer = true;
  run_chains(&sr);
  if (sr.best) {
    plan_pack(g, sr.best);
    if (!fits(&sr, sr.best)) {
      /* fragmentation: the fastest by live bytes does not fit packed */
      char *line = xasprintf("#%d packed: arena %s, over the budget; searching again, packing "
                             "every new best at once\n", sr.best_tried, fmt_bytes(sr.best->arena_bytes));
      log_line(&sr, line);
      free(line);
      plan_free(sr.best), sr.best = NULL;
      sr.defer = false;
      run_chains(&sr);
    }
  }
  Plan *pl = sr.best;
  if (pl) {
    char host[32];
    snprintf(host, sizeof host, "%s", fmt_bytes(pl->host_bytes));
    char *line = xasprintf("chosen: #%d, arena %s, host arena %s (%d candidates planned, %ld "
                           "recomputing routes built)\n", sr.best_tried, fmt_bytes(pl->arena_bytes),
                           host, sr.tried, rc_rebuilds);
    log_line(&sr, line);
    free(line);
    pl->opts.policy = POL_AUTO;
    pl->auto_log = sr.log;
  } else {
    free(sr.log);
  }
  search_free(&sr);
  return pl;
}

SearchSmallest search_smallest(Graph *g, const Route *r, const PlanOpts *o,
                               const DeviceProfile *dev, int64_t budget, int64_t host_budget,
                               double seconds) {
  Search sr;
  search_init(&sr, g, r, o, dev, budget, host_budget);
  sr.enumerate = true;
  sr.deadline = seconds > 0 ? seconds : g->nfwd > LARGE_GRAPH_NODES ? 20.0 : 0;
  sr.sm = (SearchSmallest){.arena = INT64_MAX, .host = INT64_MAX, .any = INT64_MAX};
  run_chains(&sr);
  sr.sm.exact = !sr.stopped;
  free(sr.log);
  search_free(&sr);
  return sr.sm;
}
