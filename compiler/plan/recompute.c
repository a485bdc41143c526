/* recompute.c — cost-aware recomputation (SuperNeurons' second technique),
 * planned at compile time.
 *
 * Requires: pl->route and primary instances (liveness_assign).
 * Provides: a new route in which backward steps read recomputed instances of
 * "dropped" tensors instead of the forward ones; lifetimes are recomputed by
 * the caller (liveness_lifetimes).
 *
 * The cheap rule (seg_bytes 0): checkpoints are the outputs of expensive
 * forward nodes (Conv, Gemm, MatMul), the input, parameters, state,
 * constants and BN's saved batch statistics. Every other forward activation
 * that a backward step reads is dropped: its forward instance dies after its
 * last forward reader, and before the first backward step that needs it, a
 * chain of recompute steps rebuilds it from the nearest checkpoints,
 * following the graph (branches and joins included), in forward order.
 * Checkpoint mode (seg_bytes > 0): the checkpoints are cut tensors about
 * seg_bytes apart (select_checkpoints) and expensive layers are dropped and
 * rebuilt too. Explicit sets (RecomputeOpts.drop: auto's per-tensor
 * family, select.c): exactly the tensors given, with the cheap rule's levels;
 * with RecomputeOpts.tree (optimal.c's persistent schedules), what a rebuild
 * keeps follows the schedule (keep_tree).
 *
 * Exactness: a recompute step runs the forward node again on the same inputs,
 * with two exceptions that keep it bit-identical: BatchNormalization is
 * recomputed by a BN_SAVED twin from the batch statistics saved in the
 * forward pass (running statistics are not updated twice), and Dropout
 * regenerates its mask from the counter-based generator (same seed, step,
 * id), so the recomputed output equals the forward one bit for bit.
 *
 * Carried rebuilds (auto's per-tensor sets): a fused elementwise chain's
 * backward step that is given every input of the chain recomputes all its
 * registers, the output's included, as the forward did; a LayerNorm's
 * backward reads x and the saved mean and 1/std, from which y is a few
 * operations. Their carriers (rc_carrier: the same node with aux 1, the
 * forward's output as one more output, a LayerNorm's bias as one more
 * input) write that output too. Where the backward steps that read a
 * dropped output t before that step can run after it (the next Gemm's
 * weight gradient dW = t^T dy and the update of that weight: defer_set,
 * nothing that stays in between writes what they read or reads what they
 * write), they are deferred past it, and t is rebuilt by the backward step
 * for the write of t alone, not by a recompute step that reads the inputs
 * again (half the bytes of the rebuild of a GELU or a LayerNorm). Where
 * something needs t before (another rebuild), t is rebuilt the usual way
 * and the plain step runs. Bit-identical as the rest: the same code
 * computes y in both passes (runtime/snrt.h: snrt_fused_bwd_y,
 * snrt_ln_bwd_y). RecomputeOpts.carry: all of them, none, or the fused
 * chains' only (search.c plans a set each way that applies).
 *
 * Strategies, per segment (a connected group of dropped tensors between
 * checkpoints): speed-centric keeps each recomputed instance until its last
 * backward reader (recompute once); memory-centric recomputes what each
 * backward step needs just before it and lets it die right after (recompute
 * per step); in checkpoint mode, nested and recursive lie between (nested:
 * the expensive layers' rebuilt outputs kept, the cheap ones rebuilt per
 * step; recursive: a binary schedule over the cuts inside the segment, see
 * keep_recursive). Every segment starts speed-centric; while some step's
 * live bytes exceed the memory target, the segments holding recomputed
 * instances across such a step go one level up (next_level), and the route
 * is rebuilt. Each round costs O(steps + instances); rounds stop when
 * nothing changes.
 */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

typedef struct RC {
  Graph *g;
  Plan *pl;
  const Route *old;        // the route before recomputation
  bool *dropped;           // per tensor
  int *seg;                // per tensor: segment id (-1)
  int nseg;
  unsigned char *level;    // per segment: LV_SPEED, LV_NESTED, LV_MEMORY, LV_RECURSIVE
  bool *cheapt;            // per tensor: dropped, of a cheap producer (checkpoint mode)
  /* Checkpoint mode: the cut tensors inside each segment (second-level
   * checkpoints of the recursive level), in forward order. */
  int *ival;               // per dropped tensor: how many of its segment's cuts are made
                           // at or before it (a cut: its own number, 1..m)
  bool *iscut;             // per tensor: a cut inside a segment
  int *ncuts;              // per segment: its cuts (m)
  int *q;                  // per segment: the interval the current backward step is in (-1)
  const RcTree *tree;      // a persistent schedule's keep rule (every segment LV_TREE), or NULL
  int *cur;                // per tensor: valid recomputed instance (-1)
  Route *r;                // the route being built
  int *made;               // tensors recomputed for the current backward step
  int nmade, capmade;
  int *stack;
  int capstack;
  int *carry;              // per tensor: the old route's step whose carrier rebuilds it (-1),
                           // or NULL (carried rebuilds: auto's per-tensor sets only)
  int *defer_to;           // per old step: the carrier step it runs after (-1: in place)
  int *dset;               // scratch for defer_set
} RC;

/* Checkpoint mode: the longest segment (in tensors) that may go memory-centric. */
enum { MEMORY_CENTRIC_MAX = 128 };

/* Segment levels, in the order escalation raises them (levels only rise):
 * speed-centric (every dropped tensor rebuilt once, kept until its last
 * backward reader); nested (checkpoint mode: the expensive layers' outputs
 * kept, cheap ones rebuilt for each backward reader); recursive (checkpoint
 * mode, segments with cuts inside: see keep_recursive); memory-centric
 * (everything rebuilt for each backward step that needs it). */
enum { LV_SPEED = 0, LV_NESTED = 1, LV_MEMORY = 2, LV_RECURSIVE = 3, LV_TREE = 4 };

/* Recursive level: the cuts inside a segment (c_1 .. c_m, forward order;
 * c_0 the checkpoint the segment starts from) split it into intervals
 * I_0 .. I_m (I_k after c_k), and the intervals into a binary tree: the root
 * [0, m], each node [lo, hi] halved at its middle, c_lo its start. While the
 * backward pass is in I_q, the cuts kept are the starts of the tree nodes
 * that contain q (at most log2(m + 1) + 1 of them) and the expensive layers'
 * outputs of I_q; everything else rebuilt for a backward step dies after it,
 * cheap layers as in nested. Entering an interval rebuilds it from the
 * nearest kept start: each tensor is rebuilt about log2(m) times, and the
 * segment holds O(log m) cuts and one interval instead of all of it
 * (revolve's binary schedule; Chen et al. recursing on their segments). */
