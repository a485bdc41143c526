/* mpi.c — the data-parallel layer of a --dist mpi program (build/snrt_mpi.o).
 *
 * What it is: MPI for the pieces rt.h declares in its dist section, and the
 * exchanges that the emitted train.c calls (snrt_comm_start / _wait /
 * snrt_comm_progress). Gradients are summed in place in the arena with
 * MPI_Iallreduce (--zero 1: MPI_Ireduce of each piece to the rank owning it,
 * and the parameters' pieces sent back with MPI_Ibcast after their owner's
 * update), one request per piece, all of a bucket's started together, and
 * divided by the number of ranks at the wait. Every wait is a loop of MPI_Test with a deadline (--comm-timeout)
 * so that a rank that died or hangs ends the others with a message instead of
 * a hang. SIGINT/SIGTERM/SIGUSR1 is a graceful stop (steps.c exchanges the
 * stop flag with the loss and every rank stops after the step they agreed on); one that arrives
 * during a wait prints a line at once (when a rank dies, mpirun sends SIGTERM
 * to the others and soon SIGKILL) and gives the others SIGNAL_GRACE seconds
 * to answer.
 *
 * What it is not: the training loop (common/steps.c decides what is
 * exchanged) or a transport: MPI moves the bytes. Run as one process (no
 * mpirun) it is an MPI singleton and exchanges nothing.
 *
 * Built twice: build/snrt_mpi.o for the CPU target, and with
 * -DSNRT_DEVICE_COMM build/snrt_mpi_cuda.o for the CUDA target, where the
 * exchanges of train.c are NCCL's (nccl.cu) and this file keeps the rest.
 *
 * Threads: only the main thread calls MPI (the loader and copy-engine
 * threads never do), so MPI_THREAD_FUNNELED is enough. */
#include "common/rt.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

int rt_rank = 0, rt_ranks = 1;
double rt_comm_timeout = 300;

static bool inited;
static double t_comm, t_exposed, t_sync;   /* seconds, see rt_dist_times */

typedef struct Comm {
  MPI_Request *req;        /* one per piece */
  int n, cap, kind;        /* pieces; enum snrt_comm_kind */
  const int64_t *pieces;   /* (arena offset, floats, root) triples, from train.c */
  double t_start, t_done;  /* MPI_Wtime at the start, at completion seen */
  bool active, done;
} Comm;
static Comm *cm __attribute__((unused));   /* unused in the CUDA build */
static int ncm __attribute__((unused));

static void check(int rc, const char *what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  msg[len] = 0;
  rt_fail(SNRT_EXIT_RANKS, "%s failed: %s", what, msg);
}

void rt_dist_init(int *argc, char ***argv) {
  int provided;
  check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  inited = true;
  /* Errors come back to us (and end every rank with a message). */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rt_rank), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &rt_ranks), "MPI_Comm_size");
}

void rt_dist_finalize(void) {
  if (inited) MPI_Finalize();
  inited = false;
}

noreturn void rt_dist_abort(int code) {
  fflush(stdout);
  fflush(stderr);
  if (inited && rt_ranks > 1) MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

/* Waits for n requests: the deadline and the signal rule of the header. */
#define SIGNAL_GRACE 10.0   /* seconds the others get to answer after a signal */

static void wait_all(int n, MPI_Request *req, const char *what) {
  double t0 = MPI_Wtime(), deadline = t0 + rt_comm_timeout;
  bool noted = false;
  for (long spins = 0;; spins++) {
    int flag = 0;
    check(MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE), what);
    if (flag) return;
    double t = MPI_Wtime();
    if (rt_stop_signal && !noted) {
      /* Either every rank was asked to stop (they will answer, and all stop
       * after this step), or a rank died and mpirun is ending the job: say
       * so now, while there is time. */
      noted = true;
      const char *sig = rt_stop_name();
      fflush(stdout);
      fprintf(stderr, "%s: rank %d of %d: %s while waiting for the other ranks (%s); if they do "
              "not answer within %g s (a rank died: mpirun's message names it), every rank "
              "stops without saving and the last checkpoint saved is kept\n", rt_prog, rt_rank,
              rt_ranks, sig, what, SIGNAL_GRACE);
      if (t + SIGNAL_GRACE < deadline) deadline = t + SIGNAL_GRACE;
    }
    if (t > deadline) {
      if (noted)
        rt_fail(SNRT_EXIT_RANKS, "stopped by %s: the other ranks did not answer (%s) within %g s "
                "of it; the last checkpoint saved is kept", rt_stop_name(), what, SIGNAL_GRACE);
      rt_fail(SNRT_EXIT_RANKS, "%s did not complete within %g s: another rank died, hangs, or "
              "runs another program or data; stopping every rank (the last checkpoint saved is "
              "kept; --comm-timeout S waits longer)", what, rt_comm_timeout);
    }
    /* Spin, yielding the core after a while: ranks may share cores with compute
     * (MPI moves a nonblocking all-reduce along only inside MPI calls, so a
     * sleep here would delay it). */
    if (spins > 2000) sched_yield();
  }
}

