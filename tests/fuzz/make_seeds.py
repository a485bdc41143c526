#!/usr/bin/python3
"""make_seeds.py — writes the fuzzer's seed models into a folder (argv[1]).

Seeds: the shipped Fashion-MNIST CNN, a small ResNet from make_resnet.py, and
a few torch exports (an MLP; a conv net with BatchNorm, pooling, residual add,
concat) and one onnx.helper graph through most of the op table. Every initializer becomes a graph input with a
declared shape (snc initializes those), so that each seed is a few KB and the
fuzzer's mutations land in the graph rather than in weight bytes.
"""
import io
import os
import subprocess
import sys

import onnx
import torch
from onnx import helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def strip(model, keep_names=()):
    """Initializers -> declared inputs (keeps small int64 constants: shapes,
    and the initializers named in keep_names)."""
    g = model.graph
    keep = []
    for init in g.initializer:
        if (init.data_type == onnx.TensorProto.INT64 and len(init.dims) <= 1) or init.name in keep_names:
            keep.append(init)
            continue
        g.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    del g.initializer[:]
    g.initializer.extend(keep)
    return model


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(12, 16), torch.nn.Linear(16, 5)
        self.drop = torch.nn.Dropout(0.25)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.c2 = torch.nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.fc = torch.nn.Linear(8 * 4 * 4, 3)

    def forward(self, x):
        y = torch.relu(self.bn(self.c1(x)))
        y = torch.nn.functional.max_pool2d(y + self.c2(y), 2)
        z = torch.nn.functional.avg_pool2d(torch.sigmoid(y), 1)
        y = torch.cat([y, z[:, :, :, :]], 1)
        return self.fc(torch.flatten(y, 1))


