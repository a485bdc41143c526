/* main.c — the emitted program's main(): flags, the training loop, evaluation.
 *
 * What it is: everything around the compiled step. It parses the flags of
 * docs/reference.md ("DIR/train"), loads data, initializes or resumes the
 * model's tensors, then per step uploads a batch into the input and label
 * tensors, calls snrt_the_model.train_step, checks the loss, logs progress
 * and saves checkpoints; at the end of each epoch (and of the run) it
 * evaluates with eval_step. SIGINT/SIGTERM finish the current step, save
 * (with --save) and exit 0.
 *
 * What it is not: the step itself (the emitted train.c) or memory (the device
 * layer, snrt_dev.h). It touches the arena only through the device layer, so
 * it is the same on the CPU and on CUDA. */
#include "rt.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *rt_prog = "train";

static const char usage_text[] =
    "usage: %s [options]\n"
    "  --data synthetic | idx:IMAGES,LABELS | npy:X.npy,Y.npy | tokens:FILE   training data\n"
    "                     (IDX raw or .gz; tokens: llm.c's .bin layout, or any file as bytes)\n"
    "  --eval idx:IMAGES,LABELS | npy:X.npy,Y.npy | tokens:FILE   test loss and accuracy after\n"
    "                     each epoch\n"
    "  --steps N          steps to run in this invocation\n"
    "  --epochs N         train until the end of epoch N (counted across --resume; default 1\n"
    "                     when --steps is not given)\n"
    "  --lr X             learning rate (default: the one compiled in)\n"
    "  --seed S           initial values, data order and dropout (default 0)\n"
    "  --log-every N      progress every N steps (default 100)\n"
    "  --normalize M,S    (x - M) / S on every channel; or M1,..,MC,S1,..,SC per channel\n"
    "  --save FILE        checkpoint at the end (atomic, checksummed)\n"
    "  --save-every N     also every N steps\n"
    "  --resume FILE      continue exactly where FILE left off\n"
    "  --export-onnx FILE the model with its trained values as initializers\n"
    "  --dump-grads DIR   gradients of the last step, DIR/<name>.npy, and DIR/loss.npy\n"
    "  --dump-params DIR  parameters and state after the last step, DIR/<name>.npy\n"
    "  --metrics FILE     JSON summary of the run\n"
    "  --profile FILE     JSON: measured seconds per step kind and op class (and per plan\n"
    "                     step) beside the plan's estimate (first 3 steps left out)\n"
    "  --poison           fill dead arena regions with a NaN pattern; stop (exit 4) on a step\n"
    "                     that reads one\n"
    "  --threads N        CPU threads (default: all cores)\n"
    "  --generate N       byte-level language models: after training, sample N bytes\n"
    "                     after --prompt TEXT (top-5 sampling, seeded by --seed)\n"    "  --comm-timeout S   data parallel (--dist programs under mpirun): seconds a rank\n"
    "                     waits for the others before ending every rank (default 300)\n"
    "exit codes: 0 ok, 1 usage, 2 bad data, file or checkpoint, 3 loss became NaN/Inf,\n"
    "            4 device or memory error, 5 another rank died, hung or timed out\n";

void rt_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fflush(stdout);
  fprintf(stderr, "%s: error: ", rt_prog);
  if (rt_ranks > 1) fprintf(stderr, "rank %d of %d: ", rt_rank, rt_ranks);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  rt_dist_abort(code);   /* every rank ends (exit(code) with one) */
}

void rt_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fflush(stdout);
  fprintf(stderr, "%s: warning: ", rt_prog);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

void *rt_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) rt_fail(SNRT_EXIT_DEVICE, "out of host memory (%zu bytes)", n);
  return p;
}

const char *rt_exe_dir(void) {
  static char dir[PATH_MAX];
  if (!dir[0]) {
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n <= 0) {
      strcpy(dir, ".");
    } else {
      dir[n] = 0;
      char *slash = strrchr(dir, '/');
      if (slash == dir) dir[1] = 0;
      else if (slash) *slash = 0;
      else strcpy(dir, ".");
    }
  }
  return dir;
}

/* ---- flags ----------------------------------------------------------------- */

static noreturn void usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "%s: error: ", rt_prog);
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (see --help)\n");
  exit(SNRT_EXIT_USAGE);
}

