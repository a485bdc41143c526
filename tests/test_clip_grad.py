"""ONNX Clip's gradient at its bounds, decided against PyTorch (README
"Clip's gradient"): both targets pass the gradient where lo < x < hi,
strictly, as torch.nn.ReLU6 / F.relu6 / F.hardtanh do; torch.clamp's own
autograd also passes it at x == lo and x == hi. Both export to the same ONNX
Clip (nn.ReLU6 and torch.clamp as Clip alone, F.relu6 as Relu then Clip), so
one rule must serve both: the ReLU6 one, which the networks that use Clip as
an activation (MobileNets) train with, and which the gradient can be decided
from the output alone (lo < y < hi iff lo < x < hi).

The model puts inputs exactly on the bounds: x + b with b = 0 a parameter,
x drawn from {-1, 0, 2.5, 6, 7}; b's gradient sums the passed gradient over
each channel, so a wrong rule at a bound moves it by a whole dy. Checked on
the CPU target (the CUDA kernel uses the same test, runtime/cuda/elementwise.cu;
there is no GPU here).
"""
import copy
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
from snc_harness import compile_model, export, grad_err, load_dump, run  # noqa: E402

F = torch.nn.functional
ACTS = {
    "clamp": lambda t: torch.clamp(t, 0.0, 6.0),
    "nn_relu6": torch.nn.ReLU6(),
    "f_relu6": F.relu6,
}


class Net(torch.nn.Module):
    def __init__(self, act):
        super().__init__()
        self.act = act
        self.b = torch.nn.Parameter(torch.zeros(1, 4, 1, 1))
        self.fc = torch.nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.act(x + self.b), 1))


def grads(model, x, y):
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    return {k: p.grad.numpy().copy() for k, p in model.named_parameters()}


@pytest.mark.parametrize("act", sorted(ACTS))
def test_clip_gradient_at_bounds(act, tmp_path):
    torch.manual_seed(3)
    rng = np.random.default_rng(3)
    x = torch.tensor(rng.choice([-1.0, 0.0, 2.5, 6.0, 7.0], size=(6, 4, 3, 3)), dtype=torch.float32)
    y = torch.tensor(rng.integers(0, 5, 6))
    model = Net(ACTS[act])
    path = str(tmp_path / "model.onnx")
    export(copy.deepcopy(model), x, path)
    import onnx
    ops = [n.op_type for n in onnx.load(path).graph.node]
    assert "Clip" in ops, ops
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "y.npy", y.numpy().astype(np.int64))
    prog = compile_model(path, str(tmp_path / "prog"), 6, "--policy", "none")
    dump = tmp_path / "grads"
    run([prog, "--data", "npy:%s,%s" % (tmp_path / "x.npy", tmp_path / "y.npy"), "--steps", "1",
         "--dump-grads", str(dump)])
    ours = load_dump(dump, "b")
    # The rule we chose: PyTorch's ReLU6/Hardtanh gradient of the same model.
    relu6 = Net(torch.nn.ReLU6())
    relu6.load_state_dict(model.state_dict())
    want = grads(relu6, x, y)
    theirs = grads(model, x, y)
    assert grad_err(ours, want["b"]) < 1e-5, (ours.ravel(), want["b"].ravel())
    assert grad_err(load_dump(dump, "fc.weight"), want["fc.weight"]) < 1e-5
    if act == "clamp":
        # torch.clamp passes the gradient at the bounds: a different answer,
        # by whole gradient elements (so this input does exercise the bounds).
        assert grad_err(ours, theirs["b"]) > 1e-2, (ours.ravel(), theirs["b"].ravel())
    else:
        assert grad_err(ours, theirs["b"]) < 1e-5
