/* offload.c — the unified tensor pool: offload to pinned host memory and
 * prefetch back (SuperNeurons' third technique), planned at compile time.
 *
 * Requires: a route with lifetimes (liveness, after recompute if any).
 * Provides: for each selected tensor, an OFFLOAD step right after its last
 * forward reader (a device-to-host copy on the copy engine, recording an
 * event), a PREFETCH step before its first backward reader (host-to-device
 * into a new device instance), and the waits that make it safe:
 *   - the device region of the forward instance stays busy until the step
 *     after which compute waits for the offload's event (Step.keep/wait), so
 *     nothing reuses it while the copy still reads it;
 *   - the prefetch is issued only after that wait (it reads the host copy),
 *     and compute waits for the prefetch's event after the step just before
 *     the first backward reader; the host region stays busy until then.
 * Every cross-stream dependency is an explicit event record/wait.
 *
 * Timing (the cost model, cost.c): with t[s] the estimated time of step s and
 * tau the copy's time (bytes over the link, per direction), the offload's wait goes after the first step
 * by which tau of compute has run since the copy was issued, and the prefetch
 * goes as late as possible while still leaving tau of compute before its
 * reader. Where the gap is too short the copy is exposed: the wait then
 * stalls compute, and the estimate counts that time (Plan.exposed_seconds).
 * With hidden_only, the copies kept are those that still land in time when
 * both queues (one copy engine per direction, in issue order) are simulated
 * (queue_filter); the others are left out. The part of a copy that runs
 * beside compute also slows that compute where the copy engine shares its
 * cores (cost_copy_loss: the CPU target); the estimate counts that with the
 * exposed time.
 *
 * max_lead (0: no limit) caps how many steps a copy may run ahead of the
 * compute that waits for it; max_lead < 0 makes copies synchronous (compute
 * waits right after issuing each one): memory-centric plans trade exposed
 * transfer time for the smallest footprint.
 *
 * Not here: which tensors to offload (plan.c decides per policy); the
 * persistent state on the host (host_state.c).
 */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

/* One trip back to the device: a prefetch into a fresh instance, read by a
 * cluster of backward steps [first, last]. */
typedef struct Trip {
  int first, last;             // old route: the cluster's first and last reader
  int s_pf;                    // old route: the prefetch goes before this step
  int pre, ev;                 // the prefetched instance, its event
} Trip;

typedef struct Copy {
  int tensor, dev, host;       // tensor; forward device instance; host instance
  int s_last_fwd;              // old route: last forward step touching the instance
  int s_wait;                  // old route: the step after which compute waits for the offload
  int ev_off;
  Trip *trip;                  // in step order
  int ntrip, cur;              // cur: the trip being read while rebuilding the route
  double exposed;              // compute stalled at the waits
  double loss;                 // compute slowed while the copies run beside it (cost_copy_loss)
} Copy;

static void add_int(int **arr, int *n, int v) {
  *arr = xrealloc(*arr, sizeof(int) * (size_t)(*n + 1));
  (*arr)[(*n)++] = v;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

typedef struct Ref { int copy, trip; } Ref;

static int cmp_by_key(const void *x, const void *y) {
  const double *a = x, *b = y;
  return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1];
}

/* Each copy hides on its own; with one copy engine per direction (FIFO in
 * issue order, as the runtimes have) a copy can still wait behind earlier
 * ones and land late. Simulates both queues in issue order and keeps only
 * the copies that still land in time: an offload before the last step its
 * wait may follow (the wait moves to where the queued copy lands), each
 * prefetch before its first reader. P: prefix sums of the step times. */
