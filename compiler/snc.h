/* snc.h — the compiler's one internal header: the IR, the op table, and a
 * section per pass (each .c file's public functions).
 *
 * Pipeline (main.c):
 *   g = onnx_import(path)           import.c     ONNX protobuf -> IR (forward graph)
 *   shape_infer(g, batch)            shape.c      dims of every tensor, node params
 *   train_build(g, &opts)            autodiff.c   loss, backward, optimizer updates
 *   r = route_build(g)               route.c      one linear list of steps
 *   plan_build(g, r, &popts)         plan.c       liveness, recompute, offload, offsets
 *   emit_program(g, r, dir)          emit.c       train.c, plan.*, build.ninja
 */
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

/* Exit codes (INTERFACE.md). */
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
  int eval_output;         // the eval graph's copy of `output` (autodiff), -1 before
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
 *   BROADCAST (Expand)          snrt_reduce_t
 *   FLATTEN, RESHAPE, IDENTITY, ACCUMULATE, CONSTANT: NULL (a copy / y = a + b). */
typedef struct GemmParams {
  snrt_mm_t mm;            // Y = alpha * op(A) op(B)   (batch 1)
  snrt_bias_t bias;        // Y += beta * C, C broadcast to (M, N)
  bool has_c;
} GemmParams;

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
/* False for inputs that shape inference folds into the node's params
 * (Reshape's shape, Slice's starts..., Pad's pads, Clip's bounds, Dropout's
 * ratio, Split's sizes, ReduceMean's axes); true for data the kernel reads. */
bool op_slot_is_data(OpKind op, int k);
int op_from_onnx(const char *op_type); /* -1 if unsupported */

/* ------------------------------------------------------------------ import.c */

/* Reads an ONNX model (and external data beside it), builds the forward IR:
 * tensors with kinds (input/param/state/const/act), nodes with attributes,
 * Constant nodes folded into TK_CONST tensors, nodes topologically sorted.
 * `input_name` picks the data input (NULL: the first graph input without an
 * initializer). Errors: fatal(EXIT_BADINPUT, ...). */
Graph *onnx_import(const char *path, const char *input_name);
/* The same from the file's bytes (`buf`, from xmalloc: freed here); `path`
 * names the model in messages and its folder holds external data. */
Graph *onnx_import_bytes(unsigned char *buf, size_t len, const char *path,
                         const char *input_name);
/* The import pass's debug view (`snc inspect MODEL --dump import`): every
 * tensor (kind, dtype, declared shape, init) and node (inputs, outputs,
 * attributes) as import leaves them, before shape inference. (import_dump.c) */
void import_dump(const Graph *g, FILE *f);

/* ------------------------------------------------------------------ shape.c */

/* Replaces the data input's leading dimension by `batch` (if > 0) and infers
 * every tensor's shape and every node's params (node->p). */
void shape_infer(Graph *g, int batch);

/* ------------------------------------------------------------------ flops.c */

double graph_forward_flops(const Graph *g);

/* ------------------------------------------------------------------ inspect.c */

void inspect_print(const Graph *g, FILE *f);
void inspect_json(const Graph *g, FILE *f);

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
  Precision precision;     // --precision (precision_assign runs at the end of train_build)
  int64_t convert_chunk;   // --convert-chunk: elements (0: whole tensors; -1: the target's default)
  bool cuda;               // --target cuda (its conv/GEMM/MatMul read 16-bit operands directly)
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
/* Storage dtypes of a training graph (the last part of train_build): under
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

/* ------------------------------------------------------------------ convert.c */

