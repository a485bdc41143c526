/* calibrate.c — build/snc-calibrate: measures a device profile for snc's cost
 * model (compiler/cost.c) on the runtime the emitted programs link against.
 *
 * What it is: a timer of the runtime's own kernels through snrt.h, the calls
 * an emitted train.c makes: convolution forward and backward (data + filter)
 * in shape classes by the GEMM inner dimension K = c/group*kh*kw (below 64:
 * "conv_small", "conv_bwd_small") and 1x1 kernels ("conv_1x1",
 * "conv_bwd_1x1"), GEMMs (each shape kept: "gemm_shapes"), batch
 * normalization forward and backward and softmax backward ("norm"), max and
 * average pooling ("pool"), contiguous activations and adds ("elementwise"),
 * broadcast binary ops, their gradients, a reduction and a transpose
 * ("strided"), erf and softmax ("math"), SGD ("update") and Adam ("adam"),
 * the copy engine in each direction, and the fixed cost of a step (a tiny
 * kernel); bandwidth classes below and above the size where a CPU kernel
 * wakes its thread team, so the fit separates that wake-up ("parallel_s"). Per class it writes the rate the cost model uses:
 * FLOP/s (FLOPs counted as compiler/flops.c counts them) for the convolution
 * and GEMM classes, bytes touched per second (inputs + outputs + workspace,
 * as cost.c counts them) for the others; each the total over its shapes
 * divided by the total time, so a class's rate is what a mix of those
 * shapes runs at. Every timing is the median of several trials.
 *
 * What it is not: a benchmark of peak rates, or a model of every shape.
 * The shapes are those of small CNNs and transformers at batch 16-64 (the
 * examples); a workload far from them may run at other rates.
 *
 * The same source builds for the CUDA runtime (build/snc-calibrate-cuda,
 * where nvcc is found); `--target cuda` runs that binary. Kernels are
 * asynchronous there, so each trial ends with a device synchronisation.
 */
#include "snrt.h"
#include "snrt_dev.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef SNRT_CALIBRATE_CUDA
#define TARGET "cuda"
#else
#define TARGET "cpu"
#endif

/* The cost classes of compiler/cost.c, in its order. */
enum { NCLASS = 14 };
static const char *const class_names[NCLASS] = {
    "conv", "conv_small", "conv_1x1", "conv_bwd", "conv_bwd_small", "conv_bwd_1x1",
    "gemm", "pool", "norm", "elementwise", "update", "adam", "strided", "math"};
enum { K_CONV, K_CONV_SMALL, K_CONV_1X1, K_CONV_BWD, K_CONV_BWD_SMALL, K_CONV_BWD_1X1, K_GEMM,
       K_POOL, K_NORM, K_ELEM, K_UPDATE, K_ADAM, K_STRIDED, K_MATH };
/* Classes rated in FLOP/s (pool: window elements visited per second), the
 * others in bytes/s. */
static const int by_flops[NCLASS] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0};

static double work[NCLASS], seconds[NCLASS];   /* FLOPs or bytes; time */
/* Per class, each measurement (work, seconds), for the fit t = a + work / rate. */
enum { MAXPTS = 96 };
static double pw[NCLASS][MAXPTS], pt[NCLASS][MAXPTS], pn[NCLASS][MAXPTS];   /* pn: images */
static double pp[NCLASS][MAXPTS];   /* 1: the kernel ran as a parallel region (see par_of) */
static int npts[NCLASS];
/* 1: fitted with an intercept (a fixed cost per call: an OpenMP parallel
 * region's start) and a parallel region's start on top of it; 2:
 * convolutions and GEMMs, fitted with a cost per call instead (the CPU
 * kernels run a GEMM per image, or per chunk of images, and a batched
 * MatMul one sgemm per matrix, each with its set-up and the wake-up of
 * OpenBLAS's threads); 0: the aggregate rate. */
static const int fitted[NCLASS] = {2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1};

/* Whether a kernel over `elements` (its largest operand) runs as a parallel
 * region: the CPU kernels wake their thread team above KERN_PAR_MIN
 * elements (runtime/cpu/kern.h), which on a VM with idle vCPUs costs tens to
 * hundreds of microseconds (a vCPU's wake-up). The profile says the
 * threshold ("parallel_min_elements"), cost.c applies it. CUDA: none. */
#ifdef SNRT_CALIBRATE_CUDA
#define PAR_MIN 0
static int par_of(int64_t elements) { (void)elements; return 0; }
#else
#include "cpu/kern.h"
#define PAR_MIN KERN_PAR_MIN
static int par_of(int64_t elements) { return elements > KERN_PAR_MIN; }
#endif

static void record_p(int cls, double w, double t, double images, int par) {
  work[cls] += w, seconds[cls] += t;
  if (npts[cls] < MAXPTS)
    pw[cls][npts[cls]] = w, pn[cls][npts[cls]] = images, pp[cls][npts[cls]] = par, pt[cls][npts[cls]++] = t;
}
static void record_n(int cls, double w, double t, double images) { record_p(cls, w, t, images, 0); }

/* Least squares t = a n + w / rate (n images, w FLOPs) through the origin;
 * where a comes out negative or the system is degenerate, a = 0 and the
 * aggregate rate. */
