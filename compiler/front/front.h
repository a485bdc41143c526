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

/* ------------------------------------------------------------------ fuse.c */

/* Fusion (fuse.c's contract): decomposed LayerNorms become LAYERNORM nodes,
 * Linear transposes and bias adds go into the GEMMs, chains of elementwise
 * ops of one shape become OP_FUSED nodes. on false (--no-fuse): nothing
 * changes. dump (--dump fuse): each rewrite, each group's program; or NULL. */
void fuse_elementwise(Graph *g, bool on, FILE *dump);
/* What a fused chain's backward reads, for the gradients of the inputs set
 * in p->need: sets p->have (the inputs it reads) and p->use_y (whether it
 * reads the output): the fewer tensors of the two ways, recomputing every
 * value the derivatives read from the inputs, or taking the output from y
 * and recomputing the rest (a Relu of an Add reads y alone, a GELU its
 * input). */
void fuse_backward_reads(snrt_fused_t *p);
/* The name of a fused op code (enum snrt_fused_kind): "mul", "tanh"... */
const char *fuse_op_name(int op);

/* ------------------------------------------------------------------ flops.c */

double graph_forward_flops(const Graph *g);

/* ------------------------------------------------------------------ inspect.c */

void inspect_print(const Graph *g, FILE *f);
void inspect_json(const Graph *g, FILE *f);

#endif /* SNC_FRONT_H */
