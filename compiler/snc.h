/* snc.h — the bottom of the compiler: util (errors, allocation, sizes), the
 * IR (tensors, nodes, graphs) and the op table (ops.h). Every stage's header
 * includes it; the stages' own functions are declared in their folders'
 * headers, each including the stage below it:
 *
 *   front/front.h    import, shape inference, folding, flops, inspect
 *   train/train.h    autodiff (loss, backward, updates), precision
 *   plan/plan.h      route, liveness, recompute, offload, offsets, auto's
 *                    search, cost model, devices, schedule, workspaces,
 *                    16-bit copies
 *   review/review.h  plan text, JSON, HTML, diff
 *   emit/emit.h      train.c, plan files, build.ninja
 *
 * The pipeline, pass by pass, is pipeline() in main.c; compiler/README.md is
 * the map. */
#ifndef SNC_H
#define SNC_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdnoreturn.h>

#include "../runtime/snrt.h"

#define MAX_RANK SNRT_MAX_RANK

/* ------------------------------------------------------------------ util.c */

/* Exit codes (docs/reference.md, "snc"). */
enum { EXIT_USAGE = 1, EXIT_BADINPUT = 2, EXIT_INTERNAL = 3 };

/* The file named in error messages (set by the driver). */
extern const char *err_file;

/* "snc: error: FILE: <msg>" and exit(code). */
noreturn void fatal(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Bad input about a node: "snc: error: FILE: <msg> (node 'NAME', op OP)", exit 2. */
typedef struct Node Node;
noreturn void node_error(const Node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
noreturn void internal_error(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define unreachable() internal_error(__FILE__, __LINE__, "unreachable")
#define snc_assert(x) ((x) ? (void)0 : internal_error(__FILE__, __LINE__, "assertion failed: %s", #x))

/* The in-process fuzzer (tests/fuzz/fuzz_model.c). When snc_error_jmp is set,
 * fatal()/node_error() store their exit code in snc_error_code and longjmp
 * there instead of exiting, and internal_error() aborts (a bug the fuzzer must
 * report); snc_error_quiet silences their messages. */
extern jmp_buf *snc_error_jmp;
extern int snc_error_code;
extern bool snc_error_quiet;
/* While tracking is on, every x*alloc is recorded (and free() forgets it, see
 * SNC_FUZZ below); snc_alloc_release() frees all that is left, so an input
 * abandoned by longjmp half way through a pass leaks nothing. */
void snc_alloc_track(bool on);
void snc_alloc_release(void);
void snc_free(void *p);
/* The fuzz build (-DSNC_FUZZ) routes the passes' free() through snc_free. */
#ifdef SNC_FUZZ
#include <stdlib.h>
#define free(p) snc_free(p)
#endif

/* malloc, tracked as above, NULL on failure (protobuf-c's allocator). */
void *xmalloc_try(size_t n);
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
/* nonnull: the format is never NULL. Saying so also keeps gcc's format-
 * truncation check from seeing UBSan's null-argument branch as a call with
 * a null format (a false "null format string" error under --sanitize). */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2), nonnull(1)));
/* Grow *arr (of *cap elements of size `size`) to hold at least `need`. */
void xgrow(void **arr, int *cap, int need, size_t size);
/* a*b with an "absurd size" error instead of overflow (limit: 2^48). */
int64_t mul_checked(int64_t a, int64_t b, const char *what);
/* Parse "123", "64MiB", "1.5GB"...; -1 if malformed. */
int64_t parse_size(const char *s);
/* "12.3 MiB" into a static rotating buffer. */
const char *fmt_bytes(int64_t b);
uint64_t hash_bytes(uint64_t h, const void *p, size_t n);

/* ------------------------------------------------------------------ IR (ir.c) */

#include "ops.h"

typedef enum {
#define OP_ENUM(id, ...) OP_##id,
  SNC_OPS(OP_ENUM)
#undef OP_ENUM
  OP_COUNT
} OpKind;

/* ONNX TensorProto.DataType codes, used as they are. */
enum { DT_UNDEF = 0, DT_FLOAT = 1, DT_UINT8 = 2, DT_INT8 = 3, DT_UINT16 = 4, DT_INT16 = 5,
       DT_INT32 = 6, DT_INT64 = 7, DT_STRING = 8, DT_BOOL = 9, DT_FLOAT16 = 10,
       DT_DOUBLE = 11, DT_UINT32 = 12, DT_UINT64 = 13, DT_BFLOAT16 = 16 };
