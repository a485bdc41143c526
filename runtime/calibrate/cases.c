/* cases.c — snc-calibrate's measurement cases: one runtime kernel on one
 * shape each, called through snrt.h as an emitted train.c calls it, with the
 * work and bytes touched counted as compiler/plan/cost.c counts them for the step
 * (inputs + outputs + workspace), so a rate measured here is the rate the
 * cost model divides by. Operands: see calibrate.h (random values from the
 * input pool, outputs to the output pool, rotated slots).
 *
 * Not here: which shapes are measured (calibrate.c lists them), the passes,
 * the fits (fit.c). */
#include "calibrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SNRT_CALIBRATE_CUDA
/* The CUDA kernels have no parallel-region threshold. */
#define PAR_MIN 0
#else
#include "cpu/kern.h"
#define PAR_MIN KERN_PAR_MIN
#endif

/* 1 where a kernel over `elements` with this threshold (the CPU kernels'
 * `if (n > KERN_PAR_MIN / d)`) runs as a parallel region; 0 on CUDA. */
static int par_over(int64_t elements, int div) { return PAR_MIN > 0 && elements > PAR_MIN / div; }

static int64_t align(int64_t bytes) { return (bytes + SNRT_ALIGN - 1) / SNRT_ALIGN * SNRT_ALIGN; }

static Case *new_case(case_fn fn, int cls, int64_t in_bytes, int64_t out_bytes) {
  if (cal_ncases >= MAXCASES) {
    fprintf(stderr, "snc-calibrate: error: internal: more than %d cases\n", MAXCASES);
    exit(3);
  }
  Case *k = &cal_cases[cal_ncases++];
  memset(k, 0, sizeof *k);
  k->fn = fn, k->cls = cls, k->shape = -1;
  k->in_bytes = align(in_bytes), k->out_bytes = align(out_bytes);
  return k;
}

/* ---- convolutions: forward, backward data, backward filter ---- */

/* Shared by every convolution: the largest im2col workspace (scratch). */
static float *conv_ws;
static int64_t conv_ws_bytes;

static void conv_call(Case *k, char *in, char *out) {
  const snrt_conv_t *p = &k->conv;
  int64_t nx = (int64_t)p->n * p->c * p->h * p->w, nw = (int64_t)p->k * p->c * p->kh * p->kw;
  float *x = (float *)in, *w = x + nx, *dy = w + nw + p->k;
  if (k->bwd == 0) snrt_conv_fwd(&cal_ctx, p, x, w, w + nw, (float *)out, conv_ws);
  else if (k->bwd == 1) snrt_conv_bwd_data(&cal_ctx, p, dy, w, (float *)out, conv_ws);
  else snrt_conv_bwd_filter(&cal_ctx, p, x, dy, (float *)out, conv_ws);
}

/* The workspace as the compiler plans it (snrt_conv_ws_images: the CPU
 * kernels batch their GEMMs by it). */
int cal_conv(int n, int c, int hw, int kk, int ksz, int stride) {
  int pad = ksz / 2, o = (hw + 2 * pad - ksz) / stride + 1;
  snrt_conv_t p = {.n = n, .c = c, .h = hw, .w = hw, .k = kk, .oh = o, .ow = o, .kh = ksz,
                   .kw = ksz, .sh = stride, .sw = stride, .pt = pad, .pl = pad, .dh = 1,
                   .dw = 1, .group = 1};
  p.ws_images = snrt_conv_ws_images(&p);
  p.ws_bytes = snrt_conv_ws_bytes(&p);
  if (p.ws_bytes > conv_ws_bytes) conv_ws_bytes = p.ws_bytes;
  int64_t nx = (int64_t)n * c * hw * hw, ny = (int64_t)n * kk * o * o, nw = (int64_t)kk * c * ksz * ksz;
  double fl = 2.0 * n * kk * o * o * (double)c * ksz * ksz;
  int kind = (int64_t)c * ksz * ksz < 64 ? 1 : ksz == 1 ? 2 : 0;   /* as cost.c's conv_kind */
  static const char *const what[3] = {"forward", "backward data", "backward filter"};
  int first = cal_ncases;
  for (int b = 0; b < 3; b++) {
    Case *k = new_case(conv_call, (b ? K_CONV_BWD : K_CONV) + kind, 4 * (nx + nw + kk + ny),
                       4 * (b == 0 ? ny : b == 1 ? nx : nw));
    k->conv = p, k->bwd = b, k->work = fl, k->units = n;   /* each kernel: fl FLOPs over the batch */
    snprintf(k->what, sizeof k->what, "conv n%d c%d %dx%d k%d %dx%d/%d %s", n, c, hw, hw, kk, ksz, ksz,
             stride, what[b]);
  }
  return first;
}

