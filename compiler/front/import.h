/* import.h — what the import pass's files (import.c, import_tensor.c,
 * import_dump.c) share. Not used outside the import pass: the rest of the
 * compiler sees only onnx_import() and import_dump() in snc.h. */
#ifndef SNC_IMPORT_H
#define SNC_IMPORT_H

#include "front.h"
#include "onnx.pb-c.h"

/* Limits on what a model may declare. Real models are far below them; they
 * keep a corrupted or hostile file from costing unbounded time or memory. */
#define IMP_MAX_OPSET 28                  // the newest default-domain opset read
#define IMP_MAX_DIM ((int64_t)1 << 40)    // one dimension
#define IMP_MAX_NODES (1 << 24)           // nodes, initializers, inputs, outputs
#define IMP_MAX_NODE_IO (1 << 16)         // inputs or outputs of one node
#define IMP_MAX_ATTRS 1024                // attributes of one node
#define IMP_MAX_ATTR_VALUES (1 << 24)     // ints/floats in one attribute

/* Never NULL: protobuf-c leaves absent strings NULL. */
static inline const char *imp_str(const char *s) { return s ? s : ""; }

/* A name made safe for a one-line message: control bytes escaped, long names
 * cut. Rotating static buffers (8), like shape_str(). */
const char *imp_esc(const char *s);

/* Errors on names containing control characters (a newline in a name would
 * break every one-line message of every later pass). `what`: "tensor",
 * "node"... */
void imp_check_name(const char *s, const char *what);

/* Reads dims of a TensorProto into rank/dims, with the rank and dim limits. */
void imp_tensor_dims(const SncOnnx__TensorProto *tp, const char *tname, int *rank,
                     int64_t *dims);

/* Makes an IR tensor named `name` from a TensorProto (an initializer, a
 * Constant's value, a tensor attribute): dtype, dims, and the data decoded
 * from raw_data, the typed fields or an external file (paths relative to
 * `model_dir`), checked against dims. kind as given; has_init set. Errors
 * name the tensor. */
int imp_tensor_from_proto(Graph *g, const SncOnnx__TensorProto *tp, const char *name,
                          TensorKind kind, const char *model_dir);

#endif /* SNC_IMPORT_H */
