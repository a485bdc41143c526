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
/* e^x in float32 without libm, branch-free like kern_tanhf below: x
 * clamped to [-110, 89] (beyond, e^x rounds to 0 or overflows to inf
 * either way), n = round(x / ln2), r = x - n ln2 (|r| <= ln2/2, ln2 in two
 * parts), e^r by its Taylor polynomial of degree 7, times 2^n built from
 * two exponent fields (n = n1 + n2, each a normal power of two, so that
 * results down in the subnormals and up to the overflow are reached).
 * Error: within 2 ulp of exp in double for normal results (subnormal ones
 * within 2 of their spacing); NaN in, NaN out (tests/unit/kt_misc.h). */
static inline float kern_expf(float x) {
  uint32_t xb;
  memcpy(&xb, &x, sizeof xb);
  float c = x < -110.0f ? -110.0f : x;
  c = c > 89.0f ? 89.0f : c;
  float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  /* round to nearest */
  float r = c - n * 0.693145751953125f - n * 1.428606765330187e-06f;
  float e = 1.0f / 5040.0f;
  e = e * r + 1.0f / 720.0f;
  e = e * r + 1.0f / 120.0f;
  e = e * r + 1.0f / 24.0f;
  e = e * r + 1.0f / 6.0f;
  e = e * r + 0.5f;
  e = e * r + 1.0f;
  e = e * r + 1.0f;
  int32_t ni = (int32_t)n, n1 = ni / 2, n2 = ni - n1;
  int32_t b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  float y = e * s1 * s2;
  uint32_t yb;
  memcpy(&yb, &y, sizeof yb);
  yb = (xb & 0x7fffffffu) > 0x7f800000u ? xb : yb;       /* NaN in, NaN out */
  memcpy(&y, &yb, sizeof y);
  return y;
}

/* An odd function's value from its two branches, x's bits xb: small where
 * |x| is below the float whose bits are cut, else big (computed on |x|)
 * with x's sign; NaN in, NaN out. On the bits: float compares may trap, so
 * gcc would not turn them into vector selects. (kern_tanhf, kern_erff) */
static inline float kern_odd_pick(uint32_t xb, uint32_t cut, float small, float big) {
  uint32_t ab = xb & 0x7fffffffu, bb, sb;
  memcpy(&bb, &big, sizeof bb);
  bb |= xb & 0x80000000u;
  memcpy(&sb, &small, sizeof sb);
  uint32_t yb = ab < cut ? sb : bb;
  yb = ab > 0x7f800000u ? xb : yb;
  float y;
  memcpy(&y, &yb, sizeof y);
  return y;
}

/* tanh in float32 without libm, branch-free so that a loop of it
 * vectorizes (libm's scalar tanhf made each GELU-tanh step of the GPT
 * example 6.4 ms: issue "fusion and fast kernels"). Error: at most 2 ulp
 * against tanh in double over every float (tests/test_kernels.py checks a
 * stride of the whole range); NaN in, NaN out.
 *   |x| < 0.625: x + x z q(z), z = x^2, q of degree 4 fitted here
 *                (iteratively reweighted least squares on the relative
 *                error; 4.5e-9 in exact arithmetic);
 *   otherwise:   sign(x) (1 - 2 / (e^(2|x|) + 1)), e^(2|x|) by kern_expf
 *                (above) for 2|x| <= 18 (beyond 9, tanh rounds to 1). */
static inline float kern_tanhf(float x) {
  /* The comparisons are on the bits of |x| (ordered like integers for
   * non-negative floats): float compares may trap, so gcc would not turn
   * them into vector selects. */
  uint32_t xb;
  memcpy(&xb, &x, sizeof xb);
  uint32_t ab = xb & 0x7fffffffu;
  uint32_t cb = ab < 0x41100000u ? ab : 0x41100000u;   /* min(|x|, 9); NaN -> 9 */
  float a;
  memcpy(&a, &cb, sizeof a);
  float z = x * x;
  float q = -5.706121538e-03f;
  q = q * z + 2.064008608e-02f;
  q = q * z - 5.374001365e-02f;
  q = q * z + 1.333144564e-01f;
  q = q * z - 3.333328206e-01f;
  float small = x + x * z * q;
  float big = 1.0f - 2.0f / (kern_expf(2.0f * a) + 1.0f);
  return kern_odd_pick(xb, 0x3f200000u, small, big);     /* |x| < 0.625 */
}

