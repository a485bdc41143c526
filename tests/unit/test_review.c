/* test_review.c — the review printers on a plan with recomputation, offload
 * and prefetch built by hand, so that what the printers must show is known
 * exactly and does not depend on what recompute.c and offload.c decide.
 *
 * Plans the shipped CNN (liveness), then appends by hand steps of the kinds
 * recompute.c and offload.c insert: a recompute step writing a second instance of one
 * activation, an offload of another, its prefetch into a new instance, and a
 * step reading that instance. Checks: the analysis (categories, decisions,
 * copies and their extents), the text plan's decisions section, and the HTML
 * page's bands and copy-lane bars.
 *
 *   build/tests/test_review [examples/fashion_cnn.onnx [PAGE.html]]   -> "test_review: ok", exit 0 */
#include "../../compiler/review/plan_review.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

static int add_inst(Plan *pl, int tensor, int first, int last) {
  xgrow((void **)&pl->inst, &pl->capinst, pl->ninst + 1, sizeof *pl->inst);
  int p = pl->tensor_inst[tensor];
  pl->inst[pl->ninst] = (Instance){.tensor = tensor, .bytes = pl->inst[p].bytes, .first = first,
                                   .last = last, .offset = 0, .host_offset = -1};
  return pl->ninst++;
}

static Step *add_step(Plan *pl, StepKind k, int node, int tensor, int in, int out) {
  Route *r = pl->route;
  xgrow((void **)&r->s, &r->caps, r->ns + 1, sizeof *r->s);
  Step *s = &r->s[r->ns++];
  *s = (Step){.kind = k, .node = node, .tensor = tensor, .ws = -1, .nin = in >= 0,
              .nout = out >= 0};
  s->in = xmalloc(sizeof(int)), s->out = xmalloc(sizeof(int));
  s->in[0] = in, s->out[0] = out;
  return s;
}

static char *capture(void (*fn)(const Graph *, const Plan *, FILE *), const Graph *g,
                     const Plan *pl) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  fn(g, pl, f);
  fclose(f);
  return buf;
}

int main(int argc, char **argv) {
  const char *model = argc > 1 ? argv[1] : "examples/fashion_cnn.onnx";
  err_file = model;
  Graph *g = onnx_import(model, NULL);
  shape_infer(g, 4);
  TrainOpts t = {.loss = LOSS_SOFTMAX_CE, .optim = OPTIM_SGD, .lr = 0.01f, .momentum = 0.9f};
  train_build(g, &t);
  precision_assign(g, &t);
  PlanOpts o = {.policy = POL_LIVENESS, .device = "h200"};
  Route *r = route_build(g);
  Plan *pl = plan_build(g, r, &o);

  /* Two forward activations: A (a Relu output, cheap) recomputed, B offloaded. */
  int A = -1, B = -1;
  for (int i = 0; i < g->nfwd && (A < 0 || B < 0); i++) {
    int y = g->n[i].out[0];
    if (pl->tensor_inst[y] < 0 || g->t[y].kind != TK_ACT) continue;
    if (g->n[i].op == OP_RELU && A < 0) A = y;
    else if (g->n[i].op == OP_CONV && B < 0) B = y;
  }
  CHECK(A >= 0 && B >= 0);
  int T = pl->route->ns;
  int ia = add_inst(pl, A, T, T + 3);
  add_step(pl, SK_RECOMPUTE, g->t[A].producer, A, -1, ia);
  add_step(pl, SK_OFFLOAD, -1, B, pl->tensor_inst[B], -1);
  int ib = add_inst(pl, B, T + 2, T + 3);
  add_step(pl, SK_PREFETCH, -1, B, -1, ib);
  add_step(pl, SK_EVAL, g->t[A].producer, -1, ib, -1);
  pl->inst[pl->tensor_inst[B]].last = T + 1;
  /* Per-step live bytes for the longer route (as liveness computes them). */
  int ns = pl->route->ns;
  pl->live_bytes = xrealloc(pl->live_bytes, sizeof(int64_t) * (size_t)ns);
  pl->high_water = xrealloc(pl->high_water, sizeof(int64_t) * (size_t)ns);
  for (int s = 0; s < ns; s++) {
    pl->live_bytes[s] = 0, pl->high_water[s] = pl->arena_bytes;
    for (int i = 0; i < pl->ninst; i++)
      if (pl->inst[i].first <= s && s <= pl->inst[i].last) pl->live_bytes[s] += pl->inst[i].bytes;
  }

  Review *rv = review_build(g, pl);
  CHECK(rv->cat[ia] == CAT_RECOMPUTED);
  CHECK(rv->cat[ib] == CAT_PREFETCHED);
  CHECK(rv->cat[pl->tensor_inst[A]] == CAT_ACT);
  CHECK(rv->dec[A] == DEC_RECOMPUTED && rv->recomputes[A] == 1);
  CHECK(rv->dec[B] == DEC_OFFLOADED);
  CHECK(rv->offload_step[B] == T + 1 && rv->prefetch_step[B] == T + 2 && rv->next_use[B] == T + 3);
  CHECK(rv->ncopies == 2);
  if (rv->ncopies == 2) {
    CHECK(!rv->copies[0].prefetch && rv->copies[0].step == T + 1 && rv->copies[0].tensor == B);
    CHECK(rv->copies[1].prefetch && rv->copies[1].step == T + 2 && rv->copies[1].until == T + 3);
    CHECK(rv->copies[1].bytes == pl->inst[ib].bytes);
  }
  CHECK(rv->by_cat[(size_t)(T + 3) * CAT_COUNT + CAT_RECOMPUTED] == pl->inst[ia].bytes);
  CHECK(rv->by_cat[(size_t)(T + 3) * CAT_COUNT + CAT_PREFETCHED] == pl->inst[ib].bytes);
  for (int t2 = 0; t2 < g->nt; t2++)
    if (t2 != A && t2 != B) CHECK(rv->dec[t2] == DEC_KEPT);
  review_free(rv);

  char *text = capture(plan_print_text, g, pl);
  char *want = xasprintf("  recomputed: 1 tensors");
  CONTAINS(text, want);
  CONTAINS(text, xasprintf("    - %s  ", g->t[A].name));
  CONTAINS(text, "cheap to recompute");
  CONTAINS(text, "  offloaded: 1 tensors");
  CONTAINS(text, xasprintf("    - %s  ", g->t[B].name));
  CONTAINS(text, xasprintf("offloaded at step %d, prefetched at step %d for step %d", T + 1, T + 2,
                           T + 3));
  CONTAINS(text, xasprintf("at step %d, first used at step %d", T + 2, T + 3));
  CHECK(strstr(text, "recomputed: none") == NULL);

  char *page = capture(plan_print_html, g, pl);
  CONTAINS(page, "<path class=\"c-rec\"");
  CONTAINS(page, "<path class=\"c-pre\"");
  CONTAINS(page, "<rect class=\"off\"");
  CONTAINS(page, "<rect class=\"pf\"");
  CONTAINS(page, "<line class=\"host\"");
  CONTAINS(page, "recomputed:</b> 1 tensors");
  CONTAINS(page, "offloaded:</b> 1 tensors");
  CHECK(strstr(page, "no copies") == NULL);
  if (argc > 2) {                      // keep the page to look at
    FILE *f = fopen(argv[2], "w");
    if (f) fputs(page, f), fclose(f);
  }
  free(text), free(page);

  if (failures) {
    fprintf(stderr, "test_review: %d failures\n", failures);
    return 1;
  }
  printf("test_review: ok\n");
  return 0;
}