/* A 16-bit step's float32 working copies (convert.c has the rules). */
typedef enum { CHUNK_WHOLE, CHUNK_FLAT, CHUNK_IMAGES, CHUNK_CHANNELS } ChunkAxis;
typedef struct ConvertSlot {
  int tensor;              // the float operand in the arena (-1: none)
  int dtype;               // its storage dtype
  bool copy;               // has a float32 copy (16-bit, or rounded for a 16-bit op)
  bool chunked;            // follows the chunks: `outer` rows of chunk x `inner` elements,
                           // rows units x inner apart, starting at unit u0 x inner
  int64_t outer, inner;
  int64_t at;              // copy: byte offset in the step's workspace
  int64_t floats;          // copy: elements it holds (one chunk's, or the whole tensor's)
  int same;                // an earlier input slot of the same tensor: its copy (-1: none)
} ConvertSlot;
typedef struct Convert {
  bool wrapped;            // the step runs on copies: float32 ones, or (half) 16-bit ones
  bool half;               // tensor cores (cuda): 16-bit copies of float32 operands
  ChunkAxis axis;
  int64_t units;           // elements, images or channels the chunks split
  int64_t chunk;           // units per chunk (units: one pass)
  bool accumulates;        // the chunks after the first add to an output (conv backward-filter)
  int nin, nout;
  ConvertSlot *in, *out;   // per node input / output
  int64_t bytes;           // workspace bytes of the copies (SNRT_ALIGN multiple; 0: none)
} Convert;
void convert_plan(const Graph *g, const Node *n, Convert *cv);
void convert_free(Convert *cv);
/* convert_plan(...).bytes */
int64_t convert_bytes(const Graph *g, const Node *n);
/* Node params for a chunk of m units along axis (malloc'ed; `first`: the
 * step's first chunk), NULL for ops that take the count from the emitter (gradient
 * accumulation, copies). */
void *convert_chunk_params(const Node *n, ChunkAxis axis, int64_t m, bool first);

/* ------------------------------------------------------------------ route.c */

typedef enum { SK_FORWARD, SK_LOSS, SK_BACKWARD, SK_UPDATE, SK_RECOMPUTE, SK_OFFLOAD,
               SK_PREFETCH, SK_EVAL, SK_ALLREDUCE, SK_COMM_WAIT, SK_REDUCE_SCATTER,
               SK_ALLGATHER } StepKind;
const char *step_kind_name(StepKind k);

/* One step of the schedule: a node to run (or a copy to issue). */
typedef struct Step {
  StepKind kind;
  int node;                // node index (-1 for copies)
  int tensor;              // offload/prefetch: the tensor copied
  int *in, *out;           // instance indices aligned with node->in/out (-1: none/const)
  int nin, nout;
  int ws;                  // workspace instance of this step (-1: none)
  int event;               // offload/prefetch: the event its copy records when done (-1)
  int *wait, nwait;        // events the compute stream waits for after this step
  int *keep, nkeep;        // instances kept busy through this step (a copy uses them)
} Step;

typedef struct Route {
  Step *s;
  int ns, caps;
  int train_steps;         // steps [0, train_steps) are the training step
  int **chunk;             // Step.in/out storage (route_ints): freed with the route
  int nchunk, capchunk;
  int *next, left;         // ... the free part of the last chunk
} Route;

Route *route_build(const Graph *g);
Step *route_push(Route *r, const Step *proto);   /* appends a deep copy */
Route *route_clone(const Route *r);              /* a deep copy */
void route_free(Route *r);
void route_dump(const Graph *g, const Route *r, FILE *f);

/* ------------------------------------------------------------------ plan.c etc. */

typedef enum { POL_NONE, POL_LIVENESS, POL_RECOMPUTE, POL_OFFLOAD, POL_SUPERNEURONS,
               POL_AUTO } Policy;
const char *policy_name(Policy p);
int policy_parse(const char *s);       /* -1 if unknown */

/* One buffer in the device arena: a tensor, or a second instance of it (a
 * recomputed or prefetched copy), or a step's workspace. Lifetime in steps,
 * inclusive. */
typedef struct Instance {
  int tensor;              // IR tensor (-1: a workspace; its step is `first`)
  int64_t bytes;           // rounded up to SNRT_ALIGN
  int first, last;         // first step that writes it, last step that reads it
  int64_t offset;          // device arena offset (-1: not on the device)
  int64_t host_offset;     // pinned host arena offset (-1: none)
  bool persistent;         // resident for the whole program (params, opt state...)
  bool host;               // lives in the pinned host arena (an offloaded copy)
  int64_t convert_bytes;   // a workspace: of `bytes`, the first ones hold the step's float32
                           // working copies (--precision bf16|fp16: convert.c)
} Instance;

