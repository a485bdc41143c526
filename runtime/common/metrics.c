/* metrics.c — the --metrics JSON file (docs/reference.md, "Metrics").
 *
 * What it is: one flat JSON object, written atomically so a reader never sees
 * half a file. Keys: steps (run by this invocation), global_step, epochs
 * (fractional, counted from the start of training), train_loss (the last
 * step's), test_accuracy and test_loss (only with --eval), images_per_s
 * (excluding the first 3 steps of this invocation), arena_bytes, host_bytes,
 * outside_arena_bytes (snrt_dev_outside_bytes), threads, batch, policy, device; for a --dist program also ranks,
 * global_batch, and per step (first 3 steps excluded) step_s, comm_s (each
 * all-reduce from its start to its completion, summed), comm_exposed_s (what
 * compute waited for), comm_overlapped_s (the rest) and sync_s (the step-end
 * exchange of the loss).
 *
 * What it is not: the progress line (steps.c). */
#include "rt.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double finite_or_zero(double v) {
  return isfinite(v) ? v : 0.0;   /* JSON has no NaN */
}

void rt_metrics_write(const snrt_ctx *c, const char *path, const rt_metrics *mt) {
  const snrt_model *m = c->m;
  char buf[2048];
  int k = snprintf(buf, sizeof buf,
                   "{\"steps\": %lld, \"global_step\": %lld, \"epochs\": %.6g, \"train_loss\": %.9g",
                   (long long)mt->steps, (long long)mt->global_step, mt->epochs,
                   finite_or_zero(mt->train_loss));
  if (mt->has_eval)
    k += snprintf(buf + k, sizeof buf - (size_t)k, ", \"test_accuracy\": %.9g, \"test_loss\": %.9g",
                  mt->test_accuracy, finite_or_zero(mt->test_loss));
  k += snprintf(buf + k, sizeof buf - (size_t)k,
                ", \"images_per_s\": %.6g, \"arena_bytes\": %lld, \"host_bytes\": %lld"
                ", \"outside_arena_bytes\": %lld"
                ", \"threads\": %d, \"batch\": %d, \"policy\": \"%s\", \"device\": \"%s\"}\n",
                mt->images_per_s, (long long)m->arena_bytes, (long long)m->host_bytes,
                (long long)snrt_dev_outside_bytes((snrt_ctx *)c),
                mt->threads, m->batch, m->policy ? m->policy : "",
                snrt_dev_describe((snrt_ctx *)c));
  if (m->precision) {   /* --precision bf16: before the closing brace (fp32: no key, as before) */
    k--;
    while (k > 0 && buf[k] != '}') k--;
    k += snprintf(buf + k, sizeof buf - (size_t)k, ", \"precision\": \"%s\", \"convert_bytes\": %lld}\n",
                  m->precision, (long long)m->convert_bytes);
    if (strcmp(m->precision, "fp16") == 0) {   /* dynamic loss scaling (synced by the caller) */
      k--;
      while (k > 0 && buf[k] != '}') k--;
      k += snprintf(buf + k, sizeof buf - (size_t)k, ", \"skipped_steps\": %lld, \"loss_scale\": %.17g}\n",
                    (long long)c->skipped_steps, (double)c->loss_scale);
    }
  }
  if (m->dist) {   /* before the closing brace */
    k--;
    while (k > 0 && buf[k] != '}') k--;
    k += snprintf(buf + k, sizeof buf - (size_t)k,
                  ", \"ranks\": %d, \"global_batch\": %d, \"step_s\": %.6g, \"comm_s\": %.6g"
                  ", \"comm_exposed_s\": %.6g, \"comm_overlapped_s\": %.6g, \"sync_s\": %.6g}\n",
                  rt_ranks, m->batch * rt_ranks, mt->step_s, mt->comm_s, mt->comm_exposed_s,
                  mt->comm_s - mt->comm_exposed_s, mt->sync_s);
  }
  if (rt_write_atomic(path, buf, (size_t)k) != 0)
    rt_fail(SNRT_EXIT_DATA, "cannot write metrics %s: %s", path, strerror(errno));
}
