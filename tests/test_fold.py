"""Constant folding (compiler/front/eval.c): the shape-computing subgraphs that
exporters write are evaluated at compile time, at the batch size given, and
their nodes disappear; ops that exist only to be folded fail clearly when
their input is data. Expected values are computed here by hand."""
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from import_util import run_snc, snc_error  # noqa: E402


def const(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def save(tmp, nodes, inits, x_shape, opset=13, name="m.onnx"):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    p = tmp / name
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), str(p))
    return p


def inspect(p, batch):
    r = run_snc("inspect", p, "--batch", batch, "--json")
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def test_flatten_by_shape_arithmetic(tmp_path):
    """x.view(x.size(0), -1) as torch exports it: Shape, Gather, Unsqueeze,
    Concat -> Reshape. The batch comes from --batch, so the folded shape
    follows it; only Reshape and the Gemm remain."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"], name="unsq"),
        helper.make_node("Concat", ["n1", "minus1"], ["shp"], name="cat", axis=0),
        helper.make_node("Reshape", ["x", "shp"], ["f"], name="reshape"),
        helper.make_node("Gemm", ["f", "w"], ["y"], name="fc", transB=1),
    ]
    inits = [const("zero", np.int64(0)), const("ax0", np.array([0], np.int64)),
             const("minus1", np.array([-1], np.int64)), const("w", np.ones((4, 60), np.float32))]
    p = save(tmp_path, nodes, inits, ["N", 3, 4, 5])
    for batch in (2, 7):
        j = inspect(p, batch)
        assert [n["op"] for n in j["nodes"]] == ["Reshape", "Gemm"]
        assert j["nodes"][0]["outputs"][0]["shape"] == [batch, 60]


def test_pads_from_range_where_constantofshape(tmp_path):
    """Pad's pads computed from Range, Equal, Where, ConstantOfShape, Cast,
    Slice, Mul and Concat of constants: pads = [0, 0, 0, 2] + [0, 0, 1, 0]
    worked out below; the padded shape proves the folded values."""
    nodes = [
        # r = Range(0, 4, 1) = [0, 1, 2, 3]; e = (r == 3); top = Where(e, 2, 0) = [0, 0, 0, 2]
        helper.make_node("Range", ["r0", "r4", "r1"], ["r"], name="range"),
        helper.make_node("Equal", ["r", "three"], ["e"], name="eq"),
        helper.make_node("Where", ["e", "two", "zero"], ["begin"], name="where"),
        # end = Concat(ConstantOfShape([2]) = [0, 0], Slice([5, 1, 0], ::-2 -> [0, 5]) * [1, 0]... )
        helper.make_node("ConstantOfShape", ["two_shape"], ["zz"], name="cos",
                         value=helper.make_tensor("v", TensorProto.INT64, [1], [0])),
        helper.make_node("Slice", ["v510", "sl_s", "sl_e", "sl_a", "sl_st"], ["sl"], name="slice"),
        helper.make_node("Cast", ["onezero_f"], ["onezero"], name="cast", to=TensorProto.INT64),
        helper.make_node("Div", ["sl", "five"], ["sl5"], name="div"),
        helper.make_node("Sub", ["one_one", "sl5"], ["end2"], name="sub"),
        helper.make_node("Mul", ["end2", "onezero"], ["end2m"], name="mul"),
        helper.make_node("Concat", ["zz", "end2m"], ["end"], name="cat", axis=0),
        helper.make_node("Concat", ["begin", "end"], ["pads"], name="cat2", axis=0),
        helper.make_node("Pad", ["x", "pads", "pv"], ["y"], name="pad"),
    ]
    inits = [const("r0", np.int64(0)), const("r4", np.int64(4)), const("r1", np.int64(1)),
             const("three", np.int64(3)), const("two", np.int64(2)), const("zero", np.int64(0)),
             const("two_shape", np.array([2], np.int64)), const("v510", np.array([5, 1, 0], np.int64)),
             const("sl_s", np.array([-1], np.int64)), const("sl_e", np.array([-100], np.int64)),
             const("sl_a", np.array([0], np.int64)), const("sl_st", np.array([-2], np.int64)),
             const("five", np.int64(5)), const("one_one", np.array([1, 1], np.int64)),
             const("onezero_f", np.array([1.7, 0.2], np.float32)), const("pv", np.float32(0.0))]
    # sl = [0, 5]; sl5 = [0, 1]; end2 = [1, 0]; onezero = Cast([1.7, 0.2]) = [1, 0] -> end2m = [1, 0]
    # pads = [0, 0, 0, 2, 0, 0, 1, 0]: W +2 at the start, H +1 at the end
    p = save(tmp_path, nodes, inits, [2, 3, 4, 5])
    j = inspect(p, 2)
    assert [n["op"] for n in j["nodes"]] == ["Pad"]
    assert j["nodes"][0]["outputs"][0]["shape"] == [2, 3, 5, 7]


def test_fold_only_op_on_data_is_a_clear_error(tmp_path):
    nodes = [helper.make_node("Equal", ["x", "v"], ["g"], name="pick"),
             helper.make_node("Cast", ["g"], ["c"], name="tofloat", to=TensorProto.FLOAT),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    p = save(tmp_path, nodes, [const("v", np.array([0, 2, 1], np.float32))], [2, 3])
    e = snc_error("inspect", p, "--batch", "2")
    assert "op Equal is supported only on constant inputs" in e and "'pick'" in e and "'x'" in e


def test_gather_on_data_any_axis(tmp_path):
    """Gather on data runs on any axis (axis 0: an embedding lookup); a
    constant index outside the axis is a clear error naming the node."""
    nodes = [helper.make_node("Gather", ["x", "idx"], ["g"], name="pick", axis=1),
             helper.make_node("Relu", ["g"], ["y"], name="relu")]
    p = save(tmp_path, nodes, [const("idx", np.array([0, 2], np.int64))], [2, 3])
    j = inspect(p, 2)
    assert j["nodes"][0]["outputs"][0]["shape"] == [2, 2]
    p = save(tmp_path, nodes, [const("idx", np.array([0, 3], np.int64))], [2, 3])
    e = snc_error("inspect", p, "--batch", "2")
    assert "index 3 at position 1 is outside axis 1" in e and "'pick'" in e


def test_cast_of_data_to_int_is_a_clear_error(tmp_path):
    nodes = [helper.make_node("Cast", ["x"], ["c"], name="tolong", to=TensorProto.INT64),
             helper.make_node("Cast", ["c"], ["y"], name="back", to=TensorProto.FLOAT)]
    p = save(tmp_path, nodes, [], [2, 3])
    e = snc_error("inspect", p, "--batch", "2")
    assert "op Cast is supported only on constant inputs" in e and "'tolong'" in e
    # computed, not a graph input: the shape function's message
    nodes.insert(0, helper.make_node("Relu", ["x"], ["r"], name="relu"))
    nodes[1].input[0] = "r"
    p = save(tmp_path, nodes, [], [2, 3], name="m2.onnx")
    e = snc_error("inspect", p, "--batch", "2")
    assert "Cast from float32 to int64 is supported only on constant inputs" in e and "'tolong'" in e


def test_output_depending_only_on_the_input_shape(tmp_path):
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Cast", ["s"], ["y"], name="cast", to=TensorProto.FLOAT)]
    p = save(tmp_path, nodes, [], [2, 3])
    e = snc_error("inspect", p, "--batch", "2")
    assert "is a constant" in e


def test_unsqueeze_squeeze_cast_on_data_are_copies(tmp_path):
    nodes = [helper.make_node("Unsqueeze", ["x", "ax"], ["u"], name="u"),
             helper.make_node("Cast", ["u"], ["c"], name="c", to=TensorProto.FLOAT),
             helper.make_node("Squeeze", ["c"], ["s"], name="s"),
             helper.make_node("Gemm", ["s", "w"], ["y"], name="fc", transB=1)]
    p = save(tmp_path, nodes, [const("ax", np.array([-1, 1], np.int64)),
                               const("w", np.ones((2, 3), np.float32))], [4, 3])
    j = inspect(p, 4)
    assert [n["op"] for n in j["nodes"]] == ["Unsqueeze", "Cast", "Squeeze", "Gemm"]
    assert j["nodes"][0]["outputs"][0]["shape"] == [4, 1, 3, 1]
    assert j["nodes"][2]["outputs"][0]["shape"] == [4, 3]


def test_eval_only_op_on_data_names_its_source(tmp_path):
    """An op snc only evaluates, reached by data: the message names the op,
    the node, and the graph input the value is computed from."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Floor", ["r"], ["s"], name="rotary_floor"),
             helper.make_node("Relu", ["s"], ["y"], name="relu2")]
    e = snc_error("inspect", save(tmp_path, nodes, [], [2, 3]), "--batch", "2")
    assert "op Floor is supported only on constant inputs" in e and "'rotary_floor'" in e
    assert "computed from the data input 'x'" in e