typedef struct PlanOpts {
  Policy policy;
  int64_t budget;          // bytes (0: the device profile's memory)
  const char *device;      // device profile name
  int64_t host_budget;     // pinned host arena bytes (0: the profile's host memory)
  int64_t segment;         // policy recompute --segment: checkpoint segments of this size
} PlanOpts;

typedef struct Plan {
  PlanOpts opts;
  Policy planned;          // the kind of plan made (opts.policy; for auto, the one it chose)
  int64_t budget;          // the budget planned for (opts.budget, or the device's memory)
  int64_t host_budget;     // the host budget planned for (opts.host_budget, or the profile's)
  int checkpoints;         // checkpoint-mode recomputation: checkpoints kept (0: not used)
  int recursive_segments;  // ... segments rebuilt by the binary schedule (recompute.c)
  int *ckpt;               // ... the checkpoint tensors, in forward order
  int64_t seg_bytes;       // ... and the segment size asked for
  char *auto_log;          // policy auto: one line per candidate tried (--dump auto)
  int batch;
  Route *route;            // steps; Step.in/out are instance indices
  Instance *inst;
  int ninst, capinst;
  int *tensor_inst;        // per tensor: its primary instance (-1: none)
  int ntensors;            // ... its entries (the graph's tensors when liveness ran)
  int64_t arena_bytes;     // device arena size
  int64_t persistent_bytes;
  int64_t host_bytes;      // host arena size (auto's search: its live bytes until host_packed)
  bool host_packed;        // host offsets assigned (offsets_host)
  int64_t peak_live_bytes; // max over steps of live instance bytes, before packing
  int64_t layer_peak_bytes;
  int64_t baseline_bytes;  // the none policy's arena
  double recompute_flops, offload_bytes, est_step_seconds, step_flops;
  double compute_seconds, recompute_seconds, exposed_seconds;  // est_step_seconds' parts
  double copy_loss_seconds;  // of exposed_seconds: compute slowed by copies beside it (cost_copy_loss)
  int nevents;             // events used by copy steps
  int64_t aliased_bytes;   // tensors sharing another's instance in place (liveness_assign)
  int64_t *live_bytes;     // per step
  int64_t *high_water;     // per step: highest arena byte in use
  int64_t ws_cap;          // cuda target: conv workspaces lent up to this (workspace.c); 0: not
} Plan;

/* cost.c: the op classes a calibrated profile gives rates for (the names
 * are the keys of a profile file's "classes"; snc-calibrate writes them). */
typedef enum { CC_CONV, CC_CONV_SMALL, CC_CONV_1X1, CC_CONV_BWD, CC_CONV_BWD_SMALL, CC_CONV_BWD_1X1,
               CC_GEMM, CC_POOL, CC_NORM, CC_ELEMENTWISE, CC_UPDATE, CC_ADAM, CC_STRIDED,
               CC_MATH, CC_LOSS, CC_COUNT } CostClass;
typedef enum { COPY_D2H, COPY_H2D } CopyDir;

/* Rates of a calibrated profile, measured on the runtime's kernels. */
typedef struct CostRates {
  double class_flops[CC_COUNT];   // FLOP/s per op class (0: bandwidth alone)
  double class_bw[CC_COUNT];      // bytes touched per second per op class (0: FLOPs alone)
  double d2h_bw, h2d_bw;          // copy engine, each direction (bytes/s)
  double d2h_s, h2d_s;            // ... and its fixed cost per copy (the copy thread's and the
                                  // waiter's wake-ups on the CPU; 0: none measured)
  double d2h_loss, h2d_loss;      // compute seconds lost per second of copy running beside
                                  // compute (a copy engine that shares the compute cores); 0:
                                  // copies overlap compute for free (separate copy engines)
  double overhead[CC_COUNT];      // seconds added to each compute step of the class (the
                                  // call, a parallel region's start); default step_overhead_s
  double per_unit[CC_COUNT];      // convolution classes: seconds per image of the batch (the
                                  // CPU kernels' per-image GEMMs and im2col set-up); gemm:
                                  // seconds per matrix of a batched product (one sgemm each);
                                  // norm and loss: seconds per contiguous row (cost_units)
  double parallel[CC_COUNT];      // seconds added where the step's kernel runs as a parallel
                                  // region (the thread team's wake-up); 0: none measured
  double parallel_min;            // above this many elements (largest operand) a CPU kernel
                                  // runs in parallel; 0: the profile says nothing
  struct CostShape *shapes;       // the convolutions measured (nearest one's rate wins)
  int nshapes;
  struct CostGemm *gemms;         // the GEMMs measured (nearest one's rate wins)
  int ngemms;
  struct CostPool *pools;         // the poolings measured (nearest one of its kind wins)
  int npools;
} CostRates;
/* One measured pooling: max or average, its window elements visited
 * (n c oh ow kh kw), window size, stride, forward and backward rates. */
