/* test_shape.c — unit tests of shape inference (shape*.c) and FLOP counts on
 * small hand-built graphs. Expected values are computed by hand (window sizes
 * checked against PyTorch's pooling where noted). Error cases run in a child
 * process and must exit with code 2 (bad input), never crash.
 * Exit status: 0 if every check passed. */
#include "../../compiler/front/front.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures, checks;

#define ASSERT(want, got)                                                                   \
  do {                                                                                      \
    long long w_ = (long long)(want), g_ = (long long)(got);                                \
    checks++;                                                                               \
    if (w_ != g_) {                                                                         \
      failures++;                                                                           \
      fprintf(stderr, "%s:%d: %s: want %lld, got %lld\n", __FILE__, __LINE__, #got, w_, g_); \
    }                                                                                       \
  } while (0)

/* ---- graph building ---- */

static Graph *G;

static void new_graph(int opset) {
  G = graph_new("test.onnx");
  G->opset = opset;
}

/* A float tensor of the given kind and shape: tensor("x", TK_INPUT, 4, (dims)) */
static int tensor(const char *name, TensorKind kind, int rank, ...) {
  int t = graph_add_tensor(G, name, DT_FLOAT, kind);
  va_list ap;
  va_start(ap, rank);
  int64_t dims[MAX_RANK];
  for (int i = 0; i < rank; i++) dims[i] = va_arg(ap, long long);
  va_end(ap);
  tensor_set_shape(&G->t[t], rank, dims);
  if (kind == TK_INPUT) G->input = t;
  return t;
}

static int const_i64(const char *name, int n, ...) {
  int t = graph_add_tensor(G, name, DT_INT64, TK_CONST);
  int64_t *d = xcalloc((size_t)(n ? n : 1), sizeof *d), d0 = n;
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++) d[i] = va_arg(ap, long long);
  va_end(ap);
  tensor_set_shape(&G->t[t], 1, &d0);
  G->t[t].data = d;
  G->t[t].ndata = n;
  return t;
}

static int const_f32(const char *name, float v) {
  int t = graph_add_tensor(G, name, DT_FLOAT, TK_CONST);
  float *d = xmalloc(sizeof *d);
  *d = v;
  tensor_set_shape(&G->t[t], 0, NULL);
  G->t[t].data = d;
  G->t[t].ndata = 1;
  return t;
}

/* node(OP_X, "name", nin, in..., nout) — outputs are new activations named
 * name:0, name:1... Returns the node index. */
static int node(OpKind op, const char *name, int nin, ...) {
  int in[16], out[16];
  va_list ap;
  va_start(ap, nin);
  for (int i = 0; i < nin; i++) in[i] = va_arg(ap, int);
  int nout = va_arg(ap, int);
  va_end(ap);
  for (int i = 0; i < nout; i++) {
    char nm[64];
    snprintf(nm, sizeof nm, "%s:%d", name, i);
    out[i] = graph_add_tensor(G, nm, DT_UNDEF, TK_ACT);
  }
  int k = graph_add_node(G, op, name, nin, in, nout, out);
  for (int i = 0; i < nout; i++) G->t[out[i]].producer = k;
  return k;
}

static Attr *add_attr(int k, const char *name, int type) {
  Node *n = &G->n[k];
  n->attrs = xrealloc(n->attrs, sizeof(Attr) * (size_t)(n->nattr + 1));
  Attr *a = &n->attrs[n->nattr++];
  *a = (Attr){.name = xstrdup(name), .type = type, .tensor = -1};
  return a;
}
static void attr_i(int k, const char *name, int64_t v) { add_attr(k, name, AT_INT)->i = v; }
static void attr_f(int k, const char *name, float v) { add_attr(k, name, AT_FLOAT)->f = v; }
static void attr_s(int k, const char *name, const char *v) { add_attr(k, name, AT_STRING)->s = xstrdup(v); }
static void attr_is(int k, const char *name, int n, ...) {
  Attr *a = add_attr(k, name, AT_INTS);
  a->n = n;
  a->ints = xcalloc((size_t)(n ? n : 1), sizeof(int64_t));
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++) a->ints[i] = va_arg(ap, long long);
  va_end(ap);
}

static const Tensor *out(int k, int i) { return &G->t[G->n[k].out[i]]; }

#define ASSERT_SHAPE(k, i, r_, ...)                                       \
  do {                                                                    \
    long long want_[] = {__VA_ARGS__};                                    \
    const Tensor *t_ = out(k, i);                                         \
    ASSERT(r_, t_->rank);                                                 \
    for (int d_ = 0; d_ < (r_) && d_ < t_->rank; d_++) ASSERT(want_[d_], t_->dims[d_]); \
  } while (0)

/* Runs shape_infer on the current graph in a child; must exit 2. */
#define ASSERT_BAD(batch)                                                 \
  do {                                                                    \
    fflush(NULL);                                                         \
    pid_t pid_ = fork();                                                  \
    if (pid_ == 0) {                                                      \
      if (!getenv("SHOW_ERRORS")) freopen("/dev/null", "w", stderr);      \
      shape_infer(G, batch);                                              \
      _exit(0);                                                           \
    }                                                                     \
    int st_;                                                              \
    waitpid(pid_, &st_, 0);                                               \
    ASSERT(2, WIFEXITED(st_) ? WEXITSTATUS(st_) : 100 + WTERMSIG(st_));   \
  } while (0)

/* ---- tests ---- */

