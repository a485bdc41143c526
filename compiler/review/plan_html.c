/* plan_html.c — the plan as one self-contained HTML page for review
 * (`snc plan --html FILE`).
 *
 * The page answers: where is the peak, what is live there, what was
 * recomputed or offloaded and why, how close the arena is to the layer peak
 * and to the budget. It holds:
 *   - a summary of the numbers (arena, budget, peak, layer peak...),
 *   - an inline SVG: device memory over the steps, stacked by category
 *     (plan_review.h), the arena, layer-peak and budget lines, the
 *     forward/backward/eval boundaries, the peak marked, and a lane for the
 *     copy stream with a bar per offload and prefetch,
 *   - tables: what is live at the peak, the decisions, the largest tensors.
 * Hovering a step (or a pixel column) shows its op, node and bytes: an SVG
 * <title>, so no script is needed. No scripts, fonts or URLs: the page works
 * offline and from a CI artifact.
 *
 * Deep networks: when steps outnumber the plot's pixel columns, each column
 * shows the step of its range with the most live bytes (max per column), so
 * the peak is never averaged away and the file stays small (about 1,200
 * columns whatever the depth).
 *
 * Not here: the analysis (plan_review.c) or the text plan (plan_print.c). */
#include "plan_review.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { PLOT_X = 86, PLOT_W = 1180, PLOT_Y = 56, PLOT_H = 360, LANE_GAP = 46, LANE_ROW = 18,
       SVG_W = PLOT_X + PLOT_W + 40 };

static void esc(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    default: fputc(*s, f);
    }
  }
}

static double pct(int64_t a, int64_t b) { return b ? 100.0 * (double)a / (double)b : 0.0; }

static const char css[] =
    "body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:20px 28px;"
    "color:#222;background:#fff;max-width:1400px}\n"
    "h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:22px 0 6px}\n"
    ".note{background:#fff4d6;border:1px solid #e6c35c;padding:6px 10px;margin:8px 0}\n"
    ".cards{display:flex;flex-wrap:wrap;gap:8px;margin:10px 0}\n"
    ".card{border:1px solid #ccd;border-radius:6px;padding:6px 12px;min-width:150px}\n"
    ".card b{display:block;font-size:18px}.card span{color:#555;font-size:12px}\n"
    ".card.hot{border-color:#c0392b;background:#fdf0ee}\n"
    "table{border-collapse:collapse;font-size:13px}td,th{padding:2px 10px;text-align:left;"
    "border-bottom:1px solid #eee}th{background:#f3f3f6}td.n{text-align:right;"
    "font-variant-numeric:tabular-nums;white-space:nowrap}\n"
    ".legend{display:flex;gap:16px;flex-wrap:wrap;margin:4px 0 0}.legend i{display:inline-block;"
    "width:12px;height:12px;margin-right:5px;vertical-align:-1px}\n"
    ".c-per{fill:#9a9aa6;background:#9a9aa6}.c-act{fill:#4e79a7;background:#4e79a7}"
    ".c-grad{fill:#f28e2b;background:#f28e2b}.c-rec{fill:#59a14f;background:#59a14f}"
    ".c-pre{fill:#b07aa1;background:#b07aa1}.c-ws{fill:#e2c43b;background:#e2c43b}\n"
    "svg text{font:11px system-ui,sans-serif;fill:#333;paint-order:stroke;stroke:#fff;"
    "stroke-width:3px;stroke-linejoin:round}svg .ax{stroke:#888;stroke-width:1}"
    "svg .grid{stroke:#eee}svg .hov{fill:transparent}svg .hov:hover{fill:rgba(0,0,0,.12)}\n"
    "svg .arena{stroke:#111;stroke-width:1.5}svg .lpeak{stroke:#555;stroke-dasharray:6 4}"
    "svg .budget{stroke:#d62728;stroke-width:2}svg .phase{stroke:#444;stroke-dasharray:3 3}"
    "svg .peak{fill:#c0392b}svg text.peakl{fill:#c0392b;font-weight:bold}"
    "svg text.bl{fill:#d62728}svg .off{fill:#4e79a7}svg .pf{fill:#b07aa1}"
    "svg .host{stroke:#bbb;stroke-dasharray:2 2}svg .lane{fill:#f6f6f9}\n"
    ".dec-kept{color:#555}.dec-recomputed{color:#2d7a2a;font-weight:bold}"
    ".dec-offloaded{color:#7a3f73;font-weight:bold}\n";

