/* setup.c — the emitted program from its flags to its first step: the
 * checks of the compiled model against the flags and the launcher, the data,
 * the device, the tensors' initial values or the checkpoint it resumes
 * (with --dist, every rank agrees on the flags and starts from rank 0's
 * state), then the banner.
 *
 * What it is not: the flags' syntax (flags.c), the step loop (steps.c). */
#include "rt.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* OMP_WAIT_POLICY=passive unless the user set a policy: threads waiting at
 * the end of a parallel region sleep instead of spinning. On a machine
 * shared with other work (CI, a laptop) spinning threads hold the cores their
 * partners need: a 2-thread step of the example CNN measured 2-8x slower
 * with libgomp's default spinning. libgomp reads the variable once, when it
 * is loaded (before main), so setting it here only takes effect by running
 * the program again; if that fails it runs on with the default policy. */
void rt_wait_policy(char **argv) {
  if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1)) return;
  execv("/proc/self/exe", argv);
}

/* ---- data parallel ------------------------------------------------------------ */

/* The rank count a launcher (mpirun, srun through PMI) announces; 1 if none. */
static int ranks_from_launcher(void) {
  const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
  for (int i = 0; i < 3; i++) {
    const char *v = getenv(vars[i]);
    if (v && atoi(v) > 1) return atoi(v);
  }
  return 1;
}

/* Every rank must run the same program on the same data with the same
 * flags that shape training (threads and file names may differ). */
static void agree(const rt_opts *o, const snrt_model *m, const rt_data *train, const rt_data *test) {
  static const char *const names[] = {
      "the runtime's layout version", "the model and plan (fingerprint)", "the per-rank batch",
      "the arena size (the plan)", "the tensor table", "the training set's size",
      "the test set's size", "--seed", "--steps", "--epochs", "--lr", "--resume (given or not)",
      "the mode of --normalize", "--save (given or not)", "--save-every"};
  uint32_t lr_bits;
  float lr = o->lr_set ? o->lr : m->lr;
  memcpy(&lr_bits, &lr, 4);
  uint64_t v[] = {1, m->fingerprint, (uint64_t)m->batch, (uint64_t)m->arena_bytes,
                  (uint64_t)m->ntensors, (uint64_t)rt_data_count(train),
                  test ? (uint64_t)rt_data_count(test) : 0, o->seed, (uint64_t)o->steps,
                  (uint64_t)o->epochs, lr_bits, o->resume != NULL, (uint64_t)o->nnorm,
                  o->save != NULL, (uint64_t)o->save_every};
  rt_dist_agree(names, v, (int)(sizeof v / sizeof v[0]));
}

/* Rank 0's parameters, state, optimizer state and position to every rank:
 * the same start whatever each rank initialized or loaded. */
static void share_state(snrt_ctx *c, rt_position *pos) {
  const snrt_model *m = c->m;
  rt_dist_bcast(pos, sizeof *pos);
  for (int i = 0; i < m->ntensors; i++) {
    const snrt_tensor *t = &m->tensors[i];
    if (t->kind != SNRT_T_PARAM && t->kind != SNRT_T_STATE && t->kind != SNRT_T_OPT) continue;
    void *buf = rt_xmalloc((size_t)t->nbytes);
    if (rt_rank == 0) rt_tensor_read(c, i, buf);
    rt_dist_bcast(buf, t->nbytes);
    if (rt_rank != 0) rt_tensor_write(c, i, buf);
    free(buf);
  }
}

/* ---- setup -------------------------------------------------------------------- */

/* What the compiled model and the launcher allow of the flags. */
static void check_model(const rt_opts *o, const snrt_model *m, int *argc, char ***argv) {
  if (m->dist) rt_dist_init(argc, argv);
  else if (ranks_from_launcher() > 1)
    rt_fail(SNRT_EXIT_USAGE, "this program was compiled without --dist mpi, so under mpirun "
            "(%d ranks) each rank would train alone and write the same files: compile with "
            "snc compile ... --dist mpi, or run it as one process", ranks_from_launcher());
  if (m->zero && rt_ranks != m->zero)
    rt_fail(SNRT_EXIT_USAGE, "this program was compiled with --zero 1 --ranks %d (its optimizer "
            "state is split in %d): run it as mpirun -np %d, not with %d rank%s", m->zero, m->zero,
            m->zero, rt_ranks, rt_ranks == 1 ? "" : "s");
  if (m->zero && o->dump_grads)
    rt_fail(SNRT_EXIT_USAGE, "--dump-grads: under --zero 1 each rank holds the averaged gradient "
            "of its own share of the parameters only");
  if (m->batch < 1 || m->input < 0 || m->input >= m->ntensors || m->label < 0 ||
      m->label >= m->ntensors || m->loss < 0 || m->loss >= m->ntensors || m->logits < 0 ||
      m->logits >= m->ntensors)
    rt_fail(SNRT_EXIT_DATA, "the compiled model descriptor is inconsistent (input/label/loss/logits)");

  if (o->generate && (m->tensors[m->input].dtype != SNRT_I32 || m->classes != 256 ||
                      rt_label_positions(m) < 2 ||
                      rt_label_positions(m) != m->tensors[m->input].nbytes / 4 / m->batch))
    rt_fail(SNRT_EXIT_USAGE, "--generate needs a byte-level language model (token ids in, "
            "(batch, T, 256) logits out)");
}

