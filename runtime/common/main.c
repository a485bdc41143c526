/* main.c — the emitted program's main(): the run in the order it happens.
 *
 * What it is: everything around the compiled step, one call per part:
 * flags (flags.c; docs/reference.md, "DIR/train"), setup and resume
 * (setup.c: checks, data, device, initial or resumed tensors, the banner),
 * the step loop and the final evaluation (steps.c, eval.c) or --predict's
 * forward pass instead (predict.c), then the outputs
 * (outputs.c: checkpoint, dumps, export, metrics, profile). What the parts
 * share is one rt_run (rt.h).
 *
 * What it is not: the step itself (the emitted train.c) or memory (the device
 * layer, snrt_dev.h). */
#include "rt.h"

#include <string.h>

int main(int argc, char **argv) {
  if (argc > 0) rt_wait_policy(argv);
  const char *slash = argc > 0 ? strrchr(argv[0], '/') : NULL;
  if (argc > 0) rt_prog = slash ? slash + 1 : argv[0];
  rt_run r;
  memset(&r, 0, sizeof r);
  rt_parse_args(&r.o, argc, argv);
  rt_setup(&r, &argc, &argv);
  if (r.o.predict) {   /* forward only: no step, no outputs of training */
    rt_predict(&r);
    rt_teardown(&r);
    return 0;
  }
  bool trainable = false;
  for (int t = 0; t < r.m->ntensors; t++) trainable |= r.m->tensors[t].kind == SNRT_T_PARAM;
  if (!trainable) {
    fprintf(stderr, "%s: error: this model has no trainable parameter: there is nothing to "
                    "train; --predict SPEC --out PATH runs it (docs/predict.md)\n", rt_prog);
    rt_teardown(&r);
    return SNRT_EXIT_USAGE;
  }
  rt_banner(&r);
  rt_train(&r);
  rt_outputs(&r);
  rt_teardown(&r);
  return 0;
}
