/* emit_seq.c — emitters of the transformer ops (shape_seq.c): elementwise
 * math, LayerNormalization, the embedding Gather, the masked-fill Where.
 * Expand (OP_BROADCAST) prints as snrt_expand (emit_ops.c).
 *
 * As in emit_ops.c: the params struct is declared once per pointer, the call
 * takes arena pointers of the plan's instances; constant index and mask
 * arrays are declared beside their struct. */
#include "emit_internal.h"

#include <stdlib.h>
#include <string.h>

#define BUF 1024
static char pb[BUF];

static const char *math_kinds[] = {"SNRT_SQRT", "SNRT_ERF", "SNRT_NEG", "SNRT_RECIPROCAL", "SNRT_POW",
                                   "SNRT_SIN", "SNRT_COS", "SNRT_EXP", "SNRT_LOG", "SNRT_ABS",
                                   "SNRT_HARDSIGMOID", "SNRT_HARDSWISH"};

static const char *p_math(Emit *e, const snrt_math_t *p) {
  int k = snprintf(pb, BUF, ".n = %lld, .kind = %s, .exponent = %s", (long long)p->n,
                   math_kinds[p->kind], emit_float(p->exponent));
  if (p->kind == SNRT_HARDSIGMOID)
    snprintf(pb + k, (size_t)(BUF - k), ", .alpha = %s, .beta = %s", emit_float(p->alpha),
             emit_float(p->beta));
  return emit_params(e, p, "snrt_math_t", pb);
}

static const char *p_ln(Emit *e, const snrt_ln_t *p) {
  snprintf(pb, BUF, ".rows = %lld, .cols = %lld, .eps = %s", (long long)p->rows, (long long)p->cols,
           emit_float(p->eps));
  return emit_params(e, p, "snrt_ln_t", pb);
}

/* A static const array of n integers (int32 or uint8), 16 a line. */
void emit_int_array(Emit *e, const char *type, const char *name, int64_t n, const void *v,
                    bool bytes) {
  fprintf(e->decl, "static const %s %s[%lld] = {", type, name, (long long)(n ? n : 1));
  for (int64_t i = 0; i < n; i++)
    fprintf(e->decl, "%s%s%d", i ? "," : "", i % 16 ? "" : "\n  ",
            bytes ? ((const uint8_t *)v)[i] : ((const int32_t *)v)[i]);
  fprintf(e->decl, "%s};\n", n ? "\n" : "0");
}

static const char *p_gather(Emit *e, const snrt_gather_t *p) {
  const char *have = emit_params_find(e, p);
  if (have) return have;
  char arr[64] = "NULL";
  if (p->idx) {
    snprintf(arr, sizeof arr, "P%d_idx", e->nparams);
    emit_int_array(e, "int32_t", arr, p->n_idx, p->idx, false);
  }
  int k = snprintf(pb, BUF, ".n_idx = %lld, .rows = %lld, .dim = %lld, .idx = %s",
                   (long long)p->n_idx, (long long)p->rows, (long long)p->dim, arr);
  if (p->outer > 1) snprintf(pb + k, (size_t)(BUF - k), ", .outer = %lld", (long long)p->outer);
  return emit_params(e, p, "snrt_gather_t", pb);
}

static const char *p_where(Emit *e, const snrt_where_t *p) {
  const char *have = emit_params_find(e, p);
  if (have) return have;
  char arr[64];
  snprintf(arr, sizeof arr, "P%d_fill", e->nparams);
  emit_int_array(e, "uint8_t", arr, p->inner, p->fill, true);
  snprintf(pb, BUF, ".n = %lld, .inner = %lld, .value = %s, .fill = %s", (long long)p->n,
           (long long)p->inner, emit_float(p->value), arr);
  return emit_params(e, p, "snrt_where_t", pb);
}

static const char *dlist(char *o, size_t cap, const int64_t *v, int n) {
  size_t len = (size_t)snprintf(o, cap, "{");
  for (int i = 0; i < n && len + 24 < cap; i++)
    len += (size_t)snprintf(o + len, cap - len, "%s%lld", i ? ", " : "", (long long)v[i]);
  snprintf(o + len, cap - len, "}");
  return o;
}

static const char *p_einsum(Emit *e, const snrt_einsum_t *p) {
  char d[3][256];
  snprintf(pb, BUF, ".rank = %d, .nout = %d, .n_out = %lld, .n_sum = %lld, .dims = %s, .sa = %s, "
           ".sb = %s", p->rank, p->nout, (long long)p->n_out, (long long)p->n_sum,
           dlist(d[0], sizeof d[0], p->dims, p->rank), dlist(d[1], sizeof d[1], p->sa, p->rank),
           dlist(d[2], sizeof d[2], p->sb, p->rank));
  return emit_params(e, p, "snrt_einsum_t", pb);
}