static void fit_images(int cls, double *rate, double *per_image) {
  double snn = 0, snw = 0, sww = 0, snt = 0, swt = 0;
  for (int i = 0; i < npts[cls]; i++) {
    double n = pn[cls][i], w = pw[cls][i], t = pt[cls][i];
    snn += n * n, snw += n * w, sww += w * w, snt += n * t, swt += w * t;
  }
  double det = snn * sww - snw * snw;
  *per_image = 0;
  if (npts[cls] < 3 || det <= 0) return;
  double a = (snt * sww - swt * snw) / det, b = (snn * swt - snw * snt) / det;
  if (a < 0 || b <= 0) return;
  *rate = 1 / b, *per_image = a;
}

/* Weighted least squares of t over the columns in `use` (bit 0: 1, the
 * fixed cost; bit 1: w, the work; bit 2: the parallel flag), each point
 * weighted by 1/t^2 (relative error: a small kernel's time counts as much
 * as a large one's). x[] gets the coefficients (0 for unused columns).
 * Returns 0 where the system is singular. Gaussian elimination on at most
 * 3 unknowns. */
static int lsq(int cls, int use, double x[3]) {
  int col[3], k = 0;
  for (int j = 0; j < 3; j++)
    if (use >> j & 1) col[k++] = j;
  double m[3][4] = {{0}};
  for (int i = 0; i < npts[cls]; i++) {
    double v[3] = {1, pw[cls][i], pp[cls][i]}, t = pt[cls][i], u = 1 / (t * t);
    for (int r = 0; r < k; r++) {
      for (int c = 0; c < k; c++) m[r][c] += u * v[col[r]] * v[col[c]];
      m[r][k] += u * v[col[r]] * t;
    }
  }
  for (int r = 0; r < k; r++) {
    int piv = r;
    for (int q = r + 1; q < k; q++)
      if (fabs(m[q][r]) > fabs(m[piv][r])) piv = q;
    if (fabs(m[piv][r]) < 1e-300) return 0;
    for (int c = 0; c <= k; c++) { double tmp = m[r][c]; m[r][c] = m[piv][c]; m[piv][c] = tmp; }
    for (int q = 0; q < k; q++) {
      if (q == r) continue;
      double f = m[q][r] / m[r][r];
      for (int c = r; c <= k; c++) m[q][c] -= f * m[r][c];
    }
  }
  x[0] = x[1] = x[2] = 0;
  for (int r = 0; r < k; r++) x[col[r]] = m[r][k] / m[r][r];
  return 1;
}

/* t = a + w / rate + p [parallel]: the first of the models (all three terms;
 * no fixed cost; no parallel term; the slope alone) whose coefficients are
 * all >= 0 (rate > 0). Where the class's points are all serial or all
 * parallel, the parallel term is not identifiable and drops out. overhead a
 * and par_s p: -1 where the fit is degenerate (the aggregate rate then). */
static void fit(int cls, double *rate, double *overhead, double *par_s) {
  int n = npts[cls];
  *rate = seconds[cls] > 0 ? work[cls] / seconds[cls] : 0;
  *overhead = *par_s = -1;
  if (fitted[cls] != 1 || n < 2) return;
  int nparallel = 0;
  for (int i = 0; i < n; i++) nparallel += pp[cls][i] > 0;
  static const int models[] = {7, 6, 3, 2};
  for (int i = 0; i < 4; i++) {
    int use = models[i];
    if ((use & 4) && (nparallel == 0 || nparallel == n || n < 3)) continue;
    double x[3];
    if (!lsq(cls, use, x) || x[0] < 0 || x[1] <= 0 || x[2] < 0) continue;
    *rate = 1 / x[1], *overhead = x[0], *par_s = use & 4 ? x[2] : 0;
    return;
  }
}
static double trial_s = 0.25;                  /* time per measurement (--quick: less) */
static int quick;

static snrt_ctx ctx;
static char *A;              /* device arena base */
static int64_t top;          /* bump allocator over the arena */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static float *alloc_f(int64_t n) {
  int64_t bytes = (n * 4 + SNRT_ALIGN - 1) / SNRT_ALIGN * SNRT_ALIGN;
  if (top + bytes > ctx.m->arena_bytes) {
    fprintf(stderr, "snc-calibrate: error: internal: arena too small for the calibration shapes\n");
    exit(3);
  }
  float *p = (float *)(A + top);
  top += bytes;
  snrt_fill(&ctx, n > 0 ? n : 1, 0.01f, p);
  return p;
}

/* Median seconds per call of fn(arg): trials of enough calls to last
 * trial_s / trials each. */
typedef void (*bench_fn)(void *arg);
static double time_call(bench_fn fn, void *arg) {
  fn(arg);                   /* warm-up (CUDA: algorithm choice, lazy loading) */
  snrt_dev_sync(&ctx);
  double t0 = now();
  fn(arg);
  snrt_dev_sync(&ctx);
  double one = now() - t0;
  enum { TRIALS = 5 };
  int reps = one > 0 ? (int)(trial_s / TRIALS / one) : 1000;
  if (reps < 1) reps = 1;
  if (reps > 100000) reps = 100000;
  double t[TRIALS];
  for (int k = 0; k < TRIALS; k++) {
    double s = now();
    for (int r = 0; r < reps; r++) fn(arg);
    snrt_dev_sync(&ctx);
    t[k] = (now() - s) / reps;
  }
  for (int i = 1; i < TRIALS; i++)   /* insertion sort: 5 values */
    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
      double x = t[j]; t[j] = t[j - 1]; t[j - 1] = x;
    }
  return t[TRIALS / 2];
}

/* Operands rotate over at least this many bytes (beyond the caches). */
enum { ROT_BYTES = 64 << 20 };

/* ---- convolutions ---- */