static const char *value(int argc, char **argv, int *i) {
  if (*i + 1 >= argc) usage_error("%s needs a value", argv[*i]);
  return argv[++*i];
}

static int64_t parse_int(const char *flag, const char *s, int64_t lo) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end || errno || v < lo) {
    fprintf(stderr, "%s: error: %s needs an integer >= %lld, not '%s' (see --help)\n", rt_prog, flag,
            (long long)lo, s);
    exit(SNRT_EXIT_USAGE);
  }
  return v;
}

static void parse_args(rt_opts *o, int argc, char **argv) {
  *o = (rt_opts){.data = "synthetic", .steps = -1, .epochs = -1, .log_every = 100};
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
      printf(usage_text, rt_prog);
      exit(0);
    } else if (!strcmp(s, "--data")) o->data = value(argc, argv, &i);
    else if (!strcmp(s, "--eval")) o->eval = value(argc, argv, &i);
    else if (!strcmp(s, "--steps")) o->steps = parse_int(s, value(argc, argv, &i), 0);
    else if (!strcmp(s, "--epochs")) o->epochs = parse_int(s, value(argc, argv, &i), 0);
    else if (!strcmp(s, "--seed")) o->seed = (uint64_t)parse_int(s, value(argc, argv, &i), 0);
    else if (!strcmp(s, "--log-every")) o->log_every = parse_int(s, value(argc, argv, &i), 1);
    else if (!strcmp(s, "--save-every")) o->save_every = parse_int(s, value(argc, argv, &i), 1);
    else if (!strcmp(s, "--threads")) o->threads = (int)parse_int(s, value(argc, argv, &i), 1);
    else if (!strcmp(s, "--save")) o->save = value(argc, argv, &i);
    else if (!strcmp(s, "--resume")) o->resume = value(argc, argv, &i);
    else if (!strcmp(s, "--export-onnx")) o->export_onnx = value(argc, argv, &i);
    else if (!strcmp(s, "--dump-grads")) o->dump_grads = value(argc, argv, &i);
    else if (!strcmp(s, "--dump-params")) o->dump_params = value(argc, argv, &i);
    else if (!strcmp(s, "--metrics")) o->metrics = value(argc, argv, &i);
    else if (!strcmp(s, "--profile")) o->profile = value(argc, argv, &i);
    else if (!strcmp(s, "--poison")) o->poison = true;
    else if (!strcmp(s, "--generate")) o->generate = parse_int(s, value(argc, argv, &i), 1);
    else if (!strcmp(s, "--prompt")) o->prompt = value(argc, argv, &i);
    else if (!strcmp(s, "--comm-timeout")) {
      const char *v = value(argc, argv, &i);
      char *end;
      double t = strtod(v, &end);
      if (end == v || *end || !(t > 0) || t > 1e9) usage_error("--comm-timeout needs seconds > 0, not '%s'", v);
      rt_comm_timeout = t;
    }
    else if (!strcmp(s, "--lr")) {
      const char *v = value(argc, argv, &i);
      char *end;
      o->lr = strtof(v, &end);
      if (end == v || *end || !(o->lr >= 0) || isinf(o->lr)) usage_error("--lr needs a number >= 0, not '%s'", v);
      o->lr_set = true;
    } else if (!strcmp(s, "--normalize")) {
      const char *v = value(argc, argv, &i);
      const char *p = v;
      o->nnorm = 0;
      while (*p) {
        char *end;
        float x = strtof(p, &end);
        if (end == p || o->nnorm == 64) usage_error("--normalize takes MEAN,STD (numbers), not '%s'", v);
        o->norm[o->nnorm++] = x;
        p = end;
        if (*p == ',') p++;
        else if (*p) usage_error("--normalize takes MEAN,STD (numbers), not '%s'", v);
      }
      if (o->nnorm < 2 || o->nnorm % 2) usage_error("--normalize takes MEAN,STD pairs, not '%s'", v);
      for (int k = o->nnorm / 2; k < o->nnorm; k++)
        if (!(o->norm[k] > 0)) usage_error("--normalize: deviations must be > 0 in '%s'", v);
    } else usage_error("unknown option '%s'", s);
  }
  if (o->steps < 0 && o->epochs < 0) o->epochs = 1;
}

/* ---- signals ---------------------------------------------------------------- */

volatile sig_atomic_t rt_stop_signal;

static void on_signal(int sig) {
  if (rt_stop_signal) _exit(128 + sig);   /* a second ^C: stop now */
  rt_stop_signal = sig;
}

