/* snrt.h — the one API an emitted snc program calls.
 *
 * What it is: the contract between the compiler (which emits train.c) and the
 * runtimes (runtime/cpu: C kernels over OpenBLAS with an emulated device arena;
 * runtime/cuda: cuDNN/cuBLAS and our kernels). The same emitted train.c links
 * against either one.
 *
 * What it is not: a framework. There is no allocator, no graph, no dispatch.
 * Every pointer handed to a kernel lies inside the device arena at an offset the
 * compiler planned; every shape and stride is a compile-time constant in a
 * parameter struct declared `static const` in train.c.
 *
 * The parameter structs below are also used by the compiler (shape inference
 * fills them, the emitter prints them), so this header is plain C11 with no
 * runtime dependencies.
 *
 * Conventions: tensors are float32, NCHW, contiguous. Kernels that produce a
 * gradient overwrite their output (never accumulate) unless the struct says
 * `accumulate`. All sizes are element counts unless named *_bytes.
 *
 * In place: the planner may pass the same pointer for dx and dy to
 * snrt_unary_bwd, snrt_bn_bwd (which must read a channel's dy fully before
 * writing its dx), snrt_softmax_bwd (a row's dy fully before its dx),
 * snrt_dropout_bwd and snrt_fused_bwd (dy and its first dx: an element's
 * gradients are all computed before any is written), for y and a to
 * snrt_add, for y and any input to snrt_fused_fwd (elementwise), and for y
 * and x to snrt_unary_fwd, snrt_dropout_fwd, snrt_bn_fwd_saved and
 * snrt_bn_fwd_infer (elementwise), and to snrt_softmax_fwd (a row read fully
 * before any of it is written). Their implementations must not declare
 * those pointers restrict, and must give the same bits in place as out of
 * place.
 */
#ifndef SNRT_H
#define SNRT_H

#include <stdint.h>
#include <stddef.h>
#include <math.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SNRT_MAX_RANK 8
#define SNRT_ALIGN 256          /* every arena offset is a multiple of this */
#define SNRT_ABI_VERSION 1

/* ---------------------------------------------------------------------------
 * Parameter structs (filled by snc's shape inference, printed by its emitter)
 * ------------------------------------------------------------------------- */

/* 2-D convolution, NCHW, weights (k, c/group, kh, kw). Bottom/right padding is
 * implied by oh/ow. */
typedef struct snrt_conv_t {
  int n, c, h, w;        /* input */
  int k, oh, ow;         /* output channels and spatial size */
  int kh, kw;            /* kernel */
  int sh, sw;            /* strides */
  int pt, pl;            /* top and left padding */
  int dh, dw;            /* dilations */
  int group;             /* groups (c and k divisible by it) */
  int ws_images;         /* CPU: images per im2col chunk (workspace sizing) */
  int64_t ws_bytes;      /* workspace the plan gave this step (bytes) */
  int accumulate;        /* backward-filter: add to dw instead of overwriting it (a chunk
                            of the batch after the first: compiler/plan/convert.c) */
  int round_w;           /* CPU, --precision bf16 (1) or fp16 (2): the kernel reads the
                            float32 weights and bias rounded to that precision, a block
                            of the weights at a time in its workspace (0: as they are) */
} snrt_conv_t;

/* Workspace of a CPU conv step (forward, backward-data or backward-filter):
 * an im2col buffer for ws_images images at a time (none for a 1x1, stride-1,
 * unpadded conv on planes of at least SNRT_CONV_1X1_PLANE pixels, whose
 * input already is its column matrix: one GEMM per image), then with
 * round_w a block of rounded weights. The compiler plans exactly this many
 * bytes; the CPU kernels use no other scratch memory. A 1x1 conv on a
 * smaller plane (a ResNet's deep layers: 2x2 to 8x8) takes the batched path
 * like any other conv, its im2col a copy: one GEMM over many images, where
 * per-image GEMMs of 4 to 64 columns ran at a fraction of the rate. */
#define SNRT_CONV_1X1_PLANE 256
static inline int snrt_conv_is_1x1(const snrt_conv_t *p) {
  return p->kh == 1 && p->kw == 1 && p->sh == 1 && p->sw == 1 && p->pt == 0 && p->pl == 0 &&
         p->oh == p->h && p->ow == p->w && (int64_t)p->oh * p->ow >= SNRT_CONV_1X1_PLANE;
}

/* The im2col part: columns for ws_images images. */
static inline int64_t snrt_conv_col_bytes(const snrt_conv_t *p) {
  if (snrt_conv_is_1x1(p)) return 0;
  return (int64_t)p->ws_images * (p->c / p->group) * p->kh * p->kw * p->oh * p->ow * 4;
}

/* round_w: the block of rounded weights (floats) after the columns: rows of
 * a group's (kg x c/group*kh*kw) weight matrix, or columns for the
 * backward-data product, 16Ki floats or one row or column if larger. None
 * for one input channel per group (its direct loops round each weight as
 * they read it). */
static inline int64_t snrt_conv_wblock(const snrt_conv_t *p) {
  int64_t ckk = (int64_t)(p->c / p->group) * p->kh * p->kw, kg = p->k / p->group, b = 16384;
  if (!p->round_w || p->c / p->group == 1) return 0;
  return b > ckk && b > kg ? b : ckk > kg ? ckk : kg;
}

static inline int64_t snrt_conv_ws_bytes(const snrt_conv_t *p) {
  return snrt_conv_col_bytes(p) + 4 * snrt_conv_wblock(p);
}

/* How the CPU conv kernels group the images of a batch into GEMMs: the
 * backward-filter sum adds one GEMM's partial sum per group of this many
 * images, in image order, so a call on part of the batch that starts on a
 * group boundary and adds to dw (accumulate) continues the sum of a call on
 * the whole batch bit for bit. 1: a GEMM per image (a 1x1 stride-1 conv; a
 * workspace too small for two images and the staging matrix); more: the
 * images whose columns fit the workspace with the staging matrix (the
 * kernel's batched GEMMs); 0: the direct loops of a conv with one input
 * channel per group, whose sum runs over the whole batch in double. */
static inline int64_t snrt_conv_gemm_images(const snrt_conv_t *p) {
  if (snrt_conv_is_1x1(p)) return 1;
  int64_t cg = p->c / p->group, kg = p->k / p->group, ohw = (int64_t)p->oh * p->ow;
  if (cg == 1) return 0;
  int64_t nbb = snrt_conv_col_bytes(p) / 4 / ((cg * p->kh * p->kw + kg) * ohw);
  return nbb >= 2 ? nbb : 1;
}

/* Images per im2col chunk for `target` bytes of columns: as many as fit, at
 * least 1, at most the batch. The compiler plans SNRT_CONV_WS_TARGET
 * (compiler/front/shape_nn.c says why 4 MiB; 16-bit programs less:
 * compiler/train/precision.c); snc-calibrate times convolutions with the same. */
