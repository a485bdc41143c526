/* import.c — the import pass: an ONNX model file -> the forward IR graph.
 *
 * Requires: nothing (the first pass). Produces a Graph whose
 *   - tensors carry dtype, the declared shape of graph inputs (a symbolic or
 *     missing dim is -1; --batch replaces dim 0 of the data input later) and
 *     the shape of initializers, a kind (input, param, state, const, act),
 *     has_init/init/fan_in, data for initializers and folded constants, and
 *     producer (the node writing it, -1 for none);
 *   - nodes are the ops that contribute to the first graph output, in
 *     topological order, with typed attributes; Constant nodes are folded into
 *     TK_CONST tensors; g->nfwd = g->nn.
 * Not here: shapes of activations and node params (shape.c).
 *
 * Every model fault is one line through fatal()/node_error(). All work is
 * linear in the file size (plus a heap for the topological order), and no
 * allocation exceeds what the file itself justifies: element counts are
 * checked against the data the file carries before anything is allocated. */
#include "import.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Reading the file. 4 GiB is twice protobuf's own message limit; bigger
 * models keep their weights in external data. */
#define IMP_MAX_FILE ((int64_t)4 << 30)

static unsigned char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) fatal(EXIT_BADINPUT, "cannot open the model: %s", strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
    fatal(EXIT_BADINPUT, "cannot read the model: not a regular file");
  if (fseeko(f, 0, SEEK_END) != 0) fatal(EXIT_BADINPUT, "cannot read the model: %s", strerror(errno));
  int64_t size = ftello(f);
  if (size < 0) fatal(EXIT_BADINPUT, "cannot read the model: %s", strerror(errno));
  if (size == 0) fatal(EXIT_BADINPUT, "the model file is empty");
  if (size > IMP_MAX_FILE)
    fatal(EXIT_BADINPUT, "the model file is %s; snc reads models up to 4 GiB (store large "
          "tensors as external data)", fmt_bytes(size));
  unsigned char *buf = xmalloc((size_t)size);
  if (fseeko(f, 0, SEEK_SET) != 0 || fread(buf, 1, (size_t)size, f) != (size_t)size)
    fatal(EXIT_BADINPUT, "cannot read the model: %s", ferror(f) ? strerror(errno) : "short read");
  fclose(f);
  *len = (size_t)size;
  return buf;
}

static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return xstrdup(".");
  if (slash == path) return xstrdup("/");
  return xasprintf("%.*s", (int)(slash - path), path);
}

static int64_t default_opset(const SncOnnx__ModelProto *m) {
  int64_t opset = -1;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const char *d = imp_str(m->opset_import[i]->domain);
    if ((!*d || strcmp(d, "ai.onnx") == 0) && m->opset_import[i]->has_version)
      opset = m->opset_import[i]->version;
  }
  if (opset < 0) fatal(EXIT_BADINPUT, "the model declares no opset for the default ONNX domain");
  /* 28: the newest that onnx 1.23 defines. From 22 on, the ops snc reads
   * changed only in the types they accept (bfloat16, 4-bit and float8
   * types, which import refuses by dtype). */
  if (opset < 7 || opset > IMP_MAX_OPSET)
    fatal(EXIT_BADINPUT, "opset %lld is not supported (snc reads opsets 7 to %d)", (long long)opset,
          IMP_MAX_OPSET);
  return opset;
}

static bool default_domain(const SncOnnx__NodeProto *np) {
  const char *d = imp_str(np->domain);
  return !*d || strcmp(d, "ai.onnx") == 0;
}

/* The IR op of an ONNX op_type: its ops.h row, else OP_EVAL when eval.c's
 * table evaluates it (*ev: that row), else -1. */
static int import_op(const char *op_type, int *ev) {
  int op = op_from_onnx(op_type), k = op < 0 ? eval_find(op_type) : -1;
  if (ev) *ev = k;
  return op >= 0 ? op : k >= 0 ? OP_EVAL : -1;
}

/* Every unsupported op of the model in one message: a user fixing an export
 * wants the whole list at once. Distinct op types are listed (up to 16, each
 * with its first node), then the count of nodes. */
static void check_ops(const SncOnnx__GraphProto *gp) {
  enum { MAXLIST = 16 };
  const SncOnnx__NodeProto *first[MAXLIST];
  int ntypes = 0;
  int64_t nbad = 0;
  for (size_t k = 0; k < gp->n_node; k++) {
    const SncOnnx__NodeProto *np = gp->node[k];
    if (default_domain(np) && import_op(imp_str(np->op_type), NULL) >= 0) continue;
    nbad++;
    bool seen = false;
    for (int j = 0; j < ntypes && !seen; j++)
      seen = strcmp(imp_str(first[j]->op_type), imp_str(np->op_type)) == 0 &&
             strcmp(imp_str(first[j]->domain), imp_str(np->domain)) == 0;
    if (!seen && ntypes < MAXLIST) first[ntypes++] = np;
  }
  if (!nbad) return;
  char msg[4096];
  size_t o = 0;
  for (int j = 0; j < ntypes && o < sizeof msg - 400; j++) {
    const char *d = imp_str(first[j]->domain);
    o += (size_t)snprintf(msg + o, sizeof msg - o, "%s%s%s%s (node '%s')", j ? ", " : "",
                          default_domain(first[j]) ? "" : imp_esc(d),
                          default_domain(first[j]) ? "" : ":", imp_esc(imp_str(first[j]->op_type)),
                          imp_esc(imp_str(first[j]->name)));
  }
  fatal(EXIT_BADINPUT, "unsupported op%s: %s%s (%lld node%s in all)", ntypes > 1 ? "s" : "", msg,
        ntypes == MAXLIST ? ", ..." : "", (long long)nbad, nbad > 1 ? "s" : "");
}

