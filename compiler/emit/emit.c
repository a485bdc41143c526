/* emit.c — writes the training program: DIR/train.c, params.bin, model.onnx,
 * plan.txt, plan.json and build.ninja.
 *
 * Requires: a planned graph (every step's instances have offsets).
 * train.c is for people: one commented call per step (kind, op, node, live
 * bytes), pointers written as F(offset) into the device arena, parameters as
 * `static const` structs. The model descriptor at the end (snrt_the_model)
 * tells the runtime where the input, labels, loss, logits, parameters and
 * optimizer state live.
 */
#include "emit_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STEPS_PER_FUNCTION 400   /* keeps gcc fast on 100k-step programs */

/* ---- helpers used by emit_ops.c ---- */

const char *emit_ptr(Emit *e, int inst, int tensor) {
  static char buf[16][48];
  static int k;
  if (inst < 0) return "NULL";
  char *s = buf[k++ & 15];
  const Instance *in = &e->pl->inst[inst];
  if (in->offset < 0)
    internal_error(__FILE__, __LINE__, "tensor '%s' has no device offset at step %d",
                   e->g->t[tensor].name, e->step);
  int dt = e->g->t[tensor].dtype;
  snprintf(s, 48, "%s(0x%llx)", dt == DT_INT32 ? "I" : dt == DT_BFLOAT16 ? "B" : dt == DT_FLOAT16 ? "H" : "F",
           (unsigned long long)in->offset);
  return s;
}

const char *emit_in(Emit *e, int k) {
  const Node *n = &e->g->n[e->st->node];
  if (k >= n->nin || n->in[k] < 0) return "NULL";
  if (e->wrapped && e->sub_in[k]) return e->sub_in[k];
  return emit_ptr(e, e->st->in[k], n->in[k]);
}

const char *emit_out(Emit *e, int k) {
  const Node *n = &e->g->n[e->st->node];
  if (k >= n->nout || n->out[k] < 0) return "NULL";
  if (e->wrapped && e->sub_out[k]) return e->sub_out[k];
  return emit_ptr(e, e->st->out[k], n->out[k]);
}

/* The kernel's part of the step's workspace: after its float32 copies. */
const char *emit_ws(Emit *e) {
  if (e->st->ws < 0) return "NULL";
  const Instance *w = &e->pl->inst[e->st->ws];
  if (w->bytes <= w->convert_bytes) return "NULL";
  static char s[48];
  snprintf(s, sizeof s, "F(0x%llx)", (unsigned long long)(w->offset + w->convert_bytes));
  return s;
}

static size_t phome(const void *key, int cap) {
  return (size_t)(((uint64_t)(uintptr_t)key * 0x9e3779b97f4a7c15ull) >> 24) & (size_t)(cap - 1);
}

static void phash_put(Emit *e, int i) {
  size_t h = phome(e->pkeys[i], e->phcap);
  while (e->phash[h]) h = (h + 1) & (size_t)(e->phcap - 1);
  e->phash[h] = i + 1;
}

const char *emit_params_find(Emit *e, const void *key) {
  if (!e->phcap) return NULL;
  for (size_t h = phome(key, e->phcap); e->phash[h]; h = (h + 1) & (size_t)(e->phcap - 1))
    if (e->pkeys[e->phash[h] - 1] == key) return e->pnames[e->phash[h] - 1];
  return NULL;
}

const char *emit_params(Emit *e, const void *key, const char *type, const char *body) {
  const char *have = emit_params_find(e, key);
  if (have) return have;
  if (2 * (e->np + 1) > e->phcap) {
    free(e->phash);
    e->phcap = e->phcap ? 2 * e->phcap : 256;
    e->phash = xcalloc((size_t)e->phcap, sizeof *e->phash);
    for (int i = 0; i < e->np; i++) phash_put(e, i);
  }
  xgrow((void **)&e->pkeys, &e->capp, e->np + 1, sizeof *e->pkeys);
  e->pnames = xrealloc(e->pnames, sizeof(char *) * (size_t)e->capp);
  char *name = xasprintf("&P%d", e->nparams);
  fprintf(e->decl, "static const %s P%d = {%s};\n", type, e->nparams, body);
  e->nparams++;
  e->pkeys[e->np] = key;
  e->pnames[e->np] = name;
  phash_put(e, e->np++);
  return name;
}

const char *emit_float(float v) {
  static char buf[16][40];
  static int k;
  char *s = buf[k++ & 15];
  if (isnan(v)) snprintf(s, 40, "NAN");
  else if (isinf(v)) snprintf(s, 40, v > 0 ? "INFINITY" : "-INFINITY");
  else snprintf(s, 40, "%.9gf", (double)v);
  /* "1f" is not a C literal; "1.f" is. */
  if (!strpbrk(s, ".eENI")) {
    size_t n = strlen(s);
    memmove(s + n, s + n - 1, 2);
    s[n - 1] = '.';
  }
  return s;
}

