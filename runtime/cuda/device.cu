/* device.cu — the CUDA device layer (snrt_dev.h) and the context functions of
 * snrt.h: arenas, streams, events, the unified tensor pool's copies, poison
 * mode, gradient capture for --dump-grads, and CUDA graph capture/replay.
 *
 * What it is: everything runtime/common needs to run a step on one NVIDIA GPU.
 * What it is not: kernels (the other .cu files) or the main loop
 * (runtime/common).
 *
 * Memory: exactly one cudaMalloc of m->arena_bytes (the planned device arena)
 * and one cudaHostAlloc of m->host_bytes. Outside the plan, fixed and small:
 * the cuBLAS workspace (so that cuBLAS never allocates inside a captured
 * graph), one snrt_cuda_vars (lr, step, seed) and, for --precision fp16, one
 * snrt_cuda_scale (the loss scaling state, 32 bytes). Nothing is allocated during
 * a step. Order: context, streams, cuDNN, cuBLAS and its workspace first; then
 * the arena, if it fits in the free memory and leaves m->reserve_bytes of the
 * total (the profile's reserve, which snc's default budget also leaves);
 * else exit 4 naming the budget that fits. The arena starts zeroed (NaN under
 * --poison), as on the CPU.
 *
 * Streams: kernels run on `compute`; offloads on `d2h`, prefetches on `h2d`.
 * A copy first waits for the compute stream's position at its issue (the data
 * it reads, or the region it overwrites, is then final), then records its own
 * event; snrt_wait makes compute wait for that event. At the end of each step
 * compute joins both copy streams, which a graph capture requires and which
 * makes "step done" mean "copies done" too. */
#include "cuda_rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static snrt_ctx *cu_ctx;  /* for the capture hint in snrt_cu_fail */

void snrt_cu_fail(const char *what, const char *msg, const char *file, int line) {
  fprintf(stderr, "snrt: error: %s failed: %s (%s:%d)\n", what, msg, file, line);
  if (cu_ctx && cu_ctx->dev && snrt_cu(cu_ctx)->capturing)
    fprintf(stderr, "snrt: note: this happened while capturing a CUDA graph; "
                    "SNRT_CUDA_GRAPH=0 runs every step without graphs\n");
  exit(SNRT_EXIT_DEVICE);
}

static bool env_flag(const char *name, bool dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  return !(strcmp(v, "0") == 0 || strcmp(v, "off") == 0 || strcmp(v, "false") == 0);
}

static void fmt_bytes(char *buf, size_t n, double b) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) b /= 1024, i++;
  snprintf(buf, n, "%.2f %s", b, u[i]);
}

/* A failed arena allocation: what was asked, what is free, what lowers it. */
static void alloc_failed(const char *what, int64_t asked, cudaError_t e) {
  size_t free_b = 0, total_b = 0;
  cudaGetLastError();  /* clear the allocation error */
  cudaMemGetInfo(&free_b, &total_b);
  char a[32], f[32], t[32];
  fmt_bytes(a, sizeof a, (double)asked);
  fmt_bytes(f, sizeof f, (double)free_b);
  fmt_bytes(t, sizeof t, (double)total_b);
  fprintf(stderr,
          "snrt: error: cannot allocate the %s: asked %s (%lld bytes), the GPU has %s free "
          "of %s (%s); recompile with `snc compile --budget SIZE` below the free memory, or "
          "`--policy superneurons`, to lower it\n",
          what, a, (long long)asked, f, t, cudaGetErrorString(e));
  exit(SNRT_EXIT_DEVICE);
}

/* MemAvailable of /proc/meminfo in bytes; -1 where it cannot be read. */
static int64_t host_available_bytes(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  long long kib = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
  fclose(f);
  return kib < 0 ? -1 : (int64_t)kib * 1024;
}

/* The GPU this process uses, and the SNRT_* switches (TF32, deterministic
 * algorithms, CUDA graphs): c->dev's state, the rest still to build. */
