/* checkpoint.c — --save and --resume.
 *
 * What it is: one file holding every persistent tensor (parameters, state
 * such as BN running statistics, optimizer state) and the position in
 * training (global step, which also drives dropout masks and Adam's bias
 * correction; epoch and batch within it, which with the seed fix the data
 * order). Layout, little-endian:
 *
 *   0  "SNRTCKPT"   8  u32 version   12 u32 kinds   16 u64 FNV-1a of bytes 24..end
 *   24 u64 bytes after 24   32 u64 fingerprint   40 i32 batch   44 i32 count
 *   48 i64 step   56 i64 epoch   64 i64 pos   72 u64 seed
 *   80 f64 loss scale   88 i64 good steps   96 i64 skipped steps
 *   104 count x { u32 name length, name, i64 nbytes, data }
 *
 * Bytes 80..103 (version 2) are fp16's dynamic loss scaling: the scale, the
 * steps since it last changed without an overflow (it doubles at 2000) and
 * the steps skipped so far, so that --resume continues the scaling exactly;
 * the scale is 0 in a checkpoint of another precision, and a program of
 * another precision ignores them. Version 1 files (written before the loss
 * scale was saved) have no such bytes, their tensors start at 80; they still
 * load, and an fp16 program then starts again from the initial scale.
 *
 * kinds: 1 + the optimizer (enum snrt_opt_kind) in bits 0-7, 1 + the loss
 * (enum snrt_loss_kind) in bits 8-15; 0 in files written before it existed.
 * The fingerprint covers both; kinds only lets the refusal say why.
 *
 * batch is the global batch: ranks x the compiled batch for a --dist
 * program (whose fingerprint leaves the batch out, so any rank count may
 * resume a checkpoint of the same global batch), the compiled batch otherwise.
 *
 * Saving writes FILE.tmp, fsyncs it and renames it over FILE, so a crash or a
 * full disk leaves the previous checkpoint intact. Loading refuses a file
 * that is truncated, corrupted (checksum), or from another model, optimizer,
 * loss or batch.
 *
 * What it is not: export to ONNX (export.c). */
#include "rt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CKPT_MAGIC "SNRTCKPT"
#define CKPT_VERSION 2u
#define CKPT_HEADER 104
#define CKPT_HEADER_V1 80

static uint64_t fnv1a(const uint8_t *p, size_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001B3ull;
  }
  return h;
}

static const char *opt_name(int k) {
  return k == SNRT_OPT_SGD ? "sgd" : k == SNRT_OPT_ADAM ? "adam" : k == SNRT_OPT_ADAMW ? "adamw" : "?";
}

static const char *loss_name(int k) {
  return k == SNRT_LOSS_SOFTMAX_CE ? "softmax-ce" : k == SNRT_LOSS_MSE ? "mse" : "?";
}

static uint32_t kinds_of(const snrt_model *m) {
  return (uint32_t)(1 + m->opt_kind) | (uint32_t)(1 + m->loss_kind) << 8;
}

static bool persistent(const snrt_tensor *t) {
  return t->kind == SNRT_T_PARAM || t->kind == SNRT_T_STATE || t->kind == SNRT_T_OPT;
}

int rt_write_atomic(const char *path, const void *buf, size_t n) {
  size_t plen = strlen(path);
  char *tmp = rt_xmalloc(plen + 5);
  memcpy(tmp, path, plen);
  memcpy(tmp + plen, ".tmp", 5);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    int e = errno;
    free(tmp);
    errno = e;
    return -1;
  }
  const char *p = buf;
  size_t left = n;
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      goto fail;
    }
    p += w;
    left -= (size_t)w;
  }
  if (fsync(fd) != 0) goto fail;
  if (close(fd) != 0) {
    fd = -1;
    goto fail;
  }
  fd = -1;
  if (rename(tmp, path) != 0) goto fail;
  free(tmp);
  return 0;
fail:;
  int e = errno;
  if (fd >= 0) close(fd);
  unlink(tmp);
  free(tmp);
  errno = e;
  return -1;
}

/* ---- --zero 1: the optimizer state of a sharded program --------------------
 *
 * Each rank holds, per kind of optimizer state, one shard tensor: its
 * zero_shard elements of the flat parameter space. A checkpoint holds the
 * state per parameter, under the names and in the places the unsharded
 * program uses (after each parameter: "<param>.momentum", or ".adam_m" and
 * ".adam_v"), so that any rank count, sharded or not, resumes it: saving
 * gathers the shards to rank 0, loading scatters them from it. */

