/* rt.h — internal to runtime/common: the pieces of the emitted program's main
 * loop (flags, parameter init, data, checkpoints, npy, metrics, export) and
 * what they share. Not seen by the emitted train.c (that sees only snrt.h) nor
 * by the device layers (they see snrt_dev.h).
 *
 * Every function here that meets a user error prints one line
 * "PROG: error: ..." and exits with the code docs/reference.md gives. */
#ifndef SNRT_RT_H
#define SNRT_RT_H

#include "snrt_dev.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdnoreturn.h>

/* ---- flags.c: options; util.c: errors ------------------------------------ */

typedef struct rt_opts {
  const char *data, *eval;        /* --data / --eval specs */
  int64_t steps;                  /* --steps (-1: not given) */
  int64_t epochs;                 /* --epochs (-1: not given) */
  float lr;
  bool lr_set;
  uint64_t seed;
  int64_t log_every;
  const char *save, *resume, *export_onnx, *dump_grads, *dump_params, *metrics;
  const char *profile;            /* --profile FILE */
  int64_t save_every;             /* 0: only at the end */
  bool poison;
  int threads;                    /* 0: all cores */
  int64_t generate;               /* --generate N: bytes to sample after training */
  const char *prompt;             /* --prompt TEXT */
  int nnorm;                      /* --normalize values: 2 (all channels) or 2*C */
  float norm[64];
  const char *predict, *out;      /* --predict SPEC, --out PATH */
} rt_opts;

/* Parses argv into o (exits 0 after --help, 1 on a usage error). */
void rt_parse_args(rt_opts *o, int argc, char **argv);

extern const char *rt_prog;       /* basename of argv[0], prefix of every message */

noreturn void rt_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rt_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *rt_xmalloc(size_t n);       /* exits 4 when memory runs out */

/* Directory holding the running executable (for params.bin and model.onnx). */
const char *rt_exe_dir(void);

/* Host copies of a persistent tensor: through the device layer when it lives
 * in the arena, from the host arena when the plan keeps it offloaded. */
void rt_tensor_read(snrt_ctx *c, int t, void *dst);
void rt_tensor_write(snrt_ctx *c, int t, const void *src);
int64_t rt_tensor_elems(const snrt_tensor *t);

/* ---- init.c -------------------------------------------------------------- */

/* Writes every tensor's initial value (params.bin, PyTorch's default inits,
 * zero optimizer state). */
void rt_init_tensors(snrt_ctx *c);

/* ---- data.c -------------------------------------------------------------- */

typedef struct rt_data rt_data;
typedef struct rt_loader rt_loader;

/* Loads "synthetic", "idx:IMAGES,LABELS", "npy:X,Y" or "tokens:FILE" and checks it against
 * the model's input shape and classes. */
rt_data *rt_data_load(const char *spec, const snrt_model *m, uint64_t seed, const rt_opts *o);
/* --predict's inputs: "npy:X.npy" (no labels), "npy:X.npy,Y.npy", "idx:..." or
 * "tokens:FILE", checked as rt_data_load does; labels are not needed. */
rt_data *rt_data_load_inputs(const char *spec, const snrt_model *m, const rt_opts *o);
void rt_data_free(rt_data *d);
int64_t rt_data_count(const rt_data *d);
/* Sample i into x (float, model input sample size, normalized; int32 token
 * ids for token models) and its class (its rt_label_positions() targets). */
void rt_data_sample(const rt_data *d, int64_t i, void *x, int32_t *label);
/* Labels per sample: T for a language model's (batch, T, vocab) output, else 1. */
int rt_label_positions(const snrt_model *m);
/* mse with float32 targets (npy Y): sample i's target row; NULL otherwise. */
const float *rt_data_target(const rt_data *d, int64_t i);

/* The loader thread: batches of the model's size in the shuffled order of
 * (seed, epoch), starting at (epoch, pos), one batch prefetched ahead; with
 * rt_ranks > 1, rank rt_rank's slice of each global batch. */