/* Nice tick spacing: 1, 2 or 5 times a power of ten, about `want` ticks. */
static double nice_step(double range, int want) {
  double raw = range / want, p = pow(10, floor(log10(raw > 0 ? raw : 1)));
  double m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

typedef struct Chart {
  int T, ncol;
  int *rep;                // per column: the step shown (most live bytes in its range)
  int *lo, *hi;            // per column: its step range [lo, hi]
  double ymin, ymax;       // bytes at the bottom and the top of the plot
  bool budget_on_scale;
} Chart;

static double xcol(const Chart *c, int col) { return PLOT_X + (double)col * PLOT_W / c->ncol; }
static double ybytes(const Chart *c, double b) {
  double y = PLOT_Y + PLOT_H - (b - c->ymin) / (c->ymax - c->ymin) * PLOT_H;
  return y > PLOT_Y + PLOT_H ? PLOT_Y + PLOT_H : y;    // bands below ymin sit on the axis
}
/* x of a step's left edge (steps map to columns proportionally). */
static double xstep(const Chart *c, int s) { return PLOT_X + (double)s * PLOT_W / c->T; }

static void chart_init(Chart *c, const Plan *pl) {
  c->T = pl->route->ns;
  c->ncol = c->T < PLOT_W ? c->T : PLOT_W;
  c->rep = xmalloc(sizeof(int) * (size_t)c->ncol);
  c->lo = xmalloc(sizeof(int) * (size_t)c->ncol);
  c->hi = xmalloc(sizeof(int) * (size_t)c->ncol);
  for (int k = 0; k < c->ncol; k++) {
    c->lo[k] = (int)((int64_t)k * c->T / c->ncol);
    c->hi[k] = (int)((int64_t)(k + 1) * c->T / c->ncol) - 1;
    if (c->hi[k] < c->lo[k]) c->hi[k] = c->lo[k];
    c->rep[k] = c->lo[k];
    for (int s = c->lo[k]; s <= c->hi[k]; s++)
      if (pl->live_bytes[s] > pl->live_bytes[c->rep[k]]) c->rep[k] = s;
  }
  double top = (double)pl->arena_bytes;
  if (pl->peak_live_bytes > top) top = (double)pl->peak_live_bytes;
  if (pl->layer_peak_bytes > top) top = (double)pl->layer_peak_bytes;
  /* The budget is drawn on scale only when it is near: a 140 GiB budget
   * would flatten a 35 MiB plan into a line. */
  c->budget_on_scale = pl->budget > 0 && (double)pl->budget <= 1.6 * top;
  if (c->budget_on_scale && pl->budget > top) top = (double)pl->budget;
  c->ymax = top > 0 ? top * 1.08 : 1;
  /* When every step has most of the plot filled (persistent state dominates
   * a small batch), start the axis above zero so the part that changes is
   * readable; the page says so under the chart. */
  double lo = top;
  for (int k = 0; k < c->ncol; k++)
    if ((double)pl->live_bytes[c->rep[k]] < lo) lo = (double)pl->live_bytes[c->rep[k]];
  c->ymin = 0;
  if (lo > 0.6 * top) {
    double st = nice_step(c->ymax - 0.9 * lo, 6);
    c->ymin = floor(0.9 * lo / st) * st;
  }
}

static void chart_free(Chart *c) { free(c->rep), free(c->lo), free(c->hi); }

static void hline(FILE *f, const Chart *c, double b, const char *cls) {
  double y = ybytes(c, b);
  fprintf(f, "<line class=\"%s\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>\n", cls, PLOT_X,
          PLOT_X + PLOT_W, y, y);
}

/* Axes, grid, tick labels. */
static void draw_axes(FILE *f, const Chart *c) {
  bool gib = c->ymax >= 2.0 * 1073741824.0;
  double unit = gib ? 1073741824.0 : 1048576.0;
  double st = nice_step((c->ymax - c->ymin) / unit, 6);
  for (double v = ceil(c->ymin / unit / st) * st; v * unit <= c->ymax; v += st) {
    double y = ybytes(c, v * unit);
    fprintf(f, "<line class=\"grid\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>"
            "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g %s</text>\n",
            PLOT_X, PLOT_X + PLOT_W, y, y, PLOT_X - 6, y + 4, v, gib ? "GiB" : "MiB");
  }
  if (c->ymin > 0)
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">from %s</text>\n", PLOT_X - 6,
            PLOT_Y + PLOT_H + 4, fmt_bytes((int64_t)c->ymin));
  double sx = nice_step(c->T, 10);
  if (sx < 1) sx = 1;
  for (double s = 0; s < c->T; s += sx) {
    double x = xstep(c, (int)s);
    fprintf(f, "<line class=\"ax\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>"
            "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n",
            x, x, PLOT_Y + PLOT_H, PLOT_Y + PLOT_H + 4, x, PLOT_Y + PLOT_H + 16, (int)s);
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n",
          PLOT_X + PLOT_W / 2, PLOT_Y + PLOT_H + 30);
  fprintf(f, "<line class=\"ax\" x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\"/>"
          "<line class=\"ax\" x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\"/>\n",
          PLOT_X, PLOT_X + PLOT_W, PLOT_Y + PLOT_H, PLOT_Y + PLOT_H, PLOT_X, PLOT_X, PLOT_Y,
          PLOT_Y + PLOT_H);
}

