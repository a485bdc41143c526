/* k_matmul.c — batched row-major matrix product over OpenBLAS:
 * Y[b] = alpha * op(A[b]) op(B[b]) + beta * Y[b].
 *
 * beta = 0 never reads Y (Y may hold garbage or NaN, e.g. in poison mode):
 * Y is zero-filled first and OpenBLAS is called with beta 0, which it treats
 * as "overwrite". A batch stride of 0 broadcasts an operand.
 * Determinism: sgemm is called from one thread; OpenBLAS splits M/N among its
 * threads, never K, so results depend only on the thread count.
 * Not here: convolution GEMMs (k_conv.c). */
#include "kern.h"

void snrt_matmul(snrt_ctx *c, const snrt_mm_t *p, const float *a, const float *b, float *y) {
  (void)c;
  const int lda = (int)(p->trans_a ? p->m : p->k);
  const int ldb = (int)(p->trans_b ? p->k : p->n);
  for (int64_t i = 0; i < p->batch; i++) {
    float *yi = y + i * p->stride_y;
    if (p->beta == 0.0f) memset(yi, 0, sizeof(float) * p->m * p->n);
    if (p->k == 0) {
      if (p->beta != 0.0f && p->beta != 1.0f)
        for (int64_t j = 0; j < p->m * p->n; j++) yi[j] *= p->beta;
      continue;
    }
    kern_sgemm(p->trans_a,
                p->trans_b, (int)p->m, (int)p->n, (int)p->k, p->alpha,
                a + i * p->stride_a, lda, b + i * p->stride_b, ldb, p->beta, yi, (int)p->n);
  }
}
