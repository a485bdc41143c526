/* calibrate.c — build/snc-calibrate: measures a device profile for snc's cost
 * model (compiler/plan/cost.c) on the runtime the emitted programs link against.
 *
 * What it is: a timer of the runtime's own kernels through snrt.h, the calls
 * an emitted train.c makes (cases.c): convolution forward and backward (data
 * + filter) in shape classes by the GEMM inner dimension K = c/group*kh*kw
 * (below 64: "conv_small", "conv_bwd_small") and 1x1 kernels ("conv_1x1",
 * "conv_bwd_1x1"; backward data and filter timed apart; the workspace as
 * the compiler plans it), GEMMs, max and average pooling ("pool"), batch and layer
 * normalization, softmax backward and a convolution's bias gradient over
 * maps from 1x1 to 28x28 ("norm"), contiguous activations, adds and the
 * masked fill ("elementwise"), broadcast binary ops, their gradients, a
 * reduction and a transpose ("strided"), erf, its gradient, softmax and
 * dropout ("math"), the softmax cross-entropy loss ("loss"), SGD ("update")
 * and Adam ("adam"), the copy engine in each direction alone and while
 * compute runs (the compute it slows: "d2h_loss", "h2d_loss"), and the fixed
 * cost of a step (a tiny kernel); bandwidth classes below and above the size
 * where a CPU kernel wakes its thread team, so the fit separates that
 * wake-up ("parallel_s"). Every convolution, pooling and GEMM measured is
 * kept in the profile (the cost model takes the nearest one's rate).
 *
 * How: every case runs once per pass, NPASS passes, and its time is the
 * median of its passes (each pass a trial of calls lasting about
 * trial_s / NPASS); see calibrate.h for the operands. Per class the fit
 * (fit.c) gives the rate, in FLOP/s (FLOPs counted as compiler/front/flops.c
 * counts them) for convolutions and GEMMs, window elements per second for
 * pooling, bytes touched per second (inputs + outputs + workspace, as
 * cost.c counts them) for the others, and the fixed costs.
 *
 * What it is not: a benchmark of peak rates, or a model of every shape.
 * The shapes are those of small CNNs and transformers at batch 16-64 (the
 * examples); a workload far from them may run at other rates.
 *
 * The same source builds for the CUDA runtime (build/snc-calibrate-cuda,
 * where nvcc is found); `--target cuda` runs that binary. Kernels are
 * asynchronous there, so each trial ends with a device synchronisation. */
#include "calibrate.h"

#ifdef SNRT_CALIBRATE_CUDA
#include <cuda_runtime_api.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef SNRT_CALIBRATE_CUDA
#include "cpu/kern.h"
#define PAR_MIN KERN_PAR_MIN
#else
#define PAR_MIN 0
#endif

const char *const cal_class_names[NCLASS] = {
    "conv", "conv_small", "conv_1x1", "conv_bwd", "conv_bwd_small", "conv_bwd_1x1", "gemm",
    "pool", "norm", "elementwise", "update", "adam", "strided", "math", "loss"};
/* Classes rated in FLOP/s (pool: window elements visited per second), the
 * others in bytes/s; the name of a class's per-unit cost. */
static const int by_flops[NCLASS] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0};
static const char *unit_name(int c) {
  return c <= K_CONV_BWD_1X1 ? "per_image_s" : c == K_GEMM ? "per_call_s" : "per_row_s";
}

snrt_ctx cal_ctx;
int cal_quick;
Case cal_cases[MAXCASES];
int cal_ncases;
int64_t cal_out_pool_off, cal_out_pool_bytes;

static double trial_s = 0.25;   /* time per case, all passes (--quick: less) */
static char *A;                 /* device arena base */
static int64_t in_off, in_bytes, rect_off, rect_bytes, scratch_top, scratch_end;
/* Operands rotate over at least this many bytes (beyond the caches). */
static int64_t rot_bytes = (int64_t)64 << 20;
enum { NROT = 64 };

double cal_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

float *cal_scratch(int64_t n) {
  int64_t bytes = (n * 4 + SNRT_ALIGN - 1) / SNRT_ALIGN * SNRT_ALIGN;
  if (scratch_top + bytes > scratch_end) {
    fprintf(stderr, "snc-calibrate: error: internal: arena too small for the calibration shapes\n");
    exit(3);
  }
  float *p = (float *)(A + scratch_top);
  scratch_top += bytes;
  return p;
}

char *cal_out_slot(const Case *k, int r) { return A + cal_out_pool_off + r * k->out_bytes; }

