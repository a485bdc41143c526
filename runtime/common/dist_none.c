/* dist_none.c — the data-parallel layer of a program that runs as one
 * process: rank 0 of 1, and nothing to exchange.
 *
 * What it is: the stand-in that libsnrt_cpu.a (and libsnrt_cuda.a) carries so
 * that the program links without MPI. A --dist program links build/snrt_mpi.o
 * (runtime/dist/mpi.c) ahead of the library, which defines the same symbols,
 * so the linker never takes this object. Keep the two lists in step. */
#include "rt.h"

#include <stdlib.h>
#include <string.h>

int rt_rank = 0, rt_ranks = 1;
double rt_comm_timeout = 300;

void rt_dist_init(int *argc, char ***argv) { (void)argc, (void)argv; }
void rt_dist_finalize(void) {}
noreturn void rt_dist_abort(int code) { exit(code); }
void rt_dist_agree(const char *const *names, const uint64_t *v, int n) { (void)names, (void)v, (void)n; }
void rt_dist_bcast(void *buf, int64_t bytes) { (void)buf, (void)bytes; }
void rt_dist_sum(double *v, int n, const char *what) { (void)v, (void)n, (void)what; }
void rt_dist_times(double *comm, double *exposed, double *sync) { *comm = *exposed = *sync = 0; }

void rt_dist_gather(const void *send, void *recv, int64_t bytes) { memcpy(recv, send, (size_t)bytes); }
void rt_dist_scatter(const void *send, void *recv, int64_t bytes) { memcpy(recv, send, (size_t)bytes); }

/* Only a --dist train.c calls these, and it links the MPI layer. */
void snrt_comm_start(snrt_ctx *c, int id, int kind, int n, const int64_t *pieces) {
  (void)c, (void)kind, (void)n, (void)pieces;
  rt_fail(SNRT_EXIT_DEVICE, "exchange %d: this program was linked without the MPI layer "
          "(build/snrt_mpi.o); rebuild it with ninja -C DIR after ./configure.py finds MPI", id);
}
void snrt_comm_wait(snrt_ctx *c, int id) { snrt_comm_start(c, id, 0, 0, NULL); }
void snrt_comm_progress(snrt_ctx *c) { (void)c; }
int snrt_rank(snrt_ctx *c) { (void)c; return 0; }
