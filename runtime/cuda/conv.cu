/* conv.cu — convolution on the GPU with cuDNN's (v9, legacy) convolution API:
 * forward, backward-data, backward-filter; bias forward with cudnnAddTensor and
 * bias backward with our own deterministic channel sum.
 *
 * What it is: descriptor and algorithm caching around cuDNN. The parameter
 * structs are `static const` in the emitted program, so their address is a
 * stable key: descriptors are built once per struct, and each direction's
 * algorithm is chosen once, at its first call (the warm-up step, never inside
 * a CUDA graph capture: a choice still missing during a capture is an error),
 * among those whose workspace fits what the plan gave that step (p->ws_bytes
 * at `ws`: on the cuda target, snc gives each conv step its own struct and the
 * free hole of the arena at that step, compiler/plan/workspace.c).
 *
 * How: by default the first in the order of cuDNN's heuristics
 * (cudnnGet*Algorithm_v7, no timing; PyTorch's default, cudnn.benchmark off)
 * whose workspace fits. SNRT_CONV_FIND=1: the fastest one
 * cudnnFind*AlgorithmEx measures instead (timing: two processes may choose
 * differently). The second H200 run showed why that is not the default:
 * densenet121 64 px b4 (TF32 off), whose 3x3 128->32 convolutions at 4x4
 * and 2x2 each run their own Find, was 0.03-0.27 from float64 on the
 * parameters upstream of one such layer's backward-data (a different layer
 * per run), where PyTorch's float32 step is 9e-5; with the heuristics'
 * choice, or with Find under CUDA_LAUNCH_BLOCKING=1 (other timings, other
 * choices), 1e-4 (bench/gpu.md). SNRT_CONV_LOG=1 prints every choice.
 * With SNRT_DETERMINISTIC=1 by a fixed
 * rule: the first deterministic algorithm, in the order of cuDNN's
 * heuristics (cudnnGet*Algorithm_v7, no timing), whose workspace is at most
 * DET_WS_CAP, whatever the plan gave: so the same program on the same GPU and
 * cuDNN version picks the same algorithms under every policy and budget
 * (--resume is bit-exact, and the policies' parameters are bit-identical to
 * policy none's; README "Reproducibility"). Where that algorithm needs more
 * than the plan's workspace, it runs in a private one outside the arena
 * (printed on stderr). The first H200 run showed why the plan's workspace
 * cannot decide: fashion_cnn's first convolution (one input channel) had no
 * deterministic backward-filter algorithm within the 2.2 MiB its plan gave,
 * and liveness/offload/recompute picked other algorithms than policy none.
 *
 * SNRT_CONV_WS_MIB=N (default 0) lets the timed choice use up to N MiB of
 * that private workspace too: an experiment (is the plan's workspace what
 * makes a convolution slow?), the memory it takes printed beside the arena.
 *
 * What it is not: a fallback for convolutions cuDNN cannot express. cuDNN
 * pads symmetrically; where the ONNX pads are asymmetric in a way that
 * changes the output size (e.g. SAME_UPPER with an even kernel), the first
 * call stops with a clear error naming the shape.
 *
 * Math: TF32 tensor cores are allowed (CUDNN_DEFAULT_MATH, which permits TF32
 * on Ampere and later) unless SNRT_TF32=0 (CUDNN_FMA_MATH: plain FP32).
 * SNRT_DETERMINISTIC=1 keeps only algorithms cuDNN reports deterministic. */
#include "cuda_rt.h"

#include <stdio.h>
#include <stdlib.h>

enum { DIR_FWD, DIR_BWD_DATA, DIR_BWD_FILTER, DIR_COUNT };

typedef struct conv_entry {
  const snrt_conv_t *p;      /* key */
  int fmt;                   /* 0: float32 operands; SNRT_BF16 / SNRT_F16: 16-bit (tensor cores) */
  cudnnTensorDescriptor_t x, y, b;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  bool chosen[DIR_COUNT];
  int algo[DIR_COUNT];       /* cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
  size_t ws[DIR_COUNT];      /* workspace the algorithm needs */
  cudnnMathType_t math[DIR_COUNT];
} conv_entry;

