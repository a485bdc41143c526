/* shape_nn.c — shape inference for the layers with weights or windows:
 * Conv, MaxPool/AveragePool/GlobalAveragePool, BatchNormalization, LRN, Gemm,
 * MatMul. Each fills its snrt_*_t (or GemmParams) in node->p.
 *
 * Windows follow ONNX (and PyTorch, which agrees): output size
 * floor((in + pad_begin + pad_end - ((k-1)*d + 1)) / s) + 1, or the ceiling
 * with ceil_mode, where a last window that would start past the input and the
 * left padding is dropped; auto_pad SAME_* gives ceil(in / s) outputs with
 * the odd padding pixel at the end (UPPER) or the beginning (LOWER).
 * 2-D spatial windows (NCHW) and 1-D ones (NCL: run as NC1L, a height of
 * one, so the kernels and gradients are the 2-D ones; a 1-D weight (K, C, k)
 * has the bytes of (K, C, 1, k)). */
#include "shape.h"

#include <string.h>

/* CPU im2col chunk (SNRT_CONV_WS_TARGET in runtime/snrt.h): ~4 MiB. Measured
 * on resnet18 (32x32) and the example CNN at batch 64, 1 thread: 1-4 MiB took 4-8% less time than 16 or 64 MiB
 * (the column matrix is still in cache when the GEMM reads it; the
 * differences between 1, 2 and 4 MiB were within noise). Below 4 MiB the
 * example CNN's liveness arena packed worse than 1.05x its peak live bytes
 * (tests/test_plan_validity.py). */

/* One spatial dimension of a window op. pb/pe come in as the explicit pads
 * and go out as the ones actually used. */
static int64_t window_out(const Node *n, const char *auto_pad, int64_t in, int64_t k, int64_t s,
                          int64_t d, int64_t *pb, int64_t *pe, bool ceil_mode, const char *dim) {
  int64_t ek = (k - 1) * d + 1;
  if (strcmp(auto_pad, "SAME_UPPER") == 0 || strcmp(auto_pad, "SAME_LOWER") == 0) {
    int64_t out = (in + s - 1) / s;
    int64_t total = (out - 1) * s + ek - in;
    if (total < 0) total = 0;
    if (auto_pad[5] == 'U') { *pb = total / 2; *pe = total - *pb; }
    else { *pe = total / 2; *pb = total - *pe; }
    return out;
  }
  if (strcmp(auto_pad, "VALID") == 0) *pb = *pe = 0;
  else if (strcmp(auto_pad, "NOTSET") != 0)
    node_error(n, "unknown auto_pad '%s' (NOTSET, SAME_UPPER, SAME_LOWER or VALID)", auto_pad);
  int64_t span = in + *pb + *pe - ek;
  if (span < 0)
    node_error(n, "the %s window (%lld with dilation) is larger than the padded input (%lld)",
               dim, (long long)ek, (long long)(in + *pb + *pe));
  if (!ceil_mode) return span / s + 1;
  int64_t out = (span + s - 1) / s + 1;
  /* The last window must start inside the input or the left padding. */
  if ((out - 1) * s >= in + *pb) out--;
  return out;
}

/* Reads kernel_shape/strides/dilations/pads (2-D) with ONNX defaults. */
typedef struct Window {
  int64_t k[2], s[2], d[2], pads[4];
} Window;

static void read_ints(const Node *n, const char *name, int want, int64_t *dst, int64_t dflt,
                      int64_t min) {
  const int64_t *v;
  int cnt = attr_ints(n, name, &v);
  for (int i = 0; i < want; i++) dst[i] = dflt;
  if (!cnt) return;
  if (cnt != want) node_error(n, "attribute '%s' has %d values, expected %d", name, cnt, want);
  for (int i = 0; i < want; i++) {
    if (v[i] < min || v[i] > (1 << 24))
      node_error(n, "attribute '%s' value %lld is out of range", name, (long long)v[i]);
    dst[i] = v[i];
  }
}

