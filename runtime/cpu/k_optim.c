/* k_optim.c — optimizer updates with PyTorch's semantics (torch.optim.SGD,
 * Adam, AdamW), applied in place to one parameter right after its gradient is
 * final. Each first calls snrt_grad_ready (records the gradient for
 * --dump-grads) and reads the learning rate and the step from the context.
 *
 * SGD: g' = g + wd*w; with momentum: buf = g' on the first step (step 0, as
 *   torch clones the gradient), else buf = momentum*buf + (1-dampening)*g';
 *   nesterov: g' += momentum*buf, else g' = buf; w -= lr*g'. Momentum 0:
 *   no buffer (mom may be NULL).
 * Adam: t = step+1; AdamW first decays w *= 1 - lr*wd, Adam adds wd*w to g;
 *   m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
 *   w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
 * Bias corrections are computed in double, as Python computes them in torch.
 * The Adam arithmetic is in snrt_adam.h, shared with the CUDA runtime.
 * Elementwise: deterministic. */
#include "kern.h"
#include "snrt_adam.h"

void snrt_sgd(snrt_ctx *c, const snrt_sgd_t *p, float *w, const float *g, float *mom) {
  if (c->overflow) return;   /* --precision fp16: this step's gradients overflowed */
  snrt_grad_ready(c, p->param, g, p->n);
  const float lr = c->lr, wd = p->weight_decay, mu = p->momentum, damp = 1.0f - p->dampening;
  const int first = c->step == 0, nest = p->nesterov;
  const int64_t n = p->n;
  if (mu == 0.0f || !mom) {
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
    for (int64_t i = 0; i < n; i++) w[i] -= lr * (g[i] + wd * w[i]);
    return;
  }
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    float d = g[i] + wd * w[i];
    float b = first ? d : mu * mom[i] + damp * d;
    mom[i] = b;
    w[i] -= lr * (nest ? d + mu * b : b);
  }
}

void snrt_adam(snrt_ctx *c, const snrt_adam_t *p, float *w, const float *g, float *m, float *v) {
  if (c->overflow) return;   /* --precision fp16: this step's gradients overflowed */
  snrt_grad_ready(c, p->param, g, p->n);
  const snrt_adam_coef k = snrt_adam_coefs(p, c->lr, c->step);
  const float b1 = p->beta1, b2 = p->beta2, eps = p->eps;
  const int64_t n = p->n;
#pragma omp parallel for simd schedule(static) if (n > KERN_PAR_MIN)
  for (int64_t i = 0; i < n; i++) snrt_adam_elem(b1, b2, eps, k, &w[i], g[i], &m[i], &v[i]);
}
