/* plan_diff.c — `snc plan --diff A.json B.json`: what changed between two
 * plans, for reviewing a compiler change or a budget change.
 *
 * Prints: the header fields that differ (model, policy, batch, device,
 * budget); the totals (arena, persistent, layer peak, peak live, baseline,
 * host, est. step time, recompute FLOPs, offload bytes) as old, new, delta and
 * percent; the peak step of each; steps added or removed by kind; and the
 * per-tensor decisions (kept, recomputed, offloaded) that differ, tensors
 * matched by name. Decisions are read off plan.json as plan_review.c reads
 * them off a Plan: an instance written by a "recompute" step, or named by a
 * step's "rebuilds" (a carrier), is recomputed, a tensor named by an
 * "offload" step is offloaded.
 *
 * Exit 0 whatever the difference (a diff is a report, not a test); malformed
 * or foreign JSON is a one-line error, exit 2.
 * Not here: the JSON reader (json.c). */
#include "../json.h"
#include "review.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct Named {
  const char *name;
  int dec;                 // 0 kept, 1 recomputed, 2 offloaded
} Named;

typedef struct PlanDoc {
  const char *path;
  const Json *root, *steps, *insts;
  Named *named;            // per distinct tensor name, sorted
  int nnamed;
} PlanDoc;

static const char *dec_names[] = {"kept", "recomputed", "offloaded"};

static noreturn void bad(const char *path, const char *what) {
  fatal(EXIT_BADINPUT, "%s: not a plan.json (%s)", path, what);
}

static const Json *need(const PlanDoc *d, const Json *obj, const char *key, JsonType t) {
  const Json *v = json_get(obj, key);
  if (!v) bad(d->path, xasprintf("no key '%s'", key));
  if (v->type != t)
    bad(d->path, xasprintf("'%s' is %s, not %s", key, json_type_name(v->type), json_type_name(t)));
  return v;
}

static double num(const PlanDoc *d, const char *key) { return need(d, d->root, key, JS_NUM)->num; }

static const char *str_or(const Json *obj, const char *key, const char *dflt) {
  const Json *v = json_get(obj, key);
  return v && v->type == JS_STR ? v->str : dflt;
}

static int cmp_named(const void *a, const void *b) {
  return strcmp(((const Named *)a)->name, ((const Named *)b)->name);
}

/* Per distinct tensor name, its decision. */
static void decisions(PlanDoc *d) {
  int ni = d->insts->n;
  int *dec = xcalloc((size_t)(ni ? ni : 1), sizeof *dec);
  for (int s = 0; s < d->steps->n; s++) {
    const Json *st = &d->steps->items[s];
    if (st->type != JS_OBJ) bad(d->path, xasprintf("step %d is not an object", s));
    const char *kind = str_or(st, "kind", "");
    if (strcmp(kind, "recompute") == 0) {
      const Json *outs = json_get(st, "outputs");
      for (int k = 0; outs && outs->type == JS_ARR && k < outs->n; k++) {
        double i = outs->items[k].type == JS_NUM ? outs->items[k].num : -1;
        if (i >= 0 && i < ni && i == floor(i) && dec[(int)i] < 1) dec[(int)i] = 1;
      }
    }
    /* a carrier step (a backward step's carried rebuild): the instance it rebuilds */
    const Json *rb = json_get(st, "rebuilds");
    if (rb && rb->type == JS_NUM && rb->num >= 0 && rb->num < ni && rb->num == floor(rb->num) &&
        dec[(int)rb->num] < 1)
      dec[(int)rb->num] = 1;
  }
  d->named = xmalloc(sizeof *d->named * (size_t)(ni + d->steps->n + 1));
  d->nnamed = 0;
  for (int i = 0; i < ni; i++) {
    const Json *in = &d->insts->items[i];
    if (in->type != JS_OBJ) bad(d->path, xasprintf("instance %d is not an object", i));
    if (strcmp(str_or(in, "kind", ""), "workspace") == 0) continue;
    const char *name = str_or(in, "tensor", NULL);
    if (!name) bad(d->path, xasprintf("instance %d has no tensor name", i));
    d->named[d->nnamed++] = (Named){name, dec[i]};
  }
  /* An offload step names its tensor in "node". */
  for (int s = 0; s < d->steps->n; s++) {
    const Json *st = &d->steps->items[s];
    if (strcmp(str_or(st, "kind", ""), "offload") == 0)
      d->named[d->nnamed++] = (Named){str_or(st, "node", "?"), 2};
  }
  free(dec);
  qsort(d->named, (size_t)d->nnamed, sizeof *d->named, cmp_named);
  int m = 0;
  for (int k = 0; k < d->nnamed; k++) {
    if (m && strcmp(d->named[m - 1].name, d->named[k].name) == 0) {
      if (d->named[k].dec > d->named[m - 1].dec) d->named[m - 1].dec = d->named[k].dec;
    } else d->named[m++] = d->named[k];
  }
  d->nnamed = m;
}

