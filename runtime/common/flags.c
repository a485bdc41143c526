/* flags.c — the emitted program's command line: --help's text and the
 * parser that fills rt_opts (docs/reference.md, "DIR/train").
 *
 * What it is not: checks that need the model (setup.c). A usage error prints
 * one line and exits 1. */
#include "rt.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    "                     after --prompt TEXT (top-5 sampling, seeded by --seed)\n"    "  --predict SPEC     no training: the eval graph (current or --resume'd weights) over\n"
    "                     every sample of npy:X.npy | idx:.. | tokens:FILE, in batches of the\n"
    "                     compiled size; each graph output written as float32 .npy (first\n"
    "                     dimension: the samples) to --out\n"
    "  --out PATH         with --predict: FILE.npy for a one-output model; otherwise a\n"
    "                     directory receiving OUTPUT_NAME.npy per graph output\n"
    "  --comm-timeout S   data parallel (--dist programs under mpirun): seconds a rank\n"
    "                     waits for the others before ending every rank (default 300)\n"
    "exit codes: 0 ok, 1 usage, 2 bad data, file or checkpoint, 3 loss became NaN/Inf,\n"
    "            4 device or memory error, 5 another rank died, hung or timed out\n";

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

void rt_parse_args(rt_opts *o, int argc, char **argv) {
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
    else if (!strcmp(s, "--predict")) o->predict = value(argc, argv, &i);
    else if (!strcmp(s, "--out")) o->out = value(argc, argv, &i);
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
  if (o->out && !o->predict) usage_error("%s is --predict's output; give --predict SPEC too", "--out");
}