#define SNRT_CONV_WS_TARGET ((int64_t)4 << 20)
static inline int snrt_conv_ws_images_for(const snrt_conv_t *p, int64_t target) {
  int64_t per_image = (int64_t)(p->c / p->group) * p->kh * p->kw * p->oh * p->ow * 4;
  int64_t imgs = per_image ? target / per_image : p->n;
  return (int)(imgs < 1 ? 1 : imgs > p->n ? p->n : imgs);
}
static inline int snrt_conv_ws_images(const snrt_conv_t *p) {
  return snrt_conv_ws_images_for(p, SNRT_CONV_WS_TARGET);
}

/* Max/average pooling, NCHW. pb/pr are the bottom/right padding (needed for
 * the count_include_pad divisor, which never counts positions past them). */
typedef struct snrt_pool_t {
  int n, c, h, w;
  int oh, ow;
  int kh, kw, sh, sw;
  int pt, pl, pb, pr;
  int dh, dw;            /* dilations (max pool only; 1 otherwise) */
  int count_include_pad; /* average pool only */
} snrt_pool_t;

/* BatchNormalization over (n, hw) per channel c. ONNX momentum convention:
 * running = running * momentum + batch * (1 - momentum); the running variance
 * is updated with the unbiased batch variance (as PyTorch does). */
typedef struct snrt_bn_t {
  int n, c;
  int64_t hw;
  float eps, momentum;
} snrt_bn_t;

/* Local response normalization across channels (ONNX LRN). */
typedef struct snrt_lrn_t {
  int n, c;
  int64_t hw;
  int size;
  float alpha, beta, bias;
} snrt_lrn_t;

enum snrt_unary_kind {
  SNRT_RELU, SNRT_LEAKY_RELU, SNRT_SIGMOID, SNRT_TANH, SNRT_CLIP,
};

/* Elementwise activation. LeakyRelu uses alpha; Clip uses [lo, hi]. */
typedef struct snrt_unary_t {
  int64_t n;
  int kind;              /* enum snrt_unary_kind */
  float alpha;
  float lo, hi;
} snrt_unary_t;

/* SNRT_MIN/SNRT_MAX: the gradient goes to the smaller/larger operand, half
 * to each on a tie (as torch.minimum/maximum). */
enum snrt_binary_kind { SNRT_ADD, SNRT_SUB, SNRT_MUL, SNRT_DIV, SNRT_MIN, SNRT_MAX };

/* Broadcasting elementwise binary op y = a OP b. The output has `rank` dims
 * `dims`; sa/sb are the element strides of a and b in that index space (0 on
 * a broadcast dimension). Backward computes da and/or db (either may be NULL),
 * summing over the dimensions where that operand was broadcast. */
typedef struct snrt_binary_t {
  int kind;              /* enum snrt_binary_kind */
  int rank;
  int64_t n;             /* output elements */
  int64_t dims[SNRT_MAX_RANK];
  int64_t sa[SNRT_MAX_RANK];
  int64_t sb[SNRT_MAX_RANK];
  int64_t na, nb;        /* elements of a and of b */
} snrt_binary_t;

/* Reduce-sum a "big" tensor into a "small" one that broadcasts to it, times
 * scale (ReduceMean forward: scale = 1/count; ReduceSum: 1; gradient of a
 * broadcast), and its dual, expand: big[i] = scale * small[broadcast(i)]
 * (Expand; Tile, whose output viewed as (r0, d0, r1, d1...) is x expanded
 * over the repeats). ss are the strides of the small tensor in the big index
 * space (0 where it broadcasts). kind SNRT_RED_MAX / SNRT_RED_L2 reduce by
 * the maximum / sqrt of the sum of squares instead (snrt_reduce only; scale
 * unused); snrt_reduce_bwd is their gradient: the maximum's to the first
 * element (in index order) equal to it, dy x / y for L2 (0 where y is 0). */
enum snrt_reduce_kind { SNRT_RED_SUM, SNRT_RED_MAX, SNRT_RED_L2 };
typedef struct snrt_reduce_t {
  int rank;
  int64_t n_big, n_small;
  int64_t dims[SNRT_MAX_RANK];   /* big shape */
  int64_t ss[SNRT_MAX_RANK];     /* small strides in big index space */
  float scale;
  int kind;                      /* enum snrt_reduce_kind */
} snrt_reduce_t;

/* Batched matrix product Y[b] = alpha * op(A[b]) op(B[b]) + beta * Y[b],
 * row-major. op(A) is (m, k), op(B) is (k, n). Batch strides of 0 broadcast
 * an operand. beta = 1 accumulates into Y. */
typedef struct snrt_mm_t {
  int64_t batch, m, n, k;
  int trans_a, trans_b;
  float alpha, beta;
  int64_t stride_a, stride_b, stride_y;  /* elements between batch items */
} snrt_mm_t;

/* Add a bias that broadcasts to a (rows, cols) matrix: y[r][c] += scale * b[...]
 * with b indexed by bias_kind. Backward reduces dy the other way. */
enum snrt_bias_kind { SNRT_BIAS_SCALAR, SNRT_BIAS_ROW /* b[c], len cols */,
                      SNRT_BIAS_COL /* b[r], len rows */, SNRT_BIAS_FULL };
typedef struct snrt_bias_t {
  int64_t rows, cols;
  int kind;              /* enum snrt_bias_kind */
  float scale;
} snrt_bias_t;

/* Concat along an axis / Split along an axis: outer = product of the dims
 * before the axis; chunk[i] = (axis length of part i) * (product of dims after
 * the axis). Split writes each part (NULL parts are skipped); concat reads. */
typedef struct snrt_concat_t {
  int parts;
  int64_t outer;
  const int64_t *chunk;  /* parts entries */
} snrt_concat_t;

/* Slice with positive or negative steps: out[i] = in[start + i*step] per dim.
 * Backward (scatter) zero-fills dx and writes dy at the sliced positions. */
typedef struct snrt_slice_t {
  int rank;
  int64_t n_in, n_out;
  int64_t in_dims[SNRT_MAX_RANK];
  int64_t out_dims[SNRT_MAX_RANK];
  int64_t start[SNRT_MAX_RANK];
  int64_t step[SNRT_MAX_RANK];
} snrt_slice_t;

/* Padding: out = value everywhere, in copied at offset `before` (constant
 * mode); mode SNRT_PAD_REFLECT / SNRT_PAD_EDGE fill the border with the
 * input mirrored about its first and last element / with those elements.
 * Negative pads crop. Backward crops dy into dx (constant), or gives each
 * input element the sum of the dy elements read from it, in output order
 * (snrt_pad_grad_at below: the same on every runtime). */
enum snrt_pad_mode { SNRT_PAD_CONSTANT, SNRT_PAD_REFLECT, SNRT_PAD_EDGE };
typedef struct snrt_pad_t {
  int rank;
  int64_t n_in, n_out;
  int64_t in_dims[SNRT_MAX_RANK];
  int64_t out_dims[SNRT_MAX_RANK];
  int64_t before[SNRT_MAX_RANK];
  float value;
  int mode;              /* enum snrt_pad_mode */
} snrt_pad_t;
/* Reflect: at most this many output positions of one dim read one input
 * position (the compiler refuses pads wider than that allows). */
#define SNRT_PAD_MAX_RANGES 16

/* Transpose: out dims[i] = in_dims[perm[i]]. */
typedef struct snrt_transpose_t {
  int rank;
  int64_t n;
  int64_t in_dims[SNRT_MAX_RANK];
  int perm[SNRT_MAX_RANK];
} snrt_transpose_t;

