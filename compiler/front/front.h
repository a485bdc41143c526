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
/* The whole graph for `snc inspect --dump eval`: every graph output and the
 * nodes computing it, with or without a data input (g->input -1). */
Graph *onnx_import_whole(const char *path);
/* The import pass's debug view (`snc inspect MODEL --dump import`): every
 * tensor (kind, dtype, declared shape, init) and node (inputs, outputs,
 * attributes) as import leaves them, before shape inference. (import_dump.c) */
void import_dump(const Graph *g, FILE *f);

/* ------------------------------------------------------------------ eval.c */

/* The row of eval.c's table for an ONNX op_type, -1 if it has none; the
 * row's name (static) and arity. Import makes OP_EVAL nodes from them. */
int eval_find(const char *onnx_op);
const char *eval_op_name(int k);
void eval_arity(int k, int *min_in, int *max_in, int *min_out, int *max_out);
/* The ONNX op_type of a node (OP_EVAL: its onnx_op). */
const char *eval_node_op(const Node *n);
/* `snc inspect MODEL --dump eval`: evaluates every node of a graph that
 * computes from initializers and Constant nodes alone (onnx_import_whole)
 * and prints each graph output as JSON {"outputs": [{"name", "dtype",
 * "shape", "values"}]} (non-finite floats as "nan", "inf", "-inf"); a node
 * it cannot evaluate is an error naming it. The ONNX node suite's test of
 * the evaluator (tests/test_onnx_node_suite.py). */
void eval_dump(Graph *g, FILE *f);

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
