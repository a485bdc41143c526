/* plan.h — the planning stage's public types and functions. */
#ifndef SNC_PLAN_H
#define SNC_PLAN_H

#include "../train/train.h"

#include <math.h>

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
  int64_t lent_bytes;      // a cuda conv workspace: of `bytes`, those lent from a free hole
                           // beyond its planned size (workspace.c; not in live bytes)
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
  int selected;            // auto's per-tensor rebuilds (select.c): tensors dropped (0: none)
  int64_t selected_bytes;  // ... the bytes of those a backward step reads
  int carried;             // ... of them, rebuilt by a backward step's carrier (recompute.c)
  int opt_cuts;            // auto's optimal persistent schedule (optimal.c): the chain's cuts
                           // (0: not used)
  int opt_kept;            // ... of them, kept from the forward pass
  int64_t opt_bytes;       // ... the model's memory it is optimal for
  double opt_seconds;      // ... the model's seconds of rebuilds
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
  double *step_seconds;    // per training step: the cost model's seconds (plan_estimate; a copy's
                           // its transfer); NULL before the first estimate
  int nstep_seconds;
  double *step_rebuild;    // ... of them, what a carrier step adds to its plain step (its
                           // rebuild, counted in recompute_seconds); 0 elsewhere
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

/* The output side of a measured shape: padded by ksize/2, as snc-calibrate
 * ran it (runtime/calibrate/cases.c), rounded down as integer division does
 * (hw 2, 3x3 stride 2: 1, not 1.5). */
static inline double conv_shape_out(const CostShape *q) {
  return floor((q->hw + 2 * (int)(q->ksize / 2) - q->ksize) / q->stride) + 1;
}

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

/* plan.c: runs the planning passes for the policy over the route `r`
 * (route_build's; each plan works on its own copy, the caller keeps r):
 * liveness, recompute, offload, offsets (auto: search.c). A plan that does
 * not fit the budgets is an error (exit 2) naming the smallest that fits. */
Plan *plan_build(Graph *g, const Route *r, const PlanOpts *o);
/* The same without the budget errors: the fixed policy's plan whatever its
 * size, auto's fastest that fits, or NULL where none does (max-batch's
 * probes). */
Plan *plan_try(Graph *g, const Route *r, const PlanOpts *o);
/* plan.c, shared with search.c: the route and liveness of the training
 * graph (every plan starts from it; the none policy's arena in
 * baseline_bytes); a deep copy; freeing; packing the device arena and checking
 * it (O(n log n): every plan snc produces is verified); the estimate. */
Plan *plan_base(Graph *g, const Route *r, const PlanOpts *o, const DeviceProfile *dev);
Plan *plan_clone(const Plan *pl);
void plan_free(Plan *pl);
void plan_pack(const Graph *g, Plan *pl);
void plan_estimate(const Graph *g, Plan *pl, const DeviceProfile *dev);
/* Forward activations (and BN's saved statistics) that offloading may move:
 * all but the tiny ones. */
bool *plan_offload_candidates(const Graph *g);
/* Per tensor (malloc'ed): read by a backward node (saved for backward). */
bool *plan_saved_tensors(const Graph *g);
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
Plan *search_auto(Graph *g, const Route *r, const PlanOpts *o, const DeviceProfile *dev,
                  int64_t budget, int64_t host_budget);
/* Where none fits: the smallest device arena of a plan within the host
 * budget, the smallest host arena of a plan within the device budget, the
 * smallest device arena of all (INT64_MAX: none); exact is false where a
 * time limit (seconds > 0; 0: none on graphs up to 2,000 forward nodes, 20 s
 * above) stopped the search first. */
typedef struct SearchSmallest {
  int64_t arena, host, any;
  bool exact;
} SearchSmallest;
SearchSmallest search_smallest(Graph *g, const Route *r, const PlanOpts *o,
                               const DeviceProfile *dev, int64_t budget, int64_t host_budget,
                               double seconds);
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
/* For the passes that add instances and steps (recompute, offload,
 * host_state): a new instance with no lifetime and no offset yet, on the
 * device or (host) in the host arena; and an append to an int list grown
 * only by plan_push_int from empty (capacity doubling at powers of two). */
int plan_new_instance(Plan *pl, int tensor, int64_t bytes, bool host);
void plan_push_int(int **arr, int *n, int v);
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
/* qsort_r orders of instance indices (ctx: the Instance array) by first
 * step, and by last step; ties by index. The checker's sweep and
 * workspace.c's use them. */