static snrt_cuda *open_device(snrt_ctx *c) {
  cu_ctx = c;
  snrt_cuda *d = (snrt_cuda *)calloc(1, sizeof *d);
  if (!d) {
    fprintf(stderr, "snrt: error: out of host memory\n");
    exit(SNRT_EXIT_DEVICE);
  }
  c->dev = d;
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    fprintf(stderr, "snrt: error: no CUDA device found (%s); this program was compiled "
                    "with --target cuda (use --target cpu on a machine without a GPU)\n",
            e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    exit(SNRT_EXIT_DEVICE);
  }
  CUDA_CHECK(cudaGetDevice(&d->device));
  CUDA_CHECK(cudaGetDeviceProperties(&d->prop, d->device));
  d->tf32 = env_flag("SNRT_TF32", true);
  d->deterministic = env_flag("SNRT_DETERMINISTIC", false);
  d->conv_find = env_flag("SNRT_CONV_FIND", false);
  d->conv_log = env_flag("SNRT_CONV_LOG", false);
  /* The CPU runtime's testing aids for a missing wait (docs/planning.md),
   * here too so that the GPU bundle can delete a wait on the GPU. */
  const char *skip = getenv("SNRT_SKIP_WAIT"), *delay = getenv("SNRT_COPY_DELAY_US");
  d->skip_wait = skip && *skip ? (int)strtol(skip, NULL, 10) : -1;
  d->delay_us = delay && *delay ? strtol(delay, NULL, 10) : 0;
  d->graphs = env_flag("SNRT_CUDA_GRAPH", true);
  return d;
}

/* The device layer's setup: streams and events, cuDNN and cuBLAS with their
 * workspace, the arena and the pinned host arena. */