void rt_dist_agree(const char *const *names, const uint64_t *v, int n) {
  if (rt_ranks < 2) return;
  uint64_t *all = rt_xmalloc(sizeof(uint64_t) * (size_t)n * (size_t)rt_ranks);
  MPI_Request r;
  check(MPI_Iallgather(v, n, MPI_UINT64_T, all, n, MPI_UINT64_T, MPI_COMM_WORLD, &r),
        "MPI_Iallgather");
  wait_all(1, &r, "the start-up check that every rank runs the same program");
  int bad_rank = -1, bad = -1;
  for (int q = 1; q < rt_ranks && bad < 0; q++)
    for (int k = 0; k < n && bad < 0; k++)
      if (all[(size_t)q * n + k] != all[k]) bad_rank = q, bad = k;
  if (bad >= 0) {
    if (rt_rank == 0) {
      fflush(stdout);
      fprintf(stderr, "%s: error: rank %d of %d differs from rank 0 in %s (%llu, rank 0: %llu): "
              "every rank must run the same compiled program (model, plan, per-rank batch) with "
              "the same flags and data\n", rt_prog, bad_rank, rt_ranks, names[bad],
              (unsigned long long)all[(size_t)bad_rank * n + bad], (unsigned long long)all[bad]);
    }
    free(all);
    rt_dist_finalize();
    exit(SNRT_EXIT_DATA);
  }
  free(all);
}

void rt_dist_bcast(void *buf, int64_t bytes) {
  if (rt_ranks < 2) return;
  for (int64_t at = 0; at < bytes; at += 1 << 30) {
    int cnt = (int)(bytes - at < (1 << 30) ? bytes - at : 1 << 30);
    MPI_Request r;
    check(MPI_Ibcast((char *)buf + at, cnt, MPI_BYTE, 0, MPI_COMM_WORLD, &r), "MPI_Ibcast");
    wait_all(1, &r, "the broadcast of rank 0's parameters and position");
  }
}

void rt_dist_sum(double *v, int n, const char *what) {
  if (rt_ranks < 2) return;
  double t0 = MPI_Wtime();
  MPI_Request r;
  check(MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r), "MPI_Iallreduce");
  wait_all(1, &r, what);
  t_sync += MPI_Wtime() - t0;
}

void rt_dist_times(double *comm, double *exposed, double *sync) {
  *comm = t_comm;
  *exposed = t_exposed;
  *sync = t_sync;
}

void rt_dist_gather(const void *send, void *recv, int64_t bytes) {
  if (rt_ranks < 2) {
    memcpy(recv, send, (size_t)bytes);
    return;
  }
  if (bytes > INT_MAX) rt_fail(SNRT_EXIT_DEVICE, "an optimizer-state shard of %lld bytes is more than one MPI call takes", (long long)bytes);
  MPI_Request r;
  check(MPI_Igather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &r), "MPI_Igather");
  wait_all(1, &r, "the gathering of the optimizer-state shards for the checkpoint");
}

void rt_dist_scatter(const void *send, void *recv, int64_t bytes) {
  if (rt_ranks < 2) {
    memcpy(recv, send, (size_t)bytes);
    return;
  }
  if (bytes > INT_MAX) rt_fail(SNRT_EXIT_DEVICE, "an optimizer-state shard of %lld bytes is more than one MPI call takes", (long long)bytes);
  MPI_Request r;
  check(MPI_Iscatter(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &r), "MPI_Iscatter");
  wait_all(1, &r, "the scattering of the checkpoint's optimizer state to the ranks");
}

/* ---- the steps train.c calls ---------------------------------------------- */

