/* host_state.c — persistent state in the host arena, when the budget
 * demands it: optimizer state, and with `params` the parameters too, live in
 * the pinned host arena for the whole program.
 *
 * Requires: a route with lifetimes, after offload_plan (plan.c runs this
 * last of the passes that add steps).
 * Provides: for each cluster of steps using such a tensor (the update; a
 * forward read; a backward read and the update...), a device copy
 * prefetched just before the cluster and, if the cluster writes it, written
 * back just after; both copies are synchronous (compute waits for each), so
 * only the tensors of the steps at hand are on the device. Their time counts
 * in Plan.exposed_seconds; offload_persistent_seconds estimates it without
 * changing the plan (auto's search).
 *
 * Not here: activations (offload.c), which plans need it (plan.c).
 */
#include "plan.h"

#include <stdlib.h>

/* One cluster of a tensor's uses: steps [first, last], its device copy. */
typedef struct HostUse { int first, last, dev; bool writes; } HostUse;

/* The persistent instances that move (optimizer state; with params,
 * parameters too) and their trips: uses clustered (steps at most 1 apart). */
static HostUse **host_trips(const Graph *g, const Plan *pl, bool params, bool **sel_out,
                            int **ntrip_out) {
  const Route *old = pl->route;
  int T = old->ns, n0 = pl->ninst;
  bool *sel = xcalloc((size_t)n0 + 1, sizeof(bool));
  for (int i = 0; i < n0; i++) {
    const Instance *in = &pl->inst[i];
    if (in->tensor < 0 || !in->persistent || in->host) continue;
    TensorKind k = g->t[in->tensor].kind;
    if (k == TK_OPT || (params && k == TK_PARAM)) sel[i] = true;
  }
  HostUse **trip = xcalloc((size_t)n0 + 1, sizeof(HostUse *));
  int *ntrip = xcalloc((size_t)n0 + 1, sizeof(int));
  for (int s = 0; s < T; s++) {
    const Step *st = &old->s[s];
    for (int k = 0; k < st->nin + st->nout; k++) {
      int i = k < st->nin ? st->in[k] : st->out[k - st->nin];
      if (i < 0 || i >= n0 || !sel[i]) continue;
      bool w = k >= st->nin;
      HostUse *last = ntrip[i] ? &trip[i][ntrip[i] - 1] : NULL;
      /* Training and eval steps never share a trip. */
      if (last && s - last->last <= 1 && (s < old->train_steps) == (last->last < old->train_steps)) {
        last->last = s;
        last->writes |= w;
        continue;
      }
      trip[i] = xrealloc(trip[i], sizeof(HostUse) * (size_t)(ntrip[i] + 1));
      trip[i][ntrip[i]++] = (HostUse){.first = s, .last = s, .dev = -1, .writes = w};
    }
  }
  *sel_out = sel, *ntrip_out = ntrip;
  return trip;
}

double offload_persistent_seconds(const Graph *g, const Plan *pl, const DeviceProfile *dev,
                                  bool params) {
  bool *sel;
  int *ntrip;
  HostUse **trip = host_trips(g, pl, params, &sel, &ntrip);
  double t = 0;
  for (int i = 0; i < pl->ninst; i++) {
    for (int k = 0; k < ntrip[i]; k++) {
      if (trip[i][k].first >= pl->route->train_steps) continue;
      double b = (double)pl->inst[i].bytes;
      t += cost_copy_seconds(b, COPY_H2D, dev);
      if (trip[i][k].writes) t += cost_copy_seconds(b, COPY_D2H, dev);
    }
    free(trip[i]);
  }
  free(trip), free(ntrip), free(sel);
  return t;
}

