/* test_emit.c — the text each emitter file prints, one step at a time, on
 * plans of the shipped models (the whole program is tests/test_generated.py's
 * and the end-to-end tests').
 *
 * Each section plans a model as `snc compile` would, picks one step of a
 * kind, runs that step's emitter alone (as emit.c's step loop does) and
 * compares the text with what the plan says it must be, the pointers written
 * out here from the instances' offsets:
 *   - emit.c: pointers by dtype (F/I), float literals, comment-safe names,
 *     params declared once per key;
 *   - emit_ops.c: a forward conv, a ReLU forward and backward, the loss, an
 *     SGD update (one op of each phase);
 *   - emit_seq.c: an elementwise math op (Sqrt) and an embedding Gather
 *     (gpt_bytes);
 *   - emit_convert.c: a bf16 conv step on float32 working copies; an fp32
 *     step prints nothing there;
 *   - emit_dist.c: a bucket's all-reduce start and its wait (--dist);
 *   - emit_profile.c: the --profile step table and the model's fields.
 *
 *   build/tests/test_emit [examples/fashion_cnn.onnx examples/gpt_bytes.onnx]
 *     -> "test_emit: ok", exit 0 */
#include "../../compiler/emit/emit_internal.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

/* Planned as `snc compile MODEL --batch B --policy liveness` with o's
 * training options (no workspace pass: the CPU target). */
static Plan *plan_model(const char *model, int batch, TrainOpts o, Graph **gp) {
  err_file = model;
  Graph *g = onnx_import(model, NULL);
  shape_infer(g, batch);
  train_build(g, &o);
  precision_assign(g, &o);
  PlanOpts po = {.policy = POL_LIVENESS, .device = "h200"};
  Route *r = route_build(g);
  Plan *pl = plan_build(g, r, &po);
  route_free(r);
  *gp = g;
  return pl;
}

static TrainOpts sgd(void) {
  return (TrainOpts){.loss = LOSS_SOFTMAX_CE, .optim = OPTIM_SGD, .lr = 0.01f, .momentum = 0.9f,
                     .convert_chunk = -1};
}

/* The first step of kind k (SK_* ; -1: any) whose node runs op. */
static int find_step(const Graph *g, const Plan *pl, int k, OpKind op) {
  for (int s = 0; s < pl->route->ns; s++) {
    const Step *st = &pl->route->s[s];
    if (st->node >= 0 && g->n[st->node].op == op && (k < 0 || (int)st->kind == k)) return s;
  }
  return -1;
}

/* What emit.c's step loop prints for step s (less its comment, reads and
 * waits): the declarations, then the calls. */
typedef struct Text { char *decl, *body; } Text;

static Text step_text(const Graph *g, const Plan *pl, int s) {
  static int *table;
  table = xrealloc(table, sizeof(int) * (size_t)g->nt);
  for (int t = 0; t < g->nt; t++) table[t] = t;   /* the model table: IR indices here */
  Emit e = {.g = g, .pl = pl, .table = table, .ws_per_step = pl->ws_cap > 0};
  Text tx = {0};
  size_t dn, bn;
  e.decl = open_memstream(&tx.decl, &dn);
  e.f = open_memstream(&tx.body, &bn);
  e.st = &pl->route->s[s];
  e.step = s;
  const Node *n = &g->n[e.st->node];
  if (!emit_convert_step(&e, n)) op_info[n->op].emit(&e, g, n);
  fclose(e.decl);
  fclose(e.f);
  return tx;
}

/* "F(0x...)" of a step's input k / output k, from the plan. */
static const char *ptr(const Plan *pl, int inst, const char *kind) {
  return xasprintf("%s(0x%llx)", kind, (unsigned long long)pl->inst[inst].offset);
}
static const char *in_f(const Plan *pl, int s, int k) { return ptr(pl, pl->route->s[s].in[k], "F"); }
static const char *out_f(const Plan *pl, int s, int k) { return ptr(pl, pl->route->s[s].out[k], "F"); }

/* ---- emit.c ---- */