void cal_call(Case *k) {
  k->cur = (k->cur + 1) % k->nrot;
  k->fn(k, A + (k->rectified ? rect_off : in_off) + k->cur * k->in_bytes,
        A + cal_out_pool_off + k->cur * k->out_bytes);
}

/* The input pools' values: approximately N(0, 1) (the sum of three uniform
 * values on [-1, 1]) from a fixed xorshift sequence, and the same values
 * rectified (max(0, v)) in the second pool; uploaded in chunks. */
static void fill_inputs(void) {
  enum { CHUNK = 1 << 20 };
  float *h = malloc(sizeof(float) * CHUNK);
  if (!h) exit(3);
  for (int pool = 0; pool < 2; pool++) {
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int64_t off0 = pool ? rect_off : in_off, bytes = pool ? rect_bytes : in_bytes;
    for (int64_t off = 0; off < bytes; off += 4 * (int64_t)CHUNK) {
      int64_t n = (bytes - off) / 4 < CHUNK ? (bytes - off) / 4 : CHUNK;
      for (int64_t i = 0; i < n; i++) {
        float v = 0;
        for (int j = 0; j < 3; j++) {
          s ^= s << 13, s ^= s >> 7, s ^= s << 17;
          v += (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
        }
        h[i] = pool && v < 0 ? 0 : v;
      }
      snrt_dev_upload(&cal_ctx, off0 + off, h, 4 * n);
    }
  }
  free(h);
}

/* Slots: enough to cover rot_bytes, within the pools. */
static void size_slots(void) {
  for (int i = 0; i < cal_ncases; i++) {
    Case *k = &cal_cases[i];
    int64_t per = k->in_bytes + k->out_bytes;
    int64_t r = rot_bytes / (per > 0 ? per : 1) + 1;
    if (r > NROT) r = NROT;
    int64_t pool = k->rectified ? rect_bytes : in_bytes;
    while (r > 1 && (r * k->in_bytes > pool || r * k->out_bytes > cal_out_pool_bytes)) r--;
    if (k->in_bytes > pool || k->out_bytes > cal_out_pool_bytes) {
      fprintf(stderr, "snc-calibrate: error: internal: %s does not fit the pools\n", k->what);
      exit(3);
    }
    k->nrot = (int)r;
    k->cur = 0;
  }
}

/* One trial of case k in pass `pass`: a warm-up call, then reps calls (reps
 * sized in the first pass for trial_s / NPASS). */
static void time_case(Case *k, int pass) {
  if (k->prepare) k->prepare(k);
  cal_call(k);
  snrt_dev_sync(&cal_ctx);
  if (pass == 0) {
    double t0 = cal_now();
    cal_call(k);
    snrt_dev_sync(&cal_ctx);
    double one = cal_now() - t0;
    int reps = one > 0 ? (int)(trial_s / NPASS / one) : 1000;
    k->reps = reps < 1 ? 1 : reps > 100000 ? 100000 : reps;
  }
  double s = cal_now();
  for (int r = 0; r < k->reps; r++) cal_call(k);
  snrt_dev_sync(&cal_ctx);
  k->t[pass] = (cal_now() - s) / k->reps;
}

/* The CPU time the hypervisor gave other guests (the "steal" column of
 * /proc/stat) over the machine's whole CPU time so far: read before and
 * after the run, the difference says whether the host took the cores while
 * the kernels were timed (a profile measured then is too slow). -1 where
 * /proc/stat cannot be read. */
static void cpu_times(double *steal, double *total) {
  *steal = *total = -1;
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return;
  unsigned long long v[8] = {0};
  if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
             &v[6], &v[7]) == 8) {
    *steal = (double)v[7];
    *total = 0;
    for (int i = 0; i < 8; i++) *total += (double)v[i];
  }
  fclose(f);
}

static double median(const double *v) {
  double t[NPASS];
  memcpy(t, v, sizeof t);
  for (int i = 1; i < NPASS; i++)   /* insertion sort: NPASS values */
    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
      double x = t[j];
      t[j] = t[j - 1], t[j - 1] = x;
    }
  return t[NPASS / 2];
}

static void usage(int code) {
  fprintf(code ? stderr : stdout,
          "usage: snc-calibrate --target cpu|cuda [-o PROFILE.json] [--threads N] [--quick]\n"
          "  measures the runtime's kernels and writes a device profile for\n"
          "  `snc plan|compile|max-batch --device PROFILE.json` (default: stdout)\n"
          "  --threads N  CPU threads (default: all cores, as the emitted programs)\n"
          "  --quick      a few seconds, smaller shapes (CI; rates less accurate)\n");
  exit(code);
}