static void test_conv(void) {
  new_graph(13);
  int x = tensor("x", TK_INPUT, 4, -1LL, 3LL, 7LL, 7LL);
  int w = tensor("w", TK_PARAM, 4, 8LL, 3LL, 3LL, 3LL);
  int b = tensor("b", TK_PARAM, 1, 8LL);
  int c = node(OP_CONV, "conv", 3, x, w, b, 1);
  attr_is(c, "strides", 2, 2LL, 2LL);
  attr_is(c, "pads", 4, 1LL, 1LL, 1LL, 1LL);
  ASSERT_BAD(0);  /* symbolic batch without --batch */
  shape_infer(G, 2);
  ASSERT(2, G->batch);
  ASSERT_SHAPE(c, 0, 4, 2, 8, 4, 4);    /* floor((7+2-3)/2)+1 = 4 */
  const snrt_conv_t *p = G->n[c].p;
  ASSERT(1, p->pt);
  ASSERT(1, p->pl);
  ASSERT(2, p->ws_images);              /* 16 MiB / (27*16*4) > 2 images: clamp to n */
  ASSERT(2 * 27 * 16 * 4, p->ws_bytes);
  ASSERT(2LL * 2 * 8 * 4 * 4 * 3 * 3 * 3, graph_forward_flops(G));

  /* asymmetric pads: top 0, left 1, bottom 2, right 0 */
  new_graph(13);
  x = tensor("x", TK_INPUT, 4, 1LL, 1LL, 5LL, 6LL);
  w = tensor("w", TK_PARAM, 4, 1LL, 1LL, 3LL, 3LL);
  c = node(OP_CONV, "conv", 2, x, w, 1);
  attr_is(c, "pads", 4, 0LL, 1LL, 2LL, 0LL);
  shape_infer(G, 0);
  ASSERT_SHAPE(c, 0, 4, 1, 1, 5, 5);
  p = G->n[c].p;
  ASSERT(0, p->pt);
  ASSERT(1, p->pl);

  /* dilations: effective kernels 5 and 7 */
  new_graph(13);
  x = tensor("x", TK_INPUT, 4, 1LL, 1LL, 10LL, 10LL);
  w = tensor("w", TK_PARAM, 4, 1LL, 1LL, 3LL, 3LL);
  c = node(OP_CONV, "conv", 2, x, w, 1);
  attr_is(c, "dilations", 2, 2LL, 3LL);
  attr_is(c, "kernel_shape", 2, 3LL, 3LL);
  shape_infer(G, 0);
  ASSERT_SHAPE(c, 0, 4, 1, 1, 6, 4);

  /* depthwise */
  new_graph(13);
  x = tensor("x", TK_INPUT, 4, 1LL, 32LL, 8LL, 8LL);
  w = tensor("w", TK_PARAM, 4, 64LL, 1LL, 3LL, 3LL);
  c = node(OP_CONV, "dw", 2, x, w, 1);
  attr_i(c, "group", 32);
  attr_is(c, "pads", 4, 1LL, 1LL, 1LL, 1LL);
  shape_infer(G, 0);
  ASSERT_SHAPE(c, 0, 4, 1, 64, 8, 8);
  ASSERT(2LL * 64 * 64 * 1 * 9, flops_conv(G, &G->n[c]));
  /* wrong channels per group */
  new_graph(13);
  x = tensor("x", TK_INPUT, 4, 1LL, 32LL, 8LL, 8LL);
  w = tensor("w", TK_PARAM, 4, 32LL, 2LL, 3LL, 3LL);
  c = node(OP_CONV, "dw", 2, x, w, 1);
  attr_i(c, "group", 32);
  ASSERT_BAD(0);
  /* kernel larger than the input; 3-D conv */
  new_graph(13);
  x = tensor("x", TK_INPUT, 4, 1LL, 1LL, 2LL, 2LL);
  w = tensor("w", TK_PARAM, 4, 1LL, 1LL, 3LL, 3LL);
  node(OP_CONV, "big", 2, x, w, 1);
  ASSERT_BAD(0);
  new_graph(13);
  x = tensor("x", TK_INPUT, 5, 1LL, 1LL, 4LL, 4LL, 4LL);
  w = tensor("w", TK_PARAM, 5, 1LL, 1LL, 3LL, 3LL, 3LL);
  node(OP_CONV, "c3d", 2, x, w, 1);
  ASSERT_BAD(0);

  /* auto_pad SAME_UPPER / SAME_LOWER: in 7, k 4, s 2 -> out 4, total pad 3 */
  for (int lower = 0; lower < 2; lower++) {
    new_graph(13);
    x = tensor("x", TK_INPUT, 4, 1LL, 1LL, 7LL, 7LL);
    w = tensor("w", TK_PARAM, 4, 1LL, 1LL, 4LL, 4LL);
    c = node(OP_CONV, "same", 2, x, w, 1);
    attr_is(c, "strides", 2, 2LL, 2LL);
    attr_s(c, "auto_pad", lower ? "SAME_LOWER" : "SAME_UPPER");
    shape_infer(G, 0);
    ASSERT_SHAPE(c, 0, 4, 1, 1, 4, 4);
    p = G->n[c].p;
    ASSERT(lower ? 2 : 1, p->pt);
    ASSERT(lower ? 2 : 1, p->pl);
  }
  /* VALID ignores pads */
  new_graph(13);
  x = tensor("x", TK_INPUT, 4, 1LL, 1LL, 7LL, 7LL);
  w = tensor("w", TK_PARAM, 4, 1LL, 1LL, 3LL, 3LL);
  c = node(OP_CONV, "valid", 2, x, w, 1);
  attr_s(c, "auto_pad", "VALID");
  attr_is(c, "strides", 2, 2LL, 2LL);
  shape_infer(G, 0);
  ASSERT_SHAPE(c, 0, 4, 1, 1, 3, 3);
}

/* Pooling windows; the ceil_mode cases are the sizes PyTorch's max_pool2d
 * gives (5/k2/s2/p1 -> 3: the 4th window would start in the right padding). */
