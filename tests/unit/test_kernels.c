/* test_kernels.c — unit tests of the CPU kernels (runtime/cpu/k_*.c).
 *
 * Three kinds of check, each able to fail:
 *  1. forward kernels against naive reference loops written here (in double),
 *     including the edge cases: conv groups/dilation/stride/asymmetric pads and
 *     every code path (batched chunks, per-image, 1x1 without workspace,
 *     direct depthwise), pooling with count_include_pad and ceil_mode windows,
 *     max-pool ties, negative pads, negative slice steps;
 *  2. every backward kernel against central finite differences of its forward:
 *     L = sum(r * y) for a fixed random r (accumulated in double), dL/dx_i ~
 *     (L(x_i + eps) - L(x_i - eps)) / 2eps, compared with the backward kernel
 *     fed dy = r;
 *  3. determinism: the same call twice gives the same bits (memcmp).
 * Outputs are pre-filled with NaN (a kernel must overwrite, never read them)
 * and followed by a canary (a kernel must not write past them).
 * The context is a test-only one; snrt_grad_ready is a weak stand-in here (the
 * runtime's real one wins when it is linked in).
 * Exits 1 on any failure; prints the worst finite-difference error per kernel. */
#include "snrt.h"
#include "snrt_dev.h"
#include "cpu/kern.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails, checks;
#define ASSERT(cond, ...)                                                                 \
  do {                                                                                    \
    checks++;                                                                             \
    if (!(cond)) {                                                                        \
      fails++;                                                                            \
      fprintf(stderr, "%s:%d: FAIL: %s: ", __FILE__, __LINE__, #cond);                    \
      fprintf(stderr, __VA_ARGS__);                                                       \
      fputc('\n', stderr);                                                                \
    }                                                                                     \
  } while (0)

__attribute__((weak)) void snrt_grad_ready(snrt_ctx *c, int param, const float *g, int64_t n) {
  (void)c; (void)param; (void)g; (void)n;
}

static struct snrt_ctx ctx;

/* ---- buffers with canaries ------------------------------------------------ */

#define CANARY 16
static const float canary_val = 12345.678f;

static float *buf(int64_t n) {
  float *p = malloc(sizeof(float) * (n + CANARY));
  for (int64_t i = 0; i < n; i++) p[i] = NAN;
  for (int i = 0; i < CANARY; i++) p[n + i] = canary_val;
  return p;
}
static int canary_ok(const float *p, int64_t n) {
  for (int i = 0; i < CANARY; i++)
    if (p[n + i] != canary_val) return 0;
  return 1;
}
static void nanfill(float *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) p[i] = NAN;
}

static uint64_t rng_state = 0x1234567;
static double urand(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}
/* Uniform in [-1, 1), but at least `gap` away from 0 (keeps FD off kinks). */
static float rnd(float gap) {
  double u = urand() * 2 - 1;
  if (fabs(u) < gap) u = u < 0 ? u - gap : u + gap;
  return (float)u;
}
static float *rbuf(int64_t n, float gap) {
  float *p = buf(n);
  for (int64_t i = 0; i < n; i++) p[i] = rnd(gap);
  return p;
}

/* max |a - b| / max(1, max|b|) */
static double cmp(const float *a, const double *ref, int64_t n) {
  double e = 0, m = 1;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs(a[i] - ref[i]);
    if (isnan(a[i]) || isnan(ref[i])) d = INFINITY;
    if (d > e) e = d;
    if (fabs(ref[i]) > m) m = fabs(ref[i]);
  }
  return e / m;
}

/* ---- finite differences ------------------------------------------------------ */

/* A forward under test: computes y (ny floats) from whatever its state holds. */
typedef struct fdcase {
  void (*fwd)(struct fdcase *);
  float *y;
  int64_t ny;
  const float *r;
  void *st;
} fdcase;

static double loss_of(fdcase *f) {
  f->fwd(f);
  double s = 0;
  for (int64_t i = 0; i < f->ny; i++) s += (double)f->r[i] * f->y[i];
  return s;
}

/* Worst error of the analytic gradient `an` of x (nx floats) against central
 * differences, scaled: max |fd - an| / max(1, max |an|). Checks every element
 * up to 48, then a random sample. */
static double fd_check(fdcase *f, float *x, int64_t nx, const float *an, float eps) {
  double e = 0, m = 1;
  int64_t count = nx <= 48 ? nx : 48;
  for (int64_t t = 0; t < count; t++) {
    int64_t i = nx <= 48 ? t : (int64_t)(urand() * nx);
    float keep = x[i];
    x[i] = keep + eps;
    double lp = loss_of(f);
    x[i] = keep - eps;
    double lm = loss_of(f);
    x[i] = keep;
    /* the step actually taken in float */
    double h = (double)(keep + eps) - (double)(keep - eps);
    double fd = (lp - lm) / h;
    double d = fabs(fd - an[i]);
    if (isnan(an[i])) d = INFINITY;
    if (d > e) e = d;
    if (fabs(an[i]) > m) m = fabs(an[i]);
  }
  loss_of(f);
  return e / m;
}

/* Tolerances. Linear kernels: FD is exact up to the float rounding of y;
 * with |y| ~ 1 and <= ~1000 outputs, the rounding error of L is ~1e-7 per
 * term, random in sign (~sqrt(1000) * 1e-7 = 3e-6), divided by 2 eps = 2e-2:
 * ~2e-4 at worst, ~1e-5 seen. Smooth nonlinear kernels add the truncation
 * error eps^2 * f'''/6: ~2e-5 relative at eps = 1e-2 for the activations,
 * BN, LRN, softmax; Div (|b| >= 0.5, f''' = 6a/b^4 <= 96) uses eps = 3e-3
 * (1.5e-4). 1e-3 keeps a margin over all of these and still catches a term
 * off by 1% (a wrong index or sign is off by O(1)). */
#define TOL_FD 1e-3
#define TOL_FWD 1e-5

static const char *worst_name[64];
static double worst_err[64];
static int nworst;
static void record(const char *name, double e) {
  for (int i = 0; i < nworst; i++)
    if (!strcmp(worst_name[i], name)) {
      if (e > worst_err[i]) worst_err[i] = e;
      return;
    }
  worst_name[nworst] = name;
  worst_err[nworst++] = e;
}
#define FD_ASSERT(name, e)                                  \
  do {                                                      \
    double e_ = (e);                                        \
    record(name, e_);                                       \
    ASSERT(e_ <= TOL_FD, "%s: fd error %.3g", name, e_);    \
  } while (0)

#include "kt_layers.h"
#include "kt_misc.h"
#include "kt_where.h"

int main(void) {
  ctx.lr = 0.1f;
  ctx.step = 0;
  ctx.seed = 42;
  ctx.threads = 2;
  omp_set_num_threads(2);
  test_conv();
  test_pool();
  test_bn();
  test_lrn();
  test_unary();
  test_tanh_accuracy();
  test_erf_accuracy();
  test_exp_accuracy();
  test_binary();
  test_where3();
  test_reduce();
  test_matmul_bias();
  test_shape();
  test_softmax_loss();
  test_dropout();
  test_optim();
  test_determinism();
  printf("worst finite-difference errors (scaled: max|fd-an|/max(1,max|an|)):\n");
  for (int i = 0; i < nworst; i++) printf("  %-22s %.3g\n", worst_name[i], worst_err[i]);
  printf("%d checks, %d failures\n", checks, fails);
  return fails ? 1 : 0;
}
