/* optimal.c — auto's optimal persistent checkpointing family: the schedule
 * of rebuilds that costs least for a given memory, over the chain of cuts,
 * by dynamic programming (the persistent schedules of Beaumont et al. 2019,
 * "Optimal checkpointing for heterogeneous chains").
 *
 * Requires: the base plan (route and liveness, nothing rebuilt).
 * Provides: OptSchedules (what the forward pass drops, and a keep rule for
 * the rebuilds: recompute.c's RcTree) that search.c plans as candidates.
 *
 * The chain. The cuts that a backward step reads (forward_cuts: the only
 * activation crossing a point of the forward order) C_1 .. C_n-1 split the forward activations into
 * intervals: interval 0 before C_1, interval j from C_j to just before
 * C_j+1 (on graphs with more than OPT_INTERVALS intervals, every r-th cut
 * only). Per interval j, from the base plan:
 *   G_j     seconds of going from C_j to C_j+1 (its forward nodes, and the
 *           one that makes C_j+1; cost model, rc_node_seconds);
 *   R_j     seconds of rebuilding its tensors that backward reads (its
 *           tape) from C_j: their producers in the interval, and theirs;
 *   tape_j  bytes of its tape, C_j not counted;
 *   cut_j   bytes of C_j.
 * The backward steps run interval by interval from the last (recompute.c
 * puts a backward step in the interval of the forward node it derives from,
 * counted as here), each needing its interval's tape and C_j.
 *
 * The dynamic program. E(s, t, m): the least seconds of rebuilds for the
 * backward of intervals t .. s, with C_s held and m more bytes free:
 *   s == t:   R_s, where tape_s <= m (rebuild the tape, run the backward);
 *   keep s:   G_s + E(s+1, t, m - tape_s - cut_s+1) (go forward keeping
 *             interval s's tape: its backward runs after those above it);
 *   split k:  G_s + ... + G_k-1 + E(k, t, m - cut_k) + E(s, k-1, m)
 *             (go forward to C_k, keep it, do what lies above it, free it).
 * T(s, m), the same for the whole rest of the chain from C_s in the first
 * forward pass, where going forward costs nothing (it is the forward pass
 * itself): the last interval keeps its tape; keep s: T(s+1, m - tape_s -
 * cut_s+1); split k: T(k, m - cut_k) + E(s, k-1, m). Memory in units of at
 * most OPT_UNITS per chain (sizes rounded to the nearest unit: a tensor
 * under half a unit costs nothing in the model): O(n^3 units) time.
 *
 * The schedule of T(0, M), as recompute.c runs it: the forward pass keeps
 * the cuts and tapes on the path of the last interval and drops every
 * other forward activation; while the backward pass is in interval q, a
 * rebuilt tensor stays after the step that made it where it is on the
 * path of q (a split's C_k or a keep's tape and cut of an enclosing
 * subproblem) or in interval q (RcTree.keep); the rest dies after its last
 * reader. ensure() rebuilds from the nearest kept tensor, which on the path
 * is the subproblem's start: the rebuilds are the schedule's.
 *
 * Schedules: the M where T(0, M) steps down (the smallest memory for each
 * cost), thinned so that every one left out has one kept at no more memory
 * costing at most OPT_THIN more of the step; at most OPT_SCHEDULES. The
 * model leaves out what the plan adds (gradients, workspaces, the
 * transient tensors of a rebuild, packing): search.c plans each schedule
 * for real and keeps what fits.
 *
 * Not here: planning the schedules (search.c), the rebuilds (recompute.c). */
#include "plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_UNITS = 768 };
/* Thinning: a schedule left out has a kept one at no more memory within
 * this fraction of the liveness step (doubled while more than
 * OPT_SCHEDULES are left). */
#define OPT_THIN 0.001

enum { CH_NONE = -3, CH_LEAF = -2, CH_KEEP = -1 };   /* else: split at k */

