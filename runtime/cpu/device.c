/* device.c — the CPU device layer (snrt_dev.h), the context accessors of
 * snrt.h, and the copy engine that emulates a GPU's copy stream.
 *
 * What it is: the "device" arena is one malloc of exactly the planned size
 * (so a plan that is wrong by a byte shows up under AddressSanitizer); the
 * pinned host arena is another malloc. snrt_offload/snrt_prefetch queue copies
 * to a real thread, and events are real: a wait that the schedule forgot shows
 * up as a wrong result (with --poison, as NaN) or a ThreadSanitizer report.
 *
 * What it is not: the kernels (runtime/cpu/ kernel files) or the main loop
 * (runtime/common/).
 *
 * Events: small integers the model chooses. Each has a count of copies issued
 * with it and a count completed; snrt_wait(e) blocks until every copy issued
 * with e so far has completed. Copies run in issue order (one FIFO queue);
 * compute on the CPU is synchronous, so a copy issued after a kernel call
 * already sees that kernel's result. */
#include "snrt_dev.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct dev_copy {
  char *dst;
  const char *src;
  int64_t bytes;
  int event;
} dev_copy;

typedef struct dev_state {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv_work;         /* the queue got a copy, or stop */
  pthread_cond_t cv_done;         /* a copy completed */
  dev_copy *queue;                /* ring buffer */
  int qcap, qhead, qlen;
  int busy;                       /* copies taken off the queue, not yet done */
  int64_t *issued, *completed;    /* per event */
  int nevents;
  bool stop;
  long delay_us;                  /* SNRT_COPY_DELAY_US: testing aid, see copy_thread */
  char desc[96];
} dev_state;

static void dev_fail(const char *what) {
  fprintf(stderr, "train: error: %s: %s\n", what, strerror(errno));
  exit(SNRT_EXIT_DEVICE);
}

static void *copy_thread(void *arg) {
  dev_state *d = arg;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (d->qlen == 0 && !d->stop) pthread_cond_wait(&d->cv_work, &d->mu);
    if (d->qlen == 0 && d->stop) break;
    dev_copy cp = d->queue[d->qhead];
    d->qhead = (d->qhead + 1) % d->qcap;
    d->qlen--;
    d->busy++;
    pthread_mutex_unlock(&d->mu);
    /* A slow copy engine on demand (SNRT_COPY_DELAY_US): a schedule missing a
     * wait then reuses a region while its copy is still pending, which
     * --poison turns into NaN, instead of passing by luck of timing. */
    if (d->delay_us > 0) usleep((useconds_t)d->delay_us);
    memcpy(cp.dst, cp.src, (size_t)cp.bytes);
    pthread_mutex_lock(&d->mu);
    d->busy--;
    if (cp.event >= 0) d->completed[cp.event]++;
    pthread_cond_broadcast(&d->cv_done);
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

void snrt_dev_init(snrt_ctx *c) {
  const snrt_model *m = c->m;
  /* Exactly the planned size: the plan is the whole memory story. */
  c->arena = malloc(m->arena_bytes > 0 ? (size_t)m->arena_bytes : 1);
  if (!c->arena) {
    fprintf(stderr,
            "train: error: cannot allocate the device arena: %lld bytes (%.1f MiB) needed; "
            "`snc compile --budget SIZE` or `--policy recompute|offload|superneurons` "
            "plans a smaller one\n",
            (long long)m->arena_bytes, m->arena_bytes / 1048576.0);
    exit(SNRT_EXIT_DEVICE);
  }
  c->host = malloc(m->host_bytes > 0 ? (size_t)m->host_bytes : 1);
  if (!c->host) {
    fprintf(stderr, "train: error: cannot allocate the host arena: %lld bytes (%.1f MiB) needed\n",
            (long long)m->host_bytes, m->host_bytes / 1048576.0);
    exit(SNRT_EXIT_DEVICE);
  }
  /* Fresh memory is NaN in poison mode, so a read before any write shows. */
  if (c->poison) {
    snrt_dev_poison(c, 0, m->arena_bytes);
  } else {
    memset(c->arena, 0, (size_t)m->arena_bytes);
  }
  memset(c->host, 0, (size_t)(m->host_bytes > 0 ? m->host_bytes : 1));

  int threads = c->threads;
  if (threads <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    threads = n > 0 ? (int)n : 1;
    c->threads = threads;
  }
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);

  dev_state *d = calloc(1, sizeof *d);
  if (!d) dev_fail("cannot allocate the copy engine");
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->cv_work, NULL);
  pthread_cond_init(&d->cv_done, NULL);
  d->qcap = 64;
  d->queue = malloc(sizeof *d->queue * (size_t)d->qcap);
  if (!d->queue) dev_fail("cannot allocate the copy queue");
  snprintf(d->desc, sizeof d->desc, "cpu (%d thread%s, OpenBLAS)", threads, threads == 1 ? "" : "s");
  /* The copy thread must not take the user's SIGINT/SIGTERM: the main loop
   * handles them between steps. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  const char *delay = getenv("SNRT_COPY_DELAY_US");
  d->delay_us = delay ? strtol(delay, NULL, 10) : 0;
  int rc = pthread_create(&d->thread, NULL, copy_thread, d);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc) {
    errno = rc;
    dev_fail("cannot start the copy engine thread");
  }
  c->dev = d;
}

void snrt_dev_free(snrt_ctx *c) {
  dev_state *d = c->dev;
  if (d) {
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    pthread_cond_broadcast(&d->cv_work);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv_work);
    pthread_cond_destroy(&d->cv_done);
    free(d->queue);
    free(d->issued);
    free(d->completed);
    free(d);
    c->dev = NULL;
  }
  free(c->arena);
  free(c->host);
  c->arena = c->host = NULL;
}

void snrt_dev_upload(snrt_ctx *c, int64_t dev_off, const void *src, int64_t bytes) {
  memcpy(c->arena + dev_off, src, (size_t)bytes);
}

void snrt_dev_download(snrt_ctx *c, void *dst, int64_t dev_off, int64_t bytes) {
  memcpy(dst, c->arena + dev_off, (size_t)bytes);
}

void snrt_dev_sync(snrt_ctx *c) {
  dev_state *d = c->dev;
  if (!d) return;
  pthread_mutex_lock(&d->mu);
  while (d->qlen > 0 || d->busy > 0) pthread_cond_wait(&d->cv_done, &d->mu);
  pthread_mutex_unlock(&d->mu);
}

void snrt_dev_poison(snrt_ctx *c, int64_t dev_off, int64_t bytes) {
  float *p = (float *)(c->arena + dev_off);
  int64_t n = bytes / 4;
  for (int64_t i = 0; i < n; i++) p[i] = NAN;
}

const char *snrt_dev_describe(snrt_ctx *c) {
  dev_state *d = c->dev;
  return d ? d->desc : "cpu";
}

/* ---- context accessors (snrt.h) ------------------------------------------ */

