/* util.c — errors, checked allocation, sizes, hashing.
 * Every failure of the compiler goes through fatal()/node_error() (bad input,
 * exit 2; usage, exit 1) or internal_error() (a bug in snc, exit 3).
 * For the in-process fuzzer (tests/fuzz/) errors can longjmp instead of
 * exiting, and allocations can be tracked so that one input's memory is
 * released at once, however far a pass got. */
#include "snc.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *err_file;
jmp_buf *snc_error_jmp;
int snc_error_code;
bool snc_error_quiet;

/* Ends the compiler after an error message: exit(code), or, under the fuzzer,
 * a longjmp back to it. An internal error is a bug: the fuzzer must see it as
 * a crash, so it aborts there. */
static noreturn void finish(int code) {
  if (snc_error_jmp) {
    if (code == EXIT_INTERNAL) abort();
    snc_error_code = code;
    longjmp(*snc_error_jmp, 1);
  }
  exit(code);
}

/* The error stream: stderr, or nothing under a quiet fuzzer. */
static FILE *err_out(void) {
  static FILE *null;
  if (!snc_error_quiet) return stderr;
  if (!null) null = fopen("/dev/null", "w");
  return null ? null : stderr;
}

noreturn void fatal(int code, const char *fmt, ...) {
  FILE *f = err_out();
  va_list ap;
  va_start(ap, fmt);
  fprintf(f, "snc: error: ");
  if (err_file && code == EXIT_BADINPUT) fprintf(f, "%s: ", err_file);
  vfprintf(f, fmt, ap);
  fprintf(f, "\n");
  va_end(ap);
  finish(code);
}

noreturn void node_error(const Node *n, const char *fmt, ...) {
  FILE *f = err_out();
  va_list ap;
  va_start(ap, fmt);
  fprintf(f, "snc: error: ");
  if (err_file) fprintf(f, "%s: ", err_file);
  vfprintf(f, fmt, ap);
  fprintf(f, " (node '%s', op %s)\n", n->name ? n->name : "", node_op_name(n));
  va_end(ap);
  finish(EXIT_BADINPUT);
}

/* Always on stderr: under the fuzzer it precedes the abort() it reports. */
noreturn void internal_error(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "snc: internal error at %s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (please report this with the model)\n");
  va_end(ap);
  finish(EXIT_INTERNAL);
}

static noreturn void out_of_memory(size_t n) {
  fatal(EXIT_BADINPUT, "out of memory allocating %zu bytes", n);
}

/* ---- allocation tracking (the fuzzer only) ----
 * A set of live pointers (open addressing, linear probing, backward-shift
 * deletion). Off by default: then each x*alloc pays one branch. */
static bool track_on;
static void **track;
static size_t track_cap, track_n;   // cap: a power of two, or 0

static size_t track_home(const void *p) {
  uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull;
  return (size_t)(h >> 20) & (track_cap - 1);
}

static void track_add(void *p) {
  if (2 * (track_n + 1) > track_cap) {
    void **old = track;
    size_t oldcap = track_cap;
    track_cap = oldcap ? oldcap * 2 : 1024;
    track = calloc(track_cap, sizeof *track);
    if (!track) abort();   // the fuzzer's own bookkeeping; not a model fault
    track_n = 0;
    for (size_t i = 0; i < oldcap; i++)
      if (old[i]) track_add(old[i]);
    (free)(old);
  }
  size_t h = track_home(p);
  while (track[h]) h = (h + 1) & (track_cap - 1);
  track[h] = p;
  track_n++;
}

static void track_del(void *p) {
  if (!track_cap || !p) return;
  size_t h = track_home(p);
  while (track[h] && track[h] != p) h = (h + 1) & (track_cap - 1);
  if (!track[h]) return;   // not ours (libc's, or allocated before tracking began)
  track[h] = NULL;
  track_n--;
  /* Backward shift: re-seat the rest of the cluster. */
  for (size_t j = (h + 1) & (track_cap - 1); track[j]; j = (j + 1) & (track_cap - 1)) {
    void *q = track[j];
    track[j] = NULL;
    track_n--;
    track_add(q);
  }
}

void snc_alloc_track(bool on) { track_on = on; }

void snc_alloc_release(void) {
  for (size_t i = 0; i < track_cap; i++)
    if (track[i]) (free)(track[i]), track[i] = NULL;
  track_n = 0;
}

void snc_free(void *p) {
  if (track_on) track_del(p);
  (free)(p);
}

void *xmalloc_try(size_t n) {
  void *p = malloc(n ? n : 1);
  if (p && track_on) track_add(p);
  return p;
}

void *xmalloc(size_t n) {
  void *p = xmalloc_try(n);
  if (!p) out_of_memory(n);
  return p;
}

void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) out_of_memory(n > SIZE_MAX / (size ? size : 1) ? SIZE_MAX : n * size);
  if (track_on) track_add(p);
  return p;
}

void *xrealloc(void *p, size_t n) {
  if (track_on) track_del(p);   // before realloc: afterwards p may not be read
  void *q = realloc(p, n ? n : 1);
  if (!q) {
    if (track_on && p) track_add(p);
    out_of_memory(n);
  }
  if (track_on) track_add(q);
  return q;
}

char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(xmalloc(n), s, n);
}

char *xasprintf(const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = xmalloc((size_t)n + 1);
  vsnprintf(s, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

void xgrow(void **arr, int *cap, int need, size_t size) {
  if (need <= *cap) return;
  int c = *cap ? *cap : 8;
  while (c < need) {
    if (c > (1 << 29)) fatal(EXIT_BADINPUT, "too many elements (%d)", need);
    c *= 2;
  }
  *arr = xrealloc(*arr, (size_t)c * size);
  *cap = c;
}

#define ABSURD ((int64_t)1 << 48)

int64_t mul_checked(int64_t a, int64_t b, const char *what) {
  if (a < 0 || b < 0) fatal(EXIT_BADINPUT, "negative size in %s", what);
  if (a != 0 && b > ABSURD / a) fatal(EXIT_BADINPUT, "absurd size in %s (over 2^48)", what);
  return a * b;
}

int64_t parse_size(const char *s) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno || !(v >= 0) || v > 1e18) return -1;
  while (isspace((unsigned char)*end)) end++;
  static const struct { const char *suffix; double mult; } units[] = {
      {"", 1},         {"B", 1},         {"KiB", 1024.0}, {"MiB", 1048576.0},
      {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6},
      {"GB", 1e9},     {"TB", 1e12},     {"K", 1024.0},   {"M", 1048576.0},
      {"G", 1073741824.0},
  };
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (strcmp(end, units[i].suffix) == 0) {
      double b = v * units[i].mult;
      if (b > 9e18) return -1;
      return (int64_t)llround(b);
    }
  return -1;
}

const char *fmt_bytes(int64_t b) {
  static char buf[8][32];
  static int k;
  char *s = buf[k++ & 7];
  double v = (double)b;
  if (b < 1024) snprintf(s, 32, "%lld B", (long long)b);
  else if (v < 1048576.0) snprintf(s, 32, "%.1f KiB", v / 1024.0);
  else if (v < 1073741824.0) snprintf(s, 32, "%.1f MiB", v / 1048576.0);
  else snprintf(s, 32, "%.2f GiB", v / 1073741824.0);
  return s;
}

/* FNV-1a, 64-bit. */
uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  if (!h) h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}