static bool on_path(int k, int q, int m) {
  int lo = 0, hi = m + 1;
  while (hi - lo > 1) {
    int mid = lo + (hi - lo) / 2;
    if (q >= mid) {
      if (k == mid) return true;
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return k == lo;
}

static bool keep_recursive(const RC *rc, int t) {
  int sg = rc->seg[t], q = rc->q[sg];
  if (q < 0) return false;
  if (rc->iscut[t] && on_path(rc->ival[t], q, rc->ncuts[sg])) return true;
  return rc->ival[t] == q && !(rc->cheapt && rc->cheapt[t]);
}

/* A persistent schedule (optimal.c; RecomputeOpts.tree): the interval a
 * tensor is in, and whether a rebuilt one stays after the step that made it
 * (RcTree). */
static int interval_of(const RC *rc, int t) {
  return rc->level[rc->seg[t]] == LV_TREE ? rc->tree->gi[t] : rc->ival[t];
}

static bool keep_tree(const RC *rc, int t) {
  const RcTree *tr = rc->tree;
  int q = rc->q[rc->seg[t]], j = tr->gi[t];
  if (q < 0 || j < 0) return false;
  if (j == q) return true;
  return tr->keep[(size_t)q * (size_t)tr->n + (size_t)j] & (tr->cut[t] ? 1 : 2);
}

static bool is_backward(StepKind k) { return k == SK_BACKWARD; }



/* The node a recompute step runs for forward node i. */
static int recompute_node(RC *rc, int i) {
  Graph *g = rc->g;
  if (g->n[i].op != OP_BATCHNORM) return i;
  if (g->n[i].twin >= 0) return g->n[i].twin;
  const Node *n = &g->n[i];
  int in[5] = {n->in[0], n->in[1], n->in[2], n->out[1], n->out[2]};
  int out = n->out[0];
  char *name = xasprintf("%s/recompute", n->name);
  void *p = n->p;
  int t = graph_add_node(g, OP_BN_SAVED, name, 5, in, 1, &out);
  free(name);
  g->n[t].phase = PH_RECOMPUTE;
  g->n[t].fwd = i;
  g->n[t].p = p;
  g->n[i].twin = t;
  return t;
}

/* The carrier of backward node b (-1: none): b with aux 1, the forward
 * node's output as one more output and what computing it needs beyond b's
 * inputs as more inputs. A FUSED_BWD given every input of its chain
 * (use_y 0): the chain's output; an LN_BWD of a LayerNormalization with a
 * bias: its y, from x, the saved mean and 1/std, the scale (b's inputs)
 * and the bias. Float32 outputs only (the kernels write floats). Made
 * once; b's twin holds it (-2: none), the carrier's twin holds b. */
int rc_carrier(Graph *g, int b) {
  if (b < 0 || (g->n[b].op != OP_FUSED_BWD && g->n[b].op != OP_LN_BWD) || g->n[b].aux) return -1;
  if (g->n[b].twin != -1) return g->n[b].twin >= 0 ? g->n[b].twin : -1;
  int f = g->n[b].fwd, y = -1, extra = -1;
  if (g->n[b].op == OP_FUSED_BWD) {
    const snrt_fused_t *p = g->n[b].p;
    if (f >= 0 && g->n[f].op == OP_FUSED && g->n[f].nout == 1 && !p->use_y &&
        p->have == (1 << p->nin) - 1 && g->n[b].nout + 1 <= op_info[OP_FUSED_BWD].max_out)
      y = g->n[f].out[0];
  } else if (f >= 0 && g->n[f].op == OP_LAYERNORM && g->n[f].nout == 3 && g->n[f].nin >= 3 &&
             g->n[f].in[2] >= 0 && g->n[b].nin == 5 && g->n[b].nout == 3) {
    y = g->n[f].out[0], extra = g->n[f].in[2];
  }
  if (y < 0 || g->t[y].dtype != DT_FLOAT) {
    g->n[b].twin = -2;
    return -1;
  }
  int nin = g->n[b].nin, nout = g->n[b].nout;
  int *in = xmalloc(sizeof(int) * (size_t)(nin + 1)), *out = xmalloc(sizeof(int) * (size_t)(nout + 1));
  memcpy(in, g->n[b].in, sizeof(int) * (size_t)nin);
  memcpy(out, g->n[b].out, sizeof(int) * (size_t)nout);
  if (extra >= 0) in[nin++] = extra;
  out[nout] = y;
  char *name = xasprintf("%s/carry", g->n[b].name);
  OpKind op = g->n[b].op;
  int c = graph_add_node(g, op, name, nin, in, nout + 1, out);
  free(name), free(in), free(out);
  g->n[c].phase = PH_RECOMPUTE;
  g->n[c].fwd = f;
  g->n[c].p = g->n[b].p;
  g->n[c].aux = 1;
  g->n[c].twin = b;
  g->n[b].twin = c;
  return c;
}

static bool has_int(const int *a, int n, int v) {
  for (int k = 0; k < n; k++)
    if (a[k] == v) return true;
  return false;
}

static bool movable(const Step *x) {
  return (x->kind == SK_BACKWARD || x->kind == SK_UPDATE) && x->node >= 0 && !x->nwait && !x->nkeep;
}

/* Whether a step y that stays reads or writes what a step x that moves past
 * it writes, or writes what x reads. */
static bool conflict(const Step *x, const Step *y) {
  for (int k = 0; k < y->nout; k++)
    if (y->out[k] >= 0 && (has_int(x->in, x->nin, y->out[k]) || has_int(x->out, x->nout, y->out[k])))
      return true;
  for (int k = 0; k < y->nin; k++)
    if (y->in[k] >= 0 && has_int(x->out, x->nout, y->in[k])) return true;
  if (y->ws >= 0 && (has_int(x->in, x->nin, y->ws) || has_int(x->out, x->nout, y->ws))) return true;
  if (x->ws >= 0 && (has_int(y->in, y->nin, x->ws) || has_int(y->out, y->nout, x->ws))) return true;
  return false;
}

/* The steps of route r that move with backward step q past step b (q < b),
 * in order: q and the steps in (q, b) that read or write what one of them
 * writes (the update of q's weight gradient). Where step b or a step that
 * cannot move depends on them, or one that stays conflicts with one that
 * moves, none can: returns 0. set: room for b - q steps. */
static int defer_set(const Route *r, int q, int b, int *set) {
  if (r->s[q].kind != SK_BACKWARD || !movable(&r->s[q])) return 0;
  int n = 0;
  set[n++] = q;
  for (int s = q + 1; s <= b; s++) {
    const Step *y = &r->s[s];
    bool dep = false;
    for (int j = 0; j < n && !dep; j++) {
      const Step *x = &r->s[set[j]];
      for (int k = 0; k < x->nout && !dep; k++)
        dep = x->out[k] >= 0 && (has_int(y->in, y->nin, x->out[k]) || has_int(y->out, y->nout, x->out[k]));
    }
    if (dep && (s == b || !movable(y))) return 0;
    if (dep) {
      set[n++] = s;
      continue;
    }
    for (int j = 0; j < n; j++)
      if (conflict(&r->s[set[j]], y)) return 0;
  }
  return n;
}

/* Per tensor of g: the step of route r whose carrier can rebuild it (every
 * backward step reading it before that step can be deferred past it), or
 * -1. Makes the carriers it needs. */
int *rc_carry_steps(Graph *g, const Route *r) {
  int *carry = xmalloc(sizeof(int) * (size_t)(g->nt + 1));
  for (int t = 0; t <= g->nt; t++) carry[t] = -1;
  int nt = g->nt;
  for (int s = 0; s < r->train_steps; s++) {
    const Step *st = &r->s[s];
    if (st->kind != SK_BACKWARD || st->node < 0 || rc_carrier(g, st->node) < 0) continue;
    int y = g->n[g->n[st->node].fwd].out[0];
    if (y >= 0 && y < nt && carry[y] == -1) carry[y] = s;
  }
  /* Readers before the carrier step must move past it, with the steps that
   * move with them (defer_set). A step moves for one carrier only (two
   * weight gradients summed into one: the sum and the update would move
   * past the nearer carrier only), and no carrier step moves (what waits
   * for it would go unchecked): where a set meets one taken before so, its
   * step's tensors are not carried; until nothing changes. */
  int T = r->train_steps;
  int *set = xmalloc(sizeof(int) * (size_t)(T + 1)), *owner = xmalloc(sizeof(int) * (size_t)(T + 1));
  bool *is_carrier = xmalloc((size_t)T + 1);
  for (bool changed = true; changed;) {
    changed = false;
    for (int s = 0; s < T; s++) owner[s] = -1, is_carrier[s] = false;
    for (int t = 0; t < nt; t++)
      if (carry[t] >= 0) is_carrier[carry[t]] = true;
    for (int q = 0; q < T; q++) {
      const Step *st = &r->s[q];
      if (st->kind != SK_BACKWARD || st->node < 0) continue;
      const Node *n = &g->n[st->node];
      int to = -1, tq = -1;
      bool ok = true;
      for (int k = 0; k < n->nin; k++) {
        int t = n->in[k];
        if (t < 0 || t >= nt || carry[t] < 0 || q >= carry[t]) continue;
        ok &= to < 0 || carry[t] == to;
        to = carry[t], tq = t;
      }
      if (to < 0) continue;
      int m = ok ? defer_set(r, q, to, set) : 0;
      for (int j = 0; j < m && ok; j++) {   /* an owner dropped in this pass moves nothing */
        int o = owner[set[j]];
        ok = !is_carrier[set[j]] && (o < 0 || carry[o] < 0 || carry[o] == to);
      }
      if (ok && m) {   /* the set is taken: its steps move for this carrier */
        for (int j = 0; j < m; j++) owner[set[j]] = tq;
        continue;
      }
      for (int k = 0; k < n->nin; k++) {   /* none of q's waits for a carrier */
        int t = n->in[k];
        if (t >= 0 && t < nt && carry[t] >= 0 && q < carry[t]) carry[t] = -2;
      }
      changed = true;
    }
  }
  free(set), free(owner), free(is_carrier);
  for (int t = 0; t < nt; t++)
    if (carry[t] < 0) carry[t] = -1;
  return carry;
}

/* The instance a backward step reads for tensor t. */
static int input_instance(RC *rc, int t) {
  if (t < 0 || rc->g->t[t].kind == TK_CONST) return -1;
  return rc->dropped[t] ? rc->cur[t] : rc->pl->tensor_inst[t];
}

/* Makes tensor t available (recomputing what is missing, inputs first) and
 * returns its instance. Iterative post-order walk: chains of cheap layers
 * can be long. */
static int ensure(RC *rc, int t0) {
  Graph *g = rc->g;
  int sp = 0;
  xgrow((void **)&rc->stack, &rc->capstack, 1, sizeof(int));
  rc->stack[sp++] = t0;
  while (sp) {
    int t = rc->stack[sp - 1];
    if (rc->cur[t] >= 0) {
      sp--;
      continue;
    }
    int node = g->t[t].producer;
    const Node *n = &g->n[node];
    bool ready = true;
    for (int k = 0; k < n->nin; k++) {
      int x = n->in[k];
      if (x >= 0 && rc->dropped[x] && rc->cur[x] < 0) {
        xgrow((void **)&rc->stack, &rc->capstack, sp + 1, sizeof(int));
        rc->stack[sp++] = x;
        ready = false;
      }
    }
    if (!ready) continue;
    sp--;
    /* One recompute step for the producer; every dropped output gets a new
     * instance (a BN twin writes only y). */
    int rn = recompute_node(rc, node);
    n = &g->n[node];
    const Node *m = &g->n[rn];
    Step proto = {.kind = SK_RECOMPUTE, .node = rn, .tensor = -1, .nin = m->nin,
                  .nout = m->nout, .ws = -1, .event = -1};
    int in[8], out[8];
    int *inp = m->nin <= 8 ? in : xmalloc(sizeof(int) * (size_t)m->nin);
    int *outp = m->nout <= 8 ? out : xmalloc(sizeof(int) * (size_t)m->nout);
    for (int k = 0; k < m->nin; k++) inp[k] = input_instance(rc, m->in[k]);
    /* Every output gets a new instance (one no backward step needs, e.g. the
     * other half of a Split, dies right after this step). */
    for (int k = 0; k < m->nout; k++) {
      int y = m->out[k];
      outp[k] = plan_new_instance(rc->pl, y, rc->pl->inst[rc->pl->tensor_inst[y]].bytes, false);
      if (!rc->dropped[y]) continue;
      rc->cur[y] = outp[k];
      xgrow((void **)&rc->made, &rc->capmade, rc->nmade + 1, sizeof(int));
      rc->made[rc->nmade++] = y;
    }
    proto.in = inp, proto.out = outp;
    /* A rebuilt step needs its workspace again (one of its own: a conv's
     * im2col, a 16-bit step's float32 copies); lifetimes come later. */
    proto.ws = liveness_workspace(g, rc->pl, m, -1);
    route_push(rc->r, &proto);
    if (inp != in) free(inp);
    if (outp != out) free(outp);
  }
  return rc->cur[t0];
}


/* Whether old step s is deferred: it reads a dropped tensor that a later
 * step's carrier rebuilds (not rebuilt yet); then it and the steps that
 * move with it (defer_set) wait until that step. */
static bool defer_step(RC *rc, int s) {
  if (!rc->carry) return false;
  const Node *n = &rc->g->n[rc->old->s[s].node];
  int to = -1;
  for (int k = 0; k < n->nin; k++) {
    int t = n->in[k];
    if (t >= 0 && rc->dropped[t] && rc->cur[t] < 0 && rc->carry[t] > s && rc->carry[t] > to)
      to = rc->carry[t];
  }
  int m = to < 0 ? 0 : defer_set(rc->old, s, to, rc->dset);
  for (int j = 0; j < m; j++) {
    int x = rc->dset[j];
    if (rc->defer_to[x] >= 0 && rc->defer_to[x] != to)   /* rc_carry_steps rules it out */
      internal_error(__FILE__, __LINE__, "a step deferred past two carriers");
    rc->defer_to[x] = to;
  }
  return m > 0;
}

/* Old backward step s pushed: its dropped inputs rebuilt first (or, where it
 * carries a dropped tensor not rebuilt yet, by its carrier), then the
 * steps deferred until it. */
static void push_backward(RC *rc, int s) {
  Graph *g = rc->g;
  const Step *st = &rc->old->s[s];
  /* ensure() adds recompute nodes (g->n may move): index it afresh. */
  const int nd = st->node;
  rc->nmade = 0;
  /* Recursive segments: the interval this step is in (the latest of the
   * dropped tensors it reads). A schedule's (LV_TREE): the interval of
   * the forward node it derives from, as optimal.c counts it (a cut's
   * producer in the interval before the cut), so that a backward step
   * reading its node's input and its output (LRN, a cut's ReLU) runs
   * where the schedule put it; the latest read where it has none. */
  int fq = -1, f = g->n[nd].fwd;
  if (rc->tree && f >= 0 && f < g->nfwd && g->n[f].nout > 0 && g->n[f].out[0] >= 0) {
    int y = g->n[f].out[0];
    if (rc->tree->gi[y] >= 0) fq = rc->tree->gi[y] - (rc->tree->cut[y] ? 1 : 0);
  }
  for (int k = 0; k < g->n[nd].nin; k++) {
    int t = g->n[nd].in[k];
    if (t < 0 || !rc->dropped[t]) continue;
    int lv = rc->level[rc->seg[t]];
    int iq = lv == LV_TREE && fq >= 0 ? fq : interval_of(rc, t);
    if ((lv == LV_RECURSIVE || lv == LV_TREE) && iq > rc->q[rc->seg[t]]) rc->q[rc->seg[t]] = iq;
  }
  for (int k = 0; k < g->n[nd].nin; k++) {
    int t = g->n[nd].in[k];
    if (t >= 0 && rc->dropped[t]) ensure(rc, t);
  }
  /* The carrier: the chain's output t, dropped and not rebuilt yet. */
  int carried = -1;
  if (rc->carry && f >= 0 && (g->n[nd].op == OP_FUSED_BWD || g->n[nd].op == OP_LN_BWD)) {
    int t = g->n[f].out[0];
    if (t >= 0 && rc->dropped[t] && rc->cur[t] < 0 && rc->carry[t] == s) carried = t;
  }
  Step *ns;
  int m = nd;   /* the node the step runs */
  if (carried >= 0) {
    m = rc_carrier(g, nd);
    int out[SNRT_FUSED_MAX_IN + 1], in[SNRT_FUSED_MAX_IN + 3];
    memcpy(out, st->out, sizeof(int) * (size_t)st->nout);
    int y = plan_new_instance(rc->pl, carried, rc->pl->inst[rc->pl->tensor_inst[carried]].bytes, false);
    out[st->nout] = y;
    Step proto = *st;
    proto.node = m, proto.nout = st->nout + 1, proto.out = out;
    proto.nin = g->n[m].nin, proto.in = in;   /* set below */
    ns = route_push(rc->r, &proto);
    rc->cur[carried] = y;
    rc->pl->carried++;
  } else {
    ns = route_push(rc->r, st);
  }
  for (int k = 0; k < g->n[m].nin; k++) ns->in[k] = input_instance(rc, g->n[m].in[k]);
  /* Memory-centric segments: what was recomputed for this step dies with
   * it; nested: the cheap part of it; recursive: all but what
   * keep_recursive keeps. */
  for (int i = 0; i < rc->nmade; i++) {
    int t = rc->made[i];
    int lv = rc->level[rc->seg[t]];
    if (lv == LV_MEMORY || (lv == LV_NESTED && rc->cheapt && rc->cheapt[t]) ||
        (lv == LV_RECURSIVE && !keep_recursive(rc, t)) || (lv == LV_TREE && !keep_tree(rc, t)))
      rc->cur[t] = -1;
  }
  for (int k = 0; k < g->n[nd].nin; k++) {
    int t = g->n[nd].in[k];
    if (t >= 0 && rc->dropped[t]) rc->q[rc->seg[t]] = -1;
  }
  /* The steps deferred until this one, in their order (a dropped tensor
   * they read that is still missing is rebuilt the usual way). */
  if (!rc->carry) return;
  for (int q = 0; q < s; q++) {
    if (rc->defer_to[q] != s) continue;
    rc->defer_to[q] = -1;
    if (rc->old->s[q].kind == SK_BACKWARD) push_backward(rc, q);
    else route_push(rc->r, &rc->old->s[q]);
  }
}

long rc_rebuilds;

/* Builds the recomputing route from rc->old with the current strategies. */
static void rebuild(RC *rc) {
  rc_rebuilds++;
  Graph *g = rc->g;
  const Route *old = rc->old;
  rc->r = xcalloc(1, sizeof *rc->r);
  rc->pl->carried = 0;
  if (rc->carry)
    for (int s = 0; s < old->ns; s++) rc->defer_to[s] = -1;
  for (int t = 0; t < g->nt; t++) rc->cur[t] = -1;
  for (int sg = 0; sg < rc->nseg; sg++) rc->q[sg] = -1;
  /* Drop the instances a previous round made (they are at the end). */
  for (int s = 0; s < old->ns; s++) {
    const Step *st = &old->s[s];
    bool bwd = s < old->train_steps && is_backward(st->kind) && st->node >= 0;
    if (rc->carry && rc->defer_to[s] >= 0) {
      /* runs after its carrier step */
    } else if (bwd) {
      if (!defer_step(rc, s)) push_backward(rc, s);
    } else {
      route_push(rc->r, st);
    }
    if (s == old->train_steps - 1) {
      for (int q = 0; q <= s && rc->carry; q++)
        if (rc->defer_to[q] >= 0)
          internal_error(__FILE__, __LINE__, "a step deferred past a carrier was never run");
      rc->r->train_steps = rc->r->ns;
    }
  }
  if (old->train_steps == 0) rc->r->train_steps = 0;
}

static int find(int *parent, int x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

/* Segments: dropped tensors joined through the nodes that produce them
 * (union-find). */
static void find_segments(RC *rc) {
  Graph *g = rc->g;
  int *parent = xmalloc(sizeof(int) * (size_t)g->nt);
  for (int t = 0; t < g->nt; t++) parent[t] = t;
#define FIND(x) find(parent, (x))
  for (int t = 0; t < g->nt; t++) {
    if (!rc->dropped[t]) continue;
    const Node *n = &g->n[g->t[t].producer];
    for (int k = 0; k < n->nin + n->nout; k++) {
      int x = k < n->nin ? n->in[k] : n->out[k - n->nin];
      if (x >= 0 && rc->dropped[x]) parent[FIND(x)] = FIND(t);
    }
  }
  rc->nseg = 0;
  int *id = xmalloc(sizeof(int) * (size_t)g->nt);
  for (int t = 0; t < g->nt; t++) id[t] = -1;
  for (int t = 0; t < g->nt; t++) {
    rc->seg[t] = -1;
    if (!rc->dropped[t]) continue;
    int root = FIND(t);
    if (id[root] < 0) id[root] = rc->nseg++;
    rc->seg[t] = id[root];
  }
#undef FIND
  free(parent);
  free(id);
  rc->level = xcalloc((size_t)rc->nseg + 1, 1);
}


/* Per tensor: read by a backward step of the route (saved for backward). */
static bool *saved_for_backward(const Graph *g, const Route *old) {
  bool *saved = xcalloc((size_t)g->nt, sizeof(bool));
  for (int s = 0; s < old->train_steps; s++) {
    const Step *st = &old->s[s];
    if (!is_backward(st->kind) || st->node < 0) continue;
    const Node *n = &g->n[st->node];
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] >= 0) saved[n->in[k]] = true;
  }
  return saved;
}

/* Per tensor: a cut, the only forward activation crossing a point of the
 * forward order (made at or before forward node i, read after it, and no
 * other activation is): a ResNet block's output, a transformer block's
 * residual stream, each layer's output in a plain chain. */
bool *forward_cuts(const Graph *g) {
  int nf = g->nfwd;
  /* lastf[t]: the last forward node reading activation t; cross[i]: how many
   * activations are made at or before node i and read after it. */
  int *lastf = xmalloc(sizeof(int) * (size_t)(g->nt + 1));
  for (int t = 0; t < g->nt; t++) lastf[t] = -1;
  for (int i = 0; i < nf; i++) {
    const Node *n = &g->n[i];
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] >= 0) lastf[n->in[k]] = i;
  }
  int *cross = xcalloc((size_t)nf + 2, sizeof(int));
  for (int i = 0; i < nf; i++) {
    const Node *n = &g->n[i];
    for (int k = 0; k < n->nout; k++) {
      int t = n->out[k];
      if (t < 0 || g->t[t].kind != TK_ACT || lastf[t] <= i) continue;
      cross[i]++, cross[lastf[t]]--;
    }
  }
  for (int i = 1; i < nf; i++) cross[i] += cross[i - 1];
  bool *cut = xcalloc((size_t)g->nt + 1, sizeof(bool));
  for (int i = 0; i < nf; i++) {
    const Node *n = &g->n[i];
    for (int k = 0; k < n->nout; k++) {
      int t = n->out[k];
      if (t >= 0 && g->t[t].kind == TK_ACT && cross[i] == 1 && lastf[t] > i) cut[t] = true;
    }
  }
  free(lastf), free(cross);
  return cut;
}

