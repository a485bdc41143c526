/* plan_review.c — the analysis behind the review printers (plan_review.h):
 * instance categories, per-tensor decisions, copies on the copy stream, the
 * peak step and per-step bytes by category.
 *
 * Decisions are read off the plan, not remembered by the passes that took
 * them: an instance written by an SK_RECOMPUTE step is a recomputed copy, one
 * written by an SK_PREFETCH step a prefetched copy, and a tensor named by an
 * SK_OFFLOAD step is offloaded. So whatever recompute.c and offload.c do, the
 * printers show what the plan actually says.
 *
 * Not here: any output format (plan_print.c, plan_html.c).
 * Cost: O(steps * arity + instances + tensors); the per-step category table is
 * steps x 6 integers. */
#include "plan_review.h"

#include <stdlib.h>
#include <string.h>

const char *const cat_name[CAT_COUNT] = {"persistent state", "activations", "gradients",
                                         "recomputed", "prefetched", "workspace"};
const char *const cat_key[CAT_COUNT] = {"per", "act", "grad", "rec", "pre", "ws"};

const char *decision_name(Decision d) {
  static const char *names[] = {"kept", "recomputed", "offloaded"};
  return names[d];
}

static void mark_writer(Review *rv, int inst, int kind) {
  if (inst >= 0 && rv->writer_kind[inst] < 0) rv->writer_kind[inst] = kind;
}

/* The instance of tensor t live at step s that a copy step reads or writes,
 * when the step does not name it in in[]/out[]: prefer one starting at s. */
static int inst_of_tensor_at(const Plan *pl, int t, int s, bool starting) {
  int best = -1;
  for (int i = 0; i < pl->ninst; i++) {
    const Instance *in = &pl->inst[i];
    if (in->tensor != t || in->first > s || in->last < s) continue;
    if (starting ? in->first == s : in->first < s) return i;
    if (best < 0) best = i;
  }
  return best;
}

