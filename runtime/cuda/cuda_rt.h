/* cuda_rt.h — internal to runtime/cuda: the CUDA device state behind
 * snrt_ctx.dev, the error-checking macros, and launch helpers shared by the
 * kernel files.
 *
 * What it is: the glue every .cu file of the CUDA runtime includes. What it is
 * not: an API for the emitted program (that is snrt.h) or for runtime/common
 * (that is snrt_dev.h). C++ (nvcc) only.
 *
 * Every CUDA, cuDNN and cuBLAS call goes through CUDA_CHECK / CUDNN_CHECK /
 * CUBLAS_CHECK: on failure they print the call, the library's error string and
 * file:line, and exit with SNRT_EXIT_DEVICE (4). Every kernel launch is
 * followed by SNRT_LAUNCH_CHECK(). */
#ifndef SNRT_CUDA_RT_H
#define SNRT_CUDA_RT_H

#include "snrt_dev.h"
#include "snrt_adam.h"

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cudnn.h>

/* Values that change from step to step, read by kernels from device memory
 * (never passed by value) so that a captured CUDA graph stays valid when they
 * change: the host refreshes them before each step or replay. */
#define SNRT_CU_ADAM_SLOTS 8  /* distinct Adam configurations (betas, decay) */
typedef struct snrt_cuda_vars {
  float lr;
  int64_t step;
  uint64_t seed;
  /* Adam's per-step scalars, computed on the host by snrt_adam_coefs (in
   * double, as the CPU runtime) for each configuration seen: one slot per
   * distinct (beta1, beta2, weight_decay, decoupled). */
  snrt_adam_coef adam[SNRT_CU_ADAM_SLOTS];
} snrt_cuda_vars;

/* --precision fp16: dynamic loss scaling in device memory (bf16.cu), so
 * that a captured step scales, checks and skips without the host; the host
 * reads and writes it through snrt_dev_scale_sync (checkpoints, metrics). */
typedef struct snrt_cuda_scale {
  float scale;               /* the loss gradient's multiplier */
  int overflow;              /* this step's gradients overflowed: updates skip */
  int64_t good;              /* clean steps since the scale last changed */
  int64_t skipped;           /* steps skipped so far */
  int64_t interval;          /* clean steps after which the scale doubles */
} snrt_cuda_scale;

/* One captured step function (train_step, eval_step). */
typedef struct snrt_cuda_graph {
  void (*fn)(snrt_ctx *c);
  int runs;                  /* eager runs so far (1: warmed up) */
  cudaGraphExec_t exec;      /* NULL until captured */
} snrt_cuda_graph;

typedef struct snrt_cuda {
  int device;
  cudaDeviceProp prop;
  cudaStream_t compute;      /* every kernel, cuDNN and cuBLAS call */
  cudaStream_t d2h, h2d;     /* offload and prefetch copies */
  cudaEvent_t issue_d2h, issue_h2d;  /* compute position at a copy's issue */
  cudaEvent_t join_d2h, join_h2d;    /* end-of-step joins of the copy streams */
  cudaEvent_t *events;       /* the plan's events, created on first use */
  int nevents;
  cudnnHandle_t cudnn;
  cublasHandle_t cublas;
  void *cublas_ws;           /* cuBLAS workspace (fixed, so graphs never allocate) */
  size_t cublas_ws_bytes;
  snrt_cuda_vars *dvars;     /* device copy of the per-step values */
  snrt_cuda_scale *dscale;   /* --precision fp16: the loss scaling state (NULL otherwise) */
  snrt_cuda_vars hvars;      /* what dvars holds (valid if hvars_ok) */
  bool hvars_ok;
  snrt_adam_t adam_key[SNRT_CU_ADAM_SLOTS];  /* the configuration of each Adam slot */
  int nadam;
  bool tf32;                 /* TF32 tensor cores for conv and GEMM (SNRT_TF32=0: off) */
  bool conv_find;            /* SNRT_CONV_FIND=1: cuDNN algorithms chosen by timing (conv.cu) */
  bool conv_log;             /* SNRT_CONV_LOG=1: each convolution's choice on stderr */
  bool deterministic;        /* SNRT_DETERMINISTIC=1: only deterministic cuDNN algorithms */
  int skip_wait;             /* SNRT_SKIP_WAIT=E: testing aid, see snrt_wait (-1: none) */
  long delay_us;             /* SNRT_COPY_DELAY_US=N: testing aid, see copy_after_compute */
  bool graphs;               /* SNRT_CUDA_GRAPH=0: off */
  bool capturing;            /* inside a stream capture */
  bool used_d2h, used_h2d;   /* a copy was queued on that stream this step */
  int64_t free_after_setup;  /* free device memory after the libraries' set-up (bytes) */
  bool warmup_reported;      /* the warm-up's memory growth was printed */
  snrt_cuda_graph graph[4];
  char describe[256];
} snrt_cuda;