typedef struct ConvCase {
  snrt_conv_t p;
  float *x, *w, *b, *y, *dy, *dx, *dw, *ws;
} ConvCase;

/* Buffers of a case are rotated (ROT_BYTES below): each call takes the next
 * copy, so its operands come from memory, as in a training step. */
enum { NROT = 16 };
typedef struct Rot { void *arg[NROT]; int n, cur; } Rot;
static void *rot_next(Rot *r) { return r->arg[r->cur = (r->cur + 1) % r->n]; }

static void conv_fwd(void *a) {
  ConvCase *k = rot_next(a);
  snrt_conv_fwd(&ctx, &k->p, k->x, k->w, k->b, k->y, k->ws);
}
static void conv_bwd(void *a) {
  ConvCase *k = rot_next(a);
  snrt_conv_bwd_data(&ctx, &k->p, k->dy, k->w, k->dx, k->ws);
  snrt_conv_bwd_filter(&ctx, &k->p, k->x, k->dy, k->dw, k->ws);
}

/* Every convolution measured: the cost model takes the rate of the nearest
 * of them (compiler/cost.c), the class rate where a profile has none. */
typedef struct ConvShape { int kind, n, c, hw, k, ksz, stride; double fwd_s, bwd_s; } ConvShape;
enum { MAXSHAPES = 128 };
static ConvShape shapes[MAXSHAPES];
static int nshapes;

static void conv_case(int n, int c, int hw, int k, int ksz, int stride) {
  int pad = ksz / 2, o = (hw + 2 * pad - ksz) / stride + 1;
  snrt_conv_t p = {.n = n, .c = c, .h = hw, .w = hw, .k = k, .oh = o, .ow = o, .kh = ksz,
                   .kw = ksz, .sh = stride, .sw = stride, .pt = pad, .pl = pad, .dh = 1,
                   .dw = 1, .group = 1, .ws_images = n};
  p.ws_bytes = snrt_conv_ws_bytes(&p);
  int64_t mark = top;
  int64_t nx = (int64_t)n * c * hw * hw, ny = (int64_t)n * k * o * o, nw = (int64_t)k * c * ksz * ksz;
  static ConvCase cases[NROT];
  Rot rot = {.n = (int)(ROT_BYTES / (8 * (2 * nx + 2 * ny + 2 * nw)) + 1)};
  if (rot.n > NROT) rot.n = NROT;
  float *ws = alloc_f(p.ws_bytes / 4 + 1);
  for (int r = 0; r < rot.n; r++) {
    ConvCase *cc = &cases[r];
    *cc = (ConvCase){.p = p, .ws = ws};
    cc->x = alloc_f(nx), cc->w = alloc_f(nw), cc->b = alloc_f(k), cc->y = alloc_f(ny);
    cc->dy = alloc_f(ny), cc->dx = alloc_f(nx), cc->dw = alloc_f(nw);
    rot.arg[r] = cc;
  }
  double fl = 2.0 * n * k * o * o * (double)c * ksz * ksz;
  int kind = (int64_t)c * ksz * ksz < 64 ? 1 : ksz == 1 ? 2 : 0;   /* as cost.c's conv_kind */
  double tf = time_call(conv_fwd, &rot), tb = time_call(conv_bwd, &rot);
  int cf = K_CONV + kind, cb = K_CONV_BWD + kind;
  if (nshapes < MAXSHAPES)
    shapes[nshapes++] = (ConvShape){kind, n, c, hw, k, ksz, stride, tf, tb};
  record_n(cf, fl, tf, n);
  record_n(cb, 2 * fl, tb, 2.0 * n);   /* two kernels, each over the batch */
  fprintf(stderr, "  conv n%d c%d %dx%d k%d %dx%d/%d: forward %.3f ms (%.1f GFLOP/s), "
          "backward %.3f ms (%.1f GFLOP/s)\n", n, c, hw, hw, k, ksz, ksz, stride, tf * 1e3,
          fl / tf / 1e9, tb * 1e3, 2 * fl / tb / 1e9);
  top = mark;
}

/* ---- GEMM ---- */

typedef struct MmCase { snrt_mm_t p; float *a, *b, *y; } MmCase;
static void mm(void *a) {
  MmCase *k = rot_next(a);
  snrt_matmul(&ctx, &k->p, k->a, k->b, k->y);
}
/* Every GEMM measured: the cost model takes the rate of the nearest
 * (compiler/cost.c). bcast: B shared by the batch (stride 0: a linear layer
 * applied to a [batch, T, C] activation). */
typedef struct GemmShape { int64_t batch, m, n, k; int ta, tb, bcast; double s; } GemmShape;
static GemmShape gemms[MAXSHAPES];
static int ngemms;

static void mm_case(int64_t batch, int64_t m, int64_t n, int64_t k, int ta, int tb, int bcast) {
  int64_t mark = top;
  static MmCase cases[NROT];
  Rot rot = {.n = (int)(ROT_BYTES / (4 * batch * (m * k + k * n + m * n)) + 1)};
  if (rot.n > NROT) rot.n = NROT;
  for (int r = 0; r < rot.n; r++) {
    MmCase *c = &cases[r];
    *c = (MmCase){.p = {.batch = batch, .m = m, .n = n, .k = k, .trans_a = ta, .trans_b = tb,
                        .alpha = 1, .beta = 0, .stride_a = m * k, .stride_b = bcast ? 0 : k * n,
                        .stride_y = m * n}};
    c->a = alloc_f(batch * m * k), c->b = alloc_f(batch * k * n), c->y = alloc_f(batch * m * n);
    rot.arg[r] = c;
  }
  double fl = 2.0 * batch * m * n * k, t = time_call(mm, &rot);
  record_n(K_GEMM, fl, t, (double)batch);   /* one sgemm per matrix of the batch */
  if (ngemms < MAXSHAPES) gemms[ngemms++] = (GemmShape){batch, m, n, k, ta, tb, bcast, t};
  fprintf(stderr, "  gemm %lldx(%lldx%lld)%sx(%lldx%lld)%s%s: %.3f ms (%.1f GFLOP/s)\n", (long long)batch,
          (long long)m, (long long)k, ta ? "^T" : "", (long long)k, (long long)n, tb ? "^T" : "",
          bcast ? " (B shared)" : "", t * 1e3, fl / t / 1e9);
  top = mark;
}