void snrt_dev_init(snrt_ctx *c) {
  snrt_cuda *d = open_device(c);

  const snrt_model *m = c->m;
  /* Libraries first, then the arena: cuDNN, cuBLAS, their workspace and the
   * stream/event objects take device memory of their own, which the arena
   * must leave free. */
  size_t free0 = 0, total_b = 0;
  CUDA_CHECK(cudaFree(0));  /* creates the context */
  CUDA_CHECK(cudaMemGetInfo(&free0, &total_b));
  CUDA_CHECK(cudaStreamCreateWithFlags(&d->compute, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&d->d2h, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&d->h2d, cudaStreamNonBlocking));
  cudaEvent_t *evs[] = {&d->issue_d2h, &d->issue_h2d, &d->join_d2h, &d->join_h2d};
  for (int i = 0; i < 4; i++)
    CUDA_CHECK(cudaEventCreateWithFlags(evs[i], cudaEventDisableTiming));

  cudaError_t e = cudaMalloc((void **)&d->dvars, sizeof(snrt_cuda_vars));
  if (e != cudaSuccess) alloc_failed("step variables", sizeof(snrt_cuda_vars), e);
  d->dscale = NULL;
  if (m->precision && strcmp(m->precision, "fp16") == 0) {
    e = cudaMalloc((void **)&d->dscale, sizeof(snrt_cuda_scale));
    if (e != cudaSuccess) alloc_failed("loss scaling state", sizeof(snrt_cuda_scale), e);
  }

  CUDNN_CHECK(cudnnCreate(&d->cudnn));
  CUDNN_CHECK(cudnnSetStream(d->cudnn, d->compute));
  CUBLAS_CHECK(cublasCreate(&d->cublas));
  CUBLAS_CHECK(cublasSetStream(d->cublas, d->compute));
  CUBLAS_CHECK(cublasSetMathMode(d->cublas, d->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                    : CUBLAS_DEFAULT_MATH));
  /* cuBLAS documents 32 MiB as the workspace for Hopper (4 MiB before). */
  d->cublas_ws_bytes = (size_t)(d->prop.major >= 9 ? 32 : 4) << 20;
  e = cudaMalloc(&d->cublas_ws, d->cublas_ws_bytes);
  if (e != cudaSuccess) alloc_failed("cuBLAS workspace", (int64_t)d->cublas_ws_bytes, e);
  CUBLAS_CHECK(cublasSetWorkspace(d->cublas, d->cublas_ws, d->cublas_ws_bytes));

  /* The arena must fit in what is free now, and leave the profile's reserve
   * of the total for what the libraries allocate later (kernels loaded on
   * first use, cuDNN's own buffers, graph instantiation): snc's default
   * budget is the profile's memory minus the same reserve. */
  size_t free1 = 0;
  CUDA_CHECK(cudaMemGetInfo(&free1, &total_b));
  int64_t reserve = m->reserve_bytes > 0 ? m->reserve_bytes : 0;
  int64_t room = (int64_t)total_b - reserve;
  if (room > (int64_t)free1) room = (int64_t)free1;
  d->free_after_setup = (int64_t)free1;
  {
    char t[32], f0[32], f1[32], r[32], a[32], ro[32];
    fmt_bytes(t, sizeof t, (double)total_b);
    fmt_bytes(f0, sizeof f0, (double)free0);
    fmt_bytes(f1, sizeof f1, (double)free1);
    fmt_bytes(r, sizeof r, (double)reserve);
    fmt_bytes(a, sizeof a, (double)m->arena_bytes);
    fmt_bytes(ro, sizeof ro, (double)(room > 0 ? room : 0));
    fprintf(stderr, "snrt: gpu memory: %s total, %s free with the context, %s after cuDNN/"
                    "cuBLAS set-up; reserve %s (profile %s); arena %s of %s usable\n",
            t, f0, f1, r, m->device ? m->device : "?", a, ro);
    if (m->arena_bytes > room) {
      fprintf(stderr, "snrt: error: the planned arena (%s, %lld bytes) does not fit: %s usable "
                      "(free memory after set-up, less the reserve of the total); recompile "
                      "with `snc compile --budget %lld` or less (or another --policy)\n",
              a, (long long)m->arena_bytes, ro, (long long)(room > 0 ? room : 0));
      exit(SNRT_EXIT_DEVICE);
    }
  }

  c->arena = NULL;
  if (m->arena_bytes > 0) {
    e = cudaMalloc((void **)&c->arena, (size_t)m->arena_bytes);
    if (e != cudaSuccess) alloc_failed("device arena", m->arena_bytes, e);
    /* As the CPU: zeroed, or poisoned under --poison so that a read of
     * memory no step wrote shows up. */
    if (c->poison)
      snrt_dev_poison(c, 0, m->arena_bytes);
    else
      CUDA_CHECK(cudaMemsetAsync(c->arena, 0, (size_t)m->arena_bytes, d->compute));
    CUDA_CHECK(cudaStreamSynchronize(d->compute));
  }
  c->host = NULL;
  if (m->host_bytes > 0) {
    /* Pinned pages cannot be swapped: a host arena near the machine's memory
     * would bring the kernel's OOM killer, not an error. Refused first. */
    int64_t avail = host_available_bytes();
    if (avail > 0 && m->host_bytes > avail - ((int64_t)1 << 30)) {
      fprintf(stderr, "snrt: error: the plan's pinned host arena is %.2f GiB but this machine has "
                      "%.2f GiB of memory available (/proc/meminfo MemAvailable, 1 GiB kept "
                      "free): recompile with --host-budget %.0fGiB or less\n",
              (double)m->host_bytes / 1073741824.0, (double)avail / 1073741824.0,
              avail > ((int64_t)2 << 30) ? (double)(avail - ((int64_t)1 << 30)) / 1073741824.0 - 0.5
                                         : 0.0);
      exit(SNRT_EXIT_DEVICE);
    }
    e = cudaHostAlloc((void **)&c->host, (size_t)m->host_bytes, cudaHostAllocDefault);
    if (e != cudaSuccess) {
      fprintf(stderr, "snrt: error: cannot allocate the pinned host arena: asked %lld bytes "
                      "(%s); recompile with a larger --budget or another --policy to "
                      "offload less\n", (long long)m->host_bytes, cudaGetErrorString(e));
      exit(SNRT_EXIT_DEVICE);
    }
    memset(c->host, 0, (size_t)m->host_bytes);
  }

  size_t cudnn_v = cudnnGetVersion();
  int cublas_v = 0, rt_v = 0, drv_v = 0;
  CUBLAS_CHECK(cublasGetVersion(d->cublas, &cublas_v));
  CUDA_CHECK(cudaRuntimeGetVersion(&rt_v));
  CUDA_CHECK(cudaDriverGetVersion(&drv_v));
  snprintf(d->describe, sizeof d->describe,
           "%s (sm_%d%d, CUDA %d.%d, driver %d.%d, cuDNN %d.%d.%d, cuBLAS %d.%d.%d, TF32 %s)",
           d->prop.name, d->prop.major, d->prop.minor, rt_v / 1000, rt_v % 1000 / 10,
           drv_v / 1000, drv_v % 1000 / 10, (int)(cudnn_v / 10000), (int)(cudnn_v / 100 % 100),
           (int)(cudnn_v % 100), cublas_v / 10000, cublas_v / 100 % 100, cublas_v % 100,
           d->tf32 ? "on" : "off");
}