/* Open addressing on the struct's address; grows at half full. One table per
 * process (one device). Slow algorithms are fine: a model has < 1000 convs. */
static conv_entry **tab;
static size_t tab_cap, tab_len;

static size_t hash_ptr(const void *p, size_t cap) {
  uintptr_t v = (uintptr_t)p;
  v ^= v >> 17;
  v *= 0x9E3779B97F4A7C15ull;
  return (size_t)(v >> 20) & (cap - 1);
}

static void tab_insert(conv_entry *e) {
  size_t i = hash_ptr(e->p, tab_cap);
  while (tab[i]) i = (i + 1) & (tab_cap - 1);
  tab[i] = e;
}

static conv_entry *tab_find(const snrt_conv_t *p) {
  if (!tab_cap) return NULL;
  for (size_t i = hash_ptr(p, tab_cap);; i = (i + 1) & (tab_cap - 1)) {
    if (!tab[i]) return NULL;
    if (tab[i]->p == p) return tab[i];
  }
}

static void conv_fail(const snrt_conv_t *p, const char *why) {
  fprintf(stderr,
          "snrt: error: convolution x(%d,%d,%d,%d) w(%d,%d,%d,%d) stride %dx%d pad %d,%d "
          "dilation %dx%d group %d -> y(%d,%d,%d,%d): %s\n",
          p->n, p->c, p->h, p->w, p->k, p->c / (p->group ? p->group : 1), p->kh, p->kw, p->sh,
          p->sw, p->pt, p->pl, p->dh, p->dw, p->group, p->n, p->k, p->oh, p->ow, why);
  exit(SNRT_EXIT_DEVICE);
}

/* The cuDNN data type of x, w, y (and dw): float32, or bfloat16 / half
 * with float32 compute (cuDNN's PSEUDO_BFLOAT16 and PSEUDO_HALF configs). */
static cudnnDataType_t data_type(int fmt) {
  return fmt == SNRT_BF16 ? CUDNN_DATA_BFLOAT16 : fmt == SNRT_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

static conv_entry *conv_get(snrt_ctx *c, const snrt_conv_t *p, int fmt) {
  conv_entry *e = tab_find(p);
  if (e && e->fmt != fmt) conv_fail(p, "called with operands of two precisions (internal error)");
  if (e) return e;
  if (snrt_cu(c)->capturing)
    conv_fail(p, "first seen during CUDA graph capture (internal error: the warm-up step "
                 "should have run it)");
  if (2 * (tab_len + 1) > tab_cap) {
    size_t old_cap = tab_cap;
    conv_entry **old = tab;
    tab_cap = tab_cap ? 2 * tab_cap : 256;
    tab = (conv_entry **)calloc(tab_cap, sizeof *tab);
    if (!tab) snrt_cu_fail("calloc", "out of host memory", __FILE__, __LINE__);
    for (size_t i = 0; i < old_cap; i++)
      if (old[i]) tab_insert(old[i]);
    free(old);
  }
  e = (conv_entry *)calloc(1, sizeof *e);
  if (!e) snrt_cu_fail("calloc", "out of host memory", __FILE__, __LINE__);
  e->p = p;
  e->fmt = fmt;
  cudnnDataType_t dt = data_type(fmt);
  int g = p->group > 0 ? p->group : 1;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->x));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->y));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->b));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&e->w));
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&e->conv));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(e->x, CUDNN_TENSOR_NCHW, dt, p->n, p->c, p->h, p->w));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(e->y, CUDNN_TENSOR_NCHW, dt, p->n, p->k, p->oh, p->ow));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(e->b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, p->k, 1, 1));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(e->w, dt, CUDNN_TENSOR_NCHW, p->k, p->c / g, p->kh, p->kw));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(e->conv, p->pt, p->pl, p->sh, p->sw, p->dh, p->dw,
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionGroupCount(e->conv, g));
  /* cuDNN pads bottom/right like top/left: the output size must agree. */
  int on, ok, ooh, oow;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(e->conv, e->x, e->w, &on, &ok, &ooh, &oow));
  if (on != p->n || ok != p->k || ooh != p->oh || oow != p->ow) {
    char why[200];
    snprintf(why, sizeof why,
             "asymmetric padding (cuDNN pads symmetrically and would give %dx%d): not supported "
             "by the CUDA runtime; pad explicitly in the model or use --target cpu", ooh, oow);
    conv_fail(p, why);
  }
  tab_insert(e);
  tab_len++;
  return e;
}

