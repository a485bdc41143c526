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
      if (p->fill) {   /* the masked row into y first (inner is 1), then in place */
        const uint8_t *f = p->fill + (o * len) % p->fill_n;
        for (int64_t j = 0; j < len; j++) yp[j] = f[j] ? p->value : xp[j];
        xp = yp;
      }
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
      if (p->fill) {
        const uint8_t *f = p->fill + b % p->fill_n;
        for (int64_t j = 0; j < len; j++)
          if (f[j]) dx[b + j] = 0.0f;
      }
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

/* One row's gradient: (softmax(z) - onehot(t)) * inv_n into d (d may be z),
 * from the row's log-sum-exp; a label outside [0, classes): the row NaN. */
static void ce_grad_row(const float *z, int64_t classes, double lse, int32_t t, double inv_n,
                        float *d) {
  for (int64_t j = 0; j < classes; j++)
    d[j] = (float)((exp((double)z[j] - lse) - (j == t ? 1.0 : 0.0)) * inv_n);
  if (t < 0 || t >= classes)
    for (int64_t j = 0; j < classes; j++) d[j] = NAN;
}

void snrt_softmax_ce_bwd(snrt_ctx *c, const snrt_loss_t *p, const float *logits,
                         const int32_t *labels, float *dlogits) {
  (void)c;
  const double inv_n = 1.0 / p->n;
#pragma omp parallel for schedule(static) if ((int64_t)p->n * p->classes > KERN_PAR_MIN)
  for (int i = 0; i < p->n; i++) {
    const float *z = logits + (int64_t)i * p->classes;
    ce_grad_row(z, p->classes, logsumexp(z, p->classes), labels[i], inv_n,
                dlogits + (int64_t)i * p->classes);
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

/* ---- the chunked LM head and cross-entropy (snrt_lmce_t) ---- */

/* The logits of rows [r, r + rows): alpha * h_r W^T (or h_r W) into z. */
static void lmce_logits(snrt_ctx *c, const snrt_lmce_t *p, const float *h, const float *w,
                        int64_t r, int64_t rows, float *z) {
  snrt_mm_t mm = {.batch = 1, .m = rows, .n = p->classes, .k = p->k, .trans_b = p->trans_b,
                  .alpha = p->alpha};
  snrt_matmul(c, &mm, h + r * p->k, w, z);
}

/* The index of x's largest element (the first of equal ones). */
static int64_t argmax_row(const float *x, int64_t n) {
  int64_t best = 0;
  for (int64_t k = 1; k < n; k++)
    if (x[k] > x[best]) best = k;
  return best;
}

/* Per chunk: its logits (copied to the sink where one is set); each row's
 * log-sum-exp (in parallel); the rows' terms added in row order in double,
 * as snrt_softmax_ce_fwd adds them (equal logits give an equal loss), or
 * (the eval step) written per row with the argmax; the logits turned in
 * place into (softmax - onehot) / n; then dh's rows = alpha * d W (or d W^T)
 * and dW += alpha * d^T h_r (or h_r^T d), the first chunk writing dW (beta 0). */
void snrt_lmce(snrt_ctx *c, const snrt_lmce_t *p, const float *h, const float *w,
               const int32_t *labels, float *loss, float *dh, float *dw, float *rows_out,
               float *ws) {
  const int64_t V = p->classes;
  const double inv_n = 1.0 / p->n;
  double *lse = (double *)ws;   /* n doubles first: aligned as the workspace is */
  float *z0 = (float *)(lse + p->n);
  double total = 0;
  bool bad = false;
  for (int64_t r = 0; r < p->n; r += p->chunk) {
    int64_t rows = p->n - r < p->chunk ? p->n - r : p->chunk;
    lmce_logits(c, p, h, w, r, rows, z0);
    if (c->lm_sink) memcpy(c->lm_sink + r * V, z0, sizeof(float) * (size_t)(rows * V));
#pragma omp parallel for schedule(static) if (rows * V > KERN_PAR_MIN)
    for (int64_t i = 0; i < rows; i++) lse[r + i] = logsumexp(z0 + i * V, (int)V);
    for (int64_t i = 0; i < rows; i++) {
      int32_t t = labels[r + i];
      bool ok = t >= 0 && t < V;
      if (!ok) bad = true;
      else total += lse[r + i] - z0[i * V + t];
      if (rows_out) {
        rows_out[2 * (r + i)] = ok ? (float)(lse[r + i] - z0[i * V + t]) : NAN;
        rows_out[2 * (r + i) + 1] = (float)argmax_row(z0 + i * V, V);
      }
    }
    if (!(p->need & 3)) continue;
#pragma omp parallel for schedule(static) if (rows * V > KERN_PAR_MIN)
    for (int64_t i = 0; i < rows; i++)
      ce_grad_row(z0 + i * V, V, lse[r + i], labels[r + i], inv_n, z0 + i * V);
    if (p->need & 1) {
      snrt_mm_t mm = {.batch = 1, .m = rows, .n = p->k, .k = V, .trans_b = !p->trans_b,
                      .alpha = p->alpha};
      snrt_matmul(c, &mm, z0, w, dh + r * p->k);
    }
    if (p->need & 2) {
      snrt_mm_t mm = {.batch = 1, .m = p->trans_b ? V : p->k, .n = p->trans_b ? p->k : V,
                      .k = rows, .trans_a = 1, .alpha = p->alpha, .beta = r ? 1.0f : 0.0f};
      if (p->trans_b) snrt_matmul(c, &mm, z0, h + r * p->k, dw);
      else snrt_matmul(c, &mm, h + r * p->k, z0, dw);
    }
  }
  if (loss) *loss = bad ? NAN : (float)(total / p->n);
}