/* sd spatial dims (1 or 2); a 1-D window is the 2-D one with a height of 1. */
static void read_window(const Node *n, Window *w, bool need_kernel, int sd) {
  const int64_t *v;
  if (need_kernel && !attr_ints(n, "kernel_shape", &v))
    node_error(n, "attribute 'kernel_shape' is required");
  read_ints(n, "kernel_shape", sd, w->k + 2 - sd, 0, 1);
  read_ints(n, "strides", sd, w->s + 2 - sd, 1, 1);
  read_ints(n, "dilations", sd, w->d + 2 - sd, 1, 1);
  if (sd == 2) {
    read_ints(n, "pads", 4, w->pads, 0, 0);
  } else {
    int64_t p[2];
    read_ints(n, "pads", 2, p, 0, 0);
    w->k[0] = need_kernel ? 1 : 0, w->s[0] = w->d[0] = 1;
    w->pads[0] = w->pads[2] = 0, w->pads[1] = p[0], w->pads[3] = p[1];
  }
}

/* The input, NCHW or NCL; hw gets its spatial dims as 2-D (H = 1 for NCL). */
static Tensor *spatial_input(Graph *g, Node *n, int64_t hw[2]) {
  Tensor *x = shape_in_float(g, n, 0, -1);
  if (x->rank != 4 && x->rank != 3)
    node_error(n, "only 1-D and 2-D (NCL, NCHW: rank 3 or 4) inputs are supported, not rank %d %s",
               x->rank, shape_str(x));
  hw[0] = x->rank == 4 ? x->dims[2] : 1;
  hw[1] = x->dims[x->rank - 1];
  return x;
}

void shape_conv(Graph *g, Node *n) {
  int64_t hw[2], whw[2];
  Tensor *x = spatial_input(g, n, hw);
  int sd = x->rank - 2;
  Tensor *w = shape_in_float(g, n, 1, x->rank);
  whw[0] = sd == 2 ? w->dims[2] : 1;
  whw[1] = w->dims[w->rank - 1];
  Window win;
  read_window(n, &win, false, sd);
  int64_t N = x->dims[0], C = x->dims[1], K = w->dims[0];
  int64_t group = attr_int(n, "group", 1);
  if (group < 1 || C % group || K % group)
    node_error(n, "group %lld must divide the input channels (%lld) and the output channels (%lld)",
               (long long)group, (long long)C, (long long)K);
  if (w->dims[1] != C / group)
    node_error(n, "weight '%s' %s needs %lld input channels per group (input has %lld channels, "
               "group %lld)", w->name, shape_str(w), (long long)(C / group), (long long)C,
               (long long)group);
  for (int i = 0; i < 2; i++) {
    if (win.k[i] && win.k[i] != whw[i])
      node_error(n, "kernel_shape does not match weight '%s' %s", w->name, shape_str(w));
    win.k[i] = whw[i];
  }
  if (shape_has_in(n, 2)) {
    Tensor *b = shape_in_float(g, n, 2, 1);
    if (b->dims[0] != K)
      node_error(n, "bias '%s' %s must have %lld values", b->name, shape_str(b), (long long)K);
  }
  const char *ap = attr_string(n, "auto_pad", "NOTSET");
  int64_t pb[2] = {win.pads[0], win.pads[1]}, pe[2] = {win.pads[2], win.pads[3]}, out[2];
  for (int i = 0; i < 2; i++)
    out[i] = window_out(n, ap, hw[i], win.k[i], win.s[i], win.d[i], &pb[i], &pe[i],
                        false, i ? "width" : "height");
  int64_t dims[4] = {N, K, out[0], out[1]};
  if (sd == 1) dims[2] = out[1];
  shape_set_out(g, n, 0, DT_FLOAT, x->rank, dims);
  snrt_conv_t *p = shape_alloc(sizeof *p);
  *p = (snrt_conv_t){
      .n = shape_int(n, N, "batch"), .c = shape_int(n, C, "channels"),
      .h = shape_int(n, hw[0], "height"), .w = shape_int(n, hw[1], "width"),
      .k = shape_int(n, K, "output channels"), .oh = shape_int(n, out[0], "output height"),
      .ow = shape_int(n, out[1], "output width"), .kh = (int)win.k[0], .kw = (int)win.k[1],
      .sh = (int)win.s[0], .sw = (int)win.s[1], .pt = (int)pb[0], .pl = (int)pb[1],
      .dh = (int)win.d[0], .dw = (int)win.d[1], .group = (int)group};
  /* im2col of one image: (C/g * kh * kw) x (oh * ow) floats. */
  (void)mul_checked(mul_checked((C / group) * win.k[0] * win.k[1], out[0] * out[1], n->name), 4,
                    n->name);   /* no overflow in snrt_conv_ws_images_for */
  shape_conv_workspace(p, SNRT_CONV_WS_TARGET);
  n->p = p;
}

