/* snrt_dev.h — internal to the runtimes: the context, and the small device
 * layer that runtime/common (flags, data, training loop, checkpoints, export)
 * uses so that it runs unchanged on the CPU and on CUDA.
 *
 * runtime/cpu/device.c implements the device layer with malloc and a copy
 * engine thread; runtime/cuda/device.cu with cudaMalloc, streams and events.
 * Kernels (snrt.h) are implemented per runtime. Not part of the emitted
 * program's API. */
#ifndef SNRT_DEV_H
#define SNRT_DEV_H

#include "snrt.h"
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {  /* runtime/cuda defines these in C++ (nvcc) files */
#endif

struct snrt_ctx {
  const snrt_model *m;
  char *arena;               /* device arena (exactly m->arena_bytes) */
  char *host;                /* pinned host arena (m->host_bytes) */
  float lr;
  int64_t step;              /* global step index (continues across --resume) */
  uint64_t seed;
  bool poison;               /* --poison */
  bool dump_grads;           /* capture gradients in snrt_grad_ready */
  float **grad_copy;         /* per tensor index: host copy of its gradient (dump) */
  int threads;
  void *dev;                 /* device-layer private state */
  /* --precision fp16: dynamic loss scaling (runtime/cpu/k_half.c). */
  float loss_scale;          /* the loss gradient's multiplier */
  int overflow;              /* this step's gradients overflowed: its updates are skipped */
  int64_t scale_good;        /* steps since the scale last changed without an overflow */
  int64_t scale_interval;    /* ... after which it doubles (2000; SNRT_LOSS_SCALE_INTERVAL) */
  int64_t skipped_steps;     /* steps skipped so far (continued across --resume) */
  /* The model's lm_rows: where the eval step's snrt_lmce also copies each
   * chunk's logits (host memory, batch x positions x classes floats), for
   * --predict and --generate; NULL (--eval, training): nowhere. */
  float *lm_sink;
};

/* --precision fp16: the loss-scaling state above, between the host fields
 * and where the step keeps it (to_host: before a checkpoint or the metrics
 * read it; else after a checkpoint set it). The CPU keeps it in the fields
 * (a no-op); the CUDA target in device memory, where the step's kernels
 * decide without the host (runtime/cuda/bf16.cu). */
void snrt_dev_scale_sync(snrt_ctx *c, bool to_host);
/* Allocates the arenas; on failure prints what was asked and what to do, and
 * exits with code 4. */
void snrt_dev_init(snrt_ctx *c);
void snrt_dev_free(snrt_ctx *c);
/* Synchronous copies between host memory and the device arena. */
void snrt_dev_upload(snrt_ctx *c, int64_t dev_off, const void *src, int64_t bytes);
void snrt_dev_download(snrt_ctx *c, void *dst, int64_t dev_off, int64_t bytes);
/* Waits for all device work (compute and copies). */
void snrt_dev_sync(snrt_ctx *c);
/* The poison pattern: a quiet NaN whose payload (0xDEAD) arithmetic does not
 * produce (invalid operations give the default NaN, and operations on a NaN
 * propagate its payload), so that it marks "never written since it died". */
#define SNRT_POISON_BITS 0x7fc0deadu

/* Fill bytes at dev_off with SNRT_POISON_BITS (poison mode). */
void snrt_dev_poison(snrt_ctx *c, int64_t dev_off, int64_t bytes);
/* "cpu (2 threads, OpenBLAS, oneDNN convs)" / "NVIDIA H200 (cuDNN 9.x)" */
const char *snrt_dev_describe(snrt_ctx *c);
/* Bytes the runtime's libraries hold outside the planned arena so far: CPU,
 * oneDNN's primitives' blocked copies and scratchpads (k_conv_dnnl.c); CUDA,
 * the private convolution workspace (SNRT_DETERMINISTIC, SNRT_CONV_WS_MIB). */
int64_t snrt_dev_outside_bytes(snrt_ctx *c);
/* Runs one step fn(c) (the model's train_step or eval_step) on the device.
 * CPU: just fn(c). CUDA: the first call of a given fn runs eagerly (warm-up:
 * cuDNN algorithm search, lazy module loading); the second is captured into a
 * CUDA graph, which that call and every later one replay. Kernels read lr,
 * step and seed from a small device buffer refreshed before each replay, so a
 * changing --lr schedule or step counter needs no re-capture. Set
 * SNRT_CUDA_GRAPH=0 to run every step eagerly; steps with dump_grads on always
 * run eagerly. Returns when the work is queued, not finished (sync with
 * snrt_dev_sync or a download). */
void snrt_dev_run_step(snrt_ctx *c, void (*fn)(snrt_ctx *c));

/* --profile (runtime/common/profile.c): while snrt_prof_on, the device
 * layer times each plan step from its start (snrt_reads) to the next one's:
 * the CPU by calling snrt_prof_mark(step) (host clock: its work is done when
 * the next step starts); CUDA by recording an event on the compute stream,
 * then in snrt_dev_prof_collect (called at the end of a profiled training
 * step) waiting for the last one and handing each step's seconds to
 * snrt_prof_add. CUDA runs profiled steps eagerly (no graph replay).
 * snrt_dev_step_timing: 1 where per-step times are measured. */
extern int snrt_prof_on;
void snrt_prof_mark(int step);
void snrt_prof_add(int step, double seconds);
void snrt_dev_prof_collect(void);
extern const int snrt_dev_step_timing;

/* Exit codes of the emitted program (docs/reference.md, "DIR/train"). */
enum { SNRT_EXIT_USAGE = 1, SNRT_EXIT_DATA = 2, SNRT_EXIT_NAN = 3, SNRT_EXIT_DEVICE = 4,
       SNRT_EXIT_RANKS = 5 /* data parallel: another rank died, hung or disagrees */ };

#ifdef __cplusplus
}
#endif
#endif