/* Checkpoint selection for segments of about `seg_bytes` (the checkpoint
 * mode): every forward activation is dropped except the checkpoints, so
 * expensive layers are rebuilt too. Checkpoints are cut tensors (the only
 * activation crossing a point of the forward order: a ResNet block's output,
 * a transformer block's residual stream), taken in forward order whenever the
 * activations read by backward since the previous one add up to seg_bytes;
 * each segment is then rebuilt from its first checkpoint alone. After the
 * last checkpoint nothing is dropped but what the cheap rule drops
 * (`cheap`): the backward pass starts there, and rebuilding what the forward
 * pass just made would only cost time. Returns the number of checkpoints
 * (their tensors in *ck_out, forward order). */
static int select_checkpoints(const Graph *g, const Route *old, bool *dropped, const bool *cheap,
                              int64_t seg_bytes, int **ck_out, bool *iscut) {
  int capck = 0;
  int nf = g->nfwd;
  bool *saved = saved_for_backward(g, old);
  bool *cuts = forward_cuts(g);
  int last_ck = -1, nck = 0;
  int64_t acc = 0;
  for (int i = 0; i < nf; i++) {
    const Node *n = &g->n[i];
    for (int k = 0; k < n->nout; k++) {
      int t = n->out[k];
      if (t < 0 || g->t[t].kind != TK_ACT) continue;
      bool cut = cuts[t];
      if (cut && acc >= seg_bytes) {
        acc = 0, last_ck = i;
        xgrow((void **)ck_out, &capck, nck + 1, sizeof(int));
        (*ck_out)[nck++] = t;
        continue;
      }
      dropped[t] = true;
      iscut[t] = cut;
      if (saved[t]) acc += tensor_bytes(&g->t[t]);
    }
  }
  /* The tail after the last checkpoint: the cheap rule only. */
  for (int i = last_ck + 1; i < nf; i++) {
    const Node *n = &g->n[i];
    for (int k = 0; k < n->nout; k++)
      if (n->out[k] >= 0) dropped[n->out[k]] = cheap[n->out[k]], iscut[n->out[k]] = false;
  }
  free(saved), free(cuts);
  return nck;
}