typedef struct CostPool {
  int avg;
  double work, window, stride;
  double fwd_rate, bwd_rate;      // window elements per second
} CostPool;
/* One measured GEMM: batch (one sgemm each), m, n, k, transposes, FLOP rate. */
typedef struct CostGemm {
  double batch, m, n, k;
  int trans_a, trans_b;
  double rate;                    // FLOP/s of the whole call
} CostGemm;
/* One measured convolution: class offset (0 large K, 1 small K, 2 1x1), shape,
 * forward and backward (data + filter) FLOP rates. */
typedef struct CostShape {
  int kind;
  double n, c, hw, k, ksize, stride;
  double fwd_rate, bwd_rate;      // FLOP/s (backward: each of its two kernels at this rate)
  double bwd_data_rate, bwd_filter_rate;   // each backward kernel's own (0: bwd_rate)
} CostShape;

/* devices.c: device profiles (the table mirrors schemas/devices.json). */
typedef struct DeviceProfile {
  const char *name;
  double flops;            // FP32 FLOP/s
  double mem_bw;           // device memory bytes/s
  double link_bw;          // host <-> device bytes/s (pinned)
  int64_t mem_bytes;       // device memory
  int64_t reserve_bytes;   // device memory a CUDA program needs outside its arena
  int sm;                  // compute capability x 10 (0: not a GPU); < 75: planning only
  int64_t host_bytes;      // pinned host memory for offloaded tensors (0: this machine's)
  const struct CostRates *rates;   // calibrated profiles only (a file snc-calibrate wrote);
                                   // NULL in the built-in table: the simple model (cost.c)
} DeviceProfile;
extern const DeviceProfile device_profiles[];
extern const int device_profile_count;
/* The named profile; a usage error (exit 1) naming the known ones if absent.
 * A name with a '/' or ending in ".json" is a profile file (as snc-calibrate
 * writes it), read once; a wrong or partial file is exit 2 naming it. */
const DeviceProfile *device_find(const char *name);
/* The default budget: the memory less the reserve. */
int64_t device_budget(const DeviceProfile *d);
/* The default host budget: host_bytes, or this machine's memory. */
int64_t device_host_budget(const DeviceProfile *d);

/* cost.c: the cost model, the one answer to "how long does this step, copy
 * or recomputation take on this device". */
CostClass cost_class(const Graph *g, const Node *n);
const char *cost_class_name(CostClass c);
/* A node that touches `bytes` (inputs, outputs, workspace) once. */
double cost_node_seconds(const Graph *g, const Node *n, double bytes, const DeviceProfile *d);
double cost_copy_seconds(double bytes, CopyDir dir, const DeviceProfile *d);
/* The compute time a copy in direction dir costs while it runs beside
 * compute for `overlap` seconds (of its own cost_copy_seconds): 0 on a
 * device with its own copy engines; on the CPU target, where the copy
 * engine is a thread on the compute cores, what snc-calibrate measured. */
double cost_copy_loss(double overlap, CopyDir dir, const DeviceProfile *d);
/* Step s of the plan's route: a compute step's time, or a copy's (which
 * overlaps compute; the planner counts only its exposed part). */
double cost_step_seconds(const Graph *g, const Plan *pl, int s, const DeviceProfile *d);
/* cost_step_seconds of every training step, copies 0 (the compute timeline
 * the offload pass lays copies against); ns + 1 entries. */
