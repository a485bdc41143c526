/* k_conv_dnnl.c — float32 convolutions through oneDNN (Debian's libdnnl2,
 * the library PyTorch's CPU convolutions use), where it is present.
 *
 * Why: im2col + OpenBLAS spends most of a small ResNet's step copying
 * columns and running skinny GEMMs; oneDNN's direct JIT kernels on blocked
 * layouts (8 or 16 channels innermost) run the same convolutions at about
 * twice the rate on this CPU (bench/cpu_gpt.md). The CPU kernels keep their
 * NCHW tensors: each call reorders its inputs into the primitive's layout
 * and its output back, as PyTorch's own eager convolutions do.
 *
 * How it is loaded: at run time with dlopen("libdnnl.so.2"), so an emitted
 * program links as before and runs where the library is absent (im2col, the
 * program's banner says which). Built only when configure.py found the
 * headers (SNRT_DNNL; `./configure.py --dnnl off` leaves it out).
 * SNRT_CONV=im2col|dnnl|auto picks at run time (auto: oneDNN if it loads).
 *
 * Which convolutions: float32 ones whose weights are read as they are
 * (round_w 0) and that overwrite their output (accumulate 0): the chunked
 * 16-bit steps of convert.c keep the im2col kernels, whose chunks give the
 * bits of the whole batch. Everything else falls back to k_conv.c when
 * oneDNN refuses a shape.
 *
 * Memory: the blocked copies of a conv's operands and its scratchpad lie
 * in four buffers shared by every geometry (the convs run one at a time),
 * each as large as the largest need so far, outside the planned arena (as
 * OpenBLAS's buffers are); snrt_conv_dnnl_bytes() says how many bytes, the
 * program's metrics report them (outside_arena_bytes). The primitives are
 * made at a geometry's first call and kept. The planned workspace `ws` is
 * not used on this path.
 *
 * Determinism: a geometry always runs the same primitive with the thread
 * count fixed at start, on buffers of the same alignment, so a step gives
 * the same bits whichever policy scheduled it (the poison and policy tests run on
 * this path). */
#include "kern.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SNRT_DNNL
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

/* The library's functions, resolved by name (types from its header). */
#define DNNL_FUNCS(X)                                                                        \
  X(dnnl_engine_create) X(dnnl_stream_create) X(dnnl_stream_wait)                            \
  X(dnnl_memory_desc_init_by_tag) X(dnnl_memory_desc_equal) X(dnnl_memory_desc_get_size)     \
  X(dnnl_dilated_convolution_forward_desc_init)                                              \
  X(dnnl_dilated_convolution_backward_data_desc_init)                                        \
  X(dnnl_dilated_convolution_backward_weights_desc_init)                                     \
  X(dnnl_primitive_attr_create) X(dnnl_primitive_attr_set_scratchpad_mode)                   \
  X(dnnl_primitive_attr_destroy) X(dnnl_primitive_desc_create)                               \
  X(dnnl_primitive_desc_query_md) X(dnnl_primitive_desc_destroy)                             \
  X(dnnl_reorder_primitive_desc_create) X(dnnl_primitive_create) X(dnnl_primitive_execute)   \
  X(dnnl_memory_create) X(dnnl_memory_set_data_handle)

static struct {
#define X(f) __typeof__(f) *f;
  DNNL_FUNCS(X)
#undef X
} D;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int on;                 /* 1: oneDNN loaded and chosen */
static char why[160];          /* when not: why (for the banner) */
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static int64_t held;           /* bytes of buffers held here */