/* ---- GEMM ---- */

static void gemm(Case *k, char *in, char *out) {
  const snrt_mm_t *p = &k->mm;
  float *a = (float *)in;
  snrt_matmul(&cal_ctx, p, a, a + p->batch * p->m * p->k, (float *)out);
}

/* bcast: B shared by the batch (stride 0: a linear layer over [batch, T, C]). */
int cal_gemm(int64_t batch, int64_t m, int64_t n, int64_t kk, int ta, int tb, int bcast) {
  Case *k = new_case(gemm, K_GEMM, 4 * (batch * m * kk + (bcast ? 1 : batch) * kk * n), 4 * batch * m * n);
  k->mm = (snrt_mm_t){.batch = batch, .m = m, .n = n, .k = kk, .trans_a = ta, .trans_b = tb,
                      .alpha = 1, .beta = 0, .stride_a = m * kk, .stride_b = bcast ? 0 : kk * n,
                      .stride_y = m * n};
  k->work = 2.0 * batch * m * n * kk, k->units = (double)batch;   /* one sgemm per matrix */
  k->which = bcast;
  snprintf(k->what, sizeof k->what, "gemm %lldx(%lldx%lld)%sx(%lldx%lld)%s%s", (long long)batch,
           (long long)m, (long long)kk, ta ? "^T" : "", (long long)kk, (long long)n, tb ? "^T" : "",
           bcast ? " (B shared)" : "");
  return (int)(k - cal_cases);
}

/* ---- pooling (work: window elements visited, n c oh ow kh kw) ---- */

static void pool_fwd(Case *k, char *in, char *out) {
  if (k->which) snrt_avgpool_fwd(&cal_ctx, &k->pool, (float *)in, (float *)out);
  else snrt_maxpool_fwd(&cal_ctx, &k->pool, (float *)in, (float *)out);
}
static void pool_bwd(Case *k, char *in, char *out) {
  const snrt_pool_t *p = &k->pool;
  float *x = (float *)in, *dy = x + (int64_t)p->n * p->c * p->h * p->w;
  if (k->which) snrt_avgpool_bwd(&cal_ctx, p, dy, (float *)out);
  else snrt_maxpool_bwd(&cal_ctx, p, x, dy, (float *)out);
}

int cal_pool(int n, int c, int hw, int ksz, int stride, int pad, int avg) {
  int o = (hw + 2 * pad - ksz) / stride + 1;
  snrt_pool_t p = {.n = n, .c = c, .h = hw, .w = hw, .oh = o, .ow = o, .kh = ksz, .kw = ksz,
                   .sh = stride, .sw = stride, .pt = pad, .pl = pad, .pb = pad, .pr = pad,
                   .dh = 1, .dw = 1};
  int64_t nx = (int64_t)n * c * hw * hw, ny = (int64_t)n * c * o * o;
  int first = cal_ncases;
  for (int b = 0; b < 2; b++) {
    Case *k = new_case(b ? pool_bwd : pool_fwd, K_POOL, 4 * (nx + ny), 4 * (b ? nx : ny));
    k->pool = p, k->which = avg, k->bwd = b, k->rectified = 1;
    k->work = (double)ny * ksz * ksz, k->par = par_over(nx, 1);
    snprintf(k->what, sizeof k->what, "%s-pool n%d c%d %dx%d %dx%d/%d %s", avg ? "avg" : "max", n, c, hw,
             hw, ksz, ksz, stride, b ? "backward" : "forward");
  }
  return first;
}

