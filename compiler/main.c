/* main.c — the snc driver: parses the command line and calls the passes in
 * order. The whole pipeline is visible in pipeline() below (compiler/README.md
 * has the map of the stages; tests/test_layout.py checks it against this
 * function). */
#include "emit/emit.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char usage_text[] =
    "usage:\n"
    "  snc inspect MODEL.onnx [--batch N] [--input NAME] [--json] [--dump import|eval]\n"
    "  snc plan    MODEL.onnx --batch N [--policy P] [--budget SIZE] [--host-budget SIZE]\n"
    "                         [--device PROFILE] [--target cpu|cuda] [--precision P [--convert-chunk N]]\n"
    "                         [--json FILE]\n"
    "                         [--html FILE] [--dump PASS] [--input NAME] [--segment SIZE]\n"
    "                         [--dist mpi [--bucket SIZE] [--zero 1 --ranks N]] [--no-fuse]\n"
    "                         [--no-chunk-loss]\n"
    "  snc plan    --diff A.json B.json\n"
    "  snc compile MODEL.onnx -o DIR --batch N [--target cpu|cuda] [--policy P]\n"
    "                         [--budget SIZE] [--host-budget SIZE] [--segment SIZE]\n"
    "                         [--device PROFILE] [--precision P [--convert-chunk N]]\n"
    "                         [--loss softmax-ce|mse]\n"
    "                         [--optimizer sgd|adam|adamw] [--lr X] [--momentum X]\n"
    "                         [--weight-decay X] [--input NAME] [--all-outputs]\n"
    "                         [--dist mpi [--bucket SIZE] [--zero 1 --ranks N]] [--no-fuse]\n"
    "                         [--no-chunk-loss]\n"
    "  snc max-batch MODEL.onnx --budget SIZE [--host-budget SIZE] [--policy P]\n"
    "                         [--device PROFILE] [--precision P] [--no-fuse] [--no-chunk-loss]\n"
    "\n"
    "policies: none liveness recompute offload superneurons auto (default); precisions: fp32 (default) bf16 fp16\n"
    "--device: a profile of schemas/devices.json or a file from snc-calibrate; default cpu for\n"
    "          compile --target cpu, h200 otherwise (plan, max-batch, compile --target cuda)\n"
    "passes for --dump: import, eval (inspect); fuse route liveness recompute offload offsets\n"
    "                   schedule auto (plan)\n"
    "--no-fuse (--fuse none): keep every elementwise op its own step (default: --fuse elementwise,\n"
    "               chains of elementwise ops of one shape become one fused step)\n"
    "--no-chunk-loss: keep the LM head's whole logits in the training step (default: a\n"
    "               sequence loss over a MatMul head runs in chunks of rows, docs/planning.md)\n"
    "--all-outputs: keep the nodes of every graph output, not only of the first (which the\n"
    "               loss trains); the program's --predict writes each (docs/predict.md)\n";

static noreturn void usage(const char *fmt, const char *arg) {
  fprintf(stderr, "snc: error: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n%s", usage_text);
  exit(EXIT_USAGE);
}

typedef struct Args {
  const char *cmd, *model, *out_dir, *input, *json, *html, *dump, *target, *device;
  bool no_fuse;             // --no-fuse / --fuse none: front/fuse.c is skipped
  const char *diff_a, *diff_b;
  int batch;
  bool json_flag;
  PlanOpts plan;
  TrainOpts train;
} Args;

static const char *need_value(int argc, char **argv, int *i) {
  if (*i + 1 >= argc) usage("%s needs a value", argv[*i]);
  return argv[++*i];
}

static float parse_float(const char *flag, const char *s) {
  char *end;
  float v = strtof(s, &end);
  if (end == s || *end) usage("bad number for %s", flag);
  return v;
}

/* The command line into Args, then the checks between flags.
 * Long: one branch per flag of every command, as the usage text lists them;
 * split, the list of flags would be in several places. */