def test_causal_mask_and_rotary_tables_are_evaluated(tmp_path):
    """Llama's constant subgraphs: a causal mask from Trilu over ConstantOfShape
    and Where, and rotary tables from Range, a buffer of inverse frequencies
    (a float initializer, not a parameter), MatMul, Cos and Sin; all evaluated
    at compile time, values as numpy computes them."""
    T, D = 4, 6
    inv = (1.0 / (10000 ** (np.arange(0, D, 2, dtype=np.float32) / D))).astype(np.float32)
    nodes = [
        # mask: triu(full((T, T), -inf), 1) -> added to scores x (B, T, T)
        helper.make_node("ConstantOfShape", ["tt"], ["full"], name="full",
                         value=numpy_helper.from_array(np.array([-np.inf], np.float32))),
        helper.make_node("Trilu", ["full", "one"], ["mask"], name="triu", upper=1),
        helper.make_node("Add", ["x", "mask"], ["xm"], name="addmask"),
        # rotary: pos (T, 1) x inv (1, D/2) -> (T, D/2), cat -> (T, D)
        helper.make_node("Range", ["zero", "tlen", "step"], ["pos"], name="range"),
        helper.make_node("Cast", ["pos"], ["posf"], name="posf", to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["posf", "ax1"], ["pcol"], name="pcol"),
        helper.make_node("Unsqueeze", ["inv_freq", "ax0"], ["irow"], name="irow"),
        helper.make_node("MatMul", ["pcol", "irow"], ["freqs"], name="freqs"),
        helper.make_node("Concat", ["freqs", "freqs"], ["emb"], name="emb", axis=-1),
        helper.make_node("Cos", ["emb"], ["cos"], name="cos"),
        helper.make_node("Sin", ["emb"], ["sin"], name="sin"),
        helper.make_node("Slice", ["cos", "s0", "s4", "ax1"], ["cos4"], name="cos4"),
        helper.make_node("Slice", ["sin", "s0", "s4", "ax1"], ["sin4"], name="sin4"),
        helper.make_node("Mul", ["xm", "cos4"], ["a"], name="mulcos"),
        helper.make_node("Add", ["a", "sin4"], ["y"], name="addsin"),
    ]
    inits = [const("tt", np.array([T, T], np.int64)), const("one", np.array(1, np.int64)),
             const("zero", np.array(0, np.int64)), const("tlen", np.array(T, np.int64)),
             const("step", np.array(1, np.int64)), const("ax1", np.array([1], np.int64)),
             const("ax0", np.array([0], np.int64)), const("inv_freq", inv),
             const("s0", np.array([0], np.int64)), const("s4", np.array([T], np.int64))]
    p = save(tmp_path, nodes, inits, [2, T, T], opset=14)
    j = inspect(p, 2)
    assert [n["op"] for n in j["nodes"]] == ["Add", "Mul", "Add"]
    assert j["params"] == 0, "inv_freq is a buffer, not a trainable parameter"
    r = run_snc("inspect", p, "--dump", "import")
    assert r.returncode == 0