double *cost_step_times(const Graph *g, const Plan *pl, const DeviceProfile *d);

/* plan.c: runs the planning passes for the policy. */
Plan *plan_build(Graph *g, const PlanOpts *o);
/* plan.c, shared with search.c: the route and liveness of the training
 * graph (every plan starts from it; the none policy's arena in
 * baseline_bytes); a deep copy; freeing; packing the device arena and checking
 * it (O(n log n): every plan snc produces is verified); the estimate. */
Plan *plan_base(Graph *g, const PlanOpts *o, const DeviceProfile *dev);
Plan *plan_clone(const Plan *pl);
void plan_free(Plan *pl);
void plan_pack(const Graph *g, Plan *pl);
void plan_estimate(const Graph *g, Plan *pl, const DeviceProfile *dev);
/* Forward activations (and BN's saved statistics) that offloading may move:
 * all but the tiny ones. */
bool *plan_offload_candidates(const Graph *g);
/* Persistent kinds on the host at host-state level hs (1: optimizer state,
 * 2: parameters too), and their arena bytes. */
bool plan_moves_to_host(TensorKind k, int hs);
int64_t plan_moved_bytes(const Graph *g, int hs);
/* Recomputation alone: the longest chain of cheap layers rebuilt from one
 * checkpoint (a deep ResNet stage's block outputs would otherwise all be
 * rebuilt from the stage's first, and memory-centric rebuilds of such a
 * chain cost its length squared). */
enum { PLAN_RECOMPUTE_CHAIN = 64 };
/* What a plan does after recomputation. */
typedef struct PlanVariant {
  Policy planned;          // the kind of plan (Plan.planned)
  const bool *sel;         // tensors to offload (NULL: none)
  bool hidden_only;        // ... only where the copies hide fully
  int lead;                // offload_plan's max_lead (0: any; -1: synchronous)
  int hs;                  // persistent state on the host: 1 optimizer state, 2 parameters too
} PlanVariant;
/* The passes after recomputation: offload, persistent state to the host,
 * in-place steps, the host arena, the estimate; the device arena is not
 * packed. With `floor` (auto's search), a plan whose lower bounds
 * (liveness_floors) already exceed floor[0] (device) or floor[1] (host)
 * after offload is cut short: false, peak_live_bytes and host_bytes are then
 * those bounds and est_step_seconds NaN; and the host arena is not packed
 * either (host_bytes: its live bytes, host_packed false; plan_pack packs
 * both). */
bool plan_finish(Graph *g, Plan *pl, const DeviceProfile *dev, const PlanVariant *v,
                 bool recomputed, int64_t baseline, const int64_t floor[2]);
/* search.c: auto, the fastest estimated plan whose device arena fits
 * `budget` and whose host arena fits `host_budget` (packed and checked; its
 * auto_log lists the candidates), or NULL if none does. */
Plan *search_auto(Graph *g, const PlanOpts *o, const DeviceProfile *dev, int64_t budget,
                  int64_t host_budget);
/* Where none fits: the smallest device arena of a plan within the host
 * budget, the smallest host arena of a plan within the device budget, the
 * smallest device arena of all (INT64_MAX: none); exact is false where a
 * time limit (seconds > 0; 0: none on graphs up to 2,000 forward nodes, 20 s
 * above) stopped the search first. */
typedef struct SearchSmallest {
  int64_t arena, host, any;
  bool exact;
} SearchSmallest;
SearchSmallest search_smallest(Graph *g, const PlanOpts *o, const DeviceProfile *dev,
                               int64_t budget, int64_t host_budget, double seconds);
/* How long an infeasible budget's error may search for the smallest budget
 * that fits before it names one that fits ("at most"). 0 (the default): no
 * limit on graphs up to 2,000 forward nodes, 20 s on larger ones; a positive
 * value limits every graph (the fuzzer's 0.5 s). */
extern double plan_smallest_search_seconds;
/* liveness.c: one instance per arena tensor plus one per conv workspace;
 * fills Step.in/out/ws and the per-step statistics (live_bytes...).
 * liveness_compute = liveness_assign (primary instances, Step in/out/ws) +
 * liveness_lifetimes (first/last from the steps, statistics); passes that
 * insert steps and instances (recompute, offload) run between the two. */
