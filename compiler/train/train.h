/* train.h — the training-graph stage's public functions. */
#ifndef SNC_TRAIN_H
#define SNC_TRAIN_H

#include "../front/front.h"

/* ------------------------------------------------------------------ autodiff.c */

typedef enum { LOSS_SOFTMAX_CE, LOSS_MSE } LossKind;
typedef enum { OPTIM_SGD, OPTIM_ADAM, OPTIM_ADAMW } OptimKind;

typedef struct TrainOpts {
  LossKind loss;
  OptimKind optim;
  float lr, momentum, weight_decay;
  float beta1, beta2, eps;
  bool dist;               // --dist mpi: gradients all-reduced across ranks
  int zero_ranks;          // --zero 1 --ranks N: N (optimizer state sharded); 0: none
  int64_t bucket_bytes;    // --dist: gradients per all-reduce bucket (bytes, at least)
  Precision precision;     // --precision (precision_assign, the pass after train_build)
  int64_t convert_chunk;   // --convert-chunk: elements (0: whole tensors; -1: the target's default)
  bool cuda;               // --target cuda (its conv/GEMM/MatMul read 16-bit operands directly)
  bool no_chunk_loss;      // --no-chunk-loss: keep the LM head's whole logits (add_loss)
} TrainOpts;

/* Appends to the forward graph: labels, the loss, the backward nodes (with
 * gradient accumulation for fan-out), and one optimizer update per parameter.
 * With o->dist, gradients are grouped into buckets in the order they become
 * final: an ALLREDUCE node after the backward node that completes a bucket,
 * and after the backward pass, per bucket, a COMM_WAIT node and then its
 * updates.
 * Also builds the eval graph (forward with inference semantics) as nodes of
 * phase PH_EVAL. */
void train_build(Graph *g, const TrainOpts *o);

/* ------------------------------------------------------------------ precision.c */

const char *precision_name(Precision p);
int precision_parse(const char *s);    /* -1 if unknown */
/* Storage dtypes of a training graph (the pass after train_build): under
 * PREC_BF16 every float activation and activation gradient becomes
 * DT_BFLOAT16 (PREC_FP16: DT_FLOAT16; the planner then sizes it at 2 bytes an element through
 * tensor_bytes); parameters, their gradients, optimizer and BN state, saved
 * statistics, the data input, labels, the loss and the eval logits stay
 * float32. Sets g->precision, g->convert_chunk and g->tensor_cores. PREC_FP32
 * changes no dtype. */
void precision_assign(Graph *g, const TrainOpts *o);
/* Ops autocast runs in 16-bit (conv, GEMM, MatMul and their backward
 * products): under bf16 their float32 inputs (weights, biases, the data
 * input) are rounded to bfloat16 as they are read (on the CUDA target, all
 * their operands are 16-bit: tensor cores). */
bool precision_low_op(OpKind op);

#endif /* SNC_TRAIN_H */