/* A graph input's declared element type and shape (-1: unknown dim; rank -1:
 * no shape declared). */
static void declared_type(const SncOnnx__ValueInfoProto *vi, const char *name, int *dtype,
                          int *rank, int64_t *dims) {
  *dtype = DT_UNDEF;
  *rank = -1;
  const SncOnnx__TypeProto *ty = vi->type;
  if (!ty) return;
  if (ty->value_case != SNC_ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE)
    fatal(EXIT_BADINPUT, "graph input '%s' is not a tensor", imp_esc(name));
  const SncOnnx__TypeProto__Tensor *tt = ty->tensor_type;
  if (tt->has_elem_type) *dtype = tt->elem_type;
  if (!tt->shape) return;
  if (tt->shape->n_dim > MAX_RANK)
    fatal(EXIT_BADINPUT, "graph input '%s' has rank %zu (at most %d supported)", imp_esc(name),
          tt->shape->n_dim, MAX_RANK);
  for (size_t i = 0; i < tt->shape->n_dim; i++) {
    const SncOnnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
    dims[i] = -1;
    if (d->value_case == SNC_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (d->dim_value < 0 || d->dim_value > IMP_MAX_DIM)
        fatal(EXIT_BADINPUT, "graph input '%s' has dimension %lld (must be in [0, 2^40])",
              imp_esc(name), (long long)d->dim_value);
      dims[i] = d->dim_value;
    }
  }
  *rank = (int)tt->shape->n_dim;
}

static void add_initializers(Graph *g, const SncOnnx__GraphProto *gp, const char *dir) {
  for (size_t i = 0; i < gp->n_initializer; i++) {
    const SncOnnx__TensorProto *tp = gp->initializer[i];
    const char *name = imp_str(tp->name);
    if (!*name) fatal(EXIT_BADINPUT, "initializer %zu has no name", i);
    imp_check_name(name, "initializer");
    /* Float initializers are parameters unless a node reads them as a
     * constant (assign_kinds); every other dtype is a constant. */
    int dt = tp->has_data_type ? tp->data_type : DT_UNDEF;
    imp_tensor_from_proto(g, tp, name, dt == DT_FLOAT ? TK_PARAM : TK_CONST, dir);
  }
}

/* onnx_import_whole(): every graph output kept, no data input needed. */
static bool imp_whole;

/* Graph inputs; those with an initializer (IR < 4 lists them) are already
 * tensors. Returns the data input. */
static int add_inputs(Graph *g, const SncOnnx__GraphProto *gp, const char *input_name) {
  int data = -1;
  for (size_t i = 0; i < gp->n_input; i++) {
    const char *name = imp_str(gp->input[i]->name);
    if (!*name) fatal(EXIT_BADINPUT, "graph input %zu has no name", i);
    imp_check_name(name, "graph input");
    int dtype, rank;
    int64_t dims[MAX_RANK];
    declared_type(gp->input[i], name, &dtype, &rank, dims);
    int t = graph_find_tensor(g, name);
    if (t >= 0 && !g->t[t].has_init) fatal(EXIT_BADINPUT, "graph input '%s' is listed twice", imp_esc(name));
    if (t >= 0) {
      if (dtype != DT_UNDEF && dtype != g->t[t].dtype)
        fatal(EXIT_BADINPUT, "graph input '%s' is declared %s but its initializer is %s",
              imp_esc(name), dtype_name(dtype), dtype_name(g->t[t].dtype));
      if (input_name && strcmp(input_name, name) == 0)
        fatal(EXIT_BADINPUT, "graph input '%s' has an initializer, so it cannot be the data input",
              imp_esc(name));
      continue;
    }
    /* Provisionally a parameter: assign_kinds() settles it. */
    t = graph_add_tensor(g, name, dtype, TK_PARAM);
    if (rank >= 0) tensor_set_shape(&g->t[t], rank, dims);
    if (data < 0 && (!input_name || strcmp(input_name, name) == 0)) data = t;
  }
  if (data < 0 && imp_whole && !input_name) return -1;
  if (data < 0) {
    if (input_name) fatal(EXIT_BADINPUT, "the model has no graph input named '%s'", imp_esc(input_name));
    fatal(EXIT_BADINPUT, "the model has no data input (every graph input has an initializer)");
  }
  Tensor *d = &g->t[data];
  if (dtype_size(d->dtype) == 0)
    fatal(EXIT_BADINPUT, "data input '%s' has no supported element type (%s)", imp_esc(d->name),
          dtype_name(d->dtype));
  d->kind = TK_INPUT;
  return data;
}

/* ---- nodes ---- */

/* A stand-in Node for messages about a NodeProto before it is in the graph. */
static Node proto_node(const SncOnnx__NodeProto *np, OpKind op) {
  return (Node){.name = (char *)imp_str(np->name), .op = op};
}

/* An output tensor of node proto k. While reading nodes, Tensor.producer holds
 * the index of the NodeProto writing it (so a second writer can be named);
 * add_nodes() replaces it with the IR node. */
static void check_fresh_output(Graph *g, const SncOnnx__GraphProto *gp, size_t k,
                               const char *name, OpKind op) {
  Node tmp = proto_node(gp->node[k], op);
  imp_check_name(name, "tensor");
  int t = graph_find_tensor(g, name);
  if (t >= 0 && g->t[t].producer >= 0)
    node_error(&tmp, "output '%s' is also written by node '%s'", imp_esc(name),
               imp_esc(imp_str(gp->node[g->t[t].producer]->name)));
  if (t >= 0) node_error(&tmp, "output '%s' has the name of a graph input or initializer", imp_esc(name));
}