static void parse_args(Args *a, int argc, char **argv) {
  *a = (Args){.target = "cpu", .device = NULL};
  a->plan.policy = POL_AUTO;
  a->train = (TrainOpts){.loss = LOSS_SOFTMAX_CE, .optim = OPTIM_SGD, .lr = 0.01f,
                         .momentum = 0.9f, .weight_decay = 0.0f, .beta1 = 0.9f,
                         .beta2 = 0.999f, .eps = 1e-8f, .bucket_bytes = 1 << 20,
                         .convert_chunk = -1};
  if (argc < 2) usage("%s", "no command given");
  a->cmd = argv[1];
  if (strcmp(a->cmd, "-h") == 0 || strcmp(a->cmd, "--help") == 0) {
    fputs(usage_text, stdout);
    exit(0);
  }
  if (strcmp(a->cmd, "inspect") && strcmp(a->cmd, "plan") && strcmp(a->cmd, "compile") &&
      strcmp(a->cmd, "max-batch"))
    usage("unknown command '%s'", a->cmd);
  bool wd_set = false, zero = false;
  int ranks = 0;
  for (int i = 2; i < argc; i++) {
    const char *s = argv[i];
    if (strcmp(s, "--batch") == 0) {
      const char *v = need_value(argc, argv, &i);
      char *end;
      long b = strtol(v, &end, 10);
      if (*end || b < 1 || b > 1000000) usage("--batch must be an integer from 1 to 1000000, not '%s'", v);
      a->batch = (int)b;
    } else if (strcmp(s, "--input") == 0) a->input = need_value(argc, argv, &i);
    else if (strcmp(s, "--all-outputs") == 0) import_all_outputs = true;
    else if (strcmp(s, "--no-fuse") == 0) a->no_fuse = true;
    else if (strcmp(s, "--no-chunk-loss") == 0) a->train.no_chunk_loss = true;
    else if (strcmp(s, "--fuse") == 0) {
      const char *v = need_value(argc, argv, &i);
      if (strcmp(v, "none") == 0) a->no_fuse = true;
      else if (strcmp(v, "elementwise") == 0) a->no_fuse = false;
      else usage("--fuse takes 'elementwise' (the default) or 'none', not '%s'", v);
    }
    else if (strcmp(s, "--json") == 0) {
      if (strcmp(a->cmd, "inspect") == 0) a->json_flag = true;
      else a->json = need_value(argc, argv, &i);
    } else if (strcmp(s, "--html") == 0) a->html = need_value(argc, argv, &i);
    else if (strcmp(s, "--dump") == 0) a->dump = need_value(argc, argv, &i);
    else if (strcmp(s, "-o") == 0) a->out_dir = need_value(argc, argv, &i);
    else if (strcmp(s, "--target") == 0) {
      a->target = need_value(argc, argv, &i);
      if (strcmp(a->target, "cpu") && strcmp(a->target, "cuda"))
        usage("--target must be cpu or cuda, not '%s'", a->target);
    } else if (strcmp(s, "--policy") == 0) {
      const char *v = need_value(argc, argv, &i);
      int p = policy_parse(v);
      if (p < 0) usage("unknown policy '%s'", v);
      a->plan.policy = (Policy)p;
    } else if (strcmp(s, "--budget") == 0) {
      const char *v = need_value(argc, argv, &i);
      a->plan.budget = parse_size(v);
      if (a->plan.budget <= 0) usage("bad size for --budget: '%s' (e.g. 12GiB, 500MB, 1048576)", v);
    } else if (strcmp(s, "--host-budget") == 0) {
      const char *v = need_value(argc, argv, &i);
      a->plan.host_budget = parse_size(v);
      if (a->plan.host_budget <= 0)
        usage("bad size for --host-budget: '%s' (e.g. 64GiB, 500MB, 1048576)", v);
    } else if (strcmp(s, "--segment") == 0) {
      const char *v = need_value(argc, argv, &i);
      a->plan.segment = parse_size(v);
      if (a->plan.segment <= 0) usage("bad size for --segment: '%s' (e.g. 64MiB)", v);
    } else if (strcmp(s, "--device") == 0) a->device = need_value(argc, argv, &i);
    else if (strcmp(s, "--precision") == 0) {
      const char *v = need_value(argc, argv, &i);
      int p = precision_parse(v);
      if (p < 0) usage("--precision must be fp32, bf16 or fp16, not '%s'", v);
      a->train.precision = (Precision)p;
    } else if (strcmp(s, "--convert-chunk") == 0) {
      const char *v = need_value(argc, argv, &i);
      char *end;
      long long c = strtoll(v, &end, 10);
      if (end == v || *end || c < 0) usage("bad element count for --convert-chunk: '%s' (0: whole tensors)", v);
      a->train.convert_chunk = c;
    }
    else if (strcmp(s, "--loss") == 0) {
      const char *v = need_value(argc, argv, &i);
      if (strcmp(v, "softmax-ce") == 0) a->train.loss = LOSS_SOFTMAX_CE;
      else if (strcmp(v, "mse") == 0) a->train.loss = LOSS_MSE;
      else usage("--loss must be softmax-ce or mse, not '%s'", v);
    } else if (strcmp(s, "--optimizer") == 0) {
      const char *v = need_value(argc, argv, &i);
      if (strcmp(v, "sgd") == 0) a->train.optim = OPTIM_SGD;
      else if (strcmp(v, "adam") == 0) a->train.optim = OPTIM_ADAM;
      else if (strcmp(v, "adamw") == 0) a->train.optim = OPTIM_ADAMW;
      else usage("--optimizer must be sgd, adam or adamw, not '%s'", v);
    } else if (strcmp(s, "--lr") == 0) a->train.lr = parse_float(s, need_value(argc, argv, &i));
    else if (strcmp(s, "--momentum") == 0) a->train.momentum = parse_float(s, need_value(argc, argv, &i));
    else if (strcmp(s, "--weight-decay") == 0) {
      a->train.weight_decay = parse_float(s, need_value(argc, argv, &i));
      wd_set = true;
    } else if (strcmp(s, "--dist") == 0) {
      const char *v = need_value(argc, argv, &i);
      if (strcmp(v, "mpi")) usage("--dist takes 'mpi' (data parallel over MPI ranks), not '%s'", v);
      a->train.dist = true;
    } else if (strcmp(s, "--zero") == 0) {
      const char *v = need_value(argc, argv, &i);
      if (strcmp(v, "1")) usage("--zero takes 1 (ZeRO stage 1: optimizer state sharded), not '%s'", v);
      zero = true;
    } else if (strcmp(s, "--ranks") == 0) {
      const char *v = need_value(argc, argv, &i);
      char *end;
      long r = strtol(v, &end, 10);
      if (*end || r < 1 || r > 65536) usage("--ranks must be an integer from 1 to 65536, not '%s'", v);
      ranks = (int)r;
    } else if (strcmp(s, "--bucket") == 0) {
      const char *v = need_value(argc, argv, &i);
      a->train.bucket_bytes = parse_size(v);
      if (a->train.bucket_bytes <= 0) usage("bad size for --bucket: '%s' (e.g. 1MiB, 25MB, 4096)", v);
    } else if (strcmp(s, "--diff") == 0) {
      if (i + 2 >= argc) usage("%s", "--diff needs two plan.json files: --diff A.json B.json");
      a->diff_a = need_value(argc, argv, &i);
      a->diff_b = need_value(argc, argv, &i);
    } else if (s[0] == '-') usage("unknown flag '%s'", s);
    else if (!a->model) a->model = s;
    else usage("unexpected argument '%s'", s);
  }
  /* AdamW's default decay, as torch.optim.AdamW. */
  if (a->train.optim == OPTIM_ADAMW && !wd_set) a->train.weight_decay = 0.01f;
  a->plan.device = a->device ? a->device : (strcmp(a->target, "cpu") == 0 && strcmp(a->cmd, "compile") == 0 ? "cpu" : "h200");
  if (a->diff_a) return;
  if (!a->model) usage("%s needs a model file", a->cmd);
  if (strcmp(a->cmd, "compile") == 0 && !a->out_dir) usage("%s", "compile needs -o DIR");
  if ((strcmp(a->cmd, "compile") == 0 || strcmp(a->cmd, "plan") == 0) && !a->batch)
    usage("%s needs --batch N", a->cmd);
  if (strcmp(a->cmd, "max-batch") == 0 && !a->plan.budget) usage("%s", "max-batch needs --budget SIZE");
  if (zero && !a->train.dist) usage("%s", "--zero 1 needs --dist mpi");
  if (zero && ranks < 2) usage("%s", "--zero 1 needs --ranks N (N >= 2): the optimizer state is "
                               "split over N ranks at compile time");
  if (ranks && !zero) usage("%s", "--ranks N is for --zero 1 (without it the plan is the same at "
                            "any rank count)");
  if (zero && a->train.optim == OPTIM_SGD && a->train.momentum == 0)
    usage("%s", "--zero 1 shards the optimizer state, and SGD without momentum has none");
  if (zero) a->train.zero_ranks = ranks;
  a->train.cuda = strcmp(a->target, "cuda") == 0;
  if (a->train.precision == PREC_FP16 && a->train.dist)
    fatal(EXIT_BADINPUT, "--precision fp16 does not run with --dist yet (its loss scaling would "
          "have to agree across ranks on whether a step's updates run); --precision bf16 needs "
          "no loss scaling and runs with --dist");
  if (a->plan.segment && a->plan.policy != POL_RECOMPUTE)
    usage("%s", "--segment SIZE goes with --policy recompute (checkpoint segments of SIZE; "
          "auto chooses its own)");
}