static void pool_case(OpKind op, int64_t in, int64_t k, int64_t s, int64_t pad, int64_t dil,
                      int ceil_mode, int64_t want) {
  new_graph(13);
  int x = tensor("x", TK_INPUT, 4, 1LL, 2LL, (long long)in, (long long)in);
  int n = node(op, "pool", 1, x, 1);
  attr_is(n, "kernel_shape", 2, (long long)k, (long long)k);
  attr_is(n, "strides", 2, (long long)s, (long long)s);
  attr_is(n, "pads", 4, (long long)pad, (long long)pad, (long long)pad, (long long)pad);
  if (dil != 1) attr_is(n, "dilations", 2, (long long)dil, (long long)dil);
  attr_i(n, "ceil_mode", ceil_mode);
  shape_infer(G, 0);
  ASSERT_SHAPE(n, 0, 4, 1, 2, want, want);
  const snrt_pool_t *p = G->n[n].p;
  ASSERT(pad, p->pt);
  ASSERT(pad, p->pb);
  ASSERT(want, p->oh);
}

static void test_pool(void) {
  pool_case(OP_MAXPOOL, 5, 2, 2, 1, 1, 1, 3);
  pool_case(OP_MAXPOOL, 5, 2, 2, 1, 1, 0, 3);
  pool_case(OP_MAXPOOL, 4, 3, 2, 1, 1, 1, 3);
  pool_case(OP_MAXPOOL, 6, 3, 2, 0, 1, 1, 3);
  pool_case(OP_MAXPOOL, 6, 3, 2, 0, 1, 0, 2);
  pool_case(OP_MAXPOOL, 7, 3, 2, 1, 1, 1, 4);
  pool_case(OP_MAXPOOL, 10, 3, 3, 1, 2, 1, 4);
  pool_case(OP_AVGPOOL, 5, 2, 2, 1, 1, 1, 3);
  pool_case(OP_AVGPOOL, 112, 3, 2, 1, 1, 0, 56);
  /* 56 -> 28 with ceil, as torchvision googlenet's maxpools */
  pool_case(OP_MAXPOOL, 56, 3, 2, 0, 1, 1, 28);
  pool_case(OP_MAXPOOL, 14, 2, 2, 0, 1, 1, 7);

  new_graph(13);
  int x = tensor("x", TK_INPUT, 4, 2LL, 3LL, 5LL, 7LL);
  int n = node(OP_GLOBALAVGPOOL, "gap", 1, x, 1);
  shape_infer(G, 0);
  ASSERT_SHAPE(n, 0, 4, 2, 3, 1, 1);
  const snrt_pool_t *p = G->n[n].p;
  ASSERT(5, p->kh);
  ASSERT(7, p->kw);
  ASSERT(2 * 3 * 5 * 7, flops_pool(G, &G->n[n]));

  /* storage_order 1, missing kernel_shape */
  new_graph(13);
  x = tensor("x", TK_INPUT, 4, 1LL, 1LL, 4LL, 4LL);
  n = node(OP_MAXPOOL, "mp", 1, x, 1);
  attr_is(n, "kernel_shape", 2, 2LL, 2LL);
  attr_i(n, "storage_order", 1);
  ASSERT_BAD(0);
  new_graph(13);
  x = tensor("x", TK_INPUT, 4, 1LL, 1LL, 4LL, 4LL);
  node(OP_AVGPOOL, "ap", 1, x, 1);
  ASSERT_BAD(0);
}

static void test_bn_unary(void) {
  new_graph(13);
  int x = tensor("x", TK_INPUT, 4, 2LL, 3LL, 4LL, 5LL);
  int s = tensor("s", TK_PARAM, 1, 3LL), b = tensor("b", TK_PARAM, 1, 3LL);
  int m = tensor("m", TK_STATE, 1, 3LL), v = tensor("v", TK_STATE, 1, 3LL);
  int bn = node(OP_BATCHNORM, "bn", 5, x, s, b, m, v, 5);
  attr_f(bn, "momentum", 0.9f);
  int r = node(OP_RELU, "relu", 1, G->n[bn].out[0], 1);
  int lr = node(OP_LEAKYRELU, "lrelu", 1, G->n[r].out[0], 1);
  attr_f(lr, "alpha", 0.2f);
  int lo = const_f32("lo", 0.0f), hi = const_f32("hi", 6.0f);
  int cl = node(OP_CLIP, "clip", 3, G->n[lr].out[0], lo, hi, 1);
  int d1 = node(OP_DROPOUT, "d1", 1, G->n[cl].out[0], 2);
  int ratio = const_f32("ratio", 0.3f);
  int d2 = node(OP_DROPOUT, "d2", 2, G->n[d1].out[0], ratio, 1);
  shape_infer(G, 0);
  ASSERT_SHAPE(bn, 0, 4, 2, 3, 4, 5);
  for (int i = 1; i < 5; i++) ASSERT_SHAPE(bn, i, 1, 3);
  const snrt_bn_t *pb = G->n[bn].p;
  ASSERT(20, pb->hw);
  ASSERT(3, pb->c);
  ASSERT(SNRT_RELU, ((snrt_unary_t *)G->n[r].p)->kind);
  ASSERT(120, ((snrt_unary_t *)G->n[r].p)->n);
  ASSERT(200, (int)(((snrt_unary_t *)G->n[lr].p)->alpha * 1000 + 0.5f));
  ASSERT(0, ((snrt_unary_t *)G->n[cl].p)->lo);
  ASSERT(6, ((snrt_unary_t *)G->n[cl].p)->hi);
  ASSERT(0, ((snrt_dropout_t *)G->n[d1].p)->id);
  ASSERT(1, ((snrt_dropout_t *)G->n[d2].p)->id);
  ASSERT(500, (int)(((snrt_dropout_t *)G->n[d1].p)->ratio * 1000 + 0.5f));
  ASSERT(300, (int)(((snrt_dropout_t *)G->n[d2].p)->ratio * 1000 + 0.5f));
  ASSERT(DT_BOOL, out(d1, 1)->dtype);
  ASSERT_SHAPE(d2, 0, 4, 2, 3, 4, 5);

  /* Clip with attributes (opset 6) */
  new_graph(6);
  x = tensor("x", TK_INPUT, 2, 2LL, 3LL);
  cl = node(OP_CLIP, "clip", 1, x, 1);
  attr_f(cl, "min", -1.0f);
  attr_f(cl, "max", 2.0f);
  shape_infer(G, 0);
  ASSERT(-1, ((snrt_unary_t *)G->n[cl].p)->lo);
  ASSERT(2, ((snrt_unary_t *)G->n[cl].p)->hi);

  /* BN parameter of the wrong length */
  new_graph(13);
  x = tensor("x", TK_INPUT, 4, 2LL, 3LL, 4LL, 5LL);
  s = tensor("s", TK_PARAM, 1, 4LL), b = tensor("b", TK_PARAM, 1, 3LL);
  m = tensor("m", TK_STATE, 1, 3LL), v = tensor("v", TK_STATE, 1, 3LL);
  node(OP_BATCHNORM, "bn", 5, x, s, b, m, v, 1);
  ASSERT_BAD(0);
}