/* Softmax over the middle index of (outer, len, inner). With fill (inner 1:
 * a masked Where fused in front, front/fuse.c), element i of x reads as
 * value where fill[i % fill_n], as snrt_where would have written it; the
 * backward then writes 0 to dx there (the Where's gradient). */
typedef struct snrt_softmax_t {
  int64_t outer, len, inner;
  const uint8_t *fill;   /* NULL: no mask */
  int64_t fill_n;
  float value;
} snrt_softmax_t;

/* Dropout. The mask of element i is a pure function of (seed, step, id, i),
 * so backward (and recomputation) regenerate it instead of storing it.
 * Kept elements are scaled by 1/(1-ratio). */
typedef struct snrt_dropout_t {
  int64_t n;
  float ratio;
  uint32_t id;           /* a number unique to this dropout in the model */
} snrt_dropout_t;

/* Transformer ops (embedding, LayerNorm, masks, elementwise math). */

enum snrt_math_kind { SNRT_SQRT, SNRT_ERF, SNRT_NEG, SNRT_RECIPROCAL, SNRT_POW,
                      SNRT_SIN, SNRT_COS, SNRT_EXP, SNRT_LOG, SNRT_ABS, SNRT_HARDSIGMOID,
                      SNRT_HARDSWISH };

/* Elementwise y = f(x): sqrt, erf, -x, 1/x, x^exponent (Pow with a constant
 * exponent), sin, cos, exp, log, |x|, HardSigmoid max(0, min(1, alpha x +
 * beta)), HardSwish x max(0, min(1, x/6 + 1/2)). Backward reads y for Sqrt,
 * Reciprocal and Exp, neither for Neg, x for the others (the one it does not
 * need may be NULL). At a kink (|x| at 0, the hard ops' corners) the
 * gradient is torch's: 0 for Abs, the inner piece's for HardSwish at +-3,
 * 0 for HardSigmoid outside the open interval. */
typedef struct snrt_math_t {
  int64_t n;
  int kind;              /* enum snrt_math_kind */
  float exponent;        /* SNRT_POW */
  float alpha, beta;     /* SNRT_HARDSIGMOID */
} snrt_math_t;

/* A fused elementwise chain (compiler/front/fuse.c): a small program over
 * registers, run per element. Registers 0..nin-1 hold the inputs (every one
 * of n elements, no broadcasting); op j writes register nin + j from
 * operands a and b (register numbers; -1: the constant imm); the last op's
 * register is the output. Forward computes each op as the step it replaces
 * does (the same functions, the same float32 order), so a fused forward is
 * bit-identical to the unfused steps. Backward (snrt_fused_bwd) recomputes the
 * registers it can from the inputs it is given (bits of `have`; the others
 * NULL) and, with use_y, takes the output register from y, then runs the
 * chain rule through the program in reverse, writing the gradient of each
 * input whose bit is set in `need` (in input order, one pointer per set
 * bit); its sums may round differently from the unfused steps'
 * (accumulation order). The compiler gives it what the derivatives read
 * (a Relu of an Add: y alone; a GELU: its input). */
#define SNRT_FUSED_MAX_IN 8
#define SNRT_FUSED_MAX_OPS 24
enum snrt_fused_kind { SNRT_F_ADD, SNRT_F_SUB, SNRT_F_MUL, SNRT_F_DIV, SNRT_F_NEG, SNRT_F_RELU,
                       SNRT_F_SIGMOID, SNRT_F_TANH, SNRT_F_EXP, SNRT_F_LOG, SNRT_F_SQRT,
                       SNRT_F_RECIPROCAL, SNRT_F_ERF, SNRT_F_POW };
typedef struct snrt_fused_op_t {
  int8_t op, a, b;       /* enum snrt_fused_kind; operand registers (-1: imm) */
  float imm;             /* the constant operand; SNRT_F_POW: the exponent */
} snrt_fused_op_t;
typedef struct snrt_fused_t {
  int64_t n;
  int nin, nops;
  int need;              /* backward: bit k set: write the gradient of input k */
  int have;              /* backward: bit k set: input k is given (else NULL) */
  int use_y;             /* backward: the output register is read from y */
  snrt_fused_op_t ops[SNRT_FUSED_MAX_OPS];
} snrt_fused_t;

/* LayerNormalization over the last `cols` elements of each of `rows` rows:
 * y = (x - mean) * rstd * scale + bias, rstd = 1/sqrt(var + eps), var the
 * biased variance (as torch). mean and rstd (rows values each) are saved
 * for backward. */
typedef struct snrt_ln_t {
  int64_t rows, cols;
  float eps;
} snrt_ln_t;

/* Gather on any axis of a float table viewed as (outer, rows, dim), `rows`
 * the gathered axis: y[o][i] = table[o][idx[i]] (rows of dim floats); axis 0
 * (outer 1) is an embedding lookup. Indices are int32 in the arena (token ids
 * of the data input), or compile-time constants in `idx` (positions, a
 * select such as x[:, 0]). Backward zero-fills dtable and adds each dy row
 * to the row of its index (a scatter-add, summed in index order:
 * deterministic). outer 0 means 1. */
typedef struct snrt_gather_t {
  int64_t n_idx, rows, dim;
  const int32_t *idx;    /* constant indices (n_idx of them), or NULL */
  int64_t outer;
} snrt_gather_t;

/* Masked fill with a constant mask (Where(mask, value, x) as torch's
 * masked_fill writes it): y[i] = fill[i % inner] ? value : x[i]. The mask
 * (inner bytes) repeats over the leading dimensions. Its gradient is the
 * same op on dy with value 0. */
typedef struct snrt_where_t {
  int64_t n, inner;
  float value;
  const uint8_t *fill;
} snrt_where_t;

/* A gather by compile-time positions (GatherElements with constant
 * indices): y[i] = x[src[i]] for n_out outputs. Backward: dx[j] = the sum,
 * in output order, of dy[inv[k]] for k in [inv_start[j], inv_start[j+1])
 * (the outputs that read j; precomputed, so every runtime gathers:
 * deterministic). */
typedef struct snrt_take_t {
  int64_t n_in, n_out;
  const int32_t *src;        /* n_out */
  const int32_t *inv_start;  /* n_in + 1 */
  const int32_t *inv;        /* n_out */
} snrt_take_t;

/* Einsum of two operands (no ellipsis, no index repeated within one
 * operand): over an index space of `rank` dims, the first `nout` of them the
 * output's (in its order), the rest summed: y[o] = sum_s a[o, s] * b[o, s],
 * sa/sb the operands' element strides per index (0 where an operand lacks
 * it). Its gradients are the same form (dA = einsum(dy, B), dB =
 * einsum(dy, A)). Sums run in index order, in double: deterministic. */
typedef struct snrt_einsum_t {
  int rank, nout;
  int64_t n_out, n_sum;
  int64_t dims[SNRT_MAX_RANK];
  int64_t sa[SNRT_MAX_RANK], sb[SNRT_MAX_RANK];
} snrt_einsum_t;

