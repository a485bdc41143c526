/* profile.c — `--profile FILE` of the emitted program: the measured time of
 * each plan step, summed per step kind and per cost class, beside the plan's
 * estimate (compiler/plan/cost.c), so the cost model is checked step by step and
 * not only in total.
 *
 * How: while a training step runs (rt_prof_begin/end around it), the device
 * layer calls snrt_prof_mark(s) as plan step s starts (snrt_reads opens
 * every training step of train.c); a step's time runs from its mark to the
 * next (the last to the end of the training step). The first 3 steps of the
 * invocation are left out, as for images_per_s. Copy steps measure the time
 * to issue the copy; a wait shows up in the compute step after which it
 * stands (what the estimate calls exposed time).
 *
 * On CUDA kernels are only queued when the next step starts: there the
 * device layer records an event per plan step on the compute stream and
 * hands the times between them to snrt_prof_add (snrt_dev_prof_collect, at
 * the end of each profiled training step, which runs eagerly, not replayed
 * from a CUDA graph). Copy steps then measure nothing on the compute stream
 * (their copies run on the copy streams); a wait shows up as above.
 */
#include "rt.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

int snrt_prof_on;

static struct {
  int n;               /* plan steps of the training step */
  double *sum;         /* per plan step: seconds summed over measured steps */
  double t_last;       /* when the current plan step started */
  int cur;             /* the current plan step (-1: none yet) */
  double t_begin, step_sum;
  int64_t seen, measured;
} P;

/* Not rt_fail (util.c): build/snc-calibrate links the device layer, which
 * calls snrt_prof_mark, without the program's main. */
static noreturn void prof_fail(int code, const char *what, const char *path) {
  fprintf(stderr, "train: error: --profile: %s%s%s\n", what, path ? " " : "", path ? path : "");
  exit(code);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void close_cur(double t) {
  if (P.cur >= 0 && P.cur < P.n) P.sum[P.cur] += t - P.t_last;
}

void snrt_prof_mark(int step) {
  double t = now();
  close_cur(t);
  P.cur = step;
  P.t_last = t;
}

void snrt_prof_add(int step, double seconds) {
  if (step >= 0 && step < P.n) P.sum[step] += seconds;
}

void rt_prof_begin(const snrt_model *m) {
  if (!P.sum) {
    P.n = m->nsteps;
    P.sum = calloc((size_t)P.n + 1, sizeof(double));
    if (!P.sum) prof_fail(SNRT_EXIT_DEVICE, "out of memory", NULL);
  }
  P.seen++;
  P.cur = -1;
  snrt_prof_on = P.seen > 3 && snrt_dev_step_timing;
  P.t_begin = now();
}

void rt_prof_end(void) {
  if (snrt_prof_on) snrt_dev_prof_collect();
  double t = now();
  if (snrt_prof_on) close_cur(t);
  snrt_prof_on = 0;
  if (P.seen > 3) P.step_sum += t - P.t_begin, P.measured++;
}

typedef struct Group { const char *name; double meas, est; int steps; } Group;

static void group_add(Group *g, int *ng, const char *name, double meas, double est) {
  for (int i = 0; i < *ng; i++)
    if (!strcmp(g[i].name, name)) {
      g[i].meas += meas, g[i].est += est, g[i].steps++;
      return;
    }
  g[*ng] = (Group){name, meas, est, 1};
  (*ng)++;
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

static void groups_write(FILE *f, const char *key, Group *g, int ng, int last) {
  fprintf(f, "  \"%s\": {", key);
  for (int i = 0; i < ng; i++) {
    fprintf(f, "%s\n    ", i ? "," : "");
    json_str(f, g[i].name);
    fprintf(f, ": {\"steps\": %d, \"measured_s\": %.6g, \"estimated_s\": %.6g}", g[i].steps,
            g[i].meas, g[i].est);
  }
  fprintf(f, "\n  }%s\n", last ? "" : ",");
}

void rt_prof_write(const snrt_ctx *c, const char *path) {
  const snrt_model *m = c->m;
  FILE *f = fopen(path, "w");
  if (!f) prof_fail(SNRT_EXIT_DATA, "cannot write", path);
  int64_t k = P.measured;
  bool per_step = snrt_dev_step_timing && k > 0 && P.sum;
  fprintf(f, "{\n  \"device\": ");
  json_str(f, m->est_device ? m->est_device : "?");
  fprintf(f, ",\n  \"policy\": ");
  json_str(f, m->policy ? m->policy : "?");
  fprintf(f, ",\n  \"batch\": %d,\n  \"threads\": %d,\n  \"steps_measured\": %lld,\n", m->batch,
          c->threads, (long long)k);
  fprintf(f, "  \"per_step_timing\": %s,\n", per_step ? "true" : "false");
  fprintf(f, "  \"step\": {\"measured_s\": %.6g, \"estimated_s\": %.6g},\n", k ? P.step_sum / k : 0.0,
          m->est_step_s);
  Group *kinds = calloc((size_t)m->nsteps + 1, sizeof *kinds);
  Group *classes = calloc((size_t)m->nsteps + 1, sizeof *classes);
  if (!kinds || !classes) prof_fail(SNRT_EXIT_DEVICE, "out of memory", NULL);
  int nk = 0, ncl = 0;
  for (int s = 0; s < m->nsteps; s++) {
    double meas = per_step ? P.sum[s] / k : 0;
    group_add(kinds, &nk, m->steps[s].kind, meas, m->steps[s].est_s);
    group_add(classes, &ncl, m->steps[s].cls, meas, m->steps[s].est_s);
  }
  groups_write(f, "by_kind", kinds, nk, 0);
  groups_write(f, "by_class", classes, ncl, 0);
  fprintf(f, "  \"per_step\": [");
  for (int s = 0; s < m->nsteps; s++) {
    fprintf(f, "%s\n    {\"index\": %d, \"kind\": ", s ? "," : "", s);
    json_str(f, m->steps[s].kind);
    fprintf(f, ", \"class\": ");
    json_str(f, m->steps[s].cls);
    fprintf(f, ", \"measured_s\": %.6g, \"estimated_s\": %.6g}", per_step ? P.sum[s] / k : 0.0,
            m->steps[s].est_s);
  }
  fprintf(f, "\n  ]\n}\n");
  free(kinds), free(classes);
  if (fclose(f)) prof_fail(SNRT_EXIT_DATA, "cannot write", path);
}