/* One path per category: the band between the stack below it and its top,
 * as a step function over the columns. */
static void draw_stack(FILE *f, const Chart *c, const Review *rv) {
  double *base = xcalloc((size_t)c->ncol, sizeof *base);
  double *top = xcalloc((size_t)c->ncol, sizeof *top);
  for (int cat = 0; cat < CAT_COUNT; cat++) {
    bool any = false;
    for (int k = 0; k < c->ncol; k++) {
      top[k] = base[k] + (double)rv->by_cat[(size_t)c->rep[k] * CAT_COUNT + cat];
      any |= top[k] > base[k];
    }
    if (any) {
      fprintf(f, "<path class=\"c-%s\" d=\"M%.1f %.1f", cat_key[cat], xcol(c, 0),
              ybytes(c, base[0]));
      for (int k = 0; k < c->ncol; k++)
        fprintf(f, "V%.1fH%.1f", ybytes(c, top[k]), xcol(c, k + 1));
      for (int k = c->ncol - 1; k >= 0; k--)
        fprintf(f, "V%.1fH%.1f", ybytes(c, base[k]), xcol(c, k));
      fprintf(f, "Z\"><title>%s</title></path>\n", cat_name[cat]);
    }
    memcpy(base, top, sizeof *base * (size_t)c->ncol);
  }
  free(base), free(top);
}

/* Boundaries between forward, backward and eval, labelled at the top. */
static void draw_phases(FILE *f, const Chart *c, const Plan *pl, const Review *rv) {
  int b[4] = {0, rv->first_bwd, pl->route->train_steps, c->T};
  const char *name[3] = {"forward", "backward + updates", "eval"};
  for (int k = 0; k < 3; k++) {
    if (b[k + 1] <= b[k]) continue;
    if (k > 0) {
      double x = xstep(c, b[k]);
      fprintf(f, "<line class=\"phase\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>\n", x, x,
              PLOT_Y - 12, PLOT_Y + PLOT_H);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s (steps %d-%d)</text>\n",
            (xstep(c, b[k]) + xstep(c, b[k + 1])) / 2, PLOT_Y - 4, name[k], b[k], b[k + 1] - 1);
  }
}