typedef struct Dp {
  int n, mu;               // intervals, memory units (0 .. mu)
  double *G, *pre, *R;     // per interval; pre[k] = G_0 + ... + G_k-1
  int *tape, *cut;         // units
  double *E;               // [(s * n + t) * (mu + 1) + m]
  short *EC;               // ... its choice
  double *T;               // [s * (mu + 1) + m]
  short *TC;
} Dp;

static size_t ei(const Dp *d, int s, int t, int m) {
  return ((size_t)s * (size_t)d->n + (size_t)t) * (size_t)(d->mu + 1) + (size_t)m;
}
static size_t ti(const Dp *d, int s, int m) { return (size_t)s * (size_t)(d->mu + 1) + (size_t)m; }

static void solve_e(Dp *d) {
  int n = d->n, mu = d->mu;
  for (int len = 0; len < n - 1; len++)
    for (int s = 0; s + len < n - 1; s++) {
      int t = s + len;
      for (int m = 0; m <= mu; m++) {
        double best = INFINITY;
        short ch = CH_NONE;
        if (len == 0) {
          if (d->tape[s] <= m) best = d->R[s], ch = CH_LEAF;
        } else {
          int r = m - d->tape[s] - d->cut[s + 1];
          if (r >= 0 && d->G[s] + d->E[ei(d, s + 1, t, r)] < best)
            best = d->G[s] + d->E[ei(d, s + 1, t, r)], ch = CH_KEEP;
          for (int k = s + 1; k <= t; k++) {
            r = m - d->cut[k];
            if (r < 0) continue;
            double v = d->pre[k] - d->pre[s] + d->E[ei(d, k, t, r)] + d->E[ei(d, s, k - 1, m)];
            if (v < best) best = v, ch = (short)k;
          }
        }
        d->E[ei(d, s, t, m)] = best, d->EC[ei(d, s, t, m)] = ch;
      }
    }
}

static void solve_t(Dp *d) {
  int n = d->n, mu = d->mu;
  for (int s = n - 1; s >= 0; s--)
    for (int m = 0; m <= mu; m++) {
      double best = INFINITY;
      short ch = CH_NONE;
      if (s == n - 1) {
        if (d->tape[s] <= m) best = 0, ch = CH_LEAF;
      } else {
        int r = m - d->tape[s] - d->cut[s + 1];
        if (r >= 0) best = d->T[ti(d, s + 1, r)], ch = CH_KEEP;
        for (int k = s + 1; k < n; k++) {
          r = m - d->cut[k];
          if (r < 0) continue;
          double v = d->T[ti(d, k, r)] + d->E[ei(d, s, k - 1, m)];
          if (v < best) best = v, ch = (short)k;
        }
      }
      d->T[ti(d, s, m)] = best, d->TC[ti(d, s, m)] = ch;
    }
}

/* Marks what the schedule of T(0, mem) keeps while the backward pass is in
 * interval q: bit 0 of row[j], cut j; bit 1, interval j's tape. */
static void path(const Dp *d, int mem, int q, unsigned char *row) {
  int s = 0, t = d->n - 1, m = mem;
  bool top = true;
  for (;;) {
    int ch = top ? d->TC[ti(d, s, m)] : d->EC[ei(d, s, t, m)];
    row[s] |= 1;
    if (ch == CH_NONE) internal_error(__FILE__, __LINE__, "an infeasible checkpointing schedule");
    if (ch == CH_LEAF) {
      row[s] |= 2;
      return;
    }
    if (ch == CH_KEEP) {
      row[s] |= 2;
      if (q == s) return;
      m -= d->tape[s] + d->cut[s + 1], s++;
      continue;
    }
    if (q >= ch) m -= d->cut[ch], s = ch;
    else t = ch - 1, top = false;
  }
}

/* The intervals (gi, cut per tensor), and the chain's G, R and sizes in
 * bytes (tapeb, cutb), and *total, the bytes of every saved tensor among
 * them. Returns the number of intervals. */
