"""The import pass alone, through `snc inspect MODEL --dump import`.

Models are built here with onnx.helper (or exported by torch); expected kinds,
values and init rules come from the ONNX/PyTorch conventions written out by
hand below, never from snc itself.
"""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from import_util import dump_import, run_snc, snc_error

F = TensorProto.FLOAT


def same_f32(printed, ref):
    """Printed with %.9g, a float32 reads back exactly once rounded to float32."""
    return np.array_equal(np.array(printed, np.float32), np.asarray(ref, np.float32))


def vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def save(tmp_path, nodes, inputs, outputs, inits=(), opset=13, name="m.onnx", **kw):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], **kw)
    p = tmp_path / name
    onnx.save(m, str(p))
    return p


def relu_model(tmp_path, **kw):
    return save(tmp_path, [helper.make_node("Relu", ["x"], ["y"], name="r")],
                [vi("x", [1, 4])], [vi("y", [1, 4])], **kw)


# ---- kinds and values ----

def test_initializer_kinds_and_values(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    scale, bias = np.full(4, 1.5, np.float32), np.arange(4, dtype=np.float32)
    mean, var = np.full(4, 0.25, np.float32), np.full(4, 2.0, np.float32)
    inits = [
        numpy_helper.from_array(w, "w"),                                   # raw_data
        helper.make_tensor("b", F, [4], b.tolist()),                       # float_data
        numpy_helper.from_array(scale, "scale"), numpy_helper.from_array(bias, "bias"),
        numpy_helper.from_array(mean, "mean"), numpy_helper.from_array(var, "var"),
        helper.make_tensor("shape", TensorProto.INT64, [2], [1, -1]),      # int64_data
        helper.make_tensor("starts", TensorProto.INT32, [1], [1]),         # int32_data
        helper.make_tensor("ends", TensorProto.INT32, [1], [3]),
        helper.make_tensor("lo", TensorProto.DOUBLE, [], [-0.5]),          # double_data
        helper.make_tensor("fcw", F, [10, 2], np.arange(20, dtype=np.float32).tolist()),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"],
                         name="bn"),
        helper.make_node("Reshape", ["n", "shape"], ["r"], name="reshape"),
        helper.make_node("Slice", ["r", "starts", "ends"], ["s"], name="slice"),
        helper.make_node("Clip", ["s", "lo"], ["cl"], name="clip"),
        helper.make_node("Gemm", ["cl", "fcw"], ["y"], name="fc", transB=1),
    ]
    p = save(tmp_path, nodes, [vi("x", ["N", 2, 5, 5])], [vi("y", ["N", 10])], inits)
    head, t, n = dump_import(p)
    assert "opset=13" in head and "input='x'" in head and "output='y'" in head
    assert t["x"]["kind"] == "input" and t["x"]["shape"] == (-1, 2, 5, 5)
    assert t["x"]["init"] == "none"
    for name in ("w", "b", "scale", "bias", "fcw"):
        assert t[name]["kind"] == "param" and t[name]["init"] == "file", name
    for name in ("mean", "var"):
        assert t[name]["kind"] == "state" and t[name]["init"] == "file", name
    for name in ("shape", "starts", "ends", "lo"):
        assert t[name]["kind"] == "const", name
    assert t["w"]["shape"] == (4, 2, 3, 3) and t["w"]["ndata"] == 72
    assert same_f32(t["w"]["values"], w.flatten()[:8])
    assert same_f32(t["b"]["values"], b)
    assert t["scale"]["values"] == [1.5] * 4 and t["var"]["values"] == [2.0] * 4
    assert t["shape"]["dtype"] == "int64" and t["shape"]["values"] == [1, -1]
    assert t["starts"]["dtype"] == "int32" and t["starts"]["values"] == [1]
    assert t["lo"]["dtype"] == "float64" and t["lo"]["shape"] == () and t["lo"]["values"] == [-0.5]
    assert t["fcw"]["values"] == list(range(8))
    assert [x["op"] for x in n] == ["Conv", "BatchNormalization", "Reshape", "Slice", "Clip", "Gemm"]
    assert n[0]["inputs"] == ["x", "w", "b"] and n[0]["outputs"] == ["c"]
    assert "pads=[1, 1, 1, 1]" in n[0]["attrs"] and "transB=1" in n[5]["attrs"]
    assert t["c"]["kind"] == "activation" and t["c"]["producer"] == 0
    assert t["y"]["output"] and t["y"]["producer"] == 5


