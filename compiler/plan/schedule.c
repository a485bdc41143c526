/* schedule.c — the waits of the schedule: only the necessary ones.
 *
 * Requires: a finished plan (its route with copy steps, their events and the
 * waits the offload passes placed).
 * Provides: Step.wait lists from which every implied wait is removed. First,
 * a wait placed right after issuing a copy that is followed by more copies
 * (nothing computes in between) moves to the end of that run of copies,
 * with the regions it keeps busy, when the copies it passes touch none of
 * them (lifetimes are then recomputed and the overlap checker rerun). Copies
 * run on two queues, one per direction (device to host, host to device), and
 * each queue completes its copies in issue order, on the CPU copy engine and
 * on CUDA's two copy streams alike. So a wait for a copy on a queue also
 * waits for every copy issued before it on that queue: at one step only the
 * wait for the queue's latest copy is needed, and a wait for a copy that an
 * earlier wait already covered is needed never. Keeping only the necessary
 * waits makes the schedule's safety checkable: deleting any one wait left in
 * train.c must be caught (tests/test_waits.py).
 *
 * What it does not change: what the waits protect. A region a copy uses stays
 * busy through the step of its original wait (Step.keep, liveness), and the
 * wait that replaces it stands at that same step, so the plan's offsets and
 * timing are untouched. Each training step (and each eval step) starts with
 * every copy complete (the runtime syncs between steps), so the covered
 * positions start afresh at the route's start and at its eval part.
 *
 * Not here: where waits go (offload.c), how copies run (runtime). */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

enum { Q_NONE = -1, Q_D2H = 0, Q_H2D = 1 };

typedef struct EvCopy {
  int queue;     // Q_*: the queue of the copy that records the event
  int pos;       // its issue position on that queue
  int step;      // its step
  int copies;    // how many copy steps record it (more than one: never pruned)
} EvCopy;

static const char *queue_name(int q) { return q == Q_D2H ? "to-host" : "to-device"; }

static bool is_copy(const Step *st) { return st->kind == SK_OFFLOAD || st->kind == SK_PREFETCH; }

/* Do instances a and b share bytes of the same arena? */
static bool overlap(const Plan *pl, int a, int b) {
  const Instance *x = &pl->inst[a], *y = &pl->inst[b];
  if (x->offset >= 0 && y->offset >= 0 && x->offset < y->offset + y->bytes &&
      y->offset < x->offset + x->bytes)
    return true;
  return x->host_offset >= 0 && y->host_offset >= 0 && x->host_offset < y->host_offset + y->bytes &&
         y->host_offset < x->host_offset + x->bytes;
}

/* Does the copy step t touch (read or write) bytes of instance i? */
static bool touches(const Plan *pl, const Step *t, int i) {
  for (int j = 0; j < t->nin + t->nout; j++) {
    int x = j < t->nin ? t->in[j] : t->out[j - t->nin];
    if (x >= 0 && overlap(pl, i, x)) return true;
  }
  return false;
}

/* Does copy step t touch the regions of the copy recording event e (what it
 * reads or writes)? A prefetch of the host copy an offload is still writing
 * (the queues run independently) must wait for that offload first.
 * ev_copy[e]: the latest copy step recording event e. */
static bool touches_copy(const Plan *pl, const Step *t, int e, const int *ev_copy) {
  if (e < 0 || e >= pl->nevents || ev_copy[e] < 0) return false;
  const Step *c = &pl->route->s[ev_copy[e]];
  for (int j = 0; j < c->nin + c->nout; j++) {
    int i = j < c->nin ? c->in[j] : c->out[j - c->nin];
    if (i >= 0 && touches(pl, t, i)) return true;
  }
  return false;
}

/* Is kept region k one that the copy recording event e reads or writes? */
static bool keep_of(const Plan *pl, int k, int e, const int *ev_copy) {
  if (e < 0 || e >= pl->nevents || ev_copy[e] < 0) return true;
  const Step *c = &pl->route->s[ev_copy[e]];
  for (int j = 0; j < c->nin + c->nout; j++) {
    int i = j < c->nin ? c->in[j] : c->out[j - c->nin];
    if (i >= 0 && overlap(pl, i, k)) return true;
  }
  return false;
}

/* Which waits of step st may move past the copy step t (mv[w])? Those whose
 * copy's regions t does not touch and whose kept regions (the kept regions
 * of its copy) t touches none of. A kept region that belongs to no waited
 * copy pins every wait. Returns how many may move. */
static int movable(const Plan *pl, const Step *st, const Step *t, const int *ev_copy, bool *mv) {
  int n = 0;
  for (int w = 0; w < st->nwait; w++) {
    int e = st->wait[w];
    mv[w] = !touches_copy(pl, t, e, ev_copy);
    for (int k = 0; k < st->nkeep && mv[w]; k++)
      if (keep_of(pl, st->keep[k], e, ev_copy) && touches(pl, t, st->keep[k])) mv[w] = false;
  }
  for (int k = 0; k < st->nkeep; k++) {
    bool owned = false;
    for (int w = 0; w < st->nwait && !owned; w++) owned = keep_of(pl, st->keep[k], st->wait[w], ev_copy);
    if (!owned)
      for (int w = 0; w < st->nwait; w++) mv[w] = false;
  }
  for (int w = 0; w < st->nwait; w++) n += mv[w];
  return n;
}

static void append(int **a, int *n, const int *b, int nb) {
  if (!nb) return;
  *a = xrealloc(*a, sizeof(int) * (size_t)(*n + nb));
  memcpy(*a + *n, b, sizeof(int) * (size_t)nb);
  *n += nb;
}