/* The fused chains of compiler/front/fuse.c (runtime/calibrate/cases.c,
 * fused_chain), timed with the bandwidth classes. */
static const struct { int which, cls; const char *what; } fused_cases[] = {
    {EW_GELU_TANH, K_MATH, "fused GELU (tanh) forward"},
    {EW_GELU_TANH_BWD, K_MATH, "fused GELU (tanh) backward"},
    {EW_GELU_ERF, K_MATH, "fused GELU (erf) forward"},
    {EW_GELU_ERF_BWD, K_MATH, "fused GELU (erf) backward"},
    {EW_ADD_RELU, K_ELEM, "fused Add + Relu forward"},
    {EW_ADD_RELU_BWD, K_ELEM, "fused Add + Relu backward"}};

/* The shapes measured (see the header); --quick: fewer and smaller. */
static int copy_case[2], tiny_case;
static void make_cases(void) {
  int q = cal_quick, nb = q ? 4 : 16;   /* images per batch */
  /* Convolutions: first layers (K < 64) and the 3x3 / 1x1 body of ResNets
   * and small CNNs at 32 px and below, GoogLeNet's branches at 64 px. */
  static const short conv_full[][6] = {
      {4, 1, 28, 32, 3, 1}, {1, 3, 32, 64, 3, 1}, {4, 32, 14, 64, 3, 1}, {1, 64, 32, 64, 3, 1},
      {1, 64, 16, 256, 1, 1}, {1, 512, 2, 128, 1, 1}, {1, 128, 4, 128, 3, 1}, {1, 3, 32, 64, 7, 2},
      {1, 128, 16, 128, 3, 1}, {1, 256, 8, 256, 3, 1}, {1, 256, 2, 256, 3, 1}, {1, 512, 1, 512, 3, 1},
      {1, 128, 16, 256, 3, 2}, {1, 256, 8, 64, 1, 1}, {1, 64, 8, 256, 1, 1}, {1, 512, 4, 128, 1, 1},
      {1, 1024, 1, 256, 1, 1}, {1, 256, 2, 1024, 1, 1}, {1, 192, 8, 64, 1, 1}, {1, 64, 8, 64, 3, 1},
      {1, 64, 8, 128, 3, 2}, {1, 128, 4, 256, 3, 2}, {1, 256, 2, 512, 3, 2}, {1, 64, 8, 64, 1, 1},
      {1, 256, 8, 128, 1, 1}, {1, 512, 4, 256, 1, 1}, {1, 1024, 2, 512, 1, 1}, {1, 2048, 1, 512, 1, 1},
      {1, 512, 1, 2048, 1, 1}, {1, 64, 8, 128, 1, 2}, {1, 64, 16, 192, 3, 1}, {1, 96, 8, 128, 3, 1},
      {1, 16, 8, 32, 3, 1}, {1, 480, 4, 192, 1, 1}, {1, 112, 4, 224, 3, 1}, {1, 832, 2, 384, 1, 1},
      {1, 192, 2, 384, 3, 1}, {1, 128, 4, 256, 1, 2}, {1, 256, 2, 512, 1, 2}, {1, 256, 8, 512, 1, 2},
      {1, 512, 4, 1024, 1, 2}, {1, 1024, 2, 2048, 1, 2}, {1, 832, 2, 128, 1, 1}};
  int nconv = q ? 7 : (int)(sizeof conv_full / sizeof conv_full[0]);
  for (int i = 0; i < nconv; i++) {
    const short *c = conv_full[i];
    cal_conv(nb * (q ? 1 : c[0]), c[1], c[2], c[3], c[4], c[5]);
  }
  /* Pooling: 2x2/2, 3x3/2 and 3x3/1 windows (GoogLeNet's branches), global. */
  static const short pool_full[][7] = {
      {4, 32, 28, 2, 2, 0, 0}, {1, 64, 16, 3, 2, 1, 0}, {1, 192, 8, 3, 1, 1, 0}, {1, 512, 4, 4, 4, 0, 1},
      {1, 512, 1, 1, 1, 0, 1}, {1, 64, 32, 3, 2, 1, 0}, {1, 1024, 2, 2, 2, 0, 1}, {1, 2048, 1, 1, 1, 0, 1},
      {1, 832, 4, 3, 2, 1, 0}, {1, 256, 16, 3, 1, 1, 0}, {1, 480, 4, 3, 1, 1, 0}, {1, 2048, 2, 2, 2, 0, 1},
      {4, 64, 14, 2, 2, 0, 0}};
  int npool = q ? 5 : (int)(sizeof pool_full / sizeof pool_full[0]);
  for (int i = 0; i < npool; i++) {
    const short *p = pool_full[i];
    cal_pool(nb * (q ? 1 : p[0]), p[1], p[2], p[3], p[4], p[5], p[6]);
  }
  /* GEMMs: dense layers (a classifier's small ones too, their gradients
   * with a transposed operand) and a transformer's projections and MLP over
   * [batch, T, C] (one sgemm per sequence, the weight shared), their weight
   * gradients (the batch folded into K) and attention (per head). */
  static const short gemm_full[][7] = {
      {1, 64, 64, 3136, 0, 1, 0}, {1, 64, 10, 64, 0, 1, 0}, {16, 64, 192, 64, 0, 0, 1},
      {1, 64, 192, 1024, 1, 0, 0}, {16, 64, 64, 256, 0, 1, 1}, {64, 64, 64, 16, 0, 0, 0},
      {1, 1000, 512, 16, 1, 0, 0}, {1, 64, 64, 10, 0, 0, 0}, {1, 64, 3136, 64, 1, 0, 0},
      {1, 1024, 256, 1024, 0, 0, 0}, {16, 64, 256, 64, 0, 0, 1}, {16, 64, 64, 64, 0, 1, 1},
      {16, 64, 64, 192, 0, 1, 1}, {1, 64, 256, 1024, 1, 0, 0}, {1, 256, 64, 1024, 1, 0, 0},
      {1, 64, 64, 1024, 1, 0, 0}, {64, 64, 16, 64, 0, 0, 0}, {64, 16, 64, 64, 1, 0, 0},
      {1, 16, 1000, 512, 0, 1, 0}, {1, 16, 512, 1000, 0, 0, 0}, {1, 16, 1000, 2048, 0, 1, 0},
      {1, 16, 2048, 1000, 0, 0, 0}, {1, 1000, 2048, 16, 1, 0, 0}, {16, 64, 64, 64, 0, 0, 1},
      {64, 64, 64, 16, 0, 1, 0}, {64, 64, 16, 64, 1, 0, 0}, {64, 64, 16, 64, 0, 1, 0}};
  int ngemm = q ? 7 : (int)(sizeof gemm_full / sizeof gemm_full[0]);
  for (int i = 0; i < ngemm; i++) {
    const short *g = gemm_full[i];
    int scale = q && g[0] == 16 ? 4 : 1;   /* --quick: batch 4 where it is 16 */
    cal_gemm(g[0] / scale, g[1], g[2], g[3] == 1024 && q ? 256 : g[3], g[4], g[5], g[6]);
  }
  /* Bandwidth: activations of 4 K to 4 M floats, below and above the
   * parallel threshold. */
  int64_t lo = 1 << 12, big = q ? (1 << 18) : (1 << 22);
  for (int64_t n = lo; n <= big; n *= 4) {
    cal_ew(EW_RELU, K_ELEM, n, 64, 256, "relu forward");
    cal_ew(EW_RELU_BWD, K_ELEM, n, 64, 256, "relu backward");
    cal_ew(EW_ADD, K_ELEM, n, 64, 256, "add");
    cal_ew(EW_WHERE, K_ELEM, n, 64, 256, "masked fill");
    cal_ew(EW_BCAST_MUL, K_STRIDED, n, 64, 256, "broadcast multiply");
    cal_ew(EW_ADD_SAME, K_STRIDED, n, 64, 256, "Add, one shape");
    cal_ew(EW_BIAS_GRAD, K_STRIDED, n, 64, 256, "bias gradient (a broadcast's backward)");
    cal_ew(EW_MEAN_ROWS, K_STRIDED, n, 64, 256, "mean over rows of 64");
    cal_ew(EW_TRANSPOSE, K_STRIDED, n, 64, 256, "transpose");
    cal_ew(EW_ERF, K_MATH, n, 64, 256, "erf");
    cal_ew(EW_ERF_BWD, K_MATH, n, 64, 256, "erf backward");
    cal_ew(EW_SOFTMAX, K_MATH, n, 64, 256, "softmax forward");
    cal_ew(EW_DROPOUT, K_MATH, n, 64, 256, "dropout");
    for (int i = 0; i < (int)(sizeof fused_cases / sizeof fused_cases[0]); i++)
      cal_ew(fused_cases[i].which, fused_cases[i].cls, n, 64, 256, fused_cases[i].what);
    cal_ew(EW_SOFTMAX_BWD, K_NORM, n, 64, 256, "softmax backward");
    if (n >= (q ? 1 << 14 : 1 << 16)) {
      cal_ew(EW_LN, K_NORM, n, 64, 256, "layer-norm forward");
      cal_ew(EW_LN_BWD, K_NORM, n, 64, 256, "layer-norm backward");
    }
  }
  /* Batch normalization and a conv's bias gradient over the maps of the
   * examples: n x c x hw (28x28 down to 1x1). */
  static const short bn_full[][3] = {{64, 32, 784}, {64, 64, 196}, {16, 64, 256}, {16, 64, 64},
                                     {16, 256, 64}, {16, 128, 16}, {16, 512, 16}, {16, 256, 4},
                                     {16, 1024, 4}, {16, 512, 1}, {16, 2048, 1}, {16, 192, 1024}};
  static const short bn_quick[][3] = {{4, 64, 256}, {4, 256, 16}, {4, 512, 1}};
  int nbn = q ? 3 : (int)(sizeof bn_full / sizeof bn_full[0]);
  for (int i = 0; i < nbn; i++) {
    const short *b = q ? bn_quick[i] : bn_full[i];
    int64_t n = (int64_t)b[0] * b[1] * b[2];
    char what[64];
    snprintf(what, sizeof what, "batch-norm forward n%d c%d hw%d", b[0], b[1], b[2]);
    cal_ew(EW_BN, K_NORM, n, b[1], b[2], what);
    snprintf(what, sizeof what, "batch-norm backward n%d c%d hw%d", b[0], b[1], b[2]);
    cal_ew(EW_BN_BWD, K_NORM, n, b[1], b[2], what);
    if (i % 2 == 0 || q) {
      snprintf(what, sizeof what, "conv bias gradient n%d c%d hw%d", b[0], b[1], b[2]);
      cal_ew(EW_CONV_BIAS, K_NORM, n, b[1], b[2], what);
    }
  }
  /* The softmax cross-entropy loss: a small classifier, ImageNet's 1000
   * classes, a byte-level language model's (batch x T) rows of 256. */
  static const short ce[][2] = {{64, 10}, {16, 1000}, {256, 256}, {1024, 256}};
  for (int i = 0; i < (q ? 2 : 4); i++) {
    cal_ew(EW_CE, K_LOSS, (int64_t)ce[i][0] * ce[i][1], ce[i][1], 1, "cross-entropy forward");
    cal_ew(EW_CE_BWD, K_LOSS, (int64_t)ce[i][0] * ce[i][1], ce[i][1], 1, "cross-entropy backward");
  }
  /* Optimizer updates (biases to large weights): parameters, gradient and
   * state in, parameters and state out. */
  for (int64_t n = 1 << 8; n <= (q ? (1 << 16) : (1 << 20)); n *= 16) {
    cal_ew(EW_SGD, K_UPDATE, n, 1, 1, "sgd");
    cal_ew(EW_ADAM, K_ADAM, n, 1, 1, "adam");
  }
  tiny_case = cal_tiny();
  /* The copy engine: 256 KiB (a small activation) to 32 MiB, each way; the
   * largest sizes the overlap measurement's copies. */
  for (int dir = 0; dir < 2; dir++)
    for (int64_t b = 256 << 10; b <= (q ? (4 << 20) : (32 << 20)); b *= q ? 16 : 8)
      copy_case[dir] = cal_copy(dir, b);
  cal_overlap_init();
}

