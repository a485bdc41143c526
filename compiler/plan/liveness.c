/* liveness.c — which bytes must exist at which step.
 *
 * Requires: pl->route (route_build), tensor shapes (shape_infer/autodiff).
 * Provides: pl->inst (one primary instance per arena tensor, then one per
 * workspace), pl->tensor_inst, Step.in/out/ws as instance indices, and the
 * per-step statistics that do not depend on offsets: live_bytes,
 * peak_live_bytes, layer_peak_bytes, persistent_bytes, baseline_bytes.
 *
 * Lifetimes (steps, inclusive):
 *   TK_PARAM, TK_STATE, TK_OPT  persistent: the whole program (eval included)
 *   TK_INPUT, TK_LABEL          written by the loader before step 0: [0, last reader]
 *   TK_LOSS                     [producer, end of the training steps] (read by the runtime)
 *   g->eval_output              [producer, last step] (read by the runtime after eval)
 *   anything else               [first writer, last reader]; written but never read:
 *                               its producing step only
 *   workspace of step s         [s, s]: its kernel's scratch (conv im2col) after the
 *                               step's float32 working copies (convert.c)
 * TK_CONST tensors take no arena space (the emitter folds them into the code).
 *
 * Not here: offsets (offsets.c), recomputation or offload (second instances).
 * Cost: O(steps + tensors + sum of node arities). */
#include "plan.h"

#include <limits.h>
#include <stdlib.h>

int64_t arena_align(int64_t b) { return (b + SNRT_ALIGN - 1) / SNRT_ALIGN * SNRT_ALIGN; }

bool tensor_kind_persistent(TensorKind k) {
  return k == TK_PARAM || k == TK_STATE || k == TK_OPT || k == TK_CONSTVAL;
}

static int add_inst(Plan *pl, int tensor, int64_t bytes, int first, int last, bool persistent) {
  xgrow((void **)&pl->inst, &pl->capinst, pl->ninst + 1, sizeof *pl->inst);
  pl->inst[pl->ninst] = (Instance){.tensor = tensor, .bytes = arena_align(bytes), .first = first,
                                   .last = last, .offset = -1, .host_offset = -1,
                                   .persistent = persistent};
  return pl->ninst++;
}

int plan_new_instance(Plan *pl, int tensor, int64_t bytes, bool host) {
  xgrow((void **)&pl->inst, &pl->capinst, pl->ninst + 1, sizeof *pl->inst);
  pl->inst[pl->ninst] = (Instance){.tensor = tensor, .bytes = bytes, .first = -1, .last = -1,
                                   .offset = -1, .host_offset = -1, .host = host};
  return pl->ninst++;
}

void plan_push_int(int **arr, int *n, int v) {
  if ((*n & (*n - 1)) == 0) *arr = xrealloc(*arr, sizeof(int) * (size_t)(*n ? 2 * *n : 1));
  (*arr)[(*n)++] = v;
}

const char *plan_inst_name(const Graph *g, const Plan *pl, int i) {
  const Instance *in = &pl->inst[i];
  if (in->tensor >= 0) return g->t[in->tensor].name;
  static char buf[4][300];
  static int k;
  char *s = buf[k++ & 3];
  const Step *st = &pl->route->s[in->first];
  snprintf(s, sizeof buf[0], "%s/workspace", st->node >= 0 ? g->n[st->node].name : "?");
  return s;
}

const char *plan_inst_kind(const Graph *g, const Plan *pl, int i) {
  const Instance *in = &pl->inst[i];
  return in->tensor >= 0 ? tensor_kind_name(g->t[in->tensor].kind) : "workspace";
}

/* Step statistics: live bytes by a difference array, layer peak by stamping
 * each step's distinct instances. */