static const char *p_take(Emit *e, const snrt_take_t *p) {
  const char *have = emit_params_find(e, p);
  if (have) return have;
  char a[3][64];
  const char *suf[3] = {"src", "start", "inv"};
  const int32_t *v[3] = {p->src, p->inv_start, p->inv};
  int64_t cnt[3] = {p->n_out, p->n_in + 1, p->n_out};
  for (int k = 0; k < 3; k++) {
    snprintf(a[k], sizeof a[k], "P%d_%s", e->nparams, suf[k]);
    emit_int_array(e, "int32_t", a[k], cnt[k], v[k], false);
  }
  snprintf(pb, BUF, ".n_in = %lld, .n_out = %lld, .src = %s, .inv_start = %s, .inv = %s",
           (long long)p->n_in, (long long)p->n_out, a[0], a[1], a[2]);
  return emit_params(e, p, "snrt_take_t", pb);
}

#define OUT e->f

static const char *p_where3(Emit *e, const snrt_where3_t *p) {
  char d[4][256];
  snprintf(pb, BUF, ".rank = %d, .n = %lld, .na = %lld, .nb = %lld, .dims = %s, .sc = %s, .sa = %s, "
           ".sb = %s", p->rank, (long long)p->n, (long long)p->na, (long long)p->nb,
           dlist(d[0], sizeof d[0], p->dims, p->rank), dlist(d[1], sizeof d[1], p->sc, p->rank),
           dlist(d[2], sizeof d[2], p->sa, p->rank), dlist(d[3], sizeof d[3], p->sb, p->rank));
  return emit_params(e, p, "snrt_where3_t", pb);
}

/* WHERE_DATA: inputs cond (bytes), a, b. WHERE_DATA_BWD: inputs cond, dy;
 * outputs da and/or db (aux bits 1, 2). */
void emit_where_data(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_where3_fwd(c, %s, (const uint8_t *)%s, %s, %s, %s);\n", p_where3(e, n->p),
          emit_in(e, 0), emit_in(e, 1), emit_in(e, 2), emit_out(e, 0));
}
void emit_where_data_bwd(Emit *e, const Graph *g, const Node *n) {
  int k = 0;
  const char *da = (n->aux & 1) ? emit_out(e, k++) : "NULL";
  const char *db = (n->aux & 2) ? emit_out(e, k++) : "NULL";
  fprintf(OUT, "  snrt_where3_bwd(c, %s, (const uint8_t *)%s, %s, %s, %s);\n", p_where3(e, n->p),
          emit_in(e, 0), emit_in(e, 1), da, db);
}

/* GATHERELEMENTS: input x (the indices are in the params); TAKE_BWD: input dy. */
void emit_take(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_take_fwd(c, %s, %s, %s);\n", p_take(e, n->p), emit_in(e, 0), emit_out(e, 0));
}
void emit_take_bwd(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_take_bwd(c, %s, %s, %s);\n", p_take(e, n->p), emit_in(e, 0), emit_out(e, 0));
}

/* EINSUM (forward, and the gradients' forms: inputs dy and the other operand). */
void emit_einsum(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_einsum(c, %s, %s, %s, %s);\n", p_einsum(e, n->p), emit_in(e, 0), emit_in(e, 1),
          emit_out(e, 0));
}

void emit_math(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_math_fwd(c, %s, %s, %s);\n", p_math(e, n->p), emit_in(e, 0), emit_out(e, 0));
}
/* MATH_BWD: inputs (x, y or none: aux = 1 when it is y), dy. */
void emit_math_bwd(Emit *e, const Graph *g, const Node *n) {
  const char *v = emit_in(e, 0);
  fprintf(OUT, "  snrt_math_bwd(c, %s, %s, %s, %s, %s);\n", p_math(e, n->p), n->aux ? "NULL" : v,
          n->aux ? v : "NULL", emit_in(e, 1), emit_out(e, 0));
}

/* FUSED: the program's params, its inputs as an array. */
static const char *p_fused(Emit *e, const snrt_fused_t *p) {
  int k = snprintf(pb, BUF, ".n = %lld, .nin = %d, .nops = %d, .need = %d, .have = %d, .use_y = %d, "
                   ".ops = {", (long long)p->n, p->nin, p->nops, p->need, p->have, p->use_y);
  for (int j = 0; j < p->nops && k < BUF; j++)
    k += snprintf(pb + k, (size_t)(BUF - k), "%s{%d, %d, %d, %s}", j ? ", " : "", p->ops[j].op,
                  p->ops[j].a, p->ops[j].b, emit_float(p->ops[j].imm));
  if (k < BUF) snprintf(pb + k, (size_t)(BUF - k), "}");
  if (k >= BUF - 2) internal_error(__FILE__, __LINE__, "fused params longer than %d", BUF);
  return emit_params(e, p, "snrt_fused_t", pb);
}