/* The command line: 0 or more to exit with, -1 to go on. */
static int parse_args(int argc, char **argv, const char **target, const char **out, int *threads) {
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    if (!strcmp(s, "-h") || !strcmp(s, "--help")) usage(0);
    else if (!strcmp(s, "--quick")) cal_quick = 1;
    else if ((!strcmp(s, "--target") || !strcmp(s, "-o") || !strcmp(s, "--threads")) && i + 1 < argc) {
      const char *v = argv[++i];
      if (!strcmp(s, "--target")) *target = v;
      else if (!strcmp(s, "-o")) *out = v;
      else {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n < 1 || n > 4096) {
          fprintf(stderr, "snc-calibrate: error: --threads wants a number from 1, not '%s'\n", v);
          return 1;
        }
        *threads = (int)n;
      }
    } else {
      fprintf(stderr, "snc-calibrate: error: unknown or incomplete argument '%s'\n", s);
      usage(1);
    }
  }
  if (!*target) {
    fprintf(stderr, "snc-calibrate: error: --target cpu|cuda is required\n");
    usage(1);
  }
  if (strcmp(*target, "cpu") && strcmp(*target, "cuda")) {
    fprintf(stderr, "snc-calibrate: error: unknown target '%s' (cpu or cuda)\n", *target);
    return 1;
  }
  return -1;
}