static void draw_lines(FILE *f, const Chart *c, const Plan *pl) {
  hline(f, c, (double)pl->arena_bytes, "arena");
  fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">arena %s</text>\n", PLOT_X + PLOT_W - 4,
          ybytes(c, (double)pl->arena_bytes) - 4, fmt_bytes(pl->arena_bytes));
  hline(f, c, (double)pl->layer_peak_bytes, "lpeak");
  fprintf(f, "<text x=\"%d\" y=\"%.1f\">layer peak %s</text>\n", PLOT_X + 4,
          ybytes(c, (double)pl->layer_peak_bytes) - 4, fmt_bytes(pl->layer_peak_bytes));
  if (c->budget_on_scale) {
    hline(f, c, (double)pl->budget, "budget");
    fprintf(f, "<text class=\"bl\" x=\"%d\" y=\"%.1f\" text-anchor=\"middle\">budget %s</text>\n",
            PLOT_X + PLOT_W / 2, ybytes(c, (double)pl->budget) - 4, fmt_bytes(pl->budget));
  } else {
    /* Off scale: say where it is instead of drawing it. */
    fprintf(f, "<line class=\"budget\" x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\"/>"
            "<text class=\"bl\" x=\"%d\" y=\"%d\" text-anchor=\"end\">budget %s: off scale, "
            "above (arena = %.3g%% of it) &#8593;</text>\n",
            PLOT_X + PLOT_W - 330, PLOT_X + PLOT_W, PLOT_Y - 20, PLOT_Y - 20, PLOT_X + PLOT_W,
            PLOT_Y - 24, fmt_bytes(pl->budget), pct(pl->arena_bytes, pl->budget));
  }
}

static void draw_peak(FILE *f, const Chart *c, const Graph *g, const Plan *pl, const Review *rv) {
  int p = rv->peak;
  double x = (xstep(c, p) + xstep(c, p + 1)) / 2, y = ybytes(c, (double)pl->live_bytes[p]);
  bool left = x > PLOT_X + PLOT_W * 0.6;
  const char *kind = step_kind_name(pl->route->s[p].kind);
  fprintf(f, "<g id=\"peak\"><path class=\"peak\" d=\"M%.1f %.1fl-6 -10h12z\"/>"
          "<line class=\"ax\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%d\" stroke-dasharray=\"2 2\"/>"
          "<text class=\"peakl\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">peak live %s at step %d "
          "(%s ", x, y - 1, x, x, y, PLOT_Y + PLOT_H, left ? x - 10 : x + 10, y + 14,
          left ? "end" : "start", fmt_bytes(pl->live_bytes[p]), p, kind);
  esc(f, review_step_op(g, pl, p));
  fprintf(f, ")</text><title>peak live: step %d, %s %s ", p, kind, review_step_op(g, pl, p));
  esc(f, review_step_node(g, pl, p));
  fprintf(f, "</title></g>\n");
}

/* Transparent rects, one per column, whose <title> is the hover text. */
static void draw_hover(FILE *f, const Chart *c, const Graph *g, const Plan *pl, const Review *rv) {
  for (int k = 0; k < c->ncol; k++) {
    int s = c->rep[k];
    double x0 = xcol(c, k), x1 = xcol(c, k + 1);
    fprintf(f, "<rect class=\"hov\" x=\"%.1f\" y=\"%d\" width=\"%.2f\" height=\"%d\"><title>",
            x0, PLOT_Y, x1 - x0, PLOT_H);
    if (c->hi[k] > c->lo[k])
      fprintf(f, "steps %d-%d (most live: step %d)\n", c->lo[k], c->hi[k], s);
    else fprintf(f, "step %d\n", s);
    fprintf(f, "%s %s ", step_kind_name(pl->route->s[s].kind), review_step_op(g, pl, s));
    esc(f, review_step_node(g, pl, s));
    fprintf(f, "\nlive %s:", fmt_bytes(pl->live_bytes[s]));
    for (int cat = 0; cat < CAT_COUNT; cat++) {
      int64_t b = rv->by_cat[(size_t)s * CAT_COUNT + cat];
      if (b) fprintf(f, " %s %s;", cat_name[cat], fmt_bytes(b));
    }
    fprintf(f, "</title></rect>\n");
  }
}

