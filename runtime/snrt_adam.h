/* snrt_adam.h — Adam/AdamW's arithmetic, written once for both runtimes
 * (runtime/cpu/k_optim.c and runtime/cuda/loss.cu), so that the two targets
 * compute the same formula in the same precision; the CPU is the reference
 * (tests/test_op_grads.py and tests/test_reference.py check it against
 * torch.optim).
 *
 * snrt_adam_coefs: the per-step scalars, in double as Python computes them in
 * torch.optim (t = step + 1):
 *   step_size = lr / (1 - b1^t), bc2 = sqrt(1 - b2^t), decay = 1 - lr*wd (AdamW,
 *   else 1), gwd = wd (Adam, else 0); each rounded once to float.
 * Host code only: the CUDA runtime computes them on the host before every
 * step (or graph replay) and kernels read them from device memory.
 *
 * snrt_adam_elem: one element's update in float, operation by operation:
 *   w' = w*decay; g' = g + gwd*w'; m = b1*m + (1-b1)*g'; v = b2*v + (1-b2)*g'^2;
 *   w = w' - step_size * m / (sqrt(v)/bc2 + eps).
 * The CUDA runtime is built with -fmad=false and IEEE division and square root
 * (nvcc's defaults), as C11 compiles without contraction, so that both
 * targets round each operation the same way. */
#ifndef SNRT_ADAM_H
#define SNRT_ADAM_H

#include "snrt.h"
#include <math.h>

typedef struct snrt_adam_coef {
  float step_size, bc2, decay, gwd;
} snrt_adam_coef;

static inline snrt_adam_coef snrt_adam_coefs(const snrt_adam_t *p, float lr, int64_t step) {
  const double t = (double)step + 1;
  snrt_adam_coef k;
  k.step_size = (float)((double)lr / (1.0 - pow((double)p->beta1, t)));
  k.bc2 = (float)sqrt(1.0 - pow((double)p->beta2, t));
  k.decay = p->decoupled ? (float)(1.0 - (double)lr * (double)p->weight_decay) : 1.0f;
  k.gwd = p->decoupled ? 0.0f : p->weight_decay;
  return k;
}

static inline SNRT_HD void snrt_adam_elem(float b1, float b2, float eps, snrt_adam_coef k,
                                          float *w, float g, float *m, float *v) {
  float wi = *w * k.decay;
  float gi = g + k.gwd * wi;
  float mi = b1 * *m + (1.0f - b1) * gi;
  float vi = b2 * *v + (1.0f - b2) * gi * gi;
  *m = mi;
  *v = vi;
  *w = wi - k.step_size * mi / (sqrtf(vi) / k.bc2 + eps);
}

#endif /* SNRT_ADAM_H */