/* --target names the other runtime: the other binary, built beside this one. */
static int exec_other(const char *target, char **argv) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 32);
  if (n <= 0) {
    fprintf(stderr, "snc-calibrate: error: cannot find my own path\n");
    return 1;
  }
  self[n] = 0;
  char *slash = strrchr(self, '/');
  strcpy(slash ? slash + 1 : self, strcmp(target, "cuda") ? "snc-calibrate" : "snc-calibrate-cuda");
  if (access(self, X_OK)) {
    fprintf(stderr, "snc-calibrate: error: --target %s needs %s, which this build does not have "
            "(./configure.py found no nvcc/cuDNN)\n", target, self);
    return 2;
  }
  execv(self, argv);
  perror("snc-calibrate: error: exec");
  return 2;
}

/* The device, the arena (input pool, rectified input pool, output pool,
 * scratch: see calibrate.h), its inputs and the cases. */
static void start(int threads, double *steal0, double *total0) {
  int64_t pool = cal_quick ? ((int64_t)24 << 20) : ((int64_t)96 << 20);
  static snrt_model m = {.name = "snc-calibrate", .policy = "calibrate", .device = "calibrate"};
  int64_t rect = cal_quick ? ((int64_t)16 << 20) : ((int64_t)64 << 20);
  m.arena_bytes = 2 * pool + rect + (cal_quick ? ((int64_t)32 << 20) : ((int64_t)112 << 20));
  m.host_bytes = cal_quick ? ((int64_t)8 << 20) : ((int64_t)64 << 20);
  cal_ctx.m = &m;
  cal_ctx.threads = threads;
  cal_ctx.lr = 0.01f;
  snrt_dev_init(&cal_ctx);
  cpu_times(steal0, total0);
  A = snrt_arena(&cal_ctx);
  in_off = SNRT_ALIGN, in_bytes = pool;
  rect_off = in_off + pool, rect_bytes = rect;
  cal_out_pool_off = rect_off + rect, cal_out_pool_bytes = pool;
  scratch_top = cal_out_pool_off + pool, scratch_end = m.arena_bytes;
  fprintf(stderr, "snc-calibrate: %s%s, %d passes\n", snrt_dev_describe(&cal_ctx),
          cal_quick ? " (--quick)" : "", NPASS);
  fill_inputs();
  make_cases();
  cal_cases_ready();
  size_slots();

}