def all_ops(path):
    """One small graph through most of the op table (onnx.helper, opset 13)."""
    F, I = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
    vi = helper.make_tensor_value_info
    c = lambda name, vals, dt=I: helper.make_tensor(name, dt, [len(vals)], vals)
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "wc"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c", "bs", "bb", "bm", "bv"], ["bn"], name="bn"),
        n("LeakyRelu", ["bn"], ["lr"], name="lrelu", alpha=0.1),
        n("Tanh", ["lr"], ["th"], name="tanh"),
        n("Sigmoid", ["th"], ["sg"], name="sig"),
        n("MaxPool", ["sg"], ["mp"], name="mpool", kernel_shape=[2, 2], strides=[2, 2]),
        n("AveragePool", ["mp"], ["ap"], name="apool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("LRN", ["ap"], ["lrn"], name="lrn", size=3),
        n("Pad", ["lrn", "pads"], ["pd"], name="pad"),
        n("Slice", ["pd", "st", "en", "ax"], ["sl"], name="slice"),
        n("Split", ["sl", "sp"], ["s1", "s2"], name="split", axis=1),
        n("Concat", ["s2", "s1"], ["cat"], name="cat", axis=1),
        n("Mul", ["cat", "cat"], ["mu"], name="mul"),
        n("Sub", ["mu", "cat"], ["sb"], name="sub"),
        n("Div", ["sb", "two"], ["dv"], name="div"),
        n("Clip", ["dv", "lo", "hi"], ["cl"], name="clip"),
        n("Transpose", ["cl"], ["tr"], name="tr", perm=[0, 1, 3, 2]),
        n("ReduceMean", ["tr"], ["rm"], name="rmean", axes=[3], keepdims=1),
        n("Add", ["rm", "tr"], ["ad"], name="add"),
        n("GlobalAveragePool", ["ad"], ["gap"], name="gap"),
        n("Flatten", ["gap"], ["fl"], name="flat"),
        n("MatMul", ["fl", "wm"], ["mm"], name="mm"),
        n("Softmax", ["mm"], ["sm"], name="softmax", axis=1),
        n("Dropout", ["sm"], ["dp"], name="drop"),
        n("Identity", ["dp"], ["id"], name="id"),
        n("Reshape", ["id", "shape"], ["rs"], name="reshape"),
        n("Relu", ["rs"], ["re"], name="relu"),
        n("Gemm", ["re", "wg", "bg"], ["y"], name="fc", transB=1),
    ]
    inits = [c("pads", [0, 0, 1, 1, 0, 0, 1, 1]), c("st", [1, 1]), c("en", [5, 5]), c("ax", [2, 3]),
             c("sp", [2, 2]), c("two", [2.0], F), c("shape", [-1, 6]),
             helper.make_tensor("lo", F, [], [-1.0]), helper.make_tensor("hi", F, [], [1.0])]
    ins = [vi("x", F, ["N", 3, 8, 8]), vi("wc", F, [4, 3, 3, 3]), vi("bs", F, [4]), vi("bb", F, [4]),
           vi("bm", F, [4]), vi("bv", F, [4]), vi("wm", F, [4, 6]), vi("wg", F, [5, 6]), vi("bg", F, [5])]
    g = helper.make_graph(nodes, "all_ops", ins, [vi("y", F, ["N", 5])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def eval_ops(path):
    """Constant subgraphs for the compile-time evaluator (compiler/front/
    eval.c): a causal mask (ConstantOfShape, Trilu), rotary-like tables
    (Range, Cast, MatMul, Sin, Cos), a window mask (ScatterND, Mod, Not,
    Where), Tile and Expand, all feeding a small data path (opset 14)."""
    F, I, B = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.BOOL
    vi = helper.make_tensor_value_info
    t = helper.make_tensor
    n = helper.make_node
    nodes = [
        n("ConstantOfShape", ["tt"], ["full"], name="full", value=t("v", F, [1], [-1e9])),
        n("Trilu", ["full", "one"], ["mask"], name="triu", upper=1),
        n("Range", ["zero", "four", "one"], ["pos"], name="range"),
        n("Cast", ["pos"], ["posf"], name="posf", to=F),
        n("Unsqueeze", ["posf", "ax1"], ["pcol"], name="pcol"),
        n("MatMul", ["pcol", "freq"], ["ang"], name="ang"),
        n("Sin", ["ang"], ["sin"], name="sin"),
        n("Cos", ["ang"], ["cos"], name="cos"),
        n("Mod", ["pos", "two"], ["odd"], name="mod"),
        n("Cast", ["odd"], ["oddb"], name="oddb", to=B),
        n("Not", ["oddb"], ["even"], name="not"),
        n("ScatterND", ["pos", "sidx", "supd"], ["pos2"], name="scatter"),
        n("Equal", ["pos2", "pos"], ["same"], name="eq"),
        n("And", ["same", "even"], ["keep"], name="and"),
        n("Where", ["keep", "onef", "halff"], ["w"], name="where"),
        n("Tile", ["w", "rep"], ["wt"], name="tile"),
        n("Reshape", ["wt", "shape44"], ["w44"], name="w44"),
        n("Add", ["x", "mask"], ["xm"], name="addmask"),
        n("Mul", ["xm", "sin"], ["a"], name="mulsin"),
        n("Add", ["a", "cos"], ["b"], name="addcos"),
        n("Mul", ["b", "w44"], ["c"], name="mulw"),
        n("Flatten", ["c"], ["fl"], name="flat"),
        n("Gemm", ["fl", "wg", "bg"], ["y"], name="fc", transB=1),
    ]
    c = lambda name, vals, dt=I, dims=None: t(name, dt, [len(vals)] if dims is None else dims, vals)
    inits = [c("tt", [4, 4]), c("one", [1], dims=[]), c("zero", [0], dims=[]),
             c("four", [4], dims=[]), c("two", [2], dims=[]), c("ax1", [1]),
             c("freq", [0.5, 0.25, 0.125, 1.0], F, [1, 4]), c("sidx", [1, 3], dims=[2, 1]),
             c("supd", [7, 9]), c("onef", [1.0], F, []), c("halff", [0.5], F, []),
             c("rep", [4]), c("shape44", [4, 4]),
             c("bg", [0.0] * 3, F)]
    ins = [vi("x", F, ["N", 4, 4]), vi("wg", F, [3, 16])]
    g = helper.make_graph(nodes, "eval_ops", ins, [vi("y", F, ["N", 3])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), path)


def data_ops(path):
    """The ops that run on data (not only at compile time): HardSwish,
    HardSigmoid, Sin, Cos, Exp, Log, Abs, Min, Max, ReduceSum, ReduceMax,
    ReduceL2, Tile, Trilu, Pad (reflect), Gather along axis 1 (a select) and
    Einsum, all on one small path to a trained Gemm (opset 14)."""
    F, I = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
    vi = helper.make_tensor_value_info
    t = helper.make_tensor
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "wa"], ["h"], name="proj"),                 # (N, 4, 4)
        n("HardSwish", ["h"], ["hs"], name="hswish"),
        n("HardSigmoid", ["hs"], ["hg"], name="hsig", alpha=1.0 / 6, beta=0.5),
        n("Sin", ["hg"], ["s"], name="sin"),
        n("Cos", ["h"], ["c"], name="cos"),
        n("Max", ["s", "c"], ["mx"], name="max"),
        n("Min", ["mx", "h"], ["mn"], name="min"),
        n("Abs", ["mn"], ["ab"], name="abs"),
        n("Exp", ["ab"], ["ex"], name="exp"),
        n("Log", ["ex"], ["lg"], name="log"),
        n("Trilu", ["lg"], ["tl"], name="tril", upper=0),
        n("Pad", ["tl", "pads"], ["pd"], name="pad", mode="reflect"),  # (N, 4, 6)
        n("Einsum", ["pd", "we"], ["ei"], name="einsum", equation="bij,jk->bik"),  # (N, 4, 4)
        n("Tile", ["ei", "rep"], ["ti"], name="tile"),                 # (N, 4, 8)
        n("Gather", ["ti", "idx"], ["g1"], name="select", axis=1),     # (N, 8)
        n("ReduceSum", ["ti", "ax2"], ["rs"], name="rsum", keepdims=0),  # (N, 4)
        n("ReduceMax", ["ti"], ["rx"], name="rmax", axes=[2], keepdims=0),
        n("ReduceL2", ["ti"], ["rl"], name="rl2", axes=[2], keepdims=0),
        n("Concat", ["g1", "rs", "rx", "rl"], ["cat"], name="cat", axis=1),  # (N, 20)
        n("Gemm", ["cat", "wg", "bg"], ["y"], name="fc", transB=1),
    ]
    c = lambda name, vals, dt=I, dims=None: t(name, dt, [len(vals)] if dims is None else dims, vals)
    inits = [c("pads", [0, 0, 1, 0, 0, 1]), c("rep", [1, 1, 2]), c("idx", [0], dims=[]),
             c("ax2", [2]), c("bg", [0.0] * 3, F)]
    ins = [vi("x", F, ["N", 4, 4]), vi("wa", F, [4, 4]), vi("we", F, [6, 4]), vi("wg", F, [3, 20])]
    g = helper.make_graph(nodes, "data_ops", ins, [vi("y", F, ["N", 3])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), path)