/* Waits placed right after a copy is issued, followed by more copies, move to
 * the last copy of the run (with the regions they keep busy), where one wait
 * per queue then covers them all: compute cannot run in between, so nothing
 * is read earlier than before, and only copies that touch none of the kept
 * regions are passed. Returns how many waits moved. */
static int defer_waits(const Graph *g, Plan *pl, FILE *log) {
  Route *r = pl->route;
  int moved = 0, capmv = 0;
  bool *mv = NULL;
  int *ev_copy = xmalloc(sizeof(int) * (size_t)(pl->nevents + 1));
  for (int e = 0; e < pl->nevents; e++) ev_copy[e] = -1;
  for (int s = 0; s + 1 < r->ns; s++) {
    Step *st = &r->s[s], *t = &r->s[s + 1];
    if (is_copy(st) && st->event >= 0 && st->event < pl->nevents) ev_copy[st->event] = s;
    if (!st->nwait || !is_copy(t) || s + 1 == r->train_steps) continue;
    xgrow((void **)&mv, &capmv, st->nwait, sizeof *mv);
    if (!movable(pl, st, t, ev_copy, mv)) continue;
    /* The movable waits go, with every kept region of their copies; the
     * rest (and the regions only they keep) stay. */
    int nw = 0, nk = 0, n0 = st->nwait;
    int *ws = xmalloc(sizeof(int) * (size_t)n0);
    memcpy(ws, st->wait, sizeof(int) * (size_t)n0);
    for (int w = 0; w < n0; w++) {
      if (!mv[w]) {
        st->wait[nw++] = ws[w];
        continue;
      }
      if (log)
        fprintf(log, "  step %5d waits for event %4d: moved to step %d (a copy issued next; "
                "nothing computes in between)\n", s, st->wait[w], s + 1);
      append(&t->wait, &t->nwait, &ws[w], 1);
      moved++;
    }
    for (int k = 0; k < st->nkeep; k++) {
      bool go = false, stays = false;
      for (int w = 0; w < n0; w++) {
        bool own = keep_of(pl, st->keep[k], ws[w], ev_copy);
        go |= mv[w] && own;
        stays |= !mv[w] && own;
      }
      if (go) append(&t->keep, &t->nkeep, &st->keep[k], 1);
      if (stays || !go) st->keep[nk++] = st->keep[k];
    }
    st->nwait = nw, st->nkeep = nk;
    free(ws);
  }
  free(ev_copy), free(mv);
  if (moved) {
    liveness_lifetimes(g, pl);   /* kept regions now live through their new wait */
    offsets_high_water(pl);      /* ...and count in the arena's high water there */
    if (offsets_check(g, pl, stderr))
      internal_error(__FILE__, __LINE__, "moving waits past copies made regions overlap");
  }
  return moved;
}

int schedule_waits(const Graph *g, Plan *pl, FILE *log) {
  if (log) fprintf(log, "schedule: waits moved to the end of runs of copies\n");
  int moved = defer_waits(g, pl, log);
  Route *r = pl->route;
  int nev = pl->nevents;
  EvCopy *ev = xmalloc(sizeof *ev * (size_t)(nev > 0 ? nev : 1));
  for (int e = 0; e < nev; e++) ev[e] = (EvCopy){Q_NONE, -1, -1, 0};
  int pos[2] = {0, 0};
  for (int s = 0; s < r->ns; s++) {
    const Step *st = &r->s[s];
    if ((st->kind != SK_OFFLOAD && st->kind != SK_PREFETCH) || st->event < 0 || st->event >= nev)
      continue;
    int q = st->kind == SK_OFFLOAD ? Q_D2H : Q_H2D;
    EvCopy *x = &ev[st->event];
    x->queue = q, x->pos = pos[q]++, x->step = s, x->copies++;
  }
  if (log) fprintf(log, "schedule: copies on two queues (to-host, to-device), each in issue order\n");
  int removed = 0, kept = 0;
  int done[2] = {-1, -1};   // per queue: every copy at a position <= done is waited for
  for (int s = 0; s < r->ns; s++) {
    if (s == 0 || s == r->train_steps) done[0] = done[1] = -1;
    Step *st = &r->s[s];
    if (!st->nwait) continue;
    int best[2] = {-1, -1};   // per queue: the wait here for the latest copy
    for (int w = 0; w < st->nwait; w++) {
      int e = st->wait[w];
      if (e < 0 || e >= nev || ev[e].copies != 1) continue;
      int q = ev[e].queue;
      if (best[q] < 0 || ev[e].pos > ev[best[q]].pos) best[q] = e;
    }
    int n = 0;
    for (int w = 0; w < st->nwait; w++) {
      int e = st->wait[w];
      bool keep = true;
      const char *why = NULL;
      if (e >= 0 && e < nev && ev[e].copies == 1) {
        int q = ev[e].queue;
        if (ev[best[q]].pos <= done[q]) keep = false, why = "an earlier wait covers it";
        else if (e != best[q]) keep = false, why = "the wait here for a later copy covers it";
      }
      if (log) {
        fprintf(log, "  step %5d waits for event %4d", s, e);
        if (e >= 0 && e < nev && ev[e].queue != Q_NONE)
          fprintf(log, " (%s copy %d of step %d)", queue_name(ev[e].queue), ev[e].pos, ev[e].step);
        fprintf(log, ": %s%s%s\n", keep ? "kept" : "removed, ", why ? why : "", "");
      }
      if (keep) st->wait[n++] = e, kept++;
      else removed++;
    }
    st->nwait = n;
    for (int q = 0; q < 2; q++)
      if (best[q] >= 0 && ev[best[q]].pos > done[q]) done[q] = ev[best[q]].pos;
  }
  if (log)
    fprintf(log, "schedule: %d waits kept, %d implied ones removed (%d moved first)\n", kept, removed,
            moved);
  free(ev);
  (void)g;
  return removed;
}