/* The passes: every case once per pass; the copy engine alone, then
 * compute with copies beside it (the copy rate of the same pass). */
static void run_passes(double loss[2][NPASS]) {
  for (int pass = 0; pass < NPASS; pass++) {
    for (int i = 0; i < cal_ncases; i++)
      if (!cal_cases[i].aux) time_case(&cal_cases[i], pass);
    for (int dir = 0; dir < 2; dir++) {
      const Case *k = &cal_cases[copy_case[dir]];
      cal_overlap_pass(dir, (double)k->n / k->t[pass], pass, loss[dir]);
    }
  }

}

/* Medians and the log; the fits' records. Returns the per-step overhead
 * (the tiny case); copy_loss: compute lost beside copies, each way. */
static double report_cases(double loss[2][NPASS], double copy_loss[2]) {
  double overhead = 0;
  for (int i = 0; i < cal_ncases; i++) {
    Case *k = &cal_cases[i];
    if (k->aux) continue;
    k->s = median(k->t);
    double lo = k->t[0], hi = k->t[0];
    for (int p = 1; p < NPASS; p++) lo = k->t[p] < lo ? k->t[p] : lo, hi = k->t[p] > hi ? k->t[p] : hi;
    char rate[64] = "";
    if (k->cls >= NCLASS)
      snprintf(rate, sizeof rate, " (%.2f GB/s)", k->n / k->s / 1e9);
    else if (k->cls >= 0)
      snprintf(rate, sizeof rate, k->cls == K_POOL ? " (%.2f G window elements/s)" : by_flops[k->cls]
               ? " (%.1f GFLOP/s)" : " (%.2f GB/s)", k->work / k->s / 1e9);
    else if (i == tiny_case)
      overhead = k->s;
    fprintf(stderr, "  %s: %.3f ms%s [passes %.3f-%.3f]\n", k->what, k->s * 1e3, rate, lo * 1e3, hi * 1e3);
    if (getenv("CAL_PASSES")) for (int p = 0; p < NPASS; p++) fprintf(stderr, "    pass %d: %.3f ms\n", p, k->t[p] * 1e3);
    if (k->cls >= 0) fit_record(k->cls, k->work, k->s, k->units, k->par);
  }
  for (int dir = 0; dir < 2; dir++) {
    copy_loss[dir] = median(loss[dir]);
    if (copy_loss[dir] < 0) copy_loss[dir] = 0;
    fprintf(stderr, "  compute beside copies %s: %.2f s lost per s of copy [passes", dir ? "to the device" : "to the host",
            copy_loss[dir]);
    for (int p = 0; p < NPASS; p++) fprintf(stderr, " %.2f", loss[dir][p]);
    fprintf(stderr, "]\n");
  }

  return overhead;
}

