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
 * Queues: one per direction, each with its own thread, as a GPU's two copy
 * streams: offloads (device to host) run in issue order on one, prefetches
 * (host to device) in issue order on the other, and the two run
 * independently of each other. A schedule that orders a prefetch after an
 * offload only by luck of one shared FIFO queue therefore races here as it
 * would on CUDA.
 *
 * Events: small integers the model chooses. Each has a count of copies issued
 * with it and a count completed; snrt_wait(e) blocks until every copy issued
 * with e so far has completed. Compute on the CPU is synchronous, so a copy
 * issued after a kernel call already sees that kernel's result.
 *
 * Poison (--poison): dead regions are filled with SNRT_POISON_BITS, a NaN
 * with a payload that arithmetic does not produce, and snrt_reads checks a
 * step's inputs for it before the step runs (see snrt.h). */
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

/* k_conv_dnnl.c, referenced weakly: a program without convolutions (or a
 * test's runtime built without the kernels) links without it, and its
 * banner names no convolution kernels. */
__attribute__((weak)) const char *snrt_conv_backend(void);
__attribute__((weak)) int64_t snrt_conv_dnnl_bytes(void);

typedef struct dev_copy {
  char *dst;
  const char *src;
  int64_t bytes;
  int event;
  int64_t seq;                    /* its issue position on its queue */
} dev_copy;

typedef struct dev_state dev_state;

/* One direction's copy queue and the thread that drains it. */
typedef struct dev_queue {
  dev_state *d;
  pthread_t thread;
  pthread_cond_t cv_work;         /* the queue got a copy, or stop */
  dev_copy *ring;
  int cap, head, len;
  int busy;                       /* copies taken off the queue, not yet done */
  int64_t issued;                 /* copies issued to it so far */
  int64_t release;                /* SNRT_COPY_LAZY: copies before this position may run */
} dev_queue;

enum { Q_D2H, Q_H2D, NQUEUES };

struct dev_state {
  pthread_mutex_t mu;             /* guards both queues and the event counters */
  pthread_cond_t cv_done;         /* a copy completed */
  dev_queue q[NQUEUES];
  int64_t *issued, *completed;    /* per event */
  signed char *queue_of;          /* per event: the queue of its last copy */
  int64_t *seq_of;                /* per event: that copy's issue position */
  int nevents;
  bool stop;
  long delay_us;                  /* SNRT_COPY_DELAY_US: testing aid, see copy_thread */
  long skip_wait;                 /* SNRT_SKIP_WAIT: testing aid, see snrt_wait */
  bool lazy;                      /* SNRT_COPY_LAZY: testing aid, see copy_thread */
  char desc[96];
};

static void dev_fail(const char *what) {
  fprintf(stderr, "train: error: %s: %s\n", what, strerror(errno));
  exit(SNRT_EXIT_DEVICE);
}