/* One recomputation scheme being planned: the decisions (what is dropped,
 * the segments and their levels) and the plan whose route they make. */
struct RcChain {
  RC rc;
  bool *ck;                // checkpoints the target ignores (offloaded next), or NULL
  int *segsize;            // per segment: its tensors
  int base_inst;           // instances before recomputation (later ones are rebuilt per round)
  int64_t seg_bytes;
  bool recursive;          // escalate to the recursive level instead of nested
  int nck;
  int64_t peak;            // max over steps of the live bytes a target is compared with
};

/* The live bytes at each step that a target is compared with (offloaded
 * checkpoints do not count where they will be on the host); their maximum. */
static int64_t eff_live(RcChain *c, int64_t *per_step) {
  Graph *g = c->rc.g;
  Plan *pl = c->rc.pl;
  const Route *r = pl->route;
  int64_t *sub = xcalloc((size_t)r->ns + 2, sizeof(int64_t));
  if (c->ck)
    for (int t = 0; t < g->nt; t++) {
      if (!c->ck[t] || pl->tensor_inst[t] < 0) continue;
      const Instance *in = &pl->inst[pl->tensor_inst[t]];
      if (in->first < 0 || in->last < in->first) continue;
      sub[in->first] += in->bytes, sub[in->last + 1] -= in->bytes;
    }
  int64_t run = 0, mx = 0;
  for (int s = 0; s < r->ns; s++) {
    run += sub[s];
    int64_t v = pl->live_bytes[s] - run;
    if (per_step) per_step[s] = v;
    if (v > mx) mx = v;
  }
  free(sub);
  return mx;
}