/* float32 operands: TF32 tensor cores unless SNRT_TF32=0; 16-bit ones:
 * tensor cores always (their products are exact in float32). */
static cudnnMathType_t base_math(snrt_ctx *c, const conv_entry *e) {
  if (e->fmt) return CUDNN_TENSOR_OP_MATH;
  return snrt_cu(c)->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

/* The choice is timed (cudnnFind*Ex) only with SNRT_CONV_FIND=1 and
 * without SNRT_DETERMINISTIC=1. */
static bool timed_choice(snrt_ctx *c) {
  return snrt_cu(c)->conv_find && !snrt_cu(c)->deterministic;
}

/* Among Find's (fastest first) or the heuristics' (best first) results, the
 * first that ran, fits, does not down-convert to FP16, and (if asked) is
 * deterministic. */
template <class Perf>
static int pick(snrt_ctx *c, const snrt_conv_t *p, const Perf *r, int n, size_t limit,
                conv_entry *e, int dir, const char *what) {
  for (int i = 0; i < n; i++) {
    if (r[i].status != CUDNN_STATUS_SUCCESS || r[i].memory > limit) continue;
    if (r[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    if (snrt_cu(c)->deterministic && r[i].determinism != CUDNN_DETERMINISTIC) continue;
    e->ws[dir] = r[i].memory;
    e->math[dir] = snrt_cu(c)->tf32 || e->fmt ? r[i].mathType : CUDNN_FMA_MATH;
    e->chosen[dir] = true;
    if (snrt_cu(c)->conv_log)
      fprintf(stderr, "snrt: conv x(%d,%d,%d,%d) w(%d,%d,%dx%d) stride %d pad %d group %d: %s "
                      "algorithm %d (%s, math %d, workspace %zu of %zu bytes, %.3f ms)\n",
              p->n, p->c, p->h, p->w, p->k, p->c / (p->group > 0 ? p->group : 1), p->kh, p->kw,
              p->sh, p->pt, p->group, what, (int)r[i].algo,
              timed_choice(c) ? "timed by cudnnFind" : "cuDNN's heuristics", (int)e->math[dir],
              r[i].memory, limit, timed_choice(c) ? (double)r[i].time : 0.0);
    return (int)r[i].algo;
  }
  char why[160];
  snprintf(why, sizeof why, "no cuDNN %s algorithm fits the %lld-byte workspace the plan gave%s",
           what, (long long)limit, snrt_cu(c)->deterministic ? " (SNRT_DETERMINISTIC=1)" : "");
  conv_fail(p, why);
  return 0;
}

/* Called before a direction's choice is made: a choice made inside a graph
 * capture would run cudnnFind (which synchronizes and allocates) in it. */
static void before_choice(snrt_ctx *c, const snrt_conv_t *p, const char *what) {
  if (!snrt_cu(c)->capturing) return;
  char why[200];
  snprintf(why, sizeof why, "%s algorithm first needed during CUDA graph capture (internal "
           "error: the warm-up step should have chosen it; SNRT_CUDA_GRAPH=0 avoids it)", what);
  conv_fail(p, why);
}

static size_t ws_limit(const snrt_conv_t *p, const void *ws) {
  return ws && p->ws_bytes > 0 ? (size_t)p->ws_bytes : 0;
}

static const float one = 1.0f, zero = 0.0f;

/* The private workspace: one buffer for every convolution (they run on the
 * compute stream, one at a time), grown when a choice needs more. A buffer
 * is never freed while the process runs: a CUDA graph captured earlier may
 * hold its address. Choices are made outside captures (before_choice). */
enum { DET_WS_CAP = 64 << 20 };
static void *priv_ws;
static size_t priv_cap, priv_total;

int64_t snrt_dev_outside_bytes(snrt_ctx *c) {
  (void)c;
  return (int64_t)priv_total;
}

static size_t extra_ws(void) {
  static long mib = -1;
  if (mib < 0) {
    const char *v = getenv("SNRT_CONV_WS_MIB");
    mib = v && *v ? atol(v) : 0;
    if (mib < 0) mib = 0;
  }
  return (size_t)mib << 20;
}

/* The workspace bound a choice considers: see the comment at the top. */
static size_t choice_limit(snrt_ctx *c, size_t plan_lim) {
  size_t x = extra_ws();
  if (snrt_cu(c)->deterministic) return x > (size_t)DET_WS_CAP ? x : (size_t)DET_WS_CAP;
  return x > plan_lim ? x : plan_lim;
}

static void *private_ws(snrt_ctx *c, size_t bytes) {
  if (bytes <= priv_cap) return priv_ws;
  CUDA_CHECK(cudaStreamSynchronize(snrt_cu(c)->compute));
  void *q = NULL;
  cudaError_t err = cudaMalloc(&q, bytes);
  if (err != cudaSuccess) {
    fprintf(stderr, "snrt: error: cannot allocate %lld bytes of convolution workspace beyond the "
                    "plan (%s): unset SNRT_CONV_WS_MIB%s\n", (long long)bytes,
            cudaGetErrorString(err), snrt_cu(c)->deterministic ? " or SNRT_DETERMINISTIC" : "");
    exit(SNRT_EXIT_DEVICE);
  }
  priv_ws = q;
  priv_cap = bytes;
  priv_total += bytes;
  fprintf(stderr, "snrt: convolution workspace beyond the plan: %.2f MiB (%s), outside the "
                  "arena\n", (double)priv_total / 1048576.0,
          snrt_cu(c)->deterministic ? "SNRT_DETERMINISTIC=1 chooses independently of the plan"
                                    : "SNRT_CONV_WS_MIB");
  return q;
}

/* The workspace a direction runs with: the plan's at ws, or the private one
 * where its algorithm needs more than the plan gave. */
static void *run_ws(conv_entry *e, int dir, void *ws, size_t plan_lim) {
  return e->ws[dir] > plan_lim ? priv_ws : ws;
}

/* The three directions on operands of e->fmt (void pointers: float32 or
 * 16-bit); alpha and beta are float for every config. */
static void conv_fwd(snrt_ctx *c, const snrt_conv_t *p, int fmt, const void *x, const void *w,
                     void *y, float *ws) {
  conv_entry *e = conv_get(c, p, fmt);
  cudnnHandle_t h = snrt_cu(c)->cudnn;
  size_t lim = ws_limit(p, ws);
  if (!e->chosen[DIR_FWD]) {
    before_choice(c, p, "forward");
    size_t cl = choice_limit(c, lim);
    void *fws = timed_choice(c) && cl > lim ? private_ws(c, cl) : ws;
    cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv, base_math(c, e)));
    if (!timed_choice(c))
      CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, e->x, e->w, e->conv, e->y,
                                                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, r));
    else /* Find runs each candidate and writes y, which the call below overwrites. */
      CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, e->x, x, e->w, w, e->conv, e->y, y,
                                                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, r,
                                                         fws, cl));
    e->algo[DIR_FWD] = pick(c, p, r, n, cl, e, DIR_FWD, "forward");
    if (e->ws[DIR_FWD] > lim) private_ws(c, e->ws[DIR_FWD]);
  }
  CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv, e->math[DIR_FWD]));
  CUDNN_CHECK(cudnnConvolutionForward(h, &one, e->x, x, e->w, w, e->conv,
                                      (cudnnConvolutionFwdAlgo_t)e->algo[DIR_FWD],
                                      run_ws(e, DIR_FWD, ws, lim), e->ws[DIR_FWD], &zero, e->y, y));
}