#ifdef __cplusplus
extern "C" {
#endif
/* Prints "snrt: error: WHAT failed: MSG (FILE:LINE)" (plus a hint during graph
 * capture) and exits with SNRT_EXIT_DEVICE. */
__attribute__((noreturn)) void snrt_cu_fail(const char *what, const char *msg,
                                            const char *file, int line);
#ifdef __cplusplus
}
#endif

#define CUDA_CHECK(call)                                                        \
  do {                                                                          \
    cudaError_t e_ = (call);                                                    \
    if (e_ != cudaSuccess) snrt_cu_fail(#call, cudaGetErrorString(e_), __FILE__, __LINE__); \
  } while (0)
#define CUDNN_CHECK(call)                                                       \
  do {                                                                          \
    cudnnStatus_t s_ = (call);                                                  \
    if (s_ != CUDNN_STATUS_SUCCESS) snrt_cu_fail(#call, cudnnGetErrorString(s_), __FILE__, __LINE__); \
  } while (0)
#define CUBLAS_CHECK(call)                                                      \
  do {                                                                          \
    cublasStatus_t s_ = (call);                                                 \
    if (s_ != CUBLAS_STATUS_SUCCESS) snrt_cu_fail(#call, cublasGetStatusString(s_), __FILE__, __LINE__); \
  } while (0)
/* A launch error (bad configuration) shows at once; an execution error shows
 * at the next checked synchronizing call. */
#define SNRT_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

static inline snrt_cuda *snrt_cu(snrt_ctx *c) { return (snrt_cuda *)c->dev; }
static inline cudaStream_t snrt_cu_stream(snrt_ctx *c) { return snrt_cu(c)->compute; }

/* The device copy of lr/step/seed, refreshed from c if it changed (outside a
 * capture; snrt_dev_run_step refreshes it before a replay). */
const snrt_cuda_vars *snrt_cu_vars(snrt_ctx *c);

/* Grid size for a grid-stride loop over n items. */
#define SNRT_THREADS 256
static inline unsigned snrt_cu_blocks(int64_t n) {
  int64_t b = (n + SNRT_THREADS - 1) / SNRT_THREADS;
  if (b < 1) b = 1;
  if (b > 65536) b = 65536;
  return (unsigned)b;
}

/* Grid-stride loop over [0, n) with 64-bit indices. */
#define SNRT_FOR(i, n)                                                          \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);    \
       i += (int64_t)gridDim.x * blockDim.x)

/* --precision fp16: the overflow flag the update kernels read (NULL: none). */
static inline const int *snrt_cu_skip(snrt_ctx *c) {
  return snrt_cu(c)->dscale ? &snrt_cu(c)->dscale->overflow : NULL;
}

/* Fill n floats with v on the compute stream (poison, zeroing). */
void snrt_cu_fill(snrt_ctx *c, float *y, int64_t n, float v);
/* The device copy of a constant host array of the program (an index list, a
 * mask), made on first use (not inside a graph capture) and kept. */
const void *snrt_cu_const(snrt_ctx *c, const void *host, size_t bytes);

#ifdef __CUDACC__
/* x^e as the CPU's kern_pow: x*x for 2 (Pow and the fused chains). */
__device__ __forceinline__ float snrt_cu_pow(float x, float e) {
  if (e == 2.0f) return x * x;
  if (e == 1.0f) return x;
  if (e == 3.0f) return x * x * x;
  if (e == 0.5f) return sqrtf(x);
  return powf(x, e);
}

/* a / b and a % b for a >= 0, b > 0: 32-bit where both fit (a 64-bit
 * division is many times slower on the GPU: index arithmetic per element). */
__device__ __forceinline__ int64_t snrt_div(int64_t a, int64_t b) {
  return a < 4294967296ll && b < 4294967296ll ? (int64_t)((unsigned)a / (unsigned)b) : a / b;
}
__device__ __forceinline__ int64_t snrt_mod(int64_t a, int64_t b) {
  return a < 4294967296ll && b < 4294967296ll ? (int64_t)((unsigned)a % (unsigned)b) : a % b;
}
/* Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the result. Fixed order: deterministic. */
__device__ __forceinline__ float snrt_block_sum(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  /* part[] may still be read by a previous call */
  if (lane == 0) part[warp] = v;
  __syncthreads();
  int nw = (blockDim.x + 31) >> 5;
  v = lane < nw ? part[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float snrt_block_max(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  int nw = (blockDim.x + 31) >> 5;
  v = lane < nw ? part[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
#endif

#endif /* SNRT_CUDA_RT_H */
