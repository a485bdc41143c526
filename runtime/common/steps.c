/* steps.c — the emitted program's step loop: per step it uploads a batch
 * into the input and label tensors, calls snrt_the_model.train_step, checks
 * the loss, logs progress and saves checkpoints (--save-every); at the end of
 * each epoch (and of the run) it evaluates with eval_step. SIGINT/SIGTERM/SIGUSR1
 * finish the current step; the run then saves (with --save) and exits 0.
 *
 * What it is not: the step itself (the emitted train.c) or memory (the device
 * layer, snrt_dev.h). It touches the arena only through the device layer, so
 * it is the same on the CPU and on CUDA. */
#include "rt.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- signals ---------------------------------------------------------------- */

volatile sig_atomic_t rt_stop_signal;

static void on_signal(int sig) {
  if (rt_stop_signal) _exit(128 + sig);   /* a second ^C: stop now */
  rt_stop_signal = sig;
}

static void catch_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  /* Open MPI's mpirun passes SIGUSR1 on to the ranks at once and leaves
   * them be; a SIGTERM to mpirun itself is followed by SIGKILL
   * odls_base_sigkill_timeout seconds later (1 s by default: docs/dist.md). */
  sigaction(SIGUSR1, &sa, NULL);
}

const char *rt_stop_name(void) {
  return rt_stop_signal == SIGINT ? "SIGINT" : rt_stop_signal == SIGUSR1 ? "SIGUSR1" : "SIGTERM";
}

/* ---- progress ----------------------------------------------------------------- */

