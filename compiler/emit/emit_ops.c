/* emit_ops.c — one emitter per op (the op table's `emit` column).
 *
 * Each emitter declares the node's parameter struct (once per params pointer:
 * a forward conv and its two backward steps share one `static const
 * snrt_conv_t`) and prints the runtime call with arena pointers of the
 * instances the plan gave this step. Nothing here decides anything: shapes
 * come from shape.c/autodiff.c, offsets from the plan.
 */
#include "emit_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameter struct printers ---- */

#define BUF 4096
static char pb[BUF];

static const char *dims_list(const int64_t *v, int n) {
  static char s[4][512];
  static int k;
  char *o = s[k++ & 3];
  int len = snprintf(o, 512, "{");
  for (int i = 0; i < n && len < 480; i++) len += snprintf(o + len, 512 - len, "%s%lld", i ? ", " : "", (long long)v[i]);
  snprintf(o + len, 512 - len, "}");
  return o;
}

/* The cuda target (workspace.c ran): one struct per conv step, whose ws_bytes
 * is the workspace lent to that step; the runtime chooses an algorithm per
 * struct. Otherwise one per node, ws_bytes as shape_nn.c sized it. */
static const char *p_conv_step(Emit *e, const snrt_conv_t *p) {
  if (!e->ws_per_step) return NULL;
  snrt_conv_t q = *p;
  /* (the kernel's part: after the step's float32 copies, if any) */
  q.ws_bytes = e->st->ws >= 0 ? e->pl->inst[e->st->ws].bytes - e->pl->inst[e->st->ws].convert_bytes : 0;
  const char *have = emit_params_find(e, e->st);
  if (have) return have;
  snprintf(pb, BUF, ".n = %d, .c = %d, .h = %d, .w = %d, .k = %d, .oh = %d, .ow = %d, "
           ".kh = %d, .kw = %d, .sh = %d, .sw = %d, .pt = %d, .pl = %d, .dh = %d, .dw = %d, "
           ".group = %d, .ws_images = %d, .ws_bytes = %lld",
           q.n, q.c, q.h, q.w, q.k, q.oh, q.ow, q.kh, q.kw, q.sh, q.sw, q.pt, q.pl,
           q.dh, q.dw, q.group, q.ws_images, (long long)q.ws_bytes);
  if (q.accumulate) strcat(pb, ", .accumulate = 1");
  if (q.round_w) snprintf(pb + strlen(pb), BUF - strlen(pb), ", .round_w = %d", q.round_w);
  return emit_params(e, e->st, "snrt_conv_t", pb);
}

static const char *p_conv_node(Emit *e, const snrt_conv_t *p) {
  snprintf(pb, BUF, ".n = %d, .c = %d, .h = %d, .w = %d, .k = %d, .oh = %d, .ow = %d, "
           ".kh = %d, .kw = %d, .sh = %d, .sw = %d, .pt = %d, .pl = %d, .dh = %d, .dw = %d, "
           ".group = %d, .ws_images = %d, .ws_bytes = %lld",
           p->n, p->c, p->h, p->w, p->k, p->oh, p->ow, p->kh, p->kw, p->sh, p->sw, p->pt, p->pl,
           p->dh, p->dw, p->group, p->ws_images, (long long)p->ws_bytes);
  if (p->accumulate) strcat(pb, ", .accumulate = 1");   /* (a chunk of the batch: convert.c) */
  if (p->round_w) snprintf(pb + strlen(pb), BUF - strlen(pb), ", .round_w = %d", p->round_w);
  return emit_params(e, p, "snrt_conv_t", pb);
}

static const char *p_conv(Emit *e, const snrt_conv_t *p) {
  const char *per_step = p_conv_step(e, p);
  return per_step ? per_step : p_conv_node(e, p);
}

static const char *p_pool(Emit *e, const snrt_pool_t *p) {
  snprintf(pb, BUF, ".n = %d, .c = %d, .h = %d, .w = %d, .oh = %d, .ow = %d, .kh = %d, .kw = %d, "
           ".sh = %d, .sw = %d, .pt = %d, .pl = %d, .pb = %d, .pr = %d, .dh = %d, .dw = %d, "
           ".count_include_pad = %d",
           p->n, p->c, p->h, p->w, p->oh, p->ow, p->kh, p->kw, p->sh, p->sw, p->pt, p->pl, p->pb,
           p->pr, p->dh, p->dw, p->count_include_pad);
  return emit_params(e, p, "snrt_pool_t", pb);
}

