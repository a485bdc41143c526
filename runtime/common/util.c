/* util.c — what every part of the emitted program's runtime uses: the
 * program's name, one-line errors and warnings, allocation that exits when
 * memory runs out, the executable's folder.
 *
 * What it is not: flag parsing (flags.c) or the run (main.c). */
#include "rt.h"

#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *rt_prog = "train";

void rt_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fflush(stdout);
  fprintf(stderr, "%s: error: ", rt_prog);
  if (rt_ranks > 1) fprintf(stderr, "rank %d of %d: ", rt_rank, rt_ranks);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  rt_dist_abort(code);   /* every rank ends (exit(code) with one) */
}

void rt_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fflush(stdout);
  fprintf(stderr, "%s: warning: ", rt_prog);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

void *rt_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) rt_fail(SNRT_EXIT_DEVICE, "out of host memory (%zu bytes)", n);
  return p;
}

const char *rt_exe_dir(void) {
  static char dir[PATH_MAX];
  if (!dir[0]) {
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n <= 0) {
      strcpy(dir, ".");
    } else {
      dir[n] = 0;
      char *slash = strrchr(dir, '/');
      if (slash == dir) dir[1] = 0;
      else if (slash) *slash = 0;
      else strcpy(dir, ".");
    }
  }
  return dir;
}
