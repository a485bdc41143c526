/* emit_profile.c — the table of training steps an emitted program's
 * `--profile FILE` reports against (runtime/common/profile.c): per plan step
 * its kind, its cost class and the cost model's estimate (cost.c), with the
 * plan's estimated step time. Copy steps are class "copy" with their transfer
 * time (which the plan overlaps with compute). */
#include "emit_internal.h"

static const DeviceProfile *plan_device(const Plan *pl) {
  return device_find(pl->opts.device ? pl->opts.device : "h200");
}

void emit_step_table(FILE *f, const Graph *g, const Plan *pl) {
  const DeviceProfile *d = plan_device(pl);
  const Route *r = pl->route;
  fprintf(f, "/* --profile: kind, cost class and estimated seconds (device %s) of each training step. */\n",
          d->name);
  fprintf(f, "static const snrt_step_info step_info[] = {\n");
  for (int s = 0; s < r->train_steps; s++) {
    const Step *st = &r->s[s];
    const char *cls = st->node >= 0 ? cost_class_name(cost_class(g, &g->n[st->node])) : "copy";
    fprintf(f, "  {\"%s\", \"%s\", %.6g},\n", step_kind_name(st->kind), cls, cost_step_seconds(g, pl, s, d));
  }
  if (!r->train_steps) fprintf(f, "  {\"none\", \"none\", 0},\n");
  fprintf(f, "};\n\n");
}

void emit_step_table_fields(FILE *f, const Plan *pl) {
  fprintf(f, "  .nsteps = %d,\n  .steps = step_info,\n  .est_step_s = %.6g,\n  .est_device = ",
          pl->route->train_steps, pl->est_step_seconds);
  const char *name = plan_device(pl)->name;
  fputc('"', f);
  for (const char *p = name; *p; p++) {
    if (*p == '"' || *p == '\\') fputc('\\', f);
    if ((unsigned char)*p >= 0x20) fputc(*p, f);
  }
  fprintf(f, "\",\n");
}