/* The route for the current levels, and its lifetimes. */
static void round_route(RcChain *c) {
  c->rc.pl->ninst = c->base_inst;
  rebuild(&c->rc);
  c->rc.pl->route = c->rc.r;
  liveness_lifetimes(c->rc.g, c->rc.pl);
  c->peak = eff_live(c, NULL);
  c->rc.pl->recursive_segments = rc_chain_recursive_segments(c);
}

/* The cheap rule: rc->dropped, the forward activations of cheap producers
 * that backward reads (closed under "recomputing it reads"), less those not
 * worth dropping and those whose rebuild chain would pass max_chain steps. */
static void drop_cheap(RC *rc, int max_chain) {
  Graph *g = rc->g;
  const Route *old = rc->old;
  /* The cheap rule. Dropped: forward activations of cheap producers read by
   * a backward step. */
  for (int s = 0; s < old->train_steps; s++) {
    const Step *st = &old->s[s];
    if (!is_backward(st->kind) || st->node < 0) continue;
    const Node *n = &g->n[st->node];
    for (int k = 0; k < n->nin; k++) {
      int t = n->in[k];
      if (t < 0) continue;
      const Tensor *x = &g->t[t];
      if (x->kind != TK_ACT || x->producer < 0) continue;
      const Node *p = &g->n[x->producer];
      if (p->phase != PH_FORWARD || node_cost(g, p) == COST_EXPENSIVE) continue;
      rc->dropped[t] = true;
    }
  }
  /* Closed under "recomputing it reads": a cheap activation feeding a dropped
   * tensor's producer is dropped too, or the recompute would keep it alive.
   * One pass in reverse topological order reaches the fixpoint. */
  for (int i = g->nfwd - 1; i >= 0; i--) {
    const Node *n = &g->n[i];
    bool any = false;
    for (int k = 0; k < n->nout; k++) any |= n->out[k] >= 0 && rc->dropped[n->out[k]];
    if (!any) continue;
    for (int k = 0; k < n->nin; k++) {
      int t = n->in[k];
      if (t < 0 || g->t[t].kind != TK_ACT || g->t[t].producer < 0) continue;
      const Node *p = &g->n[g->t[t].producer];
      if (p->phase == PH_FORWARD && node_cost(g, p) != COST_EXPENSIVE) rc->dropped[t] = true;
    }
  }
  /* A cheap tensor is not worth dropping when rebuilding it needs inputs
   * that backward would not keep otherwise and nothing else reads, at least
   * as large (alexnet's
   * ReLU after a convolution: the convolution's output dies at the ReLU in
   * the liveness plan; dropping the ReLU's output would keep the
   * convolution's instead, and the rebuilt copy would sit beside it). */
  {
    bool *saved = saved_for_backward(g, old);
    int *readers = xcalloc((size_t)g->nt, sizeof(int));   // forward nodes reading it
    for (int i = 0; i < g->nfwd; i++)
      for (int j = 0; j < g->n[i].nin; j++)
        if (g->n[i].in[j] >= 0) readers[g->n[i].in[j]]++;
    for (int i = 0; i < g->nfwd; i++) {
      const Node *n = &g->n[i];
      for (int k = 0; k < n->nout; k++) {
        int t = n->out[k];
        if (t < 0 || !rc->dropped[t]) continue;
        int64_t extra = 0;
        for (int j = 0; j < n->nin; j++) {
          int x = n->in[j];
          if (x >= 0 && g->t[x].kind == TK_ACT && !rc->dropped[x] && !saved[x] && readers[x] == 1)
            extra += tensor_bytes(&g->t[x]);
        }
        if (extra >= tensor_bytes(&g->t[t])) rc->dropped[t] = false;
      }
    }
    free(saved), free(readers);
  }
  /* Bound each recomputation: a dropped tensor whose rebuild would take more
   * than RECOMPUTE_CHAIN steps becomes a checkpoint itself. Without this, a
   * ResNet stage's block outputs (each the sum of a branch and the previous
   * block's output) would be rebuilt from the whole stage's conv outputs.
   * chain[t] over-counts shared ancestors (a DAG); that only checkpoints a
   * little earlier. Offloading plans use short chains (each rebuild needs its
   * checkpoints prefetched at once); recomputation alone, longer ones. */
  int *chain = xcalloc((size_t)g->nt, sizeof(int));
  for (int i = 0; i < g->nfwd; i++) {
    const Node *n = &g->n[i];
    int cl = 1;
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] >= 0 && rc->dropped[n->in[k]]) cl += chain[n->in[k]];
    for (int k = 0; k < n->nout; k++) {
      int t = n->out[k];
      if (t < 0 || !rc->dropped[t]) continue;
      if (cl > max_chain) rc->dropped[t] = false;
      else chain[t] = cl;
    }
  }
  free(chain);
}