rt_loader *rt_loader_start(const rt_data *d, const snrt_model *m, uint64_t seed,
                           int64_t epoch, int64_t pos);
/* Blocks until the next batch is ready; the pointers stay valid until
 * rt_loader_release. y is int32 labels, or one-hot floats for mse. */
void rt_loader_next(rt_loader *l, const float **x, const void **y);
void rt_loader_release(rt_loader *l);
void rt_loader_stop(rt_loader *l);
/* Bytes of the host batch buffers of the label tensor (int32 or one-hot). */
int64_t rt_label_bytes(const snrt_model *m);
/* Writes the labels of n samples as the label tensor wants them. */
void rt_encode_labels(const snrt_model *m, const int32_t *labels, int n, void *y);

/* ---- checkpoint.c -------------------------------------------------------- */

typedef struct rt_position {
  int64_t step;                   /* global step count done */
  int64_t epoch;                  /* 0-based epoch of the next batch */
  int64_t pos;                    /* next batch within that epoch */
  uint64_t seed;
} rt_position;

/* Atomic write: FILE.tmp, fsync, rename. Returns 0, or -1 with errno set and
 * the tmp file removed (the old FILE untouched). */
int rt_write_atomic(const char *path, const void *buf, size_t n);
/* Exits 2 when the save fails (the previous checkpoint is kept). */
void rt_checkpoint_save(snrt_ctx *c, const char *path, const rt_position *p);
/* Exits 2 on a missing, corrupted or mismatched checkpoint. --zero 1: every
 * rank calls save (rank 0 writes), rank 0 alone load, then every rank
 * rt_zero_scatter (its shards of the optimizer state load read). */
void rt_checkpoint_load(snrt_ctx *c, const char *path, rt_position *p);
void rt_zero_scatter(snrt_ctx *c);

/* ---- npy.c ---------------------------------------------------------------- */

/* Writes float32 data of the given shape (rank 0: a scalar). Exits 2 on error. */
void rt_npy_write(const char *path, const float *data, int rank, const int64_t *dims);
/* DIR/<sanitized name>.npy into buf (size PATH_MAX). */
void rt_npy_path(char *buf, size_t n, const char *dir, const char *name);
void rt_mkdir_p(const char *dir);   /* exits 2 when it cannot */
void rt_dump_params(snrt_ctx *c, const char *dir);
void rt_dump_grads(snrt_ctx *c, const char *dir, float loss);

/* ---- metrics.c ------------------------------------------------------------ */

typedef struct rt_metrics {
  int64_t steps, global_step, epochs_done;
  double epochs;                  /* fractional epochs at the end */
  double train_loss;
  bool has_eval;
  double test_accuracy, test_loss;
  double images_per_s;
  int threads;
  /* --dist programs: per step (excluding the first 3 steps), the all-reduce
   * time from start to completion, the part compute waited for, and the
   * step-end exchange of the loss; the whole step. */
  double comm_s, comm_exposed_s, sync_s, step_s;
} rt_metrics;

void rt_metrics_write(const snrt_ctx *c, const char *path, const rt_metrics *mt);

/* ---- the run: main.c calls setup.c, steps.c, eval.c, outputs.c in order -- */

typedef struct rt_eval {
  double accuracy, loss;
} rt_eval;

/* What the parts of one run share: filled by rt_setup, advanced by rt_train,
 * read by rt_outputs. */
typedef struct rt_run {
  rt_opts o;
  const snrt_model *m;
  snrt_ctx c;
  rt_position pos;
  rt_data *train, *test;          /* test: NULL without --eval */
  int64_t gbatch;                 /* the global batch (batch x ranks) */
  int64_t nb;                     /* batches per epoch */
  bool lead;                      /* rank 0: prints and writes files */
  /* rt_train's results */
  int64_t done;                   /* steps run in this invocation */
  float loss;                     /* the last step's loss (NaN before one) */
  double t0, t3, t_end;           /* start, after step 3, end (rt_now) */
  double c3[3];                   /* communication seconds at step 3 (rt_dist_times) */
  rt_metrics mt;
  rt_eval ev;                     /* the last evaluation */
  bool evaluated_last;            /* ev is of the final parameters */
  bool stop;                      /* data parallel: the ranks agreed to stop (exchange_loss) */
} rt_run;