/* ---- files ---- */

static FILE *create(const char *dir, const char *name, const char *mode) {
  char *path = xasprintf("%s/%s", dir, name);
  FILE *f = fopen(path, mode);
  if (!f) fatal(EXIT_BADINPUT, "cannot write '%s': %s", path, strerror(errno));
  free(path);
  return f;
}

static void finish(FILE *f, const char *dir, const char *name) {
  if (ferror(f) | fclose(f)) fatal(EXIT_BADINPUT, "error writing '%s/%s'", dir, name);
}

static void make_dir(const char *dir) {
  char *p = xstrdup(dir);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      mkdir(p, 0777);
      *s = '/';
    }
  if (mkdir(p, 0777) != 0 && errno != EEXIST)
    fatal(EXIT_BADINPUT, "cannot create directory '%s': %s", dir, strerror(errno));
  struct stat st;
  if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
    fatal(EXIT_BADINPUT, "'%s' exists and is not a directory", dir);
  free(p);
}

static void copy_file(const char *from, const char *dir, const char *name, uint64_t *hash) {
  FILE *in = fopen(from, "rb");
  if (!in) fatal(EXIT_BADINPUT, "cannot read '%s': %s", from, strerror(errno));
  FILE *out = create(dir, name, "wb");
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
    *hash = hash_bytes(*hash, buf, n);
    if (fwrite(buf, 1, n, out) != n) fatal(EXIT_BADINPUT, "error writing '%s/%s'", dir, name);
  }
  if (ferror(in)) fatal(EXIT_BADINPUT, "error reading '%s'", from);
  fclose(in);
  finish(out, dir, name);
}

/* The folder under the root that holds the runtime libraries the program
 * links: the one this snc was built in (configure.py --builddir; "build"
 * by default, and with SNC_ROOT). */
static char build_dir[PATH_MAX] = "build";

/* The repository root: SNC_ROOT, or the folder above BUILDDIR/snc. */
static char *snc_root(void) {
  const char *env = getenv("SNC_ROOT");
  if (env && *env) return xstrdup(env);
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) fatal(EXIT_BADINPUT, "cannot locate the snc installation (set SNC_ROOT)");
  exe[n] = 0;
  for (int up = 0; up < 2; up++) {
    char *slash = strrchr(exe, '/');
    if (!slash) fatal(EXIT_BADINPUT, "cannot locate the snc installation (set SNC_ROOT)");
    *slash = 0;
    if (up == 0 && strrchr(exe, '/')) snprintf(build_dir, sizeof build_dir, "%s", strrchr(exe, '/') + 1);
  }
  return xstrdup(exe);
}

/* ---- the model's tensor table ---- */

typedef struct Table {
  int *t;                  // IR tensor of each entry
  int n, cap;
  int *map;                // IR tensor -> its entry (-1: not in the table)
  int *opt_of;             // 2 per IR tensor: a parameter's optimizer state tensors (-1: none)
  int64_t *file_off;       // per entry: its initial value's offset in params.bin (-1: none)
} Table;

static int table_add(Table *tb, int *map, int t) {
  if (t < 0) return -1;
  if (map[t] >= 0) return map[t];
  xgrow((void **)&tb->t, &tb->cap, tb->n + 1, sizeof(int));
  tb->t[tb->n] = t;
  map[t] = tb->n;
  return tb->n++;
}

static const char *table_kind(const Graph *g, int t) {
  if (graph_is_eval_output(g, t)) return "SNRT_T_LOGITS";
  switch (g->t[t].kind) {
  case TK_INPUT: return "SNRT_T_INPUT";
  case TK_LABEL: return "SNRT_T_LABEL";
  case TK_PARAM: return "SNRT_T_PARAM";
  case TK_STATE: return "SNRT_T_STATE";
  case TK_OPT: return g->zero_ranks ? "SNRT_T_SHARD" : "SNRT_T_OPT";
  case TK_LOSS: return "SNRT_T_LOSS";
  case TK_PGRAD: return "SNRT_T_GRAD";
  case TK_CONSTVAL: return "SNRT_T_CONST";
  default: internal_error(__FILE__, __LINE__, "tensor '%s' in the model table", g->t[t].name);
  }
}

static const char *init_name(int init) {
  static const char *names[] = {"SNRT_INIT_NONE", "SNRT_INIT_FILE", "SNRT_INIT_ZERO",
                                "SNRT_INIT_ONE", "SNRT_INIT_KAIMING", "SNRT_INIT_BIAS"};
  return names[init];
}

static void c_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 32 || ch > 126) fprintf(f, "\\%03o", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}