/* --precision: PREC_FP32 (every float tensor 32-bit), PREC_BF16 (activations
 * and their gradients stored in bfloat16, fp32 master weights; precision.c),
 * PREC_FP16 (the same in float16, with dynamic loss scaling). */
typedef enum { PREC_FP32, PREC_BF16, PREC_FP16 } Precision;
int dtype_size(int dtype);           /* 0 for unknown/unsupported */
const char *dtype_name(int dtype);

typedef enum {
  TK_ACT,        // forward activation (intermediate or output)
  TK_INPUT,      // the data input
  TK_LABEL,      // labels / targets (added by autodiff)
  TK_PARAM,      // trainable parameter
  TK_STATE,      // non-trainable persistent state (BN running mean/var)
  TK_CONST,      // constant: shape tensors, Clip bounds, folded Constant nodes
  TK_GRAD,       // gradient of an activation
  TK_PGRAD,      // gradient of a parameter
  TK_OPT,        // optimizer state (momentum, Adam moments)
  TK_AUX,        // saved forward by-product needed by backward (BN mean/invstd)
  TK_LOSS,       // the scalar loss
  TK_WORKSPACE,  // scratch for one step (conv im2col / cuDNN workspace)
  TK_CONSTVAL,   // a constant read as data by a kernel (Mul by 2.0...): lives in the arena
} TensorKind;
const char *tensor_kind_name(TensorKind k);

typedef struct Tensor {
  char *name;              // ONNX name, or a derived name ("conv1.weight.grad")
  int dtype;               // DT_*
  int rank;                // -1 until shape inference
  int64_t dims[MAX_RANK];
  TensorKind kind;
  void *data;              // initial/constant value in dtype (NULL if none)
  int64_t ndata;           // elements in data
  int producer;            // node writing it (-1: none: input, param, const)
  int grad;                // its gradient tensor (-1: none)
  int grad_of;             // for gradients: the tensor it is the gradient of
  bool is_output;          // a graph output
  bool has_init;           // initializer present (parameters: initial value given)
  int64_t fan_in;          // parameters without initializer: for PyTorch's default init
  int64_t zero_flat;       // --zero 1: a parameter's first element in the flat space of all
  int init;                // SNRT_INIT_* for parameters/state (set by autodiff)
  bool batched;            // shape inference: computed from the data input, dim 0 its batch
} Tensor;

int64_t tensor_numel(const Tensor *t);
int64_t tensor_bytes(const Tensor *t);
const char *shape_str(const Tensor *t);     /* "(32, 64, 56, 56)", rotating buffer */

/* ONNX AttributeProto.AttributeType codes. */
enum { AT_UNDEF = 0, AT_FLOAT = 1, AT_INT = 2, AT_STRING = 3, AT_TENSOR = 4, AT_GRAPH = 5,
       AT_FLOATS = 6, AT_INTS = 7, AT_STRINGS = 8 };

typedef struct Attr {
  char *name;
  int type;                // AT_*
  float f;
  int64_t i;
  char *s;
  int n;                   // elements in ints/floats
  int64_t *ints;
  float *floats;
  int tensor;              // AT_TENSOR: index of a TK_CONST tensor in the graph
} Attr;

/* PH_RECOMPUTE: nodes that only recompute steps run (BN_SAVED twins); not
 * part of the route by themselves. */
/* PH_COMM: data-parallel communication (ALLREDUCE in the backward pass,
 * COMM_WAIT before the updates), --dist only. */
typedef enum { PH_FORWARD, PH_LOSS, PH_BACKWARD, PH_UPDATE, PH_EVAL, PH_RECOMPUTE, PH_COMM } Phase;

struct Node {
  char *name;              // ONNX node name (or derived: "conv1/bwd_data")
  OpKind op;
  int nin, nout;
  int *in;                 // tensor indices; -1: an absent optional input
  int *out;
  int nattr;
  Attr *attrs;
  Phase phase;
  int fwd;                 // generated nodes: the forward node they derive from (-1)
  void *p;                 // op parameters (an snrt_*_t from snrt.h), set by shape.c/autodiff.c
  int aux;                 // op-specific small integer (e.g. unary kind, softmax axis)
  int twin;                // forward BN: its BN_SAVED recompute twin (-1 until made)
  const char *onnx_op;     // OP_EVAL: the ONNX op_type (a static string of front/eval.c's
                           // table; aux is its row); NULL otherwise
};