/* ---- bandwidth classes ---- */

/* A training step's activations were mostly written several kernels
 * earlier, so they come from memory, not from the cache: each call takes
 * the next of `rot` copies of its buffers (at least 64 MiB in all). */
enum { MAXROT = 64 };
typedef struct EwCase {
  int64_t n;
  int c, hw;
  float *x, *y, *z, *s, *b, *rm, *rv, *sm, *si, *ds, *db;
  int which;
  int rot, cur;
  float *xs[MAXROT], *ys[MAXROT], *zs[MAXROT];
} EwCase;

static void ew(void *a) {
  EwCase *k = a;
  k->cur = (k->cur + 1) % k->rot;
  k->x = k->xs[k->cur], k->y = k->ys[k->cur], k->z = k->zs[k->cur];
  switch (k->which) {
  case 0: {
    snrt_unary_t p = {.n = k->n, .kind = SNRT_RELU, .lo = -3e38f, .hi = 3e38f};
    snrt_unary_fwd(&ctx, &p, k->x, k->y);
    break;
  }
  case 1: {
    snrt_unary_t p = {.n = k->n, .kind = SNRT_RELU, .lo = -3e38f, .hi = 3e38f};
    snrt_unary_bwd(&ctx, &p, k->x, k->y, k->z, k->z);
    break;
  }
  case 2: snrt_add(&ctx, k->n, k->x, k->y, k->z); break;
  case 8: {   /* a row vector broadcast over (n / 64, 64): a bias, a LayerNorm's scale */
    snrt_binary_t p = {.kind = SNRT_MUL, .rank = 2, .n = k->n, .dims = {k->n / 64, 64},
                       .sa = {64, 1}, .sb = {0, 1}, .na = k->n, .nb = 64};
    snrt_binary_fwd(&ctx, &p, k->x, k->y, k->z);
    break;
  }
  case 15: {   /* Add of two tensors of one shape (a residual), as the emitted Add calls it */
    snrt_binary_t p = {.kind = SNRT_ADD, .rank = 1, .n = k->n, .dims = {k->n}, .sa = {1}, .sb = {1},
                       .na = k->n, .nb = k->n};
    snrt_binary_fwd(&ctx, &p, k->x, k->y, k->z);
    break;
  }
  case 9: {   /* the gradient of a row vector broadcast over (n / 64, 64): a bias's */
    snrt_binary_t p = {.kind = SNRT_ADD, .rank = 2, .n = k->n, .dims = {k->n / 64, 64},
                       .sa = {64, 1}, .sb = {0, 1}, .na = k->n, .nb = 64};
    snrt_binary_bwd(&ctx, &p, NULL, NULL, k->x, k->y, k->s);
    break;
  }
  case 10: {   /* a mean over rows of 64 (LayerNorm's ReduceMean) */
    snrt_reduce_t p = {.rank = 2, .n_big = k->n, .n_small = k->n / 64, .dims = {k->n / 64, 64},
                       .ss = {1, 0}, .scale = 1.0f / 64};
    snrt_reduce(&ctx, &p, k->x, k->y);
    break;
  }
  case 11: {   /* (n / 4096, 64, 64) -> its last two dims swapped (attention heads) */
    snrt_transpose_t p = {.rank = 3, .n = k->n, .in_dims = {k->n / 4096, 64, 64}, .perm = {0, 2, 1}};
    snrt_transpose(&ctx, &p, k->x, k->y);
    break;
  }
  case 12: {
    snrt_math_t p = {.n = k->n, .kind = SNRT_ERF};
    snrt_math_fwd(&ctx, &p, k->x, k->y);
    break;
  }
  case 13: {   /* softmax over rows of 64 (attention) */
    snrt_softmax_t p = {.outer = k->n / 64, .len = 64, .inner = 1};
    snrt_softmax_fwd(&ctx, &p, k->x, k->y);
    break;
  }
  case 14: {
    snrt_softmax_t p = {.outer = k->n / 64, .len = 64, .inner = 1};
    snrt_softmax_bwd(&ctx, &p, k->x, k->y, k->z);
    break;
  }

  case 4: {
    snrt_bn_t p = {.n = (int)(k->n / ((int64_t)k->c * k->hw)), .c = k->c, .hw = k->hw,
                   .eps = 1e-5f, .momentum = 0.9f};
    snrt_bn_fwd_train(&ctx, &p, k->x, k->s, k->b, k->rm, k->rv, k->y, k->sm, k->si);
    break;
  }
  case 5: {
    snrt_bn_t p = {.n = (int)(k->n / ((int64_t)k->c * k->hw)), .c = k->c, .hw = k->hw,
                   .eps = 1e-5f, .momentum = 0.9f};
    snrt_bn_bwd(&ctx, &p, k->x, k->y, k->s, k->sm, k->si, k->z, k->ds, k->db);
    break;
  }
  case 6: {
    snrt_sgd_t p = {.n = k->n, .momentum = 0.9f, .param = -1};
    snrt_sgd(&ctx, &p, k->x, k->y, k->z);
    break;
  }
  case 7: {
    snrt_adam_t p = {.n = k->n, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .param = -1};
    snrt_adam(&ctx, &p, k->x, k->y, k->z, k->s);
    break;
  }
  }
}

