/* plan_print.c — the plan for people (text) and for programs (plan.json).
 *
 * Text: a summary (policy, batch, device, arena, persistent, peak live, layer
 * peak, baseline, ratio, estimated step time), then one row per step: index,
 * kind, op, live MiB, arena high water MiB, node (the peak step marked).
 * JSON: every key docs/reference.md lists for plan.json, plus the instances
 * (tensor, kind, bytes, lifetime, offset) for the HTML view and plan diffs;
 * schemas/plan.schema.json describes it.
 *
 * Not here: the HTML page (plan_html.c) or diffs (plan_diff.c). */
#include "plan_review.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double mib(int64_t b) { return (double)b / 1048576.0; }

/* What auto chose, and why (NULL for the other policies); the text, JSON
 * and HTML views all print this one. */
const char *plan_note(const Plan *pl) {
  static char buf[320];
  if (pl->planned == pl->opts.policy) return NULL;
  snprintf(buf, sizeof buf, "auto chose %s%s: the fastest estimated plan whose arena fits the "
           "budget and whose host arena fits the host budget (snc plan --dump auto: the "
           "candidates)", policy_name(pl->planned),
           pl->checkpoints ? " with checkpoint segments (expensive layers rebuilt too)"
           : pl->selected ? " with rebuilds chosen per tensor (the most bytes per second of "
                            "rebuild first)"
           : pl->opt_cuts ? " with the optimal persistent checkpointing schedule (a dynamic "
                            "program over the chain of cuts)" : "");
  return buf;
}

static void fmt_time(char *buf, size_t n, double s) {
  if (s >= 1) snprintf(buf, n, "%.2f s", s);
  else if (s >= 1e-3) snprintf(buf, n, "%.2f ms", s * 1e3);
  else snprintf(buf, n, "%.1f us", s * 1e6);
}

static double pct(int64_t a, int64_t b) { return b ? 100.0 * (double)a / (double)b : 0.0; }

/* What auto's recomputation chose (per-tensor rebuilds, an optimal
 * schedule, checkpoint segments): plan.txt's lines under "recompute". */
static void print_rebuild_choice(FILE *f, const Graph *g, const Plan *pl) {
  if (pl->selected) {
    char trb[32];
    fmt_time(trb, sizeof trb, pl->recompute_seconds);
    fprintf(f, "  rebuilt         %12d   tensors chosen one by one, %s of them read by backward, "
            "rebuilt in %s (the most bytes per second of rebuild first: snc plan --dump "
            "recompute)\n", pl->selected, fmt_bytes(pl->selected_bytes), trb);
    if (pl->carried)
      fprintf(f, "  carried         %12d   of them rebuilt by their producer's backward step (a fused "
              "chain's, a LayerNorm's), which writes them beside the gradient (docs/planning.md)\n",
              pl->carried);
  }
  if (pl->opt_cuts) {
    char trb[32];
    fmt_time(trb, sizeof trb, pl->recompute_seconds);
    fprintf(f, "  schedule        %12d   of %d cuts kept from forward; the rest rebuilt by the "
            "persistent schedule that costs least in %s of kept activations, in %s (snc plan "
            "--dump recompute)\n", pl->opt_kept, pl->opt_cuts, fmt_bytes(pl->opt_bytes), trb);
  }
  if (pl->checkpoints) {
    fprintf(f, "  checkpoints     %12d   (kept from forward to backward; every layer between two, "
            "expensive ones too, rebuilt: segments of ~%s)\n", pl->checkpoints,
            fmt_bytes(pl->seg_bytes));
    fprintf(f, "    segments start at");
    for (int k = 0; k < pl->checkpoints && k < 12; k++)
      fprintf(f, "%s %s", k ? "," : "", g->t[pl->ckpt[k]].name);
    if (pl->checkpoints > 12) fprintf(f, " ... (%d more)", pl->checkpoints - 12);
    fprintf(f, "\n");
    if (pl->recursive_segments)
      fprintf(f, "    recursive       %12d   (segments rebuilt by a binary schedule over the cuts "
              "inside: O(log) of them kept at a time, each layer rebuilt about log2 times)\n",
              pl->recursive_segments);
  }
}