#ifndef SNRT_DEVICE_COMM   /* the CUDA target's exchanges are NCCL's (nccl.cu) */
int snrt_rank(snrt_ctx *c) {
  (void)c;
  return rt_rank;
}

void snrt_comm_start(snrt_ctx *c, int id, int kind, int n, const int64_t *pieces) {
  if (rt_ranks < 2) return;
  if (id >= ncm) {
    int grow = id + 1;
    cm = realloc(cm, sizeof *cm * (size_t)grow);
    if (!cm) rt_fail(SNRT_EXIT_DEVICE, "out of host memory");
    memset(cm + ncm, 0, sizeof *cm * (size_t)(grow - ncm));
    ncm = grow;
  }
  Comm *b = &cm[id];
  if (b->active) rt_fail(SNRT_EXIT_DEVICE, "exchange %d started twice without a wait (train.c is inconsistent)", id);
  if (n > b->cap) {
    free(b->req);
    b->req = rt_xmalloc(sizeof(MPI_Request) * (size_t)n);
    b->cap = n;
  }
  b->n = n;
  b->kind = kind;
  b->pieces = pieces;
  b->active = true;
  b->done = false;
  b->t_start = MPI_Wtime();
  char *A = snrt_arena(c);
  for (int k = 0; k < n; k++) {
    int64_t cnt = pieces[3 * k + 1];
    int root = (int)pieces[3 * k + 2];
    char *buf = A + pieces[3 * k];
    if (cnt > INT_MAX)
      rt_fail(SNRT_EXIT_DEVICE, "a piece of exchange %d has %lld floats, more than one MPI call "
              "takes", id, (long long)cnt);
    if (kind == SNRT_COMM_ALLREDUCE)
      check(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                           &b->req[k]), "MPI_Iallreduce of a gradient");
    else if (kind == SNRT_COMM_REDUCE)
      check(MPI_Ireduce(root == rt_rank ? MPI_IN_PLACE : buf, buf, (int)cnt, MPI_FLOAT, MPI_SUM,
                        root, MPI_COMM_WORLD, &b->req[k]), "MPI_Ireduce of a gradient");
    else
      check(MPI_Ibcast(buf, (int)cnt, MPI_FLOAT, root, MPI_COMM_WORLD, &b->req[k]),
            "MPI_Ibcast of a parameter");
  }
}

void snrt_comm_progress(snrt_ctx *c) {
  (void)c;
  for (int i = 0; i < ncm; i++) {
    Comm *b = &cm[i];
    if (!b->active || b->done) continue;
    int flag = 0;
    check(MPI_Testall(b->n, b->req, &flag, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (flag) b->done = true, b->t_done = MPI_Wtime();
  }
}

void snrt_comm_wait(snrt_ctx *c, int id) {
  if (rt_ranks < 2) return;
  if (id >= ncm || !cm[id].active)
    rt_fail(SNRT_EXIT_DEVICE, "exchange %d waited for but never started (train.c is inconsistent)", id);
  Comm *b = &cm[id];
  double t0 = MPI_Wtime();
  if (!b->done) {
    char what[128];
    snprintf(what, sizeof what, "the %s of bucket %d at step %lld",
             b->kind == SNRT_COMM_ALLREDUCE ? "gradient all-reduce" : b->kind == SNRT_COMM_REDUCE
             ? "gradient reduce-scatter" : "parameter all-gather",
             b->kind == SNRT_COMM_BCAST ? id - c->m->buckets : id, (long long)snrt_step(c) + 1);
    wait_all(b->n, b->req, what);
    b->t_done = MPI_Wtime();
  }
  t_exposed += MPI_Wtime() - t0;
  t_comm += b->t_done - b->t_start;
  b->active = false;
  if (b->kind == SNRT_COMM_BCAST) return;
  /* The sum becomes the average: the gradient of the mean loss over the
   * global batch (every rank's loss averages over its own share). */
  char *A = snrt_arena(c);
  float inv = 1.0f / (float)rt_ranks;
  for (int k = 0; k < b->n; k++) {
    if (b->kind == SNRT_COMM_REDUCE && b->pieces[3 * k + 2] != rt_rank) continue;
    float *g = (float *)(A + b->pieces[3 * k]);
    for (int64_t i = 0; i < b->pieces[3 * k + 1]; i++) g[i] *= inv;
  }
}
#endif