/* which: the kernel (ew above); bytes: what cost.c counts for that step. */
static void ew_case(int which, int cls, int64_t n, int c, int hw, double bytes, const char *what) {
  int64_t mark = top;
  EwCase k = {.n = n, .c = c, .hw = hw, .which = which};
  k.rot = (int)(ROT_BYTES / (12 * n) + 1);
  if (k.rot > MAXROT) k.rot = MAXROT;
  for (int r = 0; r < k.rot; r++) k.xs[r] = alloc_f(n), k.ys[r] = alloc_f(n), k.zs[r] = alloc_f(n);
  k.s = alloc_f(which == 7 ? n : c), k.b = alloc_f(c), k.rm = alloc_f(c), k.rv = alloc_f(c);
  k.sm = alloc_f(c), k.si = alloc_f(c), k.ds = alloc_f(c), k.db = alloc_f(c);
  snrt_fill(&ctx, c, 1.0f, k.rv);
  snrt_fill(&ctx, c, 1.0f, k.si);
  double t = time_call(ew, &k);
  record_p(cls, bytes, t, 0, par_of(n));
  fprintf(stderr, "  %s, %lld elements: %.3f ms (%.2f GB/s)\n", what, (long long)n, t * 1e3,
          bytes / t / 1e9);
  top = mark;
}

typedef struct PoolCase { snrt_pool_t p; float *x, *y, *dy, *dx; int avg; } PoolCase;
static void pool_fwd(void *a) {
  PoolCase *k = rot_next(a);
  if (k->avg) snrt_avgpool_fwd(&ctx, &k->p, k->x, k->y);
  else snrt_maxpool_fwd(&ctx, &k->p, k->x, k->y);
}
static void pool_bwd(void *a) {
  PoolCase *k = rot_next(a);
  if (k->avg) snrt_avgpool_bwd(&ctx, &k->p, k->dy, k->dx);
  else snrt_maxpool_bwd(&ctx, &k->p, k->x, k->dy, k->dx);
}

/* Every pooling measured: the cost model takes the rate of the nearest of
 * the same kind (max or average; compiler/cost.c). */
typedef struct PoolShape { int avg, n, c, hw, ksz, stride, pad; double fwd_s, bwd_s; } PoolShape;
static PoolShape pools[MAXSHAPES];
static int npools;

/* Work: window elements visited, n c oh ow kh kw (cost.c counts the same). */
static void pool_case(int n, int c, int hw, int ksz, int stride, int pad, int avg) {
  int64_t mark = top;
  int o = (hw + 2 * pad - ksz) / stride + 1;
  snrt_pool_t p = {.n = n, .c = c, .h = hw, .w = hw, .oh = o, .ow = o, .kh = ksz, .kw = ksz,
                   .sh = stride, .sw = stride, .pt = pad, .pl = pad, .pb = pad, .pr = pad,
                   .dh = 1, .dw = 1};
  int64_t nx = (int64_t)n * c * hw * hw, ny = (int64_t)n * c * o * o;
  static PoolCase cases[NROT];
  Rot rot = {.n = (int)(ROT_BYTES / (8 * (nx + ny)) + 1)};
  if (rot.n > NROT) rot.n = NROT;
  for (int r = 0; r < rot.n; r++) {
    PoolCase *k = &cases[r];
    *k = (PoolCase){.p = p, .avg = avg};
    k->x = alloc_f(nx), k->y = alloc_f(ny), k->dy = alloc_f(ny), k->dx = alloc_f(nx);
    rot.arg[r] = k;
  }
  double w = (double)ny * ksz * ksz, tf = time_call(pool_fwd, &rot), tb = time_call(pool_bwd, &rot);
  record_p(K_POOL, w, tf, 0, par_of(nx));
  record_p(K_POOL, w, tb, 0, par_of(nx));
  if (npools < MAXSHAPES) pools[npools++] = (PoolShape){avg, n, c, hw, ksz, stride, pad, tf, tb};
  fprintf(stderr, "  %s-pool n%d c%d %dx%d %dx%d/%d: forward %.3f ms, backward %.3f ms (%.2f G window "
          "elements/s)\n", avg ? "avg" : "max", n, c, hw, hw, ksz, ksz, stride, tf * 1e3, tb * 1e3,
          2 * w / (tf + tb) / 1e9);
  top = mark;
}

static void tiny(void *a) {
  (void)a;
  snrt_unary_t p = {.n = 16, .kind = SNRT_RELU, .lo = -3e38f, .hi = 3e38f};
  snrt_unary_fwd(&ctx, &p, (float *)A, (float *)(A + SNRT_ALIGN));
}