void snrt_dev_free(snrt_ctx *c) {
  snrt_cuda *d = snrt_cu(c);
  if (!d) return;
  CUDA_CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < 4; i++)
    if (d->graph[i].exec) CUDA_CHECK(cudaGraphExecDestroy(d->graph[i].exec));
  for (int i = 0; i < d->nevents; i++)
    if (d->events[i]) CUDA_CHECK(cudaEventDestroy(d->events[i]));
  free(d->events);
  CUDNN_CHECK(cudnnDestroy(d->cudnn));
  CUBLAS_CHECK(cublasDestroy(d->cublas));
  CUDA_CHECK(cudaFree(d->cublas_ws));
  CUDA_CHECK(cudaFree(d->dvars));
  if (d->dscale) CUDA_CHECK(cudaFree(d->dscale));
  CUDA_CHECK(cudaEventDestroy(d->issue_d2h));
  CUDA_CHECK(cudaEventDestroy(d->issue_h2d));
  CUDA_CHECK(cudaEventDestroy(d->join_d2h));
  CUDA_CHECK(cudaEventDestroy(d->join_h2d));
  CUDA_CHECK(cudaStreamDestroy(d->compute));
  CUDA_CHECK(cudaStreamDestroy(d->d2h));
  CUDA_CHECK(cudaStreamDestroy(d->h2d));
  if (c->arena) CUDA_CHECK(cudaFree(c->arena));
  if (c->host) CUDA_CHECK(cudaFreeHost(c->host));
  c->arena = c->host = NULL;
  free(d);
  c->dev = NULL;
}

static void check_range(snrt_ctx *c, const char *what, int64_t off, int64_t bytes) {
  if (off < 0 || bytes < 0 || off + bytes > c->m->arena_bytes) {
    fprintf(stderr, "snrt: error: %s of %lld bytes at arena offset %lld lies outside the "
                    "%lld-byte arena\n", what, (long long)bytes, (long long)off,
            (long long)c->m->arena_bytes);
    exit(SNRT_EXIT_DEVICE);
  }
}

void snrt_dev_upload(snrt_ctx *c, int64_t dev_off, const void *src, int64_t bytes) {
  if (bytes == 0) return;
  check_range(c, "upload", dev_off, bytes);
  snrt_cuda *d = snrt_cu(c);
  /* On the compute stream, so it is ordered after the step that last read the
   * region; synchronous, so the caller may reuse src at once. */
  CUDA_CHECK(cudaMemcpyAsync(c->arena + dev_off, src, (size_t)bytes, cudaMemcpyHostToDevice,
                             d->compute));
  CUDA_CHECK(cudaStreamSynchronize(d->compute));
}