def test_default_init_for_parameters_without_initializers(tmp_path):
    # PyTorch's defaults: Conv/Linear weight kaiming_uniform(a=sqrt(5)) and bias
    # U(+-1/sqrt(fan_in)), fan_in = in_channels/groups * kh * kw (conv),
    # in_features (linear); BN weight 1, bias 0, running mean 0, var 1.
    nodes = [
        helper.make_node("Conv", ["x", "cw", "cb"], ["c"], name="conv", group=2),
        helper.make_node("BatchNormalization", ["c", "s", "o", "m", "v"], ["bn"], name="bn"),
        helper.make_node("Flatten", ["bn"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "g1w", "g1b"], ["g1"], name="fc1"),            # B (K, N)
        helper.make_node("Gemm", ["g1", "g2w", "g2b"], ["g2"], name="fc2", transB=1), # B (N, K)
        helper.make_node("MatMul", ["g2", "mw"], ["y"], name="mm"),
    ]
    inputs = [vi("x", ["N", 4, 3, 3]), vi("cw", [6, 2, 3, 3]), vi("cb", [6]), vi("s", [6]),
              vi("o", [6]), vi("m", [6]), vi("v", [6]), vi("g1w", [6, 32]), vi("g1b", [32]),
              vi("g2w", [10, 32]), vi("g2b", [10]), vi("mw", [10, 5])]
    _, t, _ = dump_import(save(tmp_path, nodes, inputs, [vi("y", ["N", 5])]))
    expect = {"cw": ("param", "kaiming", 18), "cb": ("param", "bias", 18),
              "s": ("param", "one", None), "o": ("param", "zero", None),
              "m": ("state", "zero", None), "v": ("state", "one", None),
              "g1w": ("param", "kaiming", 6), "g1b": ("param", "bias", 6),
              "g2w": ("param", "kaiming", 32), "g2b": ("param", "bias", 32),
              "mw": ("param", "kaiming", 10)}
    for name, (kind, init, fan) in expect.items():
        assert (t[name]["kind"], t[name]["init"], t[name]["fan_in"]) == (kind, init, fan), name
        assert t[name]["ndata"] is None
    assert t["x"]["kind"] == "input"


def test_parameter_without_initializer_needs_a_known_shape(tmp_path):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    p = save(tmp_path, nodes, [vi("x", [1, 4]), vi("w", [4, "K"])], [vi("y", [1, None])])
    e = snc_error("inspect", p, "--dump", "import")
    assert "'w'" in e and "shape" in e