/* Comments must not be closed early by a name containing the closing token. */
const char *emit_comment_safe(const char *s) {
  static char buf[4][256];
  static int k;
  char *o = buf[k++ & 3];
  size_t j = 0;
  for (; *s && j < 250; s++) {
    if (s[0] == '*' && s[1] == '/') { o[j++] = '*'; o[j++] = ' '; continue; }
    o[j++] = (unsigned char)*s < 32 ? '?' : *s;
  }
  o[j] = 0;
  return o;
}

/* ---- steps ---- */

/* Poison mode checks what a step reads before it runs (snrt_reads): every
 * float input in the device arena (an offload's source included), each once,
 * over the tensor's own bytes (not the alignment tail, which nothing writes). */
static void emit_reads(Emit *e, int s) {
  const Graph *g = e->g;
  const Plan *pl = e->pl;
  const Step *st = &pl->route->s[s];
  if (st->kind == SK_PREFETCH) {   /* reads the host arena */
    if (s < pl->route->train_steps) fprintf(e->f, "  snrt_reads(c, %d, 0, NULL);\n", s);   /* --profile */
    return;
  }
  char buf[1024];
  size_t len = 0;
  int n = 0;
  for (int k = 0; k < st->nin; k++) {
    int i = st->in[k];
    if (i < 0 || i >= pl->ninst) continue;
    const Instance *in = &pl->inst[i];
    int dt = in->tensor >= 0 ? g->t[in->tensor].dtype : 0;
    if (in->offset < 0 || (dt != DT_FLOAT && dt != DT_BFLOAT16 && dt != DT_FLOAT16)) continue;
    bool seen = false;
    for (int j = 0; j < k; j++) seen |= st->in[j] == i;
    int64_t bytes = tensor_bytes(&g->t[in->tensor]);
    if (seen || bytes <= 0) continue;
    if (len > sizeof buf - 64) {   /* a step with very many inputs: one call per chunk */
      fprintf(e->f, "  snrt_reads(c, %d, %d, (const int64_t[]){%s});\n", s, n, buf);
      len = 0, n = 0;
    }
    len += (size_t)snprintf(buf + len, sizeof buf - len, "%s0x%llx, %lld", n ? ", " : "",
                            (unsigned long long)in->offset, (long long)bytes);
    n++;
  }
  if (n) fprintf(e->f, "  snrt_reads(c, %d, %d, (const int64_t[]){%s});\n", s, n, buf);
  else if (s < pl->route->train_steps) fprintf(e->f, "  snrt_reads(c, %d, 0, NULL);\n", s);   /* --profile */
}

static void emit_steps(Emit *e, int from, int to, const char *fname, int **deaths, int *ndeaths) {
  const Graph *g = e->g;
  const Plan *pl = e->pl;
  int part = 0;
  int comm = 0;   /* --dist: all-reduces started and not yet waited for */
  for (int s = from; s < to; s++) {
    if ((s - from) % STEPS_PER_FUNCTION == 0) {
      if (s > from) fprintf(e->f, "}\n\n");
      fprintf(e->f, "static void %s_%d(snrt_ctx *c) {\n  char *const A = snrt_arena(c);\n", fname, part++);
    }
    const Step *st = &pl->route->s[s];
    e->st = st;
    e->step = s;
    emit_reads(e, s);
    if (st->node >= 0) {
      const Node *n = &g->n[st->node];
      fprintf(e->f, "  /* %5d %-9s %-18s %s  live %s */\n", s, step_kind_name(st->kind), op_name(n->op),
              emit_comment_safe(n->name), fmt_bytes(pl->live_bytes ? pl->live_bytes[s] : 0));
      if (!emit_convert_step(e, n)) op_info[n->op].emit(e, g, n);
      /* MPI progresses a nonblocking all-reduce only inside MPI calls. */
      if (st->kind == SK_ALLREDUCE || st->kind == SK_REDUCE_SCATTER || st->kind == SK_ALLGATHER) comm++;
      else if (st->kind == SK_COMM_WAIT) comm--;
      else if (comm > 0) fprintf(e->f, "  snrt_comm_progress(c);\n");
    } else {
      /* A copy on the copy engine, recording its event when done. */
      const Instance *src = &pl->inst[st->in[0]], *dst = &pl->inst[st->out[0]];
      fprintf(e->f, "  /* %5d %-9s %-18s %s  live %s */\n", s, step_kind_name(st->kind),
              st->kind == SK_OFFLOAD ? "to host" : "to device", emit_comment_safe(g->t[st->tensor].name),
              fmt_bytes(pl->live_bytes ? pl->live_bytes[s] : 0));
      if (st->kind == SK_OFFLOAD)
        fprintf(e->f, "  snrt_offload(c, 0x%llx, 0x%llx, %lld, %d);\n", (unsigned long long)dst->host_offset,
                (unsigned long long)src->offset, (long long)src->bytes, st->event);
      else
        fprintf(e->f, "  snrt_prefetch(c, 0x%llx, 0x%llx, %lld, %d);\n", (unsigned long long)dst->offset,
                (unsigned long long)src->host_offset, (long long)src->bytes, st->event);
    }
    for (int w = 0; w < st->nwait; w++) fprintf(e->f, "  snrt_wait(c, %d);\n", st->wait[w]);
    for (int d = 0; d < ndeaths[s]; d++) {
      const Instance *in = &pl->inst[deaths[s][d]];
      fprintf(e->f, "  snrt_dead(c, 0x%llx, %lld);\n", (unsigned long long)in->offset, (long long)in->bytes);
    }
  }
  if (to > from) fprintf(e->f, "}\n\n");
  fprintf(e->f, "static void %s(snrt_ctx *c) {\n", fname);
  for (int p = 0; p < part; p++) fprintf(e->f, "  %s_%d(c);\n", fname, p);
  fprintf(e->f, "}\n\n");
}