typedef struct CopyCase { int64_t bytes; int dir; int ev; } CopyCase;
static void copy1(void *a) {
  CopyCase *k = a;
  if (k->dir == 0) snrt_offload(&ctx, 0, 0, k->bytes, k->ev);
  else snrt_prefetch(&ctx, 0, 0, k->bytes, k->ev);
  snrt_wait(&ctx, k->ev);
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

int main(int argc, char **argv) {
  const char *target = NULL, *out = NULL;
  int threads = 0;
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    if (!strcmp(s, "-h") || !strcmp(s, "--help")) usage(0);
    else if (!strcmp(s, "--quick")) quick = 1;
    else if ((!strcmp(s, "--target") || !strcmp(s, "-o") || !strcmp(s, "--threads")) && i + 1 < argc) {
      const char *v = argv[++i];
      if (!strcmp(s, "--target")) target = v;
      else if (!strcmp(s, "-o")) out = v;
      else {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n < 1 || n > 4096) {
          fprintf(stderr, "snc-calibrate: error: --threads wants a number from 1, not '%s'\n", v);
          return 1;
        }
        threads = (int)n;
      }
    } else {
      fprintf(stderr, "snc-calibrate: error: unknown or incomplete argument '%s'\n", s);
      usage(1);
    }
  }
  if (!target) {
    fprintf(stderr, "snc-calibrate: error: --target cpu|cuda is required\n");
    usage(1);
  }
  if (strcmp(target, "cpu") && strcmp(target, "cuda")) {
    fprintf(stderr, "snc-calibrate: error: unknown target '%s' (cpu or cuda)\n", target);
    return 1;
  }
  if (strcmp(target, TARGET)) {
    /* The other runtime is the other binary, built beside this one. */
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
  /* As the emitted programs do (runtime/common/main.c): sleeping OpenMP waits. */
  if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT") && !setenv("OMP_WAIT_POLICY", "passive", 1))
    execv("/proc/self/exe", argv);
  if (quick) trial_s = 0.01;

  static snrt_model m = {.name = "snc-calibrate", .policy = "calibrate", .device = "calibrate"};
  m.arena_bytes = (int64_t)320 << 20;
  m.host_bytes = (int64_t)64 << 20;
  ctx.m = &m;
  ctx.threads = threads;
  ctx.lr = 0.01f;
  snrt_dev_init(&ctx);
  A = snrt_arena(&ctx);
  top = 2 * SNRT_ALIGN;
  fprintf(stderr, "snc-calibrate: %s%s\n", snrt_dev_describe(&ctx), quick ? " (--quick)" : "");

  int nb = quick ? 4 : 16;   /* images per convolution batch */
  /* Convolutions: first layers (K < 64) and the 3x3 / 1x1 body of ResNets
   * and small CNNs at 32 px and below. */
  conv_case(nb * (quick ? 1 : 4), 1, 28, 32, 3, 1);
  conv_case(nb, 3, 32, 64, 3, 1);
  conv_case(nb * (quick ? 1 : 4), 32, 14, 64, 3, 1);
  conv_case(nb, 64, 32, 64, 3, 1);
  conv_case(nb, 64, 16, 256, 1, 1);
  conv_case(nb, 512, 2, 128, 1, 1);
  conv_case(nb, 128, 4, 128, 3, 1);
  if (!quick) {
    conv_case(nb, 3, 32, 64, 7, 2);
    conv_case(nb, 128, 16, 128, 3, 1);
    conv_case(nb, 256, 8, 256, 3, 1);
    conv_case(nb, 256, 2, 256, 3, 1);
    conv_case(nb, 512, 1, 512, 3, 1);
    conv_case(nb, 128, 16, 256, 3, 2);
    conv_case(nb, 256, 8, 64, 1, 1);
    conv_case(nb, 64, 8, 256, 1, 1);
    conv_case(nb, 512, 4, 128, 1, 1);
    conv_case(nb, 1024, 1, 256, 1, 1);
    conv_case(nb, 256, 2, 1024, 1, 1);
    conv_case(nb, 192, 8, 64, 1, 1);
    /* ResNet bodies at 32 px (8x8 down to 1x1) and GoogLeNet's branches at
     * 64 px (16x16 down to 2x2). */
    conv_case(nb, 64, 8, 64, 3, 1);
    conv_case(nb, 64, 8, 128, 3, 2);
    conv_case(nb, 128, 4, 128, 3, 1);
    conv_case(nb, 128, 4, 256, 3, 2);
    conv_case(nb, 256, 2, 512, 3, 2);
    conv_case(nb, 64, 8, 64, 1, 1);
    conv_case(nb, 256, 8, 128, 1, 1);
    conv_case(nb, 512, 4, 256, 1, 1);
    conv_case(nb, 1024, 2, 512, 1, 1);
    conv_case(nb, 2048, 1, 512, 1, 1);
    conv_case(nb, 512, 1, 2048, 1, 1);
    conv_case(nb, 64, 8, 128, 1, 2);
    conv_case(nb, 64, 16, 192, 3, 1);
    conv_case(nb, 96, 8, 128, 3, 1);
    conv_case(nb, 16, 8, 32, 3, 1);
    conv_case(nb, 480, 4, 192, 1, 1);
    conv_case(nb, 112, 4, 224, 3, 1);
    conv_case(nb, 832, 2, 384, 1, 1);
    conv_case(nb, 192, 2, 384, 3, 1);
  }
  /* Pooling: 2x2/2, 3x3/2 and 3x3/1 windows (GoogLeNet's branches), global. */
  pool_case(nb * (quick ? 1 : 4), 32, 28, 2, 2, 0, 0);
  pool_case(nb, 64, 16, 3, 2, 1, 0);
  pool_case(nb, 192, 8, 3, 1, 1, 0);
  pool_case(nb, 512, 4, 4, 4, 0, 1);
  pool_case(nb, 512, 1, 1, 1, 0, 1);   /* global average pooling of a 1x1 map (ResNets at 32 px) */
  if (!quick) {
    pool_case(nb, 64, 32, 3, 2, 1, 0);
    pool_case(nb, 1024, 2, 2, 2, 0, 1);
    pool_case(nb, 2048, 1, 1, 1, 0, 1);
    pool_case(nb, 832, 4, 3, 2, 1, 0);
    pool_case(nb, 256, 16, 3, 1, 1, 0);
    pool_case(nb, 480, 4, 3, 1, 1, 0);
    pool_case(nb, 2048, 2, 2, 2, 0, 1);
  }
  /* GEMMs: dense layers (a classifier's small ones too, their gradients
   * with a transposed operand) and a transformer's projections and MLP over
   * [batch, T, C] (one sgemm per sequence, the weight shared), their weight
   * gradients (the batch folded into K) and attention (per head). */
  mm_case(1, 64, 64, 3136, 0, 1, 0);
  mm_case(1, 64, 10, 64, 0, 1, 0);
  mm_case(nb, 64, 192, 64, 0, 0, 1);
  mm_case(1, 64, 192, 64 * nb, 1, 0, 0);
  mm_case(nb, 64, 64, 256, 0, 1, 1);
  mm_case(4 * nb, 64, 64, 16, 0, 0, 0);
  mm_case(1, 1000, 512, nb, 1, 0, 0);
  if (!quick) {
    mm_case(1, 64, 64, 10, 0, 0, 0);
    mm_case(1, 64, 3136, 64, 1, 0, 0);
    mm_case(1, 1024, 256, 1024, 0, 0, 0);
    mm_case(nb, 64, 256, 64, 0, 0, 1);
    mm_case(nb, 64, 64, 64, 0, 1, 1);
    mm_case(nb, 64, 64, 192, 0, 1, 1);
    mm_case(1, 64, 256, 1024, 1, 0, 0);
    mm_case(1, 256, 64, 1024, 1, 0, 0);
    mm_case(1, 64, 64, 1024, 1, 0, 0);
    mm_case(64, 64, 16, 64, 0, 0, 0);
    mm_case(64, 16, 64, 64, 1, 0, 0);
    mm_case(1, 16, 1000, 512, 0, 1, 0);
    mm_case(1, 16, 512, 1000, 0, 0, 0);
    mm_case(1, 16, 1000, 2048, 0, 1, 0);
    mm_case(1, 16, 2048, 1000, 0, 0, 0);
    mm_case(1, 1000, 2048, 16, 1, 0, 0);
  }
  /* Bandwidth: activations of 16 K to 4 M floats (the step's bytes touched as
   * cost.c counts them: inputs + outputs), fitted with a fixed cost per call. */
  int64_t lo = 1 << 12, big = quick ? (1 << 18) : (1 << 22);
  for (int64_t n = lo; n <= big; n *= 4) {
    ew_case(0, K_ELEM, n, 64, 256, 8.0 * n, "relu forward");
    ew_case(1, K_ELEM, n, 64, 256, 16.0 * n, "relu backward");
    ew_case(2, K_ELEM, n, 64, 256, 12.0 * n, "add");
    ew_case(8, K_STRIDED, n, 64, 256, 8.0 * n + 256, "broadcast multiply");
    ew_case(15, K_STRIDED, n, 64, 256, 12.0 * n, "Add, one shape");
    ew_case(9, K_STRIDED, n, 64, 256, 8.0 * n + 256, "bias gradient (a broadcast's backward)");
    ew_case(10, K_STRIDED, n, 64, 256, 4.0 * n + n / 16, "mean over rows of 64");
    ew_case(11, K_STRIDED, n, 64, 256, 8.0 * n, "transpose");
    ew_case(12, K_MATH, n, 64, 256, 8.0 * n, "erf");
    ew_case(13, K_MATH, n, 64, 256, 8.0 * n, "softmax forward");
    ew_case(14, K_NORM, n, 64, 256, 12.0 * n, "softmax backward");
    if (n >= 64 * 256) ew_case(4, K_NORM, n, 64, 256, 8.0 * n, "batch-norm forward");
    if (n >= 64 * 256) ew_case(5, K_NORM, n, 64, 256, 16.0 * n, "batch-norm backward");
  }
  if (quick) {   /* the norm class needs two sizes for its fit */
    ew_case(4, K_NORM, 1 << 16, 64, 256, 8.0 * (1 << 16), "batch-norm forward");
    ew_case(5, K_NORM, 1 << 16, 64, 256, 16.0 * (1 << 16), "batch-norm backward");
  }
  /* Optimizer updates (biases to large weights): parameters, gradient and
   * state in, parameters and state out. */
  for (int64_t n = 1 << 8; n <= (quick ? (1 << 16) : (1 << 20)); n *= 16) {
    ew_case(6, K_UPDATE, n, 1, 1, 20.0 * n, "sgd");
    ew_case(7, K_ADAM, n, 1, 1, 28.0 * n, "adam");
  }

  /* The copy engine, each direction, issued and waited for. */
  double copy_bw[2];
  for (int dir = 0; dir < 2; dir++) {
    CopyCase k = {.bytes = quick ? (4 << 20) : (32 << 20), .dir = dir, .ev = dir};
    double t = time_call(copy1, &k);
    copy_bw[dir] = k.bytes / t;
    fprintf(stderr, "  copy %s, %lld bytes: %.3f ms (%.2f GB/s)\n", dir ? "to the device" : "to the host",
            (long long)k.bytes, t * 1e3, copy_bw[dir] / 1e9);
  }
  double overhead = time_call(tiny, NULL);
  fprintf(stderr, "  step overhead (a 16-element kernel): %.2f us\n", overhead * 1e6);

  FILE *f = out ? fopen(out, "w") : stdout;
  if (!f) {
    fprintf(stderr, "snc-calibrate: error: cannot write '%s'\n", out);
    return 2;
  }
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  time_t tt = time(NULL);
  char date[64];
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&tt));
  double loads[3] = {0, 0, 0};
  if (getloadavg(loads, 3) < 0) loads[0] = -1;
  double rate[NCLASS], ovh[NCLASS], per_image[NCLASS], par[NCLASS];
  for (int c = 0; c < NCLASS; c++) {
    fit(c, &rate[c], &ovh[c], &par[c]);
    per_image[c] = -1;
    if (fitted[c] == 2) fit_images(c, &rate[c], &per_image[c]);
  }
  fprintf(f, "{\n  \"name\": \"%s-calibrated\",\n", TARGET);
  fprintf(f, "  \"measured\": {\"by\": \"snc-calibrate%s\", \"target\": \"%s\", \"machine\": \"%s\", "
          "\"runtime\": \"%s\", \"date\": \"%s\", \"threads\": %d, \"load_average\": %.2f},\n",
          quick ? " --quick" : "", TARGET, host, snrt_dev_describe(&ctx), date, ctx.threads, loads[0]);
  /* The simple model's numbers (a planner that ignores classes): the large
   * convolutions' rate and the elementwise bandwidth. */
  fprintf(f, "  \"flops\": %.4g,\n  \"mem_bw\": %.4g,\n  \"link_bw\": %.4g,\n", rate[K_CONV],
          rate[K_ELEM], copy_bw[0] < copy_bw[1] ? copy_bw[0] : copy_bw[1]);
