/* check.h — the C unit tests' checks: each failed check prints FILE:LINE
 * and what failed, and counts in `failures` (main exits non-zero if any). */
#ifndef SNC_UNIT_CHECK_H
#define SNC_UNIT_CHECK_H

#include <stdio.h>
#include <string.h>

static int failures;
#define CHECK(cond)                                                         \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                           \
    }                                                                       \
  } while (0)
#define CHECK_EQ(want, got)                                                 \
  do {                                                                      \
    long long w_ = (long long)(want), g_ = (long long)(got);                \
    if (w_ != g_) {                                                         \
      fprintf(stderr, "%s:%d: %s: want %lld, got %lld\n", __FILE__, __LINE__, #got, w_, g_); \
      failures++;                                                           \
    }                                                                       \
  } while (0)
/* text contains s (both printed when it does not). */
#define CONTAINS(text, s)                                                   \
  do {                                                                      \
    const char *t_ = (text), *s_ = (s);                                     \
    if (!t_ || !strstr(t_, s_)) {                                           \
      fprintf(stderr, "%s:%d: check failed: %s contains \"%s\"; it is:\n%s\n", __FILE__, \
              __LINE__, #text, s_, t_ ? t_ : "(null)");                     \
      failures++;                                                           \
    }                                                                       \
  } while (0)

#endif /* SNC_UNIT_CHECK_H */