static void step_stats(Plan *pl) {
  const Route *r = pl->route;
  int T = r->ns;
  int64_t *diff = xcalloc((size_t)T + 1, sizeof *diff);
  pl->persistent_bytes = pl->baseline_bytes = 0;
  for (int i = 0; i < pl->ninst; i++) {
    const Instance *in = &pl->inst[i];
    if (in->host) continue;   /* the pinned host arena is not device memory */
    pl->baseline_bytes += in->bytes;
    if (in->persistent) pl->persistent_bytes += in->bytes;
    diff[in->first] += in->bytes;
    diff[in->last + 1] -= in->bytes;
  }
  free(pl->live_bytes);
  pl->live_bytes = xcalloc((size_t)(T ? T : 1), sizeof *pl->live_bytes);
  pl->peak_live_bytes = pl->persistent_bytes;
  int64_t run = 0;
  for (int s = 0; s < T; s++) {
    run += diff[s];
    pl->live_bytes[s] = run;
    if (run > pl->peak_live_bytes) pl->peak_live_bytes = run;
  }
  free(diff);

  int *stamp = xmalloc(sizeof(int) * (size_t)(pl->ninst ? pl->ninst : 1));
  for (int i = 0; i < pl->ninst; i++) stamp[i] = -1;
  pl->layer_peak_bytes = pl->persistent_bytes;
  for (int s = 0; s < T; s++) {
    const Step *st = &r->s[s];
    int64_t need = pl->persistent_bytes;
    for (int k = 0; k < st->nin + st->nout + 1; k++) {
      int i = k < st->nin ? st->in[k] : k < st->nin + st->nout ? st->out[k - st->nin] : st->ws;
      if (i < 0 || stamp[i] == s || pl->inst[i].persistent || pl->inst[i].host) continue;
      stamp[i] = s;
      need += pl->inst[i].bytes;
    }
    if (need > pl->layer_peak_bytes) pl->layer_peak_bytes = need;
  }
  free(stamp);
}

/* Primary instances: one per arena tensor, and Step.in/out/ws set to them
 * (lifetimes are filled in by liveness_lifetimes). Tensors that no step
 * touches get none, except the input and labels, which the loader writes. */
/* The input an op may overwrite with its output 0 (-1: none). The kernels
 * promise it (runtime/snrt.h, "In place"). */
static int inplace_input(const Node *n) {
  switch (n->op) {
  case OP_UNARY_BWD: case OP_BN_BWD: case OP_SOFTMAX_BWD: return 1;   /* dx over dy */
  case OP_DROPOUT_BWD: return 0;
  case OP_FUSED_BWD: return n->nin - 1;   /* the first gradient over dy (elementwise) */
  default: return -1;
  }
}

