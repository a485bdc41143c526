"""onnx_node_cases.py — writes the ONNX backend node suite (the test cases the
onnx package generates with its own reference implementation) in the two
forms tests/test_onnx_node_suite.py gives snc. Run in build/venv (PyPI onnx):

    build/venv/bin/python tests/onnx_node_cases.py OUTDIR

For each case OUTDIR/NAME/ holds
  const.onnx  every graph input made an initializer holding the case's input:
              the whole node runs on constants (snc's compile-time evaluator,
              `snc inspect --dump eval`);
  data.onnx   input 0 the data input (its declared shape the case's), the
              other inputs initializers: the node on the data path
              (`snc inspect --json` gives the output shapes);
  out_K.npy   the suite's expected outputs (output_K.pb).
and OUTDIR/cases.json lists them: name, op types, graph output names, and
`types`: the value kinds the case uses (tensor element types, or "sequence",
"optional", "map") so that the test can tell what is out of scope.
"""
import json
import os
import sys
import warnings

import numpy as np

warnings.filterwarnings("ignore")
import onnx  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.backend.test.case import node  # noqa: E402


def value_kind(vi):
    t = vi.type
    if t.HasField("tensor_type"):
        return onnx.TensorProto.DataType.Name(t.tensor_type.elem_type)
    if t.HasField("sequence_type"):
        return "sequence"
    if t.HasField("optional_type"):
        return "optional"
    if t.HasField("map_type"):
        return "map"
    return "unknown"


def with_inputs_as_initializers(model, inputs, keep_first):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    keep = []
    for i, vi in enumerate(list(g.input)):
        if keep_first and i == 0:
            arr = inputs[0]
            nvi = helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type,
                                                list(arr.shape))
            keep.append(nvi)
            continue
        if i >= len(inputs) or inputs[i] is None:
            continue
        g.initializer.append(numpy_helper.from_array(np.asarray(inputs[i]), vi.name))
    del g.input[:]
    g.input.extend(keep)
    return m


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cases = node.collect_testcases(None)
    listing = []
    for c in cases:
        if not c.model or not c.data_sets:
            continue
        d = os.path.join(out, c.name)
        os.makedirs(d, exist_ok=True)
        g = c.model.graph
        kinds = sorted({value_kind(v) for v in list(g.input) + list(g.output)})
        entry = {"name": c.name, "ops": sorted({n.op_type for n in g.node}),
                 "domains": sorted({n.domain for n in g.node if n.domain}),
                 "outputs": [o.name for o in g.output], "types": kinds,
                 "opset": max([o.version for o in c.model.opset_import if o.domain in ("", "ai.onnx")]
                              or [0]),
                 "const": False, "data": False}
        inputs, outputs = c.data_sets[0]
        tensors_only = all(k not in ("sequence", "optional", "map", "unknown") for k in kinds)
        plain = tensors_only and all(isinstance(a, np.ndarray) for a in inputs) and \
            all(isinstance(a, np.ndarray) for a in outputs)
        if plain:
            try:
                onnx.save(with_inputs_as_initializers(c.model, inputs, False),
                          os.path.join(d, "const.onnx"))
                entry["const"] = True
                if inputs:
                    onnx.save(with_inputs_as_initializers(c.model, inputs, True),
                              os.path.join(d, "data.onnx"))
                    entry["data"] = True
                for k, o in enumerate(outputs):
                    if o.dtype.kind not in "biufc":   # ml_dtypes (bfloat16...): as float32
                        o = o.astype(np.float32)
                    np.save(os.path.join(d, "out_%d.npy" % k), o)
            except Exception as e:  # a value numpy_helper cannot write (float4...)
                entry["const"] = entry["data"] = False
                entry["write_error"] = str(e)[:200]
        listing.append(entry)
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(listing, f, indent=0)


if __name__ == "__main__":
    main()