void snrt_dev_download(snrt_ctx *c, void *dst, int64_t dev_off, int64_t bytes) {
  if (bytes == 0) return;
  check_range(c, "download", dev_off, bytes);
  snrt_dev_sync(c);
  snrt_cuda *d = snrt_cu(c);
  CUDA_CHECK(cudaMemcpyAsync(dst, c->arena + dev_off, (size_t)bytes, cudaMemcpyDeviceToHost,
                             d->compute));
  CUDA_CHECK(cudaStreamSynchronize(d->compute));
}

void snrt_dev_sync(snrt_ctx *c) {
  snrt_cuda *d = snrt_cu(c);
  CUDA_CHECK(cudaStreamSynchronize(d->compute));
  CUDA_CHECK(cudaStreamSynchronize(d->d2h));
  CUDA_CHECK(cudaStreamSynchronize(d->h2d));
}

void snrt_dev_poison(snrt_ctx *c, int64_t dev_off, int64_t bytes) {
  check_range(c, "poison", dev_off, bytes);
  unsigned bits = SNRT_POISON_BITS;
  float v;
  memcpy(&v, &bits, sizeof v);
  snrt_cu_fill(c, (float *)(c->arena + dev_off), bytes / 4, v);
}

const char *snrt_dev_describe(snrt_ctx *c) { return snrt_cu(c)->describe; }

/* ------------------------------------------------------------------------- */
/* Context functions of snrt.h.                                              */

char *snrt_arena(snrt_ctx *c) { return c->arena; }
float snrt_lr(snrt_ctx *c) { return c->lr; }
int64_t snrt_step(snrt_ctx *c) { return c->step; }
uint64_t snrt_seed(snrt_ctx *c) { return c->seed; }

const snrt_cuda_vars *snrt_cu_vars(snrt_ctx *c) {
  snrt_cuda *d = snrt_cu(c);
  if (d->capturing) return d->dvars;  /* refreshed before every replay */
  if (!d->hvars_ok || d->hvars.lr != c->lr || d->hvars.step != c->step ||
      d->hvars.seed != c->seed) {
    d->hvars.lr = c->lr;
    d->hvars.step = c->step;
    d->hvars.seed = c->seed;
    for (int i = 0; i < d->nadam; i++)
      d->hvars.adam[i] = snrt_adam_coefs(&d->adam_key[i], c->lr, c->step);
    d->hvars_ok = true;
    /* From pageable memory: returns once hvars is staged, so later changes
     * to it cannot race with the copy. */
    CUDA_CHECK(cudaMemcpyAsync(d->dvars, &d->hvars, sizeof d->hvars, cudaMemcpyHostToDevice,
                               d->compute));
  }
  return d->dvars;
}

void snrt_dead(snrt_ctx *c, int64_t off, int64_t bytes) {
  if (c->poison) snrt_dev_poison(c, off, bytes);
}

void snrt_grad_ready(snrt_ctx *c, int param, const float *g, int64_t n) {
  if (!c->dump_grads || param < 0 || param >= c->m->ntensors) return;
  if (!c->grad_copy) {
    c->grad_copy = (float **)calloc((size_t)c->m->ntensors, sizeof(float *));
    if (!c->grad_copy) snrt_cu_fail("calloc", "out of host memory", __FILE__, __LINE__);
  }
  if (!c->grad_copy[param]) {
    c->grad_copy[param] = (float *)malloc((size_t)n * sizeof(float));
    if (!c->grad_copy[param]) snrt_cu_fail("malloc", "out of host memory", __FILE__, __LINE__);
  }
  /* The step runs eagerly when dump_grads is on (snrt_dev_run_step), so a
   * copy into pageable memory is allowed here; it completes before return. */
  CUDA_CHECK(cudaMemcpyAsync(c->grad_copy[param], g, (size_t)n * sizeof(float),
                             cudaMemcpyDeviceToHost, snrt_cu(c)->compute));
}

