/* offsets.c — where each instance lives in the device arena.
 *
 * Requires: pl->inst with lifetimes (liveness_compute), pl->route.
 * Provides: Instance.offset, pl->arena_bytes, pl->high_water (per step).
 *
 * share = false (policy none): every instance its own region, persistent
 * ones first, then in instance order; the arena is the sum of all bytes.
 * share = true: greedy interval packing, as TFLite Micro's greedy planner:
 * persistent instances at the bottom, then the others largest first (ties:
 * earlier first step, then lower index, so plans are deterministic), each at
 * the lowest offset where it fits among already-placed instances whose
 * lifetimes overlap its own.
 *
 * Complexity. The obvious way (scan every placed instance that overlaps in
 * time) is quadratic on deep networks: every saved activation overlaps every
 * other at the loss step, and the 2,498-layer ResNet has ~30k of them. We keep
 * a segment tree over steps instead; node v keeps two merged, offset-sorted
 * lists of occupied byte ranges:
 *   cover(v)  ranges of instances whose lifetime's canonical decomposition
 *             contains v (they are live throughout v's step range);
 *   sub(v)    the union of ranges of instances stored at v or below it.
 * The instances overlapping [a, b] in time are exactly those in sub(q) for the
 * O(log T) canonical nodes q of [a, b], plus those in cover(u) for u on the
 * paths from leaves a and b to the root (an instance stored at a node that is
 * not inside [a, b] but meets it contains a or b). A placement reads these
 * O(log T) lists and bumps a candidate offset past any range that collides
 * (binary search per list, x only grows); an insertion adds one range to
 * O(log T) lists, merging neighbours. Because packed memory is mostly
 * contiguous, lists stay short, and the whole pass is about
 * O(n log T (log L + bumps)) plus list inserts: well under a second for 100k
 * instances (tests/test_plan_validity.py times the deep ResNet). The result is exactly
 * the greedy rule above; only the search is faster.
 *
 * offsets_check is independent of all this: a sweep over steps with the
 * active instances indexed by offset (O(n log n)), once for the device arena
 * and once for the pinned host arena; the unit test also checks
 * the packer against a naive quadratic greedy and the checker against
 * deliberately broken plans. */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

typedef struct Range { int64_t lo, hi; } Range;  // bytes [lo, hi)
typedef struct RList { Range *r; int n, cap; } RList;