static void test_emit_c(const Graph *g, const Plan *pl) {
  Emit e = {.g = g, .pl = pl};
  int in = pl->tensor_inst[g->input], lab = pl->tensor_inst[g->label];
  CHECK(in >= 0 && lab >= 0);
  CHECK(!strcmp(emit_ptr(&e, in, g->input), ptr(pl, in, "F")));
  CHECK(!strcmp(emit_ptr(&e, lab, g->label), ptr(pl, lab, "I")));   /* int32 labels */
  CHECK(!strcmp(emit_ptr(&e, -1, g->input), "NULL"));
  CHECK(!strcmp(emit_float(1.0f), "1.f"));
  CHECK(!strcmp(emit_float(0.5f), "0.5f"));
  CHECK(!strcmp(emit_float(0.1f), "0.100000001f"));   /* round-trips */
  CHECK(!strcmp(emit_float(-1e30f), "-1.00000002e+30f"));
  CHECK(!strcmp(emit_float(1.0f / 0.0f), "INFINITY"));
  CHECK(!strcmp(emit_float(0.0f / 0.0f), "NAN"));
  CHECK(!strstr(emit_comment_safe("a*/b/*c\n"), "*/"));
  CHECK(!strchr(emit_comment_safe("a\nb"), '\n'));
  /* params: one declaration per key, the same name when asked again */
  char *decl = NULL;
  size_t n;
  e.decl = open_memstream(&decl, &n);
  int k1, k2;
  const char *a = emit_params(&e, &k1, "snrt_unary_t", ".n = 4");
  const char *b = emit_params(&e, &k2, "snrt_unary_t", ".n = 8");
  const char *c = emit_params(&e, &k1, "snrt_unary_t", ".n = 4");
  fclose(e.decl);
  CHECK(!strcmp(a, "&P0") && !strcmp(b, "&P1") && a == c);
  CHECK(!strcmp(decl, "static const snrt_unary_t P0 = {.n = 4};\n"
                      "static const snrt_unary_t P1 = {.n = 8};\n"));
  CHECK(emit_params_find(&e, &k2) == b);
  free(decl);
}

/* The step of that kind and op (a failed check when there is none). */
static int step_of(const Graph *g, const Plan *pl, int k, OpKind op) {
  int s = find_step(g, pl, k, op);
  if (s < 0) fprintf(stderr, "no %s step of op %s\n", k < 0 ? "any" : step_kind_name(k), op_name(op));
  CHECK(s >= 0);
  return s;
}

/* Step s prints exactly `call`, with `decl` among its declarations. */
static void expect_step(const Graph *g, const Plan *pl, int s, const char *decl, const char *call) {
  Text t = step_text(g, pl, s);
  CONTAINS(t.decl, decl);
  if (strcmp(t.body, call)) {
    fprintf(stderr, "step %d: want\n%sgot\n%s", s, call, t.body);
    failures++;
  }
}

/* ---- emit_ops.c ---- */