void shape_conv_workspace(snrt_conv_t *p, int64_t target) {
  p->ws_images = snrt_conv_ws_images_for(p, target);
  p->ws_bytes = snrt_conv_ws_bytes(p);
}

void shape_pool(Graph *g, Node *n) {
  int64_t hw[2];
  Tensor *x = spatial_input(g, n, hw);
  int sd = x->rank - 2;
  snrt_pool_t *p = shape_alloc(sizeof *p);
  int64_t out[2];
  if (n->op == OP_GLOBALAVGPOOL) {
    *p = (snrt_pool_t){.kh = shape_int(n, hw[0], "height"),
                       .kw = shape_int(n, hw[1], "width"), .sh = 1, .sw = 1, .dh = 1,
                       .dw = 1};
    out[0] = out[1] = 1;
  } else {
    Window win;
    read_window(n, &win, true, sd);
    if (n->op == OP_MAXPOOL) {
      if (attr_int(n, "storage_order", 0) != 0)
        node_error(n, "storage_order must be 0 (row major)");
      if (n->nout > 1 && n->out[1] >= 0)
        node_error(n, "the Indices output of MaxPool is not supported");
    } else if (win.d[0] != 1 || win.d[1] != 1) {
      node_error(n, "dilations are not supported for AveragePool");
    }
    int64_t ceil_mode = attr_int(n, "ceil_mode", 0);
    const char *ap = attr_string(n, "auto_pad", "NOTSET");
    int64_t pb[2] = {win.pads[0], win.pads[1]}, pe[2] = {win.pads[2], win.pads[3]};
    for (int i = 0; i < 2; i++) {
      out[i] = window_out(n, ap, hw[i], win.k[i], win.s[i], win.d[i], &pb[i], &pe[i],
                          ceil_mode != 0, i ? "width" : "height");
      if (pb[i] >= (win.k[i] - 1) * win.d[i] + 1 || pe[i] >= (win.k[i] - 1) * win.d[i] + 1)
        node_error(n, "padding must be smaller than the window");
    }
    *p = (snrt_pool_t){.kh = (int)win.k[0], .kw = (int)win.k[1], .sh = (int)win.s[0],
                       .sw = (int)win.s[1], .pt = (int)pb[0], .pl = (int)pb[1],
                       .pb = (int)pe[0], .pr = (int)pe[1], .dh = (int)win.d[0],
                       .dw = (int)win.d[1],
                       .count_include_pad = (int)attr_int(n, "count_include_pad", 0)};
  }
  p->n = shape_int(n, x->dims[0], "batch");
  p->c = shape_int(n, x->dims[1], "channels");
  p->h = shape_int(n, hw[0], "height");
  p->w = shape_int(n, hw[1], "width");
  p->oh = shape_int(n, out[0], "output height");
  p->ow = shape_int(n, out[1], "output width");
  int64_t dims[4] = {x->dims[0], x->dims[1], out[0], out[1]};
  if (sd == 1) dims[2] = out[1];
  shape_set_out(g, n, 0, DT_FLOAT, x->rank, dims);
  n->p = p;
}

