/* predict.c — --predict: the trained (or --resume'd) model applied to data.
 *
 * DIR/train --predict npy:X.npy --out Y.npy runs the eval graph (inference
 * semantics: BatchNorm's running statistics, no dropout) over every sample
 * of X in batches of the compiled size (the last one padded with zeros; its
 * padding rows are not written) and writes each graph output as float32
 * .npy, its first dimension the sample count. --out names a .npy file when
 * the model has one output; otherwise (or when it does not end in .npy) a
 * directory that receives OUTPUT.npy per graph output, the output's ONNX
 * name with characters outside [A-Za-z0-9._-] replaced by '_'. Inputs are
 * read as --data reads them (npy:X.npy takes no labels; --normalize
 * applies; tokens:FILE gives windows of T ids).
 *
 * What it is not: training (no step runs, nothing is saved) or evaluation
 * against labels (--eval). */
#include "rt.h"

#include <stdlib.h>
#include <string.h>

/* The eval copies of the graph outputs (the table's outputs list, or the
 * logits alone). */
static int outputs(const snrt_model *m, const int **list) {
  static int one;
  if (m->noutputs > 0) {
    *list = m->outputs;
    return m->noutputs;
  }
  one = m->logits;
  *list = &one;
  return 1;
}

/* Output k's shape and bytes: its tensor's, or (the chunked LM head, whose
 * eval step writes the logits to the host sink only) the logits', (batch,
 * positions, classes). */
static int64_t out_shape(const snrt_model *m, int t, int *rank, int64_t *dims) {
  const snrt_tensor *x = &m->tensors[t];
  if (m->lm_rows && t == m->logits) {
    *rank = 3;
    dims[0] = m->batch, dims[1] = m->positions, dims[2] = m->classes;
    return (int64_t)sizeof(float) * m->batch * m->positions * m->classes;
  }
  *rank = x->rank;
  memcpy(dims, x->dims, sizeof(int64_t) * SNRT_MAX_RANK);
  return x->nbytes;
}

/* An output's name for files: its ONNX name without the eval graph's suffix. */
static void out_name(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s", name ? name : "output");
  char *at = strstr(buf, "@eval");
  if (at && !at[5]) *at = 0;
}

static bool ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