static void load(PlanDoc *d, const char *path) {
  d->path = path;
  d->root = json_parse_file(path);
  if (d->root->type != JS_OBJ) bad(path, xasprintf("the top level is %s", json_type_name(d->root->type)));
  d->steps = need(d, d->root, "steps", JS_ARR);
  d->insts = need(d, d->root, "instances", JS_ARR);
  static const char *keys[] = {"arena_bytes", "persistent_bytes", "layer_peak_bytes",
                               "peak_live_bytes", "baseline_bytes", "host_bytes",
                               "est_step_seconds", "recompute_flops", "offload_bytes"};
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) num(d, keys[k]);
  decisions(d);
}

static void fmt_time(char *buf, size_t n, double s) {
  double a = fabs(s);
  if (a >= 1) snprintf(buf, n, "%.3f s", s);
  else if (a >= 1e-3) snprintf(buf, n, "%.3f ms", s * 1e3);
  else snprintf(buf, n, "%.1f us", s * 1e6);
}

static const char *signed_bytes(double d) {
  static char buf[4][40];
  static int k;
  char *s = buf[k++ & 3];
  snprintf(s, 40, "%s%s", d > 0 ? "+" : d < 0 ? "-" : "", fmt_bytes((int64_t)fabs(d)));
  return s;
}

/* One row: old, new, delta, percent. kind: 'b' bytes, 't' seconds, 'f' FLOPs. */
static void row(FILE *f, const PlanDoc *a, const PlanDoc *b, const char *label, const char *key,
                char kind) {
  double x = num(a, key), y = num(b, key), dlt = y - x;
  char o[40], n[40], d[40], p[24];
  if (kind == 'b') {
    snprintf(o, sizeof o, "%s", fmt_bytes((int64_t)x));
    snprintf(n, sizeof n, "%s", fmt_bytes((int64_t)y));
    snprintf(d, sizeof d, "%s", signed_bytes(dlt));
  } else if (kind == 't') {
    fmt_time(o, sizeof o, x), fmt_time(n, sizeof n, y), fmt_time(d, sizeof d, dlt);
    if (dlt > 0) memmove(d + 1, d, strlen(d) + 1), d[0] = '+';
  } else {
    snprintf(o, sizeof o, "%.4g", x), snprintf(n, sizeof n, "%.4g", y);
    snprintf(d, sizeof d, "%+.4g", dlt);
  }
  if (x != 0) snprintf(p, sizeof p, "%+.1f%%", 100.0 * dlt / x);
  else snprintf(p, sizeof p, "%s", y == 0 ? "0%" : "new");
  fprintf(f, "  %-16s %14s %14s %14s %9s%s\n", label, o, n, d, p, dlt == 0 ? "" : "   *");
}

static int peak_step(const PlanDoc *d) {
  int best = -1;
  double bv = -1;
  for (int s = 0; s < d->steps->n; s++) {
    const Json *lb = json_get(&d->steps->items[s], "live_bytes");
    if (lb && lb->type == JS_NUM && lb->num > bv) bv = lb->num, best = s;
  }
  return best;
}

static void field(FILE *f, const char *label, const char *x, const char *y) {
  if (strcmp(x, y) == 0) fprintf(f, "  %-9s %s\n", label, x);
  else fprintf(f, "  %-9s %s -> %s   *\n", label, x, y);
}

static const char *field_str(const PlanDoc *d, const char *key) {
  const Json *v = json_get(d->root, key);
  if (!v) return "?";
  if (v->type == JS_STR) return v->str;
  if (v->type == JS_NUM) return xasprintf("%.17g", v->num);
  return "?";
}

static void step_kinds(FILE *f, const PlanDoc *a, const PlanDoc *b) {
  static const char *kinds[] = {"forward", "loss", "backward", "update", "recompute", "offload",
                                "prefetch", "eval"};
  enum { NK = sizeof kinds / sizeof kinds[0] };
  int ca[NK + 1] = {0}, cb[NK + 1] = {0};
  for (int w = 0; w < 2; w++) {
    const PlanDoc *d = w ? b : a;
    int *c = w ? cb : ca;
    for (int s = 0; s < d->steps->n; s++) {
      const char *k = str_or(&d->steps->items[s], "kind", "");
      int i = 0;
      while (i < NK && strcmp(kinds[i], k)) i++;
      c[i]++;                          // NK: an unknown kind
    }
  }
  fprintf(f, "\nsteps: %d -> %d (%+d)\n", a->steps->n, b->steps->n, b->steps->n - a->steps->n);
  bool any = false;
  for (int i = 0; i <= NK; i++) {
    if (ca[i] == cb[i]) continue;
    fprintf(f, "  %-10s %6d -> %6d  (%+d %s)\n", i < NK ? kinds[i] : "other", ca[i], cb[i],
            cb[i] - ca[i], cb[i] > ca[i] ? "added" : "removed");
    any = true;
  }
  if (!any) fprintf(f, "  same number of steps of every kind\n");
}

