/* test_copy_engine.c — the CPU copy engine keeps CUDA's ordering rules, no
 * stronger ones, so that a schedule relying on an order CUDA does not give
 * fails here too:
 *   - the two directions are independent queues: a prefetch does not wait
 *     for an offload issued before it (CUDA: two copy streams);
 *   - one direction runs in issue order: a wait for a copy covers the copies
 *     issued before it on the same queue (a stream is in order);
 *   - lazy mode (SNRT_COPY_LAZY=1) runs a copy only when it is waited for;
 *   - SNRT_SKIP_WAIT=E skips exactly the waits for event E;
 *   - poison mode's read check (snrt_reads) stops on a poisoned input with
 *     exit 4 and passes clean ones.
 * Prints "N checks, F failures"; exits non-zero on any failure. */
#include "snrt_dev.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int checks, fails;

#define CHECK(cond, ...)                                    \
  do {                                                      \
    checks++;                                               \
    if (!(cond)) {                                          \
      fails++;                                              \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);           \
      printf(__VA_ARGS__);                                  \
      printf("\n");                                         \
    }                                                       \
  } while (0)

static snrt_model model = {.name = "copy-engine-test", .arena_bytes = 1 << 16, .host_bytes = 1 << 16};

static void start(snrt_ctx *c, bool poison) {
  memset(c, 0, sizeof *c);
  c->m = &model;
  c->threads = 1;
  c->poison = poison;
  snrt_dev_init(c);
}

static void fill(char *p, int64_t bytes, float v) {
  for (int64_t i = 0; i < bytes / 4; i++) ((float *)p)[i] = v;
}

static bool all(const char *p, int64_t bytes, float v) {
  for (int64_t i = 0; i < bytes / 4; i++)
    if (((const float *)p)[i] != v) return false;
  return true;
}

static void directions_are_independent(void) {
  snrt_ctx c;
  start(&c, false);
  char *A = snrt_arena(&c);
  fill(A, 1024, 1.0f);
  snrt_offload(&c, 0, 0, 1024, 0);        /* device [0,1K) -> host [0,1K) */
  snrt_prefetch(&c, 4096, 0, 1024, 1);    /* host [0,1K) -> device [4K,5K), no wait between */
  snrt_wait(&c, 1);
  /* Lazy: the offload has not run (nobody waited for it), so the prefetch
   * read the host arena as it was: zeros. One shared FIFO would give 1.0. */
  CHECK(all(A + 4096, 1024, 0.0f), "a prefetch waited for an earlier offload: the two "
        "directions share one queue (CUDA's copy streams do not)");
  snrt_wait(&c, 0);
  snrt_prefetch(&c, 8192, 0, 1024, 2);
  snrt_wait(&c, 2);
  CHECK(all(A + 8192, 1024, 1.0f), "after waiting for the offload, a prefetch reads its data");
  snrt_dev_free(&c);
}

static void one_direction_is_in_order(void) {
  snrt_ctx c;
  start(&c, false);
  char *A = snrt_arena(&c);
  fill(A, 1024, 2.0f);
  fill(A + 1024, 1024, 3.0f);
  snrt_offload(&c, 0, 0, 1024, 3);
  snrt_offload(&c, 1024, 1024, 1024, 4);
  snrt_wait(&c, 4);                      /* covers event 3: same queue, issued before */
  fill(A, 2048, -1.0f);                  /* reuse both regions */
  snrt_prefetch(&c, 4096, 0, 2048, 5);
  snrt_wait(&c, 5);
  CHECK(all(A + 4096, 1024, 2.0f) && all(A + 5120, 1024, 3.0f),
        "a wait for a copy did not cover the earlier copy on its queue");
  snrt_dev_free(&c);
}

static void lazy_copies_wait_to_be_asked(void) {
  snrt_ctx c;
  start(&c, false);
  char *A = snrt_arena(&c);
  char *H = c.host;
  fill(A, 1024, 4.0f);
  snrt_offload(&c, 2048, 0, 1024, 6);
  usleep(20000);
  CHECK(all(H + 2048, 1024, 0.0f), "a lazy copy ran before anything waited for it");
  snrt_dev_sync(&c);
  CHECK(all(H + 2048, 1024, 4.0f), "sync did not run the pending copy");
  snrt_dev_free(&c);
}

static void skip_wait_skips_one_event(void) {
  setenv("SNRT_SKIP_WAIT", "7", 1);
  snrt_ctx c;
  start(&c, false);
  char *A = snrt_arena(&c);
  char *H = c.host;
  fill(H, 1024, 5.0f);
  snrt_prefetch(&c, 0, 0, 1024, 7);
  snrt_wait(&c, 7);                      /* skipped: the copy has not run */
  CHECK(all(A, 1024, 0.0f), "SNRT_SKIP_WAIT=7 did not skip the wait for event 7");
  snrt_prefetch(&c, 1024, 0, 1024, 8);
  snrt_wait(&c, 8);                      /* not skipped; covers 7 (same queue) */
  CHECK(all(A, 1024, 5.0f) && all(A + 1024, 1024, 5.0f), "the wait for event 8 did not run");
  snrt_dev_free(&c);
  unsetenv("SNRT_SKIP_WAIT");
}

/* Runs snrt_reads over [off, off+bytes) in a child; returns its exit status. */
static int reads_in_child(int64_t off, int64_t bytes) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    snrt_ctx c;
    start(&c, true);                     /* poison mode: the arena starts poisoned */
    fill(snrt_arena(&c), 4096, 1.5f);    /* written: [0, 4K) */
    freopen("/dev/null", "w", stderr);
    int64_t regions[2] = {off, bytes};
    snrt_reads(&c, 12, 1, regions);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}

static void poisoned_reads_stop(void) {
  CHECK(reads_in_child(0, 4096) == 0, "a written region was reported as poisoned");
  CHECK(reads_in_child(0, 4100) == SNRT_EXIT_DEVICE, "a read one word past the written bytes "
        "(into never-written, poisoned memory) was not caught");
  CHECK(reads_in_child(8192, 64) == SNRT_EXIT_DEVICE, "a read of never-written memory was not caught");
  snrt_ctx c;
  start(&c, false);                      /* without --poison: no check, no poison */
  int64_t regions[2] = {8192, 64};
  snrt_reads(&c, 0, 1, regions);
  CHECK(all(snrt_arena(&c) + 8192, 64, 0.0f), "without --poison the arena starts zeroed");
  snrt_dev_free(&c);
}

int main(void) {
  setenv("SNRT_COPY_LAZY", "1", 1);
  directions_are_independent();
  one_direction_is_in_order();
  lazy_copies_wait_to_be_asked();
  skip_wait_skips_one_event();
  poisoned_reads_stop();
  printf("copy engine: %d checks, %d failures\n", checks, fails);
  return fails ? 1 : 0;
}