/* --zero 1: a parameter's pieces are broadcast into its device instance
 * between two steps, which the host-resident parameters of the last budget
 * tier would not see. */
static void check_zero_plan(const Args *a, const Graph *g, const Plan *pl) {
  for (int t = 0; a->train.zero_ranks && t < g->nt; t++)
    if (g->t[t].kind == TK_PARAM && pl->tensor_inst[t] >= 0 && pl->inst[pl->tensor_inst[t]].offset < 0)
      fatal(EXIT_BADINPUT, "--zero 1: at budget %s the plan keeps parameters in host memory "
            "('%s'), which --zero 1 does not support yet; give a larger --budget (or drop --zero 1)",
            fmt_bytes(pl->budget), g->t[t].name);
}

/* How far pipeline() goes: the typed forward graph (inspect), a plan to
 * size (max-batch's probes: no budget errors, nothing after the plan), or
 * the whole plan (plan, compile). */
typedef enum { UPTO_SHAPES, UPTO_PLAN_SIZE, UPTO_SCHEDULE } Upto;

/* Every pass of the compiler, in order; each line one pass and the file
 * that holds it. emit_program (emit/emit.c) follows in cmd_compile. NULL
 * for UPTO_SHAPES, and for UPTO_PLAN_SIZE where auto finds nothing that
 * fits. */