/* erf in float32 without libm, branch-free (a GELU-erf step of BERT-like
 * models, fused or not, was libm's scalar erff). Error: within 3 ulp of erf
 * in double over every float (tests/unit/kt_misc.h checks every 127th and
 * prints the worst); NaN in, NaN out; erf(+-inf) = +-1.
 *   |x| < 0.75: x p(x^2), p the Taylor series of erf(x)/x to x^18 (the
 *               next term is under 1e-9 relative there);
 *   otherwise:  sign(x) (1 - erfc(|x|)), erfc(z) = t exp(-z^2 + r(t)),
 *               t = 1 / (1 + z/2), r of degree 9 (the Chebyshev fit of
 *               Numerical Recipes' erfcc: relative error under 1.2e-7),
 *               exp by kern_expf; z clamped to 10 (erf rounds to 1 from
 *               about 3.9). */
static inline float kern_erff(float x) {
  uint32_t xb;
  memcpy(&xb, &x, sizeof xb);
  uint32_t ab = xb & 0x7fffffffu;
  uint32_t cb = ab < 0x41200000u ? ab : 0x41200000u;   /* min(|x|, 10); NaN -> 10 */
  float z;
  memcpy(&z, &cb, sizeof z);
  float s = x * x;
  float p = -1.0f / 6894720.0f * 1.1283791670955126f;
  p = p * s + 1.0f / 685440.0f * 1.1283791670955126f;
  p = p * s - 1.0f / 75600.0f * 1.1283791670955126f;
  p = p * s + 1.0f / 9360.0f * 1.1283791670955126f;
  p = p * s - 1.0f / 1320.0f * 1.1283791670955126f;
  p = p * s + 1.0f / 216.0f * 1.1283791670955126f;
  p = p * s - 1.0f / 42.0f * 1.1283791670955126f;
  p = p * s + 1.0f / 10.0f * 1.1283791670955126f;
  p = p * s - 1.0f / 3.0f * 1.1283791670955126f;
  p = p * s + 1.1283791670955126f;
  float small = x * p;
  float t = 1.0f / (1.0f + 0.5f * z);
  float r = 0.17087277f;
  r = r * t - 0.82215223f;
  r = r * t + 1.48851587f;
  r = r * t - 1.13520398f;
  r = r * t + 0.27886807f;
  r = r * t - 0.18628806f;
  r = r * t + 0.09678418f;
  r = r * t + 0.37409196f;
  r = r * t + 1.00002368f;
  r = r * t - 1.26551223f;
  float big = 1.0f - t * kern_expf(r - z * z);
  return kern_odd_pick(xb, 0x3f400000u, small, big);     /* |x| < 0.75 */
}

/* x^e: the exponents exporters write computed as torch does (x*x for 2);
 * powf otherwise (Pow and the fused chains, k_seq.c and k_fused.c). */
static inline float kern_pow(float x, float e) {
  if (e == 2.0f) return x * x;
  if (e == 1.0f) return x;
  if (e == 3.0f) return x * x * x;
  if (e == 0.5f) return sqrtf(x);
  return powf(x, e);
}

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
/* OpenBLAS to one thread (its own pool would fight the OpenMP team); call
 * before a parallel region whose threads call kern_sgemm. */
void kern_blas_init(void);

/* k_conv_dnnl.c: the float32 convolutions through oneDNN where it loads;
 * false when that path does not take the conv (k_conv.c runs it). */
bool snrt_conv_dnnl_fwd(const snrt_conv_t *p, const float *x, const float *w, const float *b,
                        float *y);
bool snrt_conv_dnnl_bwd_data(const snrt_conv_t *p, const float *dy, const float *w, float *dx);
bool snrt_conv_dnnl_bwd_filter(const snrt_conv_t *p, const float *x, const float *dy, float *dw);
/* "oneDNN convs" or "im2col convs" (loads oneDNN on the first call; exits on
 * a bad SNRT_CONV), and the bytes of the buffers held for oneDNN. */
const char *snrt_conv_backend(void);
int64_t snrt_conv_dnnl_bytes(void);

#endif