/* The copy stream: offloads on one row, prefetches on the next; a faint line
 * joins a tensor's offload to its prefetch (its time on the host). */
static void draw_lane(FILE *f, const Chart *c, const Graph *g, const Plan *pl, const Review *rv) {
  int y0 = PLOT_Y + PLOT_H + LANE_GAP;
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">copy stream</text>\n", PLOT_X - 6,
          y0 - 4);
  for (int row = 0; row < 2; row++)
    fprintf(f, "<rect class=\"lane\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>"
            "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", PLOT_X,
            y0 + row * LANE_ROW, PLOT_W, LANE_ROW - 2, PLOT_X - 6, y0 + row * LANE_ROW + 12,
            row ? "prefetch" : "offload");
  if (!rv->ncopies) {
    fprintf(f, "<text x=\"%d\" y=\"%d\">no copies: nothing offloaded or prefetched "
            "(policy %s planned as %s)</text>\n", PLOT_X + 8, y0 + 12,
            policy_name(pl->opts.policy), policy_name(pl->planned));
    return;
  }
  for (int t = 0; t < g->nt; t++)
    if (rv->offload_step[t] >= 0 && rv->prefetch_step[t] > rv->offload_step[t])
      fprintf(f, "<line class=\"host\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>\n",
              xstep(c, rv->offload_step[t]), xstep(c, rv->prefetch_step[t]), y0 + LANE_ROW - 1,
              y0 + LANE_ROW - 1);
  for (int k = 0; k < rv->ncopies; k++) {
    const Copy *cp = &rv->copies[k];
    double x0 = xstep(c, cp->step), x1 = xstep(c, cp->until + 1);
    if (x1 - x0 < 2) x1 = x0 + 2;
    fprintf(f, "<rect class=\"%s\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\"><title>%s ",
            cp->prefetch ? "pf" : "off", x0, y0 + (cp->prefetch ? LANE_ROW : 0) + 2, x1 - x0,
            LANE_ROW - 6, cp->prefetch ? "prefetch" : "offload");
    esc(f, cp->tensor >= 0 ? g->t[cp->tensor].name : "?");
    fprintf(f, " (%s) at step %d; %s step %d</title></rect>\n", fmt_bytes(cp->bytes), cp->step,
            cp->prefetch ? "first used at" : "device copy free after", cp->until);
  }
}

static void card(FILE *f, bool hot, const char *label, const char *value, const char *sub) {
  fprintf(f, "<div class=\"card%s\"><span>%s</span><b>%s</b><span>", hot ? " hot" : "", label,
          value);
  esc(f, sub);
  fprintf(f, "</span></div>\n");
}

