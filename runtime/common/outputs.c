/* outputs.c — what the emitted program leaves behind after its steps:
 * --generate's text, the checkpoint (--save), the .npy dumps, the ONNX
 * export, the --metrics summary and the --profile table (rank 0 alone, but
 * every rank joins a --zero 1 save); then it frees what setup.c made.
 *
 * What it is not: the file formats themselves (checkpoint.c, npy.c,
 * export.c, metrics.c, profile.c). */
#include "rt.h"

#include <stdlib.h>

/* The summary of the run; rates leave out the first 3 steps (warm-up) when
 * there were more. */
static void write_metrics(rt_run *r) {
  rt_metrics *mt = &r->mt;
  int64_t done = r->done;
  double t_end = r->t_end, t3 = r->t3, t0 = r->t0;
  mt->steps = done;
  mt->global_step = r->pos.step;
  mt->epochs = r->pos.epoch + (double)r->pos.pos / r->nb;
  mt->has_eval = r->evaluated_last;
  mt->test_accuracy = r->ev.accuracy;
  mt->test_loss = r->ev.loss;
  if (done > 3 && t_end > t3) mt->images_per_s = (done - 3) * (double)r->gbatch / (t_end - t3);
  else if (done > 0 && t_end > t0) mt->images_per_s = done * (double)r->gbatch / (t_end - t0);
  if (done > 3 && t_end > t3) {
    double cm, ex, sy;
    rt_dist_times(&cm, &ex, &sy);
    mt->step_s = (t_end - t3) / (double)(done - 3);
    mt->comm_s = (cm - r->c3[0]) / (double)(done - 3);
    mt->comm_exposed_s = (ex - r->c3[1]) / (double)(done - 3);
    mt->sync_s = (sy - r->c3[2]) / (double)(done - 3);
  }
  mt->threads = r->c.threads;
  snrt_dev_scale_sync(&r->c, true);   /* fp16's loss scale and skipped steps */
  rt_metrics_write(&r->c, r->o.metrics, mt);
}

void rt_outputs(rt_run *r) {
  const rt_opts *o = &r->o;
  snrt_ctx *c = &r->c;
  bool lead = r->lead;
  if (lead && o->generate && !rt_stop_signal) rt_generate(c, o);
  if ((lead || r->m->zero) && o->save) rt_checkpoint_save(c, o->save, &r->pos);
  if (lead && o->dump_params) rt_dump_params(c, o->dump_params);
  if (lead && o->dump_grads && r->done > 0) rt_dump_grads(c, o->dump_grads, r->loss);
  if (lead && o->export_onnx) rt_export_onnx(c, o->export_onnx);
  if (lead && o->metrics) write_metrics(r);
  if (lead && o->profile) rt_prof_write(c, o->profile);
}

void rt_teardown(rt_run *r) {
  snrt_ctx *c = &r->c;
  for (int i = 0; i < r->m->ntensors; i++) free(c->grad_copy[i]);
  free(c->grad_copy);
  snrt_dev_free(c);
  rt_data_free(r->train);
  rt_data_free(r->test);
  rt_dist_finalize();
}