static void load(void) {
  const char *env = getenv("SNRT_CONV");
  if (env && *env && strcmp(env, "auto") && strcmp(env, "dnnl") && strcmp(env, "im2col")) {
    fprintf(stderr, "train: error: SNRT_CONV=%s: want auto, dnnl or im2col\n", env);
    exit(SNRT_EXIT_USAGE);
  }
  bool want = env && !strcmp(env, "dnnl");
  if (env && !strcmp(env, "im2col")) {
    snprintf(why, sizeof why, "SNRT_CONV=im2col");
    return;
  }
  void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(why, sizeof why, "libdnnl.so.2 not found");
  } else {
#define X(f)                                                  \
  if (!(D.f = (__typeof__(f) *)dlsym(h, #f)) && !why[0])     \
    snprintf(why, sizeof why, "libdnnl.so.2 lacks %s", #f);
    DNNL_FUNCS(X)
#undef X
    if (!why[0] && (D.dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success ||
                    D.dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) !=
                        dnnl_success))
      snprintf(why, sizeof why, "oneDNN has no CPU engine");
  }
  if (why[0] && want) {
    fprintf(stderr, "train: error: SNRT_CONV=dnnl, but %s (apt-get install libdnnl2, or "
                    "SNRT_CONV=im2col)\n", why);
    exit(SNRT_EXIT_USAGE);
  }
  on = !why[0];
}

/* One pass of one geometry: the primitive and the reorders around it. Slot
 * k: the primitive's argument (0, 1: inputs; 2: output), its blocked copy
 * (in shared buffer k) when the layout differs from the user's (else the
 * user's memory is used as it is), and the reorder into or out of it. */
typedef struct Slot {
  int arg;
  dnnl_memory_t user, prim;     /* handles set per call: the user's tensor, pool k */
  dnnl_primitive_t reorder;     /* NULL: same layout */
  size_t bytes;                 /* of the blocked copy */
} Slot;

typedef struct Conv {
  snrt_conv_t key;              /* the geometry (ws fields cleared) */
  int pass;                     /* 0 forward, 1 backward-data, 2 backward-filter */
  int bias;
  int ok;                       /* 0: oneDNN refused it (k_conv.c runs it) */
  dnnl_primitive_t prim;
  Slot s[3];
  dnnl_memory_t bias_mem, scratch;
  size_t scratch_bytes;
  struct Conv *next;
} Conv;

static Conv *convs;

/* The shared buffers: slot 0, 1 and 2's blocked copies, the scratchpad. */
static struct { void *p; size_t cap; } pool[4];

static void *pool_get(int k, size_t bytes) {
  if (bytes > pool[k].cap) {
    free(pool[k].p);
    held -= (int64_t)pool[k].cap;
    pool[k].p = NULL, pool[k].cap = 0;
    if (posix_memalign(&pool[k].p, 64, bytes)) {
      fprintf(stderr, "train: error: cannot allocate %zu bytes for oneDNN's buffers\n", bytes);
      exit(SNRT_EXIT_DEVICE);
    }
    pool[k].cap = bytes;
    held += (int64_t)bytes;
  }
  return pool[k].p;
}

/* The user's memory and, where the primitive wants another layout, a
 * blocked copy and the reorder between them (in: user -> blocked). */
static bool slot_make(Slot *s, int arg, const dnnl_memory_desc_t *user_md,
                      const dnnl_memory_desc_t *prim_md, bool in) {
  s->arg = arg;
  if (D.dnnl_memory_create(&s->user, user_md, engine, DNNL_MEMORY_NONE) != dnnl_success)
    return false;
  if (D.dnnl_memory_desc_equal(user_md, prim_md)) return true;
  s->bytes = D.dnnl_memory_desc_get_size(prim_md);
  if (D.dnnl_memory_create(&s->prim, prim_md, engine, DNNL_MEMORY_NONE) != dnnl_success) return false;
  dnnl_primitive_desc_t rpd;
  if (D.dnnl_reorder_primitive_desc_create(&rpd, in ? user_md : prim_md, engine,
                                           in ? prim_md : user_md, engine, NULL) != dnnl_success)
    return false;
  dnnl_status_t st = D.dnnl_primitive_create(&s->reorder, rpd);
  D.dnnl_primitive_desc_destroy(rpd);
  return st == dnnl_success;
}

static bool md(dnnl_memory_desc_t *d, int nd, int64_t a, int64_t b, int64_t c, int64_t e,
               int64_t f, dnnl_format_tag_t tag) {
  dnnl_dims_t dims = {a, b, c, e, f};
  return D.dnnl_memory_desc_init_by_tag(d, nd, dims, dnnl_f32, tag) == dnnl_success;
}

/* The conv's four operands: with `any`, in the layouts the primitive
 * chooses, else NCHW / OIHW (GOIHW with groups) / x. False where oneDNN
 * refuses the dimensions (k_conv.c then runs the conv). */
static bool operand_mds(const snrt_conv_t *p, bool any, dnnl_memory_desc_t *x,
                        dnnl_memory_desc_t *y, dnnl_memory_desc_t *w, dnnl_memory_desc_t *b) {
  int G = p->group;
  dnnl_format_tag_t t = dnnl_format_tag_any;
  return md(x, 4, p->n, p->c, p->h, p->w, 0, any ? t : dnnl_nchw) &&
         md(y, 4, p->n, p->k, p->oh, p->ow, 0, any ? t : dnnl_nchw) &&
         (G == 1 ? md(w, 4, p->k, p->c, p->kh, p->kw, 0, any ? t : dnnl_oihw)
                 : md(w, 5, G, p->k / G, p->c / G, p->kh, p->kw, any ? t : dnnl_goihw)) &&
         md(b, 1, p->k, 0, 0, 0, 0, any ? t : dnnl_x);
}

static bool conv_make(Conv *v) {
  const snrt_conv_t *p = &v->key;
  dnnl_memory_desc_t x_u, y_u, w_u, b_u, x_a, y_a, w_a, b_a;
  if (!operand_mds(p, false, &x_u, &y_u, &w_u, &b_u) || !operand_mds(p, true, &x_a, &y_a, &w_a, &b_a))
    return false;
  dnnl_dims_t str = {p->sh, p->sw}, dil = {p->dh - 1, p->dw - 1}, pl = {p->pt, p->pl};
  /* bottom/right pads as the output size implies (may be negative: the
   * last rows of the input no window reaches) */
  dnnl_dims_t pr = {(int64_t)(p->oh - 1) * p->sh + (int64_t)(p->kh - 1) * p->dh + 1 - p->h - p->pt,
                    (int64_t)(p->ow - 1) * p->sw + (int64_t)(p->kw - 1) * p->dw + 1 - p->w - p->pl};
  dnnl_convolution_desc_t fd, bd;
  if (D.dnnl_dilated_convolution_forward_desc_init(
          &fd, dnnl_forward_training, dnnl_convolution_direct, &x_a, &w_a, v->bias ? &b_a : NULL,
          &y_a, str, dil, pl, pr) != dnnl_success)
    return false;
  dnnl_primitive_attr_t attr;
  if (D.dnnl_primitive_attr_create(&attr) != dnnl_success) return false;
  D.dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  dnnl_primitive_desc_t fpd = NULL, pd = NULL;
  bool ok = D.dnnl_primitive_desc_create(&fpd, &fd, attr, engine, NULL) == dnnl_success;
  if (ok && v->pass == 0) {
    pd = fpd;
    fpd = NULL;
  } else if (ok && v->pass == 1) {
    ok = D.dnnl_dilated_convolution_backward_data_desc_init(
             &bd, dnnl_convolution_direct, &x_a, &w_a, &y_a, str, dil, pl, pr) == dnnl_success &&
         D.dnnl_primitive_desc_create(&pd, &bd, attr, engine, fpd) == dnnl_success;
  } else if (ok) {
    ok = D.dnnl_dilated_convolution_backward_weights_desc_init(
             &bd, dnnl_convolution_direct, &x_a, &w_a, NULL, &y_a, str, dil, pl, pr) ==
             dnnl_success &&
         D.dnnl_primitive_desc_create(&pd, &bd, attr, engine, fpd) == dnnl_success;
  }
  D.dnnl_primitive_attr_destroy(attr);
  if (fpd) D.dnnl_primitive_desc_destroy(fpd);
  if (!ok) return false;
#define Q(what) D.dnnl_primitive_desc_query_md(pd, what, 0)
  if (v->pass == 0) {
    ok = slot_make(&v->s[0], DNNL_ARG_SRC, &x_u, Q(dnnl_query_src_md), true) &&
         slot_make(&v->s[1], DNNL_ARG_WEIGHTS, &w_u, Q(dnnl_query_weights_md), true) &&
         slot_make(&v->s[2], DNNL_ARG_DST, &y_u, Q(dnnl_query_dst_md), false);
    if (ok && v->bias) {
      ok = D.dnnl_memory_desc_equal(&b_u, D.dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 1)) &&
           D.dnnl_memory_create(&v->bias_mem, &b_u, engine, DNNL_MEMORY_NONE) == dnnl_success;
    }
  } else if (v->pass == 1) {
    ok = slot_make(&v->s[0], DNNL_ARG_DIFF_DST, &y_u, Q(dnnl_query_diff_dst_md), true) &&
         slot_make(&v->s[1], DNNL_ARG_WEIGHTS, &w_u, Q(dnnl_query_weights_md), true) &&
         slot_make(&v->s[2], DNNL_ARG_DIFF_SRC, &x_u, Q(dnnl_query_diff_src_md), false);
  } else {
    ok = slot_make(&v->s[0], DNNL_ARG_SRC, &x_u, Q(dnnl_query_src_md), true) &&
         slot_make(&v->s[1], DNNL_ARG_DIFF_DST, &y_u, Q(dnnl_query_diff_dst_md), true) &&
         slot_make(&v->s[2], DNNL_ARG_DIFF_WEIGHTS, &w_u, Q(dnnl_query_diff_weights_md), false);
  }
  const dnnl_memory_desc_t *sp = Q(dnnl_query_scratchpad_md);
#undef Q
  if (ok && sp && D.dnnl_memory_desc_get_size(sp) > 0) {
    v->scratch_bytes = D.dnnl_memory_desc_get_size(sp);
    ok = D.dnnl_memory_create(&v->scratch, sp, engine, DNNL_MEMORY_NONE) == dnnl_success;
  }
  ok = ok && D.dnnl_primitive_create(&v->prim, pd) == dnnl_success;
  D.dnnl_primitive_desc_destroy(pd);
  return ok;
}

static void run1(dnnl_primitive_t prim, int n, const dnnl_exec_arg_t *args) {
  if (D.dnnl_primitive_execute(prim, stream, n, args) != dnnl_success) {
    fprintf(stderr, "train: error: a oneDNN convolution failed to run (SNRT_CONV=im2col "
                    "runs the built-in kernels)\n");
    exit(SNRT_EXIT_DEVICE);
  }
}

/* Runs pass `pass` on (in0, in1) -> out (+ bias in the forward); false when
 * this path does not take the conv (k_conv.c runs it). */
static bool conv_run(const snrt_conv_t *p, int pass, const float *in0, const float *in1,
                     const float *bias, float *out) {
  pthread_once(&once, load);
  if (!on || p->round_w || p->accumulate) return false;
  /* Backward-filter with a short sum (images x output pixels <= 64) over a
   * long weight row (c/group*kh*kw >= 1024): a deep stage of a ResNet on
   * small inputs (resnet50 at 64 px: 2x2 planes). There oneDNN ran at half
   * the rate of one OpenBLAS GEMM (bench/cpu_gpt.md, per-step profile). */
  if (pass == 2 && (int64_t)p->n * p->oh * p->ow <= 64 &&
      (int64_t)(p->c / p->group) * p->kh * p->kw >= 1024)
    return false;
  snrt_conv_t key = *p;
  key.ws_images = 0;
  key.ws_bytes = 0;
  int hb = pass == 0 && bias;
  Conv *v = convs;
  while (v && !(v->pass == pass && v->bias == hb && !memcmp(&v->key, &key, sizeof key)))
    v = v->next;
  if (!v) {
    v = calloc(1, sizeof *v);
    if (!v) return false;
    v->key = key;
    v->pass = pass;
    v->bias = hb;
    v->ok = conv_make(v);   /* (a refused geometry keeps what it made: not retried) */
    v->next = convs;
    convs = v;
  }
  if (!v->ok) return false;
  const void *h[3] = {in0, in1, out};
  dnnl_exec_arg_t a[6];
  int na = 0;
  for (int k = 0; k < 3; k++) {
    Slot *s = &v->s[k];
    D.dnnl_memory_set_data_handle(s->user, (void *)h[k]);
    if (s->reorder) D.dnnl_memory_set_data_handle(s->prim, pool_get(k, s->bytes));
    if (k < 2 && s->reorder) {
      dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, s->user}, {DNNL_ARG_TO, s->prim}};
      run1(s->reorder, 2, r);
    }
    a[na++] = (dnnl_exec_arg_t){s->arg, s->reorder ? s->prim : s->user};
  }
  if (v->bias) {
    D.dnnl_memory_set_data_handle(v->bias_mem, (void *)bias);
    a[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, v->bias_mem};
  }
  if (v->scratch) {
    D.dnnl_memory_set_data_handle(v->scratch, pool_get(3, v->scratch_bytes));
    a[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, v->scratch};
  }
  run1(v->prim, na, a);
  if (v->s[2].reorder) {
    dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, v->s[2].prim}, {DNNL_ARG_TO, v->s[2].user}};
    run1(v->s[2].reorder, 2, r);
  }
  D.dnnl_stream_wait(stream);
  return true;
}

