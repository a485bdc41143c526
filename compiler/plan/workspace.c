/* workspace.c — convolution workspaces for the cuda target: each conv step
 * (forward, backward-data, backward-filter; recomputed and eval ones too) is
 * lent the largest hole of the device arena at that step, up to a cap, as
 * SuperNeurons does at run time; the runtime then picks the fastest cuDNN
 * algorithm whose workspace fits (runtime/cuda/conv.cu).
 *
 * Requires: a finished plan (offsets_assign done, pl->arena_bytes final).
 * Provides: for each conv step, Step.ws names an instance of [first, last] =
 * [s, s] placed in the largest free byte range of the arena at step s (the
 * existing workspace instance moved and grown, or a new one where the CPU's
 * sizing gave none, e.g. a 1x1 stride-1 conv); pl->ws_cap. The arena does not
 * grow and nothing else moves: the lent bytes are bytes no live instance uses
 * at that step. Live-byte statistics stay as planned (before lending);
 * Instance.lent_bytes records what was lent (plan.json: lent_bytes), and the
 * high water per step is recomputed with the lent bytes.
 * The CPU target does not run this pass: its im2col sizing (shape_nn.c) is
 * what its kernels need.
 *
 * Occupancy at step s is what offsets_check uses: every other instance on the
 * device whose lifetime [first, last] contains s. One sweep over the steps
 * keeps the live instances sorted by offset (insert and remove by binary
 * search and memmove: O(n * live) bytes moved in the worst case, well under
 * a second for the deep ResNets), and each conv step scans them once for
 * the largest hole. */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

static bool is_conv_step(const Graph *g, const Step *st) {
  if (st->node < 0) return false;
  OpKind op = g->n[st->node].op;
  return op == OP_CONV || op == OP_CONV_BWD_DATA || op == OP_CONV_BWD_FILTER;
}

typedef struct Live {
  int *v;                  // instance indices, by increasing offset
  int n;
} Live;

static int live_lower(const Plan *pl, const Live *l, int64_t off) {
  int lo = 0, hi = l->n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (pl->inst[l->v[mid]].offset < off) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static void live_add(const Plan *pl, Live *l, int i) {
  int k = live_lower(pl, l, pl->inst[i].offset);
  memmove(l->v + k + 1, l->v + k, sizeof(int) * (size_t)(l->n - k));
  l->v[k] = i;
  l->n++;
}

static void live_remove(const Plan *pl, Live *l, int i) {
  int k = live_lower(pl, l, pl->inst[i].offset);
  while (k < l->n && l->v[k] != i) k++;
  snc_assert(k < l->n);
  memmove(l->v + k, l->v + k + 1, sizeof(int) * (size_t)(l->n - k - 1));
  l->n--;
}

void workspace_plan(const Graph *g, Plan *pl, int64_t cap) {
  Route *r = pl->route;
  cap -= cap % SNRT_ALIGN;
  pl->ws_cap = cap;
  /* The conv steps' own workspaces are what we place: leave them out. */
  bool *mine = xcalloc((size_t)pl->ninst + 1, sizeof(bool));
  for (int s = 0; s < r->ns; s++)
    if (is_conv_step(g, &r->s[s]) && r->s[s].ws >= 0) mine[r->s[s].ws] = true;
  int n = 0;
  int *byfirst = xmalloc(sizeof(int) * ((size_t)pl->ninst + 1));
  int *bylast = xmalloc(sizeof(int) * ((size_t)pl->ninst + 1));
  for (int i = 0; i < pl->ninst; i++) {
    const Instance *in = &pl->inst[i];
    if (mine[i] || in->offset < 0 || in->bytes <= 0) continue;
    byfirst[n] = bylast[n] = i;
    n++;
  }
  qsort_r(byfirst, (size_t)n, sizeof(int), inst_cmp_first, pl->inst);
  qsort_r(bylast, (size_t)n, sizeof(int), inst_cmp_last, pl->inst);
  Live live = {xmalloc(sizeof(int) * ((size_t)n + 1)), 0};
  bool *added = xcalloc((size_t)pl->ninst + 1, sizeof(bool));
  int a = 0, d = 0;
  for (int s = 0; s < r->ns; s++) {
    for (; d < n && pl->inst[bylast[d]].last < s; d++)
      if (added[bylast[d]]) live_remove(pl, &live, bylast[d]);
    for (; a < n && pl->inst[byfirst[a]].first <= s; a++)
      if (pl->inst[byfirst[a]].last >= s) {
        live_add(pl, &live, byfirst[a]);
        added[byfirst[a]] = true;
      }
    Step *st = &r->s[s];
    if (!is_conv_step(g, st)) continue;
    int64_t best_lo = 0, best = -1, cur = 0;
    for (int k = 0; k <= live.n; k++) {
      int64_t lo = k < live.n ? pl->inst[live.v[k]].offset : pl->arena_bytes;
      if (lo - cur > best) best = lo - cur, best_lo = cur;
      if (k < live.n) {
        int64_t hi = pl->inst[live.v[k]].offset + pl->inst[live.v[k]].bytes;
        if (hi > cur) cur = hi;
      }
    }
    int64_t bytes = best < cap ? best : cap;
    bytes -= bytes % SNRT_ALIGN;
    if (st->ws >= 0) {
      Instance *w = &pl->inst[st->ws];
      if (bytes < w->bytes) continue;  /* only when cap < the CPU's size: keep it */
      w->offset = best_lo;
      w->lent_bytes = bytes - w->bytes;
      w->bytes = bytes;
    } else if (bytes > 0) {
      xgrow((void **)&pl->inst, &pl->capinst, pl->ninst + 1, sizeof *pl->inst);
      pl->inst[pl->ninst] = (Instance){.tensor = -1, .bytes = bytes, .first = s, .last = s,
                                       .offset = best_lo, .host_offset = -1,
                                       .lent_bytes = bytes};
      st->ws = pl->ninst++;
    }
  }
  free(live.v);
  free(added);
  /* The arena's high water per step now includes the lent bytes (the
   * kernels use them). */
  offsets_high_water(pl);
  free(byfirst);
  free(bylast);
  free(mine);
  int bad = offsets_check(g, pl, stderr);
  if (bad) internal_error(__FILE__, __LINE__, "%d overlaps after lending conv workspaces", bad);
}

void workspace_print(const Graph *g, const Plan *pl, FILE *f) {
  if (pl->ws_cap <= 0) return;
  const Route *r = pl->route;
  int count = 0, none = 0;
  int64_t lo = -1, hi = 0;
  for (int s = 0; s < r->ns; s++) {
    if (!is_conv_step(g, &r->s[s])) continue;
    count++;
    int64_t b = r->s[s].ws >= 0 ? pl->inst[r->s[s].ws].bytes : 0;
    if (!b) none++;
    if (lo < 0 || b < lo) lo = b;
    if (b > hi) hi = b;
  }
  if (!count) return;
  fprintf(f, "conv workspaces: %d conv steps lent the largest free hole of the arena at their "
             "step (cuda target, cap %s): smallest %s, largest %s", count, fmt_bytes(pl->ws_cap),
          fmt_bytes(lo), fmt_bytes(hi));
  if (none) fprintf(f, "; %d with none (no free byte at that step)", none);
  fprintf(f, "\n");
}