/* setup.c: OMP_WAIT_POLICY=passive (may re-exec the program). */
void rt_wait_policy(char **argv);
/* setup.c: the checks of the model and flags, data, device, initial or
 * resumed tensors (every rank alike); then the banner (rank 0). */
void rt_setup(rt_run *r, int *argc, char ***argv);
void rt_banner(rt_run *r);
/* steps.c: SIGINT/SIGTERM/SIGUSR1 handlers, the step loop, the final evaluation. */
void rt_train(rt_run *r);
double rt_now(void);              /* CLOCK_MONOTONIC seconds */
/* eval.c: the whole set d through eval_step; false when a signal stopped it. */
bool rt_evaluate(snrt_ctx *c, const rt_data *d, rt_eval *e);
/* eval.c: " (N bits/token, perplexity P)" for language models, else "". */
const char *rt_lm_extra(const snrt_model *m, double loss);
/* eval.c: --generate N. */
void rt_generate(snrt_ctx *c, const rt_opts *o);
/* predict.c: --predict SPEC --out PATH: the eval step over every sample of
 * SPEC, every graph output written as .npy; no training. */
void rt_predict(rt_run *r);
/* outputs.c: --generate, --save, --dump-*, --export-onnx, --metrics,
 * --profile; then frees what rt_setup made. */
void rt_outputs(rt_run *r);
void rt_teardown(rt_run *r);

/* ---- dist_none.c (one process) / runtime/dist/mpi.c (--dist mpi) ---------- */

/* This process's rank and the number of ranks (0 and 1 without MPI, or when
 * a --dist program runs without mpirun). */
extern int rt_rank, rt_ranks;
/* Set by SIGINT/SIGTERM/SIGUSR1 (steps.c): the collectives' waits look at it;
 * rt_stop_name names it. */
extern volatile sig_atomic_t rt_stop_signal;
const char *rt_stop_name(void);
/* Seconds a collective may wait for the other ranks (--comm-timeout). */
extern double rt_comm_timeout;

void rt_dist_init(int *argc, char ***argv);
void rt_dist_finalize(void);
/* Ends every rank (MPI_Abort) with `code`; a plain exit with one rank. */
noreturn void rt_dist_abort(int code);
/* Every rank passes the same n named values; a rank whose values differ from
 * rank 0's is named with the first value that differs, and every rank exits 2. */
void rt_dist_agree(const char *const *names, const uint64_t *v, int n);
/* From rank 0 to every rank. */
void rt_dist_bcast(void *buf, int64_t bytes);
/* Sum across ranks, in place; `what` names it in a timeout message. */
void rt_dist_sum(double *v, int n, const char *what);
/* --zero 1: each rank's `bytes` to rank 0, laid end to end in rank order in
 * recv (rank 0 only); and the reverse, rank r's part of rank 0's send. */
void rt_dist_gather(const void *send, void *recv, int64_t bytes);
void rt_dist_scatter(const void *send, void *recv, int64_t bytes);
/* Communication seconds so far: all-reduce time from start to completion,
 * the part of it compute waited for (exposed), and the step-end exchange. */
void rt_dist_times(double *comm, double *exposed, double *sync);

/* ---- export.c ------------------------------------------------------------- */

void rt_export_onnx(snrt_ctx *c, const char *path);

/* ---- profile.c: --profile ------------------------------------------------ */

/* Around each training step; the first 3 of the invocation are not measured. */
void rt_prof_begin(const snrt_model *m);
void rt_prof_end(void);
/* Measured and estimated seconds per step kind, cost class and plan step. */
void rt_prof_write(const snrt_ctx *c, const char *path);

#endif