static int queue_filter(const Plan *pl, Copy *cp, int nc, const double *P,
                        const DeviceProfile *dev) {
  bool *drop = xcalloc((size_t)nc + 1, sizeof(bool));
  double *key = xmalloc(sizeof(double) * 2 * (size_t)(nc + 1));
  for (int c = 0; c < nc; c++) key[2 * c] = cp[c].s_last_fwd, key[2 * c + 1] = c;
  qsort(key, (size_t)nc, 2 * sizeof(double), cmp_by_key);
  double busy = 0;
  for (int k = 0; k < nc; k++) {
    Copy *x = &cp[(int)key[2 * k + 1]];
    double tau = cost_copy_seconds((double)pl->inst[x->dev].bytes, COPY_D2H, dev);
    int a = x->s_last_fwd, b = x->trip[0].first;
    double fin = (P[a + 1] > busy ? P[a + 1] : busy) + tau;
    /* the first step from s_wait on whose end the copy lands by (at most
     * b - 2); P never falls, so by bisection */
    int sw = x->s_wait;
    if (sw < b - 2 && P[sw + 1] < fin) {
      int lo = sw + 1, hi = b - 2;
      while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (P[mid + 1] < fin) lo = mid + 1;
        else hi = mid;
      }
      sw = lo;
    }
    if (P[sw + 1] < fin || x->trip[0].s_pf < sw + 1) {
      drop[(int)key[2 * k + 1]] = true;
      continue;
    }
    x->s_wait = sw;
    busy = fin;
  }
  int ntr = 0;
  for (int c = 0; c < nc; c++) ntr += cp[c].ntrip;
  double *tk = xmalloc(sizeof(double) * 3 * (size_t)(ntr + 1));
  ntr = 0;
  for (int c = 0; c < nc; c++)
    for (int j = 0; j < cp[c].ntrip; j++)
      tk[3 * ntr] = cp[c].trip[j].s_pf, tk[3 * ntr + 1] = c, tk[3 * ntr + 2] = j, ntr++;
  qsort(tk, (size_t)ntr, 3 * sizeof(double), cmp_by_key);   /* by step, then copy */
  busy = 0;
  for (int k = 0; k < ntr; k++) {
    int c = (int)tk[3 * k + 1];
    if (drop[c]) continue;
    const Trip *tr = &cp[c].trip[(int)tk[3 * k + 2]];
    double tau = cost_copy_seconds((double)pl->inst[cp[c].dev].bytes, COPY_H2D, dev);
    double fin = (P[tr->s_pf] > busy ? P[tr->s_pf] : busy) + tau;
    if (fin > P[tr->first]) drop[c] = true;
    else busy = fin;
  }
  int n = 0;
  for (int c = 0; c < nc; c++) {
    if (drop[c]) free(cp[c].trip);
    else cp[n++] = cp[c];
  }
  free(drop), free(key), free(tk);
  return n;
}

/* Placement: which primary forward instances get a copy (selected, read in
 * backward at least 3 steps after their last forward touch), where the
 * offload's wait goes, and each trip back's prefetch; with hidden_only,
 * only the copies that hide fully. P: prefix sums of the step times. */
