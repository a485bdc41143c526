/* ops.h — the op table, declared once.
 *
 * One line per op generates the OpKind enum, the name table and the property
 * table in ir.c (op_info[]). Columns:
 *   id        OP_<id> in the enum
 *   onnx      ONNX op_type ("" for ops snc creates itself)
 *   in, out   arity: min..max inputs, min..max outputs (optional inputs may be -1)
 *   cost      COST_EXPENSIVE: its output is a recomputation checkpoint;
 *             COST_CHEAP: recomputed from checkpoints; COST_FREE: a view/copy
 *   shape     shape function (shape.c): output shapes + node params;
 *             shape_internal for ops snc creates (autodiff gives their shapes)
 *   grad      gradient builder (autodiff.c); grad_none: not differentiable
 *   emit      EmitFn (emit/emit_ops.c; transformer ops emit/emit_seq.c): prints
 *             the step's param struct and its runtime call into train.c for one
 *             node, forward, backward or recomputed (emit.c calls it per step;
 *             a 16-bit step goes through emit/emit_convert.c first, which calls
 *             it on the float32 working copies). emit_none (ir.c): ops that are
 *             folded at compile time and never become a step (Constant, Shape,
 *             ...); an internal error if called.
 *   flops     FlopFn (front/flops.c): the node's forward FLOPs as a double, from
 *             its shapes (flops_zero: shape ops and copies). Read by the cost
 *             model (plan/cost.c), the plan's step_flops and recomputation
 *             FLOPs (plan/plan.c, plan/recompute.c) and `snc inspect`.
 *
 * Keep ONNX ops first and internal ops after OP_FIRST_INTERNAL.
 *
 * Compile-time evaluation (front/eval.c, during shape inference): a node of
 * any ONNX op in eval.c's table whose inputs are all constants is evaluated
 * at compile time and removed (Cast, Shape, Gather, Trilu, Sin... as
 * exporters write them to compute shapes, masks and tables). Ops with
 * shape_fold exist only for that; OP_EVAL stands for every ONNX op that has
 * no row here.
 */
