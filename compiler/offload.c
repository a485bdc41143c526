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
 * Timing (the cost model): with t[s] the estimated time of step s and
 * tau = bytes / link bandwidth, the offload's wait goes after the first step
 * by which tau of compute has run since the copy was issued, and the prefetch
 * goes as late as possible while still leaving tau of compute before its
 * reader. Where the gap is too short the copy is exposed: the wait then
 * stalls compute, and the estimate counts that time (Plan.exposed_seconds).
 *
 * max_lead (0: no limit) caps how many steps a copy may run ahead of the
 * compute that waits for it: memory-centric plans (superneurons) wait at the
 * next step and prefetch just before the reader, trading exposed transfer
 * time for the smallest footprint.
 *
 * Not here: which tensors to offload (plan.c decides per policy).
 */
#include "snc.h"

#include <stdlib.h>
#include <string.h>

typedef struct Copy {
  int tensor, dev, host, pre;  // tensor; forward device instance; host instance; prefetched instance
  int s_last_fwd;              // old route: last forward step touching the instance
  int s_first_bwd, s_last_bwd; // old route: first and last backward readers
  int s_wait;                  // old route: the step after which compute waits for the offload
  int s_pf;                    // old route: the prefetch goes before this step
  int ev_off, ev_pf;
  double exposed;
} Copy;

static int new_inst(Plan *pl, int tensor, int64_t bytes, bool host) {
  xgrow((void **)&pl->inst, &pl->capinst, pl->ninst + 1, sizeof *pl->inst);
  pl->inst[pl->ninst] = (Instance){.tensor = tensor, .bytes = bytes, .first = -1, .last = -1,
                                   .offset = -1, .host_offset = -1, .host = host};
  return pl->ninst++;
}

/* Estimated seconds of each step of the route (compute only). */
double *offload_step_times(const Graph *g, const Plan *pl, const DeviceProfile *dev) {
  const Route *r = pl->route;
  double *t = xcalloc((size_t)r->ns + 1, sizeof(double));
  for (int s = 0; s < r->train_steps; s++) {
    const Step *st = &r->s[s];
    if (st->node < 0) continue;
    const Node *n = &g->n[st->node];
    double fl = op_info[n->op].flops(g, n), bytes = 0;
    for (int k = 0; k < st->nin; k++)
      if (st->in[k] >= 0) bytes += (double)pl->inst[st->in[k]].bytes;
    for (int k = 0; k < st->nout; k++)
      if (st->out[k] >= 0) bytes += (double)pl->inst[st->out[k]].bytes;
    if (st->ws >= 0) bytes += (double)pl->inst[st->ws].bytes;
    double tc = fl / dev->flops, tm = bytes / dev->mem_bw;
    t[s] = tc > tm ? tc : tm;
  }
  return t;
}

static void add_int(int **arr, int *n, int v) {
  *arr = xrealloc(*arr, sizeof(int) * (size_t)(*n + 1));
  (*arr)[(*n)++] = v;
}