/* ---- bandwidth classes (EW_*: calibrate.h) ---- */

/* Per kernel: bytes touched per element (cost.c's count: the step's inputs
 * and outputs), operands read and written per element (slot sizes), the
 * parallel threshold's divisor (0: a serial kernel), whether its units are
 * rows (n / hw, or n / 64). */
static const struct {
  double bytes;
  int nin, nout, par_div, rows;
} ew_info[EW_COUNT] = {
    [EW_RELU] = {8, 1, 1, 1, 0},        [EW_RELU_BWD] = {12, 2, 1, 1, 0},
    [EW_ADD] = {12, 2, 1, 1, 0},        [EW_BCAST_MUL] = {8, 1, 1, 1, 0},
    [EW_ADD_SAME] = {12, 2, 1, 1, 0},   [EW_BIAS_GRAD] = {8, 1, 1, 1, 0},
    [EW_MEAN_ROWS] = {4, 1, 1, 1, 0},   [EW_TRANSPOSE] = {8, 1, 1, 1, 0},
    [EW_ERF] = {8, 1, 1, 8, 0},         [EW_ERF_BWD] = {12, 2, 1, 8, 0},
    [EW_SOFTMAX] = {8, 1, 1, 1, 0},     [EW_SOFTMAX_BWD] = {12, 2, 1, 1, 1},
    [EW_BN] = {8, 1, 1, 1, 1},          [EW_BN_BWD] = {12, 2, 1, 1, 1},
    [EW_LN] = {8, 1, 1, 1, 1},          [EW_LN_BWD] = {12, 2, 1, 1, 1},
    [EW_CONV_BIAS] = {4, 1, 0, 1, 1},   [EW_DROPOUT] = {8, 1, 1, 4, 0},
    [EW_WHERE] = {8, 1, 1, 1, 0},       [EW_CE] = {4, 1, 0, 0, 1},
    [EW_CE_BWD] = {8, 1, 1, 1, 1},      [EW_SGD] = {20, 1, 2, 1, 0},
    [EW_ADAM] = {28, 1, 3, 1, 0},
    /* fused chains (compiler/front/fuse.c): the bytes of the fused step's
     * own operands, as cost.c counts them */
    [EW_GELU_TANH] = {8, 1, 1, 8, 0},   [EW_GELU_TANH_BWD] = {12, 2, 1, 8, 0},
    [EW_GELU_ERF] = {8, 1, 1, 8, 0},    [EW_GELU_ERF_BWD] = {12, 2, 1, 8, 0},
    [EW_ADD_RELU] = {12, 2, 1, 8, 0},   [EW_ADD_RELU_BWD] = {16, 2, 2, 8, 0},
};

/* The fused chains the examples' models make: a GPT's GELU, tanh form
 * (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), 8 ops) and erf form
 * (x / sqrt2, erf, + 1, x *, * 0.5: 5 ops), and a ResNet's residual Add +
 * Relu; their backward steps as the compiler makes them (the GELUs read x,
 * the Add + Relu its output). */
static snrt_fused_t fused_chain(int which, int64_t n) {
  snrt_fused_t p = {.n = n, .nin = 1};
  if (which == EW_GELU_TANH || which == EW_GELU_TANH_BWD) {
    const snrt_fused_op_t ops[] = {{SNRT_F_POW, 0, -1, 3.0f},  {SNRT_F_MUL, 1, -1, 0.044715f},
                                   {SNRT_F_ADD, 0, 2, 0.0f},   {SNRT_F_MUL, 3, -1, 0.7978846f},
                                   {SNRT_F_TANH, 4, -1, 0.0f}, {SNRT_F_ADD, 5, -1, 1.0f},
                                   {SNRT_F_MUL, 0, -1, 0.5f},  {SNRT_F_MUL, 7, 6, 0.0f}};
    p.nops = 8;
    memcpy(p.ops, ops, sizeof ops);
    p.need = p.have = 1;
  } else if (which == EW_GELU_ERF || which == EW_GELU_ERF_BWD) {
    const snrt_fused_op_t ops[] = {{SNRT_F_DIV, 0, -1, 1.4142135f}, {SNRT_F_ERF, 1, -1, 0.0f},
                                   {SNRT_F_ADD, 2, -1, 1.0f},       {SNRT_F_MUL, 0, 3, 0.0f},
                                   {SNRT_F_MUL, 4, -1, 0.5f}};
    p.nops = 5;
    memcpy(p.ops, ops, sizeof ops);
    p.need = p.have = 1;
  } else {
    const snrt_fused_op_t ops[] = {{SNRT_F_ADD, 0, 1, 0.0f}, {SNRT_F_RELU, 2, -1, 0.0f}};
    p.nin = 2, p.nops = 2;
    memcpy(p.ops, ops, sizeof ops);
    p.need = 3, p.have = 0, p.use_y = 1;
  }
  return p;
}

