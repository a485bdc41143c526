/* data.c — training and evaluation data: IDX (raw or gzip), NPY, synthetic,
 * and token streams for language models (tokens:FILE).
 *
 * What it is: loads a whole data set into host memory once (uint8 images stay
 * uint8, 4x smaller than floats), checks it against the model (sample size,
 * label range) and hands out samples as normalized floats. Every problem a
 * user can cause (missing, truncated or malformed file, size mismatch, label
 * out of range) is one line naming the file, exit code 2.
 *
 * What it is not: batching, shuffling or the loader thread (loader.c). */
#include "rt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

struct rt_data {
  int64_t n;                     /* samples */
  int64_t elems;                 /* values per sample */
  uint8_t *u8;                   /* images, uint8 (scaled by 1/255), or */
  float *f32;                    /* images, float32; both NULL: synthetic */
  int32_t *labels;               /* n class indices (NULL: synthetic) */
  float *targets;                /* mse with float Y: n x tper targets (else NULL) */
  int64_t tper;
  uint64_t seed;                 /* synthetic */
  int classes;
  int channels;                  /* for per-channel normalization */
  int64_t plane;                 /* elems / channels */
  float mean[32], inv_std[32];   /* per channel; identity when not given */
  /* Token models (int32 input of T ids): */
  bool tokens;                   /* the model's input is token ids */
  int positions;                 /* labels per sample (T for sequence models, else 1) */
  int vocab;                     /* ids must lie in [0, vocab) */
  int32_t *ids;                  /* npy X: n x T ids (else NULL) */
  int32_t *stream;               /* tokens:FILE: the whole stream (else NULL) */
  int64_t nstream;
};

/* ---- reading files ---------------------------------------------------------- */