static int intervals(Graph *g, const Plan *base, const DeviceProfile *dev, const bool *saved,
                     int *gi, bool *cut, Dp *d, int64_t **tapeb, int64_t **cutb,
                     int64_t *total) {
  /* the cuts a backward step reads (one it does not read is never worth
   * holding: the interval it starts would have nothing to rebuild) */
  bool *all = forward_cuts(g);
  for (int t = 0; t < g->nt; t++) all[t] = all[t] && saved[t];
  int ncut = 0;
  for (int i = 0; i < g->nfwd; i++)
    for (int k = 0; k < g->n[i].nout; k++) ncut += g->n[i].out[k] >= 0 && all[g->n[i].out[k]];
  int every = (ncut + OPT_INTERVALS - 2) / (OPT_INTERVALS - 1);
  if (every < 1) every = 1;
  int n = 1, seen = 0;
  for (int t = 0; t < g->nt; t++) gi[t] = -1;
  for (int i = 0; i < g->nfwd; i++)
    for (int k = 0; k < g->n[i].nout; k++) {
      int t = g->n[i].out[k];
      if (t < 0 || g->t[t].kind != TK_ACT) continue;
      if (all[t] && ++seen % every == 0) cut[t] = true, n++;
      gi[t] = n - 1;
    }
  free(all);
  d->n = n;
  d->G = xcalloc((size_t)n + 1, sizeof(double));
  d->R = xcalloc((size_t)n + 1, sizeof(double));
  d->pre = xcalloc((size_t)n + 2, sizeof(double));
  *tapeb = xcalloc((size_t)n + 1, sizeof(int64_t));
  *cutb = xcalloc((size_t)n + 1, sizeof(int64_t));
  /* need[t]: rebuilding interval gi[t]'s tape makes t */
  bool *need = xcalloc((size_t)g->nt + 1, sizeof(bool));
  for (int t = 0; t < g->nt; t++)
    if (gi[t] >= 0 && saved[t] && !cut[t]) need[t] = true;
  for (int i = g->nfwd - 1; i >= 0; i--) {
    const Node *nd = &g->n[i];
    int y = nd->nout ? nd->out[0] : -1;
    if (y < 0 || gi[y] < 0) continue;
    int j = gi[y] - (cut[y] ? 1 : 0);   /* a cut's producer belongs to the interval before */
    double sec = rc_node_seconds(g, base, nd, dev);
    d->G[j] += sec;
    bool needed = false;
    for (int k = 0; k < nd->nout; k++) needed |= nd->out[k] >= 0 && need[nd->out[k]];
    if (!needed) continue;
    d->R[gi[y]] += sec;
    for (int k = 0; k < nd->nin; k++) {
      int x = nd->in[k];
      if (x >= 0 && gi[x] == gi[y] && !cut[x]) need[x] = true;
    }
  }
  free(need);
  for (int t = 0; t < g->nt; t++) {
    if (gi[t] < 0) continue;
    int64_t b = arena_align(tensor_bytes(&g->t[t]));
    if (saved[t]) *total += b;
    if (cut[t]) (*cutb)[gi[t]] += b;
    else if (saved[t]) (*tapeb)[gi[t]] += b;
  }
  for (int j = 0; j < n; j++) d->pre[j + 1] = d->pre[j] + d->G[j];
  return n;
}

static void dp_free(Dp *d) {
  free(d->G), free(d->pre), free(d->R), free(d->tape), free(d->cut);
  free(d->E), free(d->EC), free(d->T), free(d->TC);
}