static void summary(FILE *f, const Graph *g, const Plan *pl, const Review *rv) {
  int p = rv->peak;
  char *sub;
  fprintf(f, "<div class=\"cards\">\n");
  sub = xasprintf("%.3g%% of the budget; %.2fx the layer peak", pct(pl->arena_bytes, pl->budget),
                  pl->layer_peak_bytes ? (double)pl->arena_bytes / (double)pl->layer_peak_bytes : 0);
  card(f, pl->arena_bytes > pl->budget, "arena (device)", fmt_bytes(pl->arena_bytes), sub);
  sub = xasprintf("%s; %s left", pl->opts.budget ? "--budget" : "device memory",
                  pl->budget >= pl->arena_bytes ? fmt_bytes(pl->budget - pl->arena_bytes) : "none");
  card(f, false, "budget", fmt_bytes(pl->budget), sub);
  sub = xasprintf("step %d: %s %s", p, review_step_op(g, pl, p), review_step_node(g, pl, p));
  card(f, true, "peak live", fmt_bytes(pl->peak_live_bytes), sub);
  sub = xasprintf("peak live is %.2fx it", pl->layer_peak_bytes ?
                  (double)pl->peak_live_bytes / (double)pl->layer_peak_bytes : 0);
  card(f, false, "layer peak", fmt_bytes(pl->layer_peak_bytes), sub);
  if (g->zero_ranks) {
    char *what = xasprintf("per rank: parameters, state, 1/%d of the optimizer state (--zero 1)",
                           g->zero_ranks);
    card(f, false, "persistent", fmt_bytes(pl->persistent_bytes), what);
    free(what);
  } else {
    card(f, false, "persistent", fmt_bytes(pl->persistent_bytes), "parameters, state, optimizer");
  }
  if (g->precision != PREC_FP32) {
    card(f, false, "precision", precision_name(g->precision),
         "activations and their gradients 16-bit; fp32 master weights, gradients, optimizer "
         "and BN state, loss");
    ConvertStats cs = review_convert(pl);
    if (cs.at >= 0) {
      sub = xasprintf("largest step's, in its workspace: step %d, %s %s; %d steps convert",
                      cs.at, review_step_op(g, pl, cs.at), review_step_node(g, pl, cs.at), cs.steps);
      card(f, false, "working copies", fmt_bytes(cs.max), sub);
    }
  }
  sub = xasprintf("arena/baseline %.3f", pl->baseline_bytes ?
                  (double)pl->arena_bytes / (double)pl->baseline_bytes : 0);
  card(f, false, "baseline (policy none)", fmt_bytes(pl->baseline_bytes), sub);
  sub = xasprintf("offload %s per step", fmt_bytes((int64_t)pl->offload_bytes));
  card(f, false, "host (pinned)", fmt_bytes(pl->host_bytes), sub);
  char t[32];
  double s = pl->est_step_seconds;
  if (s >= 1) snprintf(t, sizeof t, "%.2f s", s);
  else if (s >= 1e-3) snprintf(t, sizeof t, "%.2f ms", s * 1e3);
  else snprintf(t, sizeof t, "%.1f us", s * 1e6);
  sub = xasprintf("%.3g GFLOP + %.3g recomputed, on %s", pl->step_flops / 1e9,
                  pl->recompute_flops / 1e9, pl->opts.device);
  card(f, false, "est. step", t, sub);
  fprintf(f, "</div>\n");
}

static void legend(FILE *f) {
  fprintf(f, "<div class=\"legend\">");
  for (int c = 0; c < CAT_COUNT; c++)
    fprintf(f, "<span><i class=\"c-%s\"></i>%s</span>", cat_key[c], cat_name[c]);
  fprintf(f, "<span><i style=\"background:#111;height:2px\"></i>arena</span>"
          "<span><i style=\"background:#555;height:2px\"></i>layer peak (dashed)</span>"
          "<span><i style=\"background:#d62728;height:2px\"></i>budget</span>"
          "<span><i class=\"c-act\"></i>offload / <i class=\"c-pre\"></i>prefetch (copy stream)"
          "</span></div>\n");
}

static const char *inst_decision(const Review *rv, const Plan *pl, int i) {
  if (rv->cat[i] == CAT_RECOMPUTED) return "recomputed";
  if (rv->cat[i] == CAT_PREFETCHED) return "offloaded";
  return pl->inst[i].tensor >= 0 ? decision_name(rv->dec[pl->inst[i].tensor]) : "kept";
}

