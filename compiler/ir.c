/* ir.c — the IR: graphs, tensors, nodes, attributes, and the op table.
 * Tensor names are looked up through an open-addressing hash (import of a
 * 2,500-layer model must stay linear). */
#include "snc.h"

#include <stdlib.h>
#include <string.h>

const OpInfo op_info[] = {
#define OP_INFO(id, onnx, mi, xi, mo, xo, cost, shape, grad, emit, flops) \
  {#id, onnx, mi, xi, mo, xo, cost, shape, grad, emit, flops},
    SNC_OPS(OP_INFO)
#undef OP_INFO
};
_Static_assert(sizeof op_info / sizeof op_info[0] == OP_COUNT, "op table out of step");

const char *op_name(OpKind op) {
  if ((int)op < 0 || op >= OP_COUNT) return "?";
  return op_info[op].onnx[0] ? op_info[op].onnx : op_info[op].name;
}

int graph_token_source(const Graph *g, int t) {
  for (int hops = 0; t >= 0 && hops < 1000; hops++) {
    if (t == g->input) return t;
    int p = g->t[t].producer;
    if (p < 0) return -1;
    OpKind op = g->n[p].op;
    if (op != OP_RESHAPE && op != OP_FLATTEN && op != OP_SQUEEZE && op != OP_UNSQUEEZE &&
        op != OP_IDENTITY)
      return -1;
    t = g->n[p].in[0];
  }
  return -1;
}

const char *tensor_source(const Graph *g, int t) {
  static char buf[4][600];
  static int k;
  char *s = buf[k++ & 3];
  s[0] = 0;
  if (t < 0 || t >= g->nt || g->t[t].producer < 0) return s;
  /* Breadth first over producers: the nearest source; the data input wins. */
  int cap = 4096, head = 0, tail = 0, *q = xmalloc(sizeof(int) * (size_t)cap), found = -1;
  char *seen = xcalloc((size_t)g->nt + 1, 1);
  q[tail++] = t, seen[t] = 1;
  while (head < tail && found != g->input) {
    int u = q[head++], p = g->t[u].producer;
    if (p < 0) {
      if (u == g->input || g->t[u].has_init || g->t[u].kind == TK_PARAM)
        if (found < 0 || u == g->input) found = u;
      continue;
    }
    for (int j = 0; j < g->n[p].nin; j++) {
      int v = g->n[p].in[j];
      if (v < 0 || seen[v] || tail >= cap) continue;
      seen[v] = 1, q[tail++] = v;
    }
  }
  if (found >= 0)
    snprintf(s, 600, " (computed from %s '%.400s')",
             found == g->input ? "the data input" : "initializer", g->t[found].name);
  free(q), free(seen);
  return s;
}

const char *node_op_name(const Node *n) {
  return n->op == OP_EVAL && n->onnx_op ? n->onnx_op : op_name(n->op);
}

bool op_slot_is_data(OpKind op, int k) {
  switch (op) {
  case OP_RESHAPE: case OP_SPLIT: case OP_REDUCEMEAN: return k == 0;
  case OP_REDUCESUM: case OP_REDUCEMAX: case OP_REDUCEL2: case OP_TILE: case OP_TRILU: return k == 0;
  case OP_UNSQUEEZE: case OP_SQUEEZE: return k == 0;
  case OP_SLICE: case OP_PAD: case OP_CLIP: case OP_DROPOUT: return k == 0;
  /* Pow's exponent, Expand's shape, constant Gather indices and Where's
   * condition and fill value live in the params. */
  case OP_POW: case OP_BROADCAST: case OP_GATHER: case OP_GATHERELEMENTS: return k == 0;
  case OP_WHERE: return false;
  default: return true;
  }
}

bool graph_is_eval_output(const Graph *g, int t) {
  if (t >= 0 && t == g->eval_output) return true;
  for (int k = 0; k < g->neval_outs; k++)
    if (g->eval_outs[k] == t) return true;
  return false;
}

int node_cost(const Graph *g, const Node *n) {
  if (n->op == OP_MATMUL && n->p && n->nin == 2 && n->in[0] >= 0 && n->in[1] >= 0 &&
      g->t[n->in[0]].batched && g->t[n->in[1]].batched &&
      ((const snrt_mm_t *)n->p)->k <= NODE_CHEAP_MATMUL_K)
    return COST_CHEAP;
  return op_info[n->op].cost;
}

int op_from_onnx(const char *op_type) {
  for (int i = 0; i < OP_COUNT; i++)
    if (op_info[i].onnx[0] && strcmp(op_info[i].onnx, op_type) == 0) return i;
  return -1;
}

/* Stand-ins for table columns an op does not have. */
void shape_internal(Graph *g, Node *n) {
  (void)g;
  internal_error(__FILE__, __LINE__, "shape function called for internal op %s", op_name(n->op));
}
void grad_none(Graph *g, int node) {
  node_error(&g->n[node], "no gradient is defined for this op");
}
void emit_none(Emit *e, const Graph *g, const Node *n) {
  (void)e, (void)g;
  internal_error(__FILE__, __LINE__, "no emitter for op %s", op_name(n->op));
}

int dtype_size(int dt) {
  switch (dt) {
  case DT_FLOAT: case DT_INT32: case DT_UINT32: return 4;
  case DT_INT64: case DT_UINT64: case DT_DOUBLE: return 8;
  case DT_UINT8: case DT_INT8: case DT_BOOL: return 1;
  case DT_UINT16: case DT_INT16: case DT_FLOAT16: case DT_BFLOAT16: return 2;
  default: return 0;
  }
}

const char *dtype_name(int dt) {
  switch (dt) {
  case DT_FLOAT: return "float32"; case DT_UINT8: return "uint8"; case DT_INT8: return "int8";
  case DT_UINT16: return "uint16"; case DT_INT16: return "int16"; case DT_INT32: return "int32";
  case DT_INT64: return "int64"; case DT_STRING: return "string"; case DT_BOOL: return "bool";
  case DT_FLOAT16: return "float16"; case DT_DOUBLE: return "float64";
  case DT_UINT32: return "uint32"; case DT_UINT64: return "uint64"; case DT_BFLOAT16: return "bfloat16";
  default: return "undefined";
  }
}

const char *tensor_kind_name(TensorKind k) {
  static const char *names[] = {"activation", "input", "label", "param", "state", "const",
                                "grad", "param-grad", "optimizer", "aux", "loss", "workspace",
                                "constant-data"};
  return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

/* The limit of mul_checked (util.c), with a message naming the tensor and
 * its shape: the batch often is what pushed it over. */
#define NUMEL_LIMIT ((int64_t)1 << 48)

int64_t tensor_numel(const Tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    int64_t d = t->dims[i];
    if (d < 0 || (n != 0 && d > NUMEL_LIMIT / n))
      fatal(EXIT_BADINPUT, "tensor '%s' of shape %s: %s", t->name, shape_str(t),
            d < 0 ? "a dimension is negative or unknown" : "over 2^48 elements (absurd size)");
    n *= d;
  }
  return n;
}

int64_t tensor_bytes(const Tensor *t) {
  int s = dtype_size(t->dtype);
  if (!s) s = 4;
  int64_t n = tensor_numel(t);
  if (n > NUMEL_LIMIT / s)
    fatal(EXIT_BADINPUT, "tensor '%s' of shape %s: over 2^48 bytes (absurd size)", t->name,
          shape_str(t));
  return n * s;
}

const char *shape_str(const Tensor *t) {
  static char buf[8][160];
  static int k;
  char *s = buf[k++ & 7];
  int o = snprintf(s, 160, "(");
  for (int i = 0; i < t->rank && o < 140; i++)
    o += snprintf(s + o, 160 - o, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
  snprintf(s + o, 160 - o, ")");
  return s;
}

void tensor_set_shape(Tensor *t, int rank, const int64_t *dims) {
  snc_assert(rank >= 0 && rank <= MAX_RANK);
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
}

/* ---- name hash (per graph; kept beside it) ---- */

typedef struct NameMap {
  const Graph *g;
  int *slot;             // tensor index + 1, 0 empty
  int cap;               // power of two
  int used;
} NameMap;

static NameMap *maps;
static int nmaps, capmaps;

static NameMap *map_of(const Graph *g) {
  for (int i = 0; i < nmaps; i++)
    if (maps[i].g == g) return &maps[i];
  xgrow((void **)&maps, &capmaps, nmaps + 1, sizeof *maps);
  maps[nmaps] = (NameMap){g, xcalloc(64, sizeof(int)), 64, 0};
  return &maps[nmaps++];
}

void ir_reset(void) {
  for (int i = 0; i < nmaps; i++) free(maps[i].slot);
  free(maps);
  maps = NULL;
  nmaps = capmaps = 0;
}

static uint64_t name_hash(const char *s) { return hash_bytes(0, s, strlen(s)); }

static void map_insert(NameMap *m, const Graph *g, int t) {
  if (2 * (m->used + 1) > m->cap) {
    int ncap = m->cap * 2;
    int *ns = xcalloc((size_t)ncap, sizeof(int));
    for (int i = 0; i < m->cap; i++)
      if (m->slot[i]) {
        uint64_t h = name_hash(g->t[m->slot[i] - 1].name) & (uint64_t)(ncap - 1);
        while (ns[h]) h = (h + 1) & (uint64_t)(ncap - 1);
        ns[h] = m->slot[i];
      }
    free(m->slot);
    m->slot = ns;
    m->cap = ncap;
  }
  uint64_t h = name_hash(g->t[t].name) & (uint64_t)(m->cap - 1);
  while (m->slot[h]) h = (h + 1) & (uint64_t)(m->cap - 1);
  m->slot[h] = t + 1;
  m->used++;
}

int graph_find_tensor(const Graph *g, const char *name) {
  NameMap *m = map_of(g);
  uint64_t h = name_hash(name) & (uint64_t)(m->cap - 1);
  while (m->slot[h]) {
    if (strcmp(g->t[m->slot[h] - 1].name, name) == 0) return m->slot[h] - 1;
    h = (h + 1) & (uint64_t)(m->cap - 1);
  }
  return -1;
}

Graph *graph_new(const char *path) {
  Graph *g = xcalloc(1, sizeof *g);
  g->path = path;
  g->input = g->output = g->label = g->loss = g->eval_output = -1;
  return g;
}

int graph_add_tensor(Graph *g, const char *name, int dtype, TensorKind kind) {
  xgrow((void **)&g->t, &g->capt, g->nt + 1, sizeof *g->t);
  int i = g->nt++;
  g->t[i] = (Tensor){.name = xstrdup(name), .dtype = dtype, .rank = -1, .kind = kind,
                     .producer = -1, .grad = -1, .grad_of = -1};
  map_insert(map_of(g), g, i);
  return i;
}

int graph_add_node(Graph *g, OpKind op, const char *name, int nin, const int *in, int nout,
                   const int *out) {
  xgrow((void **)&g->n, &g->capn, g->nn + 1, sizeof *g->n);
  int i = g->nn++;
  Node *n = &g->n[i];
  *n = (Node){.name = xstrdup(name ? name : ""), .op = op, .nin = nin, .nout = nout,
              .fwd = -1, .twin = -1};
  n->in = xmalloc(sizeof(int) * (size_t)(nin ? nin : 1));
  n->out = xmalloc(sizeof(int) * (size_t)(nout ? nout : 1));
  if (nin) memcpy(n->in, in, sizeof(int) * (size_t)nin);
  if (nout) memcpy(n->out, out, sizeof(int) * (size_t)nout);
  return i;
}

/* ---- attributes ---- */

const Attr *attr_find(const Node *n, const char *name) {
  for (int i = 0; i < n->nattr; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}

int64_t attr_int(const Node *n, const char *name, int64_t dflt) {
  const Attr *a = attr_find(n, name);
  if (!a) return dflt;
  if (a->type != AT_INT) node_error(n, "attribute '%s' must be an int", name);
  return a->i;
}

float attr_float(const Node *n, const char *name, float dflt) {
  const Attr *a = attr_find(n, name);
  if (!a) return dflt;
  if (a->type == AT_INT) return (float)a->i;
  if (a->type != AT_FLOAT) node_error(n, "attribute '%s' must be a float", name);
  return a->f;
}

const char *attr_string(const Node *n, const char *name, const char *dflt) {
  const Attr *a = attr_find(n, name);
  if (!a) return dflt;
  if (a->type != AT_STRING) node_error(n, "attribute '%s' must be a string", name);
  return a->s;
}

int attr_ints(const Node *n, const char *name, const int64_t **v) {
  const Attr *a = attr_find(n, name);
  *v = NULL;
  if (!a) return 0;
  if (a->type != AT_INTS) node_error(n, "attribute '%s' must be a list of ints", name);
  *v = a->ints;
  return a->n;
}

int const_ints(const Graph *g, const Node *n, int input, int64_t *out, int max) {
  if (input >= n->nin || n->in[input] < 0) node_error(n, "input %d is missing", input);
  const Tensor *t = &g->t[n->in[input]];
  if (!t->data || (t->kind != TK_CONST))
    node_error(n, "input %d ('%s') must be a constant (an initializer or a Constant node)",
               input, t->name);
  if (t->dtype != DT_INT64 && t->dtype != DT_INT32)
    node_error(n, "input %d ('%s') must be int64 or int32, not %s", input, t->name,
               dtype_name(t->dtype));
  if (t->ndata > max) node_error(n, "input %d ('%s') has %lld values, at most %d allowed",
                                 input, t->name, (long long)t->ndata, max);
  for (int64_t i = 0; i < t->ndata; i++)
    out[i] = t->dtype == DT_INT64 ? ((const int64_t *)t->data)[i]
                                  : ((const int32_t *)t->data)[i];
  return (int)t->ndata;
}

float const_float(const Graph *g, const Node *n, int input, float dflt) {
  if (input >= n->nin || n->in[input] < 0) return dflt;
  const Tensor *t = &g->t[n->in[input]];
  if (!t->data || t->kind != TK_CONST || t->ndata != 1)
    node_error(n, "input %d ('%s') must be a constant scalar", input, t->name);
  switch (t->dtype) {
  case DT_FLOAT: return ((const float *)t->data)[0];
  case DT_DOUBLE: return (float)((const double *)t->data)[0];
  case DT_INT64: return (float)((const int64_t *)t->data)[0];
  case DT_INT32: return (float)((const int32_t *)t->data)[0];
  case DT_BOOL: case DT_UINT8: return (float)((const uint8_t *)t->data)[0];
  default: node_error(n, "input %d ('%s') has unsupported dtype %s", input, t->name,
                      dtype_name(t->dtype));
  }
}

int64_t node_workspace_bytes(const Graph *g, const Node *n) {
  (void)g;
  switch (n->op) {
  case OP_CONV: case OP_CONV_BWD_DATA: case OP_CONV_BWD_FILTER:
    return n->p ? snrt_conv_ws_bytes((const snrt_conv_t *)n->p) : 0;
  case OP_LMHEAD_CE:
    return snrt_lmce_ws_bytes((const snrt_lmce_t *)n->p);
  default:
    return 0;
  }
}