/* Whole file (gzip or not: zlib reads plain files transparently). */
static uint8_t *read_file(const char *path, int64_t *len) {
  gzFile f = gzopen(path, "rb");
  if (!f) rt_fail(SNRT_EXIT_DATA, "cannot open %s: %s", path, errno ? strerror(errno) : "out of memory");
  gzbuffer(f, 1 << 17);
  int64_t cap = 1 << 20, n = 0;
  uint8_t *buf = rt_xmalloc((size_t)cap);
  for (;;) {
    if (n == cap) {
      cap *= 2;
      uint8_t *nb = realloc(buf, (size_t)cap);
      if (!nb) rt_fail(SNRT_EXIT_DEVICE, "out of memory reading %s", path);
      buf = nb;
    }
    unsigned want = (unsigned)((cap - n) > (1 << 30) ? (1 << 30) : (cap - n));
    int got = gzread(f, buf + n, want);
    if (got < 0) {
      int err;
      const char *msg = gzerror(f, &err);
      rt_fail(SNRT_EXIT_DATA, "%s is truncated or corrupt (%s)", path, msg);
    }
    if (got == 0) break;
    n += got;
  }
  int err;
  const char *msg = gzerror(f, &err);
  if (err != Z_OK && err != Z_STREAM_END)
    rt_fail(SNRT_EXIT_DATA, "%s is truncated or corrupt (%s)", path, msg);
  gzclose(f);
  *len = n;
  return buf;
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* A parsed array: dims and raw little-endian (or byte) data. */
typedef struct array {
  int rank;
  int64_t dims[8];
  int64_t count;                 /* product of dims */
  char type;                     /* 'u' uint8, 'f' float32, 'i' int32, 'l' int64 */
  uint8_t *file;                 /* whole file (owns the memory) */
  const uint8_t *data;
} array;

static int type_size(char t) {
  return t == 'u' ? 1 : t == 'l' ? 8 : 4;
}

static void check_size(const char *path, array *a, int64_t have) {
  int64_t need = a->count * type_size(a->type);
  if (have < need)
    rt_fail(SNRT_EXIT_DATA, "%s is truncated: %lld bytes of data, its header promises %lld",
            path, (long long)have, (long long)need);
}

static array read_idx(const char *path) {
  array a = {0};
  int64_t len;
  a.file = read_file(path, &len);
  const uint8_t *p = a.file;
  if (len < 4 || p[0] || p[1]) rt_fail(SNRT_EXIT_DATA, "%s is not an IDX file (bad magic)", path);
  switch (p[2]) {
  case 0x08: a.type = 'u'; break;
  case 0x0C: a.type = 'i'; break;
  case 0x0D: a.type = 'f'; break;
  default: rt_fail(SNRT_EXIT_DATA, "%s: IDX element type 0x%02x is not supported (uint8, int32, float32 are)", path, p[2]);
  }
  a.rank = p[3];
  if (a.rank < 1 || a.rank > 8) rt_fail(SNRT_EXIT_DATA, "%s: IDX rank %d is not supported", path, a.rank);
  if (len < 4 + 4 * a.rank) rt_fail(SNRT_EXIT_DATA, "%s is truncated (in its header)", path);
  a.count = 1;
  for (int i = 0; i < a.rank; i++) {
    a.dims[i] = be32(p + 4 + 4 * i);
    if (a.dims[i] > ((int64_t)1 << 40) / (a.count ? a.count : 1))
      rt_fail(SNRT_EXIT_DATA, "%s: dimensions too large", path);
    a.count *= a.dims[i];
  }
  a.data = p + 4 + 4 * a.rank;
  check_size(path, &a, len - (4 + 4 * a.rank));
  /* IDX is big-endian: swap multi-byte elements in place. */
  if (a.type != 'u') {
    uint8_t *d = (uint8_t *)a.data;
    for (int64_t i = 0; i < a.count; i++) {
      uint32_t v = be32(d + 4 * i);
      memcpy(d + 4 * i, &v, 4);
    }
  }
  return a;
}

static array read_npy(const char *path) {
  array a = {0};
  int64_t len;
  a.file = read_file(path, &len);
  const uint8_t *p = a.file;
  if (len < 10 || memcmp(p, "\x93NUMPY", 6) != 0) rt_fail(SNRT_EXIT_DATA, "%s is not a .npy file (bad magic)", path);
  int64_t hlen, hstart;
  if (p[6] == 1) {
    hlen = p[8] | p[9] << 8;
    hstart = 10;
  } else {
    if (len < 12) rt_fail(SNRT_EXIT_DATA, "%s is truncated (in its header)", path);
    hlen = (int64_t)p[8] | (int64_t)p[9] << 8 | (int64_t)p[10] << 16 | (int64_t)p[11] << 24;
    hstart = 12;
  }
  if (hstart + hlen > len) rt_fail(SNRT_EXIT_DATA, "%s is truncated (in its header)", path);
  char *h = rt_xmalloc((size_t)hlen + 1);
  memcpy(h, p + hstart, (size_t)hlen);
  h[hlen] = 0;
  const char *d = strstr(h, "'descr'");
  const char *fo = strstr(h, "'fortran_order'");
  const char *sh = strstr(h, "'shape'");
  if (!d || !fo || !sh) rt_fail(SNRT_EXIT_DATA, "%s: malformed .npy header", path);
  d = strchr(d + 7, '\'');
  if (!d) rt_fail(SNRT_EXIT_DATA, "%s: malformed .npy header", path);
  d++;
  if (!strncmp(d, "<f4'", 4)) a.type = 'f';
  else if (!strncmp(d, "|u1'", 4) || !strncmp(d, "<u1'", 4)) a.type = 'u';
  else if (!strncmp(d, "<i4'", 4)) a.type = 'i';
  else if (!strncmp(d, "<i8'", 4)) a.type = 'l';
  else {
    const char *e = strchr(d, '\'');
    rt_fail(SNRT_EXIT_DATA, "%s: dtype '%.*s' is not supported (float32, uint8, int32, int64 are)",
            path, e ? (int)(e - d) : 8, d);
  }
  const char *fv = strchr(fo + 15, ':');
  while (fv && (*fv == ':' || *fv == ' ')) fv++;
  if (fv && !strncmp(fv, "True", 4))
    rt_fail(SNRT_EXIT_DATA, "%s: Fortran-ordered arrays are not supported", path);
  const char *s = strchr(sh, '(');
  if (!s) rt_fail(SNRT_EXIT_DATA, "%s: malformed .npy shape", path);
  s++;
  a.count = 1;
  while (*s && *s != ')') {
    while (*s == ' ' || *s == ',') s++;
    if (*s == ')') break;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 0 || a.rank == 8) rt_fail(SNRT_EXIT_DATA, "%s: malformed .npy shape", path);
    a.dims[a.rank++] = v;
    if (v > 0 && a.count > ((int64_t)1 << 40) / v) rt_fail(SNRT_EXIT_DATA, "%s: dimensions too large", path);
    a.count *= v;
    s = end;
  }
  free(h);
  if (a.rank == 0) rt_fail(SNRT_EXIT_DATA, "%s: a scalar is not a data set", path);
  a.data = p + hstart + hlen;
  check_size(path, &a, len - hstart - hlen);
  return a;
}