static void test_emit_ops(const Graph *g, const Plan *pl) {
  /* conv forward: params, input, weight, bias, output, workspace */
  int s = step_of(g, pl, SK_FORWARD, OP_CONV);
  if (s >= 0) {
    const Step *st = &pl->route->s[s];
    const Instance *w = st->ws >= 0 ? &pl->inst[st->ws] : NULL;
    const char *ws = w && w->bytes > w->convert_bytes
                         ? xasprintf("F(0x%llx)", (unsigned long long)(w->offset + w->convert_bytes))
                         : "NULL";
    expect_step(g, pl, s, "static const snrt_conv_t P0 = {",
                xasprintf("  snrt_conv_fwd(c, &P0, %s, %s, %s, %s, %s);\n", in_f(pl, s, 0),
                          in_f(pl, s, 1), st->nin > 2 ? in_f(pl, s, 2) : "NULL", out_f(pl, s, 0), ws));
  }
  /* ReLU forward and its backward (from y: aux = 1) */
  s = step_of(g, pl, SK_FORWARD, OP_RELU);
  if (s >= 0)
    expect_step(g, pl, s, "static const snrt_unary_t P0 = {",
                xasprintf("  snrt_unary_fwd(c, &P0, %s, %s);\n", in_f(pl, s, 0), out_f(pl, s, 0)));
  s = step_of(g, pl, SK_BACKWARD, OP_UNARY_BWD);
  if (s >= 0) {
    bool y = g->n[pl->route->s[s].node].aux;
    expect_step(g, pl, s, "static const snrt_unary_t P0 = {",
                xasprintf("  snrt_unary_bwd(c, &P0, %s, %s, %s, %s);\n", y ? "NULL" : in_f(pl, s, 0),
                          y ? in_f(pl, s, 0) : "NULL", in_f(pl, s, 1), out_f(pl, s, 0)));
  }
  /* the loss: logits, labels (int32), the loss */
  s = step_of(g, pl, SK_LOSS, OP_SOFTMAX_CE);
  if (s >= 0)
    expect_step(g, pl, s, "static const snrt_loss_t P0 = {",
                xasprintf("  snrt_softmax_ce_fwd(c, &P0, %s, %s, %s);\n", in_f(pl, s, 0),
                          ptr(pl, pl->route->s[s].in[1], "I"), out_f(pl, s, 0)));
  /* an SGD update with momentum: param, gradient, momentum */
  s = step_of(g, pl, SK_UPDATE, OP_SGD);
  if (s >= 0)
    expect_step(g, pl, s,
                xasprintf(", .momentum = 0.899999976f, .weight_decay = 0.f, .dampening = 0.f, "
                          ".nesterov = 0, .param = %d};", g->n[pl->route->s[s].node].in[0]),
                xasprintf("  snrt_sgd(c, &P0, %s, %s, %s);\n", in_f(pl, s, 0), in_f(pl, s, 1),
                          in_f(pl, s, 2)));
}

/* ---- emit_seq.c ---- */

static void test_emit_seq(const Graph *g, const Plan *pl) {
  /* an elementwise math op (the exported LayerNorm's Sqrt) */
  int s = step_of(g, pl, SK_FORWARD, OP_SQRT);
  if (s >= 0)
    expect_step(g, pl, s, "static const snrt_math_t P0 = {",
                xasprintf("  snrt_math_fwd(c, &P0, %s, %s);\n", in_f(pl, s, 0), out_f(pl, s, 0)));
  /* the token embedding: table, token ids (int32), output */
  s = step_of(g, pl, SK_FORWARD, OP_GATHER);
  if (s >= 0) {
    const snrt_gather_t *p = g->n[pl->route->s[s].node].p;
    expect_step(g, pl, s, "static const snrt_gather_t P0 = {",
                xasprintf("  snrt_gather_fwd(c, &P0, %s, %s, %s);\n", in_f(pl, s, 0),
                          p->idx ? "NULL" : ptr(pl, pl->route->s[s].in[1], "I"), out_f(pl, s, 0)));
  }
}

/* ---- emit_convert.c ---- */

static void test_emit_convert(const Graph *g, const Plan *pl, const Graph *g32, const Plan *pl32) {
  /* bf16: the conv reads float32 copies s0.. of its 16-bit operands, loaded
   * from B(...) into its workspace, and its output is rounded back */
  int s = -1;   /* the first conv whose input is a bf16 activation */
  for (int q = 0; q < pl->route->ns && s < 0; q++) {
    const Step *st = &pl->route->s[q];
    if (st->kind == SK_FORWARD && st->node >= 0 && g->n[st->node].op == OP_CONV &&
        g->t[g->n[st->node].in[0]].dtype == DT_BFLOAT16)
      s = q;
  }
  CHECK(s >= 0);
  if (s >= 0) {
    const Step *st = &pl->route->s[s];
    Text t = step_text(g, pl, s);
    CHECK(g->t[g->n[st->node].out[0]].dtype == DT_BFLOAT16);
    CONTAINS(t.body, ptr(pl, st->in[0], "B"));
    CONTAINS(t.body, "snrt_bf16_load");
    CONTAINS(t.body, "snrt_bf16_store");
    CONTAINS(t.body, ptr(pl, st->out[0], "B"));
    CONTAINS(t.body, "snrt_conv_fwd(c, &P0, ");
    CONTAINS(t.body, "s0");
    CHECK(!strstr(t.body, xasprintf("snrt_conv_fwd(c, &P0, %s", in_f(pl, s, 0))));
  }
  /* fp32: nothing to convert, the op's own emitter prints the step */
  s = find_step(g32, pl32, SK_FORWARD, OP_CONV);
  if (s >= 0) {
    Emit e = {.g = g32, .pl = pl32, .st = &pl32->route->s[s], .step = s};
    char *buf = NULL;
    size_t n;
    e.f = e.decl = open_memstream(&buf, &n);
    CHECK(!emit_convert_step(&e, &g32->n[e.st->node]));
    fclose(e.f);
    CHECK(n == 0);
    free(buf);
  }
}