static Copy *place_copies(const Plan *pl, const bool *sel, const DeviceProfile *dev,
                          bool hidden_only, int max_lead, const double *P, int loss, int *ncopies) {
  const Route *old = pl->route;
  /* Uses of each instance: last forward touch, and its backward reads. */
  int n0 = pl->ninst;
  int *lastf = xmalloc(sizeof(int) * (size_t)n0);
  int **reads = xcalloc((size_t)n0, sizeof(int *)), *nreads = xcalloc((size_t)n0, sizeof(int));
  for (int i = 0; i < n0; i++) lastf[i] = -1;
  for (int s = 0; s < old->train_steps; s++) {
    const Step *st = &old->s[s];
    for (int k = 0; k < st->nin + st->nout + st->nkeep; k++) {
      int i = k < st->nin ? st->in[k] : k < st->nin + st->nout ? st->out[k - st->nin]
                                                                  : st->keep[k - st->nin - st->nout];
      if (i < 0 || i >= n0) continue;
      bool read = k < st->nin;
      if (s <= loss) lastf[i] = s;
      else if (!read) lastf[i] = -2;   /* written again in backward: not a forward tensor */
      else if (!nreads[i] || reads[i][nreads[i] - 1] != s) plan_push_int(&reads[i], &nreads[i], s);
    }
  }

  Copy *cp = NULL;
  int nc = 0, capc = 0;
  for (int i = 0; i < n0; i++) {
    const Instance *in = &pl->inst[i];
    if (in->tensor < 0 || in->persistent || in->host || !sel[in->tensor]) continue;
    if (i != pl->tensor_inst[in->tensor]) continue;           /* primary instances only */
    if (lastf[i] < 0 || !nreads[i] || reads[i][0] - lastf[i] < 3) continue;
    double tau = cost_copy_seconds((double)in->bytes, COPY_D2H, dev);
    double tau_pf = cost_copy_seconds((double)in->bytes, COPY_H2D, dev);
    int a = lastf[i], b = reads[i][0];
    /* Offload wait: after the first step s in (a, b) with tau of compute in (a, s]. */
    int sw = a + 1;
    while (max_lead >= 0 && sw < b - 2 && P[sw + 1] - P[a + 1] < tau && (!max_lead || sw < a + max_lead))
      sw++;
    double exposed = max_lead < 0 ? tau : tau - (P[sw + 1] - P[a + 1]);
    if (exposed < 0) exposed = 0;
    double slowed = cost_copy_loss(tau - exposed, COPY_D2H, dev);   /* the part beside compute */
    /* Trips back: one, or (memory-centric) one per cluster of readers whose
     * gaps are longer than a prefetch's lead, so the copy does not sit on
     * the device between them. */
    Copy c = {.tensor = in->tensor, .dev = i, .s_last_fwd = a, .s_wait = max_lead < 0 ? -1 : sw};
    int lo = sw + 1;    /* a prefetch goes after the offload's wait */
    for (int k = 0; k < nreads[i];) {
      int f = reads[i][k], l = f;
      k++;
      int gap = max_lead < 0 ? 1 : 2 * max_lead + 1;   /* readers this close share a trip */
      while (k < nreads[i] && (!max_lead || reads[i][k] - l <= gap)) l = reads[i][k++];
      /* Before step p in [lo, f]: as late as leaves tau of compute in [p, f),
       * and no earlier than max_lead steps before the reader. */
      int p = f;
      while (max_lead >= 0 && p > lo && P[f] - P[p] < tau_pf && (!max_lead || p > f - max_lead)) p--;
      double e = tau_pf - (P[f] - P[p]);
      if (e > 0) exposed += e;
      slowed += cost_copy_loss(e > 0 ? tau_pf - e : tau_pf, COPY_H2D, dev);
      c.trip = xrealloc(c.trip, sizeof(Trip) * (size_t)(c.ntrip + 1));
      c.trip[c.ntrip++] = (Trip){.first = f, .last = l, .s_pf = p};
      lo = l + 1;
    }
    if (hidden_only && exposed > 0) {
      free(c.trip);
      continue;
    }
    c.exposed = exposed, c.loss = slowed;
    xgrow((void **)&cp, &capc, nc + 1, sizeof *cp);
    cp[nc++] = c;
  }
  for (int i = 0; i < n0; i++) free(reads[i]);
  free(lastf), free(reads), free(nreads);
  *ncopies = nc;
  return cp;
}

/* Each copy's host instance, prefetched instances and events; the plan's
 * copy totals. */
static void add_instances(Plan *pl, Copy *cp, int nc) {
  for (int c = 0; c < nc; c++) {
    Copy *x = &cp[c];
    int64_t bytes = pl->inst[x->dev].bytes;
    x->host = plan_new_instance(pl, x->tensor, bytes, true);
    x->ev_off = pl->nevents++;
    for (int k = 0; k < x->ntrip; k++) {
      x->trip[k].pre = plan_new_instance(pl, x->tensor, bytes, false);
      x->trip[k].ev = pl->nevents++;
    }
    pl->offload_bytes += (double)bytes * (1 + x->ntrip);
    pl->exposed_seconds += x->exposed + x->loss;
    pl->copy_loss_seconds += x->loss;
  }
}