typedef struct Graph {
  const char *path;        // model file
  char *name;              // graph name
  int64_t opset;           // default-domain opset
  Tensor *t;
  int nt, capt;
  Node *n;
  int nn, capn;
  int input;               // the data input tensor
  int output;              // the model output (logits), the first graph output
  int label;               // labels (autodiff), -1 before
  int loss;                // loss (autodiff), -1 before
  int batch;               // batch size after shape inference
  int nfwd;                // nodes [0, nfwd) are the forward graph (topologically sorted)
  int eval_output;         // the eval graph's copy of `output` (autodiff), -1 before; with
                           // eval_rows, the chunked head's (rows, 2) summary instead
  bool eval_rows;          // the chunked loss's eval step: per row its loss term and argmax
                           // (snrt_lmce), the logits never whole
  int *eval_outs;          // the eval copies of the other graph outputs (--predict writes them),
  int neval_outs;          // in tensor order; none for a one-output model
  int export_batch;        // the data input's declared batch (0: symbolic)
  int batch_reshapes;      // Reshape targets whose export batch now follows --batch
  int zero_ranks;          // --zero 1: ranks the optimizer state is sharded over (0: none)
  int64_t zero_shard;      // --zero 1: elements of the flat parameter space per rank
  Precision precision;     // --precision the graph was typed for (precision_assign)
  int64_t convert_chunk;   // 16-bit steps: elements per chunk of float32 copies (convert.c;
                           // --convert-chunk), 0: whole tensors
  bool tensor_cores;       // cuda target: conv/GEMM/MatMul read 16-bit operands (no copies)
} Graph;

Graph *graph_new(const char *path);
/* Forgets every graph's name map (the fuzzer, between inputs: the maps are
 * keyed by graph address). */
void ir_reset(void);
int graph_add_tensor(Graph *g, const char *name, int dtype, TensorKind kind);
int graph_find_tensor(const Graph *g, const char *name);   /* -1 if absent; hashed */
/* t is read by the runtime after the eval step: eval_output or one of eval_outs. */
bool graph_is_eval_output(const Graph *g, int t);
/* Appends a node; `in`/`out` are copied. Returns its index. Pointers into g->n
 * may move. */
int graph_add_node(Graph *g, OpKind op, const char *name, int nin, const int *in,
                   int nout, const int *out);
void tensor_set_shape(Tensor *t, int rank, const int64_t *dims);

const Attr *attr_find(const Node *n, const char *name);
int64_t attr_int(const Node *n, const char *name, int64_t dflt);
float attr_float(const Node *n, const char *name, float dflt);
const char *attr_string(const Node *n, const char *name, const char *dflt);
/* ints attribute: returns count (0 if absent) and sets *v. */
int attr_ints(const Node *n, const char *name, const int64_t **v);

/* The data input when tensor t holds the data input's elements in its order
 * (t is the input, or a Reshape/Flatten/Squeeze/Unsqueeze/Identity chain of
 * it: token ids viewed as (B*T)), else -1. */
int graph_token_source(const Graph *g, int t);

/* Values of a constant int tensor input (Reshape shape, Slice starts...):
 * returns count, or node_error when the input is not a known constant. */
int const_ints(const Graph *g, const Node *n, int input, int64_t *out, int max);
/* A constant float scalar input (Clip min/max, Dropout ratio); dflt if absent. */
float const_float(const Graph *g, const Node *n, int input, float dflt);

/* Node params (node->p) by op, set by shape.c (forward ops) or autodiff.c:
 *   CONV, CONV_BWD_*            snrt_conv_t        BATCHNORM, BN_*     snrt_bn_t
 *   RELU..CLIP, UNARY_BWD       snrt_unary_t       *POOL*, *POOL_BWD  snrt_pool_t
 *   LRN, LRN_BWD                snrt_lrn_t         GEMM               GemmParams
 *   MATMUL, MATMUL_RAW          snrt_mm_t          BIAS_BWD           snrt_bias_t
 *   ADD..DIV, BINARY_BWD        snrt_binary_t      CONCAT, SPLIT      snrt_concat_t
 *   SLICE, SLICE_BWD            snrt_slice_t       TRANSPOSE          snrt_transpose_t
 *   PAD, PAD_BWD                snrt_pad_t         DROPOUT(_BWD)      snrt_dropout_t
 *   SOFTMAX(_BWD)               snrt_softmax_t     REDUCEMEAN, REDUCE, EXPAND  snrt_reduce_t
 *   SOFTMAX_CE*, MSE*           snrt_loss_t        SGD / ADAM         snrt_sgd_t / snrt_adam_t
 *   SQRT..POW, MATH_BWD         snrt_math_t        LAYERNORM, LN_BWD  snrt_ln_t
 *   GATHER, GATHER_BWD          snrt_gather_t      WHERE              snrt_where_t
 *   BROADCAST (Expand), TILE    snrt_reduce_t      TRILU              snrt_where_t
 *   EINSUM                      EinsumParams (forward, then both gradients' forms)
 *   GATHERELEMENTS, TAKE_BWD    snrt_take_t        WHERE_DATA(_BWD)   snrt_where3_t
 *   LMHEAD_CE (chunked loss)    snrt_lmce_t
 *   FLATTEN, RESHAPE, IDENTITY, ACCUMULATE, CONSTANT: NULL (a copy / y = a + b). */
