/* front.h — the front end's public functions. */
#ifndef SNC_FRONT_H
#define SNC_FRONT_H

#include "../snc.h"

/* ------------------------------------------------------------------ import.c */

/* Reads an ONNX model (and external data beside it), builds the forward IR:
 * tensors with kinds (input/param/state/const/act), nodes with attributes,
 * Constant nodes folded into TK_CONST tensors, nodes topologically sorted.
 * `input_name` picks the data input (NULL: the first graph input without an
 * initializer). Errors: fatal(EXIT_BADINPUT, ...). */
Graph *onnx_import(const char *path, const char *input_name);
/* --all-outputs: the import keeps the nodes of every graph output (default:
 * only those the first output, which training uses, depends on; an auxiliary
 * head is dropped). */
extern bool import_all_outputs;
/* The same from the file's bytes (`buf`, from xmalloc: freed here); `path`
 * names the model in messages and its folder holds external data. */
Graph *onnx_import_bytes(unsigned char *buf, size_t len, const char *path,
                         const char *input_name);
/* The import pass's debug view (`snc inspect MODEL --dump import`): every
 * tensor (kind, dtype, declared shape, init) and node (inputs, outputs,
 * attributes) as import leaves them, before shape inference. (import_dump.c) */
void import_dump(const Graph *g, FILE *f);

/* ------------------------------------------------------------------ shape.c */

/* Replaces the data input's leading dimension by `batch` (if > 0) and infers
 * every tensor's shape and every node's params (node->p). */
void shape_infer(Graph *g, int batch);

/* ------------------------------------------------------------------ flops.c */

double graph_forward_flops(const Graph *g);

/* ------------------------------------------------------------------ inspect.c */

void inspect_print(const Graph *g, FILE *f);
void inspect_json(const Graph *g, FILE *f);

#endif /* SNC_FRONT_H */