static void inst_row(FILE *f, const Graph *g, const Plan *pl, const Review *rv, int i,
                     int64_t share_of) {
  const Instance *in = &pl->inst[i];
  const char *dec = inst_decision(rv, pl, i);
  fprintf(f, "<tr><td>");
  esc(f, plan_inst_name(g, pl, i));
  fprintf(f, "</td><td>%s", plan_inst_kind(g, pl, i));
  /* --precision bf16: each tensor's storage dtype beside its kind. */
  if (g->precision != PREC_FP32 && in->tensor >= 0) fprintf(f, " %s", dtype_name(g->t[in->tensor].dtype));
  if (in->convert_bytes) fprintf(f, " (%s of working copies)", fmt_bytes(in->convert_bytes));
  fprintf(f, "</td><td>%s</td><td class=\"n\">%s</td>", cat_name[rv->cat[i]], fmt_bytes(in->bytes));
  if (share_of) fprintf(f, "<td class=\"n\">%.1f%%</td>", pct(in->bytes, share_of));
  if (in->persistent) fprintf(f, "<td>persistent</td>");
  else fprintf(f, "<td class=\"n\">%d&ndash;%d (%d steps)</td>", in->first, in->last,
               in->last - in->first + 1);
  fprintf(f, "<td class=\"dec-%s\">%s</td><td>", dec, dec);
  if (in->tensor >= 0) esc(f, review_reason(g, pl, rv, in->tensor));
  fprintf(f, "</td></tr>\n");
}

static void tables(FILE *f, const Graph *g, const Plan *pl, const Review *rv) {
  int p = rv->peak;
  int *live, n = review_live_at(pl, p, &live);
  fprintf(f, "<h2 id=\"at-peak\">At the peak: step %d, %s ", p, step_kind_name(pl->route->s[p].kind));
  esc(f, review_step_op(g, pl, p));
  fprintf(f, " <code>");
  esc(f, review_step_node(g, pl, p));
  fprintf(f, "</code>: %s live (%.3g%% of the arena)</h2>\n<p>By category:",
          fmt_bytes(pl->live_bytes[p]), pct(pl->live_bytes[p], pl->arena_bytes));
  for (int c = 0; c < CAT_COUNT; c++)
    fprintf(f, "%s <i class=\"c-%s\" style=\"display:inline-block;width:10px;height:10px\"></i> "
            "%s %s", c ? "," : "", cat_key[c], cat_name[c],
            fmt_bytes(rv->by_cat[(size_t)p * CAT_COUNT + c]));
  fprintf(f, ". %d instances live; the largest:</p>\n<table id=\"peak-table\"><tr><th>tensor</th>"
          "<th>kind</th><th>category</th><th>size</th><th>share</th><th>lifetime</th>"
          "<th>decision</th><th>why</th></tr>\n", n);
  for (int k = 0; k < n && k < 15; k++) inst_row(f, g, pl, rv, live[k], pl->live_bytes[p]);
  fprintf(f, "</table>\n");
  free(live);

  /* Decisions. */
  fprintf(f, "<h2 id=\"decisions\">Decisions (policy %s, planned as %s)</h2>\n",
          policy_name(pl->opts.policy), policy_name(pl->planned));
  for (int d = DEC_RECOMPUTED; d <= DEC_OFFLOADED; d++) {
    int cnt = 0;
    for (int t = 0; t < g->nt; t++) cnt += rv->dec[t] == (Decision)d;
    fprintf(f, "<p><b>%s:</b> ", decision_name((Decision)d));
    if (!cnt) {
      fprintf(f, "none</p>\n");
      continue;
    }
    fprintf(f, "%d tensors</p><table><tr><th>tensor</th><th>size</th><th>why / when</th></tr>\n", cnt);
    for (int t = 0; t < g->nt; t++) {
      if (rv->dec[t] != (Decision)d) continue;
      fprintf(f, "<tr><td>");
      esc(f, g->t[t].name);
      fprintf(f, "</td><td class=\"n\">%s</td><td>", fmt_bytes(tensor_bytes(&g->t[t])));
      esc(f, review_reason(g, pl, rv, t));
      fprintf(f, "</td></tr>\n");
    }
    fprintf(f, "</table>\n");
  }

  /* The largest non-persistent tensors (primary instances). */
  int *order = xmalloc(sizeof(int) * (size_t)(pl->ninst ? pl->ninst : 1)), m = 0;
  for (int i = 0; i < pl->ninst; i++)
    if (!pl->inst[i].persistent) order[m++] = i;
  /* Selection of the 30 largest: O(30 n), fine for 60,000 instances. */
  int shown = m < 30 ? m : 30;
  for (int k = 0; k < shown; k++) {
    int best = k;
    for (int j = k + 1; j < m; j++)
      if (pl->inst[order[j]].bytes > pl->inst[order[best]].bytes) best = j;
    int tmp = order[k];
    order[k] = order[best], order[best] = tmp;
  }
  fprintf(f, "<h2 id=\"largest\">Largest tensors (%d of %d non-persistent instances)</h2>\n"
          "<table id=\"tensor-table\"><tr><th>tensor</th><th>kind</th><th>category</th>"
          "<th>size</th><th>lifetime</th><th>decision</th><th>why</th></tr>\n", shown, m);
  for (int k = 0; k < shown; k++) inst_row(f, g, pl, rv, order[k], 0);
  fprintf(f, "</table>\n");
  free(order);
}