typedef struct GemmParams {
  snrt_mm_t mm;            // Y = alpha * op(A) op(B)   (batch 1)
  snrt_bias_t bias;        // Y += beta * C, C broadcast to (M, N)
  bool has_c;
} GemmParams;

/* Einsum: the forward product and the forms of its two gradients (shape_seq.c);
 * node->p points at fwd, its first member. */
typedef struct EinsumParams {
  snrt_einsum_t fwd, da, db;
} EinsumParams;

/* A CPU conv's im2col sizing (shape_nn.c): as many images as fit `target`
 * bytes of columns (at least one), and ws_bytes. */
void shape_conv_workspace(snrt_conv_t *p, int64_t target);
/* Scratch bytes a node needs for its step (conv im2col / cuDNN); 0 for most. */
int64_t node_workspace_bytes(const Graph *g, const Node *n);

/* ------------------------------------------------------------------ op table (ir.c) */

enum { COST_FREE, COST_CHEAP, COST_EXPENSIVE };

typedef struct Emit Emit;      /* emit.h */
typedef void ShapeFn(Graph *g, Node *n);
typedef void GradFn(Graph *g, int node);              /* appends backward nodes */
typedef void EmitFn(Emit *e, const Graph *g, const Node *n);
typedef double FlopFn(const Graph *g, const Node *n);

typedef struct OpInfo {
  const char *name;        // enum name without OP_ ("CONV")
  const char *onnx;        // ONNX op_type, "" for internal ops
  int min_in, max_in;      // max -1: unbounded
  int min_out, max_out;
  int cost;                // COST_*
  ShapeFn *shape;
  GradFn *grad;
  EmitFn *emit;
  FlopFn *flops;
} OpInfo;

extern const OpInfo op_info[];
/* The recomputation class of one node: its op's cost column, except that a
 * MatMul of two activations computed from the data (Tensor.batched: not a
 * weight, nor a transposed weight) with a short inner dimension (at most
 * NODE_CHEAP_MATMUL_K: attention scores Q K^T, inner dimension the head
 * width) is COST_CHEAP. Such a product costs k/2 FLOPs per byte it would
 * keep (a weight product of width C: C/2), and its output (batch x heads x
 * T x T) is the largest tensor of a transformer layer: cheap to rebuild and
 * expensive to keep, as in Megatron's selective recomputation. (ir.c) */
#define NODE_CHEAP_MATMUL_K 256
int node_cost(const Graph *g, const Node *n);
const char *op_name(OpKind op);        /* ONNX name, or internal name */
/* Where tensor t's value comes from, for messages: "" when t is itself a
 * graph input or initializer, else " (computed from the data input 'x')"
 * or " (computed from initializer 'w')" naming the nearest one it derives
 * from (the data input first). A rotating static buffer. */
const char *tensor_source(const Graph *g, int t);
/* The node's ONNX op_type (OP_EVAL: the one it was imported as), or op_name. */
const char *node_op_name(const Node *n);
/* False for inputs that shape inference folds into the node's params
 * (Reshape's shape, Slice's starts..., Pad's pads, Clip's bounds, Dropout's
 * ratio, Split's sizes, ReduceMean's axes); true for data the kernel reads. */
bool op_slot_is_data(OpKind op, int k);
int op_from_onnx(const char *op_type); /* -1 if unsupported */

/* Declarations of every op's functions, from the table. Columns an op does
 * not have name a stand-in (shape_internal, grad_none, emit_none) that fails
 * clearly if it is ever called. */
#define DECL_OP_FNS(id, onnx, a, b, c, d, cost, shape, grad, emit, flops) \
  ShapeFn shape; GradFn grad; EmitFn emit; FlopFn flops;
SNC_OPS(DECL_OP_FNS)
#undef DECL_OP_FNS

#endif /* SNC_H */