static Plan *pipeline(const Args *a, int batch, Upto upto, FILE *schedule_log, Graph **out) {
  bool cuda = strcmp(a->target, "cuda") == 0;
  err_file = a->model;
  Graph *g = *out = onnx_import(a->model, a->input);        // front/import.c
  shape_infer(g, batch);                                    // front/shape.c, eval.c
  if (upto == UPTO_SHAPES) return NULL;
  fuse_elementwise(g, !a->no_fuse, a->dump && !strcmp(a->dump, "fuse") ? stdout : NULL);  // front/fuse.c
  train_build(g, &a->train);                                // train/autodiff.c
  precision_assign(g, &a->train);                           // train/precision.c
  Route *r = route_build(g);                                // plan/route.c
  if (upto == UPTO_PLAN_SIZE) {
    /* max-batch plans a dozen batches: planning needs only shapes */
    for (int i = 0; i < g->nt; i++) free(g->t[i].data), g->t[i].data = NULL;
    Plan *pl = plan_try(g, r, &a->plan);                    // plan_build, no budget errors
    route_free(r);
    return pl;
  }
  Plan *pl = plan_build(g, r, &a->plan);                    // plan/plan.c, search.c
  route_free(r);
  check_zero_plan(a, g, pl);
  schedule_waits(g, pl, schedule_log);                      // plan/schedule.c
  if (cuda) workspace_plan(g, pl, WS_CUDA_CAP);             // plan/workspace.c
  return pl;
}

static FILE *open_out(const char *path) {
  if (strcmp(path, "-") == 0) return stdout;
  FILE *f = fopen(path, "w");
  if (!f) fatal(EXIT_BADINPUT, "cannot write '%s'", path);
  return f;
}

static void close_out(FILE *f, const char *path) {
  if (f == stdout) { fflush(f); return; }
  if (ferror(f) | fclose(f)) fatal(EXIT_BADINPUT, "error writing '%s'", path);
}

static int cmd_inspect(const Args *a) {
  if (a->dump) {
    /* Import alone: its debug view, before shape inference. */
    if (strcmp(a->dump, "import") && strcmp(a->dump, "eval"))
      usage("inspect --dump takes 'import' or 'eval', not '%s'", a->dump);
    err_file = a->model;
    if (strcmp(a->dump, "eval") == 0) eval_dump(onnx_import_whole(a->model), stdout);
    else import_dump(onnx_import(a->model, a->input), stdout);
    return 0;
  }
  Graph *g;
  pipeline(a, a->batch, UPTO_SHAPES, NULL, &g);
  if (a->json_flag) inspect_json(g, stdout);
  else inspect_print(g, stdout);
  return 0;
}