static void conv_bwd_data(snrt_ctx *c, const snrt_conv_t *p, int fmt, const void *dy,
                          const void *w, void *dx, float *ws) {
  conv_entry *e = conv_get(c, p, fmt);
  cudnnHandle_t h = snrt_cu(c)->cudnn;
  size_t lim = ws_limit(p, ws);
  if (!e->chosen[DIR_BWD_DATA]) {
    before_choice(c, p, "backward-data");
    size_t cl = choice_limit(c, lim);
    void *fws = timed_choice(c) && cl > lim ? private_ws(c, cl) : ws;
    cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n = 0;
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv, base_math(c, e)));
    if (!timed_choice(c))
      CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          h, e->w, e->y, e->conv, e->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, r));
    else
      CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
        h, e->w, w, e->y, dy, e->conv, e->x, dx, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, r,
        fws, cl));
    e->algo[DIR_BWD_DATA] = pick(c, p, r, n, cl, e, DIR_BWD_DATA, "backward-data");
    if (e->ws[DIR_BWD_DATA] > lim) private_ws(c, e->ws[DIR_BWD_DATA]);
  }
  CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv, e->math[DIR_BWD_DATA]));
  CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, e->w, w, e->y, dy, e->conv,
                                           (cudnnConvolutionBwdDataAlgo_t)e->algo[DIR_BWD_DATA],
                                           run_ws(e, DIR_BWD_DATA, ws, lim), e->ws[DIR_BWD_DATA],
                                           &zero, e->x, dx));
}