static void new_output(Graph *g, const SncOnnx__GraphProto *gp, size_t k, const char *name,
                       OpKind op) {
  check_fresh_output(g, gp, k, name, op);
  int t = graph_add_tensor(g, name, DT_UNDEF, TK_ACT);
  g->t[t].producer = (int)k;
}

/* Constant -> a TK_CONST tensor with data, named after its output. */
static void fold_constant(Graph *g, const SncOnnx__GraphProto *gp, size_t k, const char *dir) {
  const SncOnnx__NodeProto *np = gp->node[k];
  Node tmp = proto_node(np, OP_CONSTANT);
  if (np->n_input) node_error(&tmp, "a Constant takes no inputs");
  if (np->n_output != 1 || !*imp_str(np->output[0])) node_error(&tmp, "a Constant has one output");
  if (np->n_attribute != 1) node_error(&tmp, "a Constant needs exactly one value attribute");
  const char *out = np->output[0];
  check_fresh_output(g, gp, k, out, OP_CONSTANT);
  const SncOnnx__AttributeProto *a = np->attribute[0];
  const char *an = imp_str(a->name);
  int t;
  if (strcmp(an, "value") == 0) {
    if (!a->t) node_error(&tmp, "attribute 'value' holds no tensor");
    t = imp_tensor_from_proto(g, a->t, out, TK_CONST, dir);
  } else if (strcmp(an, "value_float") == 0 || strcmp(an, "value_int") == 0) {
    bool isf = an[6] == 'f';
    t = graph_add_tensor(g, out, isf ? DT_FLOAT : DT_INT64, TK_CONST);
    tensor_set_shape(&g->t[t], 0, NULL);
    void *d = xmalloc(8);
    if (isf) *(float *)d = a->f;
    else *(int64_t *)d = a->i;
    g->t[t].data = d;
    g->t[t].ndata = 1;
  } else if (strcmp(an, "value_floats") == 0 || strcmp(an, "value_ints") == 0) {
    bool isf = an[6] == 'f';
    size_t n = isf ? a->n_floats : a->n_ints;
    int64_t dim = (int64_t)n;
    t = graph_add_tensor(g, out, isf ? DT_FLOAT : DT_INT64, TK_CONST);
    tensor_set_shape(&g->t[t], 1, &dim);
    void *d = xmalloc(n * (isf ? sizeof(float) : sizeof(int64_t)));
    if (n) memcpy(d, isf ? (void *)a->floats : (void *)a->ints, n * (isf ? sizeof(float) : sizeof(int64_t)));
    g->t[t].data = d;
    g->t[t].ndata = dim;
  } else {
    node_error(&tmp, "Constant attribute '%s' is not supported", imp_esc(an));
  }
  g->t[t].has_init = true;
  g->t[t].producer = (int)k;  // for duplicate-writer messages; reset in add_nodes()
}

static int infer_attr_type(const SncOnnx__AttributeProto *a) {
  if (a->t) return AT_TENSOR;
  if (a->n_floats) return AT_FLOATS;
  if (a->n_ints) return AT_INTS;
  if (a->has_s) return AT_STRING;
  if (a->has_f) return AT_FLOAT;
  if (a->has_i) return AT_INT;
  return AT_UNDEF;
}

static void parse_attrs(Graph *g, int ni, const SncOnnx__NodeProto *np, const char *dir) {
  if (np->n_attribute > IMP_MAX_ATTRS)
    node_error(&g->n[ni], "has %zu attributes (at most %d)", np->n_attribute, IMP_MAX_ATTRS);
  Attr *attrs = xcalloc(np->n_attribute, sizeof(Attr));
  g->n[ni].attrs = attrs;
  for (size_t j = 0; j < np->n_attribute; j++) {
    const SncOnnx__AttributeProto *a = np->attribute[j];
    Attr *at = &attrs[j];
    const char *name = imp_str(a->name);
    Node *n = &g->n[ni];
    if (!*name) node_error(n, "attribute %zu has no name", j);
    imp_check_name(name, "attribute");
    at->name = xstrdup(name);
    at->type = a->has_type ? (int)a->type : infer_attr_type(a);
    at->tensor = -1;
    n->nattr = (int)j + 1;  // attrs filled so far (the node stays consistent on error)
    switch (at->type) {
    case AT_FLOAT: at->f = a->f; break;
    case AT_INT: at->i = a->i; break;
    case AT_STRING: {
      size_t len = a->s.len;
      if (len > 4096) node_error(n, "attribute '%s' is a string of %zu bytes", imp_esc(name), len);
      at->s = xmalloc(len + 1);
      if (len) memcpy(at->s, a->s.data, len);
      at->s[len] = 0;
      if (strlen(at->s) != len) node_error(n, "attribute '%s' contains a NUL byte", imp_esc(name));
      imp_check_name(at->s, "attribute value");
      break;
    }
    case AT_FLOATS: case AT_INTS: {
      size_t cnt = at->type == AT_FLOATS ? a->n_floats : a->n_ints;
      if (cnt > IMP_MAX_ATTR_VALUES) node_error(n, "attribute '%s' has %zu values", imp_esc(name), cnt);
      at->n = (int)cnt;
      if (at->type == AT_FLOATS) {
        at->floats = xmalloc(cnt * sizeof(float));
        if (cnt) memcpy(at->floats, a->floats, cnt * sizeof(float));
      } else {
        at->ints = xmalloc(cnt * sizeof(int64_t));
        if (cnt) memcpy(at->ints, a->ints, cnt * sizeof(int64_t));
      }
      break;
    }
    case AT_TENSOR: {
      if (!a->t) node_error(n, "tensor attribute '%s' holds no tensor", imp_esc(name));
      /* Named after node and attribute; a suffix if a model already uses it. */
      char *tn = xasprintf("%s:%s", n->name, name);
      for (int s = 1; graph_find_tensor(g, tn) >= 0; s++) {
        free(tn);
        tn = xasprintf("%s:%s#%d", g->n[ni].name, name, s);
      }
      at->tensor = imp_tensor_from_proto(g, a->t, tn, TK_CONST, dir);
      free(tn);
      break;
    }
    default:
      node_error(n, "attribute '%s' has type %d, which snc does not support", imp_esc(name),
                 at->type);
    }
  }
}