/* ---- checking against the model ------------------------------------------- */

static void dims_str(char *buf, size_t n, const int64_t *dims, int rank) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "x" : "", (long long)dims[i]);
}

/* Token ids (int32 or int64) into d->ids, each checked against the vocabulary. */
static void set_ids(rt_data *d, const char *path, array *a, const snrt_tensor *in) {
  if (a->type != 'i' && a->type != 'l')
    rt_fail(SNRT_EXIT_DATA, "%s: the model's input '%s' takes token ids; they must be int64 or int32",
            path, in->name);
  if (a->rank != 2 || a->dims[1] != d->elems)
    rt_fail(SNRT_EXIT_DATA, "%s: token ids must be (N, %lld): the model's sequence length is %lld",
            path, (long long)d->elems, (long long)d->elems);
  d->n = a->dims[0];
  d->ids = rt_xmalloc(sizeof(int32_t) * (size_t)(a->count ? a->count : 1));
  for (int64_t i = 0; i < a->count; i++) {
    int64_t v;
    if (a->type == 'i') { int32_t t; memcpy(&t, a->data + 4 * i, 4); v = t; }
    else memcpy(&v, a->data + 8 * i, 8);
    if (v < 0 || v >= d->vocab)
      rt_fail(SNRT_EXIT_DATA, "%s: token id %lld at sample %lld, position %lld is outside the "
              "model's vocabulary [0, %d)", path, (long long)v, (long long)(i / d->elems),
              (long long)(i % d->elems), d->vocab);
    d->ids[i] = (int32_t)v;
  }
  free(a->file);
}

/* tokens:FILE — llm.c's layout (a header of 256 int32: magic 20240520,
 * version 1, token count; then uint16 tokens) or any other file as raw
 * bytes (vocabulary 256). Samples are windows of T + 1 tokens starting at
 * multiples of T: inputs w[0:T], targets w[1:T+1]. */
static void set_stream(rt_data *d, const char *path) {
  int64_t len;
  uint8_t *f = read_file(path, &len);
  int32_t h[3] = {0, 0, 0};
  if (len >= 12) memcpy(h, f, 12);
  int64_t n;
  const uint8_t *src;
  bool u16 = h[0] == 20240520;
  if (u16) {
    if (len < 1024) rt_fail(SNRT_EXIT_DATA, "%s is truncated: %lld bytes, less than its 1024-byte token header", path, (long long)len);
    if (h[1] != 1)
      rt_fail(SNRT_EXIT_DATA, "%s: token file version %d is not supported (1: uint16 tokens)", path, h[1]);
    if (h[2] < 0 || (len - 1024) % 2 || (len - 1024) / 2 != h[2])
      rt_fail(SNRT_EXIT_DATA, "%s: the header promises %d tokens (%lld bytes after it) but %lld bytes follow",
              path, h[2], 2 * (long long)h[2], (long long)(len - 1024));
    n = h[2];
    src = f + 1024;
  } else {
    n = len;
    src = f;
  }
  d->stream = rt_xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) {
    int32_t v = u16 ? (int32_t)(src[2 * i] | src[2 * i + 1] << 8) : src[i];
    if (v >= d->vocab || v >= d->classes)
      rt_fail(SNRT_EXIT_DATA, "%s: token %d at position %lld is outside the model's vocabulary "
              "[0, %d)%s", path, v, (long long)i, d->vocab < d->classes ? d->vocab : d->classes,
              u16 ? "" : " (a file without the token header is read as bytes)");
    d->stream[i] = v;
  }
  free(f);
  d->nstream = n;
  d->n = n > d->elems ? (n - 1) / d->elems : 0;
  if (d->n < 1)
    rt_fail(SNRT_EXIT_DATA, "%s has %lld tokens, fewer than one window of %lld + 1", path,
            (long long)n, (long long)d->elems);
}

