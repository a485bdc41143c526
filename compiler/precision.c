/* precision.c — storage dtypes for mixed precision (--precision).
 *
 * Requires: a training graph (train_build has added the loss, the backward
 * nodes, the updates and the eval graph). Maintains: Tensor.dtype of every
 * float tensor, and g->precision.
 *
 * The policy is PyTorch autocast's, seen from memory: what is big and lives
 * from the forward pass into the backward pass (activations and their
 * gradients) is stored in bfloat16; what must not lose bits (parameters as
 * fp32 master weights, their gradients, optimizer state, BN running
 * statistics and the saved mean/invstd, the loss) stays float32. The data
 * input, labels and the eval logits stay float32 too: the runtime writes and
 * reads them (a few KiB), and the first conv rounds the input as autocast
 * does.
 *
 * Arithmetic is not decided here: every kernel accumulates in fp32 (on the
 * CPU target a bf16 tensor is widened as a step reads it and rounded to
 * nearest-even as the step writes it; emit.c). Convolution, GEMM and MatMul
 * (autocast's 16-bit ops) also round their float32 operands (weights, biases)
 * to bf16 as they read them, so that their products see what a tensor core
 * sees. Reductions (BN statistics, softmax, LayerNorm, the loss) read bf16
 * and sum in fp32.
 *
 * fp16 (IEEE half: 11 significant bits, range to 65504) stores the same
 * tensors in float16 and adds dynamic loss scaling (autodiff.c): the loss
 * gradient is multiplied by a scale, every parameter gradient is divided by
 * it after the backward pass and checked for overflow, and a step that
 * overflowed skips its updates and halves the scale (the updates therefore
 * follow the whole backward pass). CPU target only, without --dist (main.c).
 */
#include "snc.h"

#include <string.h>

static const char *names[] = {"fp32", "bf16", "fp16"};

const char *precision_name(Precision p) { return names[p]; }

int precision_parse(const char *s) {
  for (int i = 0; i < 3; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

bool precision_low_op(OpKind op) {
  switch (op) {
  case OP_CONV: case OP_CONV_BWD_DATA: case OP_CONV_BWD_FILTER:
  case OP_GEMM: case OP_MATMUL: case OP_MATMUL_RAW:
    return true;
  default:
    return false;
  }
}

/* Default chunk of a 16-bit step's float32 copies (convert.c), in elements:
 * 64Ki on the CPU (256 KiB a copy: the chunk stays in cache between its
 * conversion and its kernel), 4Mi on the GPU (16 MiB a copy: each chunk is a
 * few kernel launches, so chunks there must be big enough to fill the device). */
#define CONVERT_CHUNK_CPU (64 << 10)
#define CONVERT_CHUNK_CUDA (4 << 20)

void precision_assign(Graph *g, const TrainOpts *o) {
  Precision p = o->precision;
  g->precision = p;
  g->tensor_cores = o->cuda;
  g->convert_chunk = o->convert_chunk >= 0 ? o->convert_chunk
                     : o->cuda ? CONVERT_CHUNK_CUDA : CONVERT_CHUNK_CPU;
  if (p == PREC_FP32) return;
  int low = p == PREC_BF16 ? DT_BFLOAT16 : DT_FLOAT16;
  for (int t = 0; t < g->nt; t++) {
    Tensor *x = &g->t[t];
    if (x->dtype != DT_FLOAT || t == g->eval_output) continue;
    if (x->kind == TK_ACT || x->kind == TK_GRAD) x->dtype = low;
  }
}