void rt_predict(rt_run *r) {
  const snrt_model *m = r->m;
  snrt_ctx *c = &r->c;
  const rt_opts *o = &r->o;
  if (!o->out) rt_fail(SNRT_EXIT_USAGE, "--predict needs --out FILE.npy (or a directory)");
  if (rt_ranks > 1) rt_fail(SNRT_EXIT_USAGE, "--predict runs as one process, not under mpirun");
  const int *outs;
  int no = outputs(m, &outs);
  int B = m->batch;
  int *rank = rt_xmalloc(sizeof(int) * (size_t)no);
  int64_t (*dims)[SNRT_MAX_RANK] = rt_xmalloc(sizeof *dims * (size_t)no);
  int64_t *bytes = rt_xmalloc(sizeof(int64_t) * (size_t)no);
  for (int k = 0; k < no; k++) bytes[k] = out_shape(m, outs[k], &rank[k], dims[k]);
  /* An output whose first dimension is not the batch (a Transpose, a
   * Concat along axis 0, a reduction over the batch) has no rows per
   * sample: it is written whole, which needs the input to be exactly one
   * batch. */
  int nwhole = 0;
  for (int k = 0; k < no; k++) {
    const snrt_tensor *t = &m->tensors[outs[k]];
    if (t->dtype != SNRT_F32) {
      free(rank), free(dims), free(bytes);   /* nothing leaks past an error */
      rt_fail(SNRT_EXIT_DATA, "--predict: output '%s' is not a float32 tensor", t->name);
    }
    nwhole += rank[k] < 1 || dims[k][0] != B;
  }
  rt_data *d = rt_data_load_inputs(o->predict, m, o);
  int64_t n = rt_data_count(d);
  if (n < 1) {
    free(rank), free(dims), free(bytes);
    rt_fail(SNRT_EXIT_DATA, "%s has no samples", o->predict);
  }
  for (int k = 0; k < no && nwhole && n != B; k++) {
    const snrt_tensor *t = &m->tensors[outs[k]];
    if (rank[k] >= 1 && dims[k][0] == B) continue;
    rt_data_free(d);   /* nothing leaks past the error (the sanitized tests) */
    free(rank), free(dims), free(bytes);
    rt_fail(SNRT_EXIT_DATA, "--predict: output '%s' does not have the batch (%d) as its first "
            "dimension, so its rows cannot be told apart by sample; it can be written whole "
            "only when the input is exactly one batch (%lld samples given)", t->name, B,
            (long long)n);
  }
  bool dir = no > 1 || !ends_with(o->out, ".npy");
  if (dir) rt_mkdir_p(o->out);
  bool *whole = rt_xmalloc(sizeof(bool) * (size_t)no);
  for (int k = 0; k < no; k++) whole[k] = rank[k] < 1 || dims[k][0] != B;
  const snrt_tensor *in = &m->tensors[m->input];
  int64_t elems = in->nbytes / 4 / B;
  char *x = rt_xmalloc((size_t)in->nbytes);
  int32_t *lab = rt_xmalloc(sizeof(int32_t) * (size_t)(m->positions > 1 ? m->positions : 1));
  float **res = rt_xmalloc(sizeof(float *) * (size_t)no);
  float **batch_out = rt_xmalloc(sizeof(float *) * (size_t)no);
  for (int k = 0; k < no; k++) {
    res[k] = rt_xmalloc(whole[k] ? (size_t)bytes[k] : (size_t)(bytes[k] / B) * (size_t)n);
    batch_out[k] = rt_xmalloc((size_t)bytes[k]);
  }
  for (int64_t start = 0; start < n && !rt_stop_signal; start += B) {
    int rows = (int)(n - start < B ? n - start : B);
    for (int i = 0; i < rows; i++) rt_data_sample(d, start + i, x + (size_t)i * elems * 4, lab);
    memset(x + (size_t)rows * elems * 4, 0, (size_t)((B - rows) * elems * 4));
    snrt_dev_upload(c, in->offset, x, in->nbytes);
    for (int k = 0; k < no; k++)   /* the chunked head writes the logits here itself */
      if (m->lm_rows && outs[k] == m->logits) c->lm_sink = batch_out[k];
    m->eval_step(c);
    snrt_dev_sync(c);
    c->lm_sink = NULL;
    for (int k = 0; k < no; k++) {
      const snrt_tensor *t = &m->tensors[outs[k]];
      int64_t per = bytes[k] / B;
      if (!(m->lm_rows && outs[k] == m->logits))
        snrt_dev_download(c, batch_out[k], t->offset, t->nbytes);
      if (whole[k]) memcpy(res[k], batch_out[k], (size_t)bytes[k]);
      else memcpy((char *)res[k] + start * per, batch_out[k], (size_t)(per * rows));
    }
  }
  if (rt_stop_signal) rt_fail(SNRT_EXIT_DATA, "--predict: interrupted; nothing written");
  for (int k = 0; k < no; k++) {
    const snrt_tensor *t = &m->tensors[outs[k]];
    if (!whole[k]) dims[k][0] = n;
    char name[256], path[4096];
    out_name(name, sizeof name, t->name);
    if (dir) rt_npy_path(path, sizeof path, o->out, name);
    else snprintf(path, sizeof path, "%s", o->out);
    rt_npy_write(path, res[k], rank[k], dims[k]);
    printf("%s: predict: %lld samples of %s -> %s\n", rt_prog, (long long)n, o->predict, path);
    free(res[k]);
    free(batch_out[k]);
  }
  free(res);
  free(batch_out);
  free(whole);
  free(rank);
  free(dims);
  free(bytes);
  free(x);
  free(lab);
  rt_data_free(d);
}