static void set_images(rt_data *d, const char *path, array *a, const snrt_tensor *in) {
  if (d->tokens) {
    set_ids(d, path, a, in);
    return;
  }
  int64_t per = a->dims[0] ? a->count / a->dims[0] : 0;
  if (per != d->elems) {
    char have[128], want[128];
    dims_str(have, sizeof have, a->dims + 1, a->rank - 1);
    dims_str(want, sizeof want, in->dims + 1, in->rank - 1);
    rt_fail(SNRT_EXIT_DATA, "%s: images are %s (%lld values each); the model's input '%s' takes %s (%lld)",
            path, a->rank > 1 ? have : "scalars", (long long)per, in->name, want, (long long)d->elems);
  }
  d->n = a->dims[0];
  if (a->type == 'u') {
    d->u8 = a->file;
    memmove(d->u8, a->data, (size_t)a->count);
  } else if (a->type == 'f') {
    d->f32 = (float *)a->file;
    memmove(d->f32, a->data, (size_t)a->count * 4);
  } else {
    rt_fail(SNRT_EXIT_DATA, "%s: images must be uint8 or float32", path);
  }
}

static void set_labels(rt_data *d, const char *path, array *a, const char *images) {
  int64_t P = d->positions;
  if (P > 1 && (a->rank != 2 || a->dims[1] != P))
    rt_fail(SNRT_EXIT_DATA, "%s: targets must be (N, %lld) token ids, one per input position", path,
            (long long)P);
  if (P == 1 && a->rank != 1 && !(a->rank == 2 && a->dims[1] == 1))
    rt_fail(SNRT_EXIT_DATA, "%s: labels must be a vector of class indices (rank %d given)", path, a->rank);
  if (a->dims[0] != d->n)
    rt_fail(SNRT_EXIT_DATA, "%s has %lld labels but %s has %lld images", path,
            (long long)a->dims[0], images, (long long)d->n);
  d->labels = rt_xmalloc(sizeof(int32_t) * (size_t)(d->n ? d->n * P : 1));
  for (int64_t i = 0; i < d->n * P; i++) {
    int64_t v;
    if (a->type == 'u') v = a->data[i];
    else if (a->type == 'i') { int32_t t; memcpy(&t, a->data + 4 * i, 4); v = t; }
    else if (a->type == 'l') memcpy(&v, a->data + 8 * i, 8);
    else rt_fail(SNRT_EXIT_DATA, "%s: labels must be integers (uint8, int32, int64), not float", path);
    if (v < 0 || v >= d->classes)
      rt_fail(SNRT_EXIT_DATA, "%s: label %lld at index %lld is outside the model's %d classes [0, %d)",
              path, (long long)v, (long long)i, d->classes, d->classes);
    d->labels[i] = (int32_t)v;
  }
  free(a->file);
}

/* mse with a float32 Y: regression targets of the logits' shape, used as
 * they are; the label of a sample (for accuracy) is its target's argmax. */
static void set_targets(rt_data *d, const char *path, array *a, const char *images,
                        const snrt_model *m) {
  int64_t per = m->tensors[m->label].nbytes / 4 / m->batch;
  if (a->dims[0] != d->n)
    rt_fail(SNRT_EXIT_DATA, "%s has %lld targets but %s has %lld images", path,
            (long long)a->dims[0], images, (long long)d->n);
  if (a->count != d->n * per)
    rt_fail(SNRT_EXIT_DATA, "%s: targets have %lld values each; the model's output has %lld",
            path, (long long)(d->n ? a->count / d->n : 0), (long long)per);
  d->tper = per;
  d->targets = (float *)a->file;
  memmove(d->targets, a->data, (size_t)a->count * 4);
  d->labels = rt_xmalloc(sizeof(int32_t) * (size_t)(d->n ? d->n : 1));
  for (int64_t i = 0; i < d->n; i++) {
    const float *t = d->targets + i * per;
    int32_t best = 0;
    for (int64_t k = 1; k < per && k < d->classes; k++)
      if (t[k] > t[best]) best = (int32_t)k;
    d->labels[i] = best;
  }
}

