/* k_blas.c — the one GEMM entry point of the CPU kernels: OpenBLAS sgemm,
 * run single-threaded inside OUR OpenMP team, each thread on a fixed block of
 * columns (or rows) of C.
 *
 * Why: Debian's OpenBLAS has its own pthread pool. Alternating its pool with
 * the OpenMP team (which spin-waits between parallel regions) makes the two
 * fight for the same cores: a 2-core conv step ran 6x slower than with one
 * pool. So OpenBLAS is set to 1 thread on first use and the work is split
 * here. Determinism: blocks depend only on the sizes and the thread count,
 * and K is never split, so each C element is one sgemm's dot product.
 * Not here: choosing GEMM vs direct loops (the kernel files do that). */
#include "kern.h"
#include <cblas.h>

static int blas_single;

void kern_blas_init(void) {
  if (!blas_single) {
    openblas_set_num_threads(1);
    blas_single = 1;
  }
}

/* Columns per block are a multiple of 16 (whole AVX-512 vectors of C rows). */
void kern_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                const float *b, int ldb, float beta, float *c, int ldc) {
  kern_blas_init();
  const int T = omp_in_parallel() ? 1 : omp_get_max_threads();
  const double work = (double)m * n * k;
  const CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  if (T <= 1 || work < 2e5) {
    cblas_sgemm(CblasRowMajor, TA, TB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (n >= 32 * T || n >= m) {
    /* split the columns of C (and of op(B)) */
    int bs = (n + T - 1) / T;
    bs = (bs + 15) / 16 * 16;
    int nblk = (n + bs - 1) / bs;
#pragma omp parallel for schedule(static) num_threads(T)
    for (int i = 0; i < nblk; i++) {
      int j0 = i * bs, nn = n - j0 < bs ? n - j0 : bs;
      const float *bb = tb ? b + (int64_t)j0 * ldb : b + j0;
      cblas_sgemm(CblasRowMajor, TA, TB, m, nn, k, alpha, a, lda, bb, ldb, beta, c + j0, ldc);
    }
  } else {
    /* split the rows of C (and of op(A)) */
    int bs = (m + T - 1) / T;
    bs = (bs + 7) / 8 * 8;
    int nblk = (m + bs - 1) / bs;
#pragma omp parallel for schedule(static) num_threads(T)
    for (int i = 0; i < nblk; i++) {
      int i0 = i * bs, mm = m - i0 < bs ? m - i0 : bs;
      const float *aa = ta ? a + i0 : a + (int64_t)i0 * lda;
      cblas_sgemm(CblasRowMajor, TA, TB, mm, n, k, alpha, aa, lda, b, ldb, beta,
                  c + (int64_t)i0 * ldc, ldc);
    }
  }
}