void liveness_assign(const Graph *g, Plan *pl) {
  Route *r = pl->route;
  int T = r->ns;
  bool *used = xcalloc((size_t)(g->nt ? g->nt : 1), sizeof(bool));
  for (int s = 0; s < T; s++) {
    const Step *st = &r->s[s];
    if (st->node < 0) continue;
    const Node *n = &g->n[st->node];
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] >= 0) used[n->in[k]] = true;
    for (int k = 0; k < n->nout; k++) {
      int t = n->out[k];
      if (t < 0) continue;
      if (g->t[t].kind == TK_CONST) node_error(n, "writes the constant '%s'", g->t[t].name);
      used[t] = true;
    }
  }
  /* In place: a gradient kernel that may write over its incoming gradient
   * (elementwise, or reading each channel fully before writing it) does so
   * when that gradient dies at the step: dx shares dy's instance. */
  int *alias = xmalloc(sizeof(int) * (size_t)(g->nt ? g->nt : 1));
  int *lastread = xmalloc(sizeof(int) * (size_t)(g->nt ? g->nt : 1));
  for (int t = 0; t < g->nt; t++) alias[t] = -1, lastread[t] = -1;
  for (int s = 0; s < T; s++) {
    const Step *st = &r->s[s];
    if (st->node < 0) continue;
    const Node *n = &g->n[st->node];
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] >= 0) lastread[n->in[k]] = s;
  }
  for (int s = 0; s < T; s++) {
    const Step *st = &r->s[s];
    if (st->node < 0) continue;
    const Node *n = &g->n[st->node];
    int k = inplace_input(n);
    /* Policy none is the baseline: every tensor its own region, no sharing. */
    if (pl->planned == POL_NONE || k < 0 || k >= n->nin || n->nout < 1) continue;
    int dy = n->in[k], dx = n->out[0];
    if (dy < 0 || dx < 0 || dy == dx || lastread[dy] != s) continue;
    TensorKind kd = g->t[dy].kind, kx = g->t[dx].kind;
    if ((kd != TK_GRAD && kd != TK_PGRAD) || (kx != TK_GRAD && kx != TK_PGRAD)) continue;
    if (tensor_bytes(&g->t[dy]) != tensor_bytes(&g->t[dx]) || alias[dx] >= 0) continue;
    bool elsewhere = false;   /* dy must not also be another input of this node */
    for (int j = 0; j < n->nin; j++) elsewhere |= j != k && n->in[j] == dy;
    if (elsewhere) continue;
    alias[dx] = alias[dy] >= 0 ? alias[dy] : dy;
  }
  free(pl->tensor_inst);
  pl->tensor_inst = xmalloc(sizeof(int) * (size_t)(g->nt ? g->nt : 1));
  pl->ntensors = g->nt;
  pl->ninst = 0;
  for (int t = 0; t < g->nt; t++) {
    const Tensor *x = &g->t[t];
    pl->tensor_inst[t] = -1;
    bool loaded = t == g->input || t == g->label;
    if (x->kind == TK_CONST || (!used[t] && !loaded) || alias[t] >= 0) continue;
    if (x->rank < 0) internal_error(__FILE__, __LINE__, "tensor '%s' has no shape", x->name);
    pl->tensor_inst[t] = add_inst(pl, t, tensor_bytes(x), -1, -1, tensor_kind_persistent(x->kind));
  }
  pl->aliased_bytes = 0;
  for (int t = 0; t < g->nt; t++)
    if (alias[t] >= 0) {
      pl->tensor_inst[t] = pl->tensor_inst[alias[t]];
      pl->aliased_bytes += arena_align(tensor_bytes(&g->t[t]));
    }
  free(used), free(alias), free(lastread);
  for (int s = 0; s < T; s++) {
    Step *st = &r->s[s];
    if (st->node < 0) continue;
    const Node *n = &g->n[st->node];
    snc_assert(st->nin == n->nin && st->nout == n->nout);
    for (int k = 0; k < n->nin; k++)
      st->in[k] = n->in[k] < 0 || g->t[n->in[k]].kind == TK_CONST ? -1 : pl->tensor_inst[n->in[k]];
    for (int k = 0; k < n->nout; k++)
      st->out[k] = n->out[k] < 0 ? -1 : pl->tensor_inst[n->out[k]];
    st->ws = liveness_workspace(g, pl, n, s);
  }
}

int liveness_workspace(const Graph *g, Plan *pl, const Node *n, int first) {
  int64_t cv = convert_bytes(g, n), ws = node_workspace_bytes(g, n);
  if (cv + ws <= 0) return -1;
  int i = add_inst(pl, -1, cv + ws, first, first, false);
  pl->inst[i].convert_bytes = cv;
  return i;
}

/* Lifetimes from the steps (after any pass that inserted steps or instances):
 * first = the first step writing the instance, last = the last step reading
 * it, with the rules in the header for persistent, loaded, loss and logits. */
void liveness_lifetimes(const Graph *g, Plan *pl) {
  Route *r = pl->route;
  int T = r->ns;
  for (int i = 0; i < pl->ninst; i++) pl->inst[i].first = INT_MAX, pl->inst[i].last = -1;
  for (int s = 0; s < T; s++) {
    const Step *st = &r->s[s];
    /* Reads, and instances a copy keeps busy through this step. A read before
     * any write is marked (first = -s - 2) and reported below. */
    for (int k = 0; k < st->nin + st->nkeep; k++) {
      int i = k < st->nin ? st->in[k] : st->keep[k - st->nin];
      if (i < 0) continue;
      if (pl->inst[i].first == INT_MAX) pl->inst[i].first = -s - 2;
      pl->inst[i].last = s;
    }
    for (int k = 0; k < st->nout + 1; k++) {
      int i = k < st->nout ? st->out[k] : st->ws;
      if (i < 0) continue;
      Instance *in = &pl->inst[i];
      if (in->first == INT_MAX) in->first = s;
      if (k == st->nout && in->last < s) in->last = s;
    }
  }
  for (int i = 0; i < pl->ninst; i++) {
    Instance *in = &pl->inst[i];
    int t = in->tensor;
    const Tensor *x = t >= 0 ? &g->t[t] : NULL;
    if (in->persistent) {
      in->first = 0, in->last = T - 1;
      continue;
    }
    bool loaded = x && (t == g->input || t == g->label) && i == pl->tensor_inst[t];
    if (loaded) {
      in->first = 0;
      if (in->last < 0) in->last = 0;
      continue;
    }
    if (in->first == INT_MAX)
      internal_error(__FILE__, __LINE__, "instance %d of '%s' is never written or read", i,
                     plan_inst_name(g, pl, i));
    if (in->first < 0)
      internal_error(__FILE__, __LINE__, "tensor '%s' is read at step %d before it is written",
                     plan_inst_name(g, pl, i), -in->first - 2);
    if (in->last < in->first) in->last = in->first;
    if (x && x->kind == TK_LOSS && in->last < r->train_steps - 1) in->last = r->train_steps - 1;
    if (x && graph_is_eval_output(g, t)) in->last = T - 1;
  }
  step_stats(pl);
}