/* Which instances die (are poisoned under --poison) after each step. The
 * loss, labels, input and logits are read by the runtime after the step. */
static void death_lists(const Graph *g, const Plan *pl, int ***deaths, int **ndeaths) {
  int ns = pl->route->ns;
  int *cnt = xcalloc((size_t)ns + 1, sizeof(int));
  int **lists = xcalloc((size_t)ns + 1, sizeof(int *));
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < pl->ninst; i++) {
      const Instance *in = &pl->inst[i];
      if (in->persistent || in->offset < 0 || in->last < 0 || in->last >= ns) continue;
      if (in->tensor >= 0) {
        TensorKind k = g->t[in->tensor].kind;
        if (k == TK_LOSS || k == TK_LABEL || k == TK_INPUT || graph_is_eval_output(g, in->tensor)) continue;
      }
      if (pass == 0) cnt[in->last]++;
      else lists[in->last][cnt[in->last]++] = i;
    }
    if (pass == 0)
      for (int s = 0; s < ns; s++) {
        lists[s] = xmalloc(sizeof(int) * (size_t)(cnt[s] + 1));
        cnt[s] = 0;
      }
  }
  *deaths = lists;
  *ndeaths = cnt;
}

/* ---- build.ninja ---- */

/* --dist mpi: what configure.py found (build/snrt_mpi.ninja: the MPI object
 * and link flags), copied so that DIR/build.ninja stands alone. */
static bool mpi_lines(FILE *f, const char *root, const char *dir, const char *key) {
  char *frag = xasprintf("%s/%s/snrt_mpi.ninja", root, build_dir);
  FILE *in = fopen(frag, "r");
  bool have = false;
  if (in) {
    char line[8192];
    while (fgets(line, sizeof line, in))
      if (strncmp(line, key, strlen(key)) == 0) {
        fputs(line, f);
        have = true;
      }
    fclose(in);
  }
  if (!have)
    fprintf(stderr, "snc: warning: %s has no '%s' line: configure.py found no MPI%s here "
                    "(install openmpi-bin and libopenmpi-dev, or ./configure.py --install-deps), "
                    "so `ninja -C %s` will fail\n", frag, key, strcmp(key, "mpilibs = ") ?
                    " or no NCCL" : "", dir);
  free(frag);
  return have;
}