static const char *p_bn(Emit *e, const snrt_bn_t *p) {
  snprintf(pb, BUF, ".n = %d, .c = %d, .hw = %lld, .eps = %s, .momentum = %s", p->n, p->c,
           (long long)p->hw, emit_float(p->eps), emit_float(p->momentum));
  return emit_params(e, p, "snrt_bn_t", pb);
}

static const char *p_lrn(Emit *e, const snrt_lrn_t *p) {
  snprintf(pb, BUF, ".n = %d, .c = %d, .hw = %lld, .size = %d, .alpha = %s, .beta = %s, .bias = %s",
           p->n, p->c, (long long)p->hw, p->size, emit_float(p->alpha), emit_float(p->beta),
           emit_float(p->bias));
  return emit_params(e, p, "snrt_lrn_t", pb);
}

static const char *unary_kinds[] = {"SNRT_RELU", "SNRT_LEAKY_RELU", "SNRT_SIGMOID", "SNRT_TANH", "SNRT_CLIP"};

static const char *p_unary(Emit *e, const snrt_unary_t *p) {
  snprintf(pb, BUF, ".n = %lld, .kind = %s, .alpha = %s, .lo = %s, .hi = %s", (long long)p->n,
           unary_kinds[p->kind], emit_float(p->alpha), emit_float(p->lo), emit_float(p->hi));
  return emit_params(e, p, "snrt_unary_t", pb);
}

static const char *binary_kinds[] = {"SNRT_ADD", "SNRT_SUB", "SNRT_MUL", "SNRT_DIV", "SNRT_MIN",
                                     "SNRT_MAX"};

static const char *p_binary(Emit *e, const snrt_binary_t *p) {
  snprintf(pb, BUF, ".kind = %s, .rank = %d, .n = %lld, .dims = %s, .sa = %s, .sb = %s, "
           ".na = %lld, .nb = %lld",
           binary_kinds[p->kind], p->rank, (long long)p->n, dims_list(p->dims, p->rank),
           dims_list(p->sa, p->rank), dims_list(p->sb, p->rank), (long long)p->na, (long long)p->nb);
  return emit_params(e, p, "snrt_binary_t", pb);
}

static const char *p_reduce(Emit *e, const snrt_reduce_t *p) {
  int k = snprintf(pb, BUF, ".rank = %d, .n_big = %lld, .n_small = %lld, .dims = %s, .ss = %s, "
                   ".scale = %s", p->rank, (long long)p->n_big, (long long)p->n_small,
                   dims_list(p->dims, p->rank), dims_list(p->ss, p->rank), emit_float(p->scale));
  if (p->kind)
    snprintf(pb + k, (size_t)(BUF - k), ", .kind = %s",
             p->kind == SNRT_RED_MAX ? "SNRT_RED_MAX" : "SNRT_RED_L2");
  return emit_params(e, p, "snrt_reduce_t", pb);
}

static const char *p_mm(Emit *e, const snrt_mm_t *p) {
  snprintf(pb, BUF, ".batch = %lld, .m = %lld, .n = %lld, .k = %lld, .trans_a = %d, .trans_b = %d, "
           ".alpha = %s, .beta = %s, .stride_a = %lld, .stride_b = %lld, .stride_y = %lld",
           (long long)p->batch, (long long)p->m, (long long)p->n, (long long)p->k, p->trans_a,
           p->trans_b, emit_float(p->alpha), emit_float(p->beta), (long long)p->stride_a,
           (long long)p->stride_b, (long long)p->stride_y);
  return emit_params(e, p, "snrt_mm_t", pb);
}

static const char *bias_kinds[] = {"SNRT_BIAS_SCALAR", "SNRT_BIAS_ROW", "SNRT_BIAS_COL", "SNRT_BIAS_FULL"};

static const char *p_bias(Emit *e, const snrt_bias_t *p) {
  snprintf(pb, BUF, ".rows = %lld, .cols = %lld, .kind = %s, .scale = %s", (long long)p->rows,
           (long long)p->cols, bias_kinds[p->kind], emit_float(p->scale));
  return emit_params(e, p, "snrt_bias_t", pb);
}