static void tensor_decisions(FILE *f, const PlanDoc *a, const PlanDoc *b) {
  int i = 0, j = 0, ndiff = 0, only_a = 0, only_b = 0;
  fprintf(f, "\ndecisions that differ (tensors matched by name):\n");
  while (i < a->nnamed || j < b->nnamed) {
    int c = i >= a->nnamed ? 1 : j >= b->nnamed ? -1 : strcmp(a->named[i].name, b->named[j].name);
    if (c < 0) only_a++, i++;
    else if (c > 0) only_b++, j++;
    else {
      if (a->named[i].dec != b->named[j].dec) {
        fprintf(f, "  - %s: %s -> %s\n", a->named[i].name, dec_names[a->named[i].dec],
                dec_names[b->named[j].dec]);
        ndiff++;
      }
      i++, j++;
    }
  }
  if (!ndiff) fprintf(f, "  none\n");
  if (only_a || only_b) {
    fprintf(f, "tensors only in %s: %d; only in %s: %d", a->path, only_a, b->path, only_b);
    int shown = 0;
    i = j = 0;
    while ((i < a->nnamed || j < b->nnamed) && shown < 8) {
      int c = i >= a->nnamed ? 1 : j >= b->nnamed ? -1 : strcmp(a->named[i].name, b->named[j].name);
      if (c < 0) fprintf(f, "%s -%s", shown++ ? "," : " (e.g.", a->named[i++].name);
      else if (c > 0) fprintf(f, "%s +%s", shown++ ? "," : " (e.g.", b->named[j++].name);
      else i++, j++;
    }
    fprintf(f, "%s\n", shown ? ")" : "");
  }
}

int plan_diff(const char *a_json, const char *b_json, FILE *f) {
  err_file = NULL;                     // messages name the file themselves
  PlanDoc a = {0}, b = {0};
  load(&a, a_json);
  load(&b, b_json);
  fprintf(f, "plan diff: %s -> %s   (* marks a change)\n", a_json, b_json);
  field(f, "model", field_str(&a, "model"), field_str(&b, "model"));
  field(f, "policy", field_str(&a, "policy"), field_str(&b, "policy"));
  field(f, "planned", field_str(&a, "planned_policy"), field_str(&b, "planned_policy"));
  field(f, "batch", field_str(&a, "batch"), field_str(&b, "batch"));
  field(f, "device", field_str(&a, "device"), field_str(&b, "device"));
  const Json *ba = json_get(a.root, "budget_bytes"), *bb = json_get(b.root, "budget_bytes");
  field(f, "budget", ba && ba->type == JS_NUM ? fmt_bytes((int64_t)ba->num) : "?",
        bb && bb->type == JS_NUM ? fmt_bytes((int64_t)bb->num) : "?");
  fprintf(f, "\n  %-16s %14s %14s %14s %9s\n", "", "old", "new", "delta", "change");
  row(f, &a, &b, "arena", "arena_bytes", 'b');
  row(f, &a, &b, "persistent", "persistent_bytes", 'b');
  row(f, &a, &b, "layer peak", "layer_peak_bytes", 'b');
  row(f, &a, &b, "peak live", "peak_live_bytes", 'b');
  row(f, &a, &b, "baseline", "baseline_bytes", 'b');
  row(f, &a, &b, "host", "host_bytes", 'b');
  row(f, &a, &b, "est. step", "est_step_seconds", 't');
  row(f, &a, &b, "recompute FLOP", "recompute_flops", 'f');
  row(f, &a, &b, "offload", "offload_bytes", 'b');
  int pa = peak_step(&a), pb = peak_step(&b);
  fprintf(f, "\npeak live at: step %d (%s) -> step %d (%s)\n", pa,
          pa >= 0 ? str_or(&a.steps->items[pa], "node", "?") : "-", pb,
          pb >= 0 ? str_or(&b.steps->items[pb], "node", "?") : "-");
  step_kinds(f, &a, &b);
  tensor_decisions(f, &a, &b);
  return 0;
}
