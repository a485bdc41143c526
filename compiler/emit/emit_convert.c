/* emit_convert.c — the code of a 16-bit step (--precision bf16|fp16) that
 * runs on float32 working copies: convert.c decides which operands convert,
 * in what chunks, and where each copy lies in the step's workspace; this
 * prints the block that widens the inputs into the copies
 * (snrt_bf16_load/_rows; snrt_bf16_round for a 16-bit op's float32 inputs),
 * calls the op's emitter on them (emit_in/emit_out return the copies' names)
 * and rounds the outputs to nearest-even into the arena
 * (snrt_bf16_store/_rows); fp16 the same with snrt_f16_*. A chunked step is
 * a loop over its full chunks and one call for the rest, each with params
 * sized for its chunk; inputs that do not follow the chunks (a conv's
 * weights) convert once before the loop, such outputs after it.
 */
#include "emit_internal.h"

#include <stdlib.h>
#include <string.h>

static bool is16(int dt) { return dt == DT_BFLOAT16 || dt == DT_FLOAT16; }

/* The runtime's name of a 16-bit format: snrt_bf16_load, snrt_f16_load... */
static const char *fmt_of(const Graph *g, int dt) {
  if (is16(dt)) return dt == DT_FLOAT16 ? "f16" : "bf16";
  return g->precision == PREC_FP16 ? "f16" : "bf16";
}

/* "PTR + off" where the chunk starts (u: "u" in the loop, else a number). */
static char *at_unit(const char *ptr, const char *u, int64_t inner) {
  if (strcmp(u, "0") == 0) return xstrdup(ptr);
  if (inner == 1) return xasprintf("%s + %s", ptr, u);
  if (strcmp(u, "u") == 0) return xasprintf("%s + u * %lld", ptr, (long long)inner);
  return xasprintf("%s + %lld", ptr, (long long)(strtoll(u, NULL, 10) * inner));
}

static void keep(Emit *e, void *p) {
  xgrow((void **)&e->owned, &e->capowned, e->nowned + 1, sizeof *e->owned);
  e->owned[e->nowned++] = p;
}

/* The inputs and outputs one pass (or one chunk of m units starting at unit
 * u) reads and writes, and the op's call. */
static void emit_pass(Emit *e, const Node *n, const Convert *cv, char **name, const char *u,
                      int64_t m, bool first) {
  const Graph *g = e->g;
  const Step *st = e->st;
  FILE *f = e->f;
  bool part = m != cv->units;   /* a chunk: params sized for it */
  const char *ind = strcmp(u, "u") == 0 ? "  " : "";   /* inside the loop */
  for (int k = 0; k < n->nin + n->nout; k++) {
    bool out = k >= n->nin;
    int j = out ? k - n->nin : k;
    const ConvertSlot *s = out ? &cv->out[j] : &cv->in[j];
    char **sub = out ? &e->sub_out[j] : &e->sub_in[j];
    if (s->tensor < 0 || (!s->chunked && !s->copy)) continue;
    const char *copy = name[s->same >= 0 ? s->same : k];
    if (!s->chunked) {             /* converted once, outside the chunks */
      free(*sub);
      *sub = xstrdup(copy);
      continue;
    }
    char *arena = at_unit(emit_ptr(e, out ? st->out[j] : st->in[j], s->tensor), u, s->inner);
    free(*sub);
    if (!s->copy) {                /* a float32 operand the kernel reads in place */
      *sub = arena;
      continue;
    }
    *sub = xstrdup(copy);
    if (!out && s->same < 0) {
      const char *fmt = fmt_of(g, s->dtype);
      if (s->outer > 1) {
        snc_assert(is16(s->dtype));
        fprintf(f, "%s    snrt_%s_load_rows(c, %s, %lld, %s, %lld, %lld);\n", ind, fmt, arena,
                (long long)(cv->units * s->inner), *sub, (long long)s->outer, (long long)(m * s->inner));
      } else {
        fprintf(f, "%s    snrt_%s_%s(c, %s, %s, %lld);\n", ind, fmt, is16(s->dtype) ? "load" : "round", arena,
                *sub, (long long)(m * s->inner));
      }
    }
    free(arena);
  }
  /* The op, on params sized for this chunk. */
  Node sized = *n;
  e->chunk_elems = 0;
  if (part) {
    void *p = convert_chunk_params(n, cv->axis, m, first);
    if (p) {
      keep(e, p);
      sized.p = p;
    } else {
      e->chunk_elems = m;
    }
  }
  /* The op's call, indented into the block (its emitter prints at depth 1). */
  char *call = NULL;
  size_t len = 0;
  e->f = open_memstream(&call, &len);
  if (!e->f) fatal(EXIT_BADINPUT, "out of memory");
  op_info[n->op].emit(e, g, &sized);
  fclose(e->f);
  e->f = f;
  for (char *line = call; *line;) {
    char *end = strchr(line, '\n');
    size_t l = end ? (size_t)(end - line) : strlen(line);
    fprintf(f, "  %s%.*s\n", strcmp(u, "u") == 0 ? "  " : "", (int)l, line);
    line += l + (end != NULL);
  }
  free(call);
  e->chunk_elems = 0;
  for (int j = 0; j < n->nout; j++) {
    const ConvertSlot *s = &cv->out[j];
    if (s->tensor < 0 || !s->chunked || !s->copy) continue;
    char *arena = at_unit(emit_ptr(e, st->out[j], s->tensor), u, s->inner);
    if (s->outer > 1)
      fprintf(f, "%s    snrt_%s_store_rows(c, %s, %s, %lld, %lld, %lld);\n", ind, fmt_of(g, s->dtype),
              name[n->nin + j], arena, (long long)(cv->units * s->inner), (long long)s->outer,
              (long long)(m * s->inner));
    else
      fprintf(f, "%s    snrt_%s_store(c, %s, %s, %lld);\n", ind, fmt_of(g, s->dtype), name[n->nin + j], arena,
              (long long)(m * s->inner));
    free(arena);
  }
}