/* The route rewritten: each offload after its last forward step, each
 * prefetch before its trip, backward readers redirected to the prefetched
 * instance; newidx[s]: where old step s now stands. */
static Route *rewrite_route(const Plan *pl, Copy *cp, int nc, int loss, int *newidx) {
  const Route *old = pl->route;
  int T = old->ns;
  /* Per old step: offloads issued after it, prefetches issued before it. */
  Ref **after = xcalloc((size_t)T + 1, sizeof(Ref *)), **before = xcalloc((size_t)T + 1, sizeof(Ref *));
  int *nafter = xcalloc((size_t)T + 1, sizeof(int)), *nbefore = xcalloc((size_t)T + 1, sizeof(int));
  for (int c = 0; c < nc; c++) {
    int s = cp[c].s_last_fwd;
    after[s] = xrealloc(after[s], sizeof(Ref) * (size_t)(nafter[s] + 1));
    after[s][nafter[s]++] = (Ref){c, -1};
    for (int k = 0; k < cp[c].ntrip; k++) {
      s = cp[c].trip[k].s_pf;
      before[s] = xrealloc(before[s], sizeof(Ref) * (size_t)(nbefore[s] + 1));
      before[s][nbefore[s]++] = (Ref){c, k};
    }
  }
  int *redirect = xmalloc(sizeof(int) * (size_t)pl->ninst);   /* forward inst -> copy */
  for (int i = 0; i < pl->ninst; i++) redirect[i] = -1;
  for (int c = 0; c < nc; c++) redirect[cp[c].dev] = c;

  Route *r = xcalloc(1, sizeof *r);
  for (int s = 0; s < T; s++) {
    for (int k = 0; k < nbefore[s]; k++) {
      Copy *x = &cp[before[s][k].copy];
      Trip *tr = &x->trip[before[s][k].trip];
      Step pf = {.kind = SK_PREFETCH, .node = -1, .tensor = x->tensor, .nin = 1, .nout = 1,
                 .in = &x->host, .out = &tr->pre, .ws = -1, .event = tr->ev};
      route_push(r, &pf);
    }
    newidx[s] = r->ns;
    Step *ns = route_push(r, &old->s[s]);
    if (s > loss && s < old->train_steps)
      for (int k = 0; k < ns->nin; k++) {
        int i = ns->in[k];
        if (i < 0 || i >= pl->ninst || redirect[i] < 0) continue;
        Copy *x = &cp[redirect[i]];
        while (x->cur < x->ntrip - 1 && s > x->trip[x->cur].last) x->cur++;
        snc_assert(s >= x->trip[x->cur].first && s <= x->trip[x->cur].last);
        ns->in[k] = x->trip[x->cur].pre;
      }
    for (int k = 0; k < nafter[s]; k++) {
      Copy *x = &cp[after[s][k].copy];
      Step off = {.kind = SK_OFFLOAD, .node = -1, .tensor = x->tensor, .nin = 1, .nout = 1,
                  .in = &x->dev, .out = &x->host, .ws = -1, .event = x->ev_off};
      if (x->s_wait < 0)   /* synchronous: wait right after issuing */
        off.wait = &x->ev_off, off.nwait = 1, off.keep = &x->dev, off.nkeep = 1;
      route_push(r, &off);
    }
    if (s == old->train_steps - 1) r->train_steps = r->ns;
  }
  newidx[T] = r->ns;
  for (int s = 0; s <= T; s++) free(after[s]), free(before[s]);
  free(after), free(before), free(nafter), free(nbefore), free(redirect);
  return r;
}

/* Waits and the regions they keep busy: the offload's after old step
 * s_wait (the forward instance stays busy through it); each prefetch's
 * after the step just before its first reader (the host copy stays busy
 * through the last one). */
