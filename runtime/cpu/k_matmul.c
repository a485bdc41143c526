/* k_matmul.c — batched row-major matrix product over OpenBLAS:
 * Y[b] = alpha * op(A[b]) op(B[b]) + beta * Y[b].
 *
 * beta = 0 never reads Y (Y may hold garbage or NaN, e.g. in poison mode):
 * Y is zero-filled first and OpenBLAS is called with beta 0, which it treats
 * as "overwrite". A batch stride of 0 broadcasts an operand.
 * Determinism: K is never split (k_blas.c), so each element of Y is one
 * sgemm's dot product; results depend only on the sizes and the thread count.
 * Not here: convolution GEMMs (k_conv.c). */
#include "kern.h"

static void mm_item(const snrt_mm_t *p, int64_t i, const float *a, const float *b, float *y) {
  const int lda = (int)(p->trans_a ? p->m : p->k);
  const int ldb = (int)(p->trans_b ? p->k : p->n);
  float *yi = y + i * p->stride_y;
  if (p->beta == 0.0f) memset(yi, 0, sizeof(float) * p->m * p->n);
  if (p->k == 0) {
    if (p->beta != 0.0f && p->beta != 1.0f)
      for (int64_t j = 0; j < p->m * p->n; j++) yi[j] *= p->beta;
    return;
  }
  kern_sgemm(p->trans_a, p->trans_b, (int)p->m, (int)p->n, (int)p->k, p->alpha,
             a + i * p->stride_a, lda, b + i * p->stride_b, ldb, p->beta, yi, (int)p->n);
}

/* A batch of at least one item per thread, each item its own output: one
 * whole sgemm per item on each thread (attention's per-head products, 128 x
 * 128 x 32 in the GPT example, ran at 11 GFLOP/s split across the threads
 * one item at a time). Outputs shared by the items (stride_y 0: a sum over
 * the batch) stay in order on one thread. */
void snrt_matmul(snrt_ctx *c, const snrt_mm_t *p, const float *a, const float *b, float *y) {
  (void)c;
  const int T = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (T > 1 && p->batch >= T && p->stride_y >= p->m * p->n &&
      (double)p->batch * p->m * p->n * p->k >= 2e5) {
    kern_blas_init();
#pragma omp parallel for schedule(static) num_threads(T)
    for (int64_t i = 0; i < p->batch; i++) mm_item(p, i, a, b, y);
    return;
  }
  for (int64_t i = 0; i < p->batch; i++) mm_item(p, i, a, b, y);
}