/* ---- evaluation -------------------------------------------------------------- */

typedef struct eval_result {
  double accuracy, loss;
} eval_result;

/* The whole set in batches of the compiled size; the last batch is padded
 * with zeros and only its real samples count. */
static bool evaluate(snrt_ctx *c, const rt_data *d, eval_result *r) {
  const snrt_model *m = c->m;
  const snrt_tensor *in = &m->tensors[m->input], *lg = &m->tensors[m->logits];
  int B = m->batch;
  int64_t elems = in->nbytes / 4 / B, per = lg->nbytes / 4 / B, n = rt_data_count(d);
  /* P labels a sample (T positions of a language model), V logits each. */
  int P = rt_label_positions(m);
  int64_t V = per / P;
  float *x = rt_xmalloc((size_t)in->nbytes);
  float *logits = rt_xmalloc((size_t)lg->nbytes);
  int32_t *lab = rt_xmalloc(sizeof(int32_t) * (size_t)B * (size_t)P);
  void *y = rt_xmalloc((size_t)rt_label_bytes(m));
  int64_t correct = 0;
  double loss = 0;
  int64_t done = 0;
  /* Data parallel: rank r evaluates batches r, r + R, ...; the sums are
   * added across ranks below. */
  for (int64_t start = (int64_t)rt_rank * B; start < n && !rt_stop_signal; start += (int64_t)B * rt_ranks) {
    int rows = (int)(n - start < B ? n - start : B);
    for (int i = 0; i < rows; i++) rt_data_sample(d, start + i, x + i * elems, lab + (int64_t)i * P);
    memset(x + rows * elems, 0, sizeof(float) * (size_t)((B - rows) * elems));
    for (int64_t i = (int64_t)rows * P; i < (int64_t)B * P; i++) lab[i] = 0;
    snrt_dev_upload(c, in->offset, x, in->nbytes);
    rt_encode_labels(m, lab, B, y);
    if (rt_data_target(d, 0))
      for (int i = 0; i < rows; i++)
        memcpy((float *)y + i * per, rt_data_target(d, start + i), sizeof(float) * (size_t)per);
    snrt_dev_upload(c, m->tensors[m->label].offset, y, rt_label_bytes(m));
    m->eval_step(c);
    snrt_dev_sync(c);
    snrt_dev_download(c, logits, lg->offset, lg->nbytes);
    for (int64_t q = 0; q < (int64_t)rows * P; q++) {
      const float *l = logits + q * V;
      int i = (int)q;   /* the label row (the sample unless P > 1) */
      int best = 0;
      for (int k = 1; k < m->classes; k++)
        if (l[k] > l[best]) best = k;
      correct += best == lab[i];
      if (m->loss_kind == SNRT_LOSS_MSE) {
        double s = 0;
        const float *t = rt_data_target(d, start + i);
        for (int k = 0; k < per; k++) {
          double e = l[k] - (t ? t[k] : k == lab[i] ? 1.0 : 0.0);
          s += e * e;
        }
        loss += s / per;
      } else {
        double mx = l[0], s = 0;
        for (int k = 1; k < m->classes; k++) mx = l[k] > mx ? l[k] : mx;
        for (int k = 0; k < m->classes; k++) s += exp(l[k] - mx);
        loss += mx + log(s) - l[lab[i]];
      }
    }
    done += rows;
  }
  free(x);
  free(logits);
  free(lab);
  free(y);
  if (rt_ranks > 1) {
    double v[3] = {(double)correct, loss, (double)done};
    rt_dist_sum(v, 3, "the exchange of the evaluation's sums");
    correct = (int64_t)v[0], loss = v[1], done = (int64_t)v[2];
  }
  if (done < n) return false;   /* interrupted */
  r->accuracy = n ? (double)correct / ((double)n * P) : 0;
  r->loss = n ? loss / ((double)n * P) : 0;
  return true;
}

/* Language models: the test loss also in bits per token and as perplexity. */
static const char *lm_extra(const snrt_model *m, double loss) {
  static char buf[96];
  buf[0] = 0;
  if (rt_label_positions(m) > 1)
    snprintf(buf, sizeof buf, " (%.3f bits/token, perplexity %.2f)", loss / log(2.0), exp(loss));
  return buf;
}

/* ---- generation ---------------------------------------------------------------- */