static void test_binary(void) {
  /* both-sided broadcasting: (2,1,4) + (3,1) -> (2,3,4) */
  new_graph(13);
  int a = tensor("a", TK_INPUT, 3, 2LL, 1LL, 4LL), b = tensor("b", TK_PARAM, 2, 3LL, 1LL);
  int n = node(OP_ADD, "add", 2, a, b, 1);
  shape_infer(G, 0);
  ASSERT_SHAPE(n, 0, 3, 2, 3, 4);
  const snrt_binary_t *p = G->n[n].p;
  ASSERT(24, p->n);
  ASSERT(4, p->sa[0]); ASSERT(0, p->sa[1]); ASSERT(1, p->sa[2]);
  ASSERT(0, p->sb[0]); ASSERT(1, p->sb[1]); ASSERT(0, p->sb[2]);
  ASSERT(8, p->na); ASSERT(3, p->nb);
  ASSERT(SNRT_ADD, p->kind);
  /* scalar operand, and Div's kind */
  new_graph(13);
  a = tensor("a", TK_INPUT, 2, 2LL, 3LL);
  b = const_f32("two", 2.0f);
  n = node(OP_DIV, "div", 2, a, b, 1);
  shape_infer(G, 0);
  ASSERT_SHAPE(n, 0, 2, 2, 3);
  p = G->n[n].p;
  ASSERT(SNRT_DIV, p->kind);
  ASSERT(3, p->sa[0]); ASSERT(1, p->sa[1]);
  ASSERT(0, p->sb[0]); ASSERT(0, p->sb[1]);
  /* lower-rank operand with the larger dims: (5,) * (2,1,1) */
  new_graph(13);
  a = tensor("a", TK_INPUT, 1, 5LL);
  b = tensor("b", TK_PARAM, 3, 2LL, 1LL, 1LL);
  n = node(OP_MUL, "mul", 2, a, b, 1);
  shape_infer(G, 0);
  ASSERT_SHAPE(n, 0, 3, 2, 1, 5);
  /* incompatible */
  new_graph(13);
  a = tensor("a", TK_INPUT, 2, 2LL, 3LL);
  b = tensor("b", TK_PARAM, 2, 4LL, 3LL);
  node(OP_SUB, "sub", 2, a, b, 1);
  ASSERT_BAD(0);
}

static void test_slice(void) {
  new_graph(13);
  int x = tensor("x", TK_INPUT, 2, 4LL, 10LL);
  /* reverse the whole axis: start -1, end INT64_MIN, step -1 */
  int s1 = node(OP_SLICE, "rev", 5, x, const_i64("st1", 1, -1LL), const_i64("en1", 1, (long long)INT64_MIN),
                const_i64("ax1", 1, -1LL), const_i64("sp1", 1, -1LL), 1);
  /* 8, 5, 2 */
  int s2 = node(OP_SLICE, "neg3", 5, x, const_i64("st2", 1, 8LL), const_i64("en2", 1, 1LL),
                const_i64("ax2", 1, 1LL), const_i64("sp2", 1, -3LL), 1);
  /* end INT64_MAX clamps; start -100 clamps to 0 */
  int s3 = node(OP_SLICE, "clamp", 3, x, const_i64("st3", 2, -100LL, 2LL),
                const_i64("en3", 2, 3LL, (long long)INT64_MAX), 1);
  /* empty result: start past end with a positive step */
  int s4 = node(OP_SLICE, "empty", 4, x, const_i64("st4", 1, 7LL), const_i64("en4", 1, 3LL),
                const_i64("ax4", 1, 1LL), 1);
  /* step 2 on a negative axis */
  int s5 = node(OP_SLICE, "step2", 5, x, const_i64("st5", 1, 1LL), const_i64("en5", 1, 5LL),
                const_i64("ax5", 1, -1LL), const_i64("sp5", 1, 2LL), 1);
  shape_infer(G, 0);
  ASSERT_SHAPE(s1, 0, 2, 4, 10);
  const snrt_slice_t *p = G->n[s1].p;
  ASSERT(9, p->start[1]); ASSERT(-1, p->step[1]); ASSERT(0, p->start[0]); ASSERT(1, p->step[0]);
  ASSERT_SHAPE(s2, 0, 2, 4, 3);
  ASSERT(8, ((snrt_slice_t *)G->n[s2].p)->start[1]);
  ASSERT_SHAPE(s3, 0, 2, 3, 8);
  ASSERT(0, ((snrt_slice_t *)G->n[s3].p)->start[0]);
  ASSERT(2, ((snrt_slice_t *)G->n[s3].p)->start[1]);
  ASSERT(24, ((snrt_slice_t *)G->n[s3].p)->n_out);
  ASSERT_SHAPE(s4, 0, 2, 4, 0);
  ASSERT_SHAPE(s5, 0, 2, 4, 2);
  /* step 0 */
  new_graph(13);
  x = tensor("x", TK_INPUT, 1, 10LL);
  node(OP_SLICE, "bad", 5, x, const_i64("a", 1, 0LL), const_i64("b", 1, 5LL), const_i64("c", 1, 0LL),
       const_i64("d", 1, 0LL), 1);
  ASSERT_BAD(0);
}