/* The device, the loss scale, initial values, then --resume's checkpoint. */
static void start_tensors(rt_run *r) {
  const snrt_model *m = r->m;
  snrt_ctx *c = &r->c;
  const rt_opts *o = &r->o;
  snrt_dev_init(c);
  /* --precision fp16: GradScaler's initial scale and growth interval
   * (SNRT_LOSS_SCALE, SNRT_LOSS_SCALE_INTERVAL: testing aids). A checkpoint's
   * scale, when resuming, replaces the initial one. */
  c->loss_scale = 65536.0f;
  c->scale_interval = 2000;
  const char *ls = getenv("SNRT_LOSS_SCALE");
  if (ls && *ls) c->loss_scale = strtof(ls, NULL);
  const char *li = getenv("SNRT_LOSS_SCALE_INTERVAL");
  if (li && *li && atoll(li) > 0) c->scale_interval = atoll(li);
  snrt_dev_scale_sync(c, false);
  c->grad_copy = calloc((size_t)m->ntensors, sizeof(float *));
  if (!c->grad_copy) rt_fail(SNRT_EXIT_DEVICE, "out of host memory");
  rt_init_tensors(c);
  /* Data parallel: rank 0 reads the checkpoint; every rank starts from rank
   * 0's parameters, state and position. */
  if (o->resume && rt_rank == 0) rt_checkpoint_load(c, o->resume, &r->pos);
  if (rt_ranks > 1) share_state(c, &r->pos);
  if (m->zero && o->resume) rt_zero_scatter(c);
  if (o->resume) {
    if (r->pos.seed != o->seed) {
      /* The seed fixes the data order and dropout: the checkpoint's wins. */
      c->seed = r->pos.seed;
      /* Synthetic data is a function of the seed too. */
      rt_data_free(r->train);
      r->train = rt_data_load(o->data, m, c->seed, o);
    }
    if (r->pos.pos >= r->nb && !o->predict)   /* --predict trains on nothing */
      rt_fail(SNRT_EXIT_DATA, "checkpoint %s is at batch %lld of its epoch, but %s has only %lld batches",
              o->resume, (long long)r->pos.pos, o->data, (long long)r->nb);
    c->step = r->pos.step;
  }
}

void rt_setup(rt_run *r, int *argc, char ***argv) {
  const rt_opts *o = &r->o;
  const snrt_model *m = r->m = &snrt_the_model;
  check_model(o, m, argc, argv);
  r->c = (snrt_ctx){.m = m, .lr = o->lr_set ? o->lr : m->lr, .seed = o->seed, .poison = o->poison,
                    .dump_grads = o->dump_grads != NULL, .threads = o->threads};
  r->pos = (rt_position){.step = 0, .epoch = 0, .pos = 0, .seed = o->seed};
  r->train = rt_data_load(o->data, m, o->seed, o);
  r->test = o->eval ? rt_data_load(o->eval, m, o->seed, o) : NULL;
  r->gbatch = (int64_t)m->batch * rt_ranks;
  r->nb = rt_data_count(r->train) / r->gbatch;
  if (r->nb < 1)
    rt_fail(SNRT_EXIT_DATA, "%s has %lld samples, fewer than one batch of %lld", o->data,
            (long long)rt_data_count(r->train), (long long)r->gbatch);
  if (rt_ranks > 1) agree(o, m, r->train, r->test);
  start_tensors(r);
  r->lead = rt_rank == 0;
}

void rt_banner(rt_run *r) {
  const snrt_model *m = r->m;
  if (r->lead) {
    if (m->dist)
      printf("%s: data parallel, %d rank%s x batch %d = global batch %lld, %d all-reduce bucket%s\n",
             rt_prog, rt_ranks, rt_ranks == 1 ? "" : "s", m->batch, (long long)r->gbatch,
             m->buckets, m->buckets == 1 ? "" : "s");
    printf("%s: %s, batch %d, arena %.2f MiB (policy %s), host arena %.2f MiB, %s\n", rt_prog,
           m->name ? m->name : "model", m->batch, m->arena_bytes / 1048576.0,
           m->policy ? m->policy : "?", m->host_bytes / 1048576.0, snrt_dev_describe(&r->c));
    if (m->precision)
      printf("%s: precision %s: activations and their gradients in %s, fp32 master weights; "
             "float32 working copies in the planned arena (largest step %.2f MiB)\n", rt_prog,
             m->precision, strcmp(m->precision, "fp16") == 0 ? "float16" : "bfloat16",
             m->convert_bytes / 1048576.0);
  }
  if (r->o.resume && r->lead)
    printf("%s: resumed from %s at step %lld (epoch %lld, batch %lld)\n", rt_prog, r->o.resume,
           (long long)r->pos.step, (long long)r->pos.epoch + 1, (long long)r->pos.pos);
  fflush(stdout);
}