/* --generate N: the eval step over a window holding the last T bytes of the
 * text so far (row 0 of the batch; the model is causal, so the positions
 * after it do not matter), then one byte drawn from the 5 likeliest at the
 * last position, with probabilities from the softmax; the draw is
 * snrt_uniform(seed, ...): reproducible. Prints the prompt and the bytes. */
#define GEN_TOP_K 5

static void generate(snrt_ctx *c, const rt_opts *o) {
  const snrt_model *m = c->m;
  const snrt_tensor *in = &m->tensors[m->input], *lg = &m->tensors[m->logits];
  int B = m->batch;
  int64_t T = in->nbytes / 4 / B, V = m->classes;
  const char *prompt = o->prompt ? o->prompt : "\n";
  int64_t np = (int64_t)strlen(prompt), n = np + o->generate;
  if (np == 0) prompt = "\n", np = 1, n = 1 + o->generate;
  unsigned char *text = rt_xmalloc((size_t)n);
  memcpy(text, prompt, (size_t)np);
  int32_t *x = rt_xmalloc((size_t)in->nbytes);
  float *logits = rt_xmalloc((size_t)lg->nbytes);
  printf("%s: generated (%lld bytes after the prompt):\n%s", rt_prog, (long long)o->generate, prompt);
  for (int64_t len = np; len < n && !rt_stop_signal; len++) {
    int64_t w = len < T ? len : T;
    memset(x, 0, (size_t)in->nbytes);
    for (int64_t j = 0; j < w; j++) x[j] = text[len - w + j];
    snrt_dev_upload(c, in->offset, x, in->nbytes);
    m->eval_step(c);
    snrt_dev_sync(c);
    snrt_dev_download(c, logits, lg->offset, lg->nbytes);
    const float *l = logits + (w - 1) * V;
    int top[GEN_TOP_K];
    int k = 0;
    for (int v = 0; v < V; v++) {   /* insertion into the k best, highest first */
      int at = k < GEN_TOP_K ? k++ : GEN_TOP_K;
      while (at > 0 && l[v] > l[top[at - 1]]) {
        if (at < GEN_TOP_K) top[at] = top[at - 1];
        at--;
      }
      if (at < GEN_TOP_K) top[at] = v;
    }
    double p[GEN_TOP_K], s = 0;
    for (int i = 0; i < k; i++) s += p[i] = exp((double)l[top[i]] - l[top[0]]);
    double u = snrt_uniform(c->seed, 0xFFFFFFFFFFFF4000ull, 13, (uint64_t)len) * s;
    int pick = 0;
    while (pick < k - 1 && u >= p[pick]) u -= p[pick++];
    text[len] = (unsigned char)top[pick];
    putchar(text[len]);
    fflush(stdout);
  }
  putchar('\n');
  free(text);
  free(x);
  free(logits);
}

/* ---- progress ----------------------------------------------------------------- */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fmt_time(char *buf, size_t n, double s) {
  if (!(s >= 0) || s > 1e7) {
    snprintf(buf, n, "?");
    return;
  }
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* ---- the run ------------------------------------------------------------------ */

/* SNRT_SLOW_STEPS=K:US, a testing aid: each of the first K steps of this
 * invocation sleeps US microseconds after it (inside the timed step), so a
 * test can make the first steps slow and see that images_per_s leaves out
 * exactly the first 3, or make every step slow enough to signal mid-run.
 * Unset or malformed: no delay. */
static void slow_steps(int64_t *k, long *us) {
  *k = 0;
  *us = 0;
  const char *s = getenv("SNRT_SLOW_STEPS");
  if (!s) return;
  char *end;
  long long kk = strtoll(s, &end, 10);
  if (end == s || *end != ':' || kk < 0) return;
  const char *u = end + 1;
  long uu = strtol(u, &end, 10);
  if (end == u || *end || uu < 0) return;
  *k = kk;
  *us = uu;
}

/* OMP_WAIT_POLICY=passive unless the user set a policy: threads waiting at
 * the end of a parallel region sleep instead of spinning. On a machine
 * shared with other work (CI, a laptop) spinning threads hold the cores their
 * partners need: a 2-thread step of the example CNN measured 2-8x slower
 * with libgomp's default spinning. libgomp reads the variable once, when it
 * is loaded (before main), so setting it here only takes effect by running
 * the program again; if that fails it runs on with the default policy. */
static void wait_policy(char **argv) {
  if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1)) return;
  execv("/proc/self/exe", argv);
}

