/* poison.cu — the read check of poison mode (snrt_reads, snrt.h) on CUDA.
 *
 * What it is: one grid-stride kernel per checked region, queued on the
 * compute stream before the step that reads it, so it sees exactly what that
 * step will read. A region holding SNRT_POISON_BITS prints which plan step,
 * input and offset, then traps; the next checked CUDA call then fails with
 * its file:line (exit 4). Kernels only, so it is capturable into a CUDA graph.
 * What it is not: free. It reads every input once more; --poison is a test
 * mode. */
#include "cuda_rt.h"

#include <cstdio>

__global__ void k_check_poison(const unsigned *p, int64_t n, int step, int input,
                               unsigned long long off) {
  SNRT_FOR(i, n) {
    if (p[i] == SNRT_POISON_BITS) {
      printf("train: error: --poison: plan step %d reads a dead region: its input %d at arena "
             "offset 0x%llx holds poison at byte %lld; the plan reused or freed that region "
             "too early, or a copy was not waited for\n",
             step, input, off, (long long)(i * 4));
      __trap();
    }
  }
}

/* --profile: kernels are queued, not finished, when the next step starts,
 * so each plan step records an event on the compute stream as it starts,
 * and snrt_dev_prof_collect (the end of a profiled training step) reads the
 * times between them (snrt_dev.h). */
const int snrt_dev_step_timing = 1;

static struct {
  snrt_ctx *c;
  cudaEvent_t *ev;
  int *step;
  int n, cap;
} prof;

static void prof_mark(snrt_ctx *c, int step) {
  if (prof.n == prof.cap) {
    int cap = prof.cap ? 2 * prof.cap : 256;
    cudaEvent_t *ev = (cudaEvent_t *)realloc(prof.ev, cap * sizeof *ev);
    int *st = (int *)realloc(prof.step, cap * sizeof *st);
    if (!ev || !st) snrt_cu_fail("realloc", "out of host memory", __FILE__, __LINE__);
    for (int i = prof.cap; i < cap; i++) CUDA_CHECK(cudaEventCreate(&ev[i]));
    prof.ev = ev, prof.step = st, prof.cap = cap;
  }
  prof.c = c;
  CUDA_CHECK(cudaEventRecord(prof.ev[prof.n], snrt_cu_stream(c)));
  prof.step[prof.n++] = step;
}

void snrt_dev_prof_collect(void) {
  if (!prof.n) return;
  prof_mark(prof.c, -1);  /* the end of the last plan step */
  CUDA_CHECK(cudaEventSynchronize(prof.ev[prof.n - 1]));
  for (int i = 0; i + 1 < prof.n; i++) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, prof.ev[i], prof.ev[i + 1]));
    snrt_prof_add(prof.step[i], ms * 1e-3);
  }
  prof.n = 0;
}

void snrt_reads(snrt_ctx *c, int step, int n, const int64_t *regions) {
  if (snrt_prof_on) prof_mark(c, step);
  if (!c->poison) return;
  for (int k = 0; k < n; k++) {
    int64_t off = regions[2 * k], words = regions[2 * k + 1] / 4;
    if (words <= 0) continue;
    k_check_poison<<<snrt_cu_blocks(words), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(
        (const unsigned *)(c->arena + off), words, step, k, (unsigned long long)off);
    SNRT_LAUNCH_CHECK();
  }
}
