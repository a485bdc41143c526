/* emit_internal.h — the Emit state and helpers shared by the six files of
 * emit/: emit.c (the program: files, tensor table, step loop), emit_ops.c and
 * emit_seq.c (one emitter per op, printing its params and its call),
 * emit_convert.c (16-bit steps), emit_dist.c (data-parallel steps) and
 * emit_profile.c (--profile's step table). */
#ifndef EMIT_H
#define EMIT_H

#include "emit.h"

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
  /* --precision bf16|fp16: a step on float32 working copies (emit_convert.c). */
  bool wrapped;            // the current step is
  char **sub_in, **sub_out;  // per input/output slot: the pointer to pass ("s0"), or NULL
  int64_t chunk_elems;     // a chunk of an op whose emitter counts elements itself (0: none)
  void **owned;            // chunk params declared (keys of emit_params: freed at the end)
  int nowned, capowned;
};

/* "F(0x1200)" (B(..) bf16, H(..) fp16, I(..) int32) for instance inst of tensor t. */
const char *emit_ptr(Emit *e, int inst, int tensor);
/* s with comment-closing tokens and control characters replaced (rotating buffer). */
const char *emit_comment_safe(const char *s);
/* emit_convert.c: a step on float32 working copies (convert.c), printed
 * whole; false (nothing printed) for a step that needs none. */
bool emit_convert_step(Emit *e, const Node *n);
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
/* A static const array of n integers (int32, or uint8 with bytes) into the
 * declarations (emit_seq.c). */
void emit_int_array(Emit *e, const char *type, const char *name, int64_t n, const void *v, bool bytes);
/* --zero 1: an SGD/Adam update as one guarded call per rank's piece (emit_dist.c). */
void emit_zero_update(Emit *e, const Graph *g, const Node *n);
/* emit_profile.c: the training steps' kinds, cost classes and estimates
 * (--profile), and the snrt_model fields that point at them. */
void emit_step_table(FILE *f, const Graph *g, const Plan *pl);
void emit_step_table_fields(FILE *f, const Plan *pl);
/* A float literal that survives printing (inf, nan, exact round trip). */
const char *emit_float(float v);

#endif