/* Per-channel (BN, conv bias) and per-row buffers, the optimizer state and
 * the labels: scratch, made once per case. */
typedef struct EwBufs { float *s, *b, *w, *m, *v; int32_t *labels; uint8_t *mask; } EwBufs;
static EwBufs ewb[MAXCASES];

/* Runs elementwise case k once: its kernel on in, into out.
 * Long: one short case per elementwise kernel (a switch on k->which), each
 * filling that kernel's parameter struct; no case depends on another. */
static void ew(Case *k, char *in, char *out) {
  const int64_t n = k->n;
  const EwBufs *e = &ewb[k - cal_cases];
  float *x = (float *)in, *x2 = x + n, *y = (float *)out;
  snrt_ctx *c = &cal_ctx;
  switch (k->which) {
  case EW_RELU: {
    snrt_unary_t p = {.n = n, .kind = SNRT_RELU, .lo = -3e38f, .hi = 3e38f};
    snrt_unary_fwd(c, &p, x, y);
    break;
  }
  case EW_RELU_BWD: {
    snrt_unary_t p = {.n = n, .kind = SNRT_RELU, .lo = -3e38f, .hi = 3e38f};
    snrt_unary_bwd(c, &p, x, NULL, x2, y);
    break;
  }
  case EW_ADD: snrt_add(c, n, x, x2, y); break;
  case EW_BCAST_MUL: {   /* a row vector broadcast over (n / 64, 64): a bias, a LayerNorm's scale */
    snrt_binary_t p = {.kind = SNRT_MUL, .rank = 2, .n = n, .dims = {n / 64, 64}, .sa = {64, 1},
                       .sb = {0, 1}, .na = n, .nb = 64};
    snrt_binary_fwd(c, &p, x, e->s, y);
    break;
  }
  case EW_ADD_SAME: {   /* Add of two tensors of one shape (a residual), as the emitted Add calls it */
    snrt_binary_t p = {.kind = SNRT_ADD, .rank = 1, .n = n, .dims = {n}, .sa = {1}, .sb = {1},
                       .na = n, .nb = n};
    snrt_binary_fwd(c, &p, x, x2, y);
    break;
  }
  case EW_BIAS_GRAD: {   /* the gradient of a row vector broadcast over (n / 64, 64): a bias's */
    snrt_binary_t p = {.kind = SNRT_ADD, .rank = 2, .n = n, .dims = {n / 64, 64}, .sa = {64, 1},
                       .sb = {0, 1}, .na = n, .nb = 64};
    snrt_binary_bwd(c, &p, NULL, NULL, x, y, e->s);
    break;
  }
  case EW_MEAN_ROWS: {   /* a mean over rows of 64 (LayerNorm's ReduceMean) */
    snrt_reduce_t p = {.rank = 2, .n_big = n, .n_small = n / 64, .dims = {n / 64, 64}, .ss = {1, 0},
                       .scale = 1.0f / 64};
    snrt_reduce(c, &p, x, y);
    break;
  }
  case EW_TRANSPOSE: {   /* (n / 4096, 64, 64) -> its last two dims swapped (attention heads) */
    snrt_transpose_t p = {.rank = 3, .n = n, .in_dims = {n / 4096, 64, 64}, .perm = {0, 2, 1}};
    snrt_transpose(c, &p, x, y);
    break;
  }
  case EW_ERF: {
    snrt_math_t p = {.n = n, .kind = SNRT_ERF};
    snrt_math_fwd(c, &p, x, y);
    break;
  }
  case EW_ERF_BWD: {
    snrt_math_t p = {.n = n, .kind = SNRT_ERF};
    snrt_math_bwd(c, &p, x, NULL, x2, y);
    break;
  }
  case EW_SOFTMAX: {   /* over rows of 64 (attention) */
    snrt_softmax_t p = {.outer = n / 64, .len = 64, .inner = 1};
    snrt_softmax_fwd(c, &p, x, y);
    break;
  }
  case EW_SOFTMAX_BWD: {
    snrt_softmax_t p = {.outer = n / 64, .len = 64, .inner = 1};
    snrt_softmax_bwd(c, &p, x, x2, y);
    break;
  }
  case EW_BN: {
    snrt_bn_t p = {.n = (int)(n / (k->c * k->hw)), .c = k->c, .hw = k->hw, .eps = 1e-5f, .momentum = 0.9f};
    snrt_bn_fwd_train(c, &p, x, e->s, e->b, e->m, e->v, y, e->w, e->w + k->c);
    break;
  }
  case EW_BN_BWD: {
    snrt_bn_t p = {.n = (int)(n / (k->c * k->hw)), .c = k->c, .hw = k->hw, .eps = 1e-5f, .momentum = 0.9f};
    snrt_bn_bwd(c, &p, x, x2, e->s, e->b, e->m, y, e->w, e->w + k->c);
    break;
  }
  case EW_LN: {
    snrt_ln_t p = {.rows = n / 64, .cols = 64, .eps = 1e-5f};
    snrt_ln_fwd(c, &p, x, e->s, e->b, y, e->w, e->w + n / 64);
    break;
  }
  case EW_LN_BWD: {
    snrt_ln_t p = {.rows = n / 64, .cols = 64, .eps = 1e-5f};
    snrt_ln_bwd(c, &p, x, x2, e->s, e->m, e->v, y, e->w, e->w + 64);
    break;
  }
  case EW_CONV_BIAS: {   /* a conv's bias gradient: per channel, over the images' maps */
    snrt_conv_t p = {.n = (int)(n / (k->c * k->hw)), .k = k->c, .oh = (int)k->hw, .ow = 1};
    snrt_conv_bwd_bias(c, &p, x, e->w);
    break;
  }
  case EW_DROPOUT: {
    snrt_dropout_t p = {.n = n, .ratio = 0.5f, .id = 1};
    snrt_dropout_fwd(c, &p, x, y);
    break;
  }
  case EW_GELU_TANH: case EW_GELU_ERF: case EW_ADD_RELU: {
    snrt_fused_t p = fused_chain(k->which, n);
    const float *ins[2] = {x, x2};
    snrt_fused_fwd(c, &p, ins, y);
    break;
  }
  case EW_GELU_TANH_BWD: case EW_GELU_ERF_BWD: {   /* x, then dy */
    snrt_fused_t p = fused_chain(k->which, n);
    const float *ins[1] = {x};
    float *dx[1] = {y};
    snrt_fused_bwd(c, &p, ins, NULL, x2, dx);
    break;
  }
  case EW_ADD_RELU_BWD: {   /* the output, then dy; the gradients of both addends */
    snrt_fused_t p = fused_chain(k->which, n);
    const float *ins[2] = {NULL, NULL};
    float *dx[2] = {y, y + n};
    snrt_fused_bwd(c, &p, ins, x, x2, dx);
    break;
  }
  case EW_WHERE: {   /* a causal mask's fill over rows of 64 x 64 scores */
    snrt_where_t p = {.n = n, .inner = 4096, .value = -1e30f, .fill = e->mask};
    snrt_where(c, &p, x, y);
    break;
  }
  case EW_CE: {
    snrt_loss_t p = {.n = (int)(n / k->c), .classes = k->c};
    snrt_softmax_ce_fwd(c, &p, x, e->labels, e->w);
    break;
  }
  case EW_CE_BWD: {
    snrt_loss_t p = {.n = (int)(n / k->c), .classes = k->c};
    snrt_softmax_ce_bwd(c, &p, x, e->labels, y);
    break;
  }
  case EW_SGD: {   /* parameters and momentum: the output slot (rotated, cold as in a step) */
    snrt_sgd_t p = {.n = n, .momentum = 0.9f, .param = -1};
    snrt_sgd(c, &p, y, x, y + n);
    break;
  }
  case EW_ADAM: {
    snrt_adam_t p = {.n = n, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .param = -1};
    snrt_adam(c, &p, y, x, y + n, y + 2 * n);
    break;
  }
  }
}

