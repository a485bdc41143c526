/* matmul.cu — snrt_matmul on cuBLAS (row-major through swapped operands).
 *
 * What it is: one cublasSgemm / cublasSgemmStridedBatched call per matmul on
 * the compute stream (snrt_matmul16: cublasGemmEx / cublasGemmStridedBatchedEx
 * on 16-bit operands, float32 compute). cuBLAS is column-major; a row-major (r, c) matrix is the
 * column-major (c, r) matrix of its transpose, so Y = op(A) op(B) is computed
 * as Y^T = op(B)^T op(A)^T with the operands swapped and the same op flags.
 * TF32 is set on the handle (device.cu: CUBLAS_TF32_TENSOR_OP_MATH unless
 * SNRT_TF32=0). Batch stride 0 broadcasts an operand, as snrt.h says.
 *
 * What it is not: a home for 64-bit sizes: a dimension past INT_MAX stops
 * with a clear error. */
#include "cuda_rt.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

static int fit_int(const snrt_mm_t *p, int64_t v, const char *what) {
  if (v < 0 || v > INT_MAX) {
    fprintf(stderr, "snrt: error: matmul (batch %lld, m %lld, n %lld, k %lld): %s = %lld "
                    "exceeds cuBLAS's 32-bit sizes\n", (long long)p->batch, (long long)p->m,
            (long long)p->n, (long long)p->k, what, (long long)v);
    exit(SNRT_EXIT_DEVICE);
  }
  return (int)v;
}

void snrt_matmul(snrt_ctx *c, const snrt_mm_t *p, const float *a, const float *b, float *y) {
  if (p->batch <= 0 || p->m <= 0 || p->n <= 0) return;
  cublasHandle_t h = snrt_cu(c)->cublas;
  if (p->k <= 0) {  /* an empty product: Y = beta * Y */
    if (p->beta == 0.0f)
      snrt_cu_fill(c, y, p->batch * p->m * p->n, 0.0f);
    else if (p->beta != 1.0f)
      snrt_cu_fail("snrt_matmul", "k = 0 with beta other than 0 or 1", __FILE__, __LINE__);
    return;
  }
  int m = fit_int(p, p->m, "m"), n = fit_int(p, p->n, "n"), k = fit_int(p, p->k, "k");
  int batch = fit_int(p, p->batch, "batch");
  cublasOperation_t opa = p->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opb = p->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  /* Leading dimensions of the stored row-major matrices: A is (m, k) or, when
   * transposed, (k, m); B is (k, n) or (n, k); Y is (m, n). */
  int lda = p->trans_a ? m : k;
  int ldb = p->trans_b ? k : n;
  int ldy = n;
  if (batch == 1) {
    CUBLAS_CHECK(cublasSgemm(h, opb, opa, n, m, k, &p->alpha, b, ldb, a, lda, &p->beta, y, ldy));
  } else {
    CUBLAS_CHECK(cublasSgemmStridedBatched(h, opb, opa, n, m, k, &p->alpha, b, ldb,
                                           (long long)p->stride_b, a, lda,
                                           (long long)p->stride_a, &p->beta, y, ldy,
                                           (long long)p->stride_y, batch));
  }
}

/* Tensor cores: the same product on 16-bit A and B (cublasGemmEx with
 * CUDA_R_16BF or CUDA_R_16F operands, CUBLAS_COMPUTE_32F: products and sums
 * in float32), y float32 (y_fmt 0) or 16-bit. */
void snrt_matmul16(snrt_ctx *c, const snrt_mm_t *p, int fmt, const uint16_t *a, const uint16_t *b,
                   void *y, int y_fmt) {
  if (p->batch <= 0 || p->m <= 0 || p->n <= 0) return;
  cublasHandle_t h = snrt_cu(c)->cublas;
  size_t ysize = y_fmt ? 2 : 4;
  if (p->k <= 0) {
    if (p->beta == 0.0f)
      CUDA_CHECK(cudaMemsetAsync(y, 0, (size_t)(p->batch * p->m * p->n) * ysize, snrt_cu_stream(c)));
    else if (p->beta != 1.0f)
      snrt_cu_fail("snrt_matmul16", "k = 0 with beta other than 0 or 1", __FILE__, __LINE__);
    return;
  }
  int m = fit_int(p, p->m, "m"), n = fit_int(p, p->n, "n"), k = fit_int(p, p->k, "k");
  int batch = fit_int(p, p->batch, "batch");
  cublasOperation_t opa = p->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opb = p->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  int lda = p->trans_a ? m : k, ldb = p->trans_b ? k : n, ldy = n;
  cudaDataType_t t16 = fmt == SNRT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  cudaDataType_t ty = y_fmt == SNRT_BF16 ? CUDA_R_16BF : y_fmt == SNRT_F16 ? CUDA_R_16F : CUDA_R_32F;
  if (batch == 1) {
    CUBLAS_CHECK(cublasGemmEx(h, opb, opa, n, m, k, &p->alpha, b, t16, ldb, a, t16, lda, &p->beta,
                              y, ty, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, opb, opa, n, m, k, &p->alpha, b, t16, ldb,
                                            (long long)p->stride_b, a, t16, lda,
                                            (long long)p->stride_a, &p->beta, y, ty, ldy,
                                            (long long)p->stride_y, batch, CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
  }
}