void plan_print_html(const Graph *g, const Plan *pl, FILE *f) {
  const char *model = g->name && g->name[0] ? g->name : g->path ? g->path : "";
  Review *rv = review_build(g, pl);
  fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>snc plan: ");
  esc(f, model);
  fprintf(f, "</title>\n<style>\n%s</style></head><body>\n<h1>snc plan: ", css);
  esc(f, model);
  fprintf(f, "</h1>\n<div>policy <b>%s</b>", policy_name(pl->opts.policy));
  if (pl->planned != pl->opts.policy) fprintf(f, " (planned as <b>%s</b>)", policy_name(pl->planned));
  fprintf(f, ", batch %d, device %s, %d steps (%d training, %d eval), %d instances</div>\n",
          pl->batch, pl->opts.device, pl->route->ns, pl->route->train_steps,
          pl->route->ns - pl->route->train_steps, pl->ninst);
  if (plan_note(pl)) {
    fprintf(f, "<div class=\"note\">policy %s: ", policy_name(pl->opts.policy));
    esc(f, plan_note(pl));
    fprintf(f, "</div>\n");
  }
  summary(f, g, pl, rv);

  fprintf(f, "<h2>Device memory over the steps</h2>\n");
  legend(f);
  if (pl->route->ns > 0) {
    Chart c;
    chart_init(&c, pl);
    int h = PLOT_Y + PLOT_H + LANE_GAP + 2 * LANE_ROW + 12;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"timeline\" width=\"%d\" "
            "height=\"%d\" viewBox=\"0 0 %d %d\">\n", SVG_W, h, SVG_W, h);
    if (c.ncol < c.T)
      fprintf(f, "<desc>%d steps in %d columns: each column shows the step of its range with "
              "the most live bytes</desc>\n", c.T, c.ncol);
    draw_axes(f, &c);
    draw_stack(f, &c, rv);
    draw_phases(f, &c, pl, rv);
    draw_lines(f, &c, pl);
    draw_hover(f, &c, g, pl, rv);
    draw_peak(f, &c, g, pl, rv);
    draw_lane(f, &c, g, pl, rv);
    fprintf(f, "</svg>\n");
    if (c.ymin > 0)
      fprintf(f, "<p style=\"color:#555\">The memory axis starts at %s, not at zero: every "
              "step has at least that much live (mostly persistent state), so the chart shows "
              "the part that changes.</p>\n", fmt_bytes((int64_t)c.ymin));
    if (c.ncol < c.T)
      fprintf(f, "<p style=\"color:#555\">%d steps drawn in %d pixel columns: each column shows "
              "the step of its range with the most live bytes (hover for the range).</p>\n",
              c.T, c.ncol);
    chart_free(&c);
    tables(f, g, pl, rv);
  }
  fprintf(f, "</body></html>\n");
  review_free(rv);
}
