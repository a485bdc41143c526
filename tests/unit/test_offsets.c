/* test_offsets.c — the planner's passes on hand-built inputs.
 *
 * - offsets_assign on small interval sets whose greedy offsets were computed
 *   by hand (gap reuse, exact fits, persistent base, policy none);
 * - the fast packer against a naive O(n^2) greedy written here, on random
 *   interval sets (same rule, different search: offsets must be identical);
 * - offsets_check catching deliberately broken plans;
 * - route + liveness on a hand-built training-shaped IR (forward, loss,
 *   backward, update, eval; a constant; conv workspaces), lifetimes and step
 *   statistics computed by hand;
 * - a deep synthetic plan (~120k instances) packed in seconds.
 * Exits non-zero on the first failure. */
#include "../../compiler/review/review.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A plan with T empty steps and the given instances (bytes already aligned). */
typedef struct { int64_t bytes; int first, last; bool persistent; } Iv;

static Plan *plan_of(int T, const Iv *iv, int n) {
  Plan *pl = xcalloc(1, sizeof *pl);
  pl->route = xcalloc(1, sizeof *pl->route);
  pl->route->ns = pl->route->train_steps = T;
  pl->route->s = xcalloc((size_t)T, sizeof(Step));
  for (int s = 0; s < T; s++) pl->route->s[s] = (Step){.node = -1, .tensor = -1, .ws = -1};
  pl->inst = xcalloc((size_t)n + 1, sizeof(Instance));
  pl->ninst = pl->capinst = n;
  for (int i = 0; i < n; i++)
    pl->inst[i] = (Instance){.tensor = -1, .bytes = iv[i].bytes, .first = iv[i].first,
                             .last = iv[i].last, .offset = -1, .host_offset = -1,
                             .persistent = iv[i].persistent};
  return pl;
}

static void test_hand(void) {
  /* i0 and i2 do not overlap in time: both at 0; i1 above them; i3 above all. */
  Iv a[] = {{1024, 0, 1, false}, {512, 1, 2, false}, {1024, 2, 3, false}, {256, 0, 3, false}};
  Plan *pl = plan_of(4, a, 4);
  CHECK_EQ(1792, offsets_assign(pl, true));
  CHECK_EQ(0, pl->inst[0].offset);
  CHECK_EQ(1024, pl->inst[1].offset);
  CHECK_EQ(0, pl->inst[2].offset);
  CHECK_EQ(1536, pl->inst[3].offset);
  for (int s = 0; s < 4; s++) CHECK_EQ(1792, pl->high_water[s]);
  CHECK_EQ(0, offsets_check(NULL, pl, stderr));

  /* Persistent p at the bottom; c reuses the hole a leaves (lowest gap, not
   * the top); d fits a 1024 gap; e bumps past c and d, then past b; f fits a
   * gap of exactly its size. */
  Iv b[] = {{512, 0, 5, true},    // p
            {2048, 0, 0, false},  // a
            {1024, 0, 5, false},  // b
            {1024, 1, 5, false},  // c
            {768, 2, 3, false},   // d
            {512, 3, 4, false},   // e
            {256, 3, 3, false}};  // f
  pl = plan_of(6, b, 7);
  CHECK_EQ(4096, offsets_assign(pl, true));
  int64_t want[] = {0, 512, 2560, 512, 1536, 3584, 2304};
  for (int i = 0; i < 7; i++) CHECK_EQ(want[i], pl->inst[i].offset);
  int64_t hw[] = {3584, 3584, 3584, 4096, 4096, 3584};
  for (int s = 0; s < 6; s++) CHECK_EQ(hw[s], pl->high_water[s]);
  CHECK_EQ(0, offsets_check(NULL, pl, stderr));

  /* Policy none: persistent first, then instance order, nothing shared. */
  CHECK_EQ(512 + 2048 + 1024 + 1024 + 768 + 512 + 256, offsets_assign(pl, false));
  int64_t seq[] = {0, 512, 2560, 3584, 4608, 5376, 5888};
  for (int i = 0; i < 7; i++) CHECK_EQ(seq[i], pl->inst[i].offset);
  CHECK_EQ(0, offsets_check(NULL, pl, NULL));

  /* Broken plans: two overlapping lifetimes at one offset; a misaligned one;
   * a transient one inside persistent memory. */
  offsets_assign(pl, true);
  pl->inst[5].offset = pl->inst[4].offset;   // e over d (both live at step 3)
  CHECK(offsets_check(NULL, pl, NULL) >= 1);
  offsets_assign(pl, true);
  pl->inst[6].offset += 8;
  CHECK(offsets_check(NULL, pl, NULL) >= 1);
  offsets_assign(pl, true);
  pl->inst[3].offset = 256;                  // c inside p
  CHECK(offsets_check(NULL, pl, NULL) >= 1);
  offsets_assign(pl, true);
  pl->inst[1].offset = 1024;                 // a [1024, 3072) over b [2560, 3584) at step 0
  CHECK_EQ(1, offsets_check(NULL, pl, NULL));

  /* The pinned host arena is checked the same way: b and c (both live at
   * steps 1-5) moved to the host, first apart, then over each other, then
   * outside the host arena; an instance in both arenas is an error too. */
  offsets_assign(pl, true);
  pl->inst[2].offset = pl->inst[3].offset = -1;
  pl->inst[2].host_offset = 0, pl->inst[3].host_offset = 1024;
  pl->host_bytes = 2048;
  CHECK_EQ(0, offsets_check(NULL, pl, stderr));
  pl->inst[3].host_offset = 768;             // c [768, 1792) over b [0, 1024)
  CHECK_EQ(1, offsets_check(NULL, pl, NULL));
  pl->inst[3].host_offset = 1280;            // c [1280, 2304) past the end
  CHECK_EQ(1, offsets_check(NULL, pl, NULL));
  pl->inst[3].host_offset = 1024;
  pl->inst[3].offset = 512;
  CHECK(offsets_check(NULL, pl, NULL) >= 1);
  pl->inst[3].offset = -1;
  CHECK_EQ(0, offsets_check(NULL, pl, NULL));
  pl->host_bytes = 0;
}

