/* fit.c — snc-calibrate's fits: per cost class, the rate and the fixed costs
 * compiler/plan/cost.c adds, from the cases' median times.
 *
 * Model: t = a + work / rate + p [parallel] + u units, where a is a fixed
 * cost per step (a call), p the wake-up of the CPU kernels' thread team
 * (cases that ran as a parallel region), and u a cost per unit: per image of
 * a convolution (the CPU kernels run a GEMM per image, with its im2col),
 * per sgemm call of a GEMM (a batched MatMul calls one per matrix), per
 * contiguous row of a normalization (a BN channel of one image, a LayerNorm
 * or softmax row: the kernels' loops restart per row, so a 1x1 map costs far
 * more per element than a 32x32 one). GEMMs have no fixed cost a (their
 * per-call term covers it); a convolution's is its call's own (oneDNN's
 * reorders into and out of its blocked layouts and a parallel region:
 * about a third of a millisecond on the 2-core VM, most of a small deep
 * layer's time), which compiler/plan/devices.c takes out of each measured
 * shape's time before it turns it into a rate. The copy engine, per direction,
 * is fitted the same way: a per copy (the copy thread's wake-up and the
 * waiter's), bytes over the rate.
 *
 * Least squares on relative errors (each point weighted by 1/t^2, so a small
 * kernel's time counts as much as a large one's), over a ladder of models
 * from all terms down to the rate alone; the first whose coefficients all
 * come out >= 0 wins (a negative term is dropped, not kept). A term the
 * class's points cannot identify (no parallel points, or only parallel
 * ones; no units) is left out. Where no model fits, the aggregate rate
 * (total work over total time) and no fixed costs. */
#include "calibrate.h"

#include <math.h>

enum { MAXPTS = 160 };
static double pw[NFIT][MAXPTS], pt[NFIT][MAXPTS], pu[NFIT][MAXPTS], pp[NFIT][MAXPTS];
static double work_sum[NFIT], time_sum[NFIT];
static int npts[NFIT];

void fit_record(int cls, double work, double seconds, double units, int par) {
  if (cls < 0 || cls >= NFIT) return;
  work_sum[cls] += work, time_sum[cls] += seconds;
  if (npts[cls] >= MAXPTS) return;
  int i = npts[cls]++;
  pw[cls][i] = work, pt[cls][i] = seconds, pu[cls][i] = units, pp[cls][i] = par;
}

/* Weighted least squares of t over the columns in `use` (bit 0: 1, the fixed
 * cost; bit 1: the work; bit 2: the parallel flag; bit 3: the units). x[]
 * gets the coefficients (0 for unused columns). Returns 0 where the system is
 * singular. Gaussian elimination with partial pivoting on at most 4 unknowns. */
static int lsq(int cls, int use, double x[4]) {
  int col[4], k = 0;
  for (int j = 0; j < 4; j++)
    if (use >> j & 1) col[k++] = j;
  double m[4][5] = {{0}};
  for (int i = 0; i < npts[cls]; i++) {
    double v[4] = {1, pw[cls][i], pp[cls][i], pu[cls][i]}, t = pt[cls][i], w = 1 / (t * t);
    for (int r = 0; r < k; r++) {
      for (int c = 0; c < k; c++) m[r][c] += w * v[col[r]] * v[col[c]];
      m[r][k] += w * v[col[r]] * t;
    }
  }
  for (int r = 0; r < k; r++) {
    int piv = r;
    for (int q = r + 1; q < k; q++)
      if (fabs(m[q][r]) > fabs(m[piv][r])) piv = q;
    if (fabs(m[piv][r]) < 1e-300) return 0;
    for (int c = 0; c <= k; c++) {
      double tmp = m[r][c];
      m[r][c] = m[piv][c], m[piv][c] = tmp;
    }
    for (int q = 0; q < k; q++) {
      if (q == r) continue;
      double f = m[q][r] / m[r][r];
      for (int c = r; c <= k; c++) m[q][c] -= f * m[r][c];
    }
  }
  x[0] = x[1] = x[2] = x[3] = 0;
  for (int r = 0; r < k; r++) x[col[r]] = m[r][k] / m[r][r];
  return 1;
}

void fit_class(int cls, double *rate, double *overhead, double *par_s, double *per_unit) {
  int n = npts[cls];
  *rate = time_sum[cls] > 0 ? work_sum[cls] / time_sum[cls] : 0;
  *overhead = *par_s = *per_unit = -1;
  if (n < 2) return;
  int nparallel = 0, nunits = 0;
  for (int i = 0; i < n; i++) nparallel += pp[cls][i] > 0, nunits += pu[cls][i] > 0;
  bool units = nunits == n, conv_like = cls <= K_GEMM, gemm = cls == K_GEMM;
  bool par = !conv_like && nparallel > 0 && nparallel < n;
  /* From all terms down to the rate alone: fixed cost (1), parallel (4),
   * units (8) dropped in turn; the work (2) always in. */
  static const int ladder[] = {15, 14, 11, 10, 7, 6, 3, 2};
  for (int i = 0; i < (int)(sizeof ladder / sizeof ladder[0]); i++) {
    int use = ladder[i];
    if (((use & 8) && !units) || ((use & 4) && !par) || ((use & 1) && gemm)) continue;
    int terms = __builtin_popcount((unsigned)use);
    if (n < terms + 1 && terms > 1) continue;
    double x[4];
    if (!lsq(cls, use, x) || x[0] < 0 || x[1] <= 0 || x[2] < 0 || x[3] < 0) continue;
    *rate = 1 / x[1];
    *overhead = gemm ? -1 : x[0];
    *par_s = conv_like ? -1 : (use & 4 ? x[2] : 0);
    *per_unit = units ? x[3] : -1;
    return;
  }
}