static void conv_bwd_filter(snrt_ctx *c, const snrt_conv_t *p, int fmt, const void *x,
                            const void *dy, void *dw, float *ws) {
  conv_entry *e = conv_get(c, p, fmt);
  cudnnHandle_t h = snrt_cu(c)->cudnn;
  size_t lim = ws_limit(p, ws);
  if (!e->chosen[DIR_BWD_FILTER]) {
    before_choice(c, p, "backward-filter");
    size_t cl = choice_limit(c, lim);
    void *fws = timed_choice(c) && cl > lim ? private_ws(c, cl) : ws;
    cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int n = 0;
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv, base_math(c, e)));
    if (!timed_choice(c))
      CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          h, e->x, e->y, e->conv, e->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, r));
    else {
      /* Find writes dw with each candidate: where the step accumulates into
       * dw (a chunk of the batch after the first), into a scratch copy. */
      void *fdw = dw;
      if (p->accumulate) {
        size_t bytes = (size_t)p->k * (size_t)(p->c / (p->group > 0 ? p->group : 1)) *
                       (size_t)p->kh * (size_t)p->kw * (fmt ? 2 : 4);
        CUDA_CHECK(cudaMalloc(&fdw, bytes));
      }
      CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        h, e->x, x, e->y, dy, e->conv, e->w, fdw, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, r,
        fws, cl));
      if (fdw != dw) CUDA_CHECK(cudaFree(fdw));
    }
    e->algo[DIR_BWD_FILTER] = pick(c, p, r, n, cl, e, DIR_BWD_FILTER, "backward-filter");
    if (e->ws[DIR_BWD_FILTER] > lim) private_ws(c, e->ws[DIR_BWD_FILTER]);
  }
  CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv, e->math[DIR_BWD_FILTER]));
  CUDNN_CHECK(cudnnConvolutionBackwardFilter(
      h, &one, e->x, x, e->y, dy, e->conv, (cudnnConvolutionBwdFilterAlgo_t)e->algo[DIR_BWD_FILTER],
      run_ws(e, DIR_BWD_FILTER, ws, lim), e->ws[DIR_BWD_FILTER], p->accumulate ? &one : &zero,
      e->w, dw));
}