static void test_reshape_like(void) {
  new_graph(13);
  int x = tensor("x", TK_INPUT, 3, 2LL, 3LL, 4LL);
  int r1 = node(OP_RESHAPE, "r1", 2, x, const_i64("s1", 2, 0LL, -1LL), 1);
  int r2 = node(OP_RESHAPE, "r2", 2, x, const_i64("s2", 3, 4LL, 0LL, -1LL), 1);
  int f1 = node(OP_FLATTEN, "f1", 1, x, 1);
  attr_i(f1, "axis", -1);
  int f2 = node(OP_FLATTEN, "f2", 1, x, 1);
  attr_i(f2, "axis", 0);
  int f3 = node(OP_FLATTEN, "f3", 1, x, 1);   /* default axis 1 */
  int t1 = node(OP_TRANSPOSE, "t1", 1, x, 1);
  int t2 = node(OP_TRANSPOSE, "t2", 1, x, 1);
  attr_is(t2, "perm", 3, 0LL, 2LL, 1LL);
  int id = node(OP_IDENTITY, "id", 1, x, 1);
  shape_infer(G, 0);
  ASSERT_SHAPE(r1, 0, 2, 2, 12);
  ASSERT_SHAPE(r2, 0, 3, 4, 3, 2);
  ASSERT_SHAPE(f1, 0, 2, 6, 4);
  ASSERT_SHAPE(f2, 0, 2, 1, 24);
  ASSERT_SHAPE(f3, 0, 2, 2, 12);
  ASSERT_SHAPE(t1, 0, 3, 4, 3, 2);
  ASSERT(2, ((snrt_transpose_t *)G->n[t1].p)->perm[0]);
  ASSERT_SHAPE(t2, 0, 3, 2, 4, 3);
  ASSERT_SHAPE(id, 0, 3, 2, 3, 4);
  ASSERT(0, graph_forward_flops(G));
  /* two -1s; element count mismatch; bad perm */
  new_graph(13);
  x = tensor("x", TK_INPUT, 3, 2LL, 3LL, 4LL);
  node(OP_RESHAPE, "r", 2, x, const_i64("s", 2, -1LL, -1LL), 1);
  ASSERT_BAD(0);
  new_graph(13);
  x = tensor("x", TK_INPUT, 3, 2LL, 3LL, 4LL);
  node(OP_RESHAPE, "r", 2, x, const_i64("s", 2, 5LL, 5LL), 1);
  ASSERT_BAD(0);
  new_graph(13);
  x = tensor("x", TK_INPUT, 3, 2LL, 3LL, 4LL);
  int t = node(OP_TRANSPOSE, "t", 1, x, 1);
  attr_is(t, "perm", 3, 0LL, 0LL, 1LL);
  ASSERT_BAD(0);
}