const float *rt_data_target(const rt_data *d, int64_t i) {
  return d->targets ? d->targets + i * d->tper : NULL;
}

static void set_norm(rt_data *d, const snrt_tensor *in, const rt_opts *o) {
  int64_t model_ch = in->rank == 4 ? in->dims[1] : 1;   /* NCHW channels */
  for (int ch = 0; ch < 32; ch++) {
    d->mean[ch] = 0;
    d->inv_std[ch] = 1;
  }
  d->channels = 1;
  if (o->nnorm == 2) {
    d->mean[0] = o->norm[0];
    d->inv_std[0] = 1.0f / o->norm[1];
  } else if (o->nnorm && o->nnorm == 2 * model_ch && model_ch <= 32) {
    d->channels = (int)model_ch;
    for (int ch = 0; ch < d->channels; ch++) {
      d->mean[ch] = o->norm[ch];
      d->inv_std[ch] = 1.0f / o->norm[d->channels + ch];
    }
  } else if (o->nnorm) {
    if (model_ch > 32)
      rt_fail(SNRT_EXIT_USAGE, "--normalize: the input '%s' has %lld channels; per-channel values are "
              "supported up to 32 channels, give MEAN,STD", in->name, (long long)model_ch);
    rt_fail(SNRT_EXIT_USAGE, "--normalize takes MEAN,STD or %lld means then %lld deviations (the input '%s' "
            "has %lld channel%s), not %d values", (long long)model_ch, (long long)model_ch, in->name,
            (long long)model_ch, model_ch == 1 ? "" : "s", o->nnorm);
  }
  d->plane = d->elems / d->channels;
}

rt_data *rt_data_load(const char *spec, const snrt_model *m, uint64_t seed, const rt_opts *o) {
  const snrt_tensor *in = &m->tensors[m->input];
  rt_data *d = calloc(1, sizeof *d);
  if (!d) rt_fail(SNRT_EXIT_DEVICE, "out of memory");
  d->elems = in->nbytes / 4 / m->batch;
  d->classes = m->classes;
  d->seed = seed;
  d->tokens = in->dtype == SNRT_I32;
  d->positions = m->positions > 1 ? m->positions : 1;
  d->vocab = m->vocab > 0 ? m->vocab : m->classes;
  set_norm(d, in, o);
  if (!strcmp(spec, "synthetic")) {
    d->n = (int64_t)m->batch * rt_ranks * 64;   /* 64 global batches */
    return d;
  }
  if (!strncmp(spec, "tokens:", 7)) {
    if (!d->tokens || d->positions != d->elems)
      rt_fail(SNRT_EXIT_USAGE, "tokens:FILE needs a language model (token ids in, (batch, T, vocab) "
              "logits out); this model's input '%s' is %s", in->name, d->tokens ? "token ids without "
              "a per-position output" : "float data");
    if (!spec[7]) rt_fail(SNRT_EXIT_USAGE, "tokens: needs a file name");
    set_stream(d, spec + 7);
    return d;
  }
  bool idx = !strncmp(spec, "idx:", 4), npy = !strncmp(spec, "npy:", 4);
  const char *comma = strchr(spec, ',');
  if ((!idx && !npy) || !comma || comma == spec + 4 || !comma[1])
    rt_fail(SNRT_EXIT_USAGE, "data must be synthetic, idx:IMAGES,LABELS, npy:X.npy,Y.npy or "
            "tokens:FILE, not '%s'", spec);
  char *images = strndup(spec + 4, (size_t)(comma - spec - 4));
  const char *labels = comma + 1;
  array a = idx ? read_idx(images) : read_npy(images);
  set_images(d, images, &a, in);
  array b = idx ? read_idx(labels) : read_npy(labels);
  if (npy && b.type == 'f' && m->loss_kind == SNRT_LOSS_MSE) set_targets(d, labels, &b, images, m);
  else set_labels(d, labels, &b, images);
  free(images);
  return d;
}