/* "(const float *const[]){a, b}" for inputs [0, nin). */
static void fused_ins(Emit *e, const Node *n, int nin) {
  fprintf(OUT, "(const float *const[]){");
  for (int k = 0; k < nin; k++) fprintf(OUT, "%s%s", k ? ", " : "", emit_in(e, k));
  fprintf(OUT, "}");
}

void emit_fused(Emit *e, const Graph *g, const Node *n) {
  (void)g;
  fprintf(OUT, "  snrt_fused_fwd(c, %s, ", p_fused(e, n->p));
  fused_ins(e, n, n->nin);
  fprintf(OUT, ", %s);\n", emit_out(e, 0));
}
/* FUSED_BWD: inputs the forward's (-1 where not read), y (or -1), dy;
 * outputs the needed gradients. A carrier (aux 1, compiler/plan/recompute.c)
 * has every input and one more output: the chain's y, rebuilt. */
void emit_fused_bwd(Emit *e, const Graph *g, const Node *n) {
  (void)g;
  int ndx = n->aux ? n->nout - 1 : n->nout;
  fprintf(OUT, "  snrt_fused_bwd%s(c, %s, ", n->aux ? "_y" : "", p_fused(e, n->p));
  fused_ins(e, n, n->nin - 2);
  if (!n->aux) fprintf(OUT, ", %s", emit_in(e, n->nin - 2));
  fprintf(OUT, ", %s, (float *const[]){", emit_in(e, n->nin - 1));
  for (int k = 0; k < ndx; k++) fprintf(OUT, "%s%s", k ? ", " : "", emit_out(e, k));
  fprintf(OUT, "}%s%s);\n", n->aux ? ", " : "", n->aux ? emit_out(e, ndx) : "");
}

/* LAYERNORM: inputs x, scale, bias (optional); outputs y, saved mean, saved
 * 1/std (training; absent in the eval graph). */
void emit_layernorm(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_ln_fwd(c, %s, %s, %s, %s, %s, %s, %s);\n", p_ln(e, n->p), emit_in(e, 0),
          emit_in(e, 1), emit_in(e, 2), emit_out(e, 0), emit_out(e, 1), emit_out(e, 2));
}
/* LN_BWD: inputs x, dy, scale, saved mean, saved 1/std; outputs dx, dscale, dbias. A
 * carrier (aux 1, compiler/plan/recompute.c): the bias as a sixth input, y as a fourth output. */
void emit_ln_bwd(Emit *e, const Graph *g, const Node *n) {
  if (n->aux) {
    fprintf(OUT, "  snrt_ln_bwd_y(c, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s);\n", p_ln(e, n->p),
            emit_in(e, 0), emit_in(e, 1), emit_in(e, 2), emit_in(e, 5), emit_in(e, 3), emit_in(e, 4),
            emit_out(e, 0), emit_out(e, 1), emit_out(e, 2), emit_out(e, 3));
    return;
  }
  fprintf(OUT, "  snrt_ln_bwd(c, %s, %s, %s, %s, %s, %s, %s, %s, %s);\n", p_ln(e, n->p),
          emit_in(e, 0), emit_in(e, 1), emit_in(e, 2), emit_in(e, 3), emit_in(e, 4), emit_out(e, 0),
          emit_out(e, 1), emit_out(e, 2));
}

/* GATHER: inputs table, indices (NULL when constant: in the params). */
void emit_gather(Emit *e, const Graph *g, const Node *n) {
  const snrt_gather_t *p = n->p;
  fprintf(OUT, "  snrt_gather_fwd(c, %s, %s, %s, %s);\n", p_gather(e, p), emit_in(e, 0),
          p->idx ? "NULL" : emit_in(e, 1), emit_out(e, 0));
}
/* GATHER_BWD: inputs indices (or -1), dy; output the table's gradient. */
void emit_gather_bwd(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_gather_bwd(c, %s, %s, %s, %s);\n", p_gather(e, n->p), emit_in(e, 0),
          emit_in(e, 1), emit_out(e, 0));
}

/* WHERE: the data branch is input aux (1 or 2); its gradient node has dy at 1. */
void emit_where(Emit *e, const Graph *g, const Node *n) {
  fprintf(OUT, "  snrt_where(c, %s, %s, %s);\n", p_where(e, n->p), emit_in(e, n->aux), emit_out(e, 0));
}
