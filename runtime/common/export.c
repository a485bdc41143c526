/* export.c — --export-onnx: the original model with the trained values.
 *
 * What it is: reads model.onnx beside the executable (snc compile copies the
 * source model there), sets every PARAM and STATE tensor (weights, biases, BN
 * running statistics) as a float32 initializer with raw_data — replacing the
 * initializer of that name, or adding one for a graph input that had none —
 * and writes the result atomically. Everything else in the model (nodes,
 * opsets, fields our schema does not declare, which protobuf-c keeps as
 * unknown fields) is written back unchanged.
 *
 * What it is not: an ONNX writer from scratch; the compiler's import. */
#include "rt.h"

#include "onnx.pb-c.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void rt_export_onnx(snrt_ctx *c, const char *path) {
  const snrt_model *m = c->m;
  char src[4096];
  snprintf(src, sizeof src, "%s/model.onnx", rt_exe_dir());
  FILE *f = fopen(src, "rb");
  if (!f) rt_fail(SNRT_EXIT_DATA, "--export-onnx: cannot open %s: %s (snc compile copies the model there)",
                  src, strerror(errno));
  fseeko(f, 0, SEEK_END);
  off_t size = ftello(f);
  rewind(f);
  uint8_t *in = rt_xmalloc((size_t)(size > 0 ? size : 1));
  if (size < 0 || fread(in, 1, (size_t)size, f) != (size_t)size)
    rt_fail(SNRT_EXIT_DATA, "--export-onnx: cannot read %s", src);
  fclose(f);
  SncOnnx__ModelProto *mp = snc_onnx__model_proto__unpack(NULL, (size_t)size, in);
  free(in);
  if (!mp || !mp->graph) rt_fail(SNRT_EXIT_DATA, "--export-onnx: %s is not a valid ONNX model", src);
  SncOnnx__GraphProto *g = mp->graph;

  /* Our tensors, built here and swapped into the parsed model only while it
   * is packed, so that free_unpacked frees exactly what unpack allocated. */
  int n = 0;
  for (int i = 0; i < m->ntensors; i++)
    if (m->tensors[i].kind == SNRT_T_PARAM || m->tensors[i].kind == SNRT_T_STATE) n++;
  SncOnnx__TensorProto *mine = rt_xmalloc(sizeof *mine * (size_t)(n ? n : 1));
  size_t n_old = g->n_initializer;
  SncOnnx__TensorProto **old = g->initializer;
  SncOnnx__TensorProto **inits = rt_xmalloc(sizeof *inits * (n_old + (size_t)n + 1));
  memcpy(inits, old, sizeof *inits * n_old);
  size_t n_new = n_old;
  int k = 0;
  for (int i = 0; i < m->ntensors; i++) {
    const snrt_tensor *t = &m->tensors[i];
    if (t->kind != SNRT_T_PARAM && t->kind != SNRT_T_STATE) continue;
    SncOnnx__TensorProto *tp = &mine[k++];
    snc_onnx__tensor_proto__init(tp);
    tp->name = (char *)t->name;
    tp->n_dims = (size_t)t->rank;
    tp->dims = (int64_t *)t->dims;
    tp->has_data_type = 1;
    tp->data_type = 1;   /* FLOAT */
    tp->has_raw_data = 1;
    tp->raw_data.len = (size_t)t->nbytes;
    tp->raw_data.data = rt_xmalloc((size_t)t->nbytes + 1);
    rt_tensor_read(c, i, tp->raw_data.data);
    size_t j = 0;
    while (j < n_old && !(old[j]->name && !strcmp(old[j]->name, t->name))) j++;
    if (j < n_old) inits[j] = tp;
    else inits[n_new++] = tp;
  }
  g->initializer = inits;
  g->n_initializer = n_new;
  size_t out_len = snc_onnx__model_proto__get_packed_size(mp);
  uint8_t *out = rt_xmalloc(out_len + 1);
  snc_onnx__model_proto__pack(mp, out);
  g->initializer = old;
  g->n_initializer = n_old;
  snc_onnx__model_proto__free_unpacked(mp, NULL);
  for (int i = 0; i < k; i++) free(mine[i].raw_data.data);
  free(mine);
  free(inits);
  if (rt_write_atomic(path, out, out_len) != 0)
    rt_fail(SNRT_EXIT_DATA, "cannot write %s: %s", path, strerror(errno));
  free(out);
}