def test_eval_dump_values(tmp_path):
    """snc inspect --dump eval: a graph of constants alone, its outputs'
    values: integer wrap-around, Mod's sign rules, float16 rounding, Where on
    bool, ScatterND, TopK."""
    nodes = [helper.make_node("Mod", ["a", "b"], ["mod"], name="mod"),
             helper.make_node("Mod", ["a", "b"], ["fmod"], name="fmod", fmod=1),
             helper.make_node("Add", ["i8", "i8"], ["wrap"], name="wrap"),
             helper.make_node("Cast", ["f"], ["h"], name="tohalf", to=TensorProto.FLOAT16),
             helper.make_node("Less", ["a", "b"], ["lt"], name="lt"),
             helper.make_node("Where", ["lt", "a", "b"], ["mn"], name="where"),
             helper.make_node("ScatterND", ["a", "ind", "upd"], ["sc"], name="scatter"),
             helper.make_node("TopK", ["f", "k"], ["tv", "ti"], name="topk")]
    inits = [const("a", np.array([-7, 7, 5, -5], np.int64)),
             const("b", np.array([3, -3, 3, 3], np.int64)),
             const("i8", np.array([100, -100], np.int8)),
             const("f", np.array([1.0001, 65519.0, 3.0], np.float32)),
             const("ind", np.array([[1], [3]], np.int64)),
             const("upd", np.array([70, 50], np.int64)),
             const("k", np.array([2], np.int64))]
    outs = ["mod", "fmod", "wrap", "h", "mn", "sc", "tv", "ti"]
    g = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
                                           for o in outs], inits)
    p = tmp_path / "c.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), str(p))
    r = run_snc("inspect", p, "--dump", "eval")
    assert r.returncode == 0, r.stderr
    v = {o["name"]: o for o in json.loads(r.stdout)["outputs"]}
    assert v["mod"]["values"] == [2, -2, 2, 1]          # the divisor's sign
    assert v["fmod"]["values"] == [-1, 1, 2, -2]        # the dividend's sign
    assert v["wrap"]["values"] == [-56, 56] and v["wrap"]["dtype"] == "int8"
    assert v["h"]["values"] == [float(np.float16(1.0001)), 65504.0, 3.0]
    assert v["mn"]["values"] == [-7, -3, 3, -5]
    assert v["sc"]["values"] == [-7, 70, 5, 50]
    assert v["tv"]["values"] == [65519.0, 3.0] and v["ti"]["values"] == [1, 2]