bool snrt_conv_dnnl_fwd(const snrt_conv_t *p, const float *x, const float *w, const float *b,
                        float *y) {
  return conv_run(p, 0, x, w, b, y);
}

bool snrt_conv_dnnl_bwd_data(const snrt_conv_t *p, const float *dy, const float *w, float *dx) {
  return conv_run(p, 1, dy, w, NULL, dx);
}

bool snrt_conv_dnnl_bwd_filter(const snrt_conv_t *p, const float *x, const float *dy, float *dw) {
  return conv_run(p, 2, x, dy, NULL, dw);
}

const char *snrt_conv_backend(void) {
  pthread_once(&once, load);
  return on ? "oneDNN convs" : "im2col convs";
}

int64_t snrt_conv_dnnl_bytes(void) { return held; }

#else /* built without oneDNN's headers */

bool snrt_conv_dnnl_fwd(const snrt_conv_t *p, const float *x, const float *w, const float *b,
                        float *y) {
  (void)p, (void)x, (void)w, (void)b, (void)y;
  return false;
}
bool snrt_conv_dnnl_bwd_data(const snrt_conv_t *p, const float *dy, const float *w, float *dx) {
  (void)p, (void)dy, (void)w, (void)dx;
  return false;
}
bool snrt_conv_dnnl_bwd_filter(const snrt_conv_t *p, const float *x, const float *dy, float *dw) {
  (void)p, (void)x, (void)dy, (void)dw;
  return false;
}
const char *snrt_conv_backend(void) {
  const char *env = getenv("SNRT_CONV");
  if (env && !strcmp(env, "dnnl")) {
    fprintf(stderr, "train: error: SNRT_CONV=dnnl, but this runtime was built without oneDNN "
                    "(apt-get install libdnnl-dev, then ./configure.py)\n");
    exit(SNRT_EXIT_USAGE);
  }
  return "im2col convs";
}
int64_t snrt_conv_dnnl_bytes(void) { return 0; }

#endif