static int zero_shards(const snrt_model *m, int *idx) {
  int k = 0;
  for (int i = 0; i < m->ntensors && k < 2; i++)
    if (m->tensors[i].kind == SNRT_T_SHARD) idx[k++] = i;
  return k;
}

/* ".momentum" from "zero.momentum" */
static const char *shard_suffix(const snrt_tensor *t) {
  const char *dot = strchr(t->name, '.');
  return dot ? dot : "";
}

static float *zero_flat_state;   /* rank 0: [shard][ranks x zero_shard] */

static float *zero_gather(snrt_ctx *c) {
  const snrt_model *m = c->m;
  int idx[2], ns = zero_shards(m, idx);
  size_t per = (size_t)m->zero_shard, all = per * (size_t)rt_ranks;
  float *flat = rt_xmalloc(sizeof(float) * all * (size_t)(ns ? ns : 1));
  float *mine = rt_xmalloc(sizeof(float) * per);
  for (int s = 0; s < ns; s++) {
    rt_tensor_read(c, idx[s], mine);
    rt_dist_gather(mine, flat + (size_t)s * all, (int64_t)(sizeof(float) * per));
  }
  free(mine);
  return flat;
}

void rt_zero_scatter(snrt_ctx *c) {
  const snrt_model *m = c->m;
  int idx[2], ns = zero_shards(m, idx);
  size_t per = (size_t)m->zero_shard, all = per * (size_t)rt_ranks;
  float *mine = rt_xmalloc(sizeof(float) * per);
  for (int s = 0; s < ns; s++) {
    rt_dist_scatter(rt_rank == 0 ? zero_flat_state + (size_t)s * all : NULL, mine,
                    (int64_t)(sizeof(float) * per));
    rt_tensor_write(c, idx[s], mine);
  }
  free(mine);
  free(zero_flat_state);
  zero_flat_state = NULL;
}

/* Whether tensor i is a parameter with per-parameter optimizer entries. */
static bool zero_param(const snrt_model *m, int i) {
  return m->zero && m->tensors[i].kind == SNRT_T_PARAM && m->zero_flat && m->zero_flat[i] >= 0;
}

static void put(uint8_t **p, const void *v, size_t n) {
  memcpy(*p, v, n);
  *p += n;
}

void rt_checkpoint_save(snrt_ctx *c, const char *path, const rt_position *pos) {
  const snrt_model *m = c->m;
  /* --zero 1: every rank sends its shards; rank 0 writes. */
  float *flat = m->zero ? zero_gather(c) : NULL;
  if (rt_rank != 0) {
    free(flat);
    return;
  }
  int zidx[2], zn = m->zero ? zero_shards(m, zidx) : 0;
  size_t zall = (size_t)m->zero_shard * (size_t)rt_ranks;
  size_t size = CKPT_HEADER;
  int32_t count = 0;
  for (int i = 0; i < m->ntensors; i++) {
    const snrt_tensor *t = &m->tensors[i];
    for (int s = 0; zero_param(m, i) && s < zn; s++) {
      size += 4 + strlen(t->name) + strlen(shard_suffix(&m->tensors[zidx[s]])) + 8 + (size_t)t->nbytes;
      count++;
    }
    if (!persistent(t)) continue;
    size += 4 + strlen(t->name) + 8 + (size_t)t->nbytes;
    count++;
  }
  uint8_t *buf = rt_xmalloc(size);
  uint8_t *p = buf;
  uint32_t version = CKPT_VERSION, kinds = kinds_of(m);
  uint64_t sum = 0, len = size - 24;
  int32_t batch = m->batch * rt_ranks;   /* the global batch (--dist: ranks x batch) */
  put(&p, CKPT_MAGIC, 8);
  put(&p, &version, 4);
  put(&p, &kinds, 4);
  put(&p, &sum, 8);
  put(&p, &len, 8);
  put(&p, &m->fingerprint, 8);
  put(&p, &batch, 4);
  put(&p, &count, 4);
  put(&p, &pos->step, 8);
  put(&p, &pos->epoch, 8);
  put(&p, &pos->pos, 8);
  put(&p, &pos->seed, 8);
  bool fp16 = m->precision && strcmp(m->precision, "fp16") == 0;
  if (fp16) snrt_dev_scale_sync(c, true);   /* (the CUDA target keeps it on the device) */
  double scale = fp16 ? (double)c->loss_scale : 0.0;
  int64_t good = fp16 ? c->scale_good : 0, skipped = fp16 ? c->skipped_steps : 0;
  put(&p, &scale, 8);
  put(&p, &good, 8);
  put(&p, &skipped, 8);
  for (int i = 0; i < m->ntensors; i++) {
    const snrt_tensor *t = &m->tensors[i];
    if (!persistent(t)) continue;
    uint32_t nl = (uint32_t)strlen(t->name);
    put(&p, &nl, 4);
    put(&p, t->name, nl);
    put(&p, &t->nbytes, 8);
    rt_tensor_read(c, i, p);
    p += t->nbytes;
    for (int s = 0; zero_param(m, i) && s < zn; s++) {
      const char *suf = shard_suffix(&m->tensors[zidx[s]]);
      uint32_t sl = (uint32_t)(strlen(t->name) + strlen(suf));
      put(&p, &sl, 4);
      put(&p, t->name, strlen(t->name));
      put(&p, suf, strlen(suf));
      put(&p, &t->nbytes, 8);
      put(&p, flat + (size_t)s * zall + m->zero_flat[i], (size_t)t->nbytes);
    }
  }
  free(flat);
  sum = fnv1a(buf + 24, size - 24);
  memcpy(buf + 16, &sum, 8);
  if (rt_write_atomic(path, buf, size) != 0)
    rt_fail(SNRT_EXIT_DATA, "cannot save checkpoint %s: %s (the previous checkpoint, if any, is kept)",
            path, strerror(errno));
  free(buf);
}

