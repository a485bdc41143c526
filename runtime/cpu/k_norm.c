/* k_norm.c — BatchNormalization (training, recompute-from-saved, inference,
 * backward) and LRN (ONNX, forward and backward) on the CPU.
 *
 * BN: statistics over (n, hw) per channel, summed in double in a fixed order
 * (one thread owns a channel: deterministic). Normalization uses the biased
 * batch variance; the running variance is updated with the unbiased one, the
 * ONNX momentum convention (running = running*momentum + batch*(1-momentum)).
 * The training forward saves mean and 1/sqrt(var+eps); y is computed from
 * those saved floats by the same expression as snrt_bn_fwd_saved, so a
 * recomputed y is bit-identical to the original.
 *
 * LRN (ONNX): square sum over channels [c - floor((size-1)/2), c +
 * ceil((size-1)/2)], s = bias + alpha/size * sum, y = x * s^-beta.
 * Not here: LayerNormalization (k_seq.c, with the other transformer ops);
 * GroupNorm (not in the op set). */
#include "kern.h"

/* The one normalization expression shared by train and saved forwards. */
static void bn_apply(const snrt_bn_t *p, int ch, const float *x, float scale, float bias,
                     float mean, float invstd, float *y) {
  const float a = invstd * scale;
  for (int i = 0; i < p->n; i++) {
    const float *xp = x + ((int64_t)i * p->c + ch) * p->hw;
    float *yp = y + ((int64_t)i * p->c + ch) * p->hw;
    for (int64_t j = 0; j < p->hw; j++) yp[j] = (xp[j] - mean) * a + bias;
  }
}

void snrt_bn_fwd_train(snrt_ctx *c, const snrt_bn_t *p, const float *x, const float *scale,
                       const float *bias, float *rmean, float *rvar, float *y,
                       float *smean, float *sinvstd) {
  (void)c;
  const double cnt = (double)p->n * p->hw;
#pragma omp parallel for schedule(static) if (p->n * p->hw * p->c > KERN_PAR_MIN)
  for (int ch = 0; ch < p->c; ch++) {
    double acc[KERN_LANES] = {0}, accq[KERN_LANES] = {0};
    for (int i = 0; i < p->n; i++) kern_lsum(acc, x + ((int64_t)i * p->c + ch) * p->hw, p->hw);
    double mean = kern_lanes_total(acc) / cnt;
    for (int i = 0; i < p->n; i++)
      kern_lsqdev(accq, x + ((int64_t)i * p->c + ch) * p->hw, mean, p->hw);
    double q = kern_lanes_total(accq), var = q / cnt;
    float fm = (float)mean, fi = (float)(1.0 / sqrt(var + p->eps));
    smean[ch] = fm;
    sinvstd[ch] = fi;
    double uvar = cnt > 1 ? q / (cnt - 1) : var;
    rmean[ch] = (float)(rmean[ch] * (double)p->momentum + mean * (1.0 - p->momentum));
    rvar[ch] = (float)(rvar[ch] * (double)p->momentum + uvar * (1.0 - p->momentum));
    bn_apply(p, ch, x, scale[ch], bias[ch], fm, fi, y);
  }
}

void snrt_bn_fwd_saved(snrt_ctx *c, const snrt_bn_t *p, const float *x, const float *scale,
                       const float *bias, const float *smean, const float *sinvstd, float *y) {
  (void)c;
#pragma omp parallel for schedule(static) if (p->n * p->hw * p->c > KERN_PAR_MIN)
  for (int ch = 0; ch < p->c; ch++) bn_apply(p, ch, x, scale[ch], bias[ch], smean[ch], sinvstd[ch], y);
}

void snrt_bn_fwd_infer(snrt_ctx *c, const snrt_bn_t *p, const float *x, const float *scale,
                       const float *bias, const float *rmean, const float *rvar, float *y) {
  (void)c;
#pragma omp parallel for schedule(static) if (p->n * p->hw * p->c > KERN_PAR_MIN)
  for (int ch = 0; ch < p->c; ch++)
    bn_apply(p, ch, x, scale[ch], bias[ch], rmean[ch], (float)(1.0 / sqrt((double)rvar[ch] + p->eps)), y);
}