/* The chunked loss's line (autodiff.c's LMHEAD_CE step), where it has one. */
static void print_chunked_loss(const Graph *g, const Plan *pl, FILE *f) {
  for (int s = 0; s < pl->route->train_steps; s++) {
    const Node *n = pl->route->s[s].node >= 0 ? &g->n[pl->route->s[s].node] : NULL;
    if (!n || n->op != OP_LMHEAD_CE) continue;
    const snrt_lmce_t *p = n->p;
    fprintf(f, "  loss            %12s   (LM head + cross-entropy in chunks of %lld of %lld rows: "
            "the %s logits never whole; --no-chunk-loss)\n", "chunked", (long long)p->chunk,
            (long long)p->n, fmt_bytes(p->n * p->classes * 4));
  }
}

void plan_print_summary(const Graph *g, const Plan *pl, FILE *f) {
  const char *note = plan_note(pl);
  fprintf(f, "plan: %s, policy %s", g->name && g->name[0] ? g->name : g->path,
          policy_name(pl->opts.policy));
  if (note) fprintf(f, " (planned as %s)", policy_name(pl->planned));
  fprintf(f, ", batch %d, device %s\n", pl->batch, pl->opts.device);
  if (note) fprintf(f, "  note: policy %s: %s\n", policy_name(pl->opts.policy), note);
  fprintf(f, "  arena           %12s   (%lld bytes; %.3g%% of the budget, %.2fx the layer peak)\n",
          fmt_bytes(pl->arena_bytes), (long long)pl->arena_bytes, pct(pl->arena_bytes, pl->budget),
          pl->layer_peak_bytes ? (double)pl->arena_bytes / (double)pl->layer_peak_bytes : 0.0);
  fprintf(f, "  budget          %12s   (%s; %s left)\n", fmt_bytes(pl->budget),
          pl->opts.budget ? "--budget"
          : device_find(pl->opts.device)->reserve_bytes > 0
              ? xasprintf("device %s memory less its %s reserve", pl->opts.device,
                          fmt_bytes(device_find(pl->opts.device)->reserve_bytes))
              : xasprintf("device %s memory", pl->opts.device),
          pl->budget >= pl->arena_bytes ? fmt_bytes(pl->budget - pl->arena_bytes) : "none");
  if (g->zero_ranks)
    fprintf(f, "  persistent      %12s   (per rank: parameters, state, 1/%d of the optimizer "
            "state: --zero 1)\n", fmt_bytes(pl->persistent_bytes), g->zero_ranks);
  else
    fprintf(f, "  persistent      %12s   (parameters, state, optimizer)\n",
            fmt_bytes(pl->persistent_bytes));
  fprintf(f, "  peak live       %12s   (max over steps of live bytes, before packing)\n",
          fmt_bytes(pl->peak_live_bytes));
  fprintf(f, "  layer peak      %12s   (max over steps of what one step alone needs)\n",
          fmt_bytes(pl->layer_peak_bytes));
  fprintf(f, "  baseline        %12s   (policy none: every tensor its own region)\n",
          fmt_bytes(pl->baseline_bytes));
  fprintf(f, "  host            %12s   (pinned host arena for offloaded tensors)\n",
          fmt_bytes(pl->host_bytes));
  fprintf(f, "  host budget     %12s   (%s)\n", fmt_bytes(pl->host_budget),
          pl->opts.host_budget ? "--host-budget"
          : device_find(pl->opts.device)->host_bytes
              ? xasprintf("device %s: host memory per GPU of a typical server", pl->opts.device)
              : "this machine's memory");
  fprintf(f, "  arena/baseline  %12.3f\n",
          pl->baseline_bytes ? (double)pl->arena_bytes / (double)pl->baseline_bytes : 0.0);
  fprintf(f, "  arena/peak live %12.3f\n",
          pl->peak_live_bytes ? (double)pl->arena_bytes / (double)pl->peak_live_bytes : 0.0);
  char t[32];
  fmt_time(t, sizeof t, pl->est_step_seconds);
  fprintf(f, "  est. step       %12s   (%.3g GFLOP; max(compute, memory) per step on %s)\n", t,
          pl->step_flops / 1e9, pl->opts.device);
  char tc[32], tr[32], tx[32];
  fmt_time(tc, sizeof tc, pl->compute_seconds);
  fmt_time(tr, sizeof tr, pl->recompute_seconds);
  fmt_time(tx, sizeof tx, pl->exposed_seconds);
  fprintf(f, "    breakdown     %12s   compute + %s recompute + %s exposed transfer\n", tc, tr, tx);
  if (pl->copy_loss_seconds > 0) {   /* a copy engine on the compute cores (cost_copy_loss) */
    char tl[32];
    fmt_time(tl, sizeof tl, pl->copy_loss_seconds);
    fprintf(f, "    of which      %12s   compute slowed by the copies running beside it\n", tl);
  }
  if (pl->recompute_flops > 0)
    fprintf(f, "  recompute       %12.3g   GFLOP (%.1f%% of the step's %.3g GFLOP)\n",
            pl->recompute_flops / 1e9, 100.0 * pl->recompute_flops / pl->step_flops,
            pl->step_flops / 1e9);
  else
    fprintf(f, "  recompute       %12s\n", "none");
  print_rebuild_choice(f, g, pl);
  fprintf(f, "  offload         %12s   (copied to the host and back per step)\n",
          fmt_bytes((int64_t)pl->offload_bytes));
  fprintf(f, "  steps           %12d   (%d training, %d eval; %d instances)\n", pl->route->ns,
          pl->route->train_steps, pl->route->ns - pl->route->train_steps, pl->ninst);
  print_chunked_loss(g, pl, f);
  if (g->precision != PREC_FP32) {
    /* Bytes of the arena's tensors (each once, as the none policy sizes them) by dtype. */
    int64_t low = 0, full = 0;
    for (int x = 0; x < g->nt; x++) {
      if (pl->tensor_inst[x] < 0) continue;
      int64_t b = arena_align(tensor_bytes(&g->t[x]));
      if (g->t[x].dtype == DT_BFLOAT16 || g->t[x].dtype == DT_FLOAT16) low += b;
      else full += b;
    }
    fprintf(f, "  precision       %12s   (%s activations and their gradients: %s; float32 "
            "master weights, gradients, optimizer and BN state, input, loss: %s)\n",
            precision_name(g->precision),
            dtype_name(g->precision == PREC_FP16 ? DT_FLOAT16 : DT_BFLOAT16), fmt_bytes(low),
            fmt_bytes(full));
    ConvertStats cs = review_convert(pl);
    if (cs.at >= 0)
      fprintf(f, "  working copies  %12s   (the largest step's, in its workspace: float32 copies of "
              "16-bit operands%s; step %d, %s %s; %d training steps convert, %s%s)\n", fmt_bytes(cs.max),
              g->tensor_cores ? ", 16-bit ones of float32 operands of tensor-core steps" : "", cs.at,
              review_step_op(g, pl, cs.at), review_step_node(g, pl, cs.at), cs.steps,
              g->convert_chunk > 0 ? "in chunks of about " : "whole tensors",
              g->convert_chunk > 0 ? xasprintf("%lld elements where the kernel allows",
                                               (long long)g->convert_chunk) : "");
    if (g->precision == PREC_FP16)
      fprintf(f, "  loss scaling    %12s   (initial scale 65536, halved and the step's updates skipped "
              "on overflow, doubled after 2000 steps without one; --metrics counts skipped_steps)\n",
              "dynamic");
  }
}

