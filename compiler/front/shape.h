/* shape.h — helpers shared by the shape-inference files (shape.c, shape_nn.c,
 * shape_tensor.c). Not part of the compiler's public interface (snc.h). */
#ifndef SHAPE_H
#define SHAPE_H

#include "front.h"

/* Opset of the graph, with 0 (hand-built graphs, no opset import) meaning
 * the newest we support, so callers can compare with `<`. */
int64_t shape_opset(const Graph *g);
/* Input i of n, which must be present and shaped (node_error otherwise). */
Tensor *shape_in(Graph *g, Node *n, int i);
/* True if optional input i is present. */
bool shape_has_in(const Node *n, int i);
/* Input i must have dtype float32 and (if rank >= 0) that rank. */
Tensor *shape_in_float(Graph *g, Node *n, int i, int rank);
/* Sets output i (if present) to dtype and dims. */
void shape_set_out(Graph *g, Node *n, int i, int dtype, int rank, const int64_t *dims);
/* A dimension that must fit the int fields of the runtime structs. */
int shape_int(const Node *n, int64_t v, const char *what);
/* Normalizes a possibly negative axis into [0, rank) (or [0, rank] with
 * `inclusive`), node_error naming `what` otherwise. */
int shape_axis(const Node *n, int64_t axis, int rank, bool inclusive, const char *what);
/* Product of dims[from, to). */
int64_t shape_prod(const Node *n, const int64_t *dims, int from, int to);
void *shape_alloc(size_t size);
/* shape_seq.c: a MatMul that snrt_mm_t cannot express, rewritten into an
 * Einsum node (1-D operands, batch dims broadcast on both sides). */
void shape_matmul_einsum(Graph *g, Node *n, const Tensor *a, const Tensor *b);
/* The export batch in shape targets (shape_tensor.c): a Reshape target's
 * (x the tensor reshaped), and the leading literal of an Expand,
 * ConstantOfShape or Tile target; rewritten to --batch, counted in
 * g->batch_reshapes. */
void shape_batch_target(Graph *g, Node *n, const Tensor *x, int64_t *shape, int r);
void shape_batch_leading(Graph *g, const Node *n, int64_t *shape, int r);
/* A constant of the export batch's leading dimension meeting data of
 * --batch rows in a broadcast: equal slices become one (shape_tensor.c). */
void shape_batch_const(Graph *g, Node *n, Tensor *c, const Tensor *x);

/* eval.c: evaluates n at compile time if eval.c's table has its op and its
 * inputs are constants (Shape, Size: any shaped input); true if it did. */
bool eval_node(Graph *g, Node *n);
/* Drops the forward nodes marked in folded[] (their outputs are constants
 * now) and renumbers the rest. */
void eval_remove(Graph *g, const bool *folded);

#endif