void liveness_compute(const Graph *g, Plan *pl) {
  liveness_assign(g, pl);
  liveness_lifetimes(g, pl);
}

/* Forward ops whose output may overwrite their input 0 (the kernels promise
 * it: runtime/snrt.h, "In place"): elementwise ones, and Softmax (each row
 * read fully before it is written; rebuilt attention probabilities then take
 * the scores' bytes); a fused elementwise chain any of its inputs (a
 * residual Add + ReLU rebuilt over the branch it adds). */
static bool inplace_forward(OpKind op) {
  switch (op) {
  case OP_RELU: case OP_LEAKYRELU: case OP_SIGMOID: case OP_TANH: case OP_CLIP:
  case OP_DROPOUT: case OP_BN_SAVED: case OP_BN_INFER: case OP_SOFTMAX: case OP_FUSED: return true;
  default: return false;
  }
}

void liveness_floors(const Graph *g, const Plan *pl, const bool *movable, int64_t *transient,
                     int64_t *host) {
  const Route *r = pl->route;
  int T = r->ns;
  int64_t *diff = xcalloc((size_t)T + 1, sizeof *diff);
  /* movable: primary instances that may leave the device between uses */
  int64_t *away = xcalloc((size_t)T + 1, sizeof *away), *used = NULL;
  int *stamp = NULL;
  for (int i = 0; i < pl->ninst; i++) {
    const Instance *in = &pl->inst[i];
    if (movable && in->tensor >= 0 && !in->persistent && !in->host && movable[in->tensor] &&
        i == pl->tensor_inst[in->tensor] && in->last > in->first + 1) {
      away[in->first + 1] += in->bytes;
      away[in->last] -= in->bytes;
    }
    if (!in->host) continue;
    diff[in->first] += in->bytes;
    diff[in->last + 1] -= in->bytes;
  }
  if (movable) {
    used = xcalloc((size_t)T + 1, sizeof *used);
    stamp = xmalloc(sizeof(int) * (size_t)(pl->ninst ? pl->ninst : 1));
    for (int i = 0; i < pl->ninst; i++) stamp[i] = -1;
    for (int s = 0; s < T; s++) {
      const Step *st = &r->s[s];
      for (int k = 0; k < st->nin + st->nout + st->nkeep; k++) {
        int i = k < st->nin ? st->in[k] : k < st->nin + st->nout ? st->out[k - st->nin]
                                                                    : st->keep[k - st->nin - st->nout];
        if (i < 0 || stamp[i] == s) continue;
        stamp[i] = s;
        const Instance *in = &pl->inst[i];
        if (in->tensor >= 0 && !in->persistent && !in->host && movable[in->tensor] &&
            i == pl->tensor_inst[in->tensor] && in->first < s && s < in->last)
          used[s] += in->bytes;
      }
    }
  }
  int64_t run = 0, hmax = 0, dmax = 0, gone = 0;
  for (int s = 0; s < T; s++) {
    run += diff[s];
    gone += away[s];
    if (run > hmax) hmax = run;
    const Step *st = &r->s[s];
    int64_t d = pl->live_bytes[s] - pl->persistent_bytes - (gone - (used ? used[s] : 0));
    if (st->node >= 0 && inplace_forward(g->n[st->node].op) && st->nout == 1 && st->out[0] >= 0)
      d -= pl->inst[st->out[0]].bytes;
    if (d > dmax) dmax = d;
  }
  free(diff), free(away), free(used), free(stamp);
  *transient = dmax, *host = hmax;
}