/* The optimizer state in every output slot: parameters 0.01, first moment
 * 0, second moment 1e-4 (>= 0 as Adam's is), before each pass. */
static void optim_prepare(Case *k) {
  for (int r = 0; r < k->nrot; r++) {
    float *y = (float *)cal_out_slot(k, r);
    snrt_fill(&cal_ctx, k->n, 0.01f, y);
    snrt_fill(&cal_ctx, k->n, 0.0f, y + k->n);
    if (k->which == EW_ADAM) snrt_fill(&cal_ctx, k->n, 1e-4f, y + 2 * k->n);
  }
}

/* Scratch floats of value v. */
static float *scratch_fill(int64_t n, float v) {
  float *p = cal_scratch(n);
  snrt_fill(&cal_ctx, n, v, p);
  return p;
}

int cal_ew(int which, int cls, int64_t n, int c, int64_t hw, const char *what) {
  Case *k = new_case(ew, cls, 4 * n * ew_info[which].nin, 4 * n * ew_info[which].nout + 64);
  int id = (int)(k - cal_cases);
  k->which = which, k->n = n, k->c = c, k->hw = hw;
  k->work = ew_info[which].bytes * n;
  int div = ew_info[which].par_div;
  k->par = div ? par_over(n, div) : 0;
  if (ew_info[which].rows) k->units = (double)n / (which == EW_BN || which == EW_BN_BWD || which == EW_CONV_BIAS ? hw : c);
  EwBufs *e = &ewb[id];
  memset(e, 0, sizeof *e);
  int64_t per = which == EW_LN || which == EW_LN_BWD || which == EW_SOFTMAX_BWD ? 64 : c > 64 ? c : 64;
  switch (which) {
  case EW_BCAST_MUL: case EW_BIAS_GRAD: e->s = scratch_fill(64, 0.5f); break;
  case EW_BN: case EW_BN_BWD: case EW_LN: case EW_LN_BWD: case EW_CONV_BIAS:
    e->s = scratch_fill(per, 1.0f), e->b = scratch_fill(per, 0.1f);
    e->m = scratch_fill(which == EW_LN_BWD ? n / 64 : per, 0.0f);
    e->v = scratch_fill(which == EW_LN_BWD ? n / 64 : per, 1.0f);
    e->w = scratch_fill(2 * (which == EW_LN ? n / 64 : per), 1.0f);
    break;
  case EW_SGD: case EW_ADAM: k->prepare = optim_prepare; break;
  case EW_CE: case EW_CE_BWD: {
    int rows = (int)(n / c);
    e->w = scratch_fill(1, 0);
    e->labels = (int32_t *)cal_scratch(rows);
    int32_t *host = malloc(sizeof(int32_t) * (size_t)rows);
    if (!host) exit(3);
    for (int i = 0; i < rows; i++) host[i] = (int32_t)((i * 7919u) % (unsigned)c);
    snrt_dev_upload(&cal_ctx, (char *)e->labels - snrt_arena(&cal_ctx), host, 4 * (int64_t)rows);
    free(host);
    break;
  }
  case EW_WHERE: {   /* host memory, as train.c's constant mask */
    static uint8_t mask[4096];
    for (int i = 0; i < 4096; i++) mask[i] = (i % 64) > (i / 64);
    e->mask = mask;
    break;
  }
  }
  snprintf(k->what, sizeof k->what, "%s, %lld elements", what, (long long)n);
  return id;
}