static void write_ninja(const char *dir, const char *root, const char *target, bool dist) {
  FILE *f = create(dir, "build.ninja", "w");
  fprintf(f, "# Written by snc compile; builds ./train. Re-run snc compile to change it.\n");
  fprintf(f, "snc_root = %s\n", root);
  fprintf(f, "cflags = -std=c11 -O1 -g -I$snc_root/runtime\n");
  fprintf(f, "rule cc\n  command = gcc $cflags -c $in -o $out\n  description = CC $out\n");
  if (strcmp(target, "cuda") == 0) {
    /* What configure.py found (nvcc, CUDNN_HOME/CUBLAS_HOME, rpaths), copied
     * from build/snrt_cuda.ninja so that this file stands alone. */
    char *frag = xasprintf("%s/%s/snrt_cuda.ninja", root, build_dir);
    FILE *in = fopen(frag, "r");
    bool have = false;
    if (in) {
      char line[8192];
      while (fgets(line, sizeof line, in))
        if (strncmp(line, "nvcc = ", 7) == 0 || strncmp(line, "cudalibs = ", 11) == 0) {
          fputs(line, f);
          have = true;
        }
      fclose(in);
    }
    if (have && dist && mpi_lines(f, root, dir, "ncclmpilibs = ")) {
      /* The MPI layer without its host exchanges, and NCCL's (nccl.cu). */
      fprintf(f, "rule link\n  command = $nvcc -o $out $in $cudalibs $ncclmpilibs\n"
                 "  description = LINK $out\n");
      fprintf(f, "build train.o: cc train.c\nbuild train: link train.o $snc_root/%s/snrt_mpi_cuda.o "
                 "$snc_root/%s/snrt_nccl.o $snc_root/%s/libsnrt_cuda.a\n", build_dir, build_dir,
              build_dir);
      fprintf(f, "default train\n");
      finish(f, dir, "build.ninja");
      return;
    } else if (have && dist) {
      fprintf(f, "rule link\n  command = echo 'snc: error: configure.py found no MPI or no NCCL "
                 "for the CUDA target in %s/%s' >&2; false\n  description = LINK $out\n", root,
              build_dir);
    } else if (have) {
      fprintf(f, "rule link\n  command = $nvcc -o $out $in $cudalibs\n  description = LINK $out\n");
    } else {
      fprintf(stderr, "snc: warning: %s not found: configure.py built no CUDA runtime here "
                      "(nvcc or cuDNN missing), so `ninja -C %s` will fail\n", frag, dir);
      fprintf(f, "rule link\n  command = echo 'snc: error: no CUDA runtime was built in %s/%s "
                 "(configure.py found no nvcc or cuDNN)' >&2; false\n  description = LINK $out\n",
              root, build_dir);
    }
    free(frag);
    fprintf(f, "build train.o: cc train.c\nbuild train: link train.o%s%s%s\n",
            have ? " $snc_root/" : "", have ? build_dir : "", have ? "/libsnrt_cuda.a" : "");
  } else {
    if (dist && mpi_lines(f, root, dir, "mpilibs = ")) {
      /* The MPI layer first: it defines what libsnrt_cpu.a's single-process
       * stand-in (dist_none.o) would otherwise bring. */
      fprintf(f, "rule link\n  command = gcc -o $out $in -fopenmp -lopenblas -lprotobuf-c -lz -lm "
                 "-lpthread $mpilibs\n  description = LINK $out\n");
      fprintf(f, "build train.o: cc train.c\nbuild train: link train.o $snc_root/%s/snrt_mpi.o "
                 "$snc_root/%s/libsnrt_cpu.a\n", build_dir, build_dir);
    } else if (dist) {
      fprintf(f, "rule link\n  command = echo 'snc: error: configure.py found no MPI in %s/%s "
                 "(apt-get install openmpi-bin libopenmpi-dev, then ./configure.py)' >&2; false\n"
                 "  description = LINK $out\n", root, build_dir);
      fprintf(f, "build train.o: cc train.c\nbuild train: link train.o\n");
    } else {
      fprintf(f, "rule link\n  command = gcc -o $out $in -fopenmp -lopenblas -lprotobuf-c -lz -lm -lpthread\n"
                 "  description = LINK $out\n");
      fprintf(f, "build train.o: cc train.c\nbuild train: link train.o $snc_root/%s/libsnrt_cpu.a\n",
              build_dir);
    }
  }
  fprintf(f, "default train\n");
  finish(f, dir, "build.ninja");
}

/* ---- the program ---- */

/* The checkpoint fingerprint: the model file's hash (copy_file), then what
 * else a checkpoint must match. --dist: checkpoints hold the global batch
 * (ranks x batch) and are checked against it at run time, so that any rank
 * count may resume them. */
static uint64_t fingerprint(const Graph *g, const EmitOpts *o, uint64_t fp) {
  if (!o->train->dist) fp = hash_bytes(fp, &g->batch, sizeof g->batch);
  else fp = hash_bytes(fp, "dist", 4);
  fp = hash_bytes(fp, &o->train->loss, sizeof o->train->loss);
  fp = hash_bytes(fp, &o->train->optim, sizeof o->train->optim);
  return fp;
}

/* The tensor table: input, labels, loss, logits, then each parameter with
 * its gradient and optimizer state, then state. */
