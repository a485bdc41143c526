/* zz_stubs.c — TEMPORARY weak stand-ins so the tree links while passes are
 * being written in parallel. Real definitions override them. Delete when done. */
#include "snc.h"
#define W __attribute__((weak))
#define NI internal_error(__FILE__, __LINE__, "%s: not implemented yet", __func__)
W void shape_batchnorm(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_binary(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_clip(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_concat(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_constant(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_conv(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_dropout(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_flatten(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_gemm(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_lrn(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_matmul(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_pad(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_pool(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_reducemean(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_reshape(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_same(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_slice(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_softmax(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_split(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void shape_transpose(Graph *g, Node *n) { (void)g; (void)n; NI; }
W void grad_avgpool(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_batchnorm(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_binary(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_concat(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_conv(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_dropout(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_gemm(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_lrn(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_matmul(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_maxpool(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_pad(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_reducemean(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_reshape(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_slice(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_softmax(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_split(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_transpose(Graph *g, int node) { (void)g; (void)node; NI; }
W void grad_unary(Graph *g, int node) { (void)g; (void)node; NI; }
W void emit_accumulate(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_adam(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_avgpool(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_avgpool_bwd(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_batchnorm(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_bias_bwd(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_binary(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_binary_bwd(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_bn_bwd(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_bn_infer(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_bn_saved(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_concat(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_conv(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_conv_bwd_bias(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_conv_bwd_data(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_conv_bwd_filter(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_copy(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_dropout(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_dropout_bwd(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_expand(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_gemm(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_lrn(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_lrn_bwd(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_matmul(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_matmul_raw(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_maxpool(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_maxpool_bwd(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_mse(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_mse_bwd(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_pad(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_pad_bwd(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_reduce(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_reducemean(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_sgd(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_slice(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_slice_bwd(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_softmax(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_softmax_bwd(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_softmax_ce(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_softmax_ce_bwd(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_split(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_transpose(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_unary(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W void emit_unary_bwd(Emit *e, const Graph *g, const Node *n) { (void)e; (void)g; (void)n; NI; }
W double flops_conv(const Graph *g, const Node *n) { (void)g; (void)n; return 0; }
W double flops_conv_bwd(const Graph *g, const Node *n) { (void)g; (void)n; return 0; }
W double flops_elementwise(const Graph *g, const Node *n) { (void)g; (void)n; return 0; }
W double flops_gemm(const Graph *g, const Node *n) { (void)g; (void)n; return 0; }
W double flops_in(const Graph *g, const Node *n) { (void)g; (void)n; return 0; }
W double flops_lrn(const Graph *g, const Node *n) { (void)g; (void)n; return 0; }
W double flops_matmul(const Graph *g, const Node *n) { (void)g; (void)n; return 0; }
W double flops_matmul_raw(const Graph *g, const Node *n) { (void)g; (void)n; return 0; }
W double flops_out(const Graph *g, const Node *n) { (void)g; (void)n; return 0; }
W double flops_pool(const Graph *g, const Node *n) { (void)g; (void)n; return 0; }
W double flops_zero(const Graph *g, const Node *n) { (void)g; (void)n; return 0; }
W Graph *onnx_import(const char *path, const char *input_name) { (void)path; (void)input_name; NI; }
W void shape_infer(Graph *g, int batch) { (void)g; (void)batch; NI; }
W double graph_forward_flops(const Graph *g) { (void)g; return 0; }
W void inspect_print(const Graph *g, FILE *f) { (void)g; (void)f; NI; }
W void inspect_json(const Graph *g, FILE *f) { (void)g; (void)f; NI; }
W void train_build(Graph *g, const TrainOpts *o) { (void)g; (void)o; NI; }
W Route *route_build(const Graph *g) { (void)g; NI; }
W void route_dump(const Graph *g, const Route *r, FILE *f) { (void)g; (void)r; (void)f; NI; }
W Plan *plan_build(Graph *g, const PlanOpts *o) { (void)g; (void)o; NI; }
W void plan_dump(const Graph *g, const Plan *pl, const char *pass, FILE *f) { (void)g; (void)pl; (void)pass; (void)f; NI; }
W int plan_max_batch(const char *model, const char *input, const TrainOpts *t, const PlanOpts *o) { (void)model; (void)input; (void)t; (void)o; NI; }
W void plan_print_text(const Graph *g, const Plan *pl, FILE *f) { (void)g; (void)pl; (void)f; NI; }
W void plan_print_summary(const Graph *g, const Plan *pl, FILE *f) { (void)g; (void)pl; (void)f; NI; }
W void plan_print_json(const Graph *g, const Plan *pl, FILE *f) { (void)g; (void)pl; (void)f; NI; }
W void plan_print_html(const Graph *g, const Plan *pl, FILE *f) { (void)g; (void)pl; (void)f; NI; }
W int plan_diff(const char *a, const char *b, FILE *f) { (void)a; (void)b; (void)f; NI; }
W void emit_program(const Graph *g, const Plan *pl, const EmitOpts *o, const char *dir) { (void)g; (void)pl; (void)o; (void)dir; NI; }