/* Where with a condition computed from data (a bool tensor in the arena,
 * one byte per element): y[i] = cond[i] ? a[i] : b[i], the three broadcast
 * to the output's `rank` dims `dims` through their element strides sc, sa, sb
 * (0 on a broadcast dim). Backward: da = dy where cond, db = dy where not,
 * each summed over the dims where its operand was broadcast (one owner per
 * element, in index order: deterministic); either may be NULL. */
typedef struct snrt_where3_t {
  int rank;
  int64_t n, na, nb;
  int64_t dims[SNRT_MAX_RANK];
  int64_t sc[SNRT_MAX_RANK], sa[SNRT_MAX_RANK], sb[SNRT_MAX_RANK];
} snrt_where3_t;

/* Losses over logits (n, classes). Softmax cross-entropy takes int32 labels;
 * mse takes float targets of the logits' shape. Both average over the n rows
 * (the batch; for (batch, T, vocab) logits every batch x T position; mse over
 * every element, as torch.nn.MSELoss). */
typedef struct snrt_loss_t {
  int n, classes;
} snrt_loss_t;

/* The chunked LM head and softmax cross-entropy (autodiff.c's chunked loss):
 * for rows [r, r + chunk) at a time, logits = alpha * h W^T (trans_b: W is
 * (classes, k), a tied embedding) or alpha * h W (W (k, classes)), in the
 * workspace, never for all n rows at once. One step writes the loss (the
 * mean over the n rows of logsumexp - logit[label]) and, from the same
 * chunk's logits turned into (softmax - onehot) / n, the gradients: dh's
 * rows (need & 1) and dW (need & 2, summed over the chunks). Workspace:
 * n doubles (the rows' log-sum-exps or losses), then chunk x classes floats.
 * The eval step's copy (need 0, loss NULL) writes `rows` instead: per row
 * its loss term (logsumexp - logit[label]; NaN for a label outside
 * [0, classes)) and the index of its largest logit (the first of equal
 * ones), (n, 2) floats. Where the context's lm_sink is set (runtime/
 * snrt_dev.h: --predict and --generate), each chunk's logits are copied to
 * it too (host memory, n x classes floats): the device never holds them
 * whole. */
typedef struct snrt_lmce_t {
  int64_t n, classes, k, chunk;
  int trans_b, need;
  float alpha;
} snrt_lmce_t;

/* The head's products a step makes: the logits, and one per gradient. */
static inline int snrt_lmce_products(const snrt_lmce_t *p) {
  return 1 + ((p->need & 1) != 0) + ((p->need & 2) != 0);
}

static inline int64_t snrt_lmce_ws_bytes(const snrt_lmce_t *p) {
  return (int64_t)sizeof(float) * p->chunk * p->classes + (int64_t)sizeof(double) * p->n;
}

/* Optimizer updates. The learning rate comes from the context (--lr); `param`
 * is the index in the model's tensor table (for --dump-grads and logging). */
typedef struct snrt_sgd_t {
  int64_t n;
  float momentum, weight_decay, dampening;
  int nesterov;
  int param;
} snrt_sgd_t;

typedef struct snrt_adam_t {
  int64_t n;
  float beta1, beta2, eps, weight_decay;
  int decoupled;         /* 1: AdamW */
  int param;
} snrt_adam_t;

/* ---------------------------------------------------------------------------
 * The model descriptor: emitted by snc into train.c, read by the runtime's
 * main loop (flags, data, checkpoints, metrics, export).
 * ------------------------------------------------------------------------- */

enum snrt_tensor_kind {
  SNRT_T_INPUT,          /* data batch, written by the loader before each step */
  SNRT_T_LABEL,          /* labels (int32) or mse targets (float) */
  SNRT_T_PARAM,          /* trainable parameter (persistent) */
  SNRT_T_STATE,          /* non-trainable state, e.g. BN running mean/var */
  SNRT_T_OPT,            /* optimizer state (momentum, Adam moments) */
  SNRT_T_LOSS,           /* the scalar loss, valid after the step */
  SNRT_T_LOGITS,         /* model output, valid after an eval step */
  SNRT_T_GRAD,           /* parameter gradient (transient; see --dump-grads) */
  SNRT_T_CONST,          /* a constant operand, loaded once (not saved, not exported) */
  SNRT_T_SHARD,          /* --zero 1: this rank's part of one kind of optimizer state */
};

enum snrt_init {
  SNRT_INIT_NONE,        /* written by the program (inputs, grads...) */
  SNRT_INIT_FILE,        /* params.bin at file_offset */
  SNRT_INIT_ZERO,
  SNRT_INIT_ONE,
  SNRT_INIT_KAIMING,     /* PyTorch's default weight init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
  SNRT_INIT_BIAS,        /* PyTorch's default bias init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
};

enum snrt_dtype { SNRT_F32 = 1, SNRT_I32 = 6 };

typedef struct snrt_tensor {
  const char *name;      /* ONNX name (for files: sanitized to [A-Za-z0-9._-]) */
  int kind;              /* enum snrt_tensor_kind */
  int dtype;             /* enum snrt_dtype */
  int rank;
  int64_t dims[SNRT_MAX_RANK];
  int64_t nbytes;
  int64_t offset;        /* device arena offset; -1 where not resident (offloaded) */
  int64_t host_offset;   /* pinned host arena offset; -1 where none */
  int init;              /* enum snrt_init */
  int64_t fan_in;        /* for KAIMING and BIAS */
  int64_t file_offset;   /* for FILE: byte offset in params.bin */
  int grad;              /* PARAM: index of its GRAD entry (-1 if none) */
  int opt[2];            /* PARAM: indices of its optimizer state (-1 if none) */
} snrt_tensor;

enum snrt_loss_kind { SNRT_LOSS_SOFTMAX_CE, SNRT_LOSS_MSE };
enum snrt_opt_kind { SNRT_OPT_SGD, SNRT_OPT_ADAM, SNRT_OPT_ADAMW };

typedef struct snrt_ctx snrt_ctx;

/* One training step of the plan, for --profile: its kind and cost class
 * (compiler/plan/cost.c's names) and the plan's estimate of its seconds. */
typedef struct snrt_step_info {
  const char *kind;          /* "forward", "backward", "recompute", "offload"... */
  const char *cls;           /* "conv", "gemm", ... ; "copy" for copy steps */
  double est_s;              /* the cost model's estimate (a copy's: its transfer) */
} snrt_step_info;