def export(model, shape, path):
    f = io.BytesIO()
    torch.onnx.export(model.eval(), torch.zeros(*shape), f, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "N"}}, opset_version=13)
    m = onnx.load_from_string(f.getvalue())
    onnx.save(strip(m), path)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    onnx.save(strip(onnx.load(os.path.join(ROOT, "examples", "fashion_cnn.onnx"))),
              os.path.join(out, "fashion_cnn.onnx"))
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "examples", "make_resnet.py"),
                    "--blocks", "1,1,1,1", "--size", "32", "--classes", "10",
                    "-o", os.path.join(out, "resnet_small.onnx")], check=True,
                   stdout=subprocess.DEVNULL)
    torch.manual_seed(0)
    export(Mlp(), (2, 12), os.path.join(out, "mlp.onnx"))
    export(ConvNet(), (2, 3, 8, 8), os.path.join(out, "convnet.onnx"))
    all_ops(os.path.join(out, "all_ops.onnx"))
    eval_ops(os.path.join(out, "eval_ops.onnx"))
    data_ops(os.path.join(out, "data_ops.onnx"))
    # GPT blocks (embeddings, LayerNorm decomposed at 13 and as an op at 17,
    # masked attention, GELU); the causal-mask buffer stays an initializer.
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import make_gpt
    for opset, gelu in ((13, "erf"), (17, "tanh")):
        path = os.path.join(out, "gpt%d.onnx" % opset)
        make_gpt.export(make_gpt.GPT(16, 8, 8, 2, 1, gelu), path, 2, 8, opset)
        m = onnx.load(path)
        onnx.save(strip(m, [i.name for i in m.graph.initializer if i.name.endswith("mask")]), path)


if __name__ == "__main__":
    main()