#ifdef SNRT_CALIBRATE_CUDA
  fprintf(f, "  \"mem_bytes\": 85899345920,\n  \"reserve_bytes\": 2147483648,\n  \"sm\": 80,\n"
             "  \"host_bytes\": 0,\n");
#else
  fprintf(f, "  \"mem_bytes\": 68719476736,\n  \"reserve_bytes\": 0,\n  \"sm\": 0,\n  \"host_bytes\": 0,\n");
#endif
  fprintf(f, "  \"classes\": {\n");
  for (int c = 0; c < NCLASS; c++) {
    fprintf(f, "    \"%s\": {\"%s\": %.4g", class_names[c], by_flops[c] ? "flops" : "bw", rate[c]);
    if (ovh[c] >= 0) fprintf(f, ", \"overhead_s\": %.4g", ovh[c]);
    if (par[c] >= 0) fprintf(f, ", \"parallel_s\": %.4g", par[c]);
    if (per_image[c] >= 0) fprintf(f, ", \"%s\": %.4g", c == K_GEMM ? "per_call_s" : "per_image_s", per_image[c]);
    fprintf(f, "}%s\n", c + 1 < NCLASS ? "," : "");
  }
  fprintf(f, "  },\n  \"conv_shapes\": [\n");
  for (int i = 0; i < nshapes; i++) {
    const ConvShape *q = &shapes[i];
    fprintf(f, "    {\"class\": \"%s\", \"n\": %d, \"c\": %d, \"hw\": %d, \"k\": %d, \"ksize\": %d, "
            "\"stride\": %d, \"forward_s\": %.4g, \"backward_s\": %.4g}%s\n", class_names[K_CONV + q->kind],
            q->n, q->c, q->hw, q->k, q->ksz, q->stride, q->fwd_s, q->bwd_s, i + 1 < nshapes ? "," : "");
  }
  fprintf(f, "  ],\n  \"pool_shapes\": [\n");
  for (int i = 0; i < npools; i++) {
    const PoolShape *q = &pools[i];
    fprintf(f, "    {\"kind\": \"%s\", \"n\": %d, \"c\": %d, \"hw\": %d, \"ksize\": %d, \"stride\": %d, "
            "\"pad\": %d, \"forward_s\": %.4g, \"backward_s\": %.4g}%s\n", q->avg ? "avg" : "max", q->n, q->c,
            q->hw, q->ksz, q->stride, q->pad, q->fwd_s, q->bwd_s, i + 1 < npools ? "," : "");
  }
  fprintf(f, "  ],\n  \"gemm_shapes\": [\n");
  for (int i = 0; i < ngemms; i++) {
    const GemmShape *q = &gemms[i];
    fprintf(f, "    {\"batch\": %lld, \"m\": %lld, \"n\": %lld, \"k\": %lld, \"trans_a\": %d, "
            "\"trans_b\": %d, \"shared_b\": %d, \"seconds\": %.4g}%s\n", (long long)q->batch,
            (long long)q->m, (long long)q->n, (long long)q->k, q->ta, q->tb, q->bcast, q->s,
            i + 1 < ngemms ? "," : "");
  }
  if (PAR_MIN > 0) fprintf(f, "  ],\n  \"parallel_min_elements\": %d,\n", PAR_MIN);
  else fprintf(f, "  ],\n");
  fprintf(f, "  \"copy\": {\"d2h\": %.4g, \"h2d\": %.4g},\n", copy_bw[0], copy_bw[1]);
  fprintf(f, "  \"step_overhead_s\": %.4g\n}\n", overhead);
  if (out && fclose(f)) {
    fprintf(stderr, "snc-calibrate: error: cannot write '%s'\n", out);
    return 2;
  }
  if (out) fprintf(stderr, "snc-calibrate: wrote %s\n", out);
  snrt_dev_free(&ctx);
  return 0;
}