/* The greedy rule, written the slow way: scan every placed instance. */
static int order_cmp(const void *x, const void *y, void *ctx) {
  const Instance *in = ctx;
  int i = *(const int *)x, j = *(const int *)y;
  if (in[i].bytes != in[j].bytes) return in[i].bytes > in[j].bytes ? -1 : 1;
  if (in[i].first != in[j].first) return in[i].first < in[j].first ? -1 : 1;
  return i - j;
}

static void naive_greedy(const Plan *pl, int64_t *off) {
  int n = pl->ninst;
  int64_t base = 0;
  for (int i = 0; i < n; i++)
    if (pl->inst[i].persistent) off[i] = base, base += pl->inst[i].bytes;
  int *ord = xmalloc(sizeof(int) * (size_t)n), m = 0;
  bool *placed = xcalloc((size_t)n, 1);
  for (int i = 0; i < n; i++)
    if (!pl->inst[i].persistent) ord[m++] = i;
  qsort_r(ord, (size_t)m, sizeof *ord, order_cmp, pl->inst);
  for (int k = 0; k < m; k++) {
    const Instance *a = &pl->inst[ord[k]];
    int64_t x = base;
    for (bool moved = true; moved;) {
      moved = false;
      for (int j = 0; j < n; j++) {
        const Instance *b = &pl->inst[j];
        if (!placed[j] || b->last < a->first || b->first > a->last) continue;
        if (off[j] < x + a->bytes && x < off[j] + b->bytes) x = off[j] + b->bytes, moved = true;
      }
    }
    off[ord[k]] = x;
    placed[ord[k]] = true;
  }
  free(ord);
  free(placed);
}