/* Count of entries once trailing empty names (absent optionals) are dropped. */
static int trimmed(char **names, size_t n) {
  while (n > 0 && !*imp_str(names[n - 1])) n--;
  return (int)n;
}

static void check_arity(const Node *tmp, const char *what, int n, int lo, int hi) {
  if (n < lo || (hi >= 0 && n > hi)) {
    if (hi < 0) node_error(tmp, "has %d %s (needs at least %d)", n, what, lo);
    if (lo == hi) node_error(tmp, "has %d %s (needs %d)", n, what, lo);
    node_error(tmp, "has %d %s (needs %d to %d)", n, what, lo, hi);
  }
}

static void add_nodes(Graph *g, const SncOnnx__GraphProto *gp, const char *dir) {
  if (gp->n_node > IMP_MAX_NODES) fatal(EXIT_BADINPUT, "the graph has %zu nodes", gp->n_node);
  /* Pass 1: every output tensor (and Constant value), so that inputs can be
   * resolved whatever order the nodes come in. */
  for (size_t k = 0; k < gp->n_node; k++) {
    const SncOnnx__NodeProto *np = gp->node[k];
    OpKind op = (OpKind)import_op(np->op_type, NULL);
    Node tmp = proto_node(np, op);
    imp_check_name(imp_str(np->name), "node");
    if (np->n_input > IMP_MAX_NODE_IO || np->n_output > IMP_MAX_NODE_IO)
      node_error(&tmp, "has %zu inputs and %zu outputs", np->n_input, np->n_output);
    if (op == OP_CONSTANT) {
      fold_constant(g, gp, k, dir);
      continue;
    }
    for (size_t j = 0; j < np->n_output; j++)
      if (*imp_str(np->output[j])) new_output(g, gp, k, np->output[j], op);
  }
  /* Pass 2: the nodes, with inputs resolved and arity checked. */
  int *in = xmalloc(sizeof(int) * IMP_MAX_NODE_IO), *out = xmalloc(sizeof(int) * IMP_MAX_NODE_IO);
  for (size_t k = 0; k < gp->n_node; k++) {
    const SncOnnx__NodeProto *np = gp->node[k];
    int ev;
    OpKind op = (OpKind)import_op(np->op_type, &ev);
    if (op == OP_CONSTANT) continue;
    OpInfo oi_ = op_info[op], *oi = &oi_;
    if (op == OP_EVAL) eval_arity(ev, &oi_.min_in, &oi_.max_in, &oi_.min_out, &oi_.max_out);
    char *name = *imp_str(np->name) ? xstrdup(np->name) : xasprintf("%s_%zu", np->op_type, k);
    Node tmp = {.name = name, .op = op, .onnx_op = op == OP_EVAL ? eval_op_name(ev) : NULL};
    int nin = trimmed(np->input, np->n_input), nout = trimmed(np->output, np->n_output);
    check_arity(&tmp, "inputs", nin, oi->min_in, oi->max_in);
    check_arity(&tmp, "outputs", nout, oi->min_out, oi->max_out);
    for (int j = 0; j < nin; j++) {
      const char *s = imp_str(np->input[j]);
      if (!*s) {
        if (j < oi->min_in) node_error(&tmp, "required input %d is empty", j);
        in[j] = -1;
        continue;
      }
      in[j] = graph_find_tensor(g, s);
      if (in[j] < 0)
        node_error(&tmp, "input '%s' is not a graph input, an initializer or any node's output",
                   imp_esc(s));
    }
    for (int j = 0; j < nout; j++) {
      const char *s = imp_str(np->output[j]);
      if (!*s && j < oi->min_out) node_error(&tmp, "required output %d is empty", j);
      out[j] = *s ? graph_find_tensor(g, s) : -1;
    }
    int ni = graph_add_node(g, op, name, nin, in, nout, out);
    if (op == OP_EVAL) g->n[ni].onnx_op = eval_op_name(ev), g->n[ni].aux = ev;
    free(name);
    for (int j = 0; j < nout; j++)
      if (out[j] >= 0) g->t[out[j]].producer = ni;
    parse_attrs(g, ni, np, dir);
  }
  free(in);
  free(out);
  /* Folded constants have no producer. */
  for (int t = 0; t < g->nt; t++)
    if (g->t[t].kind == TK_CONST && g->t[t].producer >= 0) g->t[t].producer = -1;
}

static void mark_outputs(Graph *g, const SncOnnx__GraphProto *gp) {
  if (gp->n_output == 0) fatal(EXIT_BADINPUT, "the graph has no outputs");
  for (size_t i = 0; i < gp->n_output; i++) {
    const char *name = imp_str(gp->output[i]->name);
    int t = graph_find_tensor(g, name);
    if (t < 0) fatal(EXIT_BADINPUT, "graph output '%s' is not produced by any node", imp_esc(name));
    g->t[t].is_output = true;
    if (i == 0) g->output = t;
  }
  if (g->t[g->output].producer < 0)
    fatal(EXIT_BADINPUT, "the model output '%s' is not computed by any node",
          imp_esc(g->t[g->output].name));
}

/* ---- order: topological sort (Kahn; a min-heap on the file's order, so a
 * model that is already sorted keeps its order) and cycle detection ---- */