static void *copy_thread(void *arg) {
  dev_queue *q = arg;
  dev_state *d = q->d;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    /* SNRT_COPY_LAZY=1 (testing aid): a copy runs only once compute waits
     * for it (or for a later copy on its queue, or for the end of the step:
     * q->release, the position up to which copies were asked for),
     * the latest moment a correct schedule allows. A schedule missing a wait
     * then reads a region before its copy lands, or lets a region die (and
     * be poisoned) while a copy still has to read it, every time, whatever
     * the timing. */
    while (!d->stop && (q->len == 0 || (d->lazy && q->ring[q->head].seq >= q->release)))
      pthread_cond_wait(&q->cv_work, &d->mu);
    if (q->len == 0) break;   /* stopping, and nothing left */
    dev_copy cp = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    q->busy++;
    pthread_mutex_unlock(&d->mu);
    /* A slow copy engine on demand (SNRT_COPY_DELAY_US): a schedule missing a
     * wait then reuses a region while its copy is still pending, which
     * --poison turns into NaN, instead of passing by luck of timing. */
    if (d->delay_us > 0) usleep((useconds_t)d->delay_us);
    memcpy(cp.dst, cp.src, (size_t)cp.bytes);
    pthread_mutex_lock(&d->mu);
    q->busy--;
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
  pthread_cond_init(&d->cv_done, NULL);
  for (int k = 0; k < NQUEUES; k++) {
    dev_queue *q = &d->q[k];
    q->d = d;
    pthread_cond_init(&q->cv_work, NULL);
    q->cap = 64;
    q->ring = malloc(sizeof *q->ring * (size_t)q->cap);
    if (!q->ring) dev_fail("cannot allocate the copy queue");
  }
  snprintf(d->desc, sizeof d->desc, "cpu (%d thread%s, OpenBLAS%s%s)", threads,
           threads == 1 ? "" : "s", snrt_conv_backend ? ", " : "",
           snrt_conv_backend ? snrt_conv_backend() : "");
  /* The copy thread must not take the user's SIGINT/SIGTERM/SIGUSR1: the main loop
   * handles them between steps. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  const char *delay = getenv("SNRT_COPY_DELAY_US");
  d->delay_us = delay ? strtol(delay, NULL, 10) : 0;
  const char *lazy = getenv("SNRT_COPY_LAZY");
  d->lazy = lazy && *lazy && strcmp(lazy, "0") != 0;
  const char *skip = getenv("SNRT_SKIP_WAIT");
  d->skip_wait = skip && *skip ? strtol(skip, NULL, 10) : -1;
  for (int k = 0; k < NQUEUES; k++) {
    int rc = pthread_create(&d->q[k].thread, NULL, copy_thread, &d->q[k]);
    if (rc) {
      pthread_sigmask(SIG_SETMASK, &old, NULL);
      errno = rc;
      dev_fail("cannot start a copy engine thread");
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  c->dev = d;
}

/* --precision fp16: the CPU keeps the loss-scaling state in the context
 * itself (runtime/cpu/k_half.c reads and writes it there). */
void snrt_dev_scale_sync(snrt_ctx *c, bool to_host) {
  (void)c;
  (void)to_host;
}

void snrt_dev_free(snrt_ctx *c) {
  dev_state *d = c->dev;
  if (d) {
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    for (int k = 0; k < NQUEUES; k++) pthread_cond_broadcast(&d->q[k].cv_work);
    pthread_mutex_unlock(&d->mu);
    for (int k = 0; k < NQUEUES; k++) {
      pthread_join(d->q[k].thread, NULL);
      pthread_cond_destroy(&d->q[k].cv_work);
      free(d->q[k].ring);
    }
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv_done);
    free(d->issued);
    free(d->completed);
    free(d->queue_of);
    free(d->seq_of);
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
  for (int k = 0; k < NQUEUES; k++) {
    d->q[k].release = d->q[k].issued;
    pthread_cond_signal(&d->q[k].cv_work);
    while (d->q[k].len > 0 || d->q[k].busy > 0) pthread_cond_wait(&d->cv_done, &d->mu);
  }
  pthread_mutex_unlock(&d->mu);
}

void snrt_dev_poison(snrt_ctx *c, int64_t dev_off, int64_t bytes) {
  uint32_t *p = (uint32_t *)(c->arena + dev_off);
  int64_t n = bytes / 4;
  for (int64_t i = 0; i < n; i++) p[i] = SNRT_POISON_BITS;
}

const char *snrt_dev_describe(snrt_ctx *c) {
  dev_state *d = c->dev;
  return d ? d->desc : "cpu";
}

int64_t snrt_dev_outside_bytes(snrt_ctx *c) {
  (void)c;
  return snrt_conv_dnnl_bytes ? snrt_conv_dnnl_bytes() : 0;
}

/* ---- context accessors (snrt.h) ------------------------------------------ */

char *snrt_arena(snrt_ctx *c) { return c->arena; }
float snrt_lr(snrt_ctx *c) { return c->lr; }
int64_t snrt_step(snrt_ctx *c) { return c->step; }
uint64_t snrt_seed(snrt_ctx *c) { return c->seed; }

void snrt_dead(snrt_ctx *c, int64_t off, int64_t bytes) {
  if (c->poison) snrt_dev_poison(c, off, bytes);
}

const int snrt_dev_step_timing = 1;
void snrt_dev_prof_collect(void) {}  /* snrt_prof_mark timed each step already */

void snrt_reads(snrt_ctx *c, int step, int n, const int64_t *regions) {
  if (snrt_prof_on) snrt_prof_mark(step);
  if (!c->poison) return;
  for (int k = 0; k < n; k++) {
    int64_t off = regions[2 * k], bytes = regions[2 * k + 1];
    const uint32_t *p = (const uint32_t *)(c->arena + off);
    for (int64_t i = 0; i < bytes / 4; i++)
      if (p[i] == SNRT_POISON_BITS) {
        fprintf(stderr,
                "train: error: --poison: plan step %d (training step %lld) reads a dead region: "
                "its input %d at arena offset 0x%llx (%lld bytes) holds poison at byte %lld; "
                "the plan reused or freed that region too early, or a copy was not waited for\n",
                step, (long long)c->step, k, (unsigned long long)off, (long long)bytes,
                (long long)(i * 4));
        exit(SNRT_EXIT_DEVICE);
      }
  }
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
  signed char *qo = realloc(d->queue_of, (size_t)n);
  if (!qo) dev_fail("cannot grow the event table");
  d->queue_of = qo;
  int64_t *so = realloc(d->seq_of, sizeof *so * (size_t)n);
  if (!so) dev_fail("cannot grow the event table");
  d->seq_of = so;
  for (int i = d->nevents; i < n; i++)
    d->issued[i] = d->completed[i] = 0, d->queue_of[i] = 0, d->seq_of[i] = 0;
  d->nevents = n;
}

static void enqueue(snrt_ctx *c, int which, char *dst, const char *src, int64_t bytes, int event) {
  dev_state *d = c->dev;
  dev_queue *q = &d->q[which];
  pthread_mutex_lock(&d->mu);
  if (q->len == q->cap) {
    /* Grow the ring, keeping FIFO order. */
    int ncap = q->cap * 2;
    dev_copy *r = malloc(sizeof *r * (size_t)ncap);
    if (!r) dev_fail("cannot grow the copy queue");
    for (int i = 0; i < q->len; i++) r[i] = q->ring[(q->head + i) % q->cap];
    free(q->ring);
    q->ring = r;
    q->cap = ncap;
    q->head = 0;
  }
  if (event >= 0) {
    ensure_event(d, event);
    d->issued[event]++;
    d->queue_of[event] = (signed char)which;
    d->seq_of[event] = q->issued;
  }
  q->ring[(q->head + q->len) % q->cap] = (dev_copy){dst, src, bytes, event, q->issued++};
  q->len++;
  pthread_cond_signal(&q->cv_work);
  pthread_mutex_unlock(&d->mu);
}

void snrt_offload(snrt_ctx *c, int64_t host_off, int64_t dev_off, int64_t bytes, int event) {
  enqueue(c, Q_D2H, c->host + host_off, c->arena + dev_off, bytes, event);
}

void snrt_prefetch(snrt_ctx *c, int64_t dev_off, int64_t host_off, int64_t bytes, int event) {
  enqueue(c, Q_H2D, c->arena + dev_off, c->host + host_off, bytes, event);
}

void snrt_wait(snrt_ctx *c, int event) {
  dev_state *d = c->dev;
  if (event < 0) return;
  /* SNRT_SKIP_WAIT=E (testing aid): every wait for event E is skipped, as if
   * its line were deleted from train.c; tests/test_waits.py uses it to show
   * that each wait of a schedule is needed and that its loss is caught. */
  if (event == d->skip_wait) return;
  pthread_mutex_lock(&d->mu);
  if (event < d->nevents && d->completed[event] < d->issued[event]) {
    dev_queue *q = &d->q[d->queue_of[event]];
    if (q->release <= d->seq_of[event]) q->release = d->seq_of[event] + 1;
    pthread_cond_signal(&q->cv_work);
    while (d->completed[event] < d->issued[event]) pthread_cond_wait(&d->cv_done, &d->mu);
  }
  pthread_mutex_unlock(&d->mu);
}