static void table_build(const Graph *g, const Plan *pl, Table *tb) {
  int *map = tb->map = xmalloc(sizeof(int) * (size_t)g->nt);
  for (int t = 0; t < g->nt; t++) map[t] = -1;
  table_add(tb, map, g->input);
  table_add(tb, map, g->label);
  table_add(tb, map, g->loss);
  table_add(tb, map, g->eval_output);
  for (int k = 0; k < g->neval_outs; k++) table_add(tb, map, g->eval_outs[k]);
  int *opt_of = tb->opt_of = xmalloc(sizeof(int) * 2 * (size_t)g->nt);
  for (int t = 0; t < 2 * g->nt; t++) opt_of[t] = -1;
  for (int i = 0; i < g->nn && !g->zero_ranks; i++) {   /* --zero: shards, not per-parameter state */
    const Node *n = &g->n[i];
    if (n->op != OP_SGD && n->op != OP_ADAM) continue;
    for (int k = 2; k < n->nin && k < 4; k++) opt_of[2 * n->in[0] + (k - 2)] = n->in[k];
  }
  for (int t = 0; t < g->nt; t++)
    if (g->t[t].kind == TK_PARAM && pl->tensor_inst[t] >= 0) {
      table_add(tb, map, t);
      if (g->t[t].grad >= 0 && pl->tensor_inst[g->t[t].grad] >= 0) table_add(tb, map, g->t[t].grad);
      for (int k = 0; k < 2; k++) table_add(tb, map, opt_of[2 * t + k]);
    }
  for (int t = 0; t < g->nt; t++)
    if ((g->t[t].kind == TK_STATE || g->t[t].kind == TK_CONSTVAL ||
         (g->zero_ranks && g->t[t].kind == TK_OPT)) && pl->tensor_inst[t] >= 0)
      table_add(tb, map, t);
}

/* params.bin: initial values of parameters and state with initializers;
 * each entry's offset there in tb->file_off. */
static void write_params(const Graph *g, const char *dir, Table *tb) {
  FILE *pf = create(dir, "params.bin", "wb");
  int64_t *file_off = tb->file_off = xmalloc(sizeof(int64_t) * (size_t)tb->n);
  int64_t pos = 0;
  for (int i = 0; i < tb->n; i++) {
    const Tensor *t = &g->t[tb->t[i]];
    file_off[i] = -1;
    if ((t->kind == TK_PARAM || t->kind == TK_STATE || t->kind == TK_CONSTVAL) && t->data &&
        (t->has_init || t->kind == TK_CONSTVAL)) {
      int64_t bytes = tensor_bytes(t);
      if (fwrite(t->data, 1, (size_t)bytes, pf) != (size_t)bytes)
        fatal(EXIT_BADINPUT, "error writing '%s/params.bin'", dir);
      file_off[i] = pos;
      pos += bytes;
    }
  }
  finish(pf, dir, "params.bin");
}

/* train.c's step functions, and the parameter structs they declare, each
 * into a memory buffer (the structs are printed above the steps). */
typedef struct Text {
  char *s;
  size_t len;
} Text;

static void steps_text(const Graph *g, const Plan *pl, int *map, Text *body, Text *decl) {
  Emit e = {.g = g, .pl = pl, .table = map, .ws_per_step = pl->ws_cap > 0};
  e.f = open_memstream(&body->s, &body->len);
  e.decl = open_memstream(&decl->s, &decl->len);
  if (!e.f || !e.decl) fatal(EXIT_BADINPUT, "out of memory");
  int **deaths, *ndeaths;
  death_lists(g, pl, &deaths, &ndeaths);
  emit_steps(&e, 0, pl->route->train_steps, "train_step", deaths, ndeaths);
  emit_steps(&e, pl->route->train_steps, pl->route->ns, "eval_step", deaths, ndeaths);
  fclose(e.f);
  fclose(e.decl);
  for (int i = 0; i < e.nowned; i++) free(e.owned[i]);
  free(e.owned);
}

/* train.c's opening comment, includes and pointer macros. */
static void emit_preamble(FILE *f, const Graph *g, const Plan *pl, const EmitOpts *o, const char *base) {
  fprintf(f, "/* train.c — the training program of %s, generated by snc. Do not edit.\n",
          emit_comment_safe(base));
  fprintf(f, " *\n * batch %d, policy %s, target %s, device arena %lld bytes (%s), host arena %lld bytes%s%s.\n",
          g->batch, policy_name(pl->opts.policy), o->target, (long long)pl->arena_bytes,
          fmt_bytes(pl->arena_bytes), (long long)pl->host_bytes,
          g->precision != PREC_FP32 ? ", precision " : "",
          g->precision != PREC_FP32 ? precision_name(g->precision) : "");
  fprintf(f, " * Each step: index, kind, op, node, bytes live on the device at that step.\n"
             " * F(x)/I(x): float/int32 pointer at byte offset x of the device arena. */\n");
  fprintf(f, "#include <math.h>\n#include <stddef.h>\n#include \"snrt.h\"\n\n");
  fprintf(f, "#define F(off) ((float *)(A + (off)))\n#define I(off) ((int32_t *)(A + (off)))\n");
  if (g->precision == PREC_BF16)
    fprintf(f, "/* --precision bf16: B(x) is a bfloat16 tensor; a step reading or writing one works\n"
               " * on float32 copies s0, s1... in its workspace, chunk by chunk where its kernel\n"
               " * allows (snrt_bf16_load/round/store)%s. */\n"
               "#define B(off) ((uint16_t *)(A + (off)))\n",
            g->tensor_cores ? ";\n * convolutions and GEMMs read bf16 on tensor cores (snrt_conv_fwd16, snrt_matmul16...),\n"
                              " * float32 operands through 16-bit copies h0, h1..." : "");
  if (g->precision == PREC_FP16)
    fprintf(f, "/* --precision fp16: H(x) is a float16 tensor; a step reading or writing one works\n"
               " * on float32 copies s0, s1... in its workspace, chunk by chunk where its kernel\n"
               " * allows (snrt_f16_load/round/store)%s. The loss\n"
               " * gradient is multiplied by the loss scale; grad_unscale divides the parameter\n"
               " * gradients by it and skips the updates on overflow. */\n"
               "#define H(off) ((uint16_t *)(A + (off)))\n",
            g->tensor_cores ? ";\n * convolutions and GEMMs read float16 on tensor cores (snrt_conv_fwd16, snrt_matmul16...),\n"
                              " * float32 operands through 16-bit copies h0, h1..." : "");
  fprintf(f, "\n");
}