Review *review_build(const Graph *g, const Plan *pl) {
  const Route *r = pl->route;
  Review *rv = xcalloc(1, sizeof *rv);
  int T = rv->T = r->ns;
  int nI = pl->ninst > 0 ? pl->ninst : 1, nT = g->nt > 0 ? g->nt : 1;
  rv->cat = xcalloc((size_t)nI, sizeof *rv->cat);
  rv->writer_kind = xmalloc(sizeof(int) * (size_t)nI);
  for (int i = 0; i < pl->ninst; i++) rv->writer_kind[i] = -1;
  rv->dec = xcalloc((size_t)nT, sizeof *rv->dec);
  rv->recomputes = xcalloc((size_t)nT, sizeof(int));
  rv->carried = xmalloc(sizeof(int) * (size_t)nT);
  for (int t = 0; t < nT; t++) rv->carried[t] = -1;
  rv->offload_step = xmalloc(sizeof(int) * (size_t)nT);
  rv->prefetch_step = xmalloc(sizeof(int) * (size_t)nT);
  rv->next_use = xmalloc(sizeof(int) * (size_t)nT);
  rv->copies_in = xcalloc((size_t)nT, sizeof(int));
  rv->copies_back = xcalloc((size_t)nT, sizeof(int));
  rv->last_back = xmalloc(sizeof(int) * (size_t)nT);
  for (int t = 0; t < g->nt; t++)
    rv->offload_step[t] = rv->prefetch_step[t] = rv->next_use[t] = rv->last_back[t] = -1;

  rv->peak = 0;
  for (int s = 1; s < T; s++)
    if (pl->live_bytes[s] > pl->live_bytes[rv->peak]) rv->peak = s;
  rv->first_bwd = T;
  for (int s = 0; s < r->train_steps; s++)
    if (r->s[s].kind == SK_LOSS || r->s[s].kind == SK_BACKWARD) { rv->first_bwd = s; break; }

  /* Who writes each instance; the first reader after it is written. */
  int *first_read = xmalloc(sizeof(int) * (size_t)nI);
  for (int i = 0; i < pl->ninst; i++) first_read[i] = -1;
  for (int s = 0; s < T; s++) {
    const Step *st = &r->s[s];
    bool carrier = st->node >= 0 && node_carries(&g->n[st->node]);
    for (int k = 0; k < st->nout; k++)   /* a carrier's last output: a rebuilt activation */
      mark_writer(rv, st->out[k], carrier && k == st->nout - 1 ? SK_RECOMPUTE : (int)st->kind);
    if (carrier && st->out[st->nout - 1] >= 0)
      rv->carried[pl->inst[st->out[st->nout - 1]].tensor] = s;
    for (int k = 0; k < st->nin; k++) {
      int i = st->in[k];
      if (i >= 0 && first_read[i] < 0 && s > pl->inst[i].first) first_read[i] = s;
    }
  }

  /* Copies: an offload reads the device copy, a prefetch writes a new one. */
  int capcopies = 0;
  for (int s = 0; s < T; s++) {
    const Step *st = &r->s[s];
    if (st->kind != SK_OFFLOAD && st->kind != SK_PREFETCH) continue;
    bool pre = st->kind == SK_PREFETCH;
    int t = st->tensor;
    int i = -1;
    if (pre && st->nout > 0) i = st->out[0];
    if (!pre && st->nin > 0) i = st->in[0];
    if (i < 0 && t >= 0) i = inst_of_tensor_at(pl, t, s, pre);
    if (t < 0 && i >= 0) t = pl->inst[i].tensor;
    if (pre) mark_writer(rv, i, SK_PREFETCH);
    Copy c = {.step = s, .prefetch = pre, .tensor = t, .until = s,
              .bytes = i >= 0 ? pl->inst[i].bytes
                       : t >= 0 ? tensor_bytes(&g->t[t]) : 0};
    if (i >= 0) {
      if (pre && first_read[i] >= 0) c.until = first_read[i];
      if (!pre && pl->inst[i].last > s) c.until = pl->inst[i].last;
    }
    xgrow((void **)&rv->copies, &capcopies, rv->ncopies + 1, sizeof *rv->copies);
    rv->copies[rv->ncopies++] = c;
    if (t >= 0) {
      if (pre) rv->copies_in[t]++;
      else rv->copies_back[t]++, rv->last_back[t] = s;
      if (!pre && rv->offload_step[t] < 0) rv->offload_step[t] = s, rv->dec[t] = DEC_OFFLOADED;
      if (pre && rv->prefetch_step[t] < 0) {
        rv->prefetch_step[t] = s;
        rv->next_use[t] = c.until > s ? c.until : -1;
      }
    }
  }
  /* A recompute step with a copy-like `tensor` but no out[] still names it. */
  for (int s = 0; s < T; s++) {
    const Step *st = &r->s[s];
    if (st->kind == SK_RECOMPUTE && st->nout == 0 && st->tensor >= 0)
      mark_writer(rv, inst_of_tensor_at(pl, st->tensor, s, true), SK_RECOMPUTE);
  }
  free(first_read);

  for (int i = 0; i < pl->ninst; i++) {
    const Instance *in = &pl->inst[i];
    Category c;
    if (in->tensor < 0) c = CAT_WORKSPACE;
    else if (rv->writer_kind[i] == SK_RECOMPUTE) c = CAT_RECOMPUTED;
    else if (rv->writer_kind[i] == SK_PREFETCH) c = CAT_PREFETCHED;
    else if (in->persistent) c = CAT_PERSISTENT;
    else if (g->t[in->tensor].kind == TK_GRAD || g->t[in->tensor].kind == TK_PGRAD) c = CAT_GRAD;
    else c = CAT_ACT;
    rv->cat[i] = c;
    if (c == CAT_RECOMPUTED) {
      rv->recomputes[in->tensor]++;
      if (rv->dec[in->tensor] == DEC_KEPT) rv->dec[in->tensor] = DEC_RECOMPUTED;
    }
  }

  /* Bytes by category per step: one difference array per category. */
  rv->by_cat = xcalloc((size_t)(T + 1) * CAT_COUNT, sizeof *rv->by_cat);
  for (int i = 0; i < pl->ninst; i++) {
    const Instance *in = &pl->inst[i];
    if (in->host || in->first < 0 || in->first >= T) continue;   /* host copies: not device memory */
    int last = in->last < T ? in->last : T - 1;
    rv->by_cat[(size_t)in->first * CAT_COUNT + rv->cat[i]] += in->bytes;
    rv->by_cat[(size_t)(last + 1) * CAT_COUNT + rv->cat[i]] -= in->bytes;
  }
  for (int s = 1; s <= T; s++)
    for (int c = 0; c < CAT_COUNT; c++)
      rv->by_cat[(size_t)s * CAT_COUNT + c] += rv->by_cat[(size_t)(s - 1) * CAT_COUNT + c];
  return rv;
}

void review_free(Review *rv) {
  free(rv->cat), free(rv->writer_kind), free(rv->by_cat), free(rv->dec), free(rv->recomputes);
  free(rv->carried);
  free(rv->offload_step), free(rv->prefetch_step), free(rv->next_use), free(rv->copies);
  free(rv->copies_in), free(rv->copies_back), free(rv->last_back);
  free(rv);
}

ConvertStats review_convert(const Plan *pl) {
  ConvertStats cs = {0, -1, 0, 0};
  for (int s = 0; s < pl->route->train_steps; s++) {
    int w = pl->route->s[s].ws;
    int64_t b = w >= 0 ? pl->inst[w].convert_bytes : 0;
    if (!b) continue;
    cs.steps++;
    cs.total += b;
    if (b > cs.max) cs.max = b, cs.at = s;
  }
  return cs;
}

const char *review_step_op(const Graph *g, const Plan *pl, int s) {
  const Step *st = &pl->route->s[s];
  return st->node >= 0 ? op_name(g->n[st->node].op) : "copy";
}

