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
 * Arithmetic is not decided here: every kernel accumulates in fp32 (a bf16
 * tensor is widened as a step reads it and rounded to nearest-even as the
 * step writes it, convert.c; the CUDA target's convolutions and GEMMs read
 * bf16 on tensor cores with fp32 accumulation). Convolution, GEMM and MatMul
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
 * follow the whole backward pass). Both targets (the CUDA runtime decides on
 * the device, inside a captured graph); not with --dist (main.c).
 *
 * Also here: the knobs of the steps' working copies (convert.c) that depend
 * on the target: the chunk size, and the CPU conv kernels' own rounding of
 * their weights with their smaller im2col columns.
 */
#include "train.h"

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
 * 128Ki on the CPU (512 KiB a copy; measured on fashion_cnn b64, 2 threads:
 * 64Ki chunks ran at ~0.75x the speed of 128Ki, each chunk being a few
 * OpenMP parallel regions; 256Ki was no faster and made fashion_cnn b8's fp16
 * arena larger than its fp32 one), 2Mi on the GPU (8 MiB a copy: each chunk
 * is a few kernel launches, so chunks there must be big enough to fill the
 * device; resnet50 224 b32's liveness arena: 1.49 GiB at 2Mi, 1.50 GiB at
 * 4Mi). */
#define CONVERT_CHUNK_CPU (128 << 10)
#define CONVERT_CHUNK_CUDA (2 << 20)
#define CONV_COLUMNS_16BIT ((int64_t)1024 << 10)

void precision_assign(Graph *g, const TrainOpts *o) {
  Precision p = o->precision;
  g->precision = p;
  g->tensor_cores = o->cuda;
  g->convert_chunk = o->convert_chunk >= 0 ? o->convert_chunk
                     : o->cuda ? CONVERT_CHUNK_CUDA : CONVERT_CHUNK_CPU;
  if (p == PREC_FP32) return;
  /* The CPU's conv kernels round the float32 weights and bias themselves, a
   * block at a time (runtime/cpu/k_conv.c): no whole rounded copy of them
   * (convert.c). And their im2col columns shrink from 4 MiB to 1 MiB: a
   * chunk of a conv's copies is a whole group of the images one GEMM takes
   * (convert.c), so smaller groups mean smaller copies beside smaller
   * columns (at 4 MiB fashion_cnn b8's fp16 arena exceeds its fp32 one; at
   * 256 KiB the per-image GEMMs made the 16-bit CPU step 1.3x slower).
   * Independent of --convert-chunk, so that every chunk size runs the same
   * GEMMs. The CUDA target's convolutions read 16-bit operands instead. */
  for (int i = 0; i < g->nn && !o->cuda; i++) {
    OpKind op = g->n[i].op;
    if ((op == OP_CONV || op == OP_CONV_BWD_DATA || op == OP_CONV_BWD_FILTER) && g->n[i].p) {
      snrt_conv_t *cp = g->n[i].p;
      if (cp->round_w) continue;   /* (shared by a conv's steps: done) */
      cp->round_w = p == PREC_BF16 ? 1 : 2;
      shape_conv_workspace(cp, CONV_COLUMNS_16BIT);
    }
  }
  int low = p == PREC_BF16 ? DT_BFLOAT16 : DT_FLOAT16;
  for (int t = 0; t < g->nt; t++) {
    Tensor *x = &g->t[t];
    if (x->dtype != DT_FLOAT || graph_is_eval_output(g, t)) continue;
    if (x->kind == TK_ACT || x->kind == TK_GRAD) x->dtype = low;
  }
}
