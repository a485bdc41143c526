/* loss_scale.c — --precision fp16's dynamic loss scaling in the training
 * graph: the updates held back until one GRAD_UNSCALE step has checked every
 * parameter gradient.
 *
 * Requires: train_build's backward pass (autodiff.c), which hands each
 * parameter here when its gradient is final (scaled_add), then calls
 * scaled_updates once after the backward pass.
 * Provides: GRAD_UNSCALE over every parameter gradient, then the updates
 * (autodiff.c's train_add_update). The loss gradient is multiplied by the
 * loss scale in the emitted program (emit.c, the runtime's loss_scale).
 *
 * Not here: the scale itself and its growth (the runtime, snrt_dev_scale_sync).
 */
#include "autodiff_internal.h"

#include <stdlib.h>
#include <string.h>

/* --precision fp16: dynamic loss scaling. The loss gradient is multiplied by
 * the loss scale (emit.c), so every gradient of the backward pass is scaled;
 * after the backward pass one GRAD_UNSCALE step divides every parameter
 * gradient by the scale and checks it for Inf/NaN, and only then do the
 * updates run (skipped, and the scale halved, on overflow; as PyTorch's
 * GradScaler). Gradients thereby live until after the backward pass. */
static struct { int *param, n, cap; } sc;

void scaled_add(int w) {
  xgrow((void **)&sc.param, &sc.cap, sc.n + 1, sizeof(int));
  sc.param[sc.n++] = w;
}

void scaled_updates(Graph *g) {
  int *in = xmalloc(sizeof(int) * (size_t)(sc.n + 1)), cnt = 0;
  for (int k = 0; k < sc.n; k++)
    if (g->t[sc.param[k]].grad >= 0) in[cnt++] = g->t[sc.param[k]].grad;
  if (cnt) train_add_node(g, OP_GRAD_UNSCALE, -1, "grad_unscale", PH_BACKWARD, cnt, in, 0, NULL, NULL);
  free(in);
  for (int k = 0; k < sc.n; k++) train_add_update(g, sc.param[k]);
  free(sc.param);
  memset(&sc, 0, sizeof sc);
}

void loss_scale_reset(void) { memset(&sc, 0, sizeof sc); }