double rt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fmt_time(char *buf, size_t n, double s) {
  if (!(s >= 0) || s > 1e7) {
    snprintf(buf, n, "?");
    return;
  }
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* ---- testing aids ------------------------------------------------------------- */

/* SNRT_SLOW_STEPS=K:US, a testing aid: each of the first K steps of this
 * invocation sleeps US microseconds after it (inside the timed step), so a
 * test can make the first steps slow and see that images_per_s leaves out
 * exactly the first 3, or make every step slow enough to signal mid-run.
 * Unset or malformed: no delay. */
static void slow_steps(int64_t *k, long *us) {
  *k = 0;
  *us = 0;
  const char *s = getenv("SNRT_SLOW_STEPS");
  if (!s) return;
  char *end;
  long long kk = strtoll(s, &end, 10);
  if (end == s || *end != ':' || kk < 0) return;
  const char *u = end + 1;
  long uu = strtol(u, &end, 10);
  if (end == u || *end || uu < 0) return;
  *k = kk;
  *us = uu;
}

/* SNRT_DIST_FAIL=RANK:STEP[:hang], a testing aid: that rank kills itself
 * (SIGKILL; with :hang, stops itself with SIGSTOP) before global step STEP
 * (0-based), so tests can see the others end with a message. */
static void fail_at(int64_t *step, int *hang) {
  const char *s = getenv("SNRT_DIST_FAIL");
  if (!s) return;
  char *end;
  long r = strtol(s, &end, 10);
  if (end == s || *end != ':' || r != rt_rank) return;
  const char *p = end + 1;
  long long st = strtoll(p, &end, 10);
  if (end == p || st < 0) return;
  *step = st;
  *hang = !strcmp(end, ":hang");
}

/* ---- the loop ----------------------------------------------------------------- */

/* How many steps this invocation runs: --steps, and the end of --epochs. */
static int64_t steps_to_run(const rt_run *r) {
  int64_t todo = INT64_MAX;
  if (r->o.steps >= 0) todo = r->o.steps;
  if (r->o.epochs >= 0) {
    int64_t left = (r->o.epochs - r->pos.epoch) * r->nb - r->pos.pos;
    if (left < 0) left = 0;
    if (left < todo) todo = left;
  }
  return todo;
}

/* Data parallel: every rank's loss of the global batch, and whether any rank
 * was asked to stop (all stop after the same step). */
static void exchange_loss(rt_run *r) {
  double v[2] = {r->loss, rt_stop_signal ? 1 : 0};
  char what[64];
  snprintf(what, sizeof what, "the exchange of the loss after step %lld", (long long)r->pos.step + 1);
  rt_dist_sum(v, 2, what);
  r->loss = (float)(v[0] / rt_ranks);
  if (v[1] > 0) {
    r->stop = true;
    if (!rt_stop_signal) rt_stop_signal = SIGTERM;
  }
}

/* Whether to stop: with several ranks only what they agreed on in the last
 * exchange (a signal that reaches one rank after it, another before it,
 * would otherwise stop them after different steps, one of them waiting in
 * the next all-reduce for the other), alone the signal itself. */
static bool stopping(const rt_run *r) {
  return rt_ranks > 1 ? r->stop : rt_stop_signal != 0;
}

/* The progress line: redrawn in place on a terminal, one line per
 * --log-every steps otherwise. */
static void progress(const rt_run *r, int64_t todo, bool tty, bool epoch_end, double t) {
  int64_t done = r->done, gbatch = r->gbatch, nb = r->nb;
  double rate = done > 3 && t > r->t3 ? (done - 3) * gbatch / (t - r->t3) : done * gbatch / (t - r->t0);
  char eta[32] = "?";
  if (todo != INT64_MAX) fmt_time(eta, sizeof eta, (todo - done) * gbatch / rate);
  /* Token models count tokens (T per sample) when every position is
   * trained, sequences otherwise; other models images (samples). */
  const snrt_model *m = r->m;
  const char *unit = "img/s";
  double per = 1;
  if (m->tensors[m->input].dtype == SNRT_I32) {
    unit = m->positions > 1 ? "tok/s" : "seq/s";
    if (m->positions > 1) per = (double)(m->tensors[m->input].nbytes / 4 / m->batch);
  }
  printf("%sepoch %lld step %lld/%lld loss %.4f %.0f %s ETA %s%s", tty ? "\r\033[K" : "",
         (long long)(epoch_end ? r->pos.epoch : r->pos.epoch + 1),
         (long long)(epoch_end ? nb : r->pos.pos), (long long)nb, r->loss, rate * per, unit, eta,
         tty ? "" : "\n");
  fflush(stdout);
}

/* After the loop: rank 0 says why it stopped, or evaluates the final
 * parameters unless the last epoch's end just did; other ranks evaluate
 * their share. */
static void finish(rt_run *r) {
  const rt_opts *o = &r->o;
  if (!r->lead) {
    if (r->test && !stopping(r) && !r->evaluated_last) rt_evaluate(&r->c, r->test, &r->ev);   /* its share */
  } else if (stopping(r))
    printf("%s: stopped by %s after step %lld%s%s\n", rt_prog, rt_stop_name(),
           (long long)r->pos.step, o->save ? "; saving " : "", o->save ? o->save : "");
  else if (r->test && !r->evaluated_last && rt_evaluate(&r->c, r->test, &r->ev)) {
    printf("%s: test accuracy %.4f, test loss %.4f%s\n", rt_prog, r->ev.accuracy, r->ev.loss,
           rt_lm_extra(r->m, r->ev.loss));
    r->evaluated_last = true;
  }
  fflush(stdout);
}

void rt_train(rt_run *r) {
  const snrt_model *m = r->m;
  const rt_opts *o = &r->o;
  snrt_ctx *c = &r->c;
  rt_position *pos = &r->pos;
  catch_signals();
  int64_t todo = steps_to_run(r);
  const snrt_tensor *in = &m->tensors[m->input], *lt = &m->tensors[m->label];
  rt_loader *ld = todo > 0 ? rt_loader_start(r->train, m, c->seed, pos->epoch, pos->pos) : NULL;
  bool tty = isatty(STDOUT_FILENO);
  r->mt = (rt_metrics){.threads = c->threads, .train_loss = NAN};
  r->ev = (rt_eval){0, 0};
  r->evaluated_last = false;
  r->t0 = r->t3 = rt_now();
  double last_draw = 0;
  r->done = 0;
  r->loss = NAN;
  int64_t slow_k;
  long slow_us;
  slow_steps(&slow_k, &slow_us);
  int64_t fail_step = -1;
  int fail_hang = 0;
  if (rt_ranks > 1) fail_at(&fail_step, &fail_hang);
  r->c3[0] = r->c3[1] = r->c3[2] = 0;
  while (r->done < todo && !stopping(r)) {
    if (pos->step == fail_step) {   /* SNRT_DIST_FAIL: a testing aid */
      fflush(stdout);
      raise(fail_hang ? SIGSTOP : SIGKILL);
    }
    const float *x;
    const void *y;
    rt_loader_next(ld, &x, &y);
    snrt_dev_upload(c, in->offset, x, in->nbytes);
    snrt_dev_upload(c, lt->offset, y, lt->nbytes);
    rt_loader_release(ld);
    if (o->profile) rt_prof_begin(m);
    snrt_dev_run_step(c, m->train_step);
    snrt_dev_sync(c);
    if (o->profile) rt_prof_end();
    snrt_dev_download(c, &r->loss, m->tensors[m->loss].offset, 4);
    if (rt_ranks > 1) exchange_loss(r);
    if (r->done < slow_k) {
      struct timespec d = {slow_us / 1000000, slow_us % 1000000 * 1000};
      while (nanosleep(&d, &d) != 0 && errno == EINTR && !rt_stop_signal) {}
    }
    if (!isfinite(r->loss)) {
      if (tty) putchar('\n');
      rt_fail(SNRT_EXIT_NAN, "the loss became %s at step %lld (epoch %lld); stopping%s%s%s",
              isnan(r->loss) ? "NaN" : "Inf", (long long)pos->step + 1, (long long)pos->epoch + 1,
              o->save ? " (the last good checkpoint " : "", o->save ? o->save : "",
              o->save ? " is kept)" : "");
    }
    c->step++;
    pos->step++;
    r->done++;
    bool epoch_end = ++pos->pos == r->nb;
    if (epoch_end) {
      pos->pos = 0;
      pos->epoch++;
    }
    if (r->done == 3) r->t3 = rt_now(), rt_dist_times(&r->c3[0], &r->c3[1], &r->c3[2]);
    r->mt.train_loss = r->loss;
    double t = rt_now();
    bool last = r->done == todo;
    if (r->lead && (tty ? (t - last_draw > 0.25 || last || epoch_end || r->done % o->log_every == 0)
                        : (r->done % o->log_every == 0 || last))) {
      progress(r, todo, tty, epoch_end, t);
      last_draw = t;
    }
    /* --zero 1: every rank takes part (rank 0 gathers the shards and writes). */
    if ((r->lead || m->zero) && o->save && o->save_every && pos->step % o->save_every == 0)
      rt_checkpoint_save(c, o->save, pos);
    r->evaluated_last = false;
    if (epoch_end && r->test && rt_evaluate(c, r->test, &r->ev)) {
      if (r->lead)
        printf("%sepoch %lld: test accuracy %.4f, test loss %.4f%s\n", tty ? "\r\033[K" : "",
               (long long)pos->epoch, r->ev.accuracy, r->ev.loss, rt_lm_extra(m, r->ev.loss));
      fflush(stdout);
      r->evaluated_last = true;
    }
  }
  r->t_end = rt_now();
  if (tty && r->done && r->lead) putchar('\n');
  rt_loader_stop(ld);
  finish(r);
}