def test_torch_export_training_mode(tmp_path):
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.bn = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4)
            self.d, self.fc = nn.Dropout(0.3), nn.Linear(4 * 4 * 4, 10)

        def forward(self, x):
            x = nn.functional.max_pool2d(torch.relu(self.bn(self.c(x))), 2)
            return self.fc(self.d(x).flatten(1))

    torch.manual_seed(0)
    m = Net().train()
    for opset in (13, 14):
        p = tmp_path / ("n%d.onnx" % opset)
        torch.onnx.export(m, torch.randn(2, 1, 8, 8), str(p), opset_version=opset,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b"}})
        _, t, n = dump_import(p)
        params = {k for k, v in t.items() if v["kind"] == "param"}
        assert params == {k for k, _ in m.named_parameters()}
        assert {k for k, v in t.items() if v["kind"] == "state"} == {"bn.running_mean",
                                                                      "bn.running_var"}
        assert same_f32(t["c.weight"]["values"], m.c.weight.detach().flatten()[:8].numpy())
        assert t["fc.bias"]["ndata"] == 10
        assert [x["op"] for x in n] == ["Conv", "BatchNormalization", "Relu", "MaxPool",
                                        "Dropout", "Flatten", "Gemm"]
        assert "Constant" not in {x["op"] for x in n}
        drop = n[4]
        ratio, training = t[drop["inputs"][1]], t[drop["inputs"][2]]
        assert ratio["kind"] == "const" and abs(ratio["values"][0] - 0.3) < 1e-7
        assert training["dtype"] == "bool" and training["values"] == [1]
        assert t["x"]["shape"] == (-1, 1, 8, 8)


def test_external_data(tmp_path):
    w = np.arange(24, dtype=np.float32).reshape(2, 12) / 7
    shape = numpy_helper.from_array(np.array([4, 6], np.int64), "shape")
    nodes = [helper.make_node("Add", ["x", "w"], ["a"], name="add"),
             helper.make_node("Reshape", ["a", "shape"], ["y"], name="reshape")]
    g = helper.make_graph(nodes, "g", [vi("x", [2, 12])], [vi("y", [4, 6])],
                          [numpy_helper.from_array(w, "w"), shape])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    d = tmp_path / "ext"
    d.mkdir()
    onnx.save_model(m, str(d / "m.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    assert (d / "weights.bin").exists()
    _, t, _ = dump_import(d / "m.onnx")
    assert t["w"]["kind"] == "param" and t["w"]["ndata"] == 24
    assert same_f32(t["w"]["values"], w.flatten()[:8])
    assert t["shape"]["kind"] == "const" and t["shape"]["values"] == [4, 6]
    # A short file, then a missing one: clear errors that name the file.
    data = (d / "weights.bin").read_bytes()
    (d / "weights.bin").write_bytes(data[:50])
    e = snc_error("inspect", d / "m.onnx", "--dump", "import")
    assert "weights.bin" in e and "too short" in e
    (d / "weights.bin").unlink()
    e = snc_error("inspect", d / "m.onnx", "--dump", "import")
    assert "weights.bin" in e and "cannot open" in e


def test_external_data_may_not_leave_the_model_folder(tmp_path):
    t = numpy_helper.from_array(np.ones(4, np.float32), "w")
    t.data_location = TensorProto.EXTERNAL
    t.ClearField("raw_data")
    e = t.external_data.add()
    e.key, e.value = "location", "../secret.bin"
    p = save(tmp_path, [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
             [vi("x", [4])], [vi("y", [4])], [t])
    assert "relative path" in snc_error("inspect", p, "--dump", "import")


def test_constant_folding(tmp_path):
    nodes = [
        helper.make_node("Constant", [], ["k"], name="c1",
                         value=numpy_helper.from_array(np.array([2.5, -1], np.float32))),
        helper.make_node("Constant", [], ["s"], name="c2", value_ints=[2, 3]),
        helper.make_node("Constant", [], ["half"], name="c3", value_float=0.5),
        helper.make_node("Constant", [], ["one"], name="c4", value_int=1),
        helper.make_node("Mul", ["x", "k"], ["a"], name="mul"),
        helper.make_node("Reshape", ["a", "s"], ["b"], name="reshape"),
        helper.make_node("Mul", ["b", "half"], ["y"], name="mul2"),
    ]
    p = save(tmp_path, nodes, [vi("x", [3, 2])], [vi("y", [2, 3])])
    _, t, n = dump_import(p)
    assert [x["name"] for x in n] == ["mul", "reshape", "mul2"]
    assert t["k"] == dict(t["k"], kind="const", dtype="float32", shape=(2,), values=[2.5, -1.0],
                          producer=None)
    assert t["s"]["kind"] == "const" and t["s"]["dtype"] == "int64" and t["s"]["values"] == [2, 3]
    assert t["half"]["shape"] == () and t["half"]["values"] == [0.5]
    assert "one" not in t  # unused: pruned


def test_tensor_attribute_becomes_a_constant(tmp_path):
    tv = numpy_helper.from_array(np.array([7, 8], np.int64), "ignored")
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r", extra=tv)]
    _, t, n = dump_import(save(tmp_path, nodes, [vi("x", [2])], [vi("y", [2])]))
    assert t["r:extra"]["kind"] == "const" and t["r:extra"]["values"] == [7, 8]
    assert "extra=tensor 'r:extra'" in n[0]["attrs"]


def test_input_selection(tmp_path):
    nodes = [helper.make_node("Add", ["a", "x"], ["y"], name="add")]
    inits = [numpy_helper.from_array(np.ones(4, np.float32), "init")]
    p = save(tmp_path, nodes + [helper.make_node("Add", ["y", "init"], ["z"], name="add2")],
             [vi("init", [4]), vi("a", [4]), vi("x", [4])], [vi("z", [4])], inits)
    _, t, _ = dump_import(p)   # the first graph input without an initializer: 'a'
    assert t["a"]["kind"] == "input" and t["x"]["kind"] == "param"
    assert (t["x"]["init"], t["init"]["init"]) == ("zero", "file")
    _, t, _ = dump_import(p, "--input", "x")
    assert t["x"]["kind"] == "input" and t["a"]["kind"] == "param"
    assert "no graph input named 'nope'" in snc_error("inspect", p, "--dump", "import", "--input", "nope")
    e = snc_error("inspect", p, "--dump", "import", "--input", "init")
    assert "'init'" in e and "initializer" in e


def test_pruning_and_topological_order(tmp_path):
    # Nodes listed backwards; an auxiliary head (with its own weight) that the
    # first output does not need, as GoogLeNet's.
    aux_w = numpy_helper.from_array(np.ones((4, 4), np.float32), "aux_w")
    nodes = [
        helper.make_node("Sigmoid", ["b"], ["y"], name="last"),
        helper.make_node("MatMul", ["a", "aux_w"], ["aux"], name="aux_head"),
        helper.make_node("Tanh", ["a"], ["b"], name="mid"),
        helper.make_node("Relu", ["x"], ["a"], name="first"),
    ]
    p = save(tmp_path, nodes, [vi("x", [1, 4])], [vi("y", [1, 4]), vi("aux", [1, 4])], [aux_w])
    _, t, n = dump_import(p)
    assert [x["name"] for x in n] == ["first", "mid", "last"]
    assert "aux_w" not in t and "aux" not in t
    assert [t[k]["producer"] for k in ("a", "b", "y")] == [0, 1, 2]
    assert t["y"]["output"]


def test_unsupported_ops_in_one_message(tmp_path):
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("Foo", ["a"], ["b"], name="foo1"),
        helper.make_node("Bar", ["b"], ["c"], name="bar1"),
        helper.make_node("Foo", ["c"], ["d"], name="foo2"),
        helper.make_node("Relu", ["d"], ["y"], name="custom", domain="com.example"),
    ]
    g = helper.make_graph(nodes, "g", [vi("x", [1])], [vi("y", [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                            helper.make_opsetid("com.example", 1)])
    p = tmp_path / "u.onnx"
    onnx.save(m, str(p))
    e = snc_error("inspect", p, "--dump", "import")
    assert "unsupported ops" in e
    assert "Foo (node 'foo1')" in e and "Bar (node 'bar1')" in e
    assert "com.example:Relu (node 'custom')" in e and "4 nodes" in e
    assert "foo2" not in e  # each op type once, with its first node


def test_dangling_input(tmp_path):
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")]
    e = snc_error("inspect", save(tmp_path, nodes, [vi("x", [1])], [vi("y", [1])]), "--dump", "import")
    assert "'ghost'" in e and "node 'adder'" in e and "op Add" in e


def test_cycle(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="in"),
             helper.make_node("Add", ["a", "c"], ["b"], name="loop1"),
             helper.make_node("Tanh", ["b"], ["c"], name="loop2"),
             helper.make_node("Sigmoid", ["c"], ["y"], name="out")]
    e = snc_error("inspect", save(tmp_path, nodes, [vi("x", [1])], [vi("y", [1])]), "--dump", "import")
    assert "cycle" in e and ("node 'loop1'" in e or "node 'loop2'" in e)


def test_duplicate_producer(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="p1"),
             helper.make_node("Tanh", ["x"], ["y"], name="p2")]
    e = snc_error("inspect", save(tmp_path, nodes, [vi("x", [1])], [vi("y", [1])]), "--dump", "import")
    assert "'y'" in e and "p1" in e and "p2" in e


def test_output_shadowing_an_initializer(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["w"], name="r"),
             helper.make_node("Add", ["x", "w"], ["y"], name="a")]
    inits = [numpy_helper.from_array(np.ones(1, np.float32), "w")]
    e = snc_error("inspect", save(tmp_path, nodes, [vi("x", [1])], [vi("y", [1])], inits),
                  "--dump", "import")
    assert "'w'" in e and "node 'r'" in e


def test_wrong_dtype_or_non_constant_shape_input(tmp_path):
    bad = [numpy_helper.from_array(np.array([1.0, 4.0], np.float32), "shape")]
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="rs")]
    e = snc_error("inspect", save(tmp_path, nodes, [vi("x", [4])], [vi("y", [1, 4])], bad),
                  "--dump", "import")
    assert "'shape'" in e and "int64" in e and "float32" in e and "node 'rs'" in e
    # The shape as a graph input without a value: not a constant.
    p = save(tmp_path, nodes, [vi("x", [4]), vi("shape", [2], TensorProto.INT64)],
             [vi("y", [1, 4])], name="m2.onnx")
    e = snc_error("inspect", p, "--dump", "import")
    assert "must be a constant" in e and "node 'rs'" in e