static void tiny(Case *k, char *in, char *out) {
  (void)k;
  snrt_unary_t p = {.n = 16, .kind = SNRT_RELU, .lo = -3e38f, .hi = 3e38f};
  snrt_unary_fwd(&cal_ctx, &p, (float *)in, (float *)out);
}

int cal_tiny(void) {
  Case *k = new_case(tiny, -1, 64, 64);
  snprintf(k->what, sizeof k->what, "step overhead (a 16-element kernel)");
  return (int)(k - cal_cases);
}

/* ---- the copy engine ---- */

static void copy1(Case *k, char *in, char *out) {
  (void)in;
  int64_t dev = out - snrt_arena(&cal_ctx);
  if (k->which == 0) snrt_offload(&cal_ctx, 0, dev, k->n, 0);
  else snrt_prefetch(&cal_ctx, dev, 0, k->n, 1);
  snrt_wait(&cal_ctx, k->which);
}

int cal_copy(int dir, int64_t bytes) {
  Case *k = new_case(copy1, K_COPY_D2H + dir, 64, bytes);
  k->work = (double)bytes;
  k->which = dir, k->n = bytes;
  snprintf(k->what, sizeof k->what, "copy %s, %lld bytes", dir ? "to the device" : "to the host",
           (long long)bytes);
  return (int)(k - cal_cases);
}

