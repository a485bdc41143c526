/* inspect.c — `snc inspect`: the shape-inferred forward graph, node by node,
 * and a summary (nodes, trainable parameters, activation bytes at the batch,
 * forward FLOPs); or the same as JSON (docs/reference.md, `--json`).
 * Reads the graph only; runs after shape_infer(). */
#include "front.h"

#include <string.h>

static int forward_nodes(const Graph *g) { return g->nfwd ? g->nfwd : g->nn; }

static void param_totals(const Graph *g, int64_t *count, int64_t *bytes) {
  *count = *bytes = 0;
  for (int i = 0; i < g->nt; i++)
    if (g->t[i].kind == TK_PARAM && g->t[i].rank >= 0) {
      *count += tensor_numel(&g->t[i]);
      *bytes += tensor_bytes(&g->t[i]);
    }
}

/* Forward activations: the data input and every node output that is one. */
static int64_t activation_bytes(const Graph *g) {
  int64_t b = 0;
  for (int i = 0; i < g->nt; i++)
    if ((g->t[i].kind == TK_ACT || g->t[i].kind == TK_INPUT) && g->t[i].rank >= 0)
      b += tensor_bytes(&g->t[i]);
  return b;
}

void inspect_print(const Graph *g, FILE *f) {
  int nf = forward_nodes(g);
  fprintf(f, "%s: opset %lld, batch %d\n", g->path ? g->path : "model", (long long)g->opset,
          g->batch);
  for (int i = 0; i < nf; i++) {
    const Node *n = &g->n[i];
    fprintf(f, "%4d  %-24s %-18s (", i, n->name, op_name(n->op));
    for (int j = 0; j < n->nin; j++)
      fprintf(f, "%s%s", j ? ", " : "", n->in[j] >= 0 ? g->t[n->in[j]].name : "-");
    fprintf(f, ") ->");
    for (int j = 0; j < n->nout; j++)
      if (n->out[j] >= 0) {
        const Tensor *t = &g->t[n->out[j]];
        fprintf(f, " %s %s", t->name, shape_str(t));
      }
    fprintf(f, "\n");
  }
  int64_t pc, pb;
  param_totals(g, &pc, &pb);
  fprintf(f, "nodes: %d\n", nf);
  if (g->batch_reshapes)
    fprintf(f, "note: %d shape target%s or constant%s (Reshape, Expand, ConstantOfShape, Tile) held the export "
            "batch %d; they follow --batch %d\n", g->batch_reshapes, g->batch_reshapes == 1 ? "" : "s", g->batch_reshapes == 1 ? "" : "s",
            g->export_batch, g->batch);
  fprintf(f, "trainable parameters: %lld (%s)\n", (long long)pc, fmt_bytes(pb));
  fprintf(f, "activation bytes at batch %d: %s\n", g->batch, fmt_bytes(activation_bytes(g)));
  fprintf(f, "forward GFLOPs: %.3f\n", graph_forward_flops(g) / 1e9);
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    switch (*c) {
    case '"': fputs("\\\"", f); break;
    case '\\': fputs("\\\\", f); break;
    case '\n': fputs("\\n", f); break;
    case '\r': fputs("\\r", f); break;
    case '\t': fputs("\\t", f); break;
    case '\b': fputs("\\b", f); break;
    case '\f': fputs("\\f", f); break;
    default:
      if (*c < 0x20 || *c == 0x7f) fprintf(f, "\\u%04x", *c);
      else fputc(*c, f);   /* UTF-8 passes through; JSON allows it */
    }
  }
  fputc('"', f);
}

void inspect_json(const Graph *g, FILE *f) {
  int nf = forward_nodes(g);
  fputs("{\"nodes\": [", f);
  for (int i = 0; i < nf; i++) {
    const Node *n = &g->n[i];
    fputs(i ? ",\n  {\"name\": " : "\n  {\"name\": ", f);
    json_string(f, n->name);
    fputs(", \"op\": ", f);
    json_string(f, op_name(n->op));
    fputs(", \"inputs\": [", f);
    for (int j = 0; j < n->nin; j++) {
      if (j) fputs(", ", f);
      json_string(f, n->in[j] >= 0 ? g->t[n->in[j]].name : "");   /* "": absent, as ONNX */
    }
    fputs("], \"outputs\": [", f);
    bool first = true;
    for (int j = 0; j < n->nout; j++) {
      if (n->out[j] < 0) continue;
      const Tensor *t = &g->t[n->out[j]];
      fputs(first ? "{\"name\": " : ", {\"name\": ", f);
      first = false;
      json_string(f, t->name);
      fputs(", \"shape\": [", f);
      for (int d = 0; d < t->rank; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)t->dims[d]);
      fputs("], \"dtype\": ", f);
      json_string(f, dtype_name(t->dtype));
      fputc('}', f);
    }
    fputs("]}", f);
  }
  int64_t pc, pb;
  param_totals(g, &pc, &pb);
  fprintf(f, "\n ], \"params\": %lld, \"param_bytes\": %lld, \"flops\": %.0f}\n", (long long)pc,
          (long long)pb, graph_forward_flops(g));
}