/* ---- data parallel ------------------------------------------------------------ */

/* The rank count a launcher (mpirun, srun through PMI) announces; 1 if none. */
static int ranks_from_launcher(void) {
  const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
  for (int i = 0; i < 3; i++) {
    const char *v = getenv(vars[i]);
    if (v && atoi(v) > 1) return atoi(v);
  }
  return 1;
}

/* Every rank must run the same program on the same data with the same
 * flags that shape training (threads and file names may differ). */
static void agree(const rt_opts *o, const snrt_model *m, const rt_data *train, const rt_data *test) {
  static const char *const names[] = {
      "the runtime's layout version", "the model and plan (fingerprint)", "the per-rank batch",
      "the arena size (the plan)", "the tensor table", "the training set's size",
      "the test set's size", "--seed", "--steps", "--epochs", "--lr", "--resume (given or not)",
      "the mode of --normalize", "--save (given or not)", "--save-every"};
  uint32_t lr_bits;
  float lr = o->lr_set ? o->lr : m->lr;
  memcpy(&lr_bits, &lr, 4);
  uint64_t v[] = {1, m->fingerprint, (uint64_t)m->batch, (uint64_t)m->arena_bytes,
                  (uint64_t)m->ntensors, (uint64_t)rt_data_count(train),
                  test ? (uint64_t)rt_data_count(test) : 0, o->seed, (uint64_t)o->steps,
                  (uint64_t)o->epochs, lr_bits, o->resume != NULL, (uint64_t)o->nnorm,
                  o->save != NULL, (uint64_t)o->save_every};
  rt_dist_agree(names, v, (int)(sizeof v / sizeof v[0]));
}

/* Rank 0's parameters, state, optimizer state and position to every rank:
 * the same start whatever each rank initialized or loaded. */
static void share_state(snrt_ctx *c, rt_position *pos) {
  const snrt_model *m = c->m;
  rt_dist_bcast(pos, sizeof *pos);
  for (int i = 0; i < m->ntensors; i++) {
    const snrt_tensor *t = &m->tensors[i];
    if (t->kind != SNRT_T_PARAM && t->kind != SNRT_T_STATE && t->kind != SNRT_T_OPT) continue;
    void *buf = rt_xmalloc((size_t)t->nbytes);
    if (rt_rank == 0) rt_tensor_read(c, i, buf);
    rt_dist_bcast(buf, t->nbytes);
    if (rt_rank != 0) rt_tensor_write(c, i, buf);
    free(buf);
  }
}

/* SNRT_DIST_FAIL=RANK:STEP[:hang], a testing aid: that rank kills itself
 * (SIGKILL; with :hang, stops itself with SIGSTOP) before global step STEP
 * (0-based), so tests can see the others end with a message. */
static void fail_at(int64_t *step, int *hang) {
  const char *s = getenv("SNRT_DIST_FAIL");
  if (!s) return;
  char *end;
  long r = strtol(s, &end, 10);
  if (end == s || *end != ':' || r != rt_rank) return;
  const char *p = end + 1;
  long long st = strtoll(p, &end, 10);
  if (end == p || st < 0) return;
  *step = st;
  *hang = !strcmp(end, ":hang");
}