/* One schedule: T(0, mem)'s keep matrix and the forward pass's drops. */
static void make_schedule(const Graph *g, const Dp *d, int mem, int64_t unit, const int *gi,
                          const bool *cut, OptSchedule *o) {
  int n = d->n;
  o->tree = (RcTree){.n = n, .gi = gi, .cut = cut};
  o->tree.keep = xcalloc((size_t)n * (size_t)n, 1);
  for (int q = 0; q < n; q++) path(d, mem, q, o->tree.keep + (size_t)q * (size_t)n);
  o->bytes = (int64_t)mem * unit;
  o->seconds = d->T[ti(d, 0, mem)];
  /* the forward pass keeps what the last interval's path keeps */
  const unsigned char *last = o->tree.keep + (size_t)(n - 1) * (size_t)n;
  o->drop = xcalloc((size_t)g->nt + 1, sizeof(bool));
  o->kept = 0;
  for (int j = 1; j < n; j++) o->kept += last[j] & 1;
  for (int i = 0; i < g->nfwd; i++)
    for (int k = 0; k < g->n[i].nout; k++) {
      int t = g->n[i].out[k];
      if (t < 0 || gi[t] < 0 || g->t[t].kind != TK_ACT || gi[t] == n - 1) continue;
      o->drop[t] = !(last[gi[t]] & (cut[t] ? 1 : 2));
    }
}

int optimal_schedules(Graph *g, const Plan *base, const DeviceProfile *dev, double step,
                      OptSchedule **out) {
  *out = NULL;
  bool *saved = plan_saved_tensors(g);
  int *gi = xmalloc(sizeof(int) * (size_t)(g->nt + 1));
  bool *cut = xcalloc((size_t)g->nt + 1, sizeof(bool));
  Dp d = {0};
  int64_t *tapeb, *cutb, total = 0;
  int n = intervals(g, base, dev, saved, gi, cut, &d, &tapeb, &cutb, &total);
  free(saved);
  if (n < 3 || total <= 0) {
    free(gi), free(cut), free(tapeb), free(cutb), dp_free(&d);
    return 0;
  }
  /* memory: up to what keeping every saved tensor takes (more buys nothing) */
  int64_t unit = (total + OPT_UNITS - 1) / OPT_UNITS;
  d.mu = (int)((total + unit - 1) / unit);
  d.tape = xmalloc(sizeof(int) * (size_t)n), d.cut = xmalloc(sizeof(int) * (size_t)n);
  for (int j = 0; j < n; j++)
    d.tape[j] = (int)((tapeb[j] + unit / 2) / unit), d.cut[j] = (int)((cutb[j] + unit / 2) / unit);
  free(tapeb), free(cutb);
  size_t ne = (size_t)n * (size_t)n * (size_t)(d.mu + 1);
  d.E = xmalloc(sizeof(double) * ne), d.EC = xmalloc(sizeof(short) * ne);
  d.T = xmalloc(sizeof(double) * (size_t)n * (size_t)(d.mu + 1));
  d.TC = xmalloc(sizeof(short) * (size_t)n * (size_t)(d.mu + 1));
  solve_e(&d);
  solve_t(&d);
  /* the memories where the cost steps down; thinned (see the header) */
  int *at = xmalloc(sizeof(int) * (size_t)(d.mu + 1)), nat = 0;
  for (int m = 0; m <= d.mu; m++) {
    double c = d.T[ti(&d, 0, m)];
    if (isfinite(c) && c > 0 && (!nat || c < d.T[ti(&d, 0, at[nat - 1])] - 1e-12)) at[nat++] = m;
  }
  int *keep = xmalloc(sizeof(int) * (size_t)(nat + 1)), nk = 0;
  for (double eps = OPT_THIN; nat; eps *= 2) {
    nk = 0;
    for (int i = 0; i < nat; i++) {
      double c = d.T[ti(&d, 0, at[i])];
      if (!nk || d.T[ti(&d, 0, keep[nk - 1])] > c + eps * step) keep[nk++] = at[i];
    }
    if (nk <= OPT_SCHEDULES) break;
  }
  OptSchedule *o = nk ? xcalloc((size_t)nk, sizeof *o) : NULL;
  for (int i = 0; i < nk; i++) make_schedule(g, &d, keep[i], unit, gi, cut, &o[i]);
  free(at), free(keep), dp_free(&d);
  if (!nk) free(gi), free(cut);
  *out = o;
  return nk;
}

void optimal_free(OptSchedule *s, int n) {
  for (int k = 0; k < n; k++) free(s[k].drop), free(s[k].tree.keep);
  if (n) free((void *)s[0].tree.gi), free((void *)s[0].tree.cut);
  free(s);
}