/* The peak: where, what is live there by category, the largest tensors. */
static void print_peak(const Graph *g, const Plan *pl, const Review *rv, FILE *f) {
  int p = rv->peak;
  fprintf(f, "\npeak: step %d (%s %s %s), %s live = %.3g%% of the arena, %.2fx the layer peak\n",
          p, step_kind_name(pl->route->s[p].kind), review_step_op(g, pl, p),
          review_step_node(g, pl, p), fmt_bytes(pl->live_bytes[p]),
          pct(pl->live_bytes[p], pl->arena_bytes),
          pl->layer_peak_bytes ? (double)pl->live_bytes[p] / (double)pl->layer_peak_bytes : 0.0);
  fprintf(f, "  by category:");
  for (int c = 0; c < CAT_COUNT; c++)
    fprintf(f, "%s %s %s", c ? "," : "", cat_name[c],
            fmt_bytes(rv->by_cat[(size_t)p * CAT_COUNT + c]));
  fprintf(f, "\n");
  int *live, n = review_live_at(pl, p, &live);
  int shown = n < 10 ? n : 10, w = 6;
  for (int k = 0; k < shown; k++) {
    int len = (int)strlen(plan_inst_name(g, pl, live[k]));
    if (len > w) w = len;
  }
  if (w > 60) w = 60;
  fprintf(f, "  largest live tensors (%d of %d):\n", shown, n);
  int kw = g->precision != PREC_FP32 ? 21 : 12;   /* bf16 plans: "activation bfloat16" */
  fprintf(f, "    %-*s  %-*s %11s %6s  %-15s  %s\n", w + 2, "tensor", kw, "kind", "size", "share",
          "lifetime", "decision");
  for (int k = 0; k < shown; k++) {
    const Instance *in = &pl->inst[live[k]];
    char life[32];
    if (in->persistent) snprintf(life, sizeof life, "persistent");
    else snprintf(life, sizeof life, "%d-%d", in->first, in->last);
    const char *dec = in->tensor >= 0 ? decision_name(rv->dec[in->tensor]) : "-";
    if (rv->cat[live[k]] == CAT_RECOMPUTED) dec = "recomputed copy";
    else if (rv->cat[live[k]] == CAT_PREFETCHED) dec = "prefetched copy";
    const char *kind = plan_inst_kind(g, pl, live[k]);
    if (g->precision != PREC_FP32 && in->tensor >= 0)
      kind = xasprintf("%s %s", kind, dtype_name(g->t[in->tensor].dtype));
    fprintf(f, "    - %-*.*s  %-*s %11s %5.1f%%  %-15s  %s\n", w, w, plan_inst_name(g, pl, live[k]),
            kw, kind, fmt_bytes(in->bytes),
            pct(in->bytes, pl->live_bytes[p]), life, dec);
  }
  free(live);
}