/* The plan's events, created on first use (the warm-up step, never during a
 * capture, creates them all). */
static cudaEvent_t plan_event(snrt_ctx *c, int event) {
  snrt_cuda *d = snrt_cu(c);
  if (event < 0) snrt_cu_fail("plan event", "negative event index", __FILE__, __LINE__);
  if (event >= d->nevents) {
    int n = d->nevents ? d->nevents : 16;
    while (n <= event) n *= 2;
    cudaEvent_t *ev = (cudaEvent_t *)realloc(d->events, (size_t)n * sizeof *ev);
    if (!ev) snrt_cu_fail("realloc", "out of host memory", __FILE__, __LINE__);
    memset(ev + d->nevents, 0, (size_t)(n - d->nevents) * sizeof *ev);
    d->events = ev;
    d->nevents = n;
  }
  if (!d->events[event])
    CUDA_CHECK(cudaEventCreateWithFlags(&d->events[event], cudaEventDisableTiming));
  return d->events[event];
}

/* SNRT_COPY_DELAY_US (testing aid): one thread sleeps on the copy stream
 * before each copy, so that a schedule missing a wait reads a region before
 * its copy lands (poison turns that into a stop) instead of passing by luck
 * of timing. */
__global__ void k_copy_delay(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

/* A copy on stream s after everything queued on compute so far; records
 * `event` (if >= 0) when done. The issue event can be re-recorded at once:
 * cudaStreamWaitEvent binds to the record that precedes it. */
static void copy_after_compute(snrt_ctx *c, cudaStream_t s, cudaEvent_t issue, void *dst,
                               const void *src, int64_t bytes, cudaMemcpyKind kind, int event) {
  snrt_cuda *d = snrt_cu(c);
  CUDA_CHECK(cudaEventRecord(issue, d->compute));
  CUDA_CHECK(cudaStreamWaitEvent(s, issue, 0));
  if (s == d->d2h) d->used_d2h = true; else d->used_h2d = true;
  if (d->delay_us > 0) {
    k_copy_delay<<<1, 1, 0, s>>>((unsigned long long)d->delay_us * 1000ull);
    SNRT_LAUNCH_CHECK();
  }
  if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, kind, s));
  if (event >= 0) CUDA_CHECK(cudaEventRecord(plan_event(c, event), s));
}

void snrt_offload(snrt_ctx *c, int64_t host_off, int64_t dev_off, int64_t bytes, int event) {
  check_range(c, "offload", dev_off, bytes);
  snrt_cuda *d = snrt_cu(c);
  copy_after_compute(c, d->d2h, d->issue_d2h, c->host + host_off, c->arena + dev_off, bytes,
                     cudaMemcpyDeviceToHost, event);
}

void snrt_prefetch(snrt_ctx *c, int64_t dev_off, int64_t host_off, int64_t bytes, int event) {
  check_range(c, "prefetch", dev_off, bytes);
  snrt_cuda *d = snrt_cu(c);
  copy_after_compute(c, d->h2d, d->issue_h2d, c->arena + dev_off, c->host + host_off, bytes,
                     cudaMemcpyHostToDevice, event);
}

void snrt_wait(snrt_ctx *c, int event) {
  if (event < 0) return;  /* no event: as the CPU runtime */
  /* SNRT_SKIP_WAIT=E (testing aid): every wait for event E is skipped, as
   * if its line were deleted from train.c. */
  if (event == snrt_cu(c)->skip_wait) return;
  CUDA_CHECK(cudaStreamWaitEvent(snrt_cu(c)->compute, plan_event(c, event), 0));
}

/* ------------------------------------------------------------------------- */
/* Steps and CUDA graphs.                                                    */

/* compute waits for both copy streams: the step ends when its copies do.
 * During a capture only a copy stream forked into it (by a copy) may be
 * joined. */
