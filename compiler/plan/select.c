/* select.c — auto's per-tensor rebuild family: which forward activations to
 * rebuild, chosen one at a time by the bytes a rebuild takes off the peak per
 * second it costs.
 *
 * Requires: the base plan (route and liveness, nothing rebuilt).
 * Provides: two families of nested drop sets (each the set before plus one or more rebuilds)
 * that search.c plans as candidates of auto (recompute.c rebuilds what a set
 * drops, each dropped tensor once, speed-centric).
 *
 * A unit is one activation t that a backward step reads (saved), with what
 * rebuilding it needs that nothing keeps: the producer of t, and, backwards
 * from it, the producers of the inputs that no backward step reads (those
 * die in the forward pass in the liveness plan; keeping them for the rebuild
 * would cost what dropping t saves). A transformer's attention
 * probabilities: the Softmax (the causal mask folded in by fuse.c) and the
 * scaled QK^T MatMul, whose inputs Q and K the backward pass keeps anyway
 * (Megatron's selective recomputation, Korthikanti et al. 2022). A unit
 * needs at most UNIT_NODES nodes.
 *
 * In the liveness plan, t is idle between its last forward reader and its
 * first backward reader: dropping it takes its bytes off exactly those steps
 * (the rebuild is made just before the first backward reader and kept until
 * the last, as before). An output that its producer's backward step's
 * carrier can rebuild (recompute.c, carried rebuilds: a fused chain's, a
 * LayerNorm's) costs only what the carrier adds, the write of the output,
 * and is live again at the carrier's step. A greedy walk: at the step where the live bytes
 * peak, of the units idle there, one is chosen, its bytes taken off its
 * idle steps, and so on until no unit is idle at the peak. Two walks, two
 * rules: the most bytes per second of rebuild (cost_node_seconds of its
 * nodes); and the most taken off the estimated peak over every step per
 * second, ties (another step peaking as high) by bytes per second. Neither
 * is always better: by bytes, a unit idle only at the higher of two
 * near-equal peaks is picked for the little it takes off (a GPT's last
 * GELU output, 8 MiB for 1.2); by the peak, a unit that the next pick would
 * have made worth its bytes is passed over. The peak a walk tracks is an
 * estimate (it ignores the rebuilt intermediates and in-place steps); auto
 * plans each set for real and keeps what fits.
 *
 * Sets: per walk, its prefixes where the estimated peak first falls below
 * each of SELECT_SETS levels spaced evenly between the liveness peak and the
 * walk's last, so that a budget anywhere in between finds a set that lands
 * close under it; a later walk's sets that an earlier one gave are left
 * out. Where some unit has a carrier, the two walks run twice: by the
 * carried costs, then by the recompute steps' (a carrier holds what it
 * rebuilds beside its own step's tensors; at a tight budget that step can
 * be the peak, and search.c plans each set with carriers and without).
 *
 * Not here: planning the sets (search.c), the rebuilds (recompute.c). */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

enum { UNIT_NODES = 8 };

typedef struct Unit {
  int t;                   // the saved tensor
  int64_t bytes;           // its instance's bytes
  int from, to;            // idle on the base route's steps from < s < to
  int at;                  // a carried rebuild: the carrier's step, where it is live again (-1)
  double seconds;          // rebuilding it (and its unsaved inputs)
  double plain;            // ... by recompute steps (where its carrier would do it for less)
  int drop0, ndrop;        // its dropped tensors: pool[drop0 .. drop0 + ndrop)
  bool chosen;
} Unit;

/* The unit of saved tensor t (false where its rebuild needs more than
 * UNIT_NODES nodes or a tensor that cannot be rebuilt). */
static bool make_unit(const Graph *g, const Plan *base, const bool *saved, int t,
                      const DeviceProfile *dev, const int *carry, int *stamp, int mark, int **pool,
                      int *npool, int *cappool, Unit *u) {
  int nodes[UNIT_NODES], nn = 0, stack[UNIT_NODES * 8], sp = 0;
  u->drop0 = *npool, u->ndrop = 0, u->seconds = 0;
  stack[sp++] = t;
  stamp[t] = mark;
  while (sp) {
    int x = stack[--sp];
    int p = g->t[x].producer;
    if (p < 0 || p >= g->nfwd || g->n[p].phase != PH_FORWARD) return false;
    xgrow((void **)pool, cappool, *npool + 1, sizeof(int));
    (*pool)[(*npool)++] = x;
    u->ndrop++;
    bool dup = false;
    for (int k = 0; k < nn; k++) dup |= nodes[k] == p;
    if (dup) continue;
    if (nn == UNIT_NODES) return false;
    nodes[nn++] = p;
    const Node *n = &g->n[p];
    for (int k = 0; k < n->nin; k++) {
      int y = n->in[k];
      if (y < 0 || g->t[y].kind != TK_ACT || saved[y] || stamp[y] == mark) continue;
      if (sp == (int)(sizeof stack / sizeof stack[0])) return false;
      stamp[y] = mark;
      stack[sp++] = y;
    }
  }
  for (int k = 0; k < nn; k++) u->seconds += rc_node_seconds(g, base, &g->n[nodes[k]], dev);
  if (u->seconds <= 0) u->seconds = 1e-12;
  u->plain = u->seconds;
  u->at = -1;
  if (nn == 1 && carry[t] >= 0) {   /* its backward step's carrier rebuilds it: the extra write */
    int b = base->route->s[carry[t]].node, c = g->n[b].twin;
    u->at = carry[t];
    u->seconds = rc_node_seconds(g, base, &g->n[c], dev) - rc_node_seconds(g, base, &g->n[b], dev);
    if (u->seconds <= 0) u->seconds = 1e-12;
  }
  return true;
}