static void test_concat_split_pad(void) {
  new_graph(13);
  int a = tensor("a", TK_INPUT, 2, 2LL, 3LL), b = tensor("b", TK_PARAM, 2, 2LL, 5LL);
  int c = node(OP_CONCAT, "cat", 2, a, b, 1);
  attr_i(c, "axis", -1);
  int s = node(OP_SPLIT, "split", 1, G->n[c].out[0], 2);
  attr_i(s, "axis", 1);
  int s2 = node(OP_SPLIT, "split2", 2, G->n[c].out[0], const_i64("sz", 2, 1LL, 7LL), 2);
  attr_i(s2, "axis", -1);
  shape_infer(G, 0);
  ASSERT_SHAPE(c, 0, 2, 2, 8);
  const snrt_concat_t *p = G->n[c].p;
  ASSERT(2, p->outer); ASSERT(3, p->chunk[0]); ASSERT(5, p->chunk[1]);
  ASSERT_SHAPE(s, 0, 2, 2, 4);
  ASSERT_SHAPE(s, 1, 2, 2, 4);
  ASSERT_SHAPE(s2, 0, 2, 2, 1);
  ASSERT_SHAPE(s2, 1, 2, 2, 7);
  ASSERT(7, ((snrt_concat_t *)G->n[s2].p)->chunk[1]);
  /* split attribute (opset 11) */
  new_graph(11);
  a = tensor("a", TK_INPUT, 2, 6LL, 4LL);
  s = node(OP_SPLIT, "split", 1, a, 3);
  attr_is(s, "split", 3, 1LL, 2LL, 3LL);
  shape_infer(G, 0);
  ASSERT_SHAPE(s, 2, 2, 3, 4);
  ASSERT(12, ((snrt_concat_t *)G->n[s].p)->chunk[2]);
  /* concat mismatch; uneven equal split */
  new_graph(13);
  a = tensor("a", TK_INPUT, 2, 2LL, 3LL);
  b = tensor("b", TK_PARAM, 2, 3LL, 5LL);
  c = node(OP_CONCAT, "cat", 2, a, b, 1);
  attr_i(c, "axis", 1);
  ASSERT_BAD(0);
  new_graph(13);
  a = tensor("a", TK_INPUT, 2, 5LL, 3LL);
  node(OP_SPLIT, "split", 1, a, 2);
  ASSERT_BAD(0);

  /* Pad: pads input (opset 11+), and the attribute form (opset 2) */
  new_graph(13);
  a = tensor("a", TK_INPUT, 4, 1LL, 2LL, 3LL, 3LL);
  int pd = node(OP_PAD, "pad", 3, a, const_i64("pads", 8, 0LL, 0LL, 1LL, 2LL, 0LL, 0LL, 3LL, 4LL),
                const_f32("val", 1.5f), 1);
  shape_infer(G, 0);
  ASSERT_SHAPE(pd, 0, 4, 1, 2, 7, 9);
  const snrt_pad_t *pp = G->n[pd].p;
  ASSERT(1, pp->before[2]); ASSERT(2, pp->before[3]);
  ASSERT(15, (int)(pp->value * 10));
  new_graph(2);
  a = tensor("a", TK_INPUT, 2, 3LL, 3LL);
  pd = node(OP_PAD, "pad", 1, a, 1);
  attr_is(pd, "pads", 4, 1LL, 0LL, -1LL, 2LL);
  shape_infer(G, 0);
  ASSERT_SHAPE(pd, 0, 2, 3, 5);
  new_graph(13);
  a = tensor("a", TK_INPUT, 2, 3LL, 3LL);
  pd = node(OP_PAD, "pad", 2, a, const_i64("pads", 4, 1LL, 1LL, 1LL, 1LL), 1);
  attr_s(pd, "mode", "reflect");
  shape_infer(G, 0);
  ASSERT_SHAPE(pd, 0, 2, 5, 5);
  ASSERT(SNRT_PAD_REFLECT, ((const snrt_pad_t *)G->n[pd].p)->mode);
  new_graph(13);
  a = tensor("a", TK_INPUT, 2, 3LL, 3LL);
  pd = node(OP_PAD, "pad", 2, a, const_i64("pads", 4, 1LL, 1LL, 1LL, 1LL), 1);
  attr_s(pd, "mode", "wrap");
  ASSERT_BAD(0);
  new_graph(13);   /* reflect wider than the kernels' bound */
  a = tensor("a", TK_INPUT, 2, 3LL, 3LL);
  pd = node(OP_PAD, "pad", 2, a, const_i64("pads", 4, 0LL, 40LL, 0LL, 0LL), 1);
  attr_s(pd, "mode", "reflect");
  ASSERT_BAD(0);
}

static void test_softmax_reduce(void) {
  for (int opset = 11; opset <= 13; opset += 2) {
    new_graph(opset);
    int x = tensor("x", TK_INPUT, 3, 2LL, 3LL, 4LL);
    int s0 = node(OP_SOFTMAX, "sm_default", 1, x, 1);
    int s1 = node(OP_SOFTMAX, "sm_axis1", 1, x, 1);
    attr_i(s1, "axis", 1);
    int s2 = node(OP_SOFTMAX, "sm_neg", 1, x, 1);
    attr_i(s2, "axis", -2);
    shape_infer(G, 0);
    const snrt_softmax_t *p0 = G->n[s0].p, *p1 = G->n[s1].p, *p2 = G->n[s2].p;
    if (opset == 11) {   /* coerced to 2-D at axis (default 1) */
      ASSERT(2, p0->outer); ASSERT(12, p0->len); ASSERT(1, p0->inner);
      ASSERT(2, p1->outer); ASSERT(12, p1->len); ASSERT(1, p1->inner);
      ASSERT(2, p2->outer); ASSERT(12, p2->len); ASSERT(1, p2->inner);
    } else {             /* one axis (default -1) */
      ASSERT(6, p0->outer); ASSERT(4, p0->len); ASSERT(1, p0->inner);
      ASSERT(2, p1->outer); ASSERT(3, p1->len); ASSERT(4, p1->inner);
      ASSERT(2, p2->outer); ASSERT(3, p2->len); ASSERT(4, p2->inner);
    }
    ASSERT_SHAPE(s0, 0, 3, 2, 3, 4);
  }
  new_graph(13);
  int x = tensor("x", TK_INPUT, 3, 2LL, 3LL, 4LL);
  int r1 = node(OP_REDUCEMEAN, "rm1", 1, x, 1);
  attr_is(r1, "axes", 1, -1LL);
  int r2 = node(OP_REDUCEMEAN, "rm2", 1, x, 1);
  attr_is(r2, "axes", 1, 1LL);
  attr_i(r2, "keepdims", 0);
  int r3 = node(OP_REDUCEMEAN, "rm3", 1, x, 1);
  attr_i(r3, "keepdims", 0);
  shape_infer(G, 0);
  ASSERT_SHAPE(r1, 0, 3, 2, 3, 1);
  ASSERT_SHAPE(r2, 0, 2, 2, 4);
  ASSERT(0, out(r3, 0)->rank);
  const snrt_reduce_t *p = G->n[r2].p;
  ASSERT(0, p->ss[1]); ASSERT(4, p->ss[0]); ASSERT(1, p->ss[2]);
  ASSERT(333, (int)(p->scale * 1000));
  ASSERT(8, p->n_small);
  /* axes as an input (opset 18) */
  new_graph(18);
  x = tensor("x", TK_INPUT, 3, 2LL, 3LL, 4LL);
  r1 = node(OP_REDUCEMEAN, "rm", 2, x, const_i64("axes", 2, 0LL, 2LL), 1);
  shape_infer(G, 0);
  ASSERT_SHAPE(r1, 0, 3, 1, 3, 1);
}