void liveness_compute(const Graph *g, Plan *pl);
/* The workspace instance of a step of node n at step `first` (its kernel's
 * scratch and its float32 working copies), or -1 when it needs none. */
int liveness_workspace(const Graph *g, Plan *pl, const Node *n, int first);
/* Bytes rounded up to SNRT_ALIGN (every instance's size). */
int64_t arena_align(int64_t b);
/* Kinds resident for the whole program (parameters, state, optimizer state, constants). */
bool tensor_kind_persistent(TensorKind k);
void liveness_assign(const Graph *g, Plan *pl);
void liveness_lifetimes(const Graph *g, Plan *pl);
/* Elementwise steps write over an input that dies there (after the other passes). */
void liveness_inplace(const Graph *g, Plan *pl);
/* Lower bounds that no later pass goes below (offload_persistent only adds
 * transient device instances; liveness_inplace saves at most the output of
 * one in-place step per step): the device live bytes of the instances that
 * are not persistent, and the host arena (the peak of its live bytes). With
 * `movable` (the tensors offload_plan may still move), their primary
 * instances count only at the steps that use them (offloading moves a copy
 * out only between uses): a bound for any offload of them. */
void liveness_floors(const Graph *g, const Plan *pl, const bool *movable, int64_t *transient,
                     int64_t *host);
/* An instance's name (its tensor's, or "NODE/workspace") and kind name. */
const char *plan_inst_name(const Graph *g, const Plan *pl, int inst);
const char *plan_inst_kind(const Graph *g, const Plan *pl, int inst);
void liveness_dump(const Graph *g, const Plan *pl, FILE *f);
/* offsets.c: greedy interval packing; returns the arena size. */
int64_t offsets_assign(Plan *pl, bool share);
void offsets_host(Plan *pl);
/* pl->high_water from the offsets and lifetimes (after a pass changes lifetimes). */
void offsets_high_water(Plan *pl);
void offsets_dump(const Graph *g, const Plan *pl, FILE *f);
/* Brute-force check: no two instances whose lifetimes overlap share bytes.
 * Returns the number of violations (printed to f if non-NULL). */
int offsets_check(const Graph *g, const Plan *pl, FILE *f);
/* recompute.c: inserts recompute steps (Step.kind SK_RECOMPUTE) and their
 * instances; segments go memory-centric while live bytes exceed `target`. */
typedef struct RecomputeOpts {
  int64_t target;          // live-byte target (INT64_MAX: segments stay speed-centric)
  int max_chain;           // cheap rule: longest rebuild before a tensor is kept
  int64_t seg_bytes;       // 0: cheap layers only rebuilt; > 0: checkpoint mode, every
                           // layer between checkpoints about seg_bytes apart
  bool ck_offloaded;       // checkpoint mode: the target ignores the checkpoints' forward
                           // instances (offload_plan moves them to the host next)
  bool recursive;          // checkpoint mode: segments escalate to the recursive level
                           // (binary schedule over the cuts inside) instead of nested
} RecomputeOpts;
/* Returns how many checkpoints checkpoint mode kept. */
int recompute_plan(Graph *g, Plan *pl, const RecomputeOpts *o);
/* recompute_plan in parts, for a search that walks one scheme down a ladder
 * of targets (plan.c's auto): rc_chain_new decides what is dropped (pl as
 * liveness_compute left it; the chain owns pl->route from then on),
 * rc_chain_start makes the route with every segment speed-centric,
 * rc_chain_escalate raises levels while live bytes exceed the target (levels
 * never go down: returns whether any changed), rc_chain_finish frees the
 * chain and leaves pl with the current route. pl->ckpt and pl->checkpoints
 * are set by rc_chain_new. */
