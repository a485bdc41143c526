/* calibrate.h — the parts of build/snc-calibrate: the measurement cases
 * (cases.c), the fits that turn their times into rates (fit.c) and the
 * driver that runs the cases in passes and writes the profile (calibrate.c).
 *
 * A case is one runtime kernel on one shape, called through snrt.h as an
 * emitted train.c calls it. Its operands are read from the input pool
 * (random values, approximately N(0, 1), never written: a kernel whose speed
 * depends on its data, a max pooling's branches or erf's range reduction,
 * runs on data like a network's, not on a constant; poolings read the same
 * values rectified, as they follow a ReLU in the examples' CNNs: the 3x3
 * max pooling runs 1.5x faster on those) and written to the
 * output pool (never read by another case); the optimizers update their
 * state in the output slots (set before each pass: prepare), per-channel
 * buffers (BN's statistics) and integers (labels) live in the scratch area.
 * Each call takes the next of
 * `nrot` slots of both pools, so its operands come from memory, as in a
 * training step, where a tensor was mostly written several kernels before.
 *
 * The driver runs every case once per pass (NPASS passes, each case's trials
 * spread over the whole run) and takes each case's median: a burst of load
 * from other processes slows one pass, not the result. */
#ifndef SNC_CALIBRATE_H
#define SNC_CALIBRATE_H

#include "snrt.h"
#include "snrt_dev.h"

#include <stdint.h>

#ifdef SNRT_CALIBRATE_CUDA
#define TARGET "cuda"
#else
#define TARGET "cpu"
#endif

/* The cost classes of compiler/plan/cost.c, in its order (names: cal_class_names). */
enum { K_CONV, K_CONV_SMALL, K_CONV_1X1, K_CONV_BWD, K_CONV_BWD_SMALL, K_CONV_BWD_1X1, K_GEMM,
       K_POOL, K_NORM, K_ELEM, K_UPDATE, K_ADAM, K_STRIDED, K_MATH, K_LOSS, NCLASS };
extern const char *const cal_class_names[NCLASS];
/* Fitted beside the classes: the copy engine per direction (t = a + bytes / rate). */
enum { K_COPY_D2H = NCLASS, K_COPY_H2D, NFIT };

enum { NPASS = 5 };          /* passes: each case's trials (its median of NPASS) */
enum { MAXCASES = 512 };

typedef struct Case Case;
/* One call of the case's kernel with its operands at in (input pool slot)
 * and out (output pool slot). */
typedef void (*case_fn)(Case *k, char *in, char *out);

struct Case {
  case_fn fn;
  void (*prepare)(Case *k);   /* before each pass's trial (NULL: none) */
  char what[112];           /* the log's line, without the time */
  int cls;                  /* the class its time is fitted in (-1: none) */
  double work;              /* FLOPs, bytes touched (as cost.c counts them) or window elements */
  double units;             /* the class's per-unit term: images (conv), sgemm calls (gemm),
                               contiguous rows (norm) */
  int par;                  /* 1: the CPU kernel ran as a parallel region */
  int64_t in_bytes, out_bytes;   /* one slot of each pool */
  int nrot, cur;            /* slots rotated over; the last one used */
  int reps;                 /* calls per trial (sized in the first pass) */
  double t[NPASS];          /* seconds per call, per pass */
  double s;                 /* their median */
  /* the kernel's parameters */
  int which;                /* the kernel (ew cases) */
  int64_t n;
  int c;
  int64_t hw;
  snrt_conv_t conv;
  snrt_mm_t mm;
  snrt_pool_t pool;
  int aux;                  /* 1: not timed in the passes (the overlap mix) */
  int rectified;            /* 1: inputs from the rectified pool (a pooling's: ReLU outputs) */
  int shape;                /* index in the driver's shape lists (-1: none) */
  int bwd;                  /* a conv's kernel: 0 forward, 1 backward data, 2 backward filter;
                               a pool's: 1 backward */
};

extern snrt_ctx cal_ctx;
extern int cal_quick;        /* --quick: small shapes, short trials */
extern Case cal_cases[MAXCASES];
extern int cal_ncases;
extern int64_t cal_out_pool_off, cal_out_pool_bytes;   /* the output pool (device offsets) */

double cal_now(void);
/* The arena: input pool, output pool, scratch, sized by cal_arena_bytes for
 * the cases created so far; cal_pools_init fills the input pool. */
int64_t cal_arena_bytes(void);
void cal_pools_init(void);
/* Scratch buffers (device memory outside the pools), bump-allocated; n floats. */
float *cal_scratch(int64_t n);
/* One call of case k on its next slot; slot r of its output pool part. */
void cal_call(Case *k);
char *cal_out_slot(const Case *k, int r);

/* cases.c: add cases (each returns its index in cal_cases). */
int cal_conv(int n, int c, int hw, int k, int ksz, int stride);   /* forward; backward data +1, filter +2 */
int cal_gemm(int64_t batch, int64_t m, int64_t n, int64_t k, int ta, int tb, int bcast);
int cal_pool(int n, int c, int hw, int ksz, int stride, int pad, int avg);   /* forward; backward +1 */
/* The kernels of the bandwidth classes. n elements; c, hw: a BN's channels
 * and map (n / (c hw) images), a conv bias gradient's; c: the row length of
 * the softmax backward and LayerNorm (64: a transformer's head or embedding
 * width; the broadcast, row-mean and softmax forward kernels use rows of 64
 * too), the classes of the loss. */
enum { EW_RELU, EW_RELU_BWD, EW_ADD, EW_BCAST_MUL, EW_ADD_SAME, EW_BIAS_GRAD, EW_MEAN_ROWS,
       EW_TRANSPOSE, EW_ERF, EW_ERF_BWD, EW_SOFTMAX, EW_SOFTMAX_BWD, EW_BN, EW_BN_BWD, EW_LN,
       EW_LN_BWD, EW_CONV_BIAS, EW_DROPOUT, EW_WHERE, EW_CE, EW_CE_BWD, EW_SGD, EW_ADAM,
       EW_GELU_TANH, EW_GELU_TANH_BWD, EW_GELU_ERF, EW_GELU_ERF_BWD, EW_ADD_RELU, EW_ADD_RELU_BWD,
       EW_COUNT };
/* A bandwidth-class kernel over n elements. */
int cal_ew(int which, int cls, int64_t n, int c, int64_t hw, const char *what);
int cal_tiny(void);          /* a 16-element kernel: the fixed cost of a step */
/* The copy engine alone, one direction (0: to the host), `bytes` per call
 * (fitted in K_COPY_D2H + dir). */
int cal_copy(int dir, int64_t bytes);
/* The overlap measurement's compute mix (auxiliary cases); then, after every
 * case is made, the shared convolution workspace. */
void cal_overlap_init(void);
void cal_cases_ready(void);
/* Compute slowed by the copy engine: per pass, a mix of kernels alone and
 * while copies of about half its time run in direction dir; the loss is the
 * compute time added per second of (standalone) copy time. */
void cal_overlap_pass(int dir, double copy_bw, int pass, double *loss);

/* fit.c: per class, the measurements (work, seconds, units, parallel). */
void fit_record(int cls, double work, double seconds, double units, int par);
/* t = a + work / rate + p [parallel] + u units: the first of a ladder of
 * models whose coefficients are all >= 0 (see fit.c); -1 where a term is
 * not fitted. */
void fit_class(int cls, double *rate, double *overhead, double *par_s, double *per_unit);

#endif