/* ---- emit_dist.c ---- */

static void test_emit_dist(const Graph *g, const Plan *pl) {
  int s = step_of(g, pl, -1, OP_ALLREDUCE);
  if (s >= 0) {
    const Node *n = &g->n[pl->route->s[s].node];
    Text t = step_text(g, pl, s);
    /* (offset, floats, root -1) per gradient of the bucket */
    char *want = xasprintf("static const int64_t comm%d[] = {", n->aux);
    for (int k = 0; k < n->nin; k++)
      want = xasprintf("%s%s0x%llx, %lld, -1", want, k ? ", " : "",
                       (unsigned long long)pl->inst[pl->route->s[s].in[k]].offset,
                       (long long)tensor_numel(&g->t[n->in[k]]));
    CONTAINS(t.decl, want);
    CHECK(!strcmp(t.body, xasprintf("  snrt_comm_start(c, %d, SNRT_COMM_ALLREDUCE, %d, comm%d);\n",
                                    n->aux, n->nin, n->aux)));
  }
  s = step_of(g, pl, -1, OP_COMM_WAIT);
  if (s >= 0) {
    Text t = step_text(g, pl, s);
    CHECK(!strcmp(t.body, xasprintf("  snrt_comm_wait(c, %d);\n", g->n[pl->route->s[s].node].aux)));
  }
}

/* ---- emit_profile.c ---- */

static void test_emit_profile(const Graph *g, const Plan *pl) {
  char *buf = NULL;
  size_t n;
  FILE *f = open_memstream(&buf, &n);
  emit_step_table(f, g, pl);
  fclose(f);
  CONTAINS(buf, "device h200) of each training step. */\nstatic const snrt_step_info step_info[] = {\n");
  int rows = 0;
  for (const char *p = buf; (p = strstr(p, "\n  {\"")); p++) rows++;
  CHECK_EQ(pl->route->train_steps, rows);
  int s = find_step(g, pl, SK_FORWARD, OP_CONV);
  if (s >= 0) CONTAINS(buf, "  {\"forward\", \"conv");
  free(buf);
  f = open_memstream(&buf, &n);
  emit_step_table_fields(f, pl);
  fclose(f);
  CONTAINS(buf, xasprintf("  .nsteps = %d,\n  .steps = step_info,\n", pl->route->train_steps));
  CONTAINS(buf, "  .est_device = \"h200\",\n");
  free(buf);
}

int main(int argc, char **argv) {
  const char *cnn = argc > 1 ? argv[1] : "examples/fashion_cnn.onnx";
  const char *gpt = argc > 2 ? argv[2] : "examples/gpt_bytes.onnx";
  Graph *g;
  Plan *pl = plan_model(cnn, 2, sgd(), &g);
  test_emit_c(g, pl);
  test_emit_ops(g, pl);
  test_emit_profile(g, pl);

  Graph *gb;
  TrainOpts bf = sgd();
  bf.precision = PREC_BF16;
  Plan *plb = plan_model(cnn, 2, bf, &gb);
  test_emit_convert(gb, plb, g, pl);

  Graph *gd;
  TrainOpts dist = sgd();
  dist.dist = true;
  dist.bucket_bytes = 1 << 20;
  Plan *pld = plan_model(cnn, 2, dist, &gd);
  test_emit_dist(gd, pld);

  Graph *gs;
  Plan *pls = plan_model(gpt, 1, sgd(), &gs);
  test_emit_seq(gs, pls);

  if (failures) {
    fprintf(stderr, "test_emit: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_emit: ok\n");
  return 0;
}