/* Range maxima over the live bytes (a sparse table, rebuilt per pick). */
typedef struct RangeMax {
  int64_t *t;              // levels of n entries: t[j * n + s] = max of live[s .. s + 2^j)
  int n, levels, cap;
} RangeMax;

static void range_max_build(RangeMax *r, const int64_t *v, int n) {
  int levels = 1;
  while ((1 << levels) <= n) levels++;
  if ((int64_t)levels * n > r->cap) {
    r->cap = levels * n;
    r->t = xrealloc(r->t, sizeof(int64_t) * (size_t)r->cap);
  }
  r->n = n, r->levels = levels;
  memcpy(r->t, v, sizeof(int64_t) * (size_t)n);
  for (int j = 1; j < levels; j++)
    for (int s = 0; s + (1 << j) <= n; s++) {
      int64_t a = r->t[(j - 1) * n + s], b = r->t[(j - 1) * n + s + (1 << (j - 1))];
      r->t[j * n + s] = a > b ? a : b;
    }
}

/* max of v[lo .. hi) (0 where empty) */
static int64_t range_max(const RangeMax *r, int lo, int hi) {
  if (hi <= lo) return 0;
  int j = 0;
  while ((2 << j) <= hi - lo) j++;
  int64_t a = r->t[j * r->n + lo], b = r->t[j * r->n + hi - (1 << j)];
  return a > b ? a : b;
}

static void range_max_free(RangeMax *r) { free(r->t); }

/* One greedy walk over the live bytes of the training steps (by_gain: by
 * what a unit takes off the estimated peak per second; else by its bytes
 * per second); appends its sets to sets[n..] (at most SELECT_SETS, none
 * that an earlier walk gave already); returns the new count. */
static int walk_sets(const Graph *g, const Plan *base, Unit *u, int nu, const int *pool,
                     bool by_gain, bool **sets, int n0) {
  int ns = base->route->train_steps;
  int64_t *live = xmalloc(sizeof(int64_t) * (size_t)ns);
  memcpy(live, base->live_bytes, sizeof(int64_t) * (size_t)ns);
  int64_t *peak_after = xmalloc(sizeof(int64_t) * (size_t)(nu + 1));
  int *order = xmalloc(sizeof(int) * (size_t)(nu + 1));
  int64_t peak0 = 0;
  for (int s = 0; s < ns; s++) peak0 = live[s] > peak0 ? live[s] : peak0;
  int nchosen = 0;
  RangeMax rm = {0};
  for (;;) {
    int P = 0;
    for (int s = 1; s < ns; s++)
      if (live[s] > live[P]) P = s;
    if (by_gain) range_max_build(&rm, live, ns);
    int best = -1;
    double best_gain = 0, best_dens = 0;
    for (int k = 0; k < nu; k++) {
      if (u[k].chosen || u[k].from >= P || u[k].to <= P) continue;
      double gain = 0, dens = (double)u[k].bytes / u[k].seconds;
      if (by_gain) {   /* the estimated peak with u[k] dropped: its idle steps lose its bytes */
        int64_t a = range_max(&rm, 0, u[k].from + 1), b = range_max(&rm, u[k].to, ns);
        int64_t out = a > b ? a : b, in = range_max(&rm, u[k].from + 1, u[k].to) - u[k].bytes;
        if (u[k].at >= 0 && live[u[k].at] + u[k].bytes > out) out = live[u[k].at] + u[k].bytes;
        gain = (double)(live[P] - (out > in ? out : in)) / u[k].seconds;
      }
      if (best < 0 || gain > best_gain || (gain == best_gain && dens > best_dens))
        best = k, best_gain = gain, best_dens = dens;
    }
    if (best < 0) break;
    u[best].chosen = true;
    for (int s = u[best].from + 1; s < u[best].to; s++) live[s] -= u[best].bytes;
    if (u[best].at >= 0) live[u[best].at] += u[best].bytes;   /* the carrier holds it */
    int64_t pk = 0;
    for (int s = 0; s < ns; s++) pk = live[s] > pk ? live[s] : pk;
    order[nchosen] = best, peak_after[nchosen++] = pk;
  }
  range_max_free(&rm);
  /* The sets: prefixes at SELECT_SETS levels of the estimated peak. */
  int n = n0;
  if (nchosen) {
    int64_t last = peak_after[nchosen - 1];
    bool *cur = xcalloc((size_t)g->nt + 1, sizeof(bool));
    int level = 1;
    for (int k = 0; k < nchosen && n < n0 + SELECT_SETS; k++) {
      const Unit *x = &u[order[k]];
      for (int j = 0; j < x->ndrop; j++) cur[pool[x->drop0 + j]] = true;
      int64_t mark = peak0 - (int64_t)((double)(peak0 - last) * level / SELECT_SETS);
      if (peak_after[k] > mark && k < nchosen - 1) continue;
      while (level <= SELECT_SETS &&
             peak_after[k] <= peak0 - (int64_t)((double)(peak0 - last) * level / SELECT_SETS))
        level++;
      bool dup = false;
      for (int j = 0; j < n0 && !dup; j++) dup = !memcmp(sets[j], cur, (size_t)g->nt + 1);
      if (dup) continue;
      sets[n] = xmalloc((size_t)g->nt + 1);
      memcpy(sets[n++], cur, (size_t)g->nt + 1);
    }
    free(cur);
  }
  free(live), free(peak_after), free(order);
  return n;
}