/* Outputs: Y, then (training exports) running mean, running var and, before
 * opset 14, saved mean and saved var: all per channel. */
void shape_batchnorm(Graph *g, Node *n) {
  Tensor *x = shape_in_float(g, n, 0, -1);
  if (x->rank < 2) node_error(n, "input must have rank 2 or more, not %s", shape_str(x));
  int64_t C = x->dims[1];
  static const char *what[] = {"", "scale", "bias", "mean", "var"};
  for (int i = 1; i < 5; i++) {
    Tensor *t = shape_in_float(g, n, i, 1);
    if (t->dims[0] != C)
      node_error(n, "%s '%s' %s must have %lld values (the input's channels)", what[i], t->name,
                 shape_str(t), (long long)C);
  }
  shape_set_out(g, n, 0, DT_FLOAT, x->rank, x->dims);
  for (int i = 1; i < n->nout; i++) shape_set_out(g, n, i, DT_FLOAT, 1, &C);
  snrt_bn_t *p = shape_alloc(sizeof *p);
  *p = (snrt_bn_t){.n = shape_int(n, x->dims[0], "batch"), .c = shape_int(n, C, "channels"),
                   .hw = shape_prod(n, x->dims, 2, x->rank),
                   .eps = attr_float(n, "epsilon", 1e-5f),
                   .momentum = attr_float(n, "momentum", 0.9f)};
  if (!(p->eps > 0)) node_error(n, "epsilon must be positive");
  n->p = p;
}

void shape_lrn(Graph *g, Node *n) {
  Tensor *x = shape_in_float(g, n, 0, -1);
  if (x->rank < 3) node_error(n, "input must have rank 3 or more, not %s", shape_str(x));
  if (!attr_find(n, "size")) node_error(n, "attribute 'size' is required");
  int64_t size = attr_int(n, "size", 1);
  if (size < 1 || size > 65535) node_error(n, "size %lld is out of range", (long long)size);
  shape_set_out(g, n, 0, DT_FLOAT, x->rank, x->dims);
  snrt_lrn_t *p = shape_alloc(sizeof *p);
  *p = (snrt_lrn_t){.n = shape_int(n, x->dims[0], "batch"), .c = shape_int(n, x->dims[1], "channels"),
                    .hw = shape_prod(n, x->dims, 2, x->rank), .size = (int)size,
                    .alpha = attr_float(n, "alpha", 1e-4f), .beta = attr_float(n, "beta", 0.75f),
                    .bias = attr_float(n, "bias", 1.0f)};
  n->p = p;
}