RcChain *rc_chain_new(Graph *g, Plan *pl, const RecomputeOpts *ro) {
  int64_t seg_bytes = ro->seg_bytes;
  int max_chain = ro->max_chain;
  RcChain *c = xcalloc(1, sizeof *c);
  c->rc = (RC){.g = g, .pl = pl, .old = pl->route};
  RC *rc = &c->rc;
  const Route *old = pl->route;
  rc->dropped = xcalloc((size_t)g->nt, sizeof(bool));
  rc->iscut = xcalloc((size_t)g->nt + 1, sizeof(bool));
  rc->ival = xcalloc((size_t)g->nt + 1, sizeof(int));
  rc->seg = xmalloc(sizeof(int) * (size_t)g->nt);
  rc->cur = xmalloc(sizeof(int) * (size_t)g->nt);

  if (ro->drop) {
    /* auto's per-tensor sets (select.c): exactly these, speed-centric;
     * a persistent schedule's (optimal.c): exactly these, kept by its rule */
    memcpy(rc->dropped, ro->drop, (size_t)g->nt * sizeof(bool));
    seg_bytes = 0;
    rc->tree = ro->tree;
    if (!rc->tree && ro->carry != CARRY_NONE) {
      rc->carry = rc_carry_steps(g, old);
      for (int t = 0; t < g->nt; t++)
        if (!rc->dropped[t] || (ro->carry == CARRY_CHAINS && rc->carry[t] >= 0 &&
                                g->n[old->s[rc->carry[t]].node].op != OP_FUSED_BWD))
          rc->carry[t] = -1;
      rc->defer_to = xmalloc(sizeof(int) * (size_t)(old->ns + 1));
      rc->dset = xmalloc(sizeof(int) * (size_t)(old->ns + 1));
    }
  } else {
    drop_cheap(rc, max_chain);
  }
  if (seg_bytes > 0) {
    bool *cheap = xmalloc((size_t)g->nt * sizeof(bool));
    memcpy(cheap, rc->dropped, (size_t)g->nt * sizeof(bool));
    memset(rc->dropped, 0, (size_t)g->nt * sizeof(bool));
    free(pl->ckpt), pl->ckpt = NULL;
    c->nck = select_checkpoints(g, old, rc->dropped, cheap, seg_bytes, &pl->ckpt, rc->iscut);
    pl->checkpoints = c->nck;
    /* Nested (level 1): inside a rebuilt segment, the expensive layers'
     * outputs are kept until their last backward reader (second-level
     * checkpoints) and the cheap ones are rebuilt from them for each
     * backward step that reads them, then dropped again. */
    rc->cheapt = cheap;
    for (int t = 0; t < g->nt; t++) {
      int p = g->t[t].producer;
      cheap[t] = rc->dropped[t] && p >= 0 && p < g->nfwd && node_cost(g, &g->n[p]) != COST_EXPENSIVE;
    }
  }
  find_segments(rc);
  if (rc->tree) memset(rc->level, LV_TREE, (size_t)rc->nseg);
  /* The cuts inside each segment, numbered in forward order; each dropped
   * tensor's interval. */
  rc->ncuts = xcalloc((size_t)rc->nseg + 1, sizeof(int));
  rc->q = xmalloc(sizeof(int) * (size_t)(rc->nseg + 1));
  for (int i = 0; i < g->nfwd; i++) {
    const Node *n = &g->n[i];
    for (int k = 0; k < n->nout; k++) {
      int t = n->out[k];
      if (t < 0 || rc->seg[t] < 0) continue;
      if (rc->iscut[t]) rc->ival[t] = ++rc->ncuts[rc->seg[t]];
      else rc->ival[t] = rc->ncuts[rc->seg[t]];
    }
  }
  /* Checkpoints: the forward activations kept (checkpoint mode). */
  if (seg_bytes > 0 && ro->ck_offloaded) {
    c->ck = xcalloc((size_t)g->nt, sizeof(bool));
    for (int i = 0; i < g->nfwd; i++)
      for (int k = 0; k < g->n[i].nout; k++) {
        int t = g->n[i].out[k];
        if (t >= 0 && g->t[t].kind == TK_ACT && !rc->dropped[t]) c->ck[t] = true;
      }
  }
  c->base_inst = pl->ninst;
  c->seg_bytes = seg_bytes;
  c->recursive = ro->recursive;
  c->segsize = xcalloc((size_t)rc->nseg + 1, sizeof(int));
  for (int t = 0; t < g->nt; t++)
    if (rc->seg[t] >= 0) c->segsize[rc->seg[t]]++;
  return c;
}