static int cmd_plan(const Args *a) {
  if (a->diff_a) return plan_diff(a->diff_a, a->diff_b, stdout);
  Graph *g;
  bool dump_schedule = a->dump && strcmp(a->dump, "schedule") == 0;
  Plan *pl = pipeline(a, a->batch, UPTO_SCHEDULE, dump_schedule ? stdout : NULL, &g);
  if (dump_schedule || strcmp(a->dump ? a->dump : "", "fuse") == 0) {
    /* printed while the pass ran */
  } else if (a->dump) plan_dump(g, pl, a->dump, stdout);
  else plan_print_text(g, pl, stdout);
  if (a->json) {
    FILE *f = open_out(a->json);
    plan_print_json(g, pl, f);
    close_out(f, a->json);
  }
  if (a->html) {
    FILE *f = open_out(a->html);
    plan_print_html(g, pl, f);
    close_out(f, a->html);
  }
  return 0;
}

/* --target cuda for a profile below sm_75: the plan stands, but the program
 * has no code for that GPU. A warning, before the files are written. */
static void check_cuda_arch(const Args *a, const Plan *pl) {
  if (strcmp(a->target, "cuda") != 0) return;
  const DeviceProfile *dev = device_find(pl->opts.device);
  if (dev->sm > 0 && dev->sm < 75)
    fprintf(stderr, "snc: warning: profile '%s' (sm_%d) is planning-only: CUDA 13 builds no code "
                    "for it, so this program will not run on that GPU (README \"The CUDA "
                    "target\")\n", dev->name, dev->sm);
}

static int cmd_compile(const Args *a) {
  Graph *g;
  Plan *pl = pipeline(a, a->batch, UPTO_SCHEDULE, NULL, &g);
  check_cuda_arch(a, pl);
  EmitOpts eo = {.target = a->target, .model_path = a->model, .train = &a->train};
  emit_program(g, pl, &eo, a->out_dir);
  plan_print_summary(g, pl, stdout);
  printf("snc: wrote %s/train.c, plan.txt, plan.json, build.ninja; build with: ninja -C %s\n",
         a->out_dir, a->out_dir);
  return 0;
}

/* The device arena of the plan at one batch size (INT64_MAX: nothing fits;
 * a plan over the host budget fits no device budget). The graphs are kept:
 * ir.c keys its name maps by graph address, so freeing one could alias the
 * next. */
static int64_t arena_at(const Args *a, int batch, int64_t host) {
  Graph *g;
  Plan *pl = pipeline(a, batch, UPTO_PLAN_SIZE, NULL, &g);
  if (!pl) return INT64_MAX;
  int64_t arena = pl->host_bytes <= host ? pl->arena_bytes : INT64_MAX;
  plan_free(pl);
  return arena;
}

/* The largest batch whose plan fits the budget: doubling then bisection,
 * O(log B) plans, assuming the arena grows with the batch (it does: every
 * activation scales with it). */
static int cmd_max_batch(const Args *a) {
  const DeviceProfile *dev = device_find(a->plan.device);
  int64_t budget = a->plan.budget;
  int64_t host = a->plan.host_budget ? a->plan.host_budget : device_host_budget(dev);
  const int cap = 1000000;             // --batch's own limit
  if (arena_at(a, 1, host) > budget)
    fatal(EXIT_BADINPUT, "not even batch 1 fits in %s under policy %s",
          fmt_bytes(budget), policy_name(a->plan.policy));
  int lo = 1, hi = 2;                  // lo fits; hi is untested or too big
  while (hi <= cap && arena_at(a, hi, host) <= budget) {
    lo = hi;
    hi *= 2;
  }
  if (hi > cap) hi = cap + 1;
  while (hi - lo > 1) {
    int mid = lo + (hi - lo) / 2;
    if (arena_at(a, mid, host) <= budget) lo = mid;
    else hi = mid;
  }
  printf("%d\n", lo);
  return 0;
}

int main(int argc, char **argv) {
  Args a;
  parse_args(&a, argc, argv);
  if (strcmp(a.cmd, "inspect") == 0) return cmd_inspect(&a);
  if (strcmp(a.cmd, "plan") == 0) return cmd_plan(&a);
  if (strcmp(a.cmd, "compile") == 0) return cmd_compile(&a);
  return cmd_max_batch(&a);
}
