/* fuzz_model.c — a libFuzzer target for the compiler's front half: the input
 * bytes are an ONNX model file, run through import, shape inference, autodiff
 * (the loss and optimizer picked from a hash of the input) and planning
 * (the policy, device and budget picked from the hash too), then the offset
 * checker.
 *
 * Errors about the model (fatal/node_error, exit 2) are the expected outcome
 * for most inputs: util.c longjmps back here and the input's memory is
 * released (allocation tracking), so one run can try millions of inputs.
 * A crash, a sanitizer report, an internal_error() (it aborts under the
 * fuzzer) or overlapping offsets is a bug in snc.
 *
 * Not here: emitting code (it writes files) or running the program.
 * Build: tests/fuzz/build.sh; run: build/fuzz/fuzz_model CORPUS_DIR. */
#include "../../compiler/review/review.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A path in an empty private folder: messages name it, and external data
 * locations resolve (and fail) inside it. */
static char model_path[256];
static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  char dir[] = "/tmp/snc-fuzz-XXXXXX";
  if (!mkdtemp(dir)) abort();
  snprintf(model_path, sizeof model_path, "%s/model.onnx", dir);
  snc_error_quiet = getenv("SNC_FUZZ_VERBOSE") == NULL;
  devnull = fopen("/dev/null", "w");
  if (!devnull) abort();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static jmp_buf jb;
  uint64_t h = hash_bytes(0, data, size);
  snc_alloc_track(true);
  err_file = model_path;
  if (setjmp(jb) == 0) {
    snc_error_jmp = &jb;
    unsigned char *buf = xmalloc(size);
    if (size) memcpy(buf, data, size);
    Graph *g = onnx_import_bytes(buf, size, model_path, NULL);
    shape_infer(g, 1 + (int)(h >> 8 & 3));
    inspect_json(g, devnull);
    TrainOpts t = {.loss = (h & 1) ? LOSS_MSE : LOSS_SOFTMAX_CE,
                   .optim = (h >> 1 & 1) ? OPTIM_ADAM : OPTIM_SGD,
                   .lr = 0.01f, .momentum = 0.9f, .beta1 = 0.9f, .beta2 = 0.999f,
                   .eps = 1e-8f};
    train_build(g, &t);
    precision_assign(g, &t);
    /* Every policy, on two devices; half the time a budget (a fraction of
     * what the model needs, so that the recompute/offload planners work). */
    static const Policy pols[] = {POL_NONE, POL_LIVENESS, POL_RECOMPUTE, POL_OFFLOAD,
                                  POL_SUPERNEURONS, POL_AUTO};
    PlanOpts po = {.policy = pols[(h >> 12) % 6], .device = (h >> 16 & 1) ? "k40c" : "cpu"};
    if (h >> 17 & 1) po.budget = (int64_t)1 << (16 + (h >> 18) % 16);
    /* An infeasible budget's error bisects for the smallest one that fits
     * (each probe a whole auto search): bounded here so one input stays
     * well under libFuzzer's timeout; the search itself is still run. */
    plan_smallest_search_seconds = 0.5;
    Plan *pl = plan_build(g, route_build(g), &po);
    if (offsets_check(g, pl, stderr) != 0) abort();
  }
  snc_error_jmp = NULL;
  ir_reset();
  snc_alloc_release();
  snc_alloc_track(false);
  return 0;
}
