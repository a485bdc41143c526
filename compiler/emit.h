/* emit.h — shared by emit.c (the program: files, tensor table, step loop)
 * and emit_ops.c (one emitter per op, printing its params and its call). */
#ifndef EMIT_H
#define EMIT_H

#include "snc.h"

struct Emit {
  FILE *f;                 // the step functions being written
  FILE *decl;              // parameter declarations (printed above the steps)
  const Graph *g;
  const Plan *pl;
  const Step *st;          // the step being emitted
  int step;                // its index
  int *table;              // IR tensor -> index in the model's tensor table (-1)
  const void **pkeys;      // params already declared (deduplicated by pointer)
  char **pnames;
  int np, capp;
  int *phash;              // index of pkeys by pointer (slot: i + 1, 0 empty)
  int phcap;               // a power of two, or 0
  int nparams;             // counter for P<n> names
  bool ws_per_step;        // cuda: each conv step its own params, .ws_bytes = its workspace
  /* --precision bf16: a step with a bf16 operand (or a 16-bit op reading a
   * float32 operand) runs on float32 scratch copies (emit.c, wrap_step). */
  bool wrapped;            // the current step does
  char **sub_in, **sub_out;  // per input/output slot: its scratch name ("s0"), or NULL
  int64_t scratch_max;     // floats of scratch the largest wrapped step uses
};

/* "F(0x1200)" for node input k / output k at the current step, "NULL" if absent. */
const char *emit_in(Emit *e, int k);
const char *emit_out(Emit *e, int k);
const char *emit_ws(Emit *e);
/* Declares `static const TYPE Pn = {...};` once per params pointer; returns
 * "&Pn". `body` is the initializer text (without braces). */
const char *emit_params(Emit *e, const void *key, const char *type, const char *body);
/* The "&Pn" declared for key, or NULL. Hashed: a 100,000-step program
 * declares as many params. */
const char *emit_params_find(Emit *e, const void *key);
/* --zero 1: an SGD/Adam update as one guarded call per rank's piece (emit_dist.c). */
void emit_zero_update(Emit *e, const Graph *g, const Node *n);
/* emit_profile.c: the training steps' kinds, cost classes and estimates
 * (--profile), and the snrt_model fields that point at them. */
void emit_step_table(FILE *f, const Graph *g, const Plan *pl);
void emit_step_table_fields(FILE *f, const Plan *pl);
/* A float literal that survives printing (inf, nan, exact round trip). */
const char *emit_float(float v);

#endif