static void test_random(void) {
  srand(12345);
  for (int round = 0; round < 30; round++) {
    int T = 1 + rand() % 120, n = 1 + rand() % 400;
    Iv *iv = xmalloc(sizeof *iv * (size_t)n);
    for (int i = 0; i < n; i++) {
      int a = rand() % T, len = rand() % 4 == 0 ? rand() % T : rand() % 6;
      int b = a + len < T ? a + len : T - 1;
      iv[i] = (Iv){256 * (1 + rand() % (rand() % 3 ? 8 : 64)), a, b, rand() % 15 == 0};
      if (iv[i].persistent) iv[i].first = 0, iv[i].last = T - 1;
    }
    Plan *pl = plan_of(T, iv, n);
    int64_t arena = offsets_assign(pl, true);
    int64_t *off = xmalloc(sizeof *off * (size_t)n), top = 0;
    naive_greedy(pl, off);
    int diffs = 0;
    for (int i = 0; i < n; i++) {
      diffs += off[i] != pl->inst[i].offset;
      if (off[i] + pl->inst[i].bytes > top) top = off[i] + pl->inst[i].bytes;
    }
    CHECK_EQ(0, diffs);
    CHECK_EQ(top, arena);
    CHECK_EQ(0, offsets_check(NULL, pl, stderr));
    /* High water by brute force. */
    for (int s = 0; s < T; s++) {
      int64_t m = 0;
      for (int i = 0; i < n; i++)
        if (pl->inst[i].first <= s && s <= pl->inst[i].last &&
            pl->inst[i].offset + pl->inst[i].bytes > m)
          m = pl->inst[i].offset + pl->inst[i].bytes;
      if (m != pl->high_water[s]) { CHECK_EQ(m, pl->high_water[s]); break; }
    }
    /* Break the plan at random; the checker must agree with brute force on
     * whether any overlap exists. */
    for (int trial = 0; trial < 5 && n > 1; trial++) {
      int i = rand() % n;
      int64_t keep = pl->inst[i].offset;
      pl->inst[i].offset = 256 * (rand() % (arena / 256 + 1));
      if (pl->inst[i].offset + pl->inst[i].bytes > arena) pl->inst[i].offset = keep;
      bool bad = false;
      for (int p = 0; p < n && !bad; p++)
        for (int q = p + 1; q < n && !bad; q++) {
          const Instance *x = &pl->inst[p], *y = &pl->inst[q];
          bad = x->first <= y->last && y->first <= x->last && x->offset < y->offset + y->bytes &&
                y->offset < x->offset + x->bytes;
        }
      CHECK_EQ(bad, offsets_check(NULL, pl, NULL) > 0);
      pl->inst[i].offset = keep;
    }
    free(iv);
    free(off);
  }
}

/* ---- route + liveness on a hand-built training IR ---- */

static int tensor(Graph *g, const char *name, TensorKind k, int rank, int64_t d0, int64_t d1,
                  int64_t d2, int64_t d3) {
  int t = graph_add_tensor(g, name, DT_FLOAT, k);
  int64_t d[4] = {d0, d1, d2, d3};
  tensor_set_shape(&g->t[t], rank, d);
  return t;
}

static int node(Graph *g, OpKind op, const char *name, Phase ph, int nin, const int *in,
                int nout, const int *out) {
  int i = graph_add_node(g, op, name, nin, in, nout, out);
  g->n[i].phase = ph;
  return i;
}