static void test_gemm_matmul(void) {
  new_graph(13);
  int a = tensor("a", TK_INPUT, 2, 4LL, 8LL);
  int w = tensor("w", TK_PARAM, 2, 16LL, 8LL);
  int row = tensor("row", TK_PARAM, 1, 16LL);
  int col = tensor("col", TK_PARAM, 2, 2LL, 1LL);
  int g1 = node(OP_GEMM, "g1", 3, a, w, row, 1);
  attr_i(g1, "transB", 1);
  attr_f(g1, "beta", 0.5f);
  int g2 = node(OP_GEMM, "g2", 3, a, w, col, 1);
  attr_i(g2, "transB", 1);
  int wt = tensor("wt", TK_PARAM, 2, 2LL, 3LL);
  int g3 = node(OP_GEMM, "g3", 2, a, wt, 1);   /* A^T (8,2) x (2,3) at batch 2 */
  attr_i(g3, "transA", 1);
  shape_infer(G, 2);
  ASSERT_SHAPE(g1, 0, 2, 2, 16);   /* batch 2 replaces a's leading 4 */
  const GemmParams *p = G->n[g1].p;
  ASSERT(SNRT_BIAS_ROW, p->bias.kind);
  ASSERT(500, (int)(p->bias.scale * 1000));
  ASSERT(1, p->has_c);
  ASSERT(2, p->mm.m); ASSERT(16, p->mm.n); ASSERT(8, p->mm.k); ASSERT(1, p->mm.trans_b);
  ASSERT(2LL * 2 * 16 * 8, flops_gemm(G, &G->n[g1]));
  ASSERT(SNRT_BIAS_COL, ((GemmParams *)G->n[g2].p)->bias.kind);
  ASSERT_SHAPE(g3, 0, 2, 8, 3);
  ASSERT(1, ((GemmParams *)G->n[g3].p)->mm.trans_a);
  ASSERT(0, ((GemmParams *)G->n[g3].p)->has_c);
  /* (4,1) C no longer fits M = 2 */
  new_graph(13);
  a = tensor("a", TK_INPUT, 2, 4LL, 8LL);
  w = tensor("w", TK_PARAM, 2, 8LL, 16LL);
  col = tensor("col", TK_PARAM, 2, 4LL, 1LL);
  g2 = node(OP_GEMM, "g2", 3, a, w, col, 1);
  shape_infer(G, 0);
  ASSERT(SNRT_BIAS_COL, ((GemmParams *)G->n[g2].p)->bias.kind);
  ASSERT_BAD(2);
  /* inner mismatch */
  new_graph(13);
  a = tensor("a", TK_INPUT, 2, 4LL, 8LL);
  w = tensor("w", TK_PARAM, 2, 7LL, 16LL);
  node(OP_GEMM, "g", 2, a, w, 1);
  ASSERT_BAD(0);

  new_graph(13);
  a = tensor("a", TK_INPUT, 3, 5LL, 2LL, 3LL);
  int b1 = tensor("b1", TK_PARAM, 2, 3LL, 4LL);
  int b2 = tensor("b2", TK_PARAM, 3, 5LL, 3LL, 4LL);
  int b3 = tensor("b3", TK_PARAM, 4, 7LL, 1LL, 3LL, 4LL);
  int m1 = node(OP_MATMUL, "m1", 2, a, b1, 1);
  int m2 = node(OP_MATMUL, "m2", 2, a, b2, 1);
  int m3 = node(OP_MATMUL, "m3", 2, a, b3, 1);   /* (5,2,3) x (7,1,3,4): a's batch 5 vs 35 */
  G->nfwd = 2;                                   /* m3 checked separately below */
  shape_infer(G, 0);
  ASSERT_SHAPE(m1, 0, 3, 5, 2, 4);
  const snrt_mm_t *q = G->n[m1].p;
  ASSERT(5, q->batch); ASSERT(6, q->stride_a); ASSERT(0, q->stride_b); ASSERT(8, q->stride_y);
  ASSERT_SHAPE(m2, 0, 3, 5, 2, 4);
  ASSERT(12, ((snrt_mm_t *)G->n[m2].p)->stride_b);
  ASSERT(2 * 2LL * 5 * 2 * 4 * 3, graph_forward_flops(G));   /* m1 and m2 */
  /* (5,2,3) x (7,1,3,4): batch broadcast on both sides, an Einsum */
  G->nfwd = 3;
  shape_infer(G, 0);
  ASSERT(OP_EINSUM, G->n[m3].op);
  ASSERT_SHAPE(m3, 0, 4, 7, 5, 2, 4);
  /* 1-D operand: an Einsum too */
  new_graph(13);
  a = tensor("a", TK_INPUT, 2, 2LL, 3LL);
  b1 = tensor("b1", TK_PARAM, 1, 3LL);
  int mv = node(OP_MATMUL, "mv", 2, a, b1, 1);
  shape_infer(G, 0);
  ASSERT(OP_EINSUM, G->n[mv].op);
  ASSERT_SHAPE(mv, 0, 1, 2);
  new_graph(13);   /* inner dims differ */
  a = tensor("a", TK_INPUT, 2, 2LL, 3LL);
  b1 = tensor("b1", TK_PARAM, 1, 4LL);
  node(OP_MATMUL, "mv", 2, a, b1, 1);
  ASSERT_BAD(0);
}