/* What was recomputed, what was offloaded and when it comes back. */
static void print_decisions(const Graph *g, const Plan *pl, const Review *rv, FILE *f) {
  fprintf(f, "\ndecisions (policy %s, planned as %s):\n", policy_name(pl->opts.policy),
          policy_name(pl->planned));
  int nrec = 0, noff = 0;
  int64_t brec = 0, boff = 0;
  for (int t = 0; t < g->nt; t++) {
    int pi = pl->tensor_inst[t];
    int64_t b = pi >= 0 ? pl->inst[pi].bytes : tensor_bytes(&g->t[t]);
    if (rv->dec[t] == DEC_RECOMPUTED) nrec++, brec += b;
    if (rv->dec[t] == DEC_OFFLOADED) noff++, boff += b;
  }
  fprintf(f, "  recomputed: ");
  if (!nrec) fprintf(f, "none\n");
  else {
    fprintf(f, "%d tensors, %s not kept from forward to backward\n", nrec, fmt_bytes(brec));
    for (int t = 0; t < g->nt; t++)
      if (rv->dec[t] == DEC_RECOMPUTED)
        fprintf(f, "    - %s  %s  (%s)\n", g->t[t].name, fmt_bytes(tensor_bytes(&g->t[t])),
                review_reason(g, pl, rv, t));
  }
  fprintf(f, "  offloaded: ");
  if (!noff) fprintf(f, "none\n");
  else {
    fprintf(f, "%d tensors, %s to the host\n", noff, fmt_bytes(boff));
    for (int t = 0; t < g->nt; t++)
      if (rv->dec[t] == DEC_OFFLOADED)
        fprintf(f, "    - %s  %s  (%s)\n", g->t[t].name, fmt_bytes(tensor_bytes(&g->t[t])),
                review_reason(g, pl, rv, t));
  }
  fprintf(f, "  prefetched: ");
  int npre = 0;
  for (int k = 0; k < rv->ncopies; k++) npre += rv->copies[k].prefetch;
  if (!npre) fprintf(f, "none\n");
  else {
    fprintf(f, "%d copies\n", npre);
    for (int k = 0; k < rv->ncopies; k++) {
      const Copy *c = &rv->copies[k];
      if (!c->prefetch) continue;
      fprintf(f, "    - %s  %s  at step %d", c->tensor >= 0 ? g->t[c->tensor].name : "?",
              fmt_bytes(c->bytes), c->step);
      if (c->until > c->step) fprintf(f, ", first used at step %d (%d steps later)", c->until,
                                      c->until - c->step);
      fprintf(f, "\n");
    }
  }
}