static void test_liveness(void) {
  Graph *g = graph_new("hand.onnx");
  g->name = xstrdup("hand");
  /* Every tensor is at most 256 bytes, so every instance is 256 bytes. */
  int x = tensor(g, "x", TK_INPUT, 4, 1, 1, 4, 4);
  int w = tensor(g, "w", TK_PARAM, 4, 2, 1, 3, 3);
  int h = tensor(g, "h", TK_ACT, 4, 1, 2, 2, 2);
  int cmin = tensor(g, "cmin", TK_CONST, 0, 0, 0, 0, 0);
  int a = tensor(g, "a", TK_ACT, 4, 1, 2, 2, 2);
  int lab = tensor(g, "label", TK_LABEL, 1, 1, 0, 0, 0);
  int loss = tensor(g, "loss", TK_LOSS, 0, 0, 0, 0, 0);
  int da = tensor(g, "a.grad", TK_GRAD, 4, 1, 2, 2, 2);
  int dh = tensor(g, "h.grad", TK_GRAD, 4, 1, 2, 2, 2);
  int dw = tensor(g, "w.grad", TK_PGRAD, 4, 2, 1, 3, 3);
  int mom = tensor(g, "w.momentum", TK_OPT, 4, 2, 1, 3, 3);
  int eh = tensor(g, "eval/h", TK_ACT, 4, 1, 2, 2, 2);
  int el = tensor(g, "eval/a", TK_ACT, 4, 1, 2, 2, 2);
  int unused = tensor(g, "unused_param", TK_PARAM, 1, 10, 0, 0, 0);
  (void)unused;
  g->input = x, g->label = lab, g->loss = loss, g->output = a, g->eval_output = el;
  snrt_conv_t *cp = xcalloc(1, sizeof *cp);
  *cp = (snrt_conv_t){.n = 1, .c = 1, .h = 4, .w = 4, .k = 2, .oh = 2, .ow = 2, .kh = 3,
                      .kw = 3, .sh = 1, .sw = 1, .dh = 1, .dw = 1, .group = 1, .ws_images = 1};
  CHECK_EQ(144, snrt_conv_ws_bytes(cp));

  int n0 = node(g, OP_CONV, "conv", PH_FORWARD, 2, (int[]){x, w}, 1, (int[]){h});
  node(g, OP_CLIP, "clip", PH_FORWARD, 2, (int[]){h, cmin}, 1, (int[]){a});
  g->nfwd = 2;
  node(g, OP_SOFTMAX_CE, "loss", PH_LOSS, 2, (int[]){a, lab}, 1, (int[]){loss});
  node(g, OP_SOFTMAX_CE_BWD, "loss/bwd", PH_BACKWARD, 2, (int[]){a, lab}, 1, (int[]){da});
  /* An eval node placed early in the node list: the route moves it after training. */
  int e0 = node(g, OP_CONV, "eval/conv", PH_EVAL, 2, (int[]){x, w}, 1, (int[]){eh});
  node(g, OP_UNARY_BWD, "clip/bwd", PH_BACKWARD, 2, (int[]){da, h}, 1, (int[]){dh});
  int n5 = node(g, OP_CONV_BWD_FILTER, "conv/bwd_filter", PH_BACKWARD, 2, (int[]){x, dh}, 1,
                (int[]){dw});
  node(g, OP_SGD, "w/sgd", PH_UPDATE, 3, (int[]){w, dw, mom}, 2, (int[]){w, mom});
  node(g, OP_CLIP, "eval/clip", PH_EVAL, 2, (int[]){eh, cmin}, 1, (int[]){el});
  g->n[n0].p = g->n[n5].p = g->n[e0].p = cp;

  PlanOpts o = {.policy = POL_LIVENESS, .device = "cpu"};
  Route *route = route_build(g);
  Plan *pl = plan_build(g, route, &o);
  Route *r = pl->route;
  CHECK_EQ(9, r->ns);
  CHECK_EQ(7, r->train_steps);
  const char *order[] = {"conv", "clip", "loss", "loss/bwd", "clip/bwd", "conv/bwd_filter",
                         "w/sgd", "eval/conv", "eval/clip"};
  StepKind kinds[] = {SK_FORWARD, SK_FORWARD, SK_LOSS, SK_BACKWARD, SK_BACKWARD, SK_BACKWARD,
                      SK_UPDATE, SK_EVAL, SK_EVAL};
  for (int s = 0; s < 9; s++) {
    CHECK(strcmp(g->n[r->s[s].node].name, order[s]) == 0);
    CHECK_EQ(kinds[s], r->s[s].kind);
  }
  /* Lifetimes by hand. */
  struct { int t, first, last; bool pers; } life[] = {
      {x, 0, 7, false},    {w, 0, 8, true},     {h, 0, 4, false},  {a, 1, 3, false},
      {lab, 0, 3, false},  {loss, 2, 6, false}, {da, 3, 4, false}, {dh, 4, 5, false},
      {dw, 5, 6, false},   {mom, 0, 8, true},   {eh, 7, 8, false}, {el, 8, 8, false}};
  for (size_t k = 0; k < sizeof life / sizeof life[0]; k++) {
    int i = pl->tensor_inst[life[k].t];
    CHECK(i >= 0);
    if (i < 0) continue;
    CHECK_EQ(life[k].first, pl->inst[i].first);
    CHECK_EQ(life[k].last, pl->inst[i].last);
    CHECK_EQ(life[k].pers, pl->inst[i].persistent);
    CHECK_EQ(256, pl->inst[i].bytes);
  }
  CHECK_EQ(-1, pl->tensor_inst[cmin]);
  CHECK_EQ(-1, pl->tensor_inst[unused]);
  CHECK_EQ(15, pl->ninst);              // 12 tensors + 3 workspaces
  /* Steps: const input -1; update in place; workspaces on the conv steps. */
  CHECK_EQ(pl->tensor_inst[h], r->s[1].in[0]);
  CHECK_EQ(-1, r->s[1].in[1]);
  CHECK_EQ(r->s[6].in[0], r->s[6].out[0]);
  CHECK_EQ(r->s[6].in[2], r->s[6].out[1]);
  int wsteps[] = {0, 5, 7};
  for (int k = 0; k < 3; k++) {
    int ws = r->s[wsteps[k]].ws;
    CHECK(ws >= 0);
    if (ws < 0) continue;
    CHECK_EQ(-1, pl->inst[ws].tensor);
    CHECK_EQ(wsteps[k], pl->inst[ws].first);
    CHECK_EQ(wsteps[k], pl->inst[ws].last);
    CHECK_EQ(256, pl->inst[ws].bytes);
  }
  CHECK_EQ(-1, r->s[1].ws);
  CHECK(strcmp(plan_inst_name(g, pl, r->s[5].ws), "conv/bwd_filter/workspace") == 0);
  /* Live instances per step (x256): counted by hand from the table above. */
  int live[] = {6, 6, 7, 8, 7, 7, 5, 5, 4};
  for (int s = 0; s < 9; s++) CHECK_EQ(256 * live[s], pl->live_bytes[s]);
  CHECK_EQ(2048, pl->peak_live_bytes);
  CHECK_EQ(512, pl->persistent_bytes);
  CHECK_EQ(1536, pl->layer_peak_bytes);  // step 5: x, h.grad, w.grad, workspace + persistent
  CHECK_EQ(15 * 256, pl->baseline_bytes);
  /* Equal sizes packed in start order: the greedy is optimal (max clique). */
  CHECK_EQ(2048, pl->arena_bytes);
  CHECK_EQ(0, offsets_check(g, pl, stderr));
  CHECK(pl->est_step_seconds > 0);

  PlanOpts on = {.policy = POL_NONE, .device = "cpu"};
  Plan *pn = plan_build(g, route, &on);
  CHECK_EQ(pl->baseline_bytes, pn->arena_bytes);
  CHECK_EQ(pn->baseline_bytes, pn->arena_bytes);
  CHECK_EQ(0, offsets_check(g, pn, stderr));

  /* The printers run and say what was planned. */
  PlanOpts oa = {.policy = POL_AUTO, .device = "cpu"};
  Plan *pa = plan_build(g, route, &oa);
  CHECK_EQ(POL_LIVENESS, pa->planned);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  plan_print_text(g, pa, f);
  plan_print_json(g, pa, f);
  fclose(f);
  CHECK(strstr(buf, "auto chose liveness") != NULL);
  CHECK(strstr(buf, "\"planned_policy\": \"liveness\"") != NULL);
  CHECK(strstr(buf, "conv/bwd_filter/workspace") != NULL);
  free(buf);
}