static void test_lrn_constant(void) {
  new_graph(13);
  int x = tensor("x", TK_INPUT, 4, 1LL, 8LL, 3LL, 3LL);
  int l = node(OP_LRN, "lrn", 1, x, 1);
  attr_i(l, "size", 5);
  int c = node(OP_CONSTANT, "const", 0, 1);
  attr_is(c, "value_ints", 3, 1LL, 2LL, 3LL);   /* stored as an ints attribute */
  G->n[c].attrs[0].type = AT_INTS;
  G->n[c].attrs[0].name = xstrdup("value_ints");
  int ct = G->n[c].out[0];
  shape_infer(G, 0);
  ASSERT_SHAPE(l, 0, 4, 1, 8, 3, 3);
  ASSERT(9, ((snrt_lrn_t *)G->n[l].p)->hw);
  ASSERT(72 * 5 * 3, flops_lrn(G, &G->n[l]));
  /* The Constant is folded: its node is dropped, its output keeps the value. */
  ASSERT(1, G->nn);
  ASSERT(1, G->t[ct].rank);
  ASSERT(3, G->t[ct].dims[0]);
  ASSERT(TK_CONST, G->t[ct].kind);
  ASSERT(-1, G->t[ct].producer);
  ASSERT(3, ((int64_t *)G->t[ct].data)[2]);
  /* LRN without size */
  new_graph(13);
  x = tensor("x", TK_INPUT, 4, 1LL, 8LL, 3LL, 3LL);
  node(OP_LRN, "lrn", 1, x, 1);
  ASSERT_BAD(0);
  /* an input whose shape is unknown (produced by nothing) */
  new_graph(13);
  x = tensor("x", TK_INPUT, 2, 1LL, 8LL);
  int u = graph_add_tensor(G, "dangling", DT_FLOAT, TK_ACT);
  node(OP_ADD, "add", 2, x, u, 1);
  ASSERT_BAD(0);
  /* a float op on data fed an int64 tensor (an int64 constant alone is
   * evaluated at compile time: eval.c) */
  new_graph(13);
  x = tensor("x", TK_INPUT, 2, 1LL, 2LL);
  node(OP_ADD, "add", 2, x, const_i64("k", 2, 1LL, 2LL), 1);
  ASSERT_BAD(0);
}

/* The data-path ops: Where on a condition computed from data
 * (a bool activation: WHERE_DATA with three-way broadcasting), Gather on
 * axis 1 as a select, Einsum's forms, and their refusals (exit 2). */
static void test_data_path_ops(void) {
  new_graph(13);
  int x = tensor("x", TK_INPUT, 3, 2LL, 1LL, 4LL), w = tensor("w", TK_PARAM, 2, 3LL, 1LL);
  int c = graph_add_tensor(G, "cond", DT_BOOL, TK_ACT);
  int64_t cd[2] = {3, 4};
  tensor_set_shape(&G->t[c], 2, cd);
  int n = node(OP_WHERE, "where", 3, c, x, w, 1);
  shape_infer(G, 0);
  ASSERT(OP_WHERE_DATA, G->n[n].op);
  ASSERT_SHAPE(n, 0, 3, 2, 3, 4);
  const snrt_where3_t *p = G->n[n].p;
  ASSERT(24, p->n); ASSERT(8, p->na); ASSERT(3, p->nb);
  ASSERT(0, p->sc[0]); ASSERT(4, p->sc[1]); ASSERT(1, p->sc[2]);
  ASSERT(4, p->sa[0]); ASSERT(0, p->sa[1]); ASSERT(1, p->sa[2]);
  ASSERT(0, p->sb[0]); ASSERT(1, p->sb[1]); ASSERT(0, p->sb[2]);
  /* a float condition computed from data is refused */
  new_graph(13);
  x = tensor("x", TK_INPUT, 2, 2LL, 3LL);
  node(OP_WHERE, "where", 3, x, x, x, 1);
  ASSERT_BAD(0);

  /* Gather axis 1, scalar index: (2, 5, 3) -> (2, 3) */
  new_graph(13);
  x = tensor("x", TK_INPUT, 3, 2LL, 5LL, 3LL);
  int ix = graph_add_tensor(G, "i", DT_INT64, TK_CONST);
  int64_t *iv = xcalloc(1, sizeof *iv);
  iv[0] = -1;
  tensor_set_shape(&G->t[ix], 0, NULL);
  G->t[ix].data = iv, G->t[ix].ndata = 1;
  n = node(OP_GATHER, "g", 2, x, ix, 1);
  Attr *at = xcalloc(1, sizeof *at);
  *at = (Attr){.name = xstrdup("axis"), .type = AT_INT, .i = 1};
  G->n[n].attrs = at, G->n[n].nattr = 1;
  shape_infer(G, 0);
  ASSERT_SHAPE(n, 0, 2, 2, 3);
  const snrt_gather_t *gp = G->n[n].p;
  ASSERT(2, gp->outer); ASSERT(5, gp->rows); ASSERT(3, gp->dim); ASSERT(4, gp->idx[0]);

  /* Einsum: an ellipsis and three operands are refused */
  const char *bad[] = {"...ij,jk->...ik", "ij,jk,kl->il", "ii,ij->j", "ij,jk->iz"};
  for (int k = 0; k < 4; k++) {
    new_graph(13);
    x = tensor("x", TK_INPUT, 2, 2LL, 3LL);
    w = tensor("w", TK_PARAM, 2, 3LL, 4LL);
    n = node(OP_EINSUM, "e", 2, x, w, 1);
    at = xcalloc(1, sizeof *at);
    *at = (Attr){.name = xstrdup("equation"), .type = AT_STRING, .s = xstrdup(bad[k])};
    G->n[n].attrs = at, G->n[n].nattr = 1;
    ASSERT_BAD(0);
  }
}

int main(void) {
  err_file = "test.onnx";
  test_conv();
  test_pool();
  test_bn_unary();
  test_binary();
  test_slice();
  test_reshape_like();
  test_concat_split_pad();
  test_softmax_reduce();
  test_gemm_matmul();
  test_lrn_constant();
  test_data_path_ops();
  printf("test_shape: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