/* The compute mix of the overlap measurement: a 3x3 convolution forward and
 * backward, a batch normalization and a ReLU on the activations of a small
 * CNN (auxiliary cases: timed only here, not in the passes). */
static int mix[5];

void cal_overlap_init(void) {
  int nb = cal_quick ? 4 : 16;
  mix[0] = cal_conv(nb, 64, 16, 64, 3, 1), mix[1] = mix[0] + 1, mix[2] = mix[0] + 2;
  mix[3] = cal_ew(EW_BN, -1, (int64_t)nb * 64 * 256, 64, 256, "batch-norm");
  mix[4] = cal_ew(EW_RELU, -1, (int64_t)nb * 64 * 256, 64, 256, "relu");
  for (int i = 0; i < 5; i++) cal_cases[mix[i]].cls = -1, cal_cases[mix[i]].aux = 1;
}

static void mix_run(int times) {
  for (int r = 0; r < times; r++)
    for (int i = 0; i < 5; i++) cal_call(&cal_cases[mix[i]]);
}

void cal_overlap_pass(int dir, double copy_bw, int pass, double *loss) {
  mix_run(1);
  snrt_dev_sync(&cal_ctx);
  double t0 = cal_now();
  mix_run(1);
  snrt_dev_sync(&cal_ctx);
  double one = cal_now() - t0;
  int times = (int)((cal_quick ? 0.02 : 0.4) / one) + 1;   /* about 0.4 s of compute */
  t0 = cal_now();
  mix_run(times);
  snrt_dev_sync(&cal_ctx);
  double alone = cal_now() - t0;
  /* Copies of about half the mix's time, queued in chunks before it starts
   * (device side: the output pool; host side: the host arena). */
  int64_t chunk = cal_quick ? (1 << 20) : (4 << 20);
  int64_t hspan = cal_ctx.m->host_bytes - chunk, dspan = cal_out_pool_bytes - chunk;
  int nchunk = (int)(0.5 * alone * copy_bw / (double)chunk) + 1;
  double t1 = cal_now();
  for (int i = 0; i < nchunk; i++) {
    int64_t h = (int64_t)i * chunk % hspan, d = cal_out_pool_off + (int64_t)i * chunk % dspan;
    if (dir == 0) snrt_offload(&cal_ctx, h, d, chunk, 2);
    else snrt_prefetch(&cal_ctx, d, h, chunk, 3);
  }
  mix_run(times);
  snrt_wait(&cal_ctx, dir ? 3 : 2);
  snrt_dev_sync(&cal_ctx);
  double both = cal_now() - t1, copy_alone = (double)nchunk * chunk / copy_bw;
  loss[pass] = (both - alone) / copy_alone;
}

void cal_cases_ready(void) {
  conv_ws = cal_scratch(conv_ws_bytes / 4 + 1);
}