const char *review_step_node(const Graph *g, const Plan *pl, int s) {
  const Step *st = &pl->route->s[s];
  return st->node >= 0 ? g->n[st->node].name : st->tensor >= 0 ? g->t[st->tensor].name : "-";
}

const char *review_reason(const Graph *g, const Plan *pl, const Review *rv, int t) {
  static char buf[512];
  const Tensor *x = &g->t[t];
  int pi = pl->tensor_inst[t];
  if (rv->dec[t] == DEC_OFFLOADED) {
    int o = rv->offload_step[t], p = rv->prefetch_step[t];
    if (pi >= 0 && pl->inst[pi].persistent && pl->inst[pi].host) {
      /* Parameters and optimizer state resident on the host: the device
       * sees them only around their uses; an update's result is copied back. */
      int in = rv->copies_in[t], back = rv->copies_back[t], last_back = rv->last_back[t];
      snprintf(buf, sizeof buf, "resident in host memory: copied to the device %d time%s "
               "(first at step %d), written back %d time%s%s", in, in == 1 ? "" : "s", p, back,
               back == 1 ? "" : "s", back ? xasprintf(" (last at step %d)", last_back) : "");
    } else if (p >= 0)
      snprintf(buf, sizeof buf, "idle on the device for %d steps: offloaded at step %d, "
               "prefetched at step %d%s%s", p - o, o, p, rv->next_use[t] >= 0 ? " for step " : "",
               rv->next_use[t] >= 0 ? xasprintf("%d", rv->next_use[t]) : "");
    else
      snprintf(buf, sizeof buf, "offloaded at step %d and not prefetched (not needed again)", o);
    return buf;
  }
  if (rv->dec[t] == DEC_RECOMPUTED) {
    const char *op = x->producer >= 0 ? op_name(g->n[x->producer].op) : "?";
    int cost = x->producer >= 0 ? node_cost(g, &g->n[x->producer]) : COST_EXPENSIVE;
    /* The costs compared: one rebuild of its producer (max of FLOPs over the
     * FLOP rate and bytes touched over memory bandwidth) against a copy to
     * the host and back over the link, under the plan's device profile. */
    char costs[160] = "";
    int cs = rv->carried[t];
    if (cs >= 0) {   /* by its producer's backward step (recompute.c: carried rebuilds) */
      double add = pl->step_rebuild && cs < pl->nstep_seconds ? pl->step_rebuild[cs] : 0;
      snprintf(costs, sizeof costs, "; rebuilt by its producer's backward step %d, which writes it "
               "beside the gradient for %.3g us more", cs, add * 1e6);
    } else if (x->producer >= 0) {
      const DeviceProfile *dev = device_find(pl->opts.device ? pl->opts.device : "h200");
      const Node *n = &g->n[x->producer];
      double bytes = 0;
      for (int k = 0; k < n->nin + n->nout; k++) {
        int u = k < n->nin ? n->in[k] : n->out[k - n->nin];
        if (u >= 0 && g->t[u].kind != TK_CONST) bytes += (double)tensor_bytes(&g->t[u]);
      }
      double rebuild = cost_node_seconds(g, n, bytes, dev);
      double copy = cost_copy_seconds((double)tensor_bytes(x), COPY_D2H, dev) +
                    cost_copy_seconds((double)tensor_bytes(x), COPY_H2D, dev);
      snprintf(costs, sizeof costs, "; a rebuild costs %.3g %s, a copy to the host and back "
               "%.3g %s on %s", rebuild >= 1e-3 ? rebuild * 1e3 : rebuild * 1e6,
               rebuild >= 1e-3 ? "ms" : "us", copy >= 1e-3 ? copy * 1e3 : copy * 1e6,
               copy >= 1e-3 ? "ms" : "us", dev->name);
    }
    snprintf(buf, sizeof buf, "%s output (%s to recompute): not kept from forward to backward%s; "
             "recomputed %d time%s%s", op, cost == COST_EXPENSIVE ? "expensive" : "cheap",
             pi >= 0 ? xasprintf(" (would live steps %d-%d)", pl->inst[pi].first,
                                 pl->inst[pi].last) : "",
             rv->recomputes[t], rv->recomputes[t] == 1 ? "" : "s", costs);
    return buf;
  }
  return "";
}

static const Plan *sort_plan;
static int by_bytes_desc(const void *a, const void *b) {
  int64_t x = sort_plan->inst[*(const int *)a].bytes, y = sort_plan->inst[*(const int *)b].bytes;
  if (x != y) return x < y ? 1 : -1;
  return *(const int *)a - *(const int *)b;
}

int review_live_at(const Plan *pl, int s, int **out) {
  int n = 0;
  int *v = xmalloc(sizeof(int) * (size_t)(pl->ninst ? pl->ninst : 1));
  for (int i = 0; i < pl->ninst; i++)
    if (!pl->inst[i].host && pl->inst[i].first <= s && s <= pl->inst[i].last) v[n++] = i;
  sort_plan = pl;
  qsort(v, (size_t)n, sizeof *v, by_bytes_desc);
  *out = v;
  return n;
}