static void get(const uint8_t **p, void *v, size_t n) {
  memcpy(v, *p, n);
  *p += n;
}

void rt_checkpoint_load(snrt_ctx *c, const char *path, rt_position *pos) {
  const snrt_model *m = c->m;
  FILE *f = fopen(path, "rb");
  if (!f) rt_fail(SNRT_EXIT_DATA, "cannot open checkpoint %s: %s", path, strerror(errno));
  if (fseeko(f, 0, SEEK_END) != 0) rt_fail(SNRT_EXIT_DATA, "cannot read checkpoint %s: %s", path, strerror(errno));
  off_t size = ftello(f);
  rewind(f);
  if (size < 0) rt_fail(SNRT_EXIT_DATA, "cannot read checkpoint %s: %s", path, strerror(errno));
  uint8_t *buf = rt_xmalloc((size_t)size + 1);
  if (fread(buf, 1, (size_t)size, f) != (size_t)size)
    rt_fail(SNRT_EXIT_DATA, "cannot read checkpoint %s", path);
  fclose(f);
  if (size < 8 || memcmp(buf, CKPT_MAGIC, 8) != 0)
    rt_fail(SNRT_EXIT_DATA, "%s is not an snc checkpoint (bad magic)", path);
  if (size < CKPT_HEADER_V1) rt_fail(SNRT_EXIT_DATA, "checkpoint %s is truncated (%lld bytes)", path, (long long)size);
  const uint8_t *p = buf + 8;
  uint32_t version, kinds;
  uint64_t sum, len, fp;
  int32_t batch, count;
  get(&p, &version, 4);
  get(&p, &kinds, 4);
  get(&p, &sum, 8);
  get(&p, &len, 8);
  if (version != CKPT_VERSION && version != 1)
    rt_fail(SNRT_EXIT_DATA, "checkpoint %s has format version %u; this program reads versions 1 "
            "and %u", path, version, CKPT_VERSION);
  if (version == CKPT_VERSION && size < CKPT_HEADER)
    rt_fail(SNRT_EXIT_DATA, "checkpoint %s is truncated (%lld bytes)", path, (long long)size);
  if (len != (uint64_t)size - 24)
    rt_fail(SNRT_EXIT_DATA, "checkpoint %s is truncated or padded: %lld bytes, its header says %llu",
            path, (long long)size, (unsigned long long)(len + 24));
  if (fnv1a(buf + 24, (size_t)size - 24) != sum)
    rt_fail(SNRT_EXIT_DATA, "checkpoint %s is corrupted (checksum mismatch)", path);
  get(&p, &fp, 8);
  get(&p, &batch, 4);
  get(&p, &count, 4);
  if (m->dist && batch != m->batch * rt_ranks)
    rt_fail(SNRT_EXIT_DATA, "checkpoint %s was saved at global batch %d; this run's global batch is "
            "%d (%d rank%s x batch %d): resume with ranks x batch = %d", path, batch,
            m->batch * rt_ranks, rt_ranks, rt_ranks == 1 ? "" : "s", m->batch, batch);
  if (!m->dist && batch != m->batch)
    rt_fail(SNRT_EXIT_DATA, "checkpoint %s was saved with batch %d; this program was compiled for batch %d",
            path, batch, m->batch);
  int opt = (int)(kinds & 0xff) - 1, loss = (int)(kinds >> 8 & 0xff) - 1;
  if (kinds && opt != m->opt_kind)
    rt_fail(SNRT_EXIT_DATA, "checkpoint %s was saved by a program training with %s; this program trains with %s",
            path, opt_name(opt), opt_name(m->opt_kind));
  if (kinds && loss != m->loss_kind)
    rt_fail(SNRT_EXIT_DATA, "checkpoint %s was saved by a program with loss %s; this program's loss is %s",
            path, loss_name(loss), loss_name(m->loss_kind));
  if (fp != m->fingerprint)
    rt_fail(SNRT_EXIT_DATA, "checkpoint %s was saved by another model or plan (fingerprint %016llx, this program %016llx)",
            path, (unsigned long long)fp, (unsigned long long)m->fingerprint);
  get(&p, &pos->step, 8);
  get(&p, &pos->epoch, 8);
  get(&p, &pos->pos, 8);
  get(&p, &pos->seed, 8);
  if (version >= 2) {
    double scale;
    int64_t good, skipped;
    get(&p, &scale, 8);
    get(&p, &good, 8);
    get(&p, &skipped, 8);
    if (scale > 0 && m->precision && strcmp(m->precision, "fp16") == 0) {
      c->loss_scale = (float)scale;
      c->scale_good = good;
      c->skipped_steps = skipped;
      snrt_dev_scale_sync(c, false);
    }
  }
  const uint8_t *end = buf + size;
  int32_t seen = 0;
  /* --zero 1: the per-parameter optimizer state, scattered by rt_zero_scatter */
  int zidx[2], zn = m->zero ? zero_shards(m, zidx) : 0;
  size_t zall = (size_t)m->zero_shard * (size_t)rt_ranks;
  if (zn) {
    free(zero_flat_state);
    zero_flat_state = calloc(zall * (size_t)zn, sizeof(float));
    if (!zero_flat_state) rt_fail(SNRT_EXIT_DEVICE, "out of host memory");
  }
  for (int i = 0; i < m->ntensors; i++) {
    const snrt_tensor *t = &m->tensors[i];
    if (!persistent(t)) continue;
    uint32_t nl;
    int64_t nb;
    if (seen >= count || end - p < 4) goto mismatch;
    get(&p, &nl, 4);
    if ((uint64_t)(end - p) < (uint64_t)nl + 8 || nl != strlen(t->name) || memcmp(p, t->name, nl)) goto mismatch;
    p += nl;
    get(&p, &nb, 8);
    if (nb != t->nbytes || end - p < nb) goto mismatch;
    rt_tensor_write(c, i, p);
    p += nb;
    seen++;
    for (int s = 0; zero_param(m, i) && s < zn; s++) {
      const char *suf = shard_suffix(&m->tensors[zidx[s]]);
      size_t tl = strlen(t->name), sl = strlen(suf);
      if (seen >= count || end - p < 4) goto mismatch;
      get(&p, &nl, 4);
      if ((uint64_t)(end - p) < (uint64_t)nl + 8 || nl != tl + sl || memcmp(p, t->name, tl) ||
          memcmp(p + tl, suf, sl))
        goto mismatch;
      p += nl;
      get(&p, &nb, 8);
      if (nb != t->nbytes || end - p < nb) goto mismatch;
      memcpy(zero_flat_state + (size_t)s * zall + m->zero_flat[i], p, (size_t)nb);
      p += nb;
      seen++;
    }
  }
  if (seen != count || p != end) goto mismatch;
  free(buf);
  return;
mismatch:
  rt_fail(SNRT_EXIT_DATA, "checkpoint %s does not match this model's tensors (tensor %d differs)", path, seen);
}