static const char *p_concat(Emit *e, const snrt_concat_t *p) {
  /* Declared once per params pointer (Split and its backward Concat share
   * it): only the first call declares the chunk array. */
  const char *have = emit_params_find(e, p);
  if (have) return have;
  /* The chunk array is declared first, under a name derived from the struct's. */
  char arr[64];
  snprintf(arr, sizeof arr, "P%d_chunk", e->nparams);
  char *list = xmalloc((size_t)p->parts * 24 + 8);
  int len = 0;
  for (int i = 0; i < p->parts; i++) len += sprintf(list + len, "%s%lld", i ? ", " : "", (long long)p->chunk[i]);
  fprintf(e->decl, "static const int64_t %s[] = {%s};\n", arr, list);
  free(list);
  snprintf(pb, BUF, ".parts = %d, .outer = %lld, .chunk = %s", p->parts, (long long)p->outer, arr);
  return emit_params(e, p, "snrt_concat_t", pb);
}

static const char *p_slice(Emit *e, const snrt_slice_t *p) {
  snprintf(pb, BUF, ".rank = %d, .n_in = %lld, .n_out = %lld, .in_dims = %s, .out_dims = %s, "
           ".start = %s, .step = %s",
           p->rank, (long long)p->n_in, (long long)p->n_out, dims_list(p->in_dims, p->rank),
           dims_list(p->out_dims, p->rank), dims_list(p->start, p->rank), dims_list(p->step, p->rank));
  return emit_params(e, p, "snrt_slice_t", pb);
}

static const char *p_pad(Emit *e, const snrt_pad_t *p) {
  int k = snprintf(pb, BUF, ".rank = %d, .n_in = %lld, .n_out = %lld, .in_dims = %s, .out_dims = %s, "
                   ".before = %s, .value = %s",
                   p->rank, (long long)p->n_in, (long long)p->n_out, dims_list(p->in_dims, p->rank),
                   dims_list(p->out_dims, p->rank), dims_list(p->before, p->rank), emit_float(p->value));
  if (p->mode)
    snprintf(pb + k, (size_t)(BUF - k), ", .mode = %s",
             p->mode == SNRT_PAD_REFLECT ? "SNRT_PAD_REFLECT" : "SNRT_PAD_EDGE");
  return emit_params(e, p, "snrt_pad_t", pb);
}

static const char *p_transpose(Emit *e, const snrt_transpose_t *p) {
  int64_t perm[MAX_RANK];
  for (int i = 0; i < p->rank; i++) perm[i] = p->perm[i];
  snprintf(pb, BUF, ".rank = %d, .n = %lld, .in_dims = %s, .perm = %s", p->rank, (long long)p->n,
           dims_list(p->in_dims, p->rank), dims_list(perm, p->rank));
  return emit_params(e, p, "snrt_transpose_t", pb);
}

static const char *p_softmax(Emit *e, const snrt_softmax_t *p) {
  const char *have = emit_params_find(e, p);
  if (have) return have;
  int n = snprintf(pb, BUF, ".outer = %lld, .len = %lld, .inner = %lld", (long long)p->outer,
                   (long long)p->len, (long long)p->inner);
  if (p->fill) {   /* a masked softmax (front/fuse.c): its mask as an array */
    char arr[64];
    snprintf(arr, sizeof arr, "P%d_fill", e->nparams);
    emit_int_array(e, "uint8_t", arr, p->fill_n, p->fill, true);
    snprintf(pb + n, BUF - n, ", .fill = %s, .fill_n = %lld, .value = %s", arr, (long long)p->fill_n,
             emit_float(p->value));
  }
  return emit_params(e, p, "snrt_softmax_t", pb);
}

static const char *p_dropout(Emit *e, const snrt_dropout_t *p) {
  snprintf(pb, BUF, ".n = %lld, .ratio = %s, .id = %uu", (long long)p->n, emit_float(p->ratio), p->id);
  return emit_params(e, p, "snrt_dropout_t", pb);
}

static const char *p_loss(Emit *e, const snrt_loss_t *p) {
  snprintf(pb, BUF, ".n = %d, .classes = %d", p->n, p->classes);
  return emit_params(e, p, "snrt_loss_t", pb);
}

