/* eval.c — the emitted program's uses of eval_step: the test set's loss and
 * accuracy (--eval, after each epoch and at the end; with --dist each rank
 * evaluates its share and the sums are exchanged), and --generate's sampling
 * from a byte-level language model.
 *
 * What it is not: when to evaluate (steps.c) or the eval graph (the emitted
 * train.c). */
#include "rt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The whole set in batches of the compiled size; the last batch is padded
 * with zeros and only its real samples count. */
bool rt_evaluate(snrt_ctx *c, const rt_data *d, rt_eval *r) {
  const snrt_model *m = c->m;
  const snrt_tensor *in = &m->tensors[m->input], *lg = &m->tensors[m->logits];
  int B = m->batch;
  int64_t elems = in->nbytes / 4 / B, per = lg->nbytes / 4 / B, n = rt_data_count(d);
  /* P labels a sample (T positions of a language model), `classes` logits
   * each. The output holds R rows of classes logits: B x P when its rows are
   * the samples; fewer when its first dimension is not the batch
   * (Flatten(axis=0), Gemm(transA)): only those rows are scored, never read
   * past the output. */
  int P = rt_label_positions(m);
  int64_t V = m->classes, R = m->lm_rows ? lg->nbytes / 8 : lg->nbytes / 4 / (V ? V : 1);
  float *x = rt_xmalloc((size_t)in->nbytes);
  float *logits = rt_xmalloc((size_t)lg->nbytes);
  int32_t *lab = rt_xmalloc(sizeof(int32_t) * (size_t)B * (size_t)P);
  void *y = rt_xmalloc((size_t)rt_label_bytes(m));
  int64_t correct = 0;
  double loss = 0;
  int64_t done = 0;
  /* Data parallel: rank r evaluates batches r, r + R, ...; the sums are
   * added across ranks below. */
  for (int64_t start = (int64_t)rt_rank * B; start < n && !rt_stop_signal; start += (int64_t)B * rt_ranks) {
    int rows = (int)(n - start < B ? n - start : B);
    for (int i = 0; i < rows; i++) rt_data_sample(d, start + i, x + i * elems, lab + (int64_t)i * P);
    memset(x + rows * elems, 0, sizeof(float) * (size_t)((B - rows) * elems));
    for (int64_t i = (int64_t)rows * P; i < (int64_t)B * P; i++) lab[i] = 0;
    snrt_dev_upload(c, in->offset, x, in->nbytes);
    rt_encode_labels(m, lab, B, y);
    if (rt_data_target(d, 0))
      for (int i = 0; i < rows; i++)
        memcpy((float *)y + i * per, rt_data_target(d, start + i), sizeof(float) * (size_t)per);
    snrt_dev_upload(c, m->tensors[m->label].offset, y, rt_label_bytes(m));
    m->eval_step(c);
    snrt_dev_sync(c);
    snrt_dev_download(c, logits, lg->offset, lg->nbytes);
    int64_t nq = (int64_t)rows * P < R ? (int64_t)rows * P : R;
    if (m->lm_rows) {   /* the chunked head's summary: per row its loss term and argmax */
      for (int64_t q = 0; q < nq; q++) {
        correct += (int32_t)logits[2 * q + 1] == lab[q];
        loss += logits[2 * q];
      }
      done += rows;
      continue;
    }
    for (int64_t q = 0; q < nq; q++) {
      const float *l = logits + q * V;
      int i = (int)q;   /* the label row (the sample unless P > 1) */
      int best = 0;
      for (int k = 1; k < m->classes; k++)
        if (l[k] > l[best]) best = k;
      correct += best == lab[i];
      if (m->loss_kind == SNRT_LOSS_MSE) {
        double s = 0;
        const float *t = rt_data_target(d, start + i);
        for (int k = 0; k < per; k++) {
          double e = l[k] - (t ? t[k] : k == lab[i] ? 1.0 : 0.0);
          s += e * e;
        }
        loss += s / per;
      } else {
        double mx = l[0], s = 0;
        for (int k = 1; k < m->classes; k++) mx = l[k] > mx ? l[k] : mx;
        for (int k = 0; k < m->classes; k++) s += exp(l[k] - mx);
        loss += mx + log(s) - l[lab[i]];
      }
    }
    done += rows;
  }
  free(x);
  free(logits);
  free(lab);
  free(y);
  if (rt_ranks > 1) {
    double v[3] = {(double)correct, loss, (double)done};
    rt_dist_sum(v, 3, "the exchange of the evaluation's sums");
    correct = (int64_t)v[0], loss = v[1], done = (int64_t)v[2];
  }
  if (done < n) return false;   /* interrupted */
  r->accuracy = n ? (double)correct / ((double)n * P) : 0;
  r->loss = n ? loss / ((double)n * P) : 0;
  return true;
}