/* Tensor cores (cuda): 16-bit copies of the step's float32 operands, made
 * before the call (snrt_bf16_store: rounded to nearest-even), and of its
 * float32 outputs, widened after it (snrt_bf16_load); the op's emitter
 * prints the 16-bit call on them (emit_ops.c). */
static void emit_half_step(Emit *e, const Node *n, const Convert *cv, int64_t base) {
  const Graph *g = e->g;
  const Step *st = e->st;
  FILE *f = e->f;
  const char *fmt = g->precision == PREC_FP16 ? "f16" : "bf16";
  e->sub_in = xcalloc((size_t)n->nin + 1, sizeof(char *));
  e->sub_out = xcalloc((size_t)n->nout + 1, sizeof(char *));
  e->wrapped = true;
  fprintf(f, "  {   /* 16-bit copies of float32 operands: %s */\n", fmt_bytes(cv->bytes));
  int names = 0;
  for (int k = 0; k < n->nin + n->nout; k++) {
    bool out = k >= n->nin;
    int j = out ? k - n->nin : k;
    const ConvertSlot *s = out ? &cv->out[j] : &cv->in[j];
    char **sub = out ? &e->sub_out[j] : &e->sub_in[j];
    if (s->tensor < 0 || !s->copy) continue;
    if (s->same >= 0) {
      *sub = xstrdup(e->sub_in[s->same]);
      continue;
    }
    *sub = xasprintf("h%d", names++);
    fprintf(f, "    uint16_t *const %s = (uint16_t *)(A + 0x%llx);   /* %s */\n", *sub,
            (unsigned long long)(base + s->at), emit_comment_safe(g->t[s->tensor].name));
    if (!out)
      fprintf(f, "    snrt_%s_store(c, %s, %s, %lld);\n", fmt, emit_ptr(e, st->in[j], s->tensor), *sub,
              (long long)s->floats);
  }
  char *call = NULL;
  size_t len = 0;
  e->f = open_memstream(&call, &len);
  if (!e->f) fatal(EXIT_BADINPUT, "out of memory");
  op_info[n->op].emit(e, g, n);
  fclose(e->f);
  e->f = f;
  for (char *line = call; *line;) {
    char *end = strchr(line, '\n');
    size_t l = end ? (size_t)(end - line) : strlen(line);
    fprintf(f, "  %.*s\n", (int)l, line);
    line += l + (end != NULL);
  }
  free(call);
  for (int j = 0; j < n->nout; j++) {
    const ConvertSlot *s = &cv->out[j];
    if (s->tensor >= 0 && s->copy)
      fprintf(f, "    snrt_%s_load(c, %s, %s, %lld);\n", fmt, e->sub_out[j],
              emit_ptr(e, st->out[j], s->tensor), (long long)s->floats);
  }
  fprintf(f, "  }\n");
}

/* After a wrapped step: the substituted operand names freed, the plain
 * operands back for the next step. */
static void unwrap(Emit *e, const Node *n, Convert *cv) {
  for (int k = 0; k < n->nin; k++) free(e->sub_in[k]);
  for (int k = 0; k < n->nout; k++) free(e->sub_out[k]);
  free(e->sub_in);
  free(e->sub_out);
  e->sub_in = e->sub_out = NULL;
  e->wrapped = false;
  convert_free(cv);
}

