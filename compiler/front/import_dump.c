/* import_dump.c — `snc inspect MODEL --dump import`: the import pass's debug
 * view, the IR as import leaves it (before shape inference).
 *
 * One line per tensor, then one per node; fields are `key=value`, names in
 * single quotes, so tests can read it with a regular expression:
 *   tensor 3 'conv.weight' kind=param dtype=float32 shape=(8, 1, 3, 3) init=file
 *          data=72 values=[0.1, ...]                       (one line)
 *   node 0 'conv1' op=Conv in=['x', 'conv.weight', -] out=['y'] attrs={group=1, ...}
 * Shapes are declared shapes: -1 is an unknown dim, "?" an unknown rank. At
 * most 8 values of a tensor's data are printed. Not a stable format for users
 * (that is `snc inspect --json`). */
#include "import.h"

static const char *init_name(int init) {
  static const char *names[] = {"none", "file", "zero", "one", "kaiming", "bias"};
  return init >= 0 && init < (int)(sizeof names / sizeof names[0]) ? names[init] : "?";
}

static void print_value(FILE *f, int dtype, const void *data, int64_t i) {
  switch (dtype) {
  case DT_FLOAT: fprintf(f, "%.9g", ((const float *)data)[i]); break;
  case DT_DOUBLE: fprintf(f, "%.17g", ((const double *)data)[i]); break;
  case DT_INT64: fprintf(f, "%lld", (long long)((const int64_t *)data)[i]); break;
  case DT_UINT64: fprintf(f, "%llu", (unsigned long long)((const uint64_t *)data)[i]); break;
  case DT_INT32: fprintf(f, "%d", ((const int32_t *)data)[i]); break;
  case DT_UINT32: fprintf(f, "%u", ((const uint32_t *)data)[i]); break;
  case DT_INT16: fprintf(f, "%d", ((const int16_t *)data)[i]); break;
  case DT_UINT16: case DT_FLOAT16: case DT_BFLOAT16:
    fprintf(f, "%u", ((const uint16_t *)data)[i]); break;  // 16-bit floats: their bits
  case DT_INT8: fprintf(f, "%d", ((const int8_t *)data)[i]); break;
  default: fprintf(f, "%u", ((const uint8_t *)data)[i]); break;
  }
}

static void print_shape(FILE *f, const Tensor *t) {
  if (t->rank < 0) fputs("?", f);
  else fputs(shape_str(t), f);
}

static void print_tensor(FILE *f, const Graph *g, int i) {
  const Tensor *t = &g->t[i];
  fprintf(f, "tensor %d '%s' kind=%s dtype=%s shape=", i, imp_esc(t->name),
          tensor_kind_name(t->kind), dtype_name(t->dtype));
  print_shape(f, t);
  fprintf(f, " init=%s", init_name(t->init));
  if (t->init == SNRT_INIT_KAIMING || t->init == SNRT_INIT_BIAS)
    fprintf(f, " fan_in=%lld", (long long)t->fan_in);
  if (t->producer >= 0) fprintf(f, " producer=%d", t->producer);
  if (t->is_output) fputs(" output", f);
  if (t->data) {
    fprintf(f, " data=%lld values=[", (long long)t->ndata);
    for (int64_t j = 0; j < t->ndata && j < 8; j++) {
      if (j) fputs(", ", f);
      print_value(f, t->dtype, t->data, j);
    }
    fputs(t->ndata > 8 ? ", ...]" : "]", f);
  }
  fputc('\n', f);
}

static void print_attr(FILE *f, const Graph *g, const Attr *a) {
  fprintf(f, "%s=", a->name);
  switch (a->type) {
  case AT_FLOAT: fprintf(f, "%.9g", a->f); break;
  case AT_INT: fprintf(f, "%lld", (long long)a->i); break;
  case AT_STRING: fprintf(f, "\"%s\"", imp_esc(a->s)); break;
  case AT_TENSOR: fprintf(f, "tensor '%s'", imp_esc(g->t[a->tensor].name)); break;
  case AT_INTS: case AT_FLOATS:
    fputc('[', f);
    for (int j = 0; j < a->n && j < 16; j++) {
      if (j) fputs(", ", f);
      if (a->type == AT_INTS) fprintf(f, "%lld", (long long)a->ints[j]);
      else fprintf(f, "%.9g", a->floats[j]);
    }
    fputs(a->n > 16 ? ", ...]" : "]", f);
    break;
  default: fputs("?", f); break;
  }
}

static void print_names(FILE *f, const Graph *g, const int *idx, int n) {
  fputc('[', f);
  for (int j = 0; j < n; j++) {
    if (j) fputs(", ", f);
    if (idx[j] < 0) fputc('-', f);
    else fprintf(f, "'%s'", imp_esc(g->t[idx[j]].name));
  }
  fputc(']', f);
}

void import_dump(const Graph *g, FILE *f) {
  fprintf(f, "graph '%s' opset=%lld tensors=%d nodes=%d input='%s' output='%s'\n",
          imp_esc(g->name ? g->name : ""), (long long)g->opset, g->nt, g->nn,
          g->input >= 0 ? imp_esc(g->t[g->input].name) : "",
          g->output >= 0 ? imp_esc(g->t[g->output].name) : "");
  for (int i = 0; i < g->nt; i++) print_tensor(f, g, i);
  for (int i = 0; i < g->nn; i++) {
    const Node *n = &g->n[i];
    fprintf(f, "node %d '%s' op=%s in=", i, imp_esc(n->name), op_name(n->op));
    print_names(f, g, n->in, n->nin);
    fputs(" out=", f);
    print_names(f, g, n->out, n->nout);
    fputs(" attrs={", f);
    for (int j = 0; j < n->nattr; j++) {
      if (j) fputs(", ", f);
      print_attr(f, g, &n->attrs[j]);
    }
    fputs("}\n", f);
  }
}