/* The runtime's tensor table (snrt_tensor), and --zero 1's flat offsets. */
static void emit_tensor_table(FILE *f, const Graph *g, const Plan *pl, const Table *tb) {
  const int *map = tb->map, *opt_of = tb->opt_of;
  const int64_t *file_off = tb->file_off;
  fprintf(f, "static const snrt_tensor tensors[] = {\n");
  for (int i = 0; i < tb->n; i++) {
    const Tensor *t = &g->t[tb->t[i]];
    int inst = pl->tensor_inst[tb->t[i]];
    const Instance *in = inst >= 0 ? &pl->inst[inst] : NULL;
    int grad = t->kind == TK_PARAM && t->grad >= 0 ? map[t->grad] : -1;
    /* opt_of is -1 where the optimizer keeps no such state: test before map[]. */
    int s0 = t->kind == TK_PARAM ? opt_of[2 * tb->t[i]] : -1;
    int s1 = t->kind == TK_PARAM ? opt_of[2 * tb->t[i] + 1] : -1;
    int o0 = s0 >= 0 ? map[s0] : -1, o1 = s1 >= 0 ? map[s1] : -1;
    int64_t dims[MAX_RANK];
    for (int d = 0; d < t->rank; d++) dims[d] = t->dims[d];
    fprintf(f, "  {");
    c_string(f, t->name);
    int init = file_off[i] >= 0 ? SNRT_INIT_FILE : t->init;
    fprintf(f, ", %s, %s, %d, {", table_kind(g, tb->t[i]), t->dtype == DT_INT32 ? "SNRT_I32" : "SNRT_F32",
            t->rank);
    for (int d = 0; d < t->rank; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)dims[d]);
    fprintf(f, "}, %lld, %lld, %lld, %s, %lld, %lld, %d, {%d, %d}},\n", (long long)tensor_bytes(t),
            (long long)(in ? in->offset : -1), (long long)(in ? in->host_offset : -1), init_name(init),
            (long long)t->fan_in, (long long)file_off[i], grad, o0, o1);
  }
  fprintf(f, "};\n\n");
  if (g->zero_ranks) {
    /* --zero 1: where each parameter starts in the flat space (-1: none) */
    fprintf(f, "static const int64_t zero_flat[] = {");
    for (int i = 0; i < tb->n; i++) {
      const Tensor *t = &g->t[tb->t[i]];
      fprintf(f, "%s%lld", i ? ", " : "", (long long)(t->kind == TK_PARAM && t->grad >= 0 ? t->zero_flat : -1));
    }
    fprintf(f, "};\n\n");
  }
}

/* The model descriptor, snrt_the_model: where the runtime finds the input,
 * labels, loss, logits and tables, and what the program was compiled for. */