void snrt_conv_fwd(snrt_ctx *c, const snrt_conv_t *p, const float *x, const float *w,
                   const float *b, float *y, float *ws) {
  conv_fwd(c, p, 0, x, w, y, ws);
  if (b) {
    conv_entry *e = conv_get(c, p, 0);
    CUDNN_CHECK(cudnnAddTensor(snrt_cu(c)->cudnn, &one, e->b, b, &one, e->y, y));
  }
}

void snrt_conv_bwd_data(snrt_ctx *c, const snrt_conv_t *p, const float *dy, const float *w,
                        float *dx, float *ws) {
  conv_bwd_data(c, p, 0, dy, w, dx, ws);
}

void snrt_conv_bwd_filter(snrt_ctx *c, const snrt_conv_t *p, const float *x, const float *dy,
                          float *dw, float *ws) {
  conv_bwd_filter(c, p, 0, x, dy, dw, ws);
}

/* ---- tensor cores: 16-bit operands, float32 accumulation ------------------ */

/* y[n][k][j] = round(y + b[k]): the bias of a 16-bit conv's output, added
 * in float32 (cudnnAddTensor wants the bias in y's type). */
template <int FMT>
__global__ void k_conv_bias16(int64_t total, int k, int64_t ohw, const float *b, uint16_t *y) {
  SNRT_FOR(i, total) {
    float v = (FMT == SNRT_BF16 ? snrt_bf16_to_f32(y[i]) : snrt_f16_to_f32(y[i])) + b[i / ohw % k];
    y[i] = FMT == SNRT_BF16 ? snrt_f32_to_bf16(v) : snrt_f32_to_f16(v);
  }
}

void snrt_conv_fwd16(snrt_ctx *c, const snrt_conv_t *p, int fmt, const uint16_t *x,
                     const uint16_t *w, const float *b, uint16_t *y, float *ws) {
  conv_fwd(c, p, fmt, x, w, y, ws);
  if (!b) return;
  int64_t ohw = (int64_t)p->oh * p->ow, total = (int64_t)p->n * p->k * ohw;
  if (total <= 0) return;
  if (fmt == SNRT_BF16)
    k_conv_bias16<SNRT_BF16><<<snrt_cu_blocks(total), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(
        total, p->k, ohw, b, y);
  else
    k_conv_bias16<SNRT_F16><<<snrt_cu_blocks(total), SNRT_THREADS, 0, snrt_cu_stream(c)>>>(
        total, p->k, ohw, b, y);
  SNRT_LAUNCH_CHECK();
}

void snrt_conv_bwd_data16(snrt_ctx *c, const snrt_conv_t *p, int fmt, const uint16_t *dy,
                          const uint16_t *w, uint16_t *dx, float *ws) {
  conv_bwd_data(c, p, fmt, dy, w, dx, ws);
}

void snrt_conv_bwd_filter16(snrt_ctx *c, const snrt_conv_t *p, int fmt, const uint16_t *x,
                            const uint16_t *dy, uint16_t *dw, float *ws) {
  conv_bwd_filter(c, p, fmt, x, dy, dw, ws);
}

/* db[k] = sum over n and (oh, ow) of dy: one block per channel, fixed order. */
__global__ void k_chan_sum(int n, int k, int64_t hw, const float *dy, float *db) {
  for (int ch = blockIdx.x; ch < k; ch += gridDim.x) {
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < (int64_t)n * hw; i += blockDim.x) {
      int64_t img = i / hw, j = i % hw;
      s += dy[(img * k + ch) * hw + j];
    }
    s = snrt_block_sum(s);
    if (threadIdx.x == 0) db[ch] = s;
  }
}

void snrt_conv_bwd_bias(snrt_ctx *c, const snrt_conv_t *p, const float *dy, float *db) {
  if (p->k <= 0) return;
  unsigned blocks = p->k > 65535 ? 65535 : (unsigned)p->k;
  k_chan_sum<<<blocks, 512, 0, snrt_cu_stream(c)>>>(p->n, p->k, (int64_t)p->oh * p->ow, dy, db);
  SNRT_LAUNCH_CHECK();
}
