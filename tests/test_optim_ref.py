"""test_optim_ref.py — the optimizers against torch.optim, on the update.

test_reference.py compares whole parameters after 3 steps at 1e-4, which a
missing weight decay passes (its effect on a parameter is ~1e-5 of it).
Here the quantity compared is the update itself, p3 - p0 after 3 steps on
one batch, relative error <= 1e-5 per parameter, with --momentum and
--weight-decay passed explicitly to `snc compile` (non-default values, so a
flag that is ignored fails too) and AdamW both with its default decay (0.01,
torch's) and an explicit one. p0 is the program's own --steps 0 dump, which
must be the exported initializers bit for bit.
"""
import copy
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from snc_harness import compile_model, export, load_dump, rel_err, run  # noqa: E402

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
nn = torch.nn
F = torch.nn.functional

UPDATE_TOL = 1e-5
B = 4


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3)
        self.fc1 = nn.Linear(4 * 4 * 4, 6)
        self.fc2 = nn.Linear(6, 5)

    def forward(self, x):
        x = torch.tanh(self.c(x))
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))


# name: (snc flags, torch optimizer factory)
CASES = {
    "sgd_momentum_wd": (["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.8", "--weight-decay", "0.02"],
                        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, weight_decay=0.02)),
    "sgd_plain_wd": (["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0", "--weight-decay", "0.02"],
                     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.0, weight_decay=0.02)),
    "adam_wd": (["--optimizer", "adam", "--lr", "0.002", "--weight-decay", "0.05"],
                lambda p: torch.optim.Adam(p, lr=0.002, weight_decay=0.05)),
    "adamw_default": (["--optimizer", "adamw", "--lr", "0.002"],
                      lambda p: torch.optim.AdamW(p, lr=0.002)),       # weight_decay 0.01
    "adamw_wd": (["--optimizer", "adamw", "--lr", "0.002", "--weight-decay", "0.1"],
                 lambda p: torch.optim.AdamW(p, lr=0.002, weight_decay=0.1)),
}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from onnx import numpy_helper
    root = tmp_path_factory.mktemp("optim")
    torch.manual_seed(3)
    net = Small()
    x = torch.randn(B, 3, 6, 6)
    y = torch.randint(0, 5, (B,))
    path = str(root / "small.onnx")
    export(copy.deepcopy(net), x, path)
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    with torch.no_grad():
        for k, v in net.named_parameters():
            v.copy_(torch.from_numpy(np.array(inits[k])))
    np.save(root / "x.npy", x.numpy())
    np.save(root / "y.npy", y.numpy().astype(np.int64))
    return {"root": root, "path": path, "net": net, "x": x, "y": y, "inits": inits}


@pytest.mark.parametrize("case", sorted(CASES))
def test_three_step_update_matches_torch(model, case, tmp_path):
    flags, make_opt = CASES[case]
    prog = compile_model(model["path"], str(tmp_path / "p"), B, "--policy", "none", *flags)
    data = "npy:%s,%s" % (model["root"] / "x.npy", model["root"] / "y.npy")
    run([prog, "--threads", "1", "--data", data, "--steps", "0", "--dump-params", str(tmp_path / "d0")])
    run([prog, "--threads", "1", "--data", data, "--steps", "3", "--dump-params", str(tmp_path / "d3")])
    net = copy.deepcopy(model["net"])
    net.train()
    opt = make_opt(net.parameters())
    p0 = {k: v.detach().clone().numpy() for k, v in net.named_parameters()}
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(net(model["x"]), model["y"]).backward()
        opt.step()
    worst = 0.0
    for k, v in net.named_parameters():
        ours0, ours3 = load_dump(tmp_path / "d0", k), load_dump(tmp_path / "d3", k)
        assert ours0.tobytes() == model["inits"][k].tobytes(), "%s: initial value is not the export's" % k
        e = rel_err(ours3 - ours0, v.detach().numpy() - p0[k])
        worst = max(worst, e)
        assert e <= UPDATE_TOL, "%s: update of %s after 3 steps off by %.3g" % (case, k, e)
    print("%s: worst relative error of the 3-step update %.3g" % (case, worst))