/* dx = scale*invstd/m * (m*dy - sum(dy) - xhat*sum(dy*xhat)), m = n*hw. */
void snrt_bn_bwd(snrt_ctx *c, const snrt_bn_t *p, const float *x, const float *dy,
                 const float *scale, const float *smean, const float *sinvstd,
                 float *dx, float *dscale, float *dbias) {
  (void)c;
  const double cnt = (double)p->n * p->hw;
#pragma omp parallel for schedule(static) if (p->n * p->hw * p->c > KERN_PAR_MIN)
  for (int ch = 0; ch < p->c; ch++) {
    const float mean = smean[ch], inv = sinvstd[ch];
    /* Lane sums (kern.h): fixed order, vectorized. */
    double ag[KERN_LANES] = {0}, agx[KERN_LANES] = {0};
    for (int i = 0; i < p->n; i++) {
      const float *xp = x + ((int64_t)i * p->c + ch) * p->hw;
      const float *gp = dy + ((int64_t)i * p->c + ch) * p->hw;
      int64_t j = 0;
      for (; j + KERN_LANES <= p->hw; j += KERN_LANES)
        for (int l = 0; l < KERN_LANES; l++) {
          ag[l] += gp[j + l];
          agx[l] += (double)gp[j + l] * (xp[j + l] - mean);
        }
      for (int l = 0; j < p->hw; j++, l++) {
        ag[l] += gp[j];
        agx[l] += (double)gp[j] * (xp[j] - mean);
      }
    }
    const double sg = kern_lanes_total(ag), sgx = kern_lanes_total(agx);
    if (dbias) dbias[ch] = (float)sg;
    if (dscale) dscale[ch] = (float)(sgx * inv);
    if (!dx) continue;
    /* xhat*sum(dy*xhat) = (x-mean)*inv * sgx*inv */
    const float k = scale[ch] * inv;
    const float mg = (float)(sg / cnt), mgx = (float)(sgx / cnt * inv * inv);
    for (int i = 0; i < p->n; i++) {
      const float *xp = x + ((int64_t)i * p->c + ch) * p->hw;
      const float *gp = dy + ((int64_t)i * p->c + ch) * p->hw;
      float *dp = dx + ((int64_t)i * p->c + ch) * p->hw;
      for (int64_t j = 0; j < p->hw; j++) dp[j] = k * (gp[j] - mg - (xp[j] - mean) * mgx);
    }
  }
}

/* ---- LRN ------------------------------------------------------------------ */

/* s = bias + alpha/size * sum of x^2 over the window of channel ch, for the
 * positions [j0, j1) of image i, into s[0..j1-j0). */
static void lrn_scale(const snrt_lrn_t *p, const float *x, int i, int ch, int64_t j0, int64_t j1,
                      float *s) {
  const int lo = (p->size - 1) / 2, hi = p->size - 1 - lo;
  const int c0 = ch - lo < 0 ? 0 : ch - lo, c1 = ch + hi >= p->c ? p->c - 1 : ch + hi;
  for (int64_t j = j0; j < j1; j++) s[j - j0] = 0;
  for (int cc = c0; cc <= c1; cc++) {
    const float *xp = x + ((int64_t)i * p->c + cc) * p->hw;
    for (int64_t j = j0; j < j1; j++) s[j - j0] += xp[j] * xp[j];
  }
  const float a = p->alpha / p->size;
  for (int64_t j = j0; j < j1; j++) s[j - j0] = p->bias + a * s[j - j0];
}

#define LRN_TILE 256

void snrt_lrn_fwd(snrt_ctx *c, const snrt_lrn_t *p, const float *x, float *y) {
  (void)c;
  const int64_t tiles = (p->hw + LRN_TILE - 1) / LRN_TILE;
#pragma omp parallel for collapse(3) schedule(static)
  for (int i = 0; i < p->n; i++)
    for (int ch = 0; ch < p->c; ch++)
      for (int64_t t = 0; t < tiles; t++) {
        float s[LRN_TILE];
        int64_t j0 = t * LRN_TILE, j1 = kern_min(p->hw, j0 + LRN_TILE);
        lrn_scale(p, x, i, ch, j0, j1, s);
        const float *xp = x + ((int64_t)i * p->c + ch) * p->hw;
        float *yp = y + ((int64_t)i * p->c + ch) * p->hw;
        for (int64_t j = j0; j < j1; j++) yp[j] = xp[j] * powf(s[j - j0], -p->beta);
      }
}

/* dx_j = dy_j * s_j^-beta - 2*alpha*beta/size * x_j * sum_{c: j in window(c)} dy_c*y_c/s_c,
 * where j is in window(c) iff c in [j - hi, j + lo]. */
void snrt_lrn_bwd(snrt_ctx *c, const snrt_lrn_t *p, const float *x, const float *y,
                  const float *dy, float *dx) {
  (void)c;
  const int lo = (p->size - 1) / 2, hi = p->size - 1 - lo;
  const int64_t tiles = (p->hw + LRN_TILE - 1) / LRN_TILE;
  const float k = 2.0f * p->alpha * p->beta / p->size;
#pragma omp parallel for collapse(3) schedule(static)
  for (int i = 0; i < p->n; i++)
    for (int ch = 0; ch < p->c; ch++)
      for (int64_t t = 0; t < tiles; t++) {
        float s[LRN_TILE], acc[LRN_TILE];
        int64_t j0 = t * LRN_TILE, j1 = kern_min(p->hw, j0 + LRN_TILE);
        for (int64_t j = j0; j < j1; j++) acc[j - j0] = 0;
        int c0 = ch - hi < 0 ? 0 : ch - hi, c1 = ch + lo >= p->c ? p->c - 1 : ch + lo;
        for (int cc = c0; cc <= c1; cc++) {
          lrn_scale(p, x, i, cc, j0, j1, s);
          const float *yp = y + ((int64_t)i * p->c + cc) * p->hw;
          const float *gp = dy + ((int64_t)i * p->c + cc) * p->hw;
          for (int64_t j = j0; j < j1; j++) acc[j - j0] += gp[j] * yp[j] / s[j - j0];
        }
        lrn_scale(p, x, i, ch, j0, j1, s);
        const int64_t o = ((int64_t)i * p->c + ch) * p->hw;
        for (int64_t j = j0; j < j1; j++)
          dx[o + j] = dy[o + j] * powf(s[j - j0], -p->beta) - k * x[o + j] * acc[j - j0];
      }
}