static const char *p_lmce(Emit *e, const snrt_lmce_t *p) {
  snprintf(pb, BUF, ".n = %lld, .classes = %lld, .k = %lld, .chunk = %lld, .trans_b = %d, .need = %d, "
           ".alpha = %s", (long long)p->n, (long long)p->classes, (long long)p->k,
           (long long)p->chunk, p->trans_b, p->need, emit_float(p->alpha));
  return emit_params(e, p, "snrt_lmce_t", pb);
}

/* ---- emitters ---- */

#define OUT e->f

/* Tensor cores (cuda, --precision bf16|fp16): conv, GEMM and MatMul steps
 * call the 16-bit entry points ("16", ", SNRT_BF16"), every operand but a
 * bias 16-bit (emit_convert.c made copies of the float32 ones). "" and ""
 * otherwise. */
static const char *tc(const Graph *g) { return g->tensor_cores && g->precision != PREC_FP32 ? "16" : ""; }
static const char *tc_fmt(const Graph *g) {
  return !*tc(g) ? "" : g->precision == PREC_FP16 ? ", SNRT_F16" : ", SNRT_BF16";
}

void emit_conv(Emit *e, const Graph *g, const Node *n) {
  const char *p = p_conv(e, n->p);
  fprintf(OUT, "  snrt_conv_fwd%s(c, %s%s, %s, %s, %s, %s, %s);\n", tc(g), p, tc_fmt(g), emit_in(e, 0),
          emit_in(e, 1), n->nin > 2 ? emit_in(e, 2) : "NULL", emit_out(e, 0), emit_ws(e));
}
void emit_conv_bwd_data(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_conv_bwd_data%s(c, %s%s, %s, %s, %s, %s);\n", tc(g), p_conv(e, n->p), tc_fmt(g),
          emit_in(e, 0), emit_in(e, 1), emit_out(e, 0), emit_ws(e));
}
void emit_conv_bwd_filter(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_conv_bwd_filter%s(c, %s%s, %s, %s, %s, %s);\n", tc(g), p_conv(e, n->p), tc_fmt(g),
          emit_in(e, 0), emit_in(e, 1), emit_out(e, 0), emit_ws(e));
}
void emit_conv_bwd_bias(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_conv_bwd_bias(c, %s, %s, %s);\n", p_conv_node(e, n->p), emit_in(e, 0), emit_out(e, 0));
}

void emit_batchnorm(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_bn_fwd_train(c, %s, %s, %s, %s, %s, %s, %s, %s, %s);\n", p_bn(e, n->p),
          emit_in(e, 0), emit_in(e, 1), emit_in(e, 2), emit_in(e, 3), emit_in(e, 4), emit_out(e, 0),
          emit_out(e, 1), emit_out(e, 2));
}
/* BN_SAVED (recomputation): inputs x, scale, bias, saved mean, saved invstd. */
void emit_bn_saved(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_bn_fwd_saved(c, %s, %s, %s, %s, %s, %s, %s);\n", p_bn(e, n->p), emit_in(e, 0),
          emit_in(e, 1), emit_in(e, 2), emit_in(e, 3), emit_in(e, 4), emit_out(e, 0));
}
void emit_bn_infer(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_bn_fwd_infer(c, %s, %s, %s, %s, %s, %s, %s);\n", p_bn(e, n->p), emit_in(e, 0),
          emit_in(e, 1), emit_in(e, 2), emit_in(e, 3), emit_in(e, 4), emit_out(e, 0));
}
/* BN_BWD: inputs x, dy, scale, saved mean, saved invstd; outputs dx, dscale, dbias. */
void emit_bn_bwd(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_bn_bwd(c, %s, %s, %s, %s, %s, %s, %s, %s, %s);\n", p_bn(e, n->p), emit_in(e, 0),
          emit_in(e, 1), emit_in(e, 2), emit_in(e, 3), emit_in(e, 4), emit_out(e, 0), emit_out(e, 1),
          emit_out(e, 2));
}

void emit_unary(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_unary_fwd(c, %s, %s, %s);\n", p_unary(e, n->p), emit_in(e, 0), emit_out(e, 0));
}
/* UNARY_BWD: inputs (x or y: aux = 1 when it is y), dy. */
void emit_unary_bwd(Emit *e, const Graph *g, const Node *n) {
  const char *v = emit_in(e, 0);
  fprintf(OUT, "  snrt_unary_bwd(c, %s, %s, %s, %s, %s);\n", p_unary(e, n->p), n->aux ? "NULL" : v,
          n->aux ? v : "NULL", emit_in(e, 1), emit_out(e, 0));
}