typedef struct RcChain RcChain;
RcChain *rc_chain_new(Graph *g, Plan *pl, const RecomputeOpts *o);
void rc_chain_start(RcChain *c);
bool rc_chain_escalate(RcChain *c, int64_t target);
int64_t rc_chain_peak(const RcChain *c);     /* the live bytes targets are compared with */
Plan *rc_chain_plan(RcChain *c);             /* the chain's plan (borrowed) */
int rc_chain_checkpoints(const RcChain *c);
int rc_chain_recursive_segments(const RcChain *c);
/* Seconds that every plan of the chain spends in recompute steps at least. */
double rc_chain_rebuild_lb(RcChain *c, const DeviceProfile *dev);
/* Device bytes the first state (every segment speed-centric) holds at some
 * step at least, persistent state not counted. */
int64_t rc_chain_first_floor(RcChain *c);
int rc_chain_finish(RcChain *c);
extern long rc_rebuilds;                     /* routes built (auto's log reports it) */
/* Frees a chain never started (the plan keeps its route). */
void rc_chain_discard(RcChain *c);
void recompute_dump(const Graph *g, const Plan *pl, FILE *f);
/* offload.c: inserts offload/prefetch steps for the selected tensors (those
 * whose copies hide fully only, if hidden_only); returns how many. */
int offload_plan(Graph *g, Plan *pl, const bool *sel, const DeviceProfile *dev, bool hidden_only,
                 int max_lead);
void offload_dump(const Graph *g, const Plan *pl, FILE *f);
/* Optimizer state (and with `params`, parameters) in the host arena, copied
 * to the device around each cluster of steps using them. */
int offload_persistent(Graph *g, Plan *pl, const DeviceProfile *dev, bool params);
/* The seconds offload_persistent's copies would add to this plan's step (all
 * of them are synchronous). Steps inserted into the route later only split
 * trips, never join them: a lower bound for every plan made from this one. */
double offload_persistent_seconds(const Graph *g, const Plan *pl, const DeviceProfile *dev,
                                  bool params);
/* schedule.c: removes the waits implied by others (a later copy on the same
 * queue waited for at the same step, or already); returns how many. With a
 * non-NULL log, prints every wait and what became of it (--dump schedule). */
int schedule_waits(const Graph *g, Plan *pl, FILE *log);
/* workspace.c (cuda target, after offsets): each conv step gets the largest
 * free hole of the arena at that step, up to cap bytes. */
#define WS_CUDA_CAP (1LL << 30)
void workspace_plan(const Graph *g, Plan *pl, int64_t cap);
void workspace_print(const Graph *g, const Plan *pl, FILE *f);
/* --dump PASS: route | liveness | recompute | offload | offsets */
void plan_dump(const Graph *g, const Plan *pl, const char *pass, FILE *f);
/* Largest batch whose plan fits o->budget (0 if none). */
int plan_max_batch(const char *model, const char *input, const TrainOpts *t, const PlanOpts *o);
/* plan_print.c */
const char *plan_note(const Plan *pl);   /* what auto chose and why; NULL otherwise */
void plan_print_text(const Graph *g, const Plan *pl, FILE *f);
void plan_print_summary(const Graph *g, const Plan *pl, FILE *f);
void plan_print_json(const Graph *g, const Plan *pl, FILE *f);
/* plan_html.c */
void plan_print_html(const Graph *g, const Plan *pl, FILE *f);
/* plan_diff.c: returns the exit code */
int plan_diff(const char *a_json, const char *b_json, FILE *f);

/* ------------------------------------------------------------------ emit.c */

typedef struct EmitOpts {
  const char *target;      // "cpu" | "cuda"
  const char *model_path;  // the source model (copied into DIR)
  const char *snc_root;    // repository root (for runtime headers and libraries)
  const TrainOpts *train;
} EmitOpts;

void emit_program(const Graph *g, const Plan *pl, const EmitOpts *o, const char *dir);

/* Declarations of every op's functions, from the table. Columns an op does
 * not have name a stand-in (shape_internal, grad_none, emit_none) that fails
 * clearly if it is ever called. */
#define DECL_OP_FNS(id, onnx, a, b, c, d, cost, shape, grad, emit, flops) \
  ShapeFn shape; GradFn grad; EmitFn emit; FlopFn flops;
SNC_OPS(DECL_OP_FNS)
#undef DECL_OP_FNS

#endif /* SNC_H */
