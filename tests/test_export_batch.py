"""The batch baked into exported shapes: torch writes x.view(b, ...) with the
export batch as a constant Reshape target unless dynamic_axes is given. On a
tensor that carries the batch, such a leading target follows --batch (snc
inspect says so); an export batch of 1, which cannot be told from a literal
1, is a clear error at the Reshape naming the fixes. Checked by training one
step at another batch than the export's and comparing with PyTorch.
"""
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
from onnx_ref import check  # noqa: E402
from snc_harness import SNC, export, load_dump, one_step_grads, run  # noqa: E402

F = torch.nn.functional


class ConvView(torch.nn.Module):
    """conv + view(b, -1) + Linear: the issue's example."""
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return self.fc(y.view(x.shape[0], -1))


def step(tmp, model, export_batch, batch):
    path = os.path.join(tmp, "m.onnx")
    export(model, torch.zeros(export_batch, 2, 6, 6), path)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 2, 6, 6)).astype(np.float32)
    y = rng.integers(0, 5, batch).astype(np.int64)
    loss, dump = one_step_grads(path, tmp, x, y, batch, threads=1)
    res = {"ours": loss, "grads": {}}
    refs = {}
    for dt in (torch.float32, torch.float64):
        m = ConvView().to(dt)
        m.load_state_dict(model.state_dict())
        loss = F.cross_entropy(m(torch.tensor(x, dtype=dt)), torch.tensor(y))
        loss.backward()
        refs[dt] = (loss.item(), {k: p.grad.numpy() for k, p in m.named_parameters()})
    res["ref32"], res["ref64"] = refs[torch.float32][0], refs[torch.float64][0]
    for k in refs[torch.float64][1]:
        res["grads"][k] = (load_dump(dump, k), refs[torch.float32][1][k], refs[torch.float64][1][k])
    return path, res


def test_export_batch_follows_batch(tmp_path):
    torch.manual_seed(0)
    path, res = step(str(tmp_path), ConvView(), 2, 4)
    check(res, "conv view exported at 2, run at 4")
    r = run([SNC, "inspect", path, "--batch", "4"])
    assert "1 shape target or constant (Reshape, Expand, ConstantOfShape, Tile) held the export batch 2; " \
        "they follow --batch 4" \
        in r.stdout, r.stdout


def test_export_batch_one_is_ambiguous(tmp_path):
    torch.manual_seed(0)
    path = os.path.join(str(tmp_path), "m.onnx")
    export(ConvView(), torch.zeros(1, 2, 6, 6), path)
    r = run([SNC, "inspect", path, "--batch", "4"], check=False)
    assert r.returncode == 2, r.stderr
    assert "export batch (1)" in r.stderr and "dynamic_axes" in r.stderr and "--batch 1" in r.stderr
    assert "Reshape" in r.stderr
    run([SNC, "inspect", path, "--batch", "1"])   # the export batch itself is fine