/* Language models: the test loss also in bits per token and as perplexity. */
const char *rt_lm_extra(const snrt_model *m, double loss) {
  static char buf[96];
  buf[0] = 0;
  if (rt_label_positions(m) > 1)
    snprintf(buf, sizeof buf, " (%.3f bits/token, perplexity %.2f)", loss / log(2.0), exp(loss));
  return buf;
}

/* ---- generation ---------------------------------------------------------------- */

/* --generate N: the eval step over a window holding the last T bytes of the
 * text so far (row 0 of the batch; the model is causal, so the positions
 * after it do not matter), then one byte drawn from the 5 likeliest at the
 * last position, with probabilities from the softmax; the draw is
 * snrt_uniform(seed, ...): reproducible. Prints the prompt and the bytes. */
#define GEN_TOP_K 5

void rt_generate(snrt_ctx *c, const rt_opts *o) {
  const snrt_model *m = c->m;
  const snrt_tensor *in = &m->tensors[m->input], *lg = &m->tensors[m->logits];
  int B = m->batch;
  int64_t T = in->nbytes / 4 / B, V = m->classes;
  const char *prompt = o->prompt ? o->prompt : "\n";
  int64_t np = (int64_t)strlen(prompt), n = np + o->generate;
  if (np == 0) prompt = "\n", np = 1, n = 1 + o->generate;
  unsigned char *text = rt_xmalloc((size_t)n);
  memcpy(text, prompt, (size_t)np);
  int32_t *x = rt_xmalloc((size_t)in->nbytes);
  /* the logits: downloaded, or (the chunked head) written by it, (B, positions, V) */
  float *logits = rt_xmalloc(m->lm_rows ? sizeof(float) * (size_t)(B * m->positions * V)
                                        : (size_t)lg->nbytes);
  printf("%s: generated (%lld bytes after the prompt):\n%s", rt_prog, (long long)o->generate, prompt);
  for (int64_t len = np; len < n && !rt_stop_signal; len++) {
    int64_t w = len < T ? len : T;
    memset(x, 0, (size_t)in->nbytes);
    for (int64_t j = 0; j < w; j++) x[j] = text[len - w + j];
    snrt_dev_upload(c, in->offset, x, in->nbytes);
    if (m->lm_rows) c->lm_sink = logits;
    m->eval_step(c);
    snrt_dev_sync(c);
    c->lm_sink = NULL;
    if (!m->lm_rows) snrt_dev_download(c, logits, lg->offset, lg->nbytes);
    const float *l = logits + (w - 1) * V;
    int top[GEN_TOP_K];
    int k = 0;
    for (int v = 0; v < V; v++) {   /* insertion into the k best, highest first */
      int at = k < GEN_TOP_K ? k++ : GEN_TOP_K;
      while (at > 0 && l[v] > l[top[at - 1]]) {
        if (at < GEN_TOP_K) top[at] = top[at - 1];
        at--;
      }
      if (at < GEN_TOP_K) top[at] = v;
    }
    double p[GEN_TOP_K], s = 0;
    for (int i = 0; i < k; i++) s += p[i] = exp((double)l[top[i]] - l[top[0]]);
    double u = snrt_uniform(c->seed, 0xFFFFFFFFFFFF4000ull, 13, (uint64_t)len) * s;
    int pick = 0;
    while (pick < k - 1 && u >= p[pick]) u -= p[pick++];
    text[len] = (unsigned char)top[pick];
    putchar(text[len]);
    fflush(stdout);
  }
  putchar('\n');
  free(text);
  free(x);
  free(logits);
}
