/* nccl.cu — the gradient and parameter exchanges of a --dist mpi program on
 * the CUDA target (build/snrt_nccl.o), with NCCL.
 *
 * What it is: snrt_comm_start / _wait / _progress and snrt_rank (snrt.h) on
 * the GPU: each exchange is one NCCL group (ncclAllReduce, or under --zero 1
 * ncclReduce to each piece's owner and ncclBroadcast from it; ncclAvg does
 * the averaging) on a dedicated communication stream, which waits for the
 * compute stream at the start, and which the compute stream waits for (an
 * event per exchange) at the wait, so the exchanges overlap the backward
 * pass and are captured into the step's CUDA graph with it. NCCL is
 * bootstrapped over MPI: rank 0's ncclUniqueId is broadcast with the MPI
 * layer (runtime/dist/mpi.c, built as snrt_mpi_cuda.o without its host
 * exchanges), at the first exchange, which the warm-up step runs eagerly.
 *
 * What it is not (yet): timed. A rank that dies mid-exchange leaves the
 * others waiting inside the device synchronisation; the CPU target's
 * --comm-timeout covers only the MPI exchanges here. Compiled and linked in
 * the tests; not yet run on a GPU. */
#include "cuda/cuda_rt.h"

#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
/* From runtime/common/rt.h (C11 there; declared here for C++). */
extern int rt_rank, rt_ranks;
void rt_dist_bcast(void *buf, int64_t bytes);
}

#define NCCL_CHECK(call)                                                        \
  do {                                                                          \
    ncclResult_t r_ = (call);                                                   \
    if (r_ != ncclSuccess) snrt_cu_fail(#call, ncclGetErrorString(r_), __FILE__, __LINE__); \
  } while (0)

static ncclComm_t comm;
static cudaStream_t stream;    /* the communication stream */
static cudaEvent_t issue;      /* compute's position at an exchange's start */
static cudaEvent_t *done;      /* per exchange: complete on the communication stream */
static int ndone;

static void nccl_init(void) {
  ncclUniqueId id;
  if (rt_rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  rt_dist_bcast(&id, sizeof id);
  NCCL_CHECK(ncclCommInitRank(&comm, rt_ranks, id, rt_rank));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&issue, cudaEventDisableTiming));
}

static cudaEvent_t done_event(int id) {
  if (id >= ndone) {
    int n = id + 1;
    cudaEvent_t *ev = (cudaEvent_t *)realloc(done, sizeof *ev * (size_t)n);
    if (!ev) snrt_cu_fail("realloc", "out of host memory", __FILE__, __LINE__);
    for (int i = ndone; i < n; i++) CUDA_CHECK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
    done = ev;
    ndone = n;
  }
  return done[id];
}

extern "C" int snrt_rank(snrt_ctx *c) {
  (void)c;
  return rt_rank;
}

extern "C" void snrt_comm_start(snrt_ctx *c, int id, int kind, int n, const int64_t *pieces) {
  if (rt_ranks < 2) return;
  if (!comm) nccl_init();
  cudaStream_t compute = snrt_cu_stream(c);
  CUDA_CHECK(cudaEventRecord(issue, compute));
  CUDA_CHECK(cudaStreamWaitEvent(stream, issue, 0));
  NCCL_CHECK(ncclGroupStart());
  for (int k = 0; k < n; k++) {
    float *buf = (float *)(c->arena + pieces[3 * k]);
    size_t cnt = (size_t)pieces[3 * k + 1];
    int root = (int)pieces[3 * k + 2];
    if (kind == SNRT_COMM_ALLREDUCE)
      NCCL_CHECK(ncclAllReduce(buf, buf, cnt, ncclFloat, ncclAvg, comm, stream));
    else if (kind == SNRT_COMM_REDUCE)
      NCCL_CHECK(ncclReduce(buf, buf, cnt, ncclFloat, ncclAvg, root, comm, stream));
    else
      NCCL_CHECK(ncclBroadcast(buf, buf, cnt, ncclFloat, root, comm, stream));
  }
  NCCL_CHECK(ncclGroupEnd());
  CUDA_CHECK(cudaEventRecord(done_event(id), stream));
}

extern "C" void snrt_comm_wait(snrt_ctx *c, int id) {
  if (rt_ranks < 2) return;
  CUDA_CHECK(cudaStreamWaitEvent(snrt_cu_stream(c), done_event(id), 0));
}

extern "C" void snrt_comm_progress(snrt_ctx *c) { (void)c; }
