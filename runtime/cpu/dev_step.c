/* dev_step.c — the CPU side of snrt_dev_run_step (snrt_dev.h): a step runs
 * as it is called; there is nothing to capture or replay on the CPU. */
#include "snrt_dev.h"

void snrt_dev_run_step(snrt_ctx *c, void (*fn)(snrt_ctx *c)) {
  fn(c);
}