/* The measured shapes: convolutions, pools, GEMMs. */
static void write_shapes(FILE *f) {
  fprintf(f, "  },\n  \"conv_shapes\": [");
  int first = 1;
  for (int i = 0; i < cal_ncases; i++) {
    const Case *k = &cal_cases[i];
    if (k->aux || k->cls < K_CONV || k->cls > K_CONV_1X1) continue;   /* forward convs */
    const snrt_conv_t *p = &k->conv;
    double bd = cal_cases[i + 1].s, bf = cal_cases[i + 2].s;
    fprintf(f, "%s\n    {\"class\": \"%s\", \"n\": %d, \"c\": %d, \"hw\": %d, \"k\": %d, \"ksize\": %d, "
            "\"stride\": %d, \"forward_s\": %.4g, \"backward_s\": %.4g, \"backward_data_s\": %.4g, "
            "\"backward_filter_s\": %.4g}", first ? "" : ",", cal_class_names[k->cls], p->n, p->c, p->h, p->k,
            p->kh, p->sh, k->s, bd + bf, bd, bf);
    first = 0;
  }
  fprintf(f, "\n  ],\n  \"pool_shapes\": [");
  first = 1;
  for (int i = 0; i < cal_ncases; i++) {
    const Case *k = &cal_cases[i];
    if (k->aux || k->cls != K_POOL || k->bwd) continue;
    const snrt_pool_t *p = &k->pool;
    fprintf(f, "%s\n    {\"kind\": \"%s\", \"n\": %d, \"c\": %d, \"hw\": %d, \"ksize\": %d, \"stride\": %d, "
            "\"pad\": %d, \"forward_s\": %.4g, \"backward_s\": %.4g}", first ? "" : ",", k->which ? "avg" : "max",
            p->n, p->c, p->h, p->kh, p->sh, p->pt, k->s, cal_cases[i + 1].s);
    first = 0;
  }
  fprintf(f, "\n  ],\n  \"gemm_shapes\": [");
  first = 1;
  for (int i = 0; i < cal_ncases; i++) {
    const Case *k = &cal_cases[i];
    if (k->aux || k->cls != K_GEMM) continue;
    const snrt_mm_t *p = &k->mm;
    fprintf(f, "%s\n    {\"batch\": %lld, \"m\": %lld, \"n\": %lld, \"k\": %lld, \"trans_a\": %d, "
            "\"trans_b\": %d, \"shared_b\": %d, \"seconds\": %.4g}", first ? "" : ",", (long long)p->batch,
            (long long)p->m, (long long)p->n, (long long)p->k, p->trans_a, p->trans_b, k->which, k->s);
    first = 0;
  }
  if (PAR_MIN > 0) fprintf(f, "\n  ],\n  \"parallel_min_elements\": %d,\n", PAR_MIN);
  else fprintf(f, "\n  ],\n");
}

/* The device profile (JSON), with how it was measured. */
static void write_profile(FILE *f, double steal0, double total0, const double copy_loss[2],
                          double overhead) {
  double copy_bw[2] = {0, 0};
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  time_t tt = time(NULL);
  char date[64];
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&tt));
  double loads[3] = {0, 0, 0};
  if (getloadavg(loads, 3) < 0) loads[0] = -1;
  double steal1, total1, steal = -1;
  cpu_times(&steal1, &total1);
  if (steal0 >= 0 && steal1 >= 0 && total1 > total0) steal = (steal1 - steal0) / (total1 - total0);
  if (steal > 0.10)
    fprintf(stderr, "snc-calibrate: warning: the host took %.0f%% of this machine's CPU time while the kernels "
            "were timed (steal time): the rates measured are slower than this machine's own; calibrate "
            "again when the host is quiet\n",
            100 * steal);
  double rate[NFIT], ovh[NFIT], par[NFIT], unit[NFIT];
  for (int c = 0; c < NFIT; c++) fit_class(c, &rate[c], &ovh[c], &par[c], &unit[c]);
  for (int dir = 0; dir < 2; dir++) {
    copy_bw[dir] = rate[K_COPY_D2H + dir];
    if (ovh[K_COPY_D2H + dir] < 0) ovh[K_COPY_D2H + dir] = 0;
  }
  fprintf(f, "{\n  \"name\": \"%s-calibrated\",\n", TARGET);
  fprintf(f, "  \"measured\": {\"by\": \"snc-calibrate%s\", \"target\": \"%s\", \"machine\": \"%s\", "
          "\"runtime\": \"%s\", \"date\": \"%s\", \"threads\": %d, \"passes\": %d, \"load_average\": %.2f, \"steal\": %.3f},\n",
          cal_quick ? " --quick" : "", TARGET, host, snrt_dev_describe(&cal_ctx), date, cal_ctx.threads, NPASS,
          loads[0], steal);
  /* The simple model's numbers (a planner that ignores classes): the large
   * convolutions' rate and the elementwise bandwidth. */
  fprintf(f, "  \"flops\": %.4g,\n  \"mem_bw\": %.4g,\n  \"link_bw\": %.4g,\n", rate[K_CONV],
          rate[K_ELEM], copy_bw[0] < copy_bw[1] ? copy_bw[0] : copy_bw[1]);