/*  id              onnx                    in    out   cost            shape             grad             emit                flops */
#define SNC_OPS(OP) \
  OP(CONV,          "Conv",                 2,3,  1,1,  COST_EXPENSIVE, shape_conv,       grad_conv,       emit_conv,          flops_conv) \
  OP(BATCHNORM,     "BatchNormalization",   5,5,  1,5,  COST_CHEAP,     shape_batchnorm,  grad_batchnorm,  emit_batchnorm,     flops_elementwise) \
  OP(RELU,          "Relu",                 1,1,  1,1,  COST_CHEAP,     shape_same,       grad_unary,      emit_unary,         flops_elementwise) \
  OP(LEAKYRELU,     "LeakyRelu",            1,1,  1,1,  COST_CHEAP,     shape_same,       grad_unary,      emit_unary,         flops_elementwise) \
  OP(SIGMOID,       "Sigmoid",              1,1,  1,1,  COST_CHEAP,     shape_same,       grad_unary,      emit_unary,         flops_elementwise) \
  OP(TANH,          "Tanh",                 1,1,  1,1,  COST_CHEAP,     shape_same,       grad_unary,      emit_unary,         flops_elementwise) \
  OP(CLIP,          "Clip",                 1,3,  1,1,  COST_CHEAP,     shape_clip,       grad_unary,      emit_unary,         flops_elementwise) \
  OP(MAXPOOL,       "MaxPool",              1,1,  1,2,  COST_CHEAP,     shape_pool,       grad_maxpool,    emit_maxpool,       flops_pool) \
  OP(AVGPOOL,       "AveragePool",          1,1,  1,1,  COST_CHEAP,     shape_pool,       grad_avgpool,    emit_avgpool,       flops_pool) \
  OP(GLOBALAVGPOOL, "GlobalAveragePool",    1,1,  1,1,  COST_CHEAP,     shape_pool,       grad_avgpool,    emit_avgpool,       flops_pool) \
  OP(LRN,           "LRN",                  1,1,  1,1,  COST_CHEAP,     shape_lrn,        grad_lrn,        emit_lrn,           flops_lrn) \
  OP(FLATTEN,       "Flatten",              1,1,  1,1,  COST_FREE,      shape_flatten,    grad_reshape,    emit_copy,          flops_zero) \
  OP(RESHAPE,       "Reshape",              2,2,  1,1,  COST_FREE,      shape_reshape,    grad_reshape,    emit_copy,          flops_zero) \
  OP(GEMM,          "Gemm",                 2,3,  1,1,  COST_EXPENSIVE, shape_gemm,       grad_gemm,       emit_gemm,          flops_gemm) \
  OP(MATMUL,        "MatMul",               2,2,  1,1,  COST_EXPENSIVE, shape_matmul,     grad_matmul,     emit_matmul,        flops_matmul) \
  OP(ADD,           "Add",                  2,2,  1,1,  COST_CHEAP,     shape_binary,     grad_binary,     emit_binary,        flops_elementwise) \
  OP(SUB,           "Sub",                  2,2,  1,1,  COST_CHEAP,     shape_binary,     grad_binary,     emit_binary,        flops_elementwise) \
  OP(MUL,           "Mul",                  2,2,  1,1,  COST_CHEAP,     shape_binary,     grad_binary,     emit_binary,        flops_elementwise) \
  OP(DIV,           "Div",                  2,2,  1,1,  COST_CHEAP,     shape_binary,     grad_binary,     emit_binary,        flops_elementwise) \
  OP(CONCAT,        "Concat",               1,-1, 1,1,  COST_CHEAP,     shape_concat,     grad_concat,     emit_concat,        flops_zero) \
  OP(SPLIT,         "Split",                1,2,  1,-1, COST_CHEAP,     shape_split,      grad_split,      emit_split,         flops_zero) \
  OP(SLICE,         "Slice",                1,5,  1,1,  COST_CHEAP,     shape_slice,      grad_slice,      emit_slice,         flops_zero) \
  OP(TRANSPOSE,     "Transpose",            1,1,  1,1,  COST_CHEAP,     shape_transpose,  grad_transpose,  emit_transpose,     flops_zero) \
  OP(PAD,           "Pad",                  1,3,  1,1,  COST_CHEAP,     shape_pad,        grad_pad,        emit_pad,           flops_zero) \
  OP(DROPOUT,       "Dropout",              1,3,  1,2,  COST_CHEAP,     shape_dropout,    grad_dropout,    emit_dropout,       flops_elementwise) \
  OP(SOFTMAX,       "Softmax",              1,1,  1,1,  COST_CHEAP,     shape_softmax,    grad_softmax,    emit_softmax,       flops_elementwise) \
  OP(REDUCEMEAN,    "ReduceMean",           1,2,  1,1,  COST_CHEAP,     shape_reducemean, grad_reducemean, emit_reducemean,    flops_elementwise) \
  OP(REDUCESUM,     "ReduceSum",            1,2,  1,1,  COST_CHEAP,     shape_reducemean, grad_reducemean, emit_reducemean,    flops_elementwise) \
  OP(REDUCEMAX,     "ReduceMax",            1,2,  1,1,  COST_CHEAP,     shape_reducemean, grad_reduce_ex,  emit_reducemean,    flops_elementwise) \
  OP(REDUCEL2,      "ReduceL2",             1,2,  1,1,  COST_CHEAP,     shape_reducemean, grad_reduce_ex,  emit_reducemean,    flops_elementwise) \
  OP(MIN,           "Min",                  1,-1,  1,1,  COST_CHEAP,     shape_binary,     grad_binary,     emit_binary,        flops_elementwise) \
  OP(MAX,           "Max",                  1,-1,  1,1,  COST_CHEAP,     shape_binary,     grad_binary,     emit_binary,        flops_elementwise) \
  OP(TILE,          "Tile",                 2,2,  1,1,  COST_CHEAP,     shape_tile,       grad_broadcast,  emit_expand,        flops_out) \
  OP(TRILU,         "Trilu",                1,2,  1,1,  COST_CHEAP,     shape_trilu,      grad_where,      emit_where,         flops_zero) \
  OP(IDENTITY,      "Identity",             1,1,  1,1,  COST_FREE,      shape_same,       grad_reshape,    emit_copy,          flops_zero) \
  OP(CONSTANT,      "Constant",             0,0,  1,1,  COST_FREE,      shape_constant,   grad_none,       emit_none,                   flops_zero) \
  OP(CAST,          "Cast",                 1,1,  1,1,  COST_FREE,      shape_cast,       grad_reshape,    emit_copy,          flops_zero) \
  OP(UNSQUEEZE,     "Unsqueeze",            1,2,  1,1,  COST_FREE,      shape_unsqueeze,  grad_reshape,    emit_copy,          flops_zero) \
  OP(SQUEEZE,       "Squeeze",              1,2,  1,1,  COST_FREE,      shape_squeeze,    grad_reshape,    emit_copy,          flops_zero) \
  /* ---- transformer ops (shape_seq.c, emit_seq.c; Gather and Where fold \
   * when all their inputs are constants) ---- */ \
  OP(SQRT,          "Sqrt",                 1,1,  1,1,  COST_CHEAP,     shape_math,       grad_math,       emit_math,          flops_elementwise) \
  OP(ERF,           "Erf",                  1,1,  1,1,  COST_CHEAP,     shape_math,       grad_math,       emit_math,          flops_elementwise) \
  OP(NEG,           "Neg",                  1,1,  1,1,  COST_CHEAP,     shape_math,       grad_math,       emit_math,          flops_elementwise) \
  OP(RECIPROCAL,    "Reciprocal",           1,1,  1,1,  COST_CHEAP,     shape_math,       grad_math,       emit_math,          flops_elementwise) \
  OP(POW,           "Pow",                  2,2,  1,1,  COST_CHEAP,     shape_math,       grad_math,       emit_math,          flops_elementwise) \
  OP(SIN,           "Sin",                  1,1,  1,1,  COST_CHEAP,     shape_math,       grad_math,       emit_math,          flops_elementwise) \
  OP(COS,           "Cos",                  1,1,  1,1,  COST_CHEAP,     shape_math,       grad_math,       emit_math,          flops_elementwise) \
  OP(EXP,           "Exp",                  1,1,  1,1,  COST_CHEAP,     shape_math,       grad_math,       emit_math,          flops_elementwise) \
  OP(LOG,           "Log",                  1,1,  1,1,  COST_CHEAP,     shape_math,       grad_math,       emit_math,          flops_elementwise) \
  OP(ABS,           "Abs",                  1,1,  1,1,  COST_CHEAP,     shape_math,       grad_math,       emit_math,          flops_elementwise) \
  OP(HARDSIGMOID,   "HardSigmoid",          1,1,  1,1,  COST_CHEAP,     shape_math,       grad_math,       emit_math,          flops_elementwise) \
  OP(HARDSWISH,     "HardSwish",            1,1,  1,1,  COST_CHEAP,     shape_math,       grad_math,       emit_math,          flops_elementwise) \
  OP(LAYERNORM,     "LayerNormalization",   2,3,  1,3,  COST_EXPENSIVE, shape_layernorm,  grad_layernorm,  emit_layernorm,     flops_elementwise) \
  OP(GATHER,        "Gather",               2,2,  1,1,  COST_CHEAP,     shape_gather,     grad_gather,     emit_gather,        flops_zero) \
  OP(WHERE,         "Where",                3,3,  1,1,  COST_CHEAP,     shape_where,      grad_where,      emit_where,         flops_zero) \
  OP(BROADCAST,     "Expand",               2,2,  1,1,  COST_CHEAP,     shape_broadcast,  grad_broadcast,  emit_expand,        flops_out) \
  OP(GATHERELEMENTS, "GatherElements",      2,2,  1,1,  COST_CHEAP,     shape_gather_elements, grad_take, emit_take,     flops_zero) \
  OP(EINSUM,        "Einsum",               2,2,  1,1,  COST_EXPENSIVE, shape_einsum,     grad_einsum,     emit_einsum,        flops_einsum) \
  /* ---- ONNX ops snc only evaluates at compile time (eval.c): shape_fold \
   * fails, naming the node, when an input is not a constant ---- */ \
  OP(SHAPE,         "Shape",                1,1,  1,1,  COST_FREE,      shape_fold,       grad_none,       emit_none,          flops_zero) \
  OP(CONSTANTOFSHAPE, "ConstantOfShape",    1,1,  1,1,  COST_FREE,      shape_fold,       grad_none,       emit_none,          flops_zero) \
  OP(RANGE,         "Range",                3,3,  1,1,  COST_FREE,      shape_fold,       grad_none,       emit_none,          flops_zero) \
  OP(EQUAL,         "Equal",                2,2,  1,1,  COST_FREE,      shape_fold,       grad_none,       emit_none,          flops_zero) \
  /* Any other ONNX op of eval.c's table (Sin, Trilu, ScatterND...): its \
   * op_type in node->onnx_op; arity from that table. */ \
  OP(EVAL,          "",                     0,-1, 0,-1, COST_FREE,      shape_fold,       grad_none,       emit_none,          flops_zero) \
  /* ---- internal ops: created by autodiff and the planner ---- */ \
  OP(CONV_BWD_DATA,   "",  2,2, 1,1, COST_EXPENSIVE, shape_internal, grad_none, emit_conv_bwd_data,   flops_conv_bwd) \
  OP(CONV_BWD_FILTER, "",  2,2, 1,1, COST_EXPENSIVE, shape_internal, grad_none, emit_conv_bwd_filter, flops_conv_bwd) \
  OP(CONV_BWD_BIAS,   "",  1,1, 1,1, COST_CHEAP, shape_internal, grad_none, emit_conv_bwd_bias,   flops_in) \
  OP(BN_BWD,          "",  5,5, 3,3, COST_CHEAP, shape_internal, grad_none, emit_bn_bwd,          flops_in) \
  OP(BN_SAVED,        "",  5,5, 1,1, COST_CHEAP, shape_internal, grad_none, emit_bn_saved,        flops_in) \
  OP(BN_INFER,        "",  5,5, 1,1, COST_CHEAP, shape_internal, grad_none, emit_bn_infer,        flops_in) \
  OP(UNARY_BWD,       "",  2,2, 1,1, COST_CHEAP, shape_internal, grad_none, emit_unary_bwd,       flops_in) \
  OP(MAXPOOL_BWD,     "",  2,2, 1,1, COST_CHEAP, shape_internal, grad_none, emit_maxpool_bwd,     flops_in) \
  OP(AVGPOOL_BWD,     "",  1,1, 1,1, COST_CHEAP, shape_internal, grad_none, emit_avgpool_bwd,     flops_in) \
  OP(LRN_BWD,         "",  3,3, 1,1, COST_CHEAP, shape_internal, grad_none, emit_lrn_bwd,         flops_in) \
  OP(BINARY_BWD,      "",  3,3, 1,2, COST_CHEAP, shape_internal, grad_none, emit_binary_bwd,      flops_in) \
  OP(MATMUL_RAW,      "",  2,2, 1,1, COST_EXPENSIVE, shape_internal, grad_none, emit_matmul_raw,      flops_matmul_raw) \
  OP(BIAS_BWD,        "",  1,1, 1,1, COST_CHEAP, shape_internal, grad_none, emit_bias_bwd,        flops_in) \
  OP(REDUCE,          "",  1,1, 1,1, COST_CHEAP, shape_internal, grad_none, emit_reduce,          flops_in) \
  OP(EXPAND,          "",  1,1, 1,1, COST_CHEAP, shape_internal, grad_none, emit_expand,          flops_out) \
  OP(REDUCE_BWD,      "",  3,3, 1,1, COST_CHEAP, shape_internal, grad_none, emit_reduce_bwd,      flops_in) \
  OP(TAKE_BWD,        "",  1,1, 1,1, COST_CHEAP, shape_internal, grad_none, emit_take_bwd,        flops_in) \
  /* Where with a condition computed from data: shape_where turns an ONNX \
   * Where into WHERE_DATA (all three inputs read from the arena). */ \
  OP(WHERE_DATA,      "",  3,3, 1,1, COST_CHEAP, shape_internal, grad_where_data, emit_where_data, flops_out) \
  OP(WHERE_DATA_BWD,  "",  2,2, 1,2, COST_CHEAP, shape_internal, grad_none, emit_where_data_bwd,  flops_in) \
  OP(SLICE_BWD,       "",  1,1, 1,1, COST_CHEAP, shape_internal, grad_none, emit_slice_bwd,       flops_zero) \
  OP(PAD_BWD,         "",  1,1, 1,1, COST_CHEAP, shape_internal, grad_none, emit_pad_bwd,         flops_zero) \
  OP(SOFTMAX_BWD,     "",  2,2, 1,1, COST_CHEAP, shape_internal, grad_none, emit_softmax_bwd,     flops_in) \
  OP(DROPOUT_BWD,     "",  1,1, 1,1, COST_CHEAP, shape_internal, grad_none, emit_dropout_bwd,     flops_in) \
  OP(MATH_BWD,        "",  2,2, 1,1, COST_CHEAP, shape_internal, grad_none, emit_math_bwd,        flops_in) \
  OP(LN_BWD,          "",  5,5, 3,3, COST_CHEAP, shape_internal, grad_none, emit_ln_bwd,          flops_in) \
  OP(GATHER_BWD,      "",  2,2, 1,1, COST_CHEAP, shape_internal, grad_none, emit_gather_bwd,      flops_in) \
  /* A chain of elementwise ops fused into one step (front/fuse.c; params \
   * snrt_fused_t): forward, and its backward (inputs: the forward's, -1 where \
   * it does not read one, then y or -1, then dy; outputs: the gradients of \
   * the inputs set in need). */ \
  OP(FUSED,           "",  1,8, 1,1, COST_CHEAP, shape_internal, grad_fused, emit_fused,           flops_fused) \
  OP(FUSED_BWD,       "",  2,10, 1,8, COST_CHEAP, shape_internal, grad_none, emit_fused_bwd,       flops_fused) \
  OP(ACCUMULATE,      "",  2,2, 1,1, COST_CHEAP, shape_internal, grad_none, emit_accumulate,      flops_in) \
  OP(SOFTMAX_CE,      "",  2,2, 1,1, COST_CHEAP, shape_internal, grad_none, emit_softmax_ce,      flops_in) \
  OP(SOFTMAX_CE_BWD,  "",  2,2, 1,1, COST_CHEAP, shape_internal, grad_none, emit_softmax_ce_bwd,  flops_in) \
  OP(MSE,             "",  2,2, 1,1, COST_CHEAP, shape_internal, grad_none, emit_mse,             flops_in) \
  /* The chunked LM head + softmax cross-entropy (autodiff.c, params \
   * snrt_lmce_t): inputs h, W, labels; outputs the loss, then dh and/or dW \
   * (need); in the eval graph (need 0) the (rows, 2) summary alone; the \
   * logits only ever a chunk at a time, in the workspace. */ \
  OP(LMHEAD_CE,       "",  3,3, 1,3, COST_EXPENSIVE, shape_internal, grad_none, emit_lmhead_ce,   flops_lmce) \
  OP(MSE_BWD,         "",  2,2, 1,1, COST_CHEAP, shape_internal, grad_none, emit_mse_bwd,         flops_in) \
  OP(SGD,             "",  2,3, 1,2, COST_CHEAP, shape_internal, grad_none, emit_sgd,             flops_in) \
  OP(ADAM,            "",  4,4, 1,3, COST_CHEAP, shape_internal, grad_none, emit_adam,            flops_in) \
  /* --precision fp16: after the backward pass, every parameter gradient \
   * divided by the loss scale and checked for overflow (skips the updates). */ \
  OP(GRAD_UNSCALE,    "",  1,-1, 0,0, COST_FREE, shape_internal, grad_none, emit_grad_unscale,   flops_zero) \
  /* Data parallel (--dist mpi, emit_dist.c): a bucket's gradient all-reduce is \
   * started, then waited for before the first update that reads it. */ \
  OP(ALLREDUCE,       "",  1,-1, 0,0, COST_FREE, shape_internal, grad_none, emit_allreduce,      flops_zero) \
  OP(COMM_WAIT,       "",  1,-1, 0,-1, COST_FREE, shape_internal, grad_none, emit_comm_wait,      flops_zero) \
  /* --zero 1: gradients reduced to the rank owning each element, parameters \
   * broadcast from it after its update (emit_dist.c). */ \
  OP(REDUCE_SCATTER,  "",  1,-1, 0,0, COST_FREE, shape_internal, grad_none, emit_reduce_scatter, flops_zero) \
  OP(ALLGATHER,       "",  1,-1, 0,0, COST_FREE, shape_internal, grad_none, emit_allgather,      flops_zero)