int main(int argc, char **argv) {
  if (argc > 0) wait_policy(argv);
  const char *slash = argc > 0 ? strrchr(argv[0], '/') : NULL;
  if (argc > 0) rt_prog = slash ? slash + 1 : argv[0];
  rt_opts o;
  parse_args(&o, argc, argv);
  const snrt_model *m = &snrt_the_model;
  if (m->dist) rt_dist_init(&argc, &argv);
  else if (ranks_from_launcher() > 1)
    rt_fail(SNRT_EXIT_USAGE, "this program was compiled without --dist mpi, so under mpirun "
            "(%d ranks) each rank would train alone and write the same files: compile with "
            "snc compile ... --dist mpi, or run it as one process", ranks_from_launcher());
  if (m->zero && rt_ranks != m->zero)
    rt_fail(SNRT_EXIT_USAGE, "this program was compiled with --zero 1 --ranks %d (its optimizer "
            "state is split in %d): run it as mpirun -np %d, not with %d rank%s", m->zero, m->zero,
            m->zero, rt_ranks, rt_ranks == 1 ? "" : "s");
  if (m->zero && o.dump_grads)
    rt_fail(SNRT_EXIT_USAGE, "--dump-grads: under --zero 1 each rank holds the averaged gradient "
            "of its own share of the parameters only");
  if (m->batch < 1 || m->input < 0 || m->input >= m->ntensors || m->label < 0 ||
      m->label >= m->ntensors || m->loss < 0 || m->loss >= m->ntensors || m->logits < 0 ||
      m->logits >= m->ntensors)
    rt_fail(SNRT_EXIT_DATA, "the compiled model descriptor is inconsistent (input/label/loss/logits)");

  if (o.generate && (m->tensors[m->input].dtype != SNRT_I32 || m->classes != 256 ||
                     rt_label_positions(m) < 2))
    rt_fail(SNRT_EXIT_USAGE, "--generate needs a byte-level language model (token ids in, "
            "(batch, T, 256) logits out)");
  snrt_ctx c = {.m = m, .lr = o.lr_set ? o.lr : m->lr, .seed = o.seed, .poison = o.poison,
                .dump_grads = o.dump_grads != NULL, .threads = o.threads};
  rt_position pos = {.step = 0, .epoch = 0, .pos = 0, .seed = o.seed};
  rt_data *train = rt_data_load(o.data, m, o.seed, &o);
  rt_data *test = o.eval ? rt_data_load(o.eval, m, o.seed, &o) : NULL;
  int64_t gbatch = (int64_t)m->batch * rt_ranks;   /* the global batch */
  int64_t nb = rt_data_count(train) / gbatch;
  if (nb < 1)
    rt_fail(SNRT_EXIT_DATA, "%s has %lld samples, fewer than one batch of %lld", o.data,
            (long long)rt_data_count(train), (long long)gbatch);
  if (rt_ranks > 1) agree(&o, m, train, test);

  snrt_dev_init(&c);
  /* --precision fp16: GradScaler's initial scale and growth interval
   * (SNRT_LOSS_SCALE, SNRT_LOSS_SCALE_INTERVAL: testing aids). A checkpoint's
   * scale, when resuming, replaces the initial one. */
  c.loss_scale = 65536.0f;
  c.scale_interval = 2000;
  const char *ls = getenv("SNRT_LOSS_SCALE");
  if (ls && *ls) c.loss_scale = strtof(ls, NULL);
  const char *li = getenv("SNRT_LOSS_SCALE_INTERVAL");
  if (li && *li && atoll(li) > 0) c.scale_interval = atoll(li);
  snrt_dev_scale_sync(&c, false);
  c.grad_copy = calloc((size_t)m->ntensors, sizeof(float *));
  if (!c.grad_copy) rt_fail(SNRT_EXIT_DEVICE, "out of host memory");
  rt_init_tensors(&c);
  /* Data parallel: rank 0 reads the checkpoint; every rank starts from rank
   * 0's parameters, state and position. */
  if (o.resume && rt_rank == 0) rt_checkpoint_load(&c, o.resume, &pos);
  if (rt_ranks > 1) share_state(&c, &pos);
  if (m->zero && o.resume) rt_zero_scatter(&c);
  if (o.resume) {
    if (pos.seed != o.seed) {
      /* The seed fixes the data order and dropout: the checkpoint's wins. */
      c.seed = pos.seed;
      /* Synthetic data is a function of the seed too. */
      rt_data_free(train);
      train = rt_data_load(o.data, m, c.seed, &o);
    }
    if (pos.pos >= nb)
      rt_fail(SNRT_EXIT_DATA, "checkpoint %s is at batch %lld of its epoch, but %s has only %lld batches",
              o.resume, (long long)pos.pos, o.data, (long long)nb);
    c.step = pos.step;
  }

  bool lead = rt_rank == 0;   /* rank 0 alone prints and writes files */
  if (lead) {
  if (m->dist)
    printf("%s: data parallel, %d rank%s x batch %d = global batch %lld, %d all-reduce bucket%s\n",
           rt_prog, rt_ranks, rt_ranks == 1 ? "" : "s", m->batch, (long long)gbatch, m->buckets,
           m->buckets == 1 ? "" : "s");
  printf("%s: %s, batch %d, arena %.2f MiB (policy %s), host arena %.2f MiB, %s\n", rt_prog,
         m->name ? m->name : "model", m->batch, m->arena_bytes / 1048576.0,
         m->policy ? m->policy : "?", m->host_bytes / 1048576.0, snrt_dev_describe(&c));
    if (m->precision)
      printf("%s: precision %s: activations and their gradients in %s, fp32 master weights; "
             "float32 working copies in the planned arena (largest step %.2f MiB)\n", rt_prog,
             m->precision, strcmp(m->precision, "fp16") == 0 ? "float16" : "bfloat16",
             m->convert_bytes / 1048576.0);
  }
  if (o.resume && lead)
    printf("%s: resumed from %s at step %lld (epoch %lld, batch %lld)\n", rt_prog, o.resume,
           (long long)pos.step, (long long)pos.epoch + 1, (long long)pos.pos);
  fflush(stdout);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  /* How many steps this invocation runs: --steps, and the end of --epochs. */
  int64_t todo = INT64_MAX;
  if (o.steps >= 0) todo = o.steps;
  if (o.epochs >= 0) {
    int64_t left = (o.epochs - pos.epoch) * nb - pos.pos;
    if (left < 0) left = 0;
    if (left < todo) todo = left;
  }

  const snrt_tensor *in = &m->tensors[m->input], *lt = &m->tensors[m->label];
  rt_loader *ld = todo > 0 ? rt_loader_start(train, m, c.seed, pos.epoch, pos.pos) : NULL;
  bool tty = isatty(STDOUT_FILENO);
  rt_metrics mt = {.threads = c.threads, .train_loss = NAN};
  eval_result ev = {0, 0};
  bool evaluated_last = false;
  double t0 = now(), t3 = t0, last_draw = 0;
  int64_t done = 0;
  float loss = NAN;
  int64_t slow_k;
  long slow_us;
  slow_steps(&slow_k, &slow_us);
  int64_t fail_step = -1;
  int fail_hang = 0;
  if (rt_ranks > 1) fail_at(&fail_step, &fail_hang);
  double c3[3] = {0, 0, 0};   /* communication seconds at step 3 (rt_dist_times) */
  while (done < todo && !rt_stop_signal) {
    if (pos.step == fail_step) {   /* SNRT_DIST_FAIL: a testing aid */
      fflush(stdout);
      raise(fail_hang ? SIGSTOP : SIGKILL);
    }
    const float *x;
    const void *y;
    rt_loader_next(ld, &x, &y);
    snrt_dev_upload(&c, in->offset, x, in->nbytes);
    snrt_dev_upload(&c, lt->offset, y, lt->nbytes);
    rt_loader_release(ld);
    if (o.profile) rt_prof_begin(m);
    snrt_dev_run_step(&c, m->train_step);
    snrt_dev_sync(&c);
    if (o.profile) rt_prof_end();
    snrt_dev_download(&c, &loss, m->tensors[m->loss].offset, 4);
    if (rt_ranks > 1) {
      /* Every rank: the loss of the global batch, and whether any rank was
       * asked to stop (all stop after the same step). */
      double v[2] = {loss, rt_stop_signal ? 1 : 0};
      char what[64];
      snprintf(what, sizeof what, "the exchange of the loss after step %lld", (long long)pos.step + 1);
      rt_dist_sum(v, 2, what);
      loss = (float)(v[0] / rt_ranks);
      if (v[1] > 0 && !rt_stop_signal) rt_stop_signal = SIGTERM;
    }
    if (done < slow_k) {
      struct timespec d = {slow_us / 1000000, slow_us % 1000000 * 1000};
      while (nanosleep(&d, &d) != 0 && errno == EINTR && !rt_stop_signal) {}
    }
    if (!isfinite(loss)) {
      if (tty) putchar('\n');
      rt_fail(SNRT_EXIT_NAN, "the loss became %s at step %lld (epoch %lld); stopping%s%s%s", isnan(loss) ? "NaN" : "Inf",
              (long long)pos.step + 1, (long long)pos.epoch + 1,
              o.save ? " (the last good checkpoint " : "", o.save ? o.save : "", o.save ? " is kept)" : "");
    }
    c.step++;
    pos.step++;
    done++;
    bool epoch_end = ++pos.pos == nb;
    if (epoch_end) {
      pos.pos = 0;
      pos.epoch++;
    }
    if (done == 3) t3 = now(), rt_dist_times(&c3[0], &c3[1], &c3[2]);
    mt.train_loss = loss;
    double t = now();
    bool last = done == todo;
    if (lead && (tty ? (t - last_draw > 0.25 || last || epoch_end || done % o.log_every == 0)
                     : (done % o.log_every == 0 || last))) {
      double rate = done > 3 && t > t3 ? (done - 3) * gbatch / (t - t3) : done * gbatch / (t - t0);
      char eta[32] = "?";
      if (todo != INT64_MAX) fmt_time(eta, sizeof eta, (todo - done) * gbatch / rate);
      printf("%sepoch %lld step %lld/%lld loss %.4f %.0f img/s ETA %s%s", tty ? "\r\033[K" : "",
             (long long)(epoch_end ? pos.epoch : pos.epoch + 1), (long long)(epoch_end ? nb : pos.pos),
             (long long)nb, loss, rate, eta, tty ? "" : "\n");
      fflush(stdout);
      last_draw = t;
    }
    /* --zero 1: every rank takes part (rank 0 gathers the shards and writes). */
    if ((lead || m->zero) && o.save && o.save_every && pos.step % o.save_every == 0)
      rt_checkpoint_save(&c, o.save, &pos);
    evaluated_last = false;
    if (epoch_end && test) {
      if (evaluate(&c, test, &ev)) {
        if (lead)
          printf("%sepoch %lld: test accuracy %.4f, test loss %.4f%s\n", tty ? "\r\033[K" : "",
                 (long long)pos.epoch, ev.accuracy, ev.loss, lm_extra(m, ev.loss));
        fflush(stdout);
        evaluated_last = true;
      }
    }
  }
  double t_end = now();
  if (tty && done && lead) putchar('\n');
  rt_loader_stop(ld);
  if (!lead) {
    if (test && !rt_stop_signal && !evaluated_last) evaluate(&c, test, &ev);   /* its share */
  } else if (rt_stop_signal)
    printf("%s: stopped by %s after step %lld%s%s\n", rt_prog, rt_stop_signal == SIGINT ? "SIGINT" : "SIGTERM",
           (long long)pos.step, o.save ? "; saving " : "", o.save ? o.save : "");
  else if (test && !evaluated_last && evaluate(&c, test, &ev)) {
    printf("%s: test accuracy %.4f, test loss %.4f%s\n", rt_prog, ev.accuracy, ev.loss,
           lm_extra(m, ev.loss));
    evaluated_last = true;
  }
  fflush(stdout);

  if (lead && o.generate && !rt_stop_signal) generate(&c, &o);
  if ((lead || m->zero) && o.save) rt_checkpoint_save(&c, o.save, &pos);
  if (lead && o.dump_params) rt_dump_params(&c, o.dump_params);
  if (lead && o.dump_grads && done > 0) rt_dump_grads(&c, o.dump_grads, loss);
  if (lead && o.export_onnx) rt_export_onnx(&c, o.export_onnx);
  if (lead && o.metrics) {
    mt.steps = done;
    mt.global_step = pos.step;
    mt.epochs = pos.epoch + (double)pos.pos / nb;
    mt.has_eval = evaluated_last;
    mt.test_accuracy = ev.accuracy;
    mt.test_loss = ev.loss;
    if (done > 3 && t_end > t3) mt.images_per_s = (done - 3) * (double)gbatch / (t_end - t3);
    else if (done > 0 && t_end > t0) mt.images_per_s = done * (double)gbatch / (t_end - t0);
    if (done > 3 && t_end > t3) {
      double cm, ex, sy;
      rt_dist_times(&cm, &ex, &sy);
      mt.step_s = (t_end - t3) / (double)(done - 3);
      mt.comm_s = (cm - c3[0]) / (double)(done - 3);
      mt.comm_exposed_s = (ex - c3[1]) / (double)(done - 3);
      mt.sync_s = (sy - c3[2]) / (double)(done - 3);
    }
    mt.threads = c.threads;
    snrt_dev_scale_sync(&c, true);   /* fp16's loss scale and skipped steps */
    rt_metrics_write(&c, o.metrics, &mt);
  }
  if (lead && o.profile) rt_prof_write(&c, o.profile);
  for (int i = 0; i < m->ntensors; i++) free(c.grad_copy[i]);
  free(c.grad_copy);
  snrt_dev_free(&c);
  rt_data_free(train);
  rt_data_free(test);
  rt_dist_finalize();
  return 0;
}