typedef struct snrt_model {
  const char *name;          /* model file name */
  uint64_t fingerprint;      /* hash of model + plan: checkpoints must match */
  int batch;
  int64_t arena_bytes;       /* device arena: exactly this many bytes */
  int64_t host_bytes;        /* pinned host arena */
  int ntensors;
  const snrt_tensor *tensors;
  int input, label, loss, logits;   /* indices into tensors */
  int classes;               /* logits' last dimension (second for (batch, classes)) */
  /* 1: the chunked LM head (snrt_lmce): `logits` is the eval step's (batch x
   * positions, 2) summary (per row its loss term and argmax); the logits
   * themselves, (batch, positions, classes), reach the host only through
   * snrt_ctx.lm_sink. 0: `logits` is the logits. */
  int lm_rows;
  int loss_kind;             /* enum snrt_loss_kind */
  int opt_kind;              /* enum snrt_opt_kind */
  float lr;                  /* default learning rate (--lr overrides) */
  const char *policy;        /* plan policy name, for --metrics */
  void (*train_step)(snrt_ctx *c);  /* forward, loss, backward, updates */
  void (*eval_step)(snrt_ctx *c);   /* forward with inference semantics */
  /* Token models (an int32 data input of token ids (batch, T)): the
   * embedding's vocabulary (ids must lie in [0, vocab)); 0 otherwise. */
  int vocab;
  int positions;             /* labels per sample: T for (batch, T, vocab) logits, else 1 */
  /* CUDA target: device memory the profile reserves outside the arena (CUDA
   * context, cuDNN/cuBLAS and their lazily loaded kernels); the runtime
   * refuses to start when the arena does not leave it free. 0 on the CPU. */
  int64_t reserve_bytes;
  const char *device;        /* the device profile planned for */
  /* --dist mpi: 1, and the number of gradient all-reduce buckets; batch is
   * then per rank (the global batch is ranks x batch). 0 otherwise. */
  int dist;
  int buckets;
  /* --zero 1 --ranks N: N (the program runs at exactly N ranks), and the
   * elements of the flat parameter space each rank owns; 0 otherwise. */
  int zero;
  int64_t zero_shard;
  /* --zero 1: per tensor of the table, where a parameter starts in the flat
   * space (-1: not a parameter, or not updated); NULL otherwise. */
  const int64_t *zero_flat;
  /* --precision bf16|fp16: "bf16" or "fp16" (NULL: float32), and the bytes
   * of the largest step's float32 working copies (planned in the arena,
   * inside that step's workspace; reported, not allocated). */
  const char *precision;
  int64_t convert_bytes;
  /* --profile: the training steps of the plan (index = plan step, the
   * numbers snrt_reads gets), and the plan's estimated step time. */
  int nsteps;
  const snrt_step_info *steps;
  double est_step_s;
  /* The eval copies of the graph outputs, in the graph's order, when there
   * are several (--predict writes each); 0 and NULL: the logits alone. */
  int noutputs;
  const int *outputs;
  const char *est_device;    /* the device profile the estimates are for */
} snrt_model;

/* Defined by the emitted train.c. */
extern const snrt_model snrt_the_model;

/* ---------------------------------------------------------------------------
 * Context: what a step needs at run time.
 * ------------------------------------------------------------------------- */

char *snrt_arena(snrt_ctx *c);        /* device arena base */
float snrt_lr(snrt_ctx *c);           /* current learning rate */
int64_t snrt_step(snrt_ctx *c);       /* 0-based index of the step being run */
uint64_t snrt_seed(snrt_ctx *c);

/* Poison mode (--poison): fill [off, off+bytes) with NaN when its tensor dies.
 * A no-op otherwise. */
void snrt_dead(snrt_ctx *c, int64_t off, int64_t bytes);

/* Poison mode: called before step `step` (its index in the plan) with the
 * step's n float inputs in the device arena, as (offset, bytes) pairs in
 * `regions`. If any holds the poison pattern (a region that died and was not
 * written since, or was never written) the program stops: it names the step,
 * the region and the offset, and exits with 4. Checking reads, not only
 * results, is what makes poison catch reads that a kernel would launder
 * (ReLU, max-pool and Clip turn NaN into numbers). A no-op otherwise. */
void snrt_reads(snrt_ctx *c, int step, int n, const int64_t *regions);
/* (Every training step of train.c starts with a snrt_reads call, n = 0 where
 * it reads nothing to check: --profile times the steps between them.) */

/* Called by the update kernels with each parameter's final gradient before
 * it is applied (records it when --dump-grads is on). */
void snrt_grad_ready(snrt_ctx *c, int param, const float *g, int64_t n);

/* Unified tensor pool: asynchronous copies on the copy engine and events.
 * `after` is the event the copy waits for first (-1: none). */
void snrt_offload(snrt_ctx *c, int64_t host_off, int64_t dev_off, int64_t bytes, int event);
void snrt_prefetch(snrt_ctx *c, int64_t dev_off, int64_t host_off, int64_t bytes, int event);
void snrt_wait(snrt_ctx *c, int event);  /* compute waits until `event` completed */

/* Data parallel (--dist mpi; runtime/dist/mpi.c). snrt_comm_start starts
 * exchange `id` over n pieces of the arena given as (offset, float count,
 * root) triples in `pieces`: ALLREDUCE sums each piece across the ranks in
 * place (root -1); REDUCE sums it into rank `root` (--zero 1: the gradient
 * elements that rank owns); BCAST copies it from rank `root` to the others
 * (--zero 1: the parameters after their owner's update). The wait completes
 * it, and turns the sums a rank received into averages (divides by the
 * ranks); it ends every rank with a message if another rank does not answer
 * within --comm-timeout. Progress lets MPI move pending exchanges along
 * between compute steps. snrt_rank: this process's rank (0 without MPI). */
enum snrt_comm_kind { SNRT_COMM_ALLREDUCE, SNRT_COMM_REDUCE, SNRT_COMM_BCAST };
void snrt_comm_start(snrt_ctx *c, int id, int kind, int n, const int64_t *pieces);
void snrt_comm_wait(snrt_ctx *c, int id);
void snrt_comm_progress(snrt_ctx *c);
int snrt_rank(snrt_ctx *c);

/* ---------------------------------------------------------------------------
 * Kernels. Inputs are const; outputs are overwritten.
 * ------------------------------------------------------------------------- */

void snrt_conv_fwd(snrt_ctx *c, const snrt_conv_t *p, const float *x, const float *w,
                   const float *b /* NULL: no bias */, float *y, float *ws);
void snrt_conv_bwd_data(snrt_ctx *c, const snrt_conv_t *p, const float *dy, const float *w,
                        float *dx, float *ws);
void snrt_conv_bwd_filter(snrt_ctx *c, const snrt_conv_t *p, const float *x, const float *dy,
                          float *dw, float *ws);
void snrt_conv_bwd_bias(snrt_ctx *c, const snrt_conv_t *p, const float *dy, float *db);

void snrt_maxpool_fwd(snrt_ctx *c, const snrt_pool_t *p, const float *x, float *y);
void snrt_maxpool_bwd(snrt_ctx *c, const snrt_pool_t *p, const float *x, const float *dy, float *dx);
void snrt_avgpool_fwd(snrt_ctx *c, const snrt_pool_t *p, const float *x, float *y);
void snrt_avgpool_bwd(snrt_ctx *c, const snrt_pool_t *p, const float *dy, float *dx);

/* Batch statistics (training): writes y, saved mean and saved 1/sqrt(var+eps),
 * and updates the running statistics in place. */
void snrt_bn_fwd_train(snrt_ctx *c, const snrt_bn_t *p, const float *x, const float *scale,
                       const float *bias, float *rmean, float *rvar, float *y,
                       float *smean, float *sinvstd);
/* Recomputation: the same y from the saved statistics; running stats untouched. */
void snrt_bn_fwd_saved(snrt_ctx *c, const snrt_bn_t *p, const float *x, const float *scale,
                       const float *bias, const float *smean, const float *sinvstd, float *y);