static void heap_push(int *h, int *n, int v) {
  int i = (*n)++;
  while (i > 0 && h[(i - 1) / 2] > v) {
    h[i] = h[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h[i] = v;
}

static int heap_pop(int *h, int *n) {
  int top = h[0], v = h[--*n], i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && h[c + 1] < h[c]) c++;
    if (h[c] >= v) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = v;
  return top;
}

static void topo_sort(Graph *g) {
  int nn = g->nn;
  int *indeg = xcalloc((size_t)nn + 1, sizeof(int)), *start = xcalloc((size_t)nn + 2, sizeof(int));
  int64_t nedge = 0;
  for (int i = 0; i < nn; i++)
    for (int j = 0; j < g->n[i].nin; j++) {
      int t = g->n[i].in[j];
      if (t >= 0 && g->t[t].producer >= 0) {
        indeg[i]++;
        start[g->t[t].producer + 1]++;
        nedge++;
      }
    }
  for (int i = 0; i < nn; i++) start[i + 1] += start[i];
  int *cons = xmalloc(sizeof(int) * (size_t)(nedge + 1)), *fill = xmalloc(sizeof(int) * ((size_t)nn + 1));
  memcpy(fill, start, sizeof(int) * (size_t)nn);
  for (int i = 0; i < nn; i++)
    for (int j = 0; j < g->n[i].nin; j++) {
      int t = g->n[i].in[j];
      if (t >= 0 && g->t[t].producer >= 0) cons[fill[g->t[t].producer]++] = i;
    }
  int *heap = xmalloc(sizeof(int) * ((size_t)nn + 1)), nh = 0;
  int *order = xmalloc(sizeof(int) * ((size_t)nn + 1)), no = 0;
  for (int i = 0; i < nn; i++)
    if (!indeg[i]) heap_push(heap, &nh, i);
  while (nh) {
    int i = heap_pop(heap, &nh);
    order[no++] = i;
    for (int e = start[i]; e < start[i + 1]; e++)
      if (--indeg[cons[e]] == 0) heap_push(heap, &nh, cons[e]);
  }
  if (no < nn) {
    /* Every node left has an input written by another node left, so walking
     * back along such inputs must revisit a node: that node is on a cycle. */
    char *seen = xcalloc((size_t)nn, 1);
    int v = 0;
    while (!indeg[v]) v++;
    while (!seen[v]) {
      seen[v] = 1;
      const Node *n = &g->n[v];
      for (int j = 0; j < n->nin; j++) {
        int t = n->in[j];
        if (t >= 0 && g->t[t].producer >= 0 && indeg[g->t[t].producer]) {
          v = g->t[t].producer;
          break;
        }
      }
    }
    node_error(&g->n[v], "is on a cycle: the graph is not a DAG");
  }
  Node *sorted = xmalloc(sizeof(Node) * ((size_t)nn + 1));
  for (int i = 0; i < nn; i++) sorted[i] = g->n[order[i]];
  memcpy(g->n, sorted, sizeof(Node) * (size_t)nn);
  for (int i = 0; i < nn; i++)
    for (int j = 0; j < g->n[i].nout; j++)
      if (g->n[i].out[j] >= 0) g->t[g->n[i].out[j]].producer = i;
  free(sorted), free(order), free(heap), free(fill), free(cons), free(start), free(indeg);
}

/* ---- pruning: keep the nodes the first graph output depends on (with
 * --all-outputs those of every graph output, which the eval graph computes
 * for --predict), and the tensors they use, in a fresh graph (tensor
 * indices are compacted) ---- */

bool import_all_outputs;

static Graph *prune(Graph *g) {
  char *live = xcalloc((size_t)g->nn + 1, 1);
  int *stack = xmalloc(sizeof(int) * ((size_t)g->nn + 1)), ns = 0;
  for (int t = 0; t < g->nt; t++) {
    int p = g->t[t].producer;
    bool keep = t == g->output || ((imp_whole || import_all_outputs) && g->t[t].is_output);
    if (keep && p >= 0 && !live[p]) {
      live[p] = 1;
      stack[ns++] = p;
    }
  }
  while (ns) {
    const Node *n = &g->n[stack[--ns]];
    for (int j = 0; j < n->nin; j++) {
      int t = n->in[j];
      int p = t >= 0 ? g->t[t].producer : -1;
      if (p >= 0 && !live[p]) {
        live[p] = 1;
        stack[ns++] = p;
      }
    }
  }
  int *tmap = xmalloc(sizeof(int) * ((size_t)g->nt + 1));
  for (int t = 0; t < g->nt; t++) tmap[t] = -1;
  if (g->input >= 0) tmap[g->input] = 0;  // marks "keep"; real indices below
  for (int t = 0; t < g->nt && imp_whole; t++) if (g->t[t].is_output) tmap[t] = 0;
  for (int i = 0; i < g->nn; i++) {
    if (!live[i]) continue;
    const Node *n = &g->n[i];
    for (int j = 0; j < n->nin; j++) if (n->in[j] >= 0) tmap[n->in[j]] = 0;
    for (int j = 0; j < n->nout; j++) if (n->out[j] >= 0) tmap[n->out[j]] = 0;
    for (int j = 0; j < n->nattr; j++) if (n->attrs[j].tensor >= 0) tmap[n->attrs[j].tensor] = 0;
  }
  Graph *h = graph_new(g->path);
  h->name = g->name;
  h->opset = g->opset;
  for (int t = 0; t < g->nt; t++) {
    if (tmap[t] < 0) continue;
    tmap[t] = graph_add_tensor(h, g->t[t].name, g->t[t].dtype, g->t[t].kind);
    char *dup = h->t[tmap[t]].name;
    h->t[tmap[t]] = g->t[t];
    h->t[tmap[t]].producer = -1;
    free(dup);
  }
  for (int i = 0; i < g->nn; i++) {
    if (!live[i]) continue;
    Node *n = &g->n[i];
    for (int j = 0; j < n->nin; j++) if (n->in[j] >= 0) n->in[j] = tmap[n->in[j]];
    for (int j = 0; j < n->nout; j++) if (n->out[j] >= 0) n->out[j] = tmap[n->out[j]];
    for (int j = 0; j < n->nattr; j++) if (n->attrs[j].tensor >= 0) n->attrs[j].tensor = tmap[n->attrs[j].tensor];
    int ni = graph_add_node(h, n->op, n->name, n->nin, n->in, n->nout, n->out);
    h->n[ni].attrs = n->attrs;
    h->n[ni].nattr = n->nattr;
    h->n[ni].onnx_op = n->onnx_op;
    h->n[ni].aux = n->aux;
    for (int j = 0; j < n->nout; j++) if (n->out[j] >= 0) h->t[n->out[j]].producer = ni;
  }
  h->input = g->input >= 0 ? tmap[g->input] : -1;
  h->output = tmap[g->output];
  /* Free what h did not take: node arrays (h has copies), dead nodes'
   * attributes, dropped tensors. g itself stays allocated, because ir.c keys
   * its name maps by graph address and a new graph must not reuse it. */
  for (int i = 0; i < g->nn; i++) {
    Node *n = &g->n[i];
    if (!live[i]) {
      for (int j = 0; j < n->nattr; j++)
        free(n->attrs[j].name), free(n->attrs[j].s), free(n->attrs[j].ints), free(n->attrs[j].floats);
      free(n->attrs);
    }
    free(n->name), free(n->in), free(n->out);
  }
  for (int t = 0; t < g->nt; t++)
    if (tmap[t] < 0) free(g->t[t].name), free(g->t[t].data);
  free(g->t), free(g->n);
  g->t = NULL, g->n = NULL, g->nt = g->nn = 0;
  free(tmap), free(stack), free(live);
  return h;
}

/* ---- kinds and initial values ---- */

enum { SLOT_NONE, SLOT_INT, SLOT_FLOAT, SLOT_BOOL, SLOT_STATE, SLOT_ANY };

/* What a node reads at input s: constant slots (values needed at compile
 * time), BN running statistics (state), or an ordinary operand. */
static int slot_class(const Node *n, int s) {
  switch (n->op) {
  case OP_RESHAPE: return s == 1 ? SLOT_INT : SLOT_NONE;
  case OP_SLICE: return s >= 1 ? SLOT_INT : SLOT_NONE;
  case OP_PAD: return s == 1 ? SLOT_INT : s == 2 ? SLOT_FLOAT : SLOT_NONE;
  case OP_CLIP: return s >= 1 ? SLOT_FLOAT : SLOT_NONE;
  case OP_DROPOUT: return s == 1 ? SLOT_FLOAT : s == 2 ? SLOT_BOOL : SLOT_NONE;
  case OP_SPLIT: case OP_REDUCEMEAN: case OP_UNSQUEEZE: case OP_SQUEEZE:
  case OP_REDUCESUM: case OP_REDUCEMAX: case OP_REDUCEL2: case OP_TILE: case OP_TRILU:
    return s == 1 ? SLOT_INT : SLOT_NONE;
  case OP_BATCHNORM: return s >= 3 ? SLOT_STATE : SLOT_NONE;
  case OP_POW: return s == 1 ? SLOT_FLOAT : SLOT_NONE;
  case OP_BROADCAST: case OP_GATHERELEMENTS: return s == 1 ? SLOT_INT : SLOT_NONE;
  /* Ops evaluated only at compile time read constants of any type (Shape
   * reads only its input's shape). */
  case OP_SHAPE: return SLOT_NONE;
  /* A Cast to anything but float32 cannot be on a differentiable path. */
  case OP_CAST: return attr_int(n, "to", DT_FLOAT) == DT_FLOAT ? SLOT_NONE : SLOT_ANY;
  default: return op_info[n->op].shape == shape_fold ? SLOT_ANY : SLOT_NONE;
  }
}

static void assign_kinds(Graph *g) {
  for (int i = 0; i < g->nn; i++) {
    const Node *n = &g->n[i];
    for (int s = 0; s < n->nin; s++) {
      if (n->in[s] < 0) continue;
      Tensor *t = &g->t[n->in[s]];
      int c = slot_class(n, s);
      if (c == SLOT_STATE && t->kind == TK_PARAM) t->kind = TK_STATE;
      if (c == SLOT_NONE || c == SLOT_STATE) continue;
      /* A computed value (Cast of a Constant, shape arithmetic) is folded by
       * shape inference, which checks it then. */
      if (!t->data && t->producer >= 0) continue;
      if (!t->data && c == SLOT_ANY)
        node_error(n, "op %s is supported only on constant inputs (snc evaluates it at compile "
                   "time), and input %d ('%s') is data", op_name(n->op), s, imp_esc(t->name));
      if (!t->data)
        node_error(n, "input %d ('%s') must be a constant (an initializer or a Constant node)", s,
                   imp_esc(t->name));
      if (c == SLOT_ANY) {
        t->kind = TK_CONST;
        continue;
      }
      bool ok = c == SLOT_INT ? (t->dtype == DT_INT64 || t->dtype == DT_INT32)
              : c == SLOT_FLOAT ? (t->dtype == DT_FLOAT || t->dtype == DT_DOUBLE)
              : t->dtype == DT_BOOL;
      if (!ok)
        node_error(n, "input %d ('%s') must be %s, not %s", s, imp_esc(t->name),
                   c == SLOT_INT ? "int64 or int32" : c == SLOT_FLOAT ? "float32 or float64" : "bool",
                   dtype_name(t->dtype));
      t->kind = TK_CONST;
    }
  }
}

/* Buffers are initializers too: a float initializer that only feeds values
 * evaluated at compile time (torch's causal-mask buffer: Slice -> Equal ->
 * Where's condition) is a constant, not a trainable parameter; so is one that
 * holds an infinity or a NaN (an additive mask: no parameter starts there).
 * const_only(t): every reader of t is a compile-time-only slot, Where's
 * condition or scalar fill value, or a data-movement op whose outputs are
 * all const_only. */
/* Values known at compile time that no trainable parameter feeds: Constant
 * nodes, integer and bool initializers, Shape/Size of anything, and what
 * nodes compute from those alone (positions from Range, token types). */
static bool *nonparam_values(const Graph *g) {
  bool *v = xcalloc((size_t)g->nt + 1, sizeof(bool));
  for (int t = 0; t < g->nt; t++) {
    const Tensor *x = &g->t[t];
    v[t] = x->producer < 0 && x->data && t != g->input &&
           (x->kind == TK_CONST || (x->dtype != DT_FLOAT && x->dtype != DT_DOUBLE &&
                                    x->dtype != DT_FLOAT16 && x->dtype != DT_BFLOAT16));
  }
  for (int i = 0; i < g->nn; i++) {
    const Node *n = &g->n[i];
    const char *op = node_op_name(n);
    bool ok = strcmp(op, "Shape") == 0 || strcmp(op, "Size") == 0;
    if (!ok) {
      ok = n->nin > 0;
      for (int j = 0; j < n->nin && ok; j++) ok = n->in[j] < 0 || v[n->in[j]];
    }
    for (int o = 0; o < n->nout; o++) if (n->out[o] >= 0) v[n->out[o]] = ok;
  }
  return v;
}

/* Readers through which a buffer stays a constant: ops that move its
 * elements, and arithmetic with values no parameter feeds (a rotary table:
 * inverse frequencies times positions). */
static bool const_passes(const Graph *g, const Node *n, int s, const bool *nonparam) {
  switch (n->op) {
  case OP_SLICE: case OP_RESHAPE: case OP_UNSQUEEZE: case OP_SQUEEZE: case OP_BROADCAST:
  case OP_GATHER:
    return s == 0;
  case OP_TRANSPOSE: case OP_IDENTITY: case OP_FLATTEN: case OP_CONCAT: case OP_CAST:
    return true;
  case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_MATMUL: case OP_POW:
    for (int j = 0; j < n->nin; j++)
      if (j != s && n->in[j] >= 0 && !nonparam[n->in[j]]) return false;
    return true;
  default:
    return false;
  }
}

static bool const_only(const Graph *g, int t, const int *first, const int *next,
                       const int *rnode, const int *rslot, signed char *memo,
                       const bool *nonparam) {
  if (memo[t] >= 0) return memo[t] == 1;
  memo[t] = 0;   /* in progress: a cycle (none in a sorted graph) would say no */
  bool ok = first[t] >= 0;
  for (int e = first[t]; ok && e >= 0; e = next[e]) {
    const Node *n = &g->n[rnode[e]];
    int s = rslot[e];
    /* Where's condition, a scalar fill value of a masked fill, an op snc
     * only evaluates, or a rotary table's Sin/Cos. */
    if (slot_class(n, s) == SLOT_ANY || (n->op == OP_WHERE && (s == 0 || g->t[t].ndata == 1)) ||
        strcmp(node_op_name(n), "Sin") == 0 || strcmp(node_op_name(n), "Cos") == 0)
      continue;
    ok = const_passes(g, n, s, nonparam);
    for (int o = 0; ok && o < n->nout; o++)
      ok = n->out[o] < 0 || const_only(g, n->out[o], first, next, rnode, rslot, memo, nonparam);
  }
  memo[t] = ok;
  return ok;
}

static void mark_buffers(Graph *g) {
  int ne = 0;
  for (int i = 0; i < g->nn; i++) ne += g->n[i].nin;
  int *first = xmalloc(sizeof(int) * (size_t)(g->nt + 1)), *next = xmalloc(sizeof(int) * (size_t)(ne + 1));
  int *rnode = xmalloc(sizeof(int) * (size_t)(ne + 1)), *rslot = xmalloc(sizeof(int) * (size_t)(ne + 1));
  signed char *memo = xmalloc((size_t)g->nt + 1);
  bool *nonparam = nonparam_values(g);
  for (int t = 0; t < g->nt; t++) first[t] = -1, memo[t] = -1;
  int e = 0;
  for (int i = g->nn - 1; i >= 0; i--)
    for (int s = g->n[i].nin - 1; s >= 0; s--) {
      int t = g->n[i].in[s];
      if (t < 0) continue;
      rnode[e] = i, rslot[e] = s, next[e] = first[t], first[t] = e++;
    }
  for (int t = 0; t < g->nt; t++) {
    Tensor *x = &g->t[t];
    if (x->kind != TK_PARAM || !x->data || x->dtype != DT_FLOAT) continue;
    bool finite = true;
    for (int64_t k = 0; k < x->ndata && finite; k++) finite = isfinite(((const float *)x->data)[k]);
    if (!finite || const_only(g, t, first, next, rnode, rslot, memo, nonparam)) x->kind = TK_CONST;
  }
  free(nonparam);
  free(first), free(next), free(rnode), free(rslot), free(memo);
}

/* fan_in of a weight as PyTorch computes it (-1 if its shape is not known). */
static int64_t weight_fan_in(const Graph *g, const Node *n) {
  if (n->nin < 2 || n->in[1] < 0) return -1;
  const Tensor *w = &g->t[n->in[1]];
  if (w->rank < 1) return -1;
  for (int i = 0; i < w->rank; i++) if (w->dims[i] < 0) return -1;
  int64_t f = 1;
  switch (n->op) {
  case OP_CONV:   // (M, C/group, k...): C/group * prod(k)
    for (int i = 1; i < w->rank; i++) f = mul_checked(f, w->dims[i], w->name);
    return f;
  case OP_GEMM:   // B is (K, N), or (N, K) with transB
    if (w->rank != 2) return -1;
    return attr_int(n, "transB", 0) ? w->dims[1] : w->dims[0];
  case OP_MATMUL: // B is (..., K, N)
    return w->rank >= 2 ? w->dims[w->rank - 2] : w->dims[0];
  default:
    return -1;
  }
}

static bool shape_known(const Tensor *t) {
  if (t->rank < 0) return false;
  for (int i = 0; i < t->rank; i++) if (t->dims[i] < 0) return false;
  return true;
}

/* init/fan_in of a parameter or state tensor read by node n at input s and
 * not initialized from the file: PyTorch's defaults for the layer. */
static void default_init(const Graph *g, const Node *n, int s, Tensor *t) {
  int64_t fan = -1;
  int init = -1;
  switch (n->op) {
  case OP_CONV: case OP_GEMM: case OP_MATMUL:
    if (s == 1) init = SNRT_INIT_KAIMING;
    else if (s == 2 && n->op != OP_MATMUL) init = SNRT_INIT_BIAS;
    if (init >= 0) fan = weight_fan_in(g, n);
    if (fan < 0) init = -1;
    break;
  case OP_BATCHNORM:
    init = s == 1 || s == 4 ? SNRT_INIT_ONE : SNRT_INIT_ZERO;
    break;
  default:
    break;
  }
  if (init < 0) {
    /* Elsewhere: a matrix-like tensor gets Kaiming over its trailing dims,
     * a vector or scalar starts at zero. */
    if (t->rank >= 2) {
      init = SNRT_INIT_KAIMING;
      fan = 1;
      for (int i = 1; i < t->rank; i++) fan = mul_checked(fan, t->dims[i], t->name);
    } else {
      init = SNRT_INIT_ZERO;
    }
  }
  t->init = init;
  t->fan_in = fan > 0 ? fan : (init == SNRT_INIT_KAIMING || init == SNRT_INIT_BIAS ? 1 : 0);
}

static void assign_init(Graph *g) {
  for (int t = 0; t < g->nt; t++)
    if (g->t[t].has_init) g->t[t].init = SNRT_INIT_FILE;
  for (int i = 0; i < g->nn; i++) {
    const Node *n = &g->n[i];
    for (int s = 0; s < n->nin; s++) {
      if (n->in[s] < 0) continue;
      Tensor *t = &g->t[n->in[s]];
      if ((t->kind != TK_PARAM && t->kind != TK_STATE) || t->init != SNRT_INIT_NONE) continue;
      if (t->dtype != DT_FLOAT)
        fatal(EXIT_BADINPUT, "graph input '%s' has no initializer and is %s: snc takes one data "
              "input (the first, or --input) and float32 parameters", imp_esc(t->name),
              dtype_name(t->dtype));
      if (!shape_known(t))
        fatal(EXIT_BADINPUT, "parameter '%s' has no initializer and no fully known declared "
              "shape", imp_esc(t->name));
      default_init(g, n, s, t);
    }
  }
}

/* protobuf-c's allocations go through the tracked allocator, so that the
 * fuzzer can release a message abandoned by an error. */
static void *pb_alloc(void *data, size_t n) { return xmalloc_try(n); }
static void pb_free(void *data, void *p) { free(p); }
static ProtobufCAllocator pb_allocator = {pb_alloc, pb_free, NULL};

Graph *onnx_import_whole(const char *path) {
  imp_whole = true;
  Graph *g = onnx_import(path, NULL);
  imp_whole = false;
  return g;
}

Graph *onnx_import(const char *path, const char *input_name) {
  if (!err_file) err_file = path;
  size_t len;
  unsigned char *buf = read_file(path, &len);
  Graph *g = onnx_import_bytes(buf, len, path, input_name);
  return g;
}

Graph *onnx_import_bytes(unsigned char *buf, size_t len, const char *path,
                         const char *input_name) {
  if (!err_file) err_file = path;
  SncOnnx__ModelProto *m = snc_onnx__model_proto__unpack(&pb_allocator, len, buf);
  free(buf);
  if (!m) fatal(EXIT_BADINPUT, "not a valid ONNX model (protobuf parse failed)");
  if (!m->graph) fatal(EXIT_BADINPUT, "the model has no graph");
  const SncOnnx__GraphProto *gp = m->graph;
  if (gp->n_initializer > IMP_MAX_NODES || gp->n_input > IMP_MAX_NODES ||
      gp->n_output > IMP_MAX_NODES)
    fatal(EXIT_BADINPUT, "the graph has too many initializers, inputs or outputs");
  int64_t opset = default_opset(m);
  check_ops(gp);

  char *dir = dir_of(path);
  Graph *g = graph_new(path);
  g->name = xstrdup(imp_str(gp->name));
  imp_check_name(g->name, "graph");
  g->opset = opset;
  add_initializers(g, gp, dir);
  g->input = add_inputs(g, gp, input_name);
  add_nodes(g, gp, dir);
  mark_outputs(g, gp);
  snc_onnx__model_proto__free_unpacked(m, &pb_allocator);
  free(dir);

  topo_sort(g);
  g = prune(g);
  bool used = imp_whole;
  for (int i = 0; i < g->nn && !used; i++)
    for (int j = 0; j < g->n[i].nin; j++) used |= g->n[i].in[j] == g->input;
  if (!used)
    fatal(EXIT_BADINPUT, "the model output '%s' does not depend on the data input '%s'",
          imp_esc(g->t[g->output].name), imp_esc(g->t[g->input].name));
  mark_buffers(g);
  assign_kinds(g);
  assign_init(g);
  g->nfwd = g->nn;
  return g;
}