/* Y = alpha * op(A) op(B) + beta * C, C unidirectionally broadcast to (M, N). */
void shape_gemm(Graph *g, Node *n) {
  Tensor *a = shape_in_float(g, n, 0, 2), *b = shape_in_float(g, n, 1, 2);
  int ta = attr_int(n, "transA", 0) != 0, tb = attr_int(n, "transB", 0) != 0;
  int64_t M = ta ? a->dims[1] : a->dims[0], K = ta ? a->dims[0] : a->dims[1];
  int64_t Kb = tb ? b->dims[1] : b->dims[0], N = tb ? b->dims[0] : b->dims[1];
  if (K != Kb)
    node_error(n, "inner dimensions differ: A %s%s and B %s%s", shape_str(a), ta ? " transposed" : "",
               shape_str(b), tb ? " transposed" : "");
  int64_t dims[2] = {M, N};
  shape_set_out(g, n, 0, DT_FLOAT, 2, dims);
  GemmParams *p = shape_alloc(sizeof *p);
  p->mm = (snrt_mm_t){.batch = 1, .m = M, .n = N, .k = K, .trans_a = ta, .trans_b = tb,
                      .alpha = attr_float(n, "alpha", 1.0f), .beta = 0.0f,
                      .stride_a = M * K, .stride_b = K * N, .stride_y = M * N};
  p->bias = (snrt_bias_t){.rows = M, .cols = N, .kind = SNRT_BIAS_SCALAR,
                          .scale = attr_float(n, "beta", 1.0f)};
  if (shape_has_in(n, 2)) {
    Tensor *c = shape_in_float(g, n, 2, -1);
    int64_t r = c->rank == 2 ? c->dims[0] : 1, col = c->rank >= 1 ? c->dims[c->rank - 1] : 1;
    if (c->rank > 2 || (r != 1 && r != M) || (col != 1 && col != N))
      node_error(n, "C '%s' %s does not broadcast to (%lld, %lld)", c->name, shape_str(c),
                 (long long)M, (long long)N);
    /* A length-1 dim is broadcast even when M or N is 1: the kinds agree then. */
    p->bias.kind = r == 1 ? (col == 1 ? SNRT_BIAS_SCALAR : SNRT_BIAS_ROW)
                          : (col == 1 ? SNRT_BIAS_COL : SNRT_BIAS_FULL);
    p->has_c = true;
  }
  n->p = p;
}

/* numpy matmul. Batch dims broadcast; the runtime's product takes one batch
 * stride per operand, so an operand's batch dims must either equal the
 * output's or be all ones (or absent), and a first operand broadcast over
 * the batch must need no gradient (a constant). Other cases (1-D operands
 * too) become an Einsum (shape_matmul_einsum). */
void shape_matmul(Graph *g, Node *n) {
  Tensor *a = shape_in_float(g, n, 0, -1), *b = shape_in_float(g, n, 1, -1);
  if (a->rank < 1 || b->rank < 1)
    node_error(n, "operands must have rank 1 or more (A %s, B %s)", shape_str(a), shape_str(b));
  if (a->rank < 2 || b->rank < 2) {
    shape_matmul_einsum(g, n, a, b);
    return;
  }
  int64_t M = a->dims[a->rank - 2], K = a->dims[a->rank - 1];
  int64_t Kb = b->dims[b->rank - 2], N = b->dims[b->rank - 1];
  if (K != Kb) node_error(n, "inner dimensions differ: A %s, B %s", shape_str(a), shape_str(b));
  int r = a->rank > b->rank ? a->rank : b->rank;
  int64_t dims[MAX_RANK];
  for (int i = 0; i < r - 2; i++) {
    int ia = i - (r - a->rank), ib = i - (r - b->rank);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1)
      node_error(n, "batch dimensions of A %s and B %s do not broadcast", shape_str(a), shape_str(b));
    dims[i] = da > db ? da : db;
  }
  dims[r - 2] = M;
  dims[r - 1] = N;
  int64_t batch = shape_prod(n, dims, 0, r - 2);
  int64_t ba = shape_prod(n, a->dims, 0, a->rank - 2), bb = shape_prod(n, b->dims, 0, b->rank - 2);
  if ((ba != batch && ba != 1) || (bb != batch && bb != 1) ||
      (ba == 1 && batch > 1 && a->kind != TK_CONST && a->kind != TK_INPUT)) {
    shape_matmul_einsum(g, n, a, b);
    return;
  }
  shape_set_out(g, n, 0, DT_FLOAT, r, dims);
  snrt_mm_t *p = shape_alloc(sizeof *p);
  *p = (snrt_mm_t){.batch = batch, .m = M, .n = N, .k = K, .alpha = 1.0f, .beta = 0.0f,
                   .stride_a = ba == 1 ? 0 : M * K, .stride_b = bb == 1 ? 0 : K * N,
                   .stride_y = M * N};
  n->p = p;
}