/* Appends sprintf's "%11.1f" of mib(bytes), in integers: bytes / 2^20 is
 * exact in a double, and printf rounds its exact value to one decimal, ties
 * to even (at most 32 characters). */
static void put_mib(char **p, int64_t bytes) {
  if (bytes < 0 || bytes > INT64_MAX / 10) {
    *p += snprintf(*p, 32, "%11.1f", mib(bytes));
    return;
  }
  int64_t v = bytes * 10, q = v >> 20, r = v & ((1 << 20) - 1);
  if (r > (1 << 19) || (r == (1 << 19) && (q & 1))) q++;
  char num[32], *e = num + sizeof num;
  *--e = (char)('0' + q % 10);
  *--e = '.';
  q /= 10;
  do *--e = (char)('0' + q % 10), q /= 10; while (q);
  int n = (int)(num + sizeof num - e);
  for (; n < 11; n++) *(*p)++ = ' ';
  memcpy(*p, e, (size_t)(num + sizeof num - e));
  *p += num + sizeof num - e;
}

void plan_print_text(const Graph *g, const Plan *pl, FILE *f) {
  plan_print_summary(g, pl, f);
  const Route *r = pl->route;
  if (r->ns == 0) return;
  Review *rv = review_build(g, pl);
  print_peak(g, pl, rv, f);
  print_decisions(g, pl, rv, f);
  workspace_print(g, pl, f);
  int peak = rv->peak;
  fprintf(f, "\n%7s  %-9s %-18s %11s %11s  %s\n", "step", "kind", "op", "live MiB",
          "arena MiB", "node");
  for (int s = 0; s < r->ns; s++) {
    const Step *st = &r->s[s];
    if (s == r->train_steps) fprintf(f, "%7s  -- eval (inference semantics) --\n", "");
    else if (s == rv->first_bwd) fprintf(f, "%7s  -- backward (loss, gradients, updates) --\n", "");
    /* the MiB figures as "%11.1f" writes them, without printf's float
     * formatting (a deep model's schedule has 100k lines) */
    char live[32], hw[32], *p = live, *q = hw;
    put_mib(&p, pl->live_bytes[s]);
    put_mib(&q, pl->high_water[s]);
    *p = *q = 0;
    fprintf(f, "%7d  %-9s %-18s %s %s  ", s, step_kind_name(st->kind), review_step_op(g, pl, s),
            live, hw);
    fputs(review_step_node(g, pl, s), f);
    if (s == peak) fputs("   <- peak live", f);
    if (pl->ws_cap > 0 && st->ws >= 0 &&
        (pl->inst[st->ws].bytes > pl->inst[st->ws].convert_bytes || !pl->inst[st->ws].convert_bytes))
      fprintf(f, "   (workspace %s)", fmt_bytes(pl->inst[st->ws].bytes - pl->inst[st->ws].convert_bytes));
    if (st->ws >= 0 && pl->inst[st->ws].convert_bytes)
      fprintf(f, "   (copies %s)", fmt_bytes(pl->inst[st->ws].convert_bytes));
    fputc('\n', f);
  }
  review_free(rv);
}