/* A deep chain shaped like training: N forward activations saved for the
 * backward pass (nested lifetimes), short-lived gradients, a workspace per
 * step, persistent weights. */
static void test_deep(void) {
  int N = 30000, T = 2 * N + 1, n = 0;
  Iv *iv = xmalloc(sizeof *iv * (size_t)(4 * N + 2));
  for (int i = 0; i < N; i++) {
    int64_t sz = 256 * (1 + (i * 7) % 13);
    iv[n++] = (Iv){sz, i, 2 * N - i, false};                  // saved activation
    iv[n++] = (Iv){sz, 2 * N - i - 1, 2 * N - i, false};      // its gradient
    iv[n++] = (Iv){256 * (1 + i % 5), i, i, false};           // workspace
    iv[n++] = (Iv){512, 0, T - 1, true};                      // weight
  }
  Plan *pl = plan_of(T, iv, n);
  clock_t c0 = clock();
  int64_t arena = offsets_assign(pl, true);
  double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
  int64_t peak = 0, *diff = xcalloc((size_t)T + 1, sizeof *diff), run = 0;
  for (int i = 0; i < n; i++) diff[iv[i].first] += iv[i].bytes, diff[iv[i].last + 1] -= iv[i].bytes;
  for (int s = 0; s < T; s++) run += diff[s], peak = run > peak ? run : peak;
  c0 = clock();
  int nv = offsets_check(NULL, pl, stderr);
  double csecs = (double)(clock() - c0) / CLOCKS_PER_SEC;
  printf("deep: %d instances, %d steps: packed in %.2f s, checked in %.2f s; arena %.3f x peak live\n",
         n, T, secs, csecs, (double)arena / (double)peak);
  CHECK_EQ(0, nv);
  CHECK(secs < 10);
  CHECK(arena <= peak * 105 / 100);
  free(diff);
}

int main(void) {
  test_hand();
  test_random();
  test_liveness();
  test_deep();
  if (failures) {
    fprintf(stderr, "test_offsets: %d failures\n", failures);
    return 1;
  }
  printf("test_offsets: ok\n");
  return 0;
}