static Step *push(Route *r, const Step *proto) {
  xgrow((void **)&r->s, &r->caps, r->ns + 1, sizeof *r->s);
  Step *s = &r->s[r->ns++];
  *s = *proto;
  s->in = xmalloc(sizeof(int) * (size_t)(proto->nin ? proto->nin : 1));
  s->out = xmalloc(sizeof(int) * (size_t)(proto->nout ? proto->nout : 1));
  memcpy(s->in, proto->in, sizeof(int) * (size_t)proto->nin);
  memcpy(s->out, proto->out, sizeof(int) * (size_t)proto->nout);
  s->wait = NULL, s->nwait = 0, s->keep = NULL, s->nkeep = 0;
  for (int k = 0; k < proto->nwait; k++) add_int(&s->wait, &s->nwait, proto->wait[k]);
  for (int k = 0; k < proto->nkeep; k++) add_int(&s->keep, &s->nkeep, proto->keep[k]);
  return s;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

int offload_plan(Graph *g, Plan *pl, const bool *sel, const DeviceProfile *dev, bool hidden_only,
                 int max_lead) {
  const Route *old = pl->route;
  int T = old->ns;
  int loss = -1;
  for (int s = 0; s < old->train_steps; s++)
    if (old->s[s].kind == SK_LOSS) { loss = s; break; }
  if (loss < 0) return 0;
  double *t = offload_step_times(g, pl, dev);
  double *P = xcalloc((size_t)T + 2, sizeof(double));   /* prefix sums of t */
  for (int s = 0; s < T; s++) P[s + 1] = P[s] + t[s];

  /* Uses of each instance: last forward touch, first and last backward read. */
  int n0 = pl->ninst;
  int *lastf = xmalloc(sizeof(int) * (size_t)n0), *firstb = xmalloc(sizeof(int) * (size_t)n0);
  int *lastb = xmalloc(sizeof(int) * (size_t)n0);
  for (int i = 0; i < n0; i++) lastf[i] = -1, firstb[i] = -1, lastb[i] = -1;
  for (int s = 0; s < old->train_steps; s++) {
    const Step *st = &old->s[s];
    for (int k = 0; k < st->nin + st->nout + st->nkeep; k++) {
      int i = k < st->nin ? st->in[k] : k < st->nin + st->nout ? st->out[k - st->nin]
                                                                  : st->keep[k - st->nin - st->nout];
      if (i < 0 || i >= n0) continue;
      bool read = k < st->nin;
      if (s <= loss) lastf[i] = s;
      else if (read) {
        if (firstb[i] < 0) firstb[i] = s;
        lastb[i] = s;
      } else {
        lastf[i] = -2;   /* written again in backward: not a forward tensor */
      }
    }
  }

  Copy *cp = NULL;
  int nc = 0, capc = 0;
  for (int i = 0; i < n0; i++) {
    const Instance *in = &pl->inst[i];
    if (in->tensor < 0 || in->persistent || in->host || !sel[in->tensor]) continue;
    if (i != pl->tensor_inst[in->tensor]) continue;           /* primary instances only */
    if (lastf[i] < 0 || firstb[i] < 0 || firstb[i] - lastf[i] < 3) continue;
    double tau = (double)in->bytes / dev->link_bw;
    int a = lastf[i], b = firstb[i];
    /* Offload wait: after the first step s in (a, b) with tau of compute in (a, s]. */
    int sw = a + 1;
    while (sw < b - 2 && P[sw + 1] - P[a + 1] < tau && (!max_lead || sw < a + max_lead)) sw++;
    double exposed = tau - (P[sw + 1] - P[a + 1]);
    /* Prefetch before step p in (sw, b]: as late as leaves tau of compute in
     * [p, b), and no earlier than max_lead steps before its reader. */
    int p = b;
    while (p > sw + 1 && P[b] - P[p] < tau && (!max_lead || p > b - max_lead)) p--;
    double exposed_pf = tau - (P[b] - P[p]);
    if (exposed < 0) exposed = 0;
    if (exposed_pf < 0) exposed_pf = 0;
    if (hidden_only && (exposed > 0 || exposed_pf > 0)) continue;
    xgrow((void **)&cp, &capc, nc + 1, sizeof *cp);
    cp[nc++] = (Copy){.tensor = in->tensor, .dev = i, .s_last_fwd = a, .s_first_bwd = b,
                      .s_last_bwd = lastb[i], .s_wait = sw, .s_pf = p,
                      .exposed = exposed + exposed_pf};
  }
  free(lastf), free(firstb), free(lastb);
  if (!nc) {
    free(t), free(P), free(cp);
    return 0;
  }

  /* New instances and events. */
  for (int c = 0; c < nc; c++) {
    Copy *x = &cp[c];
    int64_t bytes = pl->inst[x->dev].bytes;
    x->host = new_inst(pl, x->tensor, bytes, true);
    x->pre = new_inst(pl, x->tensor, bytes, false);
    x->ev_off = pl->nevents++;
    x->ev_pf = pl->nevents++;
    pl->offload_bytes += (double)bytes;
    pl->exposed_seconds += x->exposed;
  }

  /* Per old step: copies issued after it (offloads) and before it (prefetches). */
  int *nafter = xcalloc((size_t)T + 1, sizeof(int)), *nbefore = xcalloc((size_t)T + 1, sizeof(int));
  for (int c = 0; c < nc; c++) nafter[cp[c].s_last_fwd]++, nbefore[cp[c].s_pf]++;
  int *redirect = xmalloc(sizeof(int) * (size_t)pl->ninst);   /* forward inst -> prefetched */
  for (int i = 0; i < pl->ninst; i++) redirect[i] = -1;
  for (int c = 0; c < nc; c++) redirect[cp[c].dev] = c;
  /* Copies by old step (stable order: instance index). */
  int **after = xcalloc((size_t)T + 1, sizeof(int *)), **before = xcalloc((size_t)T + 1, sizeof(int *));
  for (int s = 0; s < T; s++) {
    after[s] = xmalloc(sizeof(int) * (size_t)(nafter[s] + 1));
    before[s] = xmalloc(sizeof(int) * (size_t)(nbefore[s] + 1));
    nafter[s] = nbefore[s] = 0;
  }
  for (int c = 0; c < nc; c++) {
    after[cp[c].s_last_fwd][nafter[cp[c].s_last_fwd]++] = c;
    before[cp[c].s_pf][nbefore[cp[c].s_pf]++] = c;
  }

  Route *r = xcalloc(1, sizeof *r);
  int *newidx = xmalloc(sizeof(int) * (size_t)(T + 1));
  for (int s = 0; s < T; s++) {
    for (int k = 0; k < nbefore[s]; k++) {
      Copy *x = &cp[before[s][k]];
      Step pf = {.kind = SK_PREFETCH, .node = -1, .tensor = x->tensor, .nin = 1, .nout = 1,
                 .in = &x->host, .out = &x->pre, .ws = -1, .event = x->ev_pf};
      push(r, &pf);
    }
    newidx[s] = r->ns;
    Step *ns = push(r, &old->s[s]);
    if (s > loss && s < old->train_steps)
      for (int k = 0; k < ns->nin; k++)
        if (ns->in[k] >= 0 && ns->in[k] < pl->ninst && redirect[ns->in[k]] >= 0)
          ns->in[k] = cp[redirect[ns->in[k]]].pre;
    for (int k = 0; k < nafter[s]; k++) {
      Copy *x = &cp[after[s][k]];
      Step off = {.kind = SK_OFFLOAD, .node = -1, .tensor = x->tensor, .nin = 1, .nout = 1,
                  .in = &x->dev, .out = &x->host, .ws = -1, .event = x->ev_off};
      push(r, &off);
    }
    if (s == old->train_steps - 1) r->train_steps = r->ns;
  }
  newidx[T] = r->ns;
  /* Waits and the regions they keep busy. The offload's wait goes after old
   * step s_wait; the prefetch's after the step just before its first reader. */
  for (int c = 0; c < nc; c++) {
    Copy *x = &cp[c];
    Step *w = &r->s[newidx[x->s_wait]];
    add_int(&w->wait, &w->nwait, x->ev_off);
    add_int(&w->keep, &w->nkeep, x->dev);
    Step *v = &r->s[newidx[x->s_first_bwd] - 1];
    add_int(&v->wait, &v->nwait, x->ev_pf);
    add_int(&v->keep, &v->nkeep, x->host);
  }
  for (int s = 0; s < r->ns; s++)
    if (r->s[s].nwait > 1) qsort(r->s[s].wait, (size_t)r->s[s].nwait, sizeof(int), cmp_int);

  for (int s = 0; s < T; s++) free(after[s]), free(before[s]);
  free(after), free(before), free(nafter), free(nbefore), free(redirect), free(newidx);
  for (int s = 0; s < old->ns; s++) free(old->s[s].in), free(old->s[s].out), free(old->s[s].wait), free(old->s[s].keep);
  free(old->s);
  free((Route *)old);
  pl->route = r;
  liveness_lifetimes(g, pl);
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
