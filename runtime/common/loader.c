/* loader.c — the loader thread: shuffled batches, one prefetched ahead.
 *
 * What it is: a thread that fills two host batch buffers in turn (double
 * buffering) while the step runs on the other. The order is a pure function
 * of (seed, epoch): a Fisher-Yates shuffle driven by splitmix64, so a resumed
 * run that starts at (epoch, pos) sees exactly the batches the uninterrupted
 * run would have seen. The last partial batch of an epoch is dropped. With
 * R ranks (--dist), batch pos of the epoch is the global batch of R x batch
 * samples at pos x R x batch of the order, and rank r reads its r-th slice of
 * it: together the ranks see what one process at batch R x batch would.
 *
 * What it is not: file parsing (data.c) or uploading (steps.c does that with
 * the device layer). */
#include "rt.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

struct rt_loader {
  const rt_data *d;
  const snrt_model *m;
  uint64_t seed;
  int batch;
  int rank, ranks;              /* data parallel: this rank reads its share */
  int64_t elems, nb;            /* values per sample; (global) batches per epoch */
  int64_t epoch, pos;           /* next batch the thread fills */
  int64_t *perm;                /* order of the epoch being filled */
  int64_t perm_epoch;
  float *x[2];
  void *y[2];
  int32_t *lab;
  bool full[2];
  int fill, take;               /* slot the thread fills next / main takes next */
  bool stop;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void shuffle(rt_loader *l, int64_t epoch) {
  int64_t n = rt_data_count(l->d);
  for (int64_t i = 0; i < n; i++) l->perm[i] = i;
  uint64_t s = l->seed * 0xD1B54A32D192ED03ull ^ (uint64_t)(epoch + 1) * 0x8CB92BA72F3D8DD7ull;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(splitmix(&s) % (uint64_t)(i + 1));
    int64_t t = l->perm[i];
    l->perm[i] = l->perm[j];
    l->perm[j] = t;
  }
  l->perm_epoch = epoch;
}

int64_t rt_label_bytes(const snrt_model *m) {
  return m->tensors[m->label].nbytes;
}

int rt_label_positions(const snrt_model *m) {
  return m->positions > 1 && m->tensors[m->label].dtype == SNRT_I32 ? m->positions : 1;
}

void rt_encode_labels(const snrt_model *m, const int32_t *labels, int n, void *y) {
  const snrt_tensor *t = &m->tensors[m->label];
  if (t->dtype == SNRT_I32) {
    /* A label tensor of fewer rows than the batch (an output whose first
     * dimension is not the batch) takes the first labels that fit. */
    int64_t cnt = (int64_t)n * rt_label_positions(m), cap = t->nbytes / 4;
    if (cnt > cap) cnt = cap;
    memcpy(y, labels, sizeof(int32_t) * (size_t)cnt);
    memset((int32_t *)y + cnt, 0, (size_t)(t->nbytes - 4 * cnt));
    return;
  }
  /* mse: class indices become one-hot targets of the logits' shape. */
  float *f = y;
  memset(f, 0, (size_t)t->nbytes);
  int64_t per = t->nbytes / 4 / m->batch;
  for (int i = 0; i < n; i++)
    if (labels[i] >= 0 && labels[i] < per) f[i * per + labels[i]] = 1.0f;
}

/* Position in the epoch's order of this rank's first sample of batch pos. */
static int64_t first(const rt_loader *l) {
  return (l->pos * l->ranks + l->rank) * l->batch;
}

static void fill_batch(rt_loader *l, int slot) {
  if (l->perm_epoch != l->epoch) shuffle(l, l->epoch);
  for (int i = 0; i < l->batch; i++) {
    int64_t idx = l->perm[first(l) + i];
    rt_data_sample(l->d, idx, l->x[slot] + (int64_t)i * l->elems,
                   l->lab + (int64_t)i * rt_label_positions(l->m));
  }
  rt_encode_labels(l->m, l->lab, l->batch, l->y[slot]);
  if (rt_data_target(l->d, 0)) {   /* float targets replace the one-hot rows */
    int64_t per = rt_label_bytes(l->m) / 4 / l->m->batch;
    for (int i = 0; i < l->batch; i++)
      memcpy((float *)l->y[slot] + i * per,
             rt_data_target(l->d, l->perm[first(l) + i]), sizeof(float) * (size_t)per);
  }
  if (++l->pos == l->nb) {
    l->pos = 0;
    l->epoch++;
  }
}

static void *loader_thread(void *arg) {
  rt_loader *l = arg;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->stop && l->full[l->fill]) pthread_cond_wait(&l->cv, &l->mu);
    if (l->stop) break;
    int slot = l->fill;
    pthread_mutex_unlock(&l->mu);
    fill_batch(l, slot);        /* the slot is ours alone while it is empty */
    pthread_mutex_lock(&l->mu);
    l->full[slot] = true;
    l->fill ^= 1;
    pthread_cond_broadcast(&l->cv);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

rt_loader *rt_loader_start(const rt_data *d, const snrt_model *m, uint64_t seed,
                           int64_t epoch, int64_t pos) {
  rt_loader *l = calloc(1, sizeof *l);
  if (!l) rt_fail(SNRT_EXIT_DEVICE, "out of memory");
  l->d = d;
  l->m = m;
  l->seed = seed;
  l->batch = m->batch;
  l->rank = rt_rank;
  l->ranks = rt_ranks;
  l->elems = m->tensors[m->input].nbytes / 4 / m->batch;
  l->nb = rt_data_count(d) / ((int64_t)m->batch * rt_ranks);
  l->epoch = epoch;
  l->pos = pos;
  l->perm_epoch = -1;
  l->perm = rt_xmalloc(sizeof(int64_t) * (size_t)(rt_data_count(d) + 1));
  l->lab = rt_xmalloc(sizeof(int32_t) * (size_t)m->batch * (size_t)rt_label_positions(m));
  for (int s = 0; s < 2; s++) {
    l->x[s] = rt_xmalloc((size_t)m->tensors[m->input].nbytes);
    l->y[s] = rt_xmalloc((size_t)rt_label_bytes(m));
  }
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  /* Signals go to the main thread, which stops between steps. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  int rc = pthread_create(&l->th, NULL, loader_thread, l);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc) rt_fail(SNRT_EXIT_DEVICE, "cannot start the loader thread");
  return l;
}

void rt_loader_next(rt_loader *l, const float **x, const void **y) {
  pthread_mutex_lock(&l->mu);
  while (!l->full[l->take]) pthread_cond_wait(&l->cv, &l->mu);
  *x = l->x[l->take];
  *y = l->y[l->take];
  pthread_mutex_unlock(&l->mu);
}

void rt_loader_release(rt_loader *l) {
  pthread_mutex_lock(&l->mu);
  l->full[l->take] = false;
  l->take ^= 1;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

void rt_loader_stop(rt_loader *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->stop = true;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  pthread_join(l->th, NULL);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  for (int s = 0; s < 2; s++) {
    free(l->x[s]);
    free(l->y[s]);
  }
  free(l->lab);
  free(l->perm);
  free(l);
}