int select_rebuild_sets(Graph *g, const Plan *base, const DeviceProfile *dev, bool ***sets) {
  const Route *r = base->route;
  int ns = r->train_steps;
  *sets = NULL;
  if (ns <= 0) return 0;
  bool *saved = xcalloc((size_t)g->nt + 1, sizeof(bool));
  int *lastf = xmalloc(sizeof(int) * (size_t)(g->nt + 1));
  int *firstb = xmalloc(sizeof(int) * (size_t)(g->nt + 1));
  int *users = xcalloc((size_t)base->ninst + 1, sizeof(int));   // tensors per instance
  for (int t = 0; t < g->nt; t++) lastf[t] = -1, firstb[t] = -1;
  for (int s = 0; s < ns; s++) {
    const Step *st = &r->s[s];
    if (st->node < 0) continue;
    const Node *n = &g->n[st->node];
    bool bwd = st->kind == SK_BACKWARD;
    for (int k = 0; k < n->nin; k++) {
      int t = n->in[k];
      if (t < 0) continue;
      if (bwd) {
        saved[t] = true;
        if (firstb[t] < 0) firstb[t] = s;
      } else if (firstb[t] < 0) {
        lastf[t] = s;
      }
    }
  }
  for (int t = 0; t < g->nt && t < base->ntensors; t++)
    if (base->tensor_inst[t] >= 0) users[base->tensor_inst[t]]++;
  int *carry = rc_carry_steps(g, r);   /* makes the carriers (g->n may move) */
  Unit *u = NULL;
  int nu = 0, capu = 0, *pool = NULL, npool = 0, cappool = 0;
  int *stamp = xcalloc((size_t)g->nt + 1, sizeof(int));
  for (int t = 0; t < g->nt && t < base->ntensors; t++) {
    int i = base->tensor_inst[t];
    if (!saved[t] || g->t[t].kind != TK_ACT || i < 0 || users[i] != 1 || lastf[t] < 0 ||
        firstb[t] - lastf[t] < 2)
      continue;
    Unit x = {.t = t, .bytes = base->inst[i].bytes, .from = lastf[t], .to = firstb[t]};
    int keep = npool;
    if (!make_unit(g, base, saved, t, dev, carry, stamp, t + 1, &pool, &npool, &cappool, &x)) {
      npool = keep;
      continue;
    }
    xgrow((void **)&u, &capu, nu + 1, sizeof *u);
    u[nu++] = x;
  }
  free(stamp), free(users), free(saved), free(lastf), free(firstb), free(carry);
  /* The walks by the rebuilds' costs with carriers, then (where some unit
   * has one) by their costs without: a carrier holds what it rebuilds
   * beside its step's tensors, so at a tight budget the sets the second
   * pair of walks gives can fit where the first's do not. */
  bool carried = false;
  for (int k = 0; k < nu; k++) carried |= u[k].seconds != u[k].plain;
  *sets = xcalloc(4 * SELECT_SETS + 1, sizeof(bool *));
  int nsets = 0;
  for (int pass = 0; pass < 1 + carried; pass++) {
    for (int k = 0; k < nu && pass; k++) u[k].seconds = u[k].plain, u[k].at = -1;
    for (int by_gain = 0; by_gain < 2; by_gain++) {
      for (int k = 0; k < nu; k++) u[k].chosen = false;
      nsets = walk_sets(g, base, u, nu, pool, by_gain, *sets, nsets);
    }
  }
  free(u), free(pool);
  return nsets;
}