/* Inference: running statistics. */
void snrt_bn_fwd_infer(snrt_ctx *c, const snrt_bn_t *p, const float *x, const float *scale,
                       const float *bias, const float *rmean, const float *rvar, float *y);
void snrt_bn_bwd(snrt_ctx *c, const snrt_bn_t *p, const float *x, const float *dy,
                 const float *scale, const float *smean, const float *sinvstd,
                 float *dx, float *dscale, float *dbias);

void snrt_lrn_fwd(snrt_ctx *c, const snrt_lrn_t *p, const float *x, float *y);
void snrt_lrn_bwd(snrt_ctx *c, const snrt_lrn_t *p, const float *x, const float *y,
                  const float *dy, float *dx);

void snrt_unary_fwd(snrt_ctx *c, const snrt_unary_t *p, const float *x, float *y);
/* Uses x for LeakyRelu/Clip/Relu, y for Sigmoid/Tanh (either may be passed). */
void snrt_unary_bwd(snrt_ctx *c, const snrt_unary_t *p, const float *x, const float *y,
                    const float *dy, float *dx);

void snrt_binary_fwd(snrt_ctx *c, const snrt_binary_t *p, const float *a, const float *b, float *y);
void snrt_binary_bwd(snrt_ctx *c, const snrt_binary_t *p, const float *a, const float *b,
                     const float *dy, float *da, float *db);

void snrt_reduce(snrt_ctx *c, const snrt_reduce_t *p, const float *big, float *small);
void snrt_expand(snrt_ctx *c, const snrt_reduce_t *p, const float *small, float *big);
void snrt_reduce_bwd(snrt_ctx *c, const snrt_reduce_t *p, const float *x, const float *y,
                     const float *dy, float *dx);

void snrt_matmul(snrt_ctx *c, const snrt_mm_t *p, const float *a, const float *b, float *y);
void snrt_bias_fwd(snrt_ctx *c, const snrt_bias_t *p, const float *b, float *y);
void snrt_bias_bwd(snrt_ctx *c, const snrt_bias_t *p, const float *dy, float *db);

void snrt_concat(snrt_ctx *c, const snrt_concat_t *p, const float *const *in, float *y);
void snrt_split(snrt_ctx *c, const snrt_concat_t *p, const float *x, float *const *out);
void snrt_slice_fwd(snrt_ctx *c, const snrt_slice_t *p, const float *x, float *y);
void snrt_slice_bwd(snrt_ctx *c, const snrt_slice_t *p, const float *dy, float *dx);
void snrt_pad_fwd(snrt_ctx *c, const snrt_pad_t *p, const float *x, float *y);
void snrt_pad_bwd(snrt_ctx *c, const snrt_pad_t *p, const float *dy, float *dx);
void snrt_transpose(snrt_ctx *c, const snrt_transpose_t *p, const float *x, float *y);

void snrt_softmax_fwd(snrt_ctx *c, const snrt_softmax_t *p, const float *x, float *y);
void snrt_softmax_bwd(snrt_ctx *c, const snrt_softmax_t *p, const float *y, const float *dy, float *dx);

void snrt_dropout_fwd(snrt_ctx *c, const snrt_dropout_t *p, const float *x, float *y);
void snrt_dropout_bwd(snrt_ctx *c, const snrt_dropout_t *p, const float *dy, float *dx);

void snrt_copy(snrt_ctx *c, int64_t bytes, const void *src, void *dst);
void snrt_fill(snrt_ctx *c, int64_t n, float value, float *y);
void snrt_add(snrt_ctx *c, int64_t n, const float *a, const float *b, float *y);  /* y = a + b */

/* Mixed precision (--precision bf16). Activations and their gradients are
 * bfloat16 in the arena; kernels compute in float32 on working copies in
 * the step's planned workspace (compiler/plan/convert.c). load widens n bf16
 * values into dst; round copies n floats into dst rounded to bf16 precision
 * (a 16-bit op's weights); store rounds n floats to nearest-even bf16 into
 * dst. The _rows forms move `rows` runs of `len` elements that lie `stride`
 * elements apart in the arena (a chunk of channels of an NCHW tensor) to or
 * from one contiguous copy. */
void snrt_bf16_load(snrt_ctx *c, const uint16_t *src, float *dst, int64_t n);
void snrt_bf16_round(snrt_ctx *c, const float *src, float *dst, int64_t n);
void snrt_bf16_store(snrt_ctx *c, const float *src, uint16_t *dst, int64_t n);
void snrt_bf16_load_rows(snrt_ctx *c, const uint16_t *src, int64_t stride, float *dst, int64_t rows,
                         int64_t len);
void snrt_bf16_store_rows(snrt_ctx *c, const float *src, uint16_t *dst, int64_t stride, int64_t rows,
                          int64_t len);
/* Tensor cores (--target cuda, --precision bf16|fp16; the CUDA runtime
 * only): convolution and GEMM on 16-bit operands in the arena, accumulating
 * in float32 (cuDNN with bfloat16/half tensors and float compute; cublasGemmEx
 * with CUBLAS_COMPUTE_32F). fmt says which 16-bit format. A float32 operand
 * (a weight, the data input) reaches them through a 16-bit copy in the
 * step's workspace (compiler/plan/convert.c); a conv's bias stays float32 and is
 * added to its 16-bit output in float32. matmul16 writes a float32 y when
 * y_fmt is 0 (a parameter's gradient, the eval logits), else a 16-bit one;
 * bias_fwd16 adds a float32 bias to a 16-bit y. */
enum snrt_half_fmt { SNRT_BF16 = 1, SNRT_F16 = 2 };
void snrt_conv_fwd16(snrt_ctx *c, const snrt_conv_t *p, int fmt, const uint16_t *x,
                     const uint16_t *w, const float *b, uint16_t *y, float *ws);
void snrt_conv_bwd_data16(snrt_ctx *c, const snrt_conv_t *p, int fmt, const uint16_t *dy,
                          const uint16_t *w, uint16_t *dx, float *ws);
void snrt_conv_bwd_filter16(snrt_ctx *c, const snrt_conv_t *p, int fmt, const uint16_t *x,
                            const uint16_t *dy, uint16_t *dw, float *ws);
void snrt_matmul16(snrt_ctx *c, const snrt_mm_t *p, int fmt, const uint16_t *a, const uint16_t *b,
                   void *y, int y_fmt);
void snrt_bias_fwd16(snrt_ctx *c, const snrt_bias_t *p, int fmt, const float *b, uint16_t *y);
/* --precision fp16: the same for IEEE half precision (float16), and
 * dynamic loss scaling (PyTorch GradScaler's defaults: initial scale 65536,
 * or SNRT_LOSS_SCALE; halved on overflow; doubled after 2000 steps without
 * one). snrt_loss_scale multiplies the loss gradient by the scale;
 * snrt_grad_unscale, after the backward pass, divides the n parameter
 * gradients g[k] (cnt[k] elements) by it and checks them for Inf/NaN; the
 * updates (snrt_sgd, snrt_adam) of a step that overflowed do nothing. The
 * CUDA runtime keeps the scale and the decision in device memory, so that a
 * captured CUDA graph replays them without the host. */
