/* emit.h — the emitter's public functions. */
#ifndef SNC_EMIT_H
#define SNC_EMIT_H

#include "../review/review.h"

/* ------------------------------------------------------------------ emit.c */

typedef struct EmitOpts {
  const char *target;      // "cpu" | "cuda"
  const char *model_path;  // the source model (copied into DIR)
  const char *snc_root;    // repository root (for runtime headers and libraries)
  const TrainOpts *train;
} EmitOpts;

void emit_program(const Graph *g, const Plan *pl, const EmitOpts *o, const char *dir);

#endif /* SNC_EMIT_H */