/* Returns how many tensors moved. */
int offload_persistent(Graph *g, Plan *pl, const DeviceProfile *dev, bool params) {
  const Route *old = pl->route;
  int T = old->ns, n0 = pl->ninst, moved = 0;
  bool *sel;
  int *ntrip;
  HostUse **trip = host_trips(g, pl, params, &sel, &ntrip);
  int *cur = xcalloc((size_t)n0 + 1, sizeof(int));
  for (int i = 0; i < n0; i++) {
    if (!sel[i] || !ntrip[i]) continue;
    pl->inst[i].host = true;
    for (int k = 0; k < ntrip[i]; k++) trip[i][k].dev = plan_new_instance(pl, pl->inst[i].tensor, pl->inst[i].bytes, false);
    moved++;
  }
  if (!moved) {
    for (int i = 0; i < n0; i++) free(trip[i]);
    free(trip), free(ntrip), free(cur), free(sel);
    return 0;
  }
  /* Steps by the trips that start and end at them. */
  int **starts = xcalloc((size_t)T + 1, sizeof(int *)), *nstarts = xcalloc((size_t)T + 1, sizeof(int));
  int **ends = xcalloc((size_t)T + 1, sizeof(int *)), *nends = xcalloc((size_t)T + 1, sizeof(int));
  for (int i = 0; i < n0; i++)
    for (int k = 0; k < ntrip[i]; k++) {
      plan_push_int(&starts[trip[i][k].first], &nstarts[trip[i][k].first], i);
      if (trip[i][k].writes) plan_push_int(&ends[trip[i][k].last], &nends[trip[i][k].last], i);
    }
  Route *r = xcalloc(1, sizeof *r);
  for (int s = 0; s < T; s++) {
    bool train = s < old->train_steps;
    for (int k = 0; k < nstarts[s]; k++) {     /* bring the copy in, wait at once */
      int h = starts[s][k];
      while (trip[h][cur[h]].last < s) cur[h]++;
      int ev = pl->nevents++;
      Step pf = {.kind = SK_PREFETCH, .node = -1, .tensor = pl->inst[h].tensor, .nin = 1,
                 .nout = 1, .in = &h, .out = &trip[h][cur[h]].dev, .ws = -1, .event = ev,
                 .wait = &ev, .nwait = 1};
      route_push(r, &pf);
      if (train) {
        pl->offload_bytes += (double)pl->inst[h].bytes;
        pl->exposed_seconds += cost_copy_seconds((double)pl->inst[h].bytes, COPY_H2D, dev);
      }
    }
    Step *ns = route_push(r, &old->s[s]);
    for (int k = 0; k < ns->nin + ns->nout; k++) {
      int *p = k < ns->nin ? &ns->in[k] : &ns->out[k - ns->nin];
      if (*p < 0 || *p >= n0 || !sel[*p] || !ntrip[*p]) continue;
      int h = *p;
      while (trip[h][cur[h]].last < s) cur[h]++;
      snc_assert(trip[h][cur[h]].first <= s);
      *p = trip[h][cur[h]].dev;
    }
    for (int k = 0; k < nends[s]; k++) {       /* write back, wait before reuse */
      int h = ends[s][k];
      int d = trip[h][cur[h]].dev, ev = pl->nevents++;
      Step off = {.kind = SK_OFFLOAD, .node = -1, .tensor = pl->inst[h].tensor, .nin = 1,
                  .nout = 1, .in = &d, .out = &h, .ws = -1, .event = ev, .wait = &ev,
                  .nwait = 1, .keep = &d, .nkeep = 1};
      route_push(r, &off);
      if (train) {
        pl->offload_bytes += (double)pl->inst[h].bytes;
        pl->exposed_seconds += cost_copy_seconds((double)pl->inst[h].bytes, COPY_D2H, dev);
      }
    }
    if (s == old->train_steps - 1) r->train_steps = r->ns;
  }
  route_free((Route *)old);
  pl->route = r;
  for (int s = 0; s <= T; s++) free(starts[s]), free(ends[s]);
  free(starts), free(nstarts), free(ends), free(nends);
  for (int i = 0; i < n0; i++) free(trip[i]);
  free(trip), free(ntrip), free(cur), free(sel);
  liveness_lifetimes(g, pl);
  return moved;
}