static void emit_model(FILE *f, const Graph *g, const Plan *pl, const EmitOpts *o, const Table *tb,
                       uint64_t fp, const char *base) {
  const int *map = tb->map;
  const Tensor *out = &g->t[g->output];
  fprintf(f, "const snrt_model snrt_the_model = {\n");
  fprintf(f, "  .name = ");
  c_string(f, base);
  fprintf(f, ",\n  .fingerprint = 0x%016llxull,\n  .batch = %d,\n", (unsigned long long)fp, g->batch);
  fprintf(f, "  .arena_bytes = %lld,\n  .host_bytes = %lld,\n", (long long)pl->arena_bytes,
          (long long)pl->host_bytes);
  fprintf(f, "  .ntensors = %d,\n  .tensors = tensors,\n", tb->n);
  fprintf(f, "  .input = %d, .label = %d, .loss = %d, .logits = %d,\n", map[g->input], map[g->label],
          map[g->loss], map[g->eval_output]);
  if (g->neval_outs) {   /* several graph outputs: --predict writes each */
    fprintf(f, "  .noutputs = %d,\n  .outputs = (const int[]){%d", g->neval_outs + 1, map[g->eval_output]);
    for (int k = 0; k < g->neval_outs; k++) fprintf(f, ", %d", map[g->eval_outs[k]]);
    fprintf(f, "},\n");
  }
  bool seq = o->train->loss == LOSS_SOFTMAX_CE && out->rank == 3;
  fprintf(f, "  .classes = %lld,\n", (long long)(seq ? out->dims[2] : tensor_numel(out) / out->dims[0]));
  if (g->eval_rows) fprintf(f, "  .lm_rows = 1,\n");
  fprintf(f, "  .loss_kind = %s,\n", o->train->loss == LOSS_MSE ? "SNRT_LOSS_MSE" : "SNRT_LOSS_SOFTMAX_CE");
  fprintf(f, "  .opt_kind = %s,\n", o->train->optim == OPTIM_SGD ? "SNRT_OPT_SGD"
                                    : o->train->optim == OPTIM_ADAM ? "SNRT_OPT_ADAM" : "SNRT_OPT_ADAMW");
  fprintf(f, "  .lr = %s,\n  .policy = \"%s\",\n", emit_float(o->train->lr), policy_name(pl->opts.policy));
  fprintf(f, "  .train_step = train_step,\n  .eval_step = eval_step,\n");
  if (g->precision != PREC_FP32) {
    int64_t cvb = 0;   /* the largest step's float32 copies (in its workspace) */
    for (int i = 0; i < pl->ninst; i++)
      if (pl->inst[i].convert_bytes > cvb) cvb = pl->inst[i].convert_bytes;
    fprintf(f, "  .precision = \"%s\",\n  .convert_bytes = %lld,\n", precision_name(g->precision),
            (long long)cvb);
  }
  emit_step_table_fields(f, pl);
  /* Token models: the smallest table the token ids index, and T labels a sample. */
  int64_t vocab = 0;
  for (int i = 0; i < g->nfwd; i++)
    if (g->n[i].op == OP_GATHER && graph_token_source(g, g->n[i].in[1]) == g->input) {
      int64_t rows = ((const snrt_gather_t *)g->n[i].p)->rows;
      if (!vocab || rows < vocab) vocab = rows;
    }
  if (vocab) fprintf(f, "  .vocab = %lld,\n", (long long)vocab);
  if (o->train->dist) {
    int nb = 0;
    for (int i = 0; i < g->nn; i++) nb += g->n[i].op == OP_ALLREDUCE || g->n[i].op == OP_REDUCE_SCATTER;
    fprintf(f, "  .dist = 1,\n  .buckets = %d,\n", nb);
    if (g->zero_ranks)
      fprintf(f, "  .zero = %d,\n  .zero_shard = %lld,\n  .zero_flat = zero_flat,\n", g->zero_ranks,
              (long long)g->zero_shard);
  }
  if (seq) fprintf(f, "  .positions = %lld,\n", (long long)out->dims[1]);
  if (strcmp(o->target, "cuda") == 0) {
    const DeviceProfile *dev = device_find(pl->opts.device);
    fprintf(f, "  .reserve_bytes = %lld,\n  .device = \"%s\",\n", (long long)dev->reserve_bytes,
            pl->opts.device);
  }
  fprintf(f, "};\n");
}

void emit_program(const Graph *g, const Plan *pl, const EmitOpts *o, const char *dir) {
  make_dir(dir);
  char *root = snc_root();
  uint64_t fp = 0;
  copy_file(o->model_path, dir, "model.onnx", &fp);
  fp = fingerprint(g, o, fp);
  Table tb = {0};
  table_build(g, pl, &tb);
  write_params(g, dir, &tb);

  Text body = {0}, decl = {0};
  steps_text(g, pl, tb.map, &body, &decl);
  FILE *f = create(dir, "train.c", "w");
  const char *base = strrchr(o->model_path, '/') ? strrchr(o->model_path, '/') + 1 : o->model_path;
  emit_preamble(f, g, pl, o, base);
  fwrite(decl.s, 1, decl.len, f);
  fprintf(f, "\n");
  fwrite(body.s, 1, body.len, f);
  free(body.s);
  free(decl.s);
  emit_tensor_table(f, g, pl, &tb);
  emit_step_table(f, g, pl);
  emit_model(f, g, pl, o, &tb, fp, base);
  finish(f, dir, "train.c");

  f = create(dir, "plan.txt", "w");
  plan_print_text(g, pl, f);
  finish(f, dir, "plan.txt");
  f = create(dir, "plan.json", "w");
  plan_print_json(g, pl, f);
  finish(f, dir, "plan.json");
  write_ninja(dir, root, o->target, o->train->dist);
  free(root);
}