void emit_maxpool(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_maxpool_fwd(c, %s, %s, %s);\n", p_pool(e, n->p), emit_in(e, 0), emit_out(e, 0));
}
void emit_maxpool_bwd(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_maxpool_bwd(c, %s, %s, %s, %s);\n", p_pool(e, n->p), emit_in(e, 0), emit_in(e, 1),
          emit_out(e, 0));
}
void emit_avgpool(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_avgpool_fwd(c, %s, %s, %s);\n", p_pool(e, n->p), emit_in(e, 0), emit_out(e, 0));
}
void emit_avgpool_bwd(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_avgpool_bwd(c, %s, %s, %s);\n", p_pool(e, n->p), emit_in(e, 0), emit_out(e, 0));
}

void emit_lrn(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_lrn_fwd(c, %s, %s, %s);\n", p_lrn(e, n->p), emit_in(e, 0), emit_out(e, 0));
}
void emit_lrn_bwd(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_lrn_bwd(c, %s, %s, %s, %s, %s);\n", p_lrn(e, n->p), emit_in(e, 0), emit_in(e, 1),
          emit_in(e, 2), emit_out(e, 0));
}

/* Flatten, Reshape, Identity (and reshaped gradients): the same bytes. */
void emit_copy(Emit *e, const Graph *g, const Node *n) {
  /* A step on float32 copies (emit_convert.c) copies between them, a chunk
   * at a time. */
  int64_t bytes = e->chunk_elems ? 4 * e->chunk_elems
                  : e->wrapped ? 4 * tensor_numel(&g->t[n->out[0]]) : tensor_bytes(&g->t[n->out[0]]);
  fprintf(OUT, "  snrt_copy(c, %lld, %s, %s);\n", (long long)bytes,
          emit_in(e, 0), emit_out(e, 0));
}

/* The product; on tensor cores its output's format too (0: float32). */
static void matmul_call(Emit *e, const Graph *g, const Node *n, const snrt_mm_t *mm) {
  if (!*tc(g)) {
    fprintf(OUT, "  snrt_matmul(c, %s, %s, %s, %s);\n", p_mm(e, mm), emit_in(e, 0), emit_in(e, 1),
            emit_out(e, 0));
    return;
  }
  int dt = g->t[n->out[0]].dtype;
  fprintf(OUT, "  snrt_matmul16(c, %s%s, %s, %s, %s, %s);\n", p_mm(e, mm), tc_fmt(g), emit_in(e, 0),
          emit_in(e, 1), emit_out(e, 0), dt == DT_BFLOAT16 ? "SNRT_BF16" : dt == DT_FLOAT16 ? "SNRT_F16" : "0");
}

void emit_gemm(Emit *e, const Graph *g, const Node *n) {
  const GemmParams *gp = n->p;
  matmul_call(e, g, n, &gp->mm);
  if (!gp->has_c) return;
  int dt = g->t[n->out[0]].dtype;
  if (*tc(g) && (dt == DT_BFLOAT16 || dt == DT_FLOAT16))
    fprintf(OUT, "  snrt_bias_fwd16(c, %s%s, %s, %s);\n", p_bias(e, &gp->bias), tc_fmt(g), emit_in(e, 2),
            emit_out(e, 0));
  else
    fprintf(OUT, "  snrt_bias_fwd(c, %s, %s, %s);\n", p_bias(e, &gp->bias), emit_in(e, 2), emit_out(e, 0));
}
void emit_matmul(Emit *e, const Graph *g, const Node *n) { matmul_call(e, g, n, n->p); }
void emit_matmul_raw(Emit *e, const Graph *g, const Node *n) { emit_matmul(e, g, n); }
void emit_bias_bwd(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_bias_bwd(c, %s, %s, %s);\n", p_bias(e, n->p), emit_in(e, 0), emit_out(e, 0));
}

void emit_binary(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_binary_fwd(c, %s, %s, %s, %s);\n", p_binary(e, n->p), emit_in(e, 0),
          emit_in(e, 1), emit_out(e, 0));
}
/* BINARY_BWD: inputs a (or -1), b (or -1), dy; outputs da and/or db (aux bits 1, 2). */
void emit_binary_bwd(Emit *e, const Graph *g, const Node *n) {
  int k = 0;
  const char *da = (n->aux & 1) ? emit_out(e, k++) : "NULL";
  const char *db = (n->aux & 2) ? emit_out(e, k++) : "NULL";
  fprintf(OUT, "  snrt_binary_bwd(c, %s, %s, %s, %s, %s, %s);\n", p_binary(e, n->p), emit_in(e, 0),
          emit_in(e, 1), emit_in(e, 2), da, db);
}