void rc_chain_start(RcChain *c) {
  if (c->rc.r) internal_error(__FILE__, __LINE__, "recomputation chain started twice");
  round_route(c);
}

int64_t rc_chain_peak(const RcChain *c) { return c->peak; }
Plan *rc_chain_plan(RcChain *c) { return c->rc.pl; }
int rc_chain_checkpoints(const RcChain *c) { return c->nck; }

int rc_chain_recursive_segments(const RcChain *c) {
  int n = 0;
  for (int sg = 0; sg < c->rc.nseg; sg++) n += c->rc.level[sg] == LV_RECURSIVE;
  return n;
}

/* The level after a segment's current one (-1: none). Checkpoint mode:
 * speed-centric, then nested, or recursive (RecomputeOpts.recursive, a
 * segment with cuts inside), then memory-centric (whose rebuilds cost a
 * segment's length squared: only up to MEMORY_CENTRIC_MAX tensors); the
 * cheap rule: speed-centric, memory-centric. Each level rebuilds every
 * tensor at least as often as the one before (nested and recursive are not
 * ordered: nested rebuilds the cheap cuts recursive keeps), so a chain's
 * recomputation only grows. */
static int next_level(const RcChain *c, int sg) {
  const RC *rc = &c->rc;
  int lv = rc->level[sg];
  bool small = c->segsize[sg] <= MEMORY_CENTRIC_MAX;
  if (c->seg_bytes <= 0) return lv == LV_SPEED ? LV_MEMORY : -1;
  if (lv == LV_SPEED) return c->recursive && rc->ncuts[sg] > 0 ? LV_RECURSIVE : LV_NESTED;
  if (lv == LV_NESTED || lv == LV_RECURSIVE) return small ? LV_MEMORY : -1;
  return -1;
}

/* Segments holding a recomputed instance across an over-target step (alive
 * there but not used there) go one level up (checkpoint mode: nested, then
 * memory-centric for segments up to MEMORY_CENTRIC_MAX tensors; the cheap
 * rule: memory-centric), and the route is rebuilt, until no segment
 * changes. Levels only go up: a chain escalated to a smaller target starts
 * from where the larger one left it. */
bool rc_chain_escalate(RcChain *c, int64_t target) {
  RC *rc = &c->rc;
  Plan *pl = rc->pl;
  bool any = false;
  while (target > 0 && c->peak > target) {
    const Route *r = pl->route;
    int64_t *live = xmalloc(sizeof(int64_t) * (size_t)(r->ns + 1));
    eff_live(c, live);
    int *diff = xcalloc((size_t)r->ns + 2, sizeof(int));
    bool *bumped = xcalloc((size_t)rc->nseg + 1, sizeof(bool));
    for (int s = 0; s < r->ns; s++) diff[s + 1] = diff[s] + (live[s] > target);
    free(live);
    bool changed = false;
    for (int i = c->base_inst; i < pl->ninst; i++) {
      const Instance *in = &pl->inst[i];
      /* (workspaces, and outputs no backward step needs, belong to no segment) */
      int sg = in->tensor >= 0 ? rc->seg[in->tensor] : -1;
      if (sg < 0 || rc->level[sg] == LV_MEMORY || in->last <= in->first + 1) continue;
      /* over-target steps strictly inside (first, last): one level up */
      if (diff[in->last] - diff[in->first + 1] > 0 && !bumped[sg]) {
        int lv = next_level(c, sg);
        if (lv < 0) continue;
        rc->level[sg] = (unsigned char)lv;
        bumped[sg] = changed = true;
      }
    }
    free(diff), free(bumped);
    if (!changed) break;
    any = true;
    route_free(rc->r);
    round_route(c);
  }
  return any;
}

double rc_node_seconds(const Graph *g, const Plan *pl, const Node *m, const DeviceProfile *dev) {
  double bytes = 0;
  for (int k = 0; k < m->nin + m->nout; k++) {
    int t = k < m->nin ? m->in[k] : m->out[k - m->nin];
    if (t < 0 || g->t[t].kind == TK_CONST || pl->tensor_inst[t] < 0) continue;
    bytes += (double)pl->inst[pl->tensor_inst[t]].bytes;
  }
  int64_t ws = node_workspace_bytes(g, m);
  if (ws > 0) bytes += (double)arena_align(ws);
  return cost_node_seconds(g, m, bytes, dev);
}

/* A lower bound of the seconds its recompute steps take, at any level: every
 * forward node that makes a dropped tensor which a backward step reads, or
 * which such a node's rebuild reads, runs at least once more, reading and
 * writing what its recompute step would. */