void snrt_f16_load(snrt_ctx *c, const uint16_t *src, float *dst, int64_t n);
void snrt_f16_round(snrt_ctx *c, const float *src, float *dst, int64_t n);
void snrt_f16_store(snrt_ctx *c, const float *src, uint16_t *dst, int64_t n);
void snrt_f16_load_rows(snrt_ctx *c, const uint16_t *src, int64_t stride, float *dst, int64_t rows,
                        int64_t len);
void snrt_f16_store_rows(snrt_ctx *c, const float *src, uint16_t *dst, int64_t stride, int64_t rows,
                         int64_t len);
void snrt_loss_scale(snrt_ctx *c, int64_t n, float *dy);
void snrt_grad_unscale(snrt_ctx *c, int n, float *const *g, const int64_t *cnt);

/* loss = mean over the batch; writes one float. */
void snrt_softmax_ce_fwd(snrt_ctx *c, const snrt_loss_t *p, const float *logits,
                         const int32_t *labels, float *loss);
void snrt_softmax_ce_bwd(snrt_ctx *c, const snrt_loss_t *p, const float *logits,
                         const int32_t *labels, float *dlogits);
void snrt_mse_fwd(snrt_ctx *c, const snrt_loss_t *p, const float *out, const float *target, float *loss);
void snrt_lmce(snrt_ctx *c, const snrt_lmce_t *p, const float *h, const float *w,
               const int32_t *labels, float *loss, float *dh, float *dw, float *rows, float *ws);
void snrt_mse_bwd(snrt_ctx *c, const snrt_loss_t *p, const float *out, const float *target, float *dout);

void snrt_math_fwd(snrt_ctx *c, const snrt_math_t *p, const float *x, float *y);
void snrt_math_bwd(snrt_ctx *c, const snrt_math_t *p, const float *x, const float *y,
                   const float *dy, float *dx);
/* in: nin pointers; dx: one pointer per set bit of p->need, in input order. */
void snrt_fused_fwd(snrt_ctx *c, const snrt_fused_t *p, const float *const *in, float *y);
void snrt_fused_bwd(snrt_ctx *c, const snrt_fused_t *p, const float *const *in, const float *y,
                    const float *dy, float *const *dx);
/* The same backward, given every input (have: all bits; use_y 0), also
 * writing the chain's output y_put: the registers it recomputes are the
 * forward's, bit for bit, so the planner can rebuild a dropped output in the
 * backward step (compiler/plan/recompute.c, "carried rebuilds") for the
 * write of y alone. */
void snrt_fused_bwd_y(snrt_ctx *c, const snrt_fused_t *p, const float *const *in, const float *dy,
                      float *const *dx, float *y_put);
/* bias may be NULL; mean/rstd may be NULL (inference). */
void snrt_ln_fwd(snrt_ctx *c, const snrt_ln_t *p, const float *x, const float *scale,
                 const float *bias, float *y, float *mean, float *rstd);
/* dbias may be NULL. */
void snrt_ln_bwd(snrt_ctx *c, const snrt_ln_t *p, const float *x, const float *dy,
                 const float *scale, const float *mean, const float *rstd, float *dx,
                 float *dscale, float *dbias);
/* The same, also writing the forward's y from x, the saved mean and 1/std,
 * scale and bias, as snrt_ln_fwd computes it (the forward's bits: a carried
 * rebuild, compiler/plan/recompute.c). */
void snrt_ln_bwd_y(snrt_ctx *c, const snrt_ln_t *p, const float *x, const float *dy,
                   const float *scale, const float *bias, const float *mean, const float *rstd,
                   float *dx, float *dscale, float *dbias, float *y);
/* idx NULL: p->idx. */
void snrt_gather_fwd(snrt_ctx *c, const snrt_gather_t *p, const float *table, const int32_t *idx,
                     float *y);
void snrt_gather_bwd(snrt_ctx *c, const snrt_gather_t *p, const int32_t *idx, const float *dy,
                     float *dtable);
void snrt_where(snrt_ctx *c, const snrt_where_t *p, const float *x, float *y);
void snrt_einsum(snrt_ctx *c, const snrt_einsum_t *p, const float *a, const float *b, float *y);
void snrt_where3_fwd(snrt_ctx *c, const snrt_where3_t *p, const uint8_t *cond, const float *a,
                     const float *b, float *y);
void snrt_where3_bwd(snrt_ctx *c, const snrt_where3_t *p, const uint8_t *cond, const float *dy,
                     float *da, float *db);
void snrt_take_fwd(snrt_ctx *c, const snrt_take_t *p, const float *x, float *y);
void snrt_take_bwd(snrt_ctx *c, const snrt_take_t *p, const float *dy, float *dx);

/* PyTorch semantics (torch.optim.SGD, Adam, AdamW); buffers start at zero. */
void snrt_sgd(snrt_ctx *c, const snrt_sgd_t *p, float *w, const float *g, float *mom);
void snrt_adam(snrt_ctx *c, const snrt_adam_t *p, float *w, const float *g, float *m, float *v);

/* SNRT_HD marks the few inline helpers that CUDA kernels call too (nvcc
 * compiles them for host and device); it is empty for a C compiler. */
#ifdef __CUDACC__
#define SNRT_HD __host__ __device__
#else
#define SNRT_HD
#endif

/* bfloat16 <-> float32, shared by every runtime. Rounding is to nearest,
 * ties to even (as PyTorch's and CUDA's __float2bfloat16); a NaN stays a
 * (quiet) NaN. */
static inline SNRT_HD uint16_t snrt_f32_to_bf16(float f) {
  union { float f; uint32_t u; } v;
  v.f = f;
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u);
  return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

static inline SNRT_HD float snrt_bf16_to_f32(uint16_t h) {
  union { float f; uint32_t u; } v;
  v.u = (uint32_t)h << 16;
  return v.f;
}

/* float16 (IEEE binary16) <-> float32: round to nearest, ties to even, with
 * subnormals; past 65504 (from 65520 up) a value becomes Inf, as numpy's
 * and CUDA's __float2half_rn. */
static inline SNRT_HD uint16_t snrt_f32_to_f16(float f) {
  union { float f; uint32_t u; } v;
  v.f = f;
  uint32_t sign = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (a < 0x38800000u) {   /* below 2^-14: a subnormal half (or zero) */
    if (a < 0x33000000u) return (uint16_t)sign;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    int shift = 126 - (int)(a >> 23);
    uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = (a >> 13) - (112u << 10), rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return (uint16_t)(sign | h);
}

static inline SNRT_HD float snrt_f16_to_f32(uint16_t h) {
  union { float f; uint32_t u; } v;
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) v.u = sign | 0x7f800000u | (m << 13);
  else if (e) v.u = sign | ((e + 112u) << 23) | (m << 13);
  else if (!m) v.u = sign;
  else {
    e = 113;
    while (!(m & 0x400u)) m <<= 1, e--;
    v.u = sign | (e << 23) | ((m & 0x3ffu) << 13);
  }
  return v.f;
}

/* The counter-based generator shared by every runtime: a uniform float in
 * [0, 1) from (seed, step, id, i). Pure, so masks can be regenerated. */