/* First range with hi > x (n if none). */
static int rl_search(const RList *l, int64_t x) {
  int lo = 0, hi = l->n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (l->r[mid].hi > x) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/* Adds [lo, hi) to the union, merging ranges it touches. */
static void rl_insert(RList *l, int64_t lo, int64_t hi) {
  int i = rl_search(l, lo - 1);        // first range with hi >= lo (touching merges)
  int j = i;
  while (j < l->n && l->r[j].lo <= hi) {
    if (l->r[j].lo < lo) lo = l->r[j].lo;
    if (l->r[j].hi > hi) hi = l->r[j].hi;
    j++;
  }
  if (j == i) {                        // no merge: open a slot at i
    xgrow((void **)&l->r, &l->cap, l->n + 1, sizeof *l->r);
    memmove(&l->r[i + 1], &l->r[i], sizeof *l->r * (size_t)(l->n - i));
    l->n++;
  } else if (j > i + 1) {              // ranges i..j-1 collapse into i
    memmove(&l->r[i + 1], &l->r[j], sizeof *l->r * (size_t)(l->n - j));
    l->n -= j - i - 1;
  }
  l->r[i] = (Range){lo, hi};
}

typedef struct Packer {
  int P;                 // leaves (a power of two >= steps)
  RList *cover, *sub;    // per tree node, 1..2P-1
  int *stamp;            // per tree node: last insertion that touched sub
  int nstamp;
  const RList **q;       // query scratch
  int nq, capq;
} Packer;

static void pk_push(Packer *p, const RList *l) {
  if (!l->n) return;
  xgrow((void **)&p->q, &p->capq, p->nq + 1, sizeof *p->q);
  p->q[p->nq++] = l;
}

static int64_t pk_find(Packer *p, int a, int b, int64_t size, int64_t base) {
  p->nq = 0;
  for (int l = a + p->P, r = b + p->P + 1; l < r; l >>= 1, r >>= 1) {
    if (l & 1) pk_push(p, &p->sub[l++]);
    if (r & 1) pk_push(p, &p->sub[--r]);
  }
  int u = a + p->P, v = b + p->P;
  for (; u != v; u >>= 1, v >>= 1) pk_push(p, &p->cover[u]), pk_push(p, &p->cover[v]);
  for (; u >= 1; u >>= 1) pk_push(p, &p->cover[u]);
  int64_t x = base;
  for (bool moved = true; moved;) {
    moved = false;
    for (int k = 0; k < p->nq; k++) {
      const RList *l = p->q[k];
      int i = rl_search(l, x);
      if (i < l->n && l->r[i].lo < x + size) x = l->r[i].hi, moved = true;
    }
  }
  return x;
}

static void pk_insert(Packer *p, int a, int b, int64_t lo, int64_t hi) {
  int id = ++p->nstamp;
  for (int l = a + p->P, r = b + p->P + 1; l < r; l >>= 1, r >>= 1) {
    int c[2], nc = 0;
    if (l & 1) c[nc++] = l++;
    if (r & 1) c[nc++] = --r;
    for (int k = 0; k < nc; k++) {
      rl_insert(&p->cover[c[k]], lo, hi);
      for (int v = c[k]; v >= 1 && p->stamp[v] != id; v >>= 1) {
        p->stamp[v] = id;
        rl_insert(&p->sub[v], lo, hi);
      }
    }
  }
}

static int cmp_place(const void *x, const void *y, void *ctx) {
  const Instance *inst = ctx;
  int i = *(const int *)x, j = *(const int *)y;
  if (inst[i].bytes != inst[j].bytes) return inst[i].bytes > inst[j].bytes ? -1 : 1;
  if (inst[i].first != inst[j].first) return inst[i].first < inst[j].first ? -1 : 1;
  return (i > j) - (i < j);
}

/* Max end offset of live instances per step: chmax on canonical nodes, then
 * each leaf takes the max along its path. O((n + T) log T). */
void offsets_high_water(Plan *pl) {
  int T = pl->route->ns, P = 1;
  while (P < T) P <<= 1;
  int64_t *mx = xcalloc(2 * (size_t)P, sizeof *mx);
  for (int i = 0; i < pl->ninst; i++) {
    const Instance *in = &pl->inst[i];
    if (in->offset < 0) continue;
    int64_t end = in->offset + in->bytes;
    for (int l = in->first + P, r = in->last + P + 1; l < r; l >>= 1, r >>= 1) {
      if (l & 1) { if (mx[l] < end) mx[l] = end; l++; }
      if (r & 1) { --r; if (mx[r] < end) mx[r] = end; }
    }
  }
  free(pl->high_water);
  pl->high_water = xcalloc((size_t)(T ? T : 1), sizeof *pl->high_water);
  for (int s = 0; s < T; s++) {
    int64_t m = 0;
    for (int v = s + P; v >= 1; v >>= 1)
      if (mx[v] > m) m = mx[v];
    pl->high_water[s] = m;
  }
  free(mx);
}

int64_t offsets_assign(Plan *pl, bool share) {
  int64_t top = 0;
  /* Host instances (offloaded copies) are packed separately (offsets_host). */
  for (int i = 0; i < pl->ninst; i++)
    if (pl->inst[i].persistent && !pl->inst[i].host) pl->inst[i].offset = top, top += pl->inst[i].bytes;
  int64_t base = top;
  int T = pl->route->ns;
  if (!share) {
    for (int i = 0; i < pl->ninst; i++)
      if (!pl->inst[i].persistent && !pl->inst[i].host) pl->inst[i].offset = top, top += pl->inst[i].bytes;
  } else if (pl->ninst) {
    int *order = xmalloc(sizeof(int) * (size_t)pl->ninst), n = 0;
    for (int i = 0; i < pl->ninst; i++)
      if (!pl->inst[i].persistent && !pl->inst[i].host) order[n++] = i;
    qsort_r(order, (size_t)n, sizeof *order, cmp_place, pl->inst);
    Packer p = {.P = 1};
    while (p.P < T) p.P <<= 1;
    p.cover = xcalloc(2 * (size_t)p.P, sizeof *p.cover);
    p.sub = xcalloc(2 * (size_t)p.P, sizeof *p.sub);
    p.stamp = xcalloc(2 * (size_t)p.P, sizeof *p.stamp);
    for (int k = 0; k < n; k++) {
      Instance *in = &pl->inst[order[k]];
      snc_assert(in->first >= 0 && in->first <= in->last && in->last < T);
      int64_t x = pk_find(&p, in->first, in->last, in->bytes, base);
      pk_insert(&p, in->first, in->last, x, x + in->bytes);
      in->offset = x;
      if (x + in->bytes > top) top = x + in->bytes;
    }
    for (int v = 0; v < 2 * p.P; v++) free(p.cover[v].r), free(p.sub[v].r);
    free(p.cover), free(p.sub), free(p.stamp), free(p.q), free(order);
  }
  pl->arena_bytes = top;
  offsets_high_water(pl);
  return top;
}

/* The pinned host arena: host instances packed by the same greedy rule, in
 * a plan of their own; host_offset set, pl->host_bytes its size. */
void offsets_host(Plan *pl) {
  Plan h = {.route = pl->route};
  int *idx = xmalloc(sizeof(int) * (size_t)(pl->ninst + 1));
  for (int i = 0; i < pl->ninst; i++)
    if (pl->inst[i].host) {
      xgrow((void **)&h.inst, &h.capinst, h.ninst + 1, sizeof *h.inst);
      h.inst[h.ninst] = pl->inst[i];
      h.inst[h.ninst].host = false;
      idx[h.ninst++] = i;
    }
  pl->host_bytes = 0;
  if (h.ninst) {
    offsets_assign(&h, true);
    for (int k = 0; k < h.ninst; k++) pl->inst[idx[k]].host_offset = h.inst[k].offset;
    pl->host_bytes = h.arena_bytes;
  }
  free(h.inst), free(h.high_water), free(idx);
}

/* ---- the checker ---- */

int inst_cmp_first(const void *x, const void *y, void *ctx) {
  const Instance *inst = ctx;
  int i = *(const int *)x, j = *(const int *)y;
  if (inst[i].first != inst[j].first) return inst[i].first < inst[j].first ? -1 : 1;
  return (i > j) - (i < j);
}

int inst_cmp_last(const void *x, const void *y, void *ctx) {
  const Instance *inst = ctx;
  int i = *(const int *)x, j = *(const int *)y;
  if (inst[i].last != inst[j].last) return inst[i].last < inst[j].last ? -1 : 1;
  return (i > j) - (i < j);
}

static int cmp_offset(const void *x, const void *y, void *ctx) {
  const Instance *inst = ctx;
  int i = *(const int *)x, j = *(const int *)y;
  if (inst[i].offset != inst[j].offset) return inst[i].offset < inst[j].offset ? -1 : 1;
  return (i > j) - (i < j);
}

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

/* Active set over offset ranks: per rank, how many active instances start
 * there and the largest end among them; sums and maxima up a segment tree. */
typedef struct Active { int P; int *cnt; int64_t *mx; int64_t *key; int nkey; } Active;

static int rank_of(const Active *a, int64_t off) {   // first key >= off
  int lo = 0, hi = a->nkey;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (a->key[mid] < off) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static void act_set(Active *a, int r, int dc, int64_t end) {
  int v = r + a->P;
  a->cnt[v] += dc;
  if (dc > 0 && end > a->mx[v]) a->mx[v] = end;
  if (a->cnt[v] == 0) a->mx[v] = 0;
  for (v >>= 1; v >= 1; v >>= 1) {
    a->cnt[v] = a->cnt[2 * v] + a->cnt[2 * v + 1];
    a->mx[v] = a->mx[2 * v] > a->mx[2 * v + 1] ? a->mx[2 * v] : a->mx[2 * v + 1];
  }
}

static void act_query(const Active *a, int l, int r, int *cnt, int64_t *mx) {  // ranks [l, r)
  *cnt = 0, *mx = 0;
  for (l += a->P, r += a->P; l < r; l >>= 1, r >>= 1) {
    if (l & 1) { *cnt += a->cnt[l]; if (a->mx[l] > *mx) *mx = a->mx[l]; l++; }
    if (r & 1) { --r; *cnt += a->cnt[r]; if (a->mx[r] > *mx) *mx = a->mx[r]; }
  }
}

static const char *nm(const Graph *g, const Plan *pl, int i) {
  return g ? plan_inst_name(g, pl, i) : "?";
}

/* Sweep over steps: before step t starts its instances, those whose last step
 * is before t leave the active set. An instance collides with an active one
 * iff an active one starts inside [offset, end), or one starting below it
 * ends above offset. Each overlapping pair is found when its later-starting
 * member enters, so a correct plan reports 0 and a wrong one at least 1 (the
 * count is exact while violations do not stack on one region). O(n log n). */
static int64_t off_in(const Instance *in, bool host) { return host ? in->host_offset : in->offset; }

static int check_arena(const Graph *g, const Plan *pl, FILE *f, bool host) {
  const char *arena = host ? "host arena" : "arena";
  int64_t size = host ? pl->host_bytes : pl->arena_bytes;
  int nv = 0, n = 0;
  int *byfirst = xmalloc(sizeof(int) * (size_t)(pl->ninst + 1));
  int *bylast = xmalloc(sizeof(int) * (size_t)(pl->ninst + 1));
  Active a = {.P = 1};
  a.key = xmalloc(sizeof(int64_t) * (size_t)(pl->ninst + 1));
  for (int i = 0; i < pl->ninst; i++) {
    const Instance *in = &pl->inst[i];
    if (off_in(in, host) < 0 || !in->bytes) continue;   // not in this arena / empty
    if (off_in(in, host) % SNRT_ALIGN || off_in(in, host) + in->bytes > size) {
      if (f && nv < 20)
        fprintf(f, "misplaced: '%s' at %lld (+%lld) in a %s of %lld\n", nm(g, pl, i),
                (long long)off_in(in, host), (long long)in->bytes, arena, (long long)size);
      nv++;
    }
    byfirst[n] = bylast[n] = i;
    a.key[n++] = off_in(in, host);
  }
  qsort(a.key, (size_t)n, sizeof *a.key, cmp_i64);
  for (int i = 0; i < n; i++)
    if (!a.nkey || a.key[a.nkey - 1] != a.key[i]) a.key[a.nkey++] = a.key[i];
  while (a.P < a.nkey) a.P <<= 1;
  a.cnt = xcalloc(2 * (size_t)a.P, sizeof *a.cnt);
  a.mx = xcalloc(2 * (size_t)a.P, sizeof *a.mx);
  qsort_r(byfirst, (size_t)n, sizeof *byfirst, inst_cmp_first, pl->inst);
  qsort_r(bylast, (size_t)n, sizeof *bylast, inst_cmp_last, pl->inst);
  for (int k = 0, d = 0; k < n; k++) {
    const Instance *in = &pl->inst[byfirst[k]];
    for (; d < n && pl->inst[bylast[d]].last < in->first; d++)
      act_set(&a, rank_of(&a, off_in(&pl->inst[bylast[d]], host)), -1, 0);
    int64_t lo = off_in(in, host), hi = off_in(in, host) + in->bytes;
    int rlo = rank_of(&a, lo), rhi = rank_of(&a, hi), c1, c2;
    int64_t m1, m2;
    act_query(&a, rlo, rhi, &c1, &m1);  // active ones starting inside [lo, hi)
    act_query(&a, 0, rlo, &c2, &m2);    // active ones starting below lo
    if (c1 > 0 || m2 > lo) {
      if (f && nv < 20) {
        /* Name the other party: a linear scan, at most 20 times. */
        int other = -1;
        for (int j = 0; j < pl->ninst && other < 0; j++) {
          const Instance *b = &pl->inst[j];
          if (j != byfirst[k] && off_in(b, host) >= 0 && b->bytes && b->first <= in->first &&
              b->last >= in->first && off_in(b, host) < hi && lo < off_in(b, host) + b->bytes)
            other = j;
        }
        fprintf(f, "overlap in the %s: '%s' [%lld, %lld) steps %d-%d", arena,
                nm(g, pl, byfirst[k]), (long long)lo, (long long)hi, in->first, in->last);
        if (other >= 0)
          fprintf(f, " and '%s' [%lld, %lld) steps %d-%d", nm(g, pl, other),
                  (long long)off_in(&pl->inst[other], host),
                  (long long)(off_in(&pl->inst[other], host) + pl->inst[other].bytes),
                  pl->inst[other].first, pl->inst[other].last);
        fputc('\n', f);
      }
      nv++;
    }
    act_set(&a, rlo, +1, hi);
  }
  if (f && nv > 20) fprintf(f, "... %d violations in the %s in all\n", nv, arena);
  free(byfirst), free(bylast), free(a.key), free(a.cnt), free(a.mx);
  return nv;
}

/* Both arenas: the device arena (Instance.offset) and the pinned host arena
 * (Instance.host_offset); an instance in both is an error too. */
int offsets_check(const Graph *g, const Plan *pl, FILE *f) {
  int nv = 0;
  for (int i = 0; i < pl->ninst; i++)
    if (pl->inst[i].offset >= 0 && pl->inst[i].host_offset >= 0) {
      if (f && nv < 20) fprintf(f, "misplaced: '%s' is in both arenas\n", nm(g, pl, i));
      nv++;
    }
  return nv + check_arena(g, pl, f, false) + check_arena(g, pl, f, true);
}

/* ---- the dump: instances by offset, then an ASCII picture when small ---- */

void offsets_dump(const Graph *g, const Plan *pl, FILE *f) {
  fprintf(f, "offsets: arena %s (%lld bytes), %d instances, persistent %s\n",
          fmt_bytes(pl->arena_bytes), (long long)pl->arena_bytes, pl->ninst,
          fmt_bytes(pl->persistent_bytes));
  int *ord = xmalloc(sizeof(int) * (size_t)(pl->ninst + 1));
  for (int i = 0; i < pl->ninst; i++) ord[i] = i;
  qsort_r(ord, (size_t)pl->ninst, sizeof *ord, cmp_offset, pl->inst);
  fprintf(f, "%14s %14s %12s %7s %7s  %s\n", "offset", "end", "bytes", "first", "last", "instance");
  for (int k = 0; k < pl->ninst; k++) {
    const Instance *in = &pl->inst[ord[k]];
    fprintf(f, "%14lld %14lld %12lld ", (long long)in->offset,
            (long long)(in->offset + in->bytes), (long long)in->bytes);
    if (in->persistent) fprintf(f, "%15s", "persistent");
    else fprintf(f, "%7d %7d", in->first, in->last);
    fprintf(f, "  %s\n", plan_inst_name(g, pl, ord[k]));
  }
  free(ord);
  /* One row per step, 64 columns of arena: '#' used, '.' free. O(T n): only
   * drawn for small plans. */
  int T = pl->route->ns;
  if (T > 400 || pl->ninst > 5000 || pl->arena_bytes <= 0) return;
  fprintf(f, "\narena by step (64 columns, %s each; '#' in use)\n",
          fmt_bytes((pl->arena_bytes + 63) / 64));
  for (int s = 0; s < T; s++) {
    char row[65];
    memset(row, '.', 64);
    row[64] = 0;
    for (int i = 0; i < pl->ninst; i++) {
      const Instance *in = &pl->inst[i];
      if (in->offset < 0 || s < in->first || s > in->last || !in->bytes) continue;
      int c0 = (int)(in->offset * 64 / pl->arena_bytes);
      int c1 = (int)((in->offset + in->bytes - 1) * 64 / pl->arena_bytes);
      for (int c = c0; c <= c1 && c < 64; c++) row[c] = '#';
    }
    fprintf(f, "%6d |%s|\n", s, row);
  }
}