double rc_chain_rebuild_lb(RcChain *c, const DeviceProfile *dev) {
  RC *rc = &c->rc;
  Graph *g = rc->g;
  const Plan *pl = rc->pl;
  bool *saved = saved_for_backward(g, rc->old);
  bool *need = xcalloc((size_t)g->nfwd + 1, sizeof(bool));
  for (int t = 0; t < g->nt; t++) {
    int p = g->t[t].producer;
    if (rc->dropped[t] && saved[t] && p >= 0 && p < g->nfwd) need[p] = true;
  }
  double lb = 0;
  for (int i = g->nfwd - 1; i >= 0; i--) {
    if (!need[i]) continue;
    const Node *n = &g->n[i];
    for (int k = 0; k < n->nin; k++) {
      int x = n->in[k];
      int p = x >= 0 ? g->t[x].producer : -1;
      if (x >= 0 && rc->dropped[x] && p >= 0 && p < g->nfwd) need[p] = true;
    }
    int y = n->nout >= 1 ? n->out[0] : -1;
    if (y >= 0 && rc->carry && rc->carry[y] >= 0) {   /* at least its carrier's extra write */
      int b = rc->old->s[rc->carry[y]].node, cr = rc_carrier(g, b);
      lb += rc_node_seconds(g, pl, &g->n[cr], dev) - rc_node_seconds(g, pl, &g->n[b], dev);
      continue;
    }
    int rn = recompute_node(rc, i);   /* may add a node: g->n moves */
    lb += rc_node_seconds(g, pl, &g->n[rn], dev);
  }
  free(saved), free(need);
  return lb;
}

/* A lower bound of the device bytes the chain's first state (every segment
 * speed-centric: each dropped tensor rebuilt once and kept until its last
 * backward reader) holds at one step, persistent state not counted. At the
 * first backward step that reads a dropped tensor of a segment, that tensor
 * is rebuilt, with the dropped tensors of the same segment it is rebuilt
 * from (recursively); none of them was rebuilt before (no earlier backward
 * step read the segment), and each that a backward step reads stays live
 * until that reader, which is not earlier: so all of those are live there,
 * in instances of their own (rebuilt instances are never offloaded). Sums
 * them per step over the segments first read there; the most of any step.
 * search.c checks it against liveness_floors on every first state built.
 * Checkpoint-mode chains only: they carry no rebuilds (a carried one is
 * live at its carrier's step, not at its first reader's). */
int64_t rc_chain_first_floor(RcChain *c) {
  RC *rc = &c->rc;
  if (rc->carry) internal_error(__FILE__, __LINE__, "a floor asked of a chain with carriers");
  const Graph *g = rc->g;
  const Route *old = rc->old;
  bool *saved = saved_for_backward(g, old);
  bool *seen = xcalloc((size_t)rc->nseg + 1, sizeof(bool));
  bool *visited = xcalloc((size_t)g->nt + 1, sizeof(bool));
  int *stack = xmalloc(sizeof(int) * (size_t)(g->nt + 1));
  int64_t most = 0;
  for (int s = 0; s < old->train_steps; s++) {
    const Step *st = &old->s[s];
    if (!is_backward(st->kind) || st->node < 0) continue;
    const Node *n = &g->n[st->node];
    int64_t here = 0;
    int fresh[8], nfresh = 0;   /* segments first read here (a node reads few) */
    for (int k = 0; k < n->nin; k++) {
      int t = n->in[k];
      if (t < 0 || !rc->dropped[t] || rc->seg[t] < 0 || seen[rc->seg[t]]) continue;
      bool dup = false;
      for (int j = 0; j < nfresh; j++) dup |= fresh[j] == rc->seg[t];
      if (!dup && nfresh < 8) fresh[nfresh++] = rc->seg[t];
    }
    for (int j = 0; j < nfresh; j++) seen[fresh[j]] = true;
    for (int k = 0; k < n->nin; k++) {
      int t = n->in[k];
      if (t < 0 || !rc->dropped[t] || rc->seg[t] < 0 || visited[t]) continue;
      int sg = rc->seg[t];
      bool first = false;
      for (int j = 0; j < nfresh; j++) first |= fresh[j] == sg;
      if (!first) continue;
      int sp = 0;
      stack[sp++] = t, visited[t] = true;
      while (sp) {
        int x = stack[--sp];
        if (saved[x]) here += arena_align(tensor_bytes(&g->t[x]));
        if (g->t[x].producer < 0) continue;
        const Node *p = &g->n[g->t[x].producer];
        for (int i = 0; i < p->nin; i++) {
          int y = p->in[i];
          if (y >= 0 && rc->dropped[y] && rc->seg[y] == sg && !visited[y])
            stack[sp++] = y, visited[y] = true;
        }
      }
    }
    if (here > most) most = here;
  }
  free(saved), free(seen), free(visited), free(stack);
  return most;
}

static void chain_free(RcChain *c) {
  RC *rc = &c->rc;
  free(rc->dropped), free(rc->seg), free(rc->cur), free(rc->level), free(rc->cheapt);
  free(rc->iscut), free(rc->ival), free(rc->ncuts), free(rc->q);
  free(c->ck), free(c->segsize), free(rc->made), free(rc->stack);
  free(rc->carry), free(rc->defer_to), free(rc->dset);
  free(c);
}

/* Ends the chain: the plan keeps the current route (the one before
 * recomputation is freed). Returns the checkpoints kept. */
int rc_chain_finish(RcChain *c) {
  if (!c->rc.r) internal_error(__FILE__, __LINE__, "recomputation chain finished unstarted");
  route_free((Route *)c->rc.old);
  int nck = c->nck;
  chain_free(c);
  return nck;
}

void rc_chain_discard(RcChain *c) {
  if (c->rc.r) internal_error(__FILE__, __LINE__, "a started recomputation chain discarded");
  chain_free(c);
}

int recompute_plan(Graph *g, Plan *pl, const RecomputeOpts *ro) {
  RcChain *c = rc_chain_new(g, pl, ro);
  rc_chain_start(c);
  rc_chain_escalate(c, ro->target);
  return rc_chain_finish(c);
}

/* --dump recompute: the decisions. */
void recompute_dump(const Graph *g, const Plan *pl, FILE *f) {
  const Route *r = pl->route;
  int steps = 0;
  double flops = 0;
  for (int s = 0; s < r->ns; s++)
    if (r->s[s].kind == SK_RECOMPUTE) {
      steps++;
      flops += op_info[g->n[r->s[s].node].op].flops(g, &g->n[r->s[s].node]);
    }
  fprintf(f, "recompute: %d recompute steps, %.3g GFLOP; %d rebuilt by carriers\n", steps,
          flops / 1e9, pl->carried);
  fprintf(f, "%7s  %-18s %-12s %7s %7s  %s\n", "step", "op", "bytes", "alive", "until", "tensor");
  for (int s = 0; s < r->ns; s++) {
    const Step *st = &r->s[s];
    bool carrier = st->node >= 0 && node_carries(&g->n[st->node]);
    if (st->kind != SK_RECOMPUTE && !carrier) continue;
    for (int k = carrier ? st->nout - 1 : 0; k < st->nout; k++) {
      const Instance *in = &pl->inst[st->out[k]];
      if (in->first != s) continue;
      fprintf(f, "%7d  %-18s %-12s %7d %7d  %s%s\n", s, carrier ? "carrier" : op_name(g->n[st->node].op),
              fmt_bytes(in->bytes), in->first, in->last, g->t[in->tensor].name,
              carrier ? " (the backward step writes it)" : "");
    }
  }
}