int inst_cmp_first(const void *x, const void *y, void *ctx);
int inst_cmp_last(const void *x, const void *y, void *ctx);
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
  const bool *drop;        // per tensor: exactly these are dropped and rebuilt (select.c's
                           // sets; NULL: the cheap rule or checkpoint mode decides)
  const struct RcTree *tree;   // with drop: what the rebuilds keep (optimal.c's schedules;
                               // NULL: each dropped tensor rebuilt once, speed-centric)
  int carry;               // with drop and no tree: carried rebuilds (recompute.c) of every
                           // kind (CARRY_ALL), none, or fused chains' only
} RecomputeOpts;
enum { CARRY_ALL, CARRY_NONE, CARRY_CHAINS };
/* The keep rule of a persistent checkpointing schedule (optimal.c): the
 * cuts split the forward pass into intervals 0 .. n-1 (interval j starts at
 * cut j, interval 0 at the input); while the backward steps that read
 * interval q's dropped tensors run, a rebuilt tensor of interval j is kept
 * after the step that made it where j == q, or where keep[q * n + j] has
 * bit 0 (it is cut j) or bit 1 (it is not a cut); every other rebuilt tensor
 * dies after its last reader in that step. */
typedef struct RcTree {
  int n;                   // intervals
  const int *gi;           // per tensor: its interval (-1: not a forward activation)
  const bool *cut;         // per tensor: a cut that starts an interval
  unsigned char *keep;     // n x n
} RcTree;
/* Per tensor (malloc'ed): a cut, the only activation crossing its point of
 * the forward order. */
bool *forward_cuts(const Graph *g);
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
/* Carried rebuilds (recompute.c): the carrier of FUSED_BWD node b (-1: none);
 * per tensor, the step of route r whose carrier can rebuild it (-1). */
int rc_carrier(Graph *g, int b);
/* A carrier node: a FUSED_BWD or LN_BWD whose last output is the forward's
 * output, rebuilt (aux 1). */
static inline bool node_carries(const Node *n) {
  return n->aux == 1 && (n->op == OP_FUSED_BWD || n->op == OP_LN_BWD);
}
/* plan.c: of step s's seconds t, what rebuilds: all of a recompute step's,
 * what a carrier adds to its plain step, 0 elsewhere. */
double plan_rebuild_seconds(const Graph *g, const Plan *pl, int s, double t,
                            const DeviceProfile *dev);
int *rc_carry_steps(Graph *g, const Route *r);
void rc_chain_start(RcChain *c);
bool rc_chain_escalate(RcChain *c, int64_t target);
int64_t rc_chain_peak(const RcChain *c);     /* the live bytes targets are compared with */
Plan *rc_chain_plan(RcChain *c);             /* the chain's plan (borrowed) */
int rc_chain_checkpoints(const RcChain *c);
int rc_chain_recursive_segments(const RcChain *c);
/* One run of node m as a recompute step: it reads and writes the instances
 * of its tensors in pl, and its workspace. */
double rc_node_seconds(const Graph *g, const Plan *pl, const Node *m, const DeviceProfile *dev);
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
/* optimal.c: auto's optimal persistent checkpointing family. One schedule:
 * what the forward pass drops and the rebuilds' keep rule, optimal for the
 * chain of cuts in `bytes` of kept activations (the model of optimal.c). */
typedef struct OptSchedule {
  bool *drop;              // per tensor
  RcTree tree;
  int64_t bytes;           // the model's memory the schedule is optimal for
  double seconds;          // the model's rebuild seconds
  int kept;                // cuts kept from the forward pass
} OptSchedule;
/* The schedules (*out malloc'ed; optimal_free frees them) at the memories
 * where the optimum's cost steps down, thinned to at most OPT_SCHEDULES
 * (`step`: the seconds of the step without rebuilds, the scale of the
 * thinning); 0 where the graph has fewer than 2 cuts. */
enum { OPT_SCHEDULES = 64, OPT_INTERVALS = 96 };
int optimal_schedules(Graph *g, const Plan *base, const DeviceProfile *dev, double step,
                      OptSchedule **out);
void optimal_free(OptSchedule *s, int n);
/* select.c: auto's per-tensor rebuild family: drop sets (each one
 * malloc'ed, per tensor; *sets malloc'ed), at most SELECT_SETS from each of
 * two greedy walks (bytes per second of rebuild; bytes taken off the
 * estimated peak per second), run again by the costs without carried
 * rebuilds where some has one; returns how many. */
enum { SELECT_SETS = 48 };
int select_rebuild_sets(Graph *g, const Plan *base, const DeviceProfile *dev, bool ***sets);
/* offload.c: inserts offload/prefetch steps for the selected tensors (those
 * whose copies hide fully only, if hidden_only); returns how many. */
int offload_plan(Graph *g, Plan *pl, const bool *sel, const DeviceProfile *dev, bool hidden_only,
                 int max_lead);
void offload_dump(const Graph *g, const Plan *pl, FILE *f);
/* host_state.c: optimizer state (and with `params`, parameters) in the host arena, copied
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

#endif /* SNC_PLAN_H */