#ifdef SNRT_CALIBRATE_CUDA
  /* The GPU's own memory and compute capability ("sm": 90 for sm_90; the
   * first H200 run wrote the constants that stood here: 80 GiB and sm_80 for
   * a 139.8 GiB sm_90 card). */
  struct cudaDeviceProp prop;
  int dev = 0;
  long long mem = 85899345920LL;
  int sms = 80;
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
    mem = (long long)prop.totalGlobalMem;
    sms = prop.major * 10 + prop.minor;
  }
  fprintf(f, "  \"mem_bytes\": %lld,\n  \"reserve_bytes\": 2147483648,\n  \"sm\": %d,\n"
             "  \"host_bytes\": 0,\n", mem, sms);
#else
  fprintf(f, "  \"mem_bytes\": 68719476736,\n  \"reserve_bytes\": 0,\n  \"sm\": 0,\n  \"host_bytes\": 0,\n");
#endif
  fprintf(f, "  \"classes\": {\n");
  for (int c = 0; c < NCLASS; c++) {
    fprintf(f, "    \"%s\": {\"%s\": %.4g", cal_class_names[c], by_flops[c] ? "flops" : "bw", rate[c]);
    if (ovh[c] >= 0) fprintf(f, ", \"overhead_s\": %.4g", ovh[c]);
    if (par[c] >= 0) fprintf(f, ", \"parallel_s\": %.4g", par[c]);
    if (unit[c] >= 0) fprintf(f, ", \"%s\": %.4g", unit_name(c), unit[c]);
    fprintf(f, "}%s\n", c + 1 < NCLASS ? "," : "");
  }
  write_shapes(f);
  fprintf(f, "  \"copy\": {\"d2h\": %.4g, \"h2d\": %.4g, \"d2h_s\": %.4g, \"h2d_s\": %.4g, \"d2h_loss\": %.4g, "
          "\"h2d_loss\": %.4g},\n", copy_bw[0], copy_bw[1], ovh[K_COPY_D2H], ovh[K_COPY_H2D], copy_loss[0],
          copy_loss[1]);
  fprintf(f, "  \"step_overhead_s\": %.4g\n}\n", overhead);
}

int main(int argc, char **argv) {
  const char *target = NULL, *out = NULL;
  int threads = 0;
  int rc = parse_args(argc, argv, &target, &out, &threads);
  if (rc >= 0) return rc;
  if (strcmp(target, TARGET)) return exec_other(target, argv);
  /* As the emitted programs do (rt_wait_policy, runtime/common/setup.c): sleeping OpenMP waits. */
  if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT") && !setenv("OMP_WAIT_POLICY", "passive", 1))
    execv("/proc/self/exe", argv);
  if (cal_quick) trial_s = 0.01, rot_bytes = (int64_t)16 << 20;
  double steal0, total0;
  start(threads, &steal0, &total0);
  double loss[2][NPASS];
  run_passes(loss);
  double copy_loss[2];
  double overhead = report_cases(loss, copy_loss);
  FILE *f = out ? fopen(out, "w") : stdout;
  if (!f) {
    fprintf(stderr, "snc-calibrate: error: cannot write '%s'\n", out);
    return 2;
  }
  write_profile(f, steal0, total0, copy_loss, overhead);
  if (out && fclose(f)) {
    fprintf(stderr, "snc-calibrate: error: cannot write '%s'\n", out);
    return 2;
  }
  if (out) fprintf(stderr, "snc-calibrate: wrote %s\n", out);
  snrt_dev_free(&cal_ctx);
  return 0;
}