/* After recomputation and offload: an elementwise step whose input instance
 * dies at that step writes its output over it (the classic in-place ReLU,
 * also for recompute and eval steps). The output instance disappears; the
 * instance array is compacted and lifetimes recomputed. */
void liveness_inplace(const Graph *g, Plan *pl) {
  Route *r = pl->route;
  int n = pl->ninst;
  int *repl = xmalloc(sizeof(int) * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) repl[i] = i;
  int merged = 0;
  for (int s = 0; s < r->ns; s++) {
    Step *st = &r->s[s];
    if (st->node < 0 || !inplace_forward(g->n[st->node].op) || st->nin < 1 || st->nout != 1) continue;
    int nk = g->n[st->node].op == OP_FUSED ? st->nin : 1;   /* the inputs it may write over */
    for (int k = 0; k < nk; k++) {
      int a = st->in[k], b = st->out[0];
      if (a < 0 || b < 0) continue;
      a = repl[a];
      const Instance *ia = &pl->inst[a], *ib = &pl->inst[b];
      if (a == b || ia->persistent || ib->persistent || ia->host || ib->host) continue;
      if (ia->bytes != ib->bytes || ia->last != s || ib->first != s || ia->tensor < 0 || ib->tensor < 0) continue;
      const Tensor *ta = &g->t[ia->tensor], *tb = &g->t[ib->tensor];
      if (ta->kind == TK_INPUT || ta->kind == TK_LABEL || tb->kind == TK_LOSS ||
          graph_is_eval_output(g, ib->tensor) || ta->dtype != tb->dtype)
        continue;
      bool other = false;   /* the input must not be read twice by this step */
      for (int j = 0; j < st->nin; j++) other |= j != k && st->in[j] >= 0 && repl[st->in[j]] == a;
      if (other) continue;
      repl[b] = a;
      pl->inst[a].last = ib->last;   /* provisional; recomputed below */
      merged++;
      break;
    }
  }
  if (merged) {
    /* Compact: drop merged instances, renumber every reference. */
    int *newi = xmalloc(sizeof(int) * (size_t)n), m = 0;
    for (int i = 0; i < n; i++) newi[i] = repl[i] == i ? m++ : -1;
    for (int i = 0; i < n; i++) {
      int root = i;
      while (repl[root] != root) root = repl[root];
      newi[i] = newi[root];
    }
    for (int i = 0, j = 0; i < n; i++)
      if (repl[i] == i) pl->inst[j++] = pl->inst[i];
    pl->ninst = m;
#define RENUM(x) do { if ((x) >= 0) (x) = newi[x]; } while (0)
    for (int s = 0; s < r->ns; s++) {
      Step *st = &r->s[s];
      for (int k = 0; k < st->nin; k++) RENUM(st->in[k]);
      for (int k = 0; k < st->nout; k++) RENUM(st->out[k]);
      for (int k = 0; k < st->nkeep; k++) RENUM(st->keep[k]);
      RENUM(st->ws);
    }
    for (int t = 0; t < g->nt; t++) RENUM(pl->tensor_inst[t]);
#undef RENUM
    free(newi);
    liveness_lifetimes(g, pl);
  }
  free(repl);
}

void liveness_dump(const Graph *g, const Plan *pl, FILE *f) {
  fprintf(f, "liveness: %d instances over %d steps; persistent %s, peak live %s\n",
          pl->ninst, pl->route->ns, fmt_bytes(pl->persistent_bytes),
          fmt_bytes(pl->peak_live_bytes));
  fprintf(f, "%7s  %-10s %12s %7s %7s  %s\n", "inst", "kind", "bytes", "first", "last", "tensor");
  for (int i = 0; i < pl->ninst; i++) {
    const Instance *in = &pl->inst[i];
    fprintf(f, "%7d  %-10s %12lld ", i, plan_inst_kind(g, pl, i), (long long)in->bytes);
    if (in->persistent) fprintf(f, "%15s", "persistent");
    else fprintf(f, "%7d %7d", in->first, in->last);
    fprintf(f, "  %s\n", plan_inst_name(g, pl, i));
  }
}