static void join_copies(snrt_cuda *d) {
  if (!d->capturing || d->used_d2h) {
    CUDA_CHECK(cudaEventRecord(d->join_d2h, d->d2h));
    CUDA_CHECK(cudaStreamWaitEvent(d->compute, d->join_d2h, 0));
  }
  if (!d->capturing || d->used_h2d) {
    CUDA_CHECK(cudaEventRecord(d->join_h2d, d->h2d));
    CUDA_CHECK(cudaStreamWaitEvent(d->compute, d->join_h2d, 0));
  }
  d->used_d2h = d->used_h2d = false;
}

static snrt_cuda_graph *graph_slot(snrt_cuda *d, void (*fn)(snrt_ctx *)) {
  for (int i = 0; i < 4; i++)
    if (d->graph[i].fn == fn) return &d->graph[i];
  for (int i = 0; i < 4; i++)
    if (!d->graph[i].fn) {
      d->graph[i].fn = fn;
      return &d->graph[i];
    }
  return NULL;  /* more than 4 step functions: run them eagerly */
}

static void run_eager(snrt_ctx *c, void (*fn)(snrt_ctx *)) {
  snrt_cu_vars(c);
  fn(c);
  join_copies(snrt_cu(c));
}

/* What the first step took beyond the arena (lazily loaded kernels, cuDNN's
 * buffers): the measured counterpart of the profile's reserve, printed once
 * so that a GPU run can check (and the profile be corrected). */
static void report_warmup(snrt_ctx *c) {
  snrt_cuda *d = snrt_cu(c);
  if (d->warmup_reported) return;
  d->warmup_reported = true;
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaStreamSynchronize(d->compute));
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  int64_t used = d->free_after_setup - c->m->arena_bytes - (int64_t)free_b;
  char u[32], r[32], t[32];
  fmt_bytes(u, sizeof u, (double)(used > 0 ? used : 0));
  fmt_bytes(r, sizeof r, (double)c->m->reserve_bytes);
  fmt_bytes(t, sizeof t, (double)(total_b - free_b));
  fprintf(stderr, "snrt: gpu memory: the warm-up step took %s beyond the arena (lazily loaded "
                  "kernels, library buffers); %s in use on the GPU; profile reserve %s\n",
          u, t, r);
}

void snrt_dev_run_step(snrt_ctx *c, void (*fn)(snrt_ctx *c)) {
  snrt_cuda *d = snrt_cu(c);
  /* Gradient dumps copy into pageable host memory: not capturable. */
  /* Profiled steps time each plan step with events: eager too. */
  snrt_cuda_graph *g = d->graphs && !c->dump_grads && !snrt_prof_on ? graph_slot(d, fn) : NULL;
  if (!g) {
    run_eager(c, fn);
    report_warmup(c);
    return;
  }
  if (!g->exec && g->runs < 1) {  /* warm-up: algorithm search, module loading */
    run_eager(c, fn);
    g->runs++;
    report_warmup(c);
    return;
  }
  snrt_cu_vars(c);  /* queued before the graph: the replay reads it */
  if (!g->exec) {
    cudaGraph_t graph = NULL;
    /* Host-side poison and dump decisions are taken at capture time; neither
     * changes between steps (dump steps are never replayed). */
    CUDA_CHECK(cudaStreamSynchronize(d->compute));
    d->capturing = true;
    d->used_d2h = d->used_h2d = false;
    CUDA_CHECK(cudaStreamBeginCapture(d->compute, cudaStreamCaptureModeThreadLocal));
    fn(c);
    join_copies(d);
    CUDA_CHECK(cudaStreamEndCapture(d->compute, &graph));
    d->capturing = false;
    CUDA_CHECK(cudaGraphInstantiate(&g->exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    snrt_cu_vars(c);  /* anything first seen in the capture (an Adam slot) */
  }
  CUDA_CHECK(cudaGraphLaunch(g->exec, d->compute));
}