static void add_waits(Route *r, const Copy *cp, int nc, const int *newidx) {
  for (int c = 0; c < nc; c++) {
    const Copy *x = &cp[c];
    if (x->s_wait >= 0) {
      Step *w = &r->s[newidx[x->s_wait]];
      add_int(&w->wait, &w->nwait, x->ev_off);
      add_int(&w->keep, &w->nkeep, x->dev);
    }
    for (int k = 0; k < x->ntrip; k++) {
      Step *v = &r->s[newidx[x->trip[k].first] - 1];
      add_int(&v->wait, &v->nwait, x->trip[k].ev);
      add_int(&v->keep, &v->nkeep, x->host);
    }
  }
  for (int s = 0; s < r->ns; s++)
    if (r->s[s].nwait > 1) qsort(r->s[s].wait, (size_t)r->s[s].nwait, sizeof(int), cmp_int);
}

int offload_plan(Graph *g, Plan *pl, const bool *sel, const DeviceProfile *dev, bool hidden_only,
                 int max_lead) {
  const Route *old = pl->route;
  int T = old->ns;
  int loss = -1;
  for (int s = 0; s < old->train_steps; s++)
    if (old->s[s].kind == SK_LOSS) { loss = s; break; }
  if (loss < 0) return 0;
  double *t = cost_step_times(g, pl, dev);
  double *P = xcalloc((size_t)T + 2, sizeof(double));   /* prefix sums of t */
  for (int s = 0; s < T; s++) P[s + 1] = P[s] + t[s];

  int nc;
  Copy *cp = place_copies(pl, sel, dev, hidden_only, max_lead, P, loss, &nc);
  if (hidden_only) nc = queue_filter(pl, cp, nc, P, dev);
  if (!nc) {
    free(t), free(P), free(cp);
    return 0;
  }
  add_instances(pl, cp, nc);
  int *newidx = xmalloc(sizeof(int) * (size_t)(T + 1));
  Route *r = rewrite_route(pl, cp, nc, loss, newidx);
  add_waits(r, cp, nc, newidx);
  free(newidx);
  route_free((Route *)old);
  pl->route = r;
  liveness_lifetimes(g, pl);
  for (int c = 0; c < nc; c++) free(cp[c].trip);
  free(t), free(P), free(cp);
  return nc;
}

/* --dump offload: each offloaded tensor, when it leaves and comes back. */
void offload_dump(const Graph *g, const Plan *pl, FILE *f) {
  const Route *r = pl->route;
  fprintf(f, "offload: %s offloaded, host arena %s, %d events, exposed transfer %.3g ms\n",
          fmt_bytes((int64_t)pl->offload_bytes), fmt_bytes(pl->host_bytes), pl->nevents,
          pl->exposed_seconds * 1e3);
  fprintf(f, "%7s %7s %7s  %-12s  %s\n", "offload", "prefetch", "needed", "bytes", "tensor");
  for (int s = 0; s < r->ns; s++) {
    const Step *st = &r->s[s];
    if (st->kind != SK_OFFLOAD) continue;
    int host = st->out[0], pf = -1, use = -1;
    for (int q = s + 1; q < r->ns && pf < 0; q++)
      if (r->s[q].kind == SK_PREFETCH && r->s[q].in[0] == host) pf = q;
    if (pf >= 0) use = pl->inst[r->s[pf].out[0]].last >= 0 ? pf + 1 : -1;
    for (int q = pf + 1; pf >= 0 && q < r->ns; q++) {
      bool reads = false;
      for (int k = 0; k < r->s[q].nin; k++) reads |= r->s[q].in[k] == r->s[pf].out[0];
      if (reads) { use = q; break; }
    }
    fprintf(f, "%7d %7d %7d  %-12s  %s\n", s, pf, use, fmt_bytes(pl->inst[host].bytes),
            g->t[st->tensor].name);
  }
}