rt_data *rt_data_load_inputs(const char *spec, const snrt_model *m, const rt_opts *o) {
  if (strncmp(spec, "npy:", 4) != 0 || strchr(spec, ','))
    return rt_data_load(spec, m, o->seed, o);
  if (!spec[4]) rt_fail(SNRT_EXIT_USAGE, "npy: needs a file name");
  const snrt_tensor *in = &m->tensors[m->input];
  rt_data *d = calloc(1, sizeof *d);
  if (!d) rt_fail(SNRT_EXIT_DEVICE, "out of memory");
  d->elems = in->nbytes / 4 / m->batch;
  d->classes = m->classes;
  d->seed = o->seed;
  d->tokens = in->dtype == SNRT_I32;
  d->positions = m->positions > 1 ? m->positions : 1;
  d->vocab = m->vocab > 0 ? m->vocab : m->classes;
  set_norm(d, in, o);
  array a = read_npy(spec + 4);
  if (a.rank < 1) rt_fail(SNRT_EXIT_DATA, "%s: inputs must be an array of samples, not a scalar", spec + 4);
  set_images(d, spec + 4, &a, in);
  return d;
}

void rt_data_free(rt_data *d) {
  if (!d) return;
  free(d->u8);
  free(d->f32);
  free(d->labels);
  free(d->targets);
  free(d->ids);
  free(d->stream);
  free(d);
}

int64_t rt_data_count(const rt_data *d) {
  return d->n;
}

void rt_data_sample(const rt_data *d, int64_t i, void *xv, int32_t *label) {
  int64_t e = d->elems;
  float *x = xv;
  if (d->tokens) {   /* ids in, int32 */
    int32_t *ids = xv;
    int P = d->positions;
    if (d->stream) {
      memcpy(ids, d->stream + i * e, sizeof(int32_t) * (size_t)e);
      memcpy(label, d->stream + i * e + 1, sizeof(int32_t) * (size_t)P);
    } else if (d->ids) {
      memcpy(ids, d->ids + i * e, sizeof(int32_t) * (size_t)e);
      if (d->labels) memcpy(label, d->labels + i * P, sizeof(int32_t) * (size_t)P);
      else memset(label, 0, sizeof(int32_t) * (size_t)P);   /* --predict: inputs only */
    } else {   /* synthetic: random ids; each target is a function of its input */
      for (int64_t j = 0; j < e; j++) {
        int32_t v = (int32_t)(snrt_uniform(d->seed, 0xFFFFFFFFFFFF3000ull, 11, (uint64_t)(i * e + j)) * d->vocab);
        ids[j] = v < d->vocab ? v : d->vocab - 1;
      }
      for (int p = 0; p < P; p++) label[p] = (ids[p < e ? p : 0] * 7 + 3) % d->classes;
    }
    return;
  }
  if (d->u8) {
    const uint8_t *s = d->u8 + i * e;
    for (int64_t j = 0; j < e; j++) x[j] = s[j] * (1.0f / 255.0f);
  } else if (d->f32) {
    memcpy(x, d->f32 + i * e, sizeof(float) * (size_t)e);
  } else {
    /* Synthetic: noise plus a bright band whose position is the class, so a
     * model can learn it and the loss visibly falls. */
    int32_t y = (int32_t)(snrt_uniform(d->seed, 0xFFFFFFFFFFFF1000ull, 7, (uint64_t)i) * d->classes);
    if (y >= d->classes) y = d->classes - 1;
    for (int64_t j = 0; j < e; j++) {
      float v = 0.5f * snrt_uniform(d->seed, 0xFFFFFFFFFFFF2000ull, 9, (uint64_t)(i * e + j));
      if (j * d->classes / e == y) v += 0.5f;
      x[j] = v;
    }
    *label = y;
  }
  if (d->labels) *label = d->labels[i];
  for (int ch = 0; ch < d->channels; ch++) {
    float mu = d->mean[ch], is = d->inv_std[ch];
    if (mu == 0 && is == 1) continue;
    float *p = x + ch * d->plane;
    for (int64_t j = 0; j < d->plane; j++) p[j] = (p[j] - mu) * is;
  }
}
