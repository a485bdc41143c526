"""onnx_torch.py — runs an ONNX graph in PyTorch, with inference semantics
(what `model.eval()` does): BatchNormalization with its running statistics,
Dropout the identity. Written from the ONNX operator definitions for the few
ops the tests' exported models use; any other op is an error, so a test never
silently evaluates less than the graph.

Debian's python3-onnx (1.12) has no onnx.reference; this is the independent
evaluator the export tests need: the exported file, not our torch module,
is what runs.
"""
import numpy as np
import torch
import torch.nn.functional as F
from onnx import numpy_helper


def _attrs(node):
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _pads(p):
    """ONNX pads [x1_begin, x2_begin, x1_end, x2_end] -> F.pad order."""
    if not p:
        return (0, 0, 0, 0)
    return (p[1], p[3], p[0], p[2])


def run(model, x):
    """Evaluates model (an onnx.ModelProto) on x (numpy); returns the first
    graph output as a float32 numpy array."""
    g = model.graph
    env = {t.name: torch.from_numpy(np.array(numpy_helper.to_array(t))) for t in g.initializer}
    env[g.input[0].name] = torch.from_numpy(np.asarray(x, np.float32))
    with torch.no_grad():
        for n in g.node:
            a = _attrs(n)
            i = [env[k] if k else None for k in n.input]
            op = n.op_type
            if op == "Constant":
                out = [torch.from_numpy(np.array(numpy_helper.to_array(a["value"])))]
            elif op == "Conv":
                xp = F.pad(i[0], _pads(a.get("pads")))
                out = [F.conv2d(xp, i[1], i[2] if len(i) > 2 else None, stride=a.get("strides", 1),
                                dilation=a.get("dilations", 1), groups=a.get("group", 1))]
            elif op == "BatchNormalization":
                y = F.batch_norm(i[0], i[3], i[4], i[1], i[2], training=False,
                                 eps=a.get("epsilon", 1e-5))
                out = [y] + [None] * (len(n.output) - 1)
            elif op == "Relu":
                out = [torch.relu(i[0])]
            elif op == "MaxPool":
                assert not a.get("ceil_mode", 0) and not any(a.get("pads", [0])), "MaxPool pads/ceil"
                out = [F.max_pool2d(i[0], a["kernel_shape"], stride=a.get("strides"))]
            elif op == "Flatten":
                out = [torch.flatten(i[0], a.get("axis", 1))]
            elif op == "Dropout":
                out = [i[0]] + [None] * (len(n.output) - 1)
            elif op == "Gemm":
                A = i[0].T if a.get("transA", 0) else i[0]
                B = i[1].T if a.get("transB", 0) else i[1]
                y = a.get("alpha", 1.0) * (A @ B)
                if len(i) > 2 and i[2] is not None:
                    y = y + a.get("beta", 1.0) * i[2]
                out = [y]
            else:
                raise NotImplementedError("onnx_torch: op %s" % op)
            for name, v in zip(n.output, out):
                if name:
                    env[name] = v
    return env[g.output[0].name].numpy()
