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

/* Kernels are queued, not finished, when the next step starts: --profile
 * times whole steps here (snrt_dev.h). */
const int snrt_dev_step_timing = 0;

void snrt_reads(snrt_ctx *c, int step, int n, const int64_t *regions) {
  if (!c->poison) return;
  for (int k = 0; k < n; k++) {
    int64_t off = regions[2 * k], words = regions[2 * k + 1] / 4;
    if (words <= 0) continue;
    k_check_poison<<<snrt_cu_blocks(words), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(
        (const unsigned *)(c->arena + off), words, step, k, (unsigned long long)off);
    SNRT_LAUNCH_CHECK();
  }
}