char *snrt_arena(snrt_ctx *c) { return c->arena; }
float snrt_lr(snrt_ctx *c) { return c->lr; }
int64_t snrt_step(snrt_ctx *c) { return c->step; }
uint64_t snrt_seed(snrt_ctx *c) { return c->seed; }

void snrt_dead(snrt_ctx *c, int64_t off, int64_t bytes) {
  if (c->poison) snrt_dev_poison(c, off, bytes);
}

void snrt_grad_ready(snrt_ctx *c, int param, const float *g, int64_t n) {
  if (!c->dump_grads || param < 0 || param >= c->m->ntensors) return;
  if (!c->grad_copy[param]) {
    c->grad_copy[param] = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!c->grad_copy[param]) dev_fail("cannot allocate a gradient copy for --dump-grads");
  }
  memcpy(c->grad_copy[param], g, sizeof(float) * (size_t)n);
}

/* ---- copy engine ------------------------------------------------------------ */

/* Grows the per-event counters to hold `event` (under the lock). */
static void ensure_event(dev_state *d, int event) {
  if (event < d->nevents) return;
  int n = d->nevents ? d->nevents : 16;
  while (n <= event) n *= 2;
  int64_t *is = realloc(d->issued, sizeof *is * (size_t)n);
  if (!is) dev_fail("cannot grow the event table");
  d->issued = is;
  int64_t *co = realloc(d->completed, sizeof *co * (size_t)n);
  if (!co) dev_fail("cannot grow the event table");
  d->completed = co;
  for (int i = d->nevents; i < n; i++) d->issued[i] = d->completed[i] = 0;
  d->nevents = n;
}

static void enqueue(snrt_ctx *c, char *dst, const char *src, int64_t bytes, int event) {
  dev_state *d = c->dev;
  pthread_mutex_lock(&d->mu);
  if (d->qlen == d->qcap) {
    /* Grow the ring, keeping FIFO order. */
    int ncap = d->qcap * 2;
    dev_copy *q = malloc(sizeof *q * (size_t)ncap);
    if (!q) dev_fail("cannot grow the copy queue");
    for (int i = 0; i < d->qlen; i++) q[i] = d->queue[(d->qhead + i) % d->qcap];
    free(d->queue);
    d->queue = q;
    d->qcap = ncap;
    d->qhead = 0;
  }
  if (event >= 0) {
    ensure_event(d, event);
    d->issued[event]++;
  }
  d->queue[(d->qhead + d->qlen) % d->qcap] = (dev_copy){dst, src, bytes, event};
  d->qlen++;
  pthread_cond_signal(&d->cv_work);
  pthread_mutex_unlock(&d->mu);
}

void snrt_offload(snrt_ctx *c, int64_t host_off, int64_t dev_off, int64_t bytes, int event) {
  enqueue(c, c->host + host_off, c->arena + dev_off, bytes, event);
}

void snrt_prefetch(snrt_ctx *c, int64_t dev_off, int64_t host_off, int64_t bytes, int event) {
  enqueue(c, c->arena + dev_off, c->host + host_off, bytes, event);
}

void snrt_wait(snrt_ctx *c, int event) {
  dev_state *d = c->dev;
  if (event < 0) return;
  pthread_mutex_lock(&d->mu);
  if (event < d->nevents) {
    while (d->completed[event] < d->issued[event]) pthread_cond_wait(&d->cv_done, &d->mu);
  }
  pthread_mutex_unlock(&d->mu);
}