static inline SNRT_HD float snrt_uniform(uint64_t seed, uint64_t step, uint32_t id, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull ^ (step + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull;
  z ^= ((uint64_t)id << 40) ^ i * 0x94D049BB133111EBull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (float)(z >> 40) * (1.0f / 16777216.0f);
}

/* Sin, Cos, Exp, Log, Abs, HardSigmoid, HardSwish: y = f(x), and f'(x)
 * (from y for Exp), one definition for both runtimes' kernels. */
static inline SNRT_HD float snrt_math_more(const snrt_math_t *p, float v) {
  switch (p->kind) {
  case SNRT_SIN: return sinf(v);
  case SNRT_COS: return cosf(v);
  case SNRT_EXP: return expf(v);
  case SNRT_LOG: return logf(v);
  case SNRT_ABS: return fabsf(v);
  case SNRT_HARDSIGMOID: {
    float t = p->alpha * v + p->beta;
    return t <= 0.0f ? 0.0f : t >= 1.0f ? 1.0f : t;
  }
  default:   /* SNRT_HARDSWISH */
    return v <= -3.0f ? 0.0f : v >= 3.0f ? v : v * (v + 3.0f) / 6.0f;
  }
}

static inline SNRT_HD float snrt_math_more_d(const snrt_math_t *p, float v, float y) {
  switch (p->kind) {
  case SNRT_SIN: return cosf(v);
  case SNRT_COS: return -sinf(v);
  case SNRT_EXP: return y;
  case SNRT_LOG: return 1.0f / v;
  case SNRT_ABS: return v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : 0.0f;
  case SNRT_HARDSIGMOID: {
    float t = p->alpha * v + p->beta;
    return t > 0.0f && t < 1.0f ? p->alpha : 0.0f;
  }
  default:   /* SNRT_HARDSWISH */
    return v < -3.0f ? 0.0f : v > 3.0f ? 1.0f : v / 3.0f + 0.5f;
  }
}

/* Where on data: offsets of cond, a, b at output element i. */
static inline SNRT_HD void snrt_where3_at(const snrt_where3_t *p, int64_t i, int64_t *oc, int64_t *oa,
                                          int64_t *ob) {
  int64_t c = 0, a = 0, b = 0;
  for (int d = p->rank - 1; d >= 0; d--) {
    int64_t q = i % p->dims[d];
    i /= p->dims[d];
    c += q * p->sc[d], a += q * p->sa[d], b += q * p->sb[d];
  }
  *oc = c, *oa = a, *ob = b;
}

/* The gradient of Where's operand `which` (0: a, 1: b) at its element e: the
 * sum, in output order, of dy over the outputs that read e and chose it. */
static inline SNRT_HD float snrt_where3_grad_at(const snrt_where3_t *p, int which, int64_t e,
                                                const uint8_t *cond, const float *dy) {
  const int64_t *s = which ? p->sb : p->sa;
  int kept[SNRT_MAX_RANK], red[SNRT_MAX_RANK], nk = 0, nr = 0;
  for (int d = 0; d < p->rank; d++) {
    if (s[d] || p->dims[d] == 1) kept[nk++] = d;
    else red[nr++] = d;
  }
  int64_t idx[SNRT_MAX_RANK] = {0}, r = e, count = 1;
  for (int k = nk - 1; k >= 0; k--) {
    idx[kept[k]] = r % p->dims[kept[k]];
    r /= p->dims[kept[k]];
  }
  for (int k = 0; k < nr; k++) count *= p->dims[red[k]];
  double acc = 0;
  for (int64_t q = 0; q < count; q++) {
    int64_t t = q;
    for (int k = nr - 1; k >= 0; k--) {
      idx[red[k]] = t % p->dims[red[k]];
      t /= p->dims[red[k]];
    }
    int64_t o = 0, oc = 0;
    for (int d = 0; d < p->rank; d++) o = o * p->dims[d] + idx[d], oc += idx[d] * p->sc[d];
    if ((cond[oc] != 0) != (which != 0)) acc += dy[o];
  }
  return (float)acc;
}

/* Reflect/edge padding, shared by the runtimes: the input position of output
 * position o along a dim of d inputs, `b` of them before. */
static inline SNRT_HD int64_t snrt_pad_src1(int mode, int64_t o, int64_t b, int64_t d) {
  int64_t i = o - b;
  if (mode == SNRT_PAD_EDGE) return i < 0 ? 0 : i >= d ? d - 1 : i;
  if (d == 1) return 0;
  int64_t P = 2 * (d - 1);
  i %= P;
  if (i < 0) i += P;
  return i < d ? i : P - i;
}

/* The ranges [lo, hi] of output positions that read input position j along
 * one dim (out positions od); returns how many (at most SNRT_PAD_MAX_RANGES). */
static inline SNRT_HD int snrt_pad_ranges1(int mode, int64_t j, int64_t b, int64_t d, int64_t od,
                                          int64_t *lo, int64_t *hi) {
  int n = 0;
  if (mode == SNRT_PAD_EDGE || d == 1) {
    int64_t a = j == 0 ? 0 : b + j, z = j == d - 1 ? od - 1 : b + j;
    if (a < 0) a = 0;
    if (z > od - 1) z = od - 1;
    if (a <= z) lo[n] = a, hi[n] = z, n++;
    return n;
  }
  for (int64_t o = 0; o < od && n < SNRT_PAD_MAX_RANGES; o++)
    if (snrt_pad_src1(mode, o, b, d) == j) lo[n] = hi[n] = o, n++;
  return n;
}

/* dx at input element j for reflect/edge padding: the sum, in output order,
 * of the dy elements that read it. */
static inline SNRT_HD float snrt_pad_grad_at(const snrt_pad_t *p, int64_t j, const float *dy) {
  int64_t lo[SNRT_MAX_RANK][SNRT_PAD_MAX_RANGES], hi[SNRT_MAX_RANK][SNRT_PAD_MAX_RANGES];
  int cnt[SNRT_MAX_RANK], ri[SNRT_MAX_RANK];
  int64_t pos[SNRT_MAX_RANK], k = j;
  for (int d = p->rank - 1; d >= 0; d--) {
    int64_t q = k % p->in_dims[d];
    k /= p->in_dims[d];
    cnt[d] = snrt_pad_ranges1(p->mode, q, p->before[d], p->in_dims[d], p->out_dims[d], lo[d], hi[d]);
    if (!cnt[d]) return 0.0f;
    ri[d] = 0;
    pos[d] = lo[d][0];
  }
  double s = 0;
  for (;;) {
    int64_t o = 0;
    for (int d = 0; d < p->rank; d++) o = o * p->out_dims[d] + pos[d];
    s += dy[o];
    int d = p->rank - 1;
    for (; d >= 0; d--) {
      if (pos[d] < hi[d][ri[d]]) { pos[d]++; break; }
      if (ri[d] + 1 < cnt[d]) { ri[d]++; pos[d] = lo[d][ri[d]]; break; }
      ri[d] = 0;
      pos[d] = lo[d][0];
    }
    if (d < 0) break;
  }
  return (float)s;
}

#ifdef __cplusplus
}
#endif
#endif /* SNRT_H */