def raw_tensor(name, dims, dtype=F, raw=b""):
    t = TensorProto()
    t.name, t.data_type = name, dtype
    t.dims.extend(dims)
    t.raw_data = raw
    return t


@pytest.mark.parametrize("dims,words", [
    ([1 << 41], "2^40"),
    ([1 << 20, 1 << 20, 1 << 20], "absurd"),
    ([-3], "dimension -3"),
    ([1] * 9, "rank 9"),
    ([4], "bytes of data"),          # declared 16 bytes, carries 0
])
def test_absurd_initializer_dims(tmp_path, dims, words):
    nodes = [helper.make_node("Add", ["x", "w"], ["y"], name="a")]
    p = save(tmp_path, nodes, [vi("x", [1])], [vi("y", [1])], [raw_tensor("w", dims)])
    e = snc_error("inspect", p, "--dump", "import")
    assert words in e and "'w'" in e


def test_absurd_input_dims(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    p = save(tmp_path, nodes, [vi("x", [1 << 50])], [vi("y", [1])])
    assert "'x'" in snc_error("inspect", p, "--dump", "import")


def test_typed_count_mismatch(tmp_path):
    t = helper.make_tensor("w", F, [2], [1.0, 2.0])
    t.dims[0] = 3
    nodes = [helper.make_node("Add", ["x", "w"], ["y"], name="a")]
    e = snc_error("inspect", save(tmp_path, nodes, [vi("x", [3])], [vi("y", [3])], [t]),
                  "--dump", "import")
    assert "'w'" in e and "2 values for 3 elements" in e


def test_arity(tmp_path):
    nodes = [helper.make_node("Conv", ["x"], ["y"], name="c")]
    e = snc_error("inspect", save(tmp_path, nodes, [vi("x", [1, 1, 3, 3])], [vi("y", None)]),
                  "--dump", "import")
    assert "1 inputs" in e and "node 'c'" in e and "op Conv" in e


def test_optional_inputs_absent(tmp_path):
    nodes = [helper.make_node("Clip", ["x", "", "hi"], ["y"], name="clip")]
    hi = [numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    _, t, n = dump_import(save(tmp_path, nodes, [vi("x", [2])], [vi("y", [2])], hi))
    assert n[0]["inputs"] == ["x", None, "hi"] and t["hi"]["kind"] == "const"


@pytest.mark.parametrize("opset", [6, 29])
def test_opset_range(tmp_path, opset):
    e = snc_error("inspect", relu_model(tmp_path, opset=opset), "--dump", "import")
    assert "opset %d" % opset in e and "opsets 7 to 28" in e


@pytest.mark.parametrize("opset", [22, 25, 28])
def test_newest_opsets_read(tmp_path, opset):
    """Up to 28, the newest onnx 1.23 defines (the ops snc reads changed
    only in their types from 22 on)."""
    r = run_snc("inspect", relu_model(tmp_path, opset=opset), "--dump", "import")
    assert r.returncode == 0, r.stderr


def test_unreadable_files(tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert "empty" in snc_error("inspect", tmp_path / "empty.onnx", "--dump", "import")
    (tmp_path / "junk.onnx").write_bytes(b"\xff" * 64)
    assert "not a valid ONNX model" in snc_error("inspect", tmp_path / "junk.onnx", "--dump", "import")
    assert "cannot open" in snc_error("inspect", tmp_path / "none.onnx", "--dump", "import")
    assert "cannot" in snc_error("inspect", tmp_path, "--dump", "import")  # a folder


def test_output_must_depend_on_the_data_input(tmp_path):
    nodes = [helper.make_node("Relu", ["w"], ["y"], name="r"),
             helper.make_node("Relu", ["x"], ["z"], name="r2")]
    inits = [numpy_helper.from_array(np.ones(1, np.float32), "w")]
    e = snc_error("inspect", save(tmp_path, nodes, [vi("x", [1])], [vi("y", [1]), vi("z", [1])], inits),
                  "--dump", "import")
    assert "does not depend on the data input 'x'" in e


def test_names_with_control_characters(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a\nb"], name="r"),
             helper.make_node("Relu", ["a\nb"], ["y"], name="r2")]
    e = snc_error("inspect", save(tmp_path, nodes, [vi("x", [1])], [vi("y", [1])]), "--dump", "import")
    assert "a\\x0ab" in e


def test_large_graph_imports_in_linear_time(tmp_path):
    # 50,000 nodes listed in reverse order, plus one initializer per 10 nodes:
    # a quadratic step anywhere (name lookup, sorting, pruning) would take
    # minutes here instead of well under a second.
    import time
    n = 50000
    nodes, inits = [], []
    for i in range(n):
        src = "x" if i == 0 else "t%d" % (i - 1)
        dst = "y" if i == n - 1 else "t%d" % i
        if i % 10 == 5:
            inits.append(numpy_helper.from_array(np.ones(4, np.float32), "w%d" % i))
            nodes.append(helper.make_node("Add", [src, "w%d" % i], [dst], name="n%d" % i))
        else:
            nodes.append(helper.make_node("Relu", [src], [dst], name="n%d" % i))
    nodes.reverse()
    p = save(tmp_path, nodes, [vi("x", [1, 4])], [vi("y", [1, 4])], inits)
    t0 = time.time()
    head, t, nd = dump_import(p)
    assert time.time() - t0 < 10
    assert "nodes=%d" % n in head and nd[0]["name"] == "n0" and nd[-1]["name"] == "n%d" % (n - 1)
    assert t["w5"]["kind"] == "param" and t["w5"]["producer"] is None
