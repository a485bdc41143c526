#!/usr/bin/python3
"""make_resnet.py — writes bottleneck ResNets of any depth as ONNX, with
onnx.helper and no initializers: every parameter and BatchNormalization
statistic is a graph input with a declared shape, so even the 2,498-layer
network is a small file (snc initializes such inputs as PyTorch would).

    /usr/bin/python3 examples/make_resnet.py --depth 50 [--size 224] [--classes 1000] [-o FILE]
    /usr/bin/python3 examples/make_resnet.py --blocks 6,32,788,6 -o resnet2498.onnx

The network is torchvision's ResNet v1.5 layout: 7x7/2 conv (64) + BN + ReLU,
3x3/2 max pool, four stages of bottleneck blocks (1x1, 3x3 with the stride,
1x1 expanding 4x; widths 64, 128, 256, 512), each conv without bias and
followed by BatchNormalization (+ ReLU), a residual Add, a 1x1 projection
(conv + BN) on the first block of each stage, then GlobalAveragePool,
Flatten and Gemm. Depth = 3 * (blocks) + 2: 50 = 3,4,6,3; 101 = 3,4,23,3;
152 = 3,8,36,3; other depths (d - 2 divisible by 3) use 3,8,n,3, e.g. 1001 =
3,8,319,3; --blocks gives the stages directly (6,32,788,6: 2,498 layers).
The data input 'input' has a symbolic batch dimension: give snc --batch N.
With the default 1000 classes the parameters equal torchvision's resnet50's.
"""
import argparse
import sys

import onnx
from onnx import TensorProto, helper

TABLE = {50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}


def blocks_for(depth):
    if depth in TABLE:
        return TABLE[depth]
    if depth < 50 or (depth - 2) % 3:
        raise ValueError("depth %d: need 50, 101, 152 or 3*blocks+2 >= 50" % depth)
    return [3, 8, (depth - 2) // 3 - 14, 3]


class Builder:
    def __init__(self):
        self.nodes, self.inputs = [], []
        self.count = 0

    def param(self, name, shape):
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        return name

    def conv_bn(self, x, name, cin, cout, k, stride, relu):
        w = self.param(name + ".conv.weight", [cout, cin, k, k])
        y = name + ".conv"
        self.nodes.append(helper.make_node("Conv", [x, w], [y], name=y, kernel_shape=[k, k],
                                           strides=[stride, stride], pads=[k // 2] * 4))
        bn = [self.param(name + ".bn." + s, [cout]) for s in
              ("weight", "bias", "running_mean", "running_var")]
        z = name + ".bn"
        self.nodes.append(helper.make_node("BatchNormalization", [y] + bn, [z], name=z,
                                           epsilon=1e-5, momentum=0.9))
        if relu:
            r = name + ".relu"
            self.nodes.append(helper.make_node("Relu", [z], [r], name=r))
            return r
        return z

    def bottleneck(self, x, name, cin, width, stride):
        cout = width * 4
        y = self.conv_bn(x, name + ".1", cin, width, 1, 1, True)
        y = self.conv_bn(y, name + ".2", width, width, 3, stride, True)
        y = self.conv_bn(y, name + ".3", width, cout, 1, 1, False)
        short = x
        if stride != 1 or cin != cout:
            short = self.conv_bn(x, name + ".down", cin, cout, 1, stride, False)
        s = name + ".add"
        self.nodes.append(helper.make_node("Add", [y, short], [s], name=s))
        r = name + ".out"
        self.nodes.append(helper.make_node("Relu", [s], [r], name=r))
        return r, cout


def make(blocks, size, classes):
    b = Builder()
    data = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, size, size])
    x = b.conv_bn("input", "stem", 3, 64, 7, 2, True)
    b.nodes.append(helper.make_node("MaxPool", [x], ["stem.pool"], name="stem.pool",
                                    kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, c = "stem.pool", 64
    for s, (n, width) in enumerate(zip(blocks, [64, 128, 256, 512])):
        for i in range(n):
            x, c = b.bottleneck(x, "layer%d.%d" % (s + 1, i), c, width,
                                2 if i == 0 and s > 0 else 1)
    b.nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"))
    b.nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], name="flat", axis=1))
    w = b.param("fc.weight", [classes, c])
    bias = b.param("fc.bias", [classes])
    b.nodes.append(helper.make_node("Gemm", ["flat", w, bias], ["logits"], name="fc", transB=1))
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])
    depth = 3 * sum(blocks) + 2
    graph = helper.make_graph(b.nodes, "resnet%d" % depth, [data] + b.inputs, [out])
    model = helper.make_model(graph, producer_name="snc make_resnet.py",
                              opset_imports=[helper.make_opsetid("", 13)])
    return model, depth


def main():
    ap = argparse.ArgumentParser(description="Write a bottleneck ResNet as ONNX (no initializers).")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--depth", type=int, default=50)
    g.add_argument("--blocks", help="blocks per stage, e.g. 6,32,788,6")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("-o", "--out", help="default: resnetDEPTH.onnx")
    args = ap.parse_args()
    try:
        blocks = [int(v) for v in args.blocks.split(",")] if args.blocks else blocks_for(args.depth)
        if len(blocks) != 4 or min(blocks) < 1:
            raise ValueError("--blocks needs four positive counts")
    except ValueError as e:
        sys.exit("make_resnet: error: %s" % e)
    model, depth = make(blocks, args.size, args.classes)
    path = args.out or "resnet%d.onnx" % depth
    onnx.save(model, path)
    print("wrote %s: %d layers (blocks %s), %d nodes" % (path, depth, blocks, len(model.graph.node)))


if __name__ == "__main__":
    main()