/* ---- JSON ---- */

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}

static void json_num(FILE *f, double v) {
  if (!isfinite(v)) v = 0;             // JSON has no NaN/Inf; the cost model never makes them
  fprintf(f, "%.17g", v);
}

static void json_insts(FILE *f, const int *v, int n) {
  fputc('[', f);
  for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", v[i]);
  fputc(']', f);
}

void plan_print_json(const Graph *g, const Plan *pl, FILE *f) {
  const Route *r = pl->route;
  const char *note = plan_note(pl);
  fprintf(f, "{\n  \"version\": 1,\n  \"model\": ");
  json_str(f, g->name && g->name[0] ? g->name : g->path ? g->path : "");
  fprintf(f, ",\n  \"policy\": \"%s\",\n  \"planned_policy\": \"%s\",\n  \"note\": ",
          policy_name(pl->opts.policy), policy_name(pl->planned));
  if (note) json_str(f, note);
  else fprintf(f, "null");
  fprintf(f, ",\n  \"batch\": %d,\n  \"device\": ", pl->batch);
  json_str(f, pl->opts.device);
  fprintf(f, ",\n  \"host_budget_bytes\": %lld,\n  \"checkpoints\": %d,\n"
          "  \"checkpoint_segment_bytes\": %lld,\n  \"recursive_segments\": %d,\n"
          "  \"selected_rebuilds\": %d,\n  \"carried_rebuilds\": %d,\n"
          "  \"optimal_schedule_kept\": %d,\n  \"optimal_schedule_seconds\": ",
          (long long)pl->host_budget, pl->checkpoints,
          (long long)(pl->checkpoints ? pl->seg_bytes : 0), pl->recursive_segments, pl->selected,
          pl->carried, pl->opt_cuts ? pl->opt_kept : -1);
  if (pl->opt_cuts) json_num(f, pl->opt_seconds);
  else fprintf(f, "null");
  fprintf(f, ",\n  \"budget_bytes\": %lld,\n  \"arena_bytes\": %lld,\n  \"persistent_bytes\": %lld,\n"
          "  \"host_bytes\": %lld,\n  \"peak_live_bytes\": %lld,\n  \"layer_peak_bytes\": %lld,\n"
          "  \"baseline_bytes\": %lld,\n  \"recompute_flops\": ",
          (long long)pl->budget, (long long)pl->arena_bytes, (long long)pl->persistent_bytes,
          (long long)pl->host_bytes, (long long)pl->peak_live_bytes,
          (long long)pl->layer_peak_bytes, (long long)pl->baseline_bytes);
  json_num(f, pl->recompute_flops);
  fprintf(f, ",\n  \"offload_bytes\": ");
  json_num(f, pl->offload_bytes);
  fprintf(f, ",\n  \"est_step_seconds\": ");
  json_num(f, pl->est_step_seconds);
  fprintf(f, ",\n  \"step_flops\": ");
  json_num(f, pl->step_flops);
  fprintf(f, ",\n  \"compute_seconds\": ");
  json_num(f, pl->compute_seconds);
  fprintf(f, ",\n  \"recompute_seconds\": ");
  json_num(f, pl->recompute_seconds);
  fprintf(f, ",\n  \"exposed_seconds\": ");
  json_num(f, pl->exposed_seconds);
  if (pl->ws_cap > 0) fprintf(f, ",\n  \"workspace_cap_bytes\": %lld", (long long)pl->ws_cap);
  if (g->precision != PREC_FP32) {
    ConvertStats cs = review_convert(pl);
    fprintf(f, ",\n  \"precision\": \"%s\",\n  \"convert_chunk\": %lld,\n  \"convert_bytes\": %lld",
            precision_name(g->precision), (long long)g->convert_chunk, (long long)cs.max);
  }
  if (g->zero_ranks)
    fprintf(f, ",\n  \"ranks\": %d,\n  \"zero\": 1,\n  \"zero_shard_elements\": %lld",
            g->zero_ranks, (long long)g->zero_shard);
  fprintf(f, ",\n  \"train_steps\": %d,\n  \"steps\": [", r->train_steps);
  for (int s = 0; s < r->ns; s++) {
    const Step *st = &r->s[s];
    fprintf(f, "%s\n    {\"index\": %d, \"kind\": \"%s\", \"op\": ", s ? "," : "", s,
            step_kind_name(st->kind));
    json_str(f, st->node >= 0 ? op_name(g->n[st->node].op) : "copy");
    fprintf(f, ", \"node\": ");
    json_str(f, st->node >= 0 ? g->n[st->node].name : st->tensor >= 0 ? g->t[st->tensor].name : "");
    fprintf(f, ", \"live_bytes\": %lld, \"high_water_bytes\": %lld, \"est_seconds\": ",
            (long long)pl->live_bytes[s], (long long)pl->high_water[s]);
    if (pl->step_seconds && s < pl->nstep_seconds) json_num(f, pl->step_seconds[s]);
    else fprintf(f, "null");
    /* A carrier (recompute.c): its last output is a rebuilt activation. */
    if (st->node >= 0 && node_carries(&g->n[st->node])) {
      fprintf(f, ", \"rebuilds\": %d, \"rebuild_seconds\": ", st->out[st->nout - 1]);
      if (pl->step_rebuild && s < pl->nstep_seconds) json_num(f, pl->step_rebuild[s]);
      else fprintf(f, "null");
    }
    fprintf(f, ", \"inputs\": ");
    json_insts(f, st->in, st->nin);
    fprintf(f, ", \"outputs\": ");
    json_insts(f, st->out, st->nout);
    if (st->ws >= 0) fprintf(f, ", \"workspace\": %d", st->ws);
    else fprintf(f, ", \"workspace\": null");
    /* The copy schedule: the event a copy records, the events compute waits
     * for after this step (what an independent checker needs). */
    if (st->event >= 0) fprintf(f, ", \"event\": %d", st->event);
    else fprintf(f, ", \"event\": null");
    fprintf(f, ", \"waits\": [");
    for (int w = 0; w < st->nwait; w++) fprintf(f, "%s%d", w ? ", " : "", st->wait[w]);
    fprintf(f, "]}");
  }
  fprintf(f, "\n  ],\n  \"instances\": [");
  for (int i = 0; i < pl->ninst; i++) {
    const Instance *in = &pl->inst[i];
    fprintf(f, "%s\n    {\"index\": %d, \"tensor\": ", i ? "," : "", i);
    json_str(f, plan_inst_name(g, pl, i));
    fprintf(f, ", \"kind\": \"%s\", \"bytes\": %lld, \"first\": %d, \"last\": %d, "
            "\"offset\": %lld, \"host_offset\": %lld, \"persistent\": %s",
            plan_inst_kind(g, pl, i), (long long)in->bytes, in->first, in->last,
            (long long)in->offset, (long long)in->host_offset, in->persistent ? "true" : "false");
    /* Not in fp32 plans: their plan.json stays as it was before --precision. */
    if (g->precision != PREC_FP32)
      fprintf(f, ", \"dtype\": \"%s\"", in->tensor >= 0 ? dtype_name(g->t[in->tensor].dtype) : "bytes");
    if (in->convert_bytes) fprintf(f, ", \"convert_bytes\": %lld", (long long)in->convert_bytes);
    if (in->lent_bytes) fprintf(f, ", \"lent_bytes\": %lld", (long long)in->lent_bytes);
    fputc('}', f);
  }
  fprintf(f, "\n  ]\n}\n");
}