void emit_reducemean(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_reduce(c, %s, %s, %s);\n", p_reduce(e, n->p), emit_in(e, 0), emit_out(e, 0));
}
void emit_reduce(Emit *e, const Graph *g, const Node *n) { emit_reducemean(e, g, n); }
/* REDUCE_BWD: inputs x, y, dy (ReduceMax, ReduceL2). */
void emit_reduce_bwd(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_reduce_bwd(c, %s, %s, %s, %s, %s);\n", p_reduce(e, n->p), emit_in(e, 0),
          emit_in(e, 1), emit_in(e, 2), emit_out(e, 0));
}
void emit_expand(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_expand(c, %s, %s, %s);\n", p_reduce(e, n->p), emit_in(e, 0), emit_out(e, 0));
}

void emit_concat(Emit *e, const Graph *g, const Node *n) {
  const char *p = p_concat(e, n->p);
  fprintf(OUT, "  snrt_concat(c, %s, (const float *const[]){", p);
  for (int k = 0; k < n->nin; k++) fprintf(OUT, "%s%s", k ? ", " : "", emit_in(e, k));
  fprintf(OUT, "}, %s);\n", emit_out(e, 0));
}
void emit_split(Emit *e, const Graph *g, const Node *n) {
  const char *p = p_concat(e, n->p);
  fprintf(OUT, "  snrt_split(c, %s, %s, (float *const[]){", p, emit_in(e, 0));
  for (int k = 0; k < n->nout; k++) fprintf(OUT, "%s%s", k ? ", " : "", emit_out(e, k));
  fprintf(OUT, "});\n");
}

void emit_slice(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_slice_fwd(c, %s, %s, %s);\n", p_slice(e, n->p), emit_in(e, 0), emit_out(e, 0));
}
void emit_slice_bwd(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_slice_bwd(c, %s, %s, %s);\n", p_slice(e, n->p), emit_in(e, 0), emit_out(e, 0));
}
void emit_pad(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_pad_fwd(c, %s, %s, %s);\n", p_pad(e, n->p), emit_in(e, 0), emit_out(e, 0));
}
void emit_pad_bwd(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_pad_bwd(c, %s, %s, %s);\n", p_pad(e, n->p), emit_in(e, 0), emit_out(e, 0));
}
void emit_transpose(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_transpose(c, %s, %s, %s);\n", p_transpose(e, n->p), emit_in(e, 0), emit_out(e, 0));
}
void emit_softmax(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_softmax_fwd(c, %s, %s, %s);\n", p_softmax(e, n->p), emit_in(e, 0), emit_out(e, 0));
}
void emit_softmax_bwd(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_softmax_bwd(c, %s, %s, %s, %s);\n", p_softmax(e, n->p), emit_in(e, 0),
          emit_in(e, 1), emit_out(e, 0));
}
void emit_dropout(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_dropout_fwd(c, %s, %s, %s);\n", p_dropout(e, n->p), emit_in(e, 0), emit_out(e, 0));
}
void emit_dropout_bwd(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_dropout_bwd(c, %s, %s, %s);\n", p_dropout(e, n->p), emit_in(e, 0), emit_out(e, 0));
}
void emit_accumulate(Emit *e, const Graph *g, const Node *n) {
  int64_t cnt = e->chunk_elems ? e->chunk_elems : tensor_numel(&g->t[n->out[0]]);
  fprintf(OUT, "  snrt_add(c, %lld, %s, %s, %s);\n", (long long)cnt,
          emit_in(e, 0), emit_in(e, 1), emit_out(e, 0));
}

void emit_softmax_ce(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_softmax_ce_fwd(c, %s, %s, %s, %s);\n", p_loss(e, n->p), emit_in(e, 0),
          emit_in(e, 1), emit_out(e, 0));
}
/* --precision fp16: the loss gradient times the loss scale (autodiff.c). */
static void loss_scale(Emit *e, const Graph *g, const Node *n) {
  if (g->precision == PREC_FP16)
    fprintf(OUT, "  snrt_loss_scale(c, %lld, %s);\n", (long long)tensor_numel(&g->t[n->out[0]]),
            emit_out(e, 0));
}