bool emit_convert_step(Emit *e, const Node *n) {
  const Graph *g = e->g;
  const Plan *pl = e->pl;
  const Step *st = e->st;
  Convert cv;
  convert_plan(g, n, &cv);
  if (!cv.wrapped) {
    convert_free(&cv);
    return false;
  }
  if (st->ws < 0 || pl->inst[st->ws].convert_bytes != cv.bytes)
    internal_error(__FILE__, __LINE__, "step %d (%s): the plan's workspace does not hold its "
                   "working copies (%lld bytes)", e->step, n->name, (long long)cv.bytes);
  if (cv.half) {
    emit_half_step(e, n, &cv, pl->inst[st->ws].offset);
    unwrap(e, n, &cv);
    return true;
  }
  FILE *f = e->f;
  int64_t base = pl->inst[st->ws].offset;
  int slots = n->nin + n->nout;
  char **name = xcalloc((size_t)slots + 1, sizeof(char *));
  e->sub_in = xcalloc((size_t)n->nin + 1, sizeof(char *));
  e->sub_out = xcalloc((size_t)n->nout + 1, sizeof(char *));
  e->wrapped = true;
  if (cv.axis == CHUNK_WHOLE || cv.chunk == cv.units)
    fprintf(f, "  {   /* float32 copies: %s */\n", fmt_bytes(cv.bytes));
  else
    fprintf(f, "  {   /* float32 copies: %s; chunks of %lld of %lld %s */\n", fmt_bytes(cv.bytes),
            (long long)cv.chunk, (long long)cv.units, cv.axis == CHUNK_FLAT ? "elements"
            : cv.axis == CHUNK_IMAGES ? "images" : "channels");
  int names = 0;
  for (int k = 0; k < slots; k++) {
    bool out = k >= n->nin;
    const ConvertSlot *s = out ? &cv.out[k - n->nin] : &cv.in[k];
    if (s->tensor < 0 || !s->copy || s->same >= 0) continue;
    name[k] = xasprintf("s%d", names++);
    fprintf(f, "    float *const %s = F(0x%llx);   /* %s%s */\n", name[k],
            (unsigned long long)(base + s->at), emit_comment_safe(g->t[s->tensor].name),
            s->chunked ? ", a chunk" : "");
  }
  /* Inputs that do not follow the chunks: once, before them. */
  for (int k = 0; k < n->nin; k++) {
    const ConvertSlot *s = &cv.in[k];
    if (s->tensor < 0 || !s->copy || s->same >= 0 || s->chunked) continue;
    fprintf(f, "    snrt_%s_%s(c, %s, %s, %lld);\n", fmt_of(g, s->dtype), is16(s->dtype) ? "load" : "round",
            emit_ptr(e, st->in[k], s->tensor), name[k], (long long)tensor_numel(&g->t[s->tensor]));
  }
  int64_t full = cv.units / cv.chunk * cv.chunk, rest = cv.units - full;
  if (cv.axis == CHUNK_WHOLE || cv.chunk == cv.units) {
    emit_pass(e, n, &cv, name, "0", cv.units, true);
  } else {
    /* A step whose later chunks add to its output runs its first chunk
     * apart (it overwrites). */
    int64_t from = cv.accumulates ? cv.chunk : 0;
    if (cv.accumulates) emit_pass(e, n, &cv, name, "0", cv.chunk, true);
    if (full > from) {
      fprintf(f, "    for (int64_t u = %lld; u < %lld; u += %lld) {\n", (long long)from, (long long)full,
              (long long)cv.chunk);
      emit_pass(e, n, &cv, name, "u", cv.chunk, !cv.accumulates);
      fprintf(f, "    }\n");
    }
    if (rest > 0) {
      char u[32];
      snprintf(u, sizeof u, "%lld", (long long)full);
      emit_pass(e, n, &cv, name, u, rest, !cv.accumulates);
    }
  }
  /* Outputs that do not follow the chunks: once, after them. */
  for (int j = 0; j < n->nout; j++) {
    const ConvertSlot *s = &cv.out[j];
    if (s->tensor < 0 || !s->copy || s->chunked) continue;
    fprintf(f, "    snrt_%s_store(c, %s, %s, %lld);\n", fmt_of(g, s->dtype), name[n->nin + j],
            emit_ptr(e, st->out[j], s->tensor), (long long)tensor_numel(&g->t[s->tensor]));
  }
  fprintf(f, "  }\n");
  for (int k = 0; k < slots; k++) free(name[k]);
  free(name);
  unwrap(e, n, &cv);
  return true;
}
