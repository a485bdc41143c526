/* kern.h — helpers shared by the CPU kernel files (runtime/cpu/k_*.c).
 *
 * What it is: a few inline helpers and the includes every kernel file needs.
 * What it is not: an API; nothing here is called from outside runtime/cpu.
 *
 * Determinism rule for every kernel: the same inputs and thread count give the
 * same bits. No floating-point reduction is split across threads in a way that
 * depends on scheduling: a thread owns each output element (or channel) and
 * sums in a fixed order, or partial sums are taken over a FIXED number of
 * blocks (independent of the thread count) and combined sequentially. */
#ifndef SNRT_KERN_H
#define SNRT_KERN_H

#include "snrt.h"
#include "snrt_dev.h"
#include <math.h>
#include <string.h>
#include <omp.h>

/* Below this many elements a loop is not worth waking the thread team. */
#define KERN_PAR_MIN 16384

/* ceil(a / b) for b > 0 and any sign of a. */
static inline int64_t kern_cdiv(int64_t a, int64_t b) {
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

static inline int64_t kern_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t kern_max(int64_t a, int64_t b) { return a > b ? a : b; }

/* Number of fixed blocks for order-stable parallel sums of long vectors. */
#define KERN_SUM_BLOCKS 64

/* Sum of x[0..n) in double, deterministic for any thread count: fixed blocks,
 * combined in block order. */
double kern_sum(const float *x, int64_t n);

/* Lane sums: LANES interleaved double accumulators (element j goes to lane
 * j % KERN_LANES), combined in lane order at the end. Each lane is its own
 * chain, so the compiler vectorizes the loop without reassociating anything:
 * the order of additions is fixed by n alone (deterministic), and the loop
 * is not bound by the latency of one long chain of dependent adds. */
#define KERN_LANES 8

static inline double kern_lanes_total(const double *acc) {
  double s = 0;
  for (int l = 0; l < KERN_LANES; l++) s += acc[l];
  return s;
}

/* acc[l] += x[j] for j = l mod KERN_LANES, j in [0, n). */
static inline void kern_lsum(double *restrict acc, const float *restrict x, int64_t n) {
  int64_t j = 0;
  for (; j + KERN_LANES <= n; j += KERN_LANES)
    for (int l = 0; l < KERN_LANES; l++) acc[l] += x[j + l];
  for (int l = 0; j < n; j++, l++) acc[l] += x[j];
}

/* acc[l] += (x[j] - m)^2. */
static inline void kern_lsqdev(double *restrict acc, const float *restrict x, double m, int64_t n) {
  int64_t j = 0;
  for (; j + KERN_LANES <= n; j += KERN_LANES)
    for (int l = 0; l < KERN_LANES; l++) {
      double d = x[j + l] - m;
      acc[l] += d * d;
    }
  for (int l = 0; j < n; j++, l++) {
    double d = x[j] - m;
    acc[l] += d * d;
  }
}

/* Row-major C = alpha op(A) op(B) + beta C on the OpenMP team (k_blas.c);
 * beta 0 never reads C. Every GEMM of the CPU kernels goes through it. */
void kern_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                const float *b, int ldb, float beta, float *c, int ldc);

#endif
