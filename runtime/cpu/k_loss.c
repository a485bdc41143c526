/* k_loss.c — softmax (forward, backward) and the training losses: softmax
 * cross-entropy over int32 labels (mean over the batch, log-sum-exp with the
 * max subtracted) and its gradient (softmax - onehot)/n; mean squared error
 * over every element (torch.nn.MSELoss) and its gradient 2(out-target)/count.
 *
 * Loss sums run sequentially in double (batch-sized: cheap, deterministic).
 * A label outside [0, classes) makes the loss NaN (the main loop then stops
 * with exit code 3 naming the step) rather than reading out of bounds; the
 * data loader rejects such labels before they get here.
 * Not here: label smoothing, class weights (not in our interface). */
#include "kern.h"

void snrt_softmax_fwd(snrt_ctx *c, const snrt_softmax_t *p, const float *x, float *y) {
  (void)c;
  const int64_t len = p->len, inner = p->inner;
#pragma omp parallel for collapse(2) schedule(static) if (p->outer * len * inner > KERN_PAR_MIN)
  for (int64_t o = 0; o < p->outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      const float *xp = x + o * len * inner + i;
      float *yp = y + o * len * inner + i;
      float m = -INFINITY;
      for (int64_t j = 0; j < len; j++) m = xp[j * inner] > m ? xp[j * inner] : m;
      /* The exponentials first (kern_expf: a loop that vectorizes), then
       * their sum in order, in double. */
#pragma omp simd
      for (int64_t j = 0; j < len; j++) yp[j * inner] = kern_expf(xp[j * inner] - m);
      double s = 0;
      for (int64_t j = 0; j < len; j++) s += yp[j * inner];
      float inv = (float)(1.0 / s);
      for (int64_t j = 0; j < len; j++) yp[j * inner] *= inv;
    }
}

/* dx = y * (dy - sum_j dy_j y_j) */
void snrt_softmax_bwd(snrt_ctx *c, const snrt_softmax_t *p, const float *y, const float *dy,
                      float *dx) {
  (void)c;
  const int64_t len = p->len, inner = p->inner;
#pragma omp parallel for collapse(2) schedule(static) if (p->outer * len * inner > KERN_PAR_MIN)
  for (int64_t o = 0; o < p->outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      const int64_t b = o * len * inner + i;
      double s = 0;
      for (int64_t j = 0; j < len; j++) s += (double)dy[b + j * inner] * y[b + j * inner];
      float fs = (float)s;
      for (int64_t j = 0; j < len; j++) dx[b + j * inner] = y[b + j * inner] * (dy[b + j * inner] - fs);
    }
}

/* log(sum(exp(z - max))) + max, in double. */
static double logsumexp(const float *z, int n) {
  float m = -INFINITY;
  for (int j = 0; j < n; j++) m = z[j] > m ? z[j] : m;
  double s = 0;
  for (int j = 0; j < n; j++) s += exp((double)z[j] - m);
  return log(s) + m;
}

void snrt_softmax_ce_fwd(snrt_ctx *c, const snrt_loss_t *p, const float *logits,
                         const int32_t *labels, float *loss) {
  (void)c;
  double total = 0;
  for (int i = 0; i < p->n; i++) {
    const float *z = logits + (int64_t)i * p->classes;
    int32_t t = labels[i];
    if (t < 0 || t >= p->classes) {
      *loss = NAN;
      return;
    }
    total += logsumexp(z, p->classes) - z[t];
  }
  *loss = (float)(total / p->n);
}

void snrt_softmax_ce_bwd(snrt_ctx *c, const snrt_loss_t *p, const float *logits,
                         const int32_t *labels, float *dlogits) {
  (void)c;
  const double inv_n = 1.0 / p->n;
#pragma omp parallel for schedule(static) if ((int64_t)p->n * p->classes > KERN_PAR_MIN)
  for (int i = 0; i < p->n; i++) {
    const float *z = logits + (int64_t)i * p->classes;
    float *d = dlogits + (int64_t)i * p->classes;
    double lse = logsumexp(z, p->classes);
    int32_t t = labels[i];
    for (int j = 0; j < p->classes; j++)
      d[j] = (float)((exp((double)z[j] - lse) - (j == t ? 1.0 : 0.0)) * inv_n);
    if (t < 0 || t >= p->classes)
      for (int j = 0; j < p->classes; j++) d[j] = NAN;
  }
}

void snrt_mse_fwd(snrt_ctx *c, const snrt_loss_t *p, const float *out, const float *target,
                  float *loss) {
  (void)c;
  const int64_t n = (int64_t)p->n * p->classes;
  double s = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = (double)out[i] - target[i];
    s += d * d;
  }
  *loss = (float)(s / n);
}

void snrt_mse_bwd(snrt_ctx *c, const snrt_loss_t *p, const float *out, const float *target,
                  float *dout) {
  (void)c;
  const int64_t n = (int64_t)p->n * p->classes;
  const float k = (float)(2.0 / n);
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
  for (int64_t i = 0; i < n; i++) dout[i] = k * (out[i] - target[i]);
}