void emit_softmax_ce_bwd(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_softmax_ce_bwd(c, %s, %s, %s, %s);\n", p_loss(e, n->p), emit_in(e, 0),
          emit_in(e, 1), emit_out(e, 0));
  loss_scale(e, g, n);
}
/* Outputs: the loss, then dh and dW as need has them; in the eval graph the
 * per-row summary alone. */
void emit_lmhead_ce(Emit *e, const Graph *g, const Node *n) {
  (void)g;
  const snrt_lmce_t *p = n->p;
  char loss[64] = "NULL", dh[64] = "NULL", dw[64] = "NULL", rows[64] = "NULL";
  int k = 0;
  if (n->phase == PH_EVAL) snprintf(rows, sizeof rows, "%s", emit_out(e, k++));
  else snprintf(loss, sizeof loss, "%s", emit_out(e, k++));
  if (p->need & 1) snprintf(dh, sizeof dh, "%s", emit_out(e, k++));
  if (p->need & 2) snprintf(dw, sizeof dw, "%s", emit_out(e, k++));
  fprintf(OUT, "  snrt_lmce(c, %s, %s, %s, %s, %s, %s, %s, %s, %s);\n", p_lmce(e, n->p),
          emit_in(e, 0), emit_in(e, 1), emit_in(e, 2), loss, dh, dw, rows, emit_ws(e));
}
void emit_mse(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_mse_fwd(c, %s, %s, %s, %s);\n", p_loss(e, n->p), emit_in(e, 0), emit_in(e, 1),
          emit_out(e, 0));
}
void emit_mse_bwd(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_mse_bwd(c, %s, %s, %s, %s);\n", p_loss(e, n->p), emit_in(e, 0), emit_in(e, 1),
          emit_out(e, 0));
  loss_scale(e, g, n);
}

/* GRAD_UNSCALE: every parameter gradient, with its element count. */
void emit_grad_unscale(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_grad_unscale(c, %d, (float *const[]){", n->nin);
  for (int k = 0; k < n->nin; k++) fprintf(OUT, "%s%s", k ? ", " : "", emit_in(e, k));
  fprintf(OUT, "}, (const int64_t[]){");
  for (int k = 0; k < n->nin; k++)
    fprintf(OUT, "%s%lld", k ? ", " : "", (long long)tensor_numel(&g->t[n->in[k]]));
  fprintf(OUT, "});\n");
}

/* Updates: `param` is printed as the model-table index of the parameter. */
void emit_sgd(Emit *e, const Graph *g, const Node *n) {
  if (g->zero_ranks) {
    emit_zero_update(e, g, n);
    return;
  }
  const snrt_sgd_t *p = n->p;
  snprintf(pb, BUF, ".n = %lld, .momentum = %s, .weight_decay = %s, .dampening = %s, .nesterov = %d, .param = %d",
           (long long)p->n, emit_float(p->momentum), emit_float(p->weight_decay),
           emit_float(p->dampening), p->nesterov, e->table[p->param]);
  const char *ps = emit_params(e, p, "snrt_sgd_t", pb);
  /* (fp16: the runtime skips it in a step whose gradients overflowed.) */
  fprintf(OUT, "  snrt_sgd(c, %s, %s, %s, %s);\n", ps, emit_in(e, 0), emit_in(e, 1),
          n->nin > 2 ? emit_in(e, 2) : "NULL");
}
void emit_adam(Emit *e, const Graph *g, const Node *n) {
  if (g->zero_ranks) {
    emit_zero_update(e, g, n);
    return;
  }
  const snrt_adam_t *p = n->p;
  snprintf(pb, BUF, ".n = %lld, .beta1 = %s, .beta2 = %s, .eps = %s, .weight_decay = %s, .decoupled = %d, .param = %d",
           (long long)p->n, emit_float(p->beta1), emit_float(p->beta2), emit_float(p->eps),
           emit_float(p->weight_decay), p->decoupled, e->table[p->param]);
  const char *ps = emit_params(e, p, "snrt_adam_t", pb);
  fprintf(OUT, "  snrt_adam(c, %s, %s, %s, %s, %s);\n", ps, emit_in(e, 0), emit_in(e, 1),
          emit_in(e, 2), emit_in(e, 3));
}
