#!/usr/bin/env python3
"""torchref.py — the PyTorch side of the GPU checks (tests/gpu/bundle.sh
exports with it here; the bundle's run-gpu.sh runs its references there).

    torchref.py export  MODEL RES BATCH DIR [--strip]
                                              torchvision MODEL -> DIR/model.onnx,
                                              DIR/x.npy, DIR/y.npy (fixed seed); --strip:
                                              the float initializers become declared inputs
                                              (a small file: the snc program draws its own
                                              initial values, and --dump-params hands them
                                              to the reference), no DIR/state.pt
    torchref.py grads   DIR DEVICE [fp32|bf16|fp64] [PARAMS]
                                              one training step of the same model in
                                              PyTorch (TF32 off; bf16: under torch.autocast
                                              with bfloat16; fp64: model and input in
                                              float64) from DIR/state.pt, or from the
                                              snc program's --dump-params folder PARAMS:
                                              DIR/ref/<name>.npy, loss.npy
    torchref.py compare REF_DIR GOT_DIR [TOL [norm]]
                                              worst relative gradient error (prints JSON;
                                              exit 1 when a tensor is missing or > TOL);
                                              max-abs relative to max |ref|, or with `norm`
                                              ||got - ref|| / ||ref|| (the bf16 check's);
                                              "errors": every tensor's
MODEL is a torchvision model, or smooth_cnn: conv, BatchNorm, tanh, average
pooling and a dense layer (no ReLU mask or max-pool argmax that a bf16
rounding can flip: tests/test_precision.py's SmoothCNN, wider); or
fashion_cnn (examples/make_fashion_cnn.py's model: RES 28, one channel); or
gpt (examples/make_gpt.py's defaults, RES the sequence length: token ids in,
next tokens as labels).
    torchref.py onnx    MODEL RES PATH [--strip]
                                              torchvision MODEL (1000 classes) -> PATH
    torchref.py gpt-track META PARAMS X.npy Y.npy STEPS LR tf32|fp32|autocast [DEVICE]
                                              AdamW steps of the bundle's GPT from an
                                              snc program's --dump-params on one batch:
                                              JSON {"losses": [...]} (issue: GPT on the
                                              H200, the loss tracked from the same weights)
    torchref.py same-losses A_DIR B_DIR N     the train_loss of A_DIR/m1.json..mN.json (one
                                              --metrics file per run of --steps k) equal to
                                              B_DIR's, bit for bit (prints JSON; exit 1 if not)
    torchref.py bench   MODEL RES BATCH STEPS [eager|autocast|compile]
                                              PyTorch training img/s and peak memory on
                                              cuda (TF32 as the snc program: on unless
                                              SNRT_TF32=0): eager, eager under
                                              torch.autocast(bfloat16), or torch.compile'd
                                              (its compilation is not timed); prints JSON
    torchref.py gpt-bench BATCH STEPS [eager|autocast|compile] [FILE.bin]
                                              GPT-2 124M (make_gpt.py's model beside this
                                              file: 12 layers, 12 heads, 768 wide, T=1024,
                                              vocabulary 50304, tied head), AdamW: PyTorch
                                              tokens/s and peak memory on cuda (TF32 on),
                                              on FILE.bin's tokens (llm.c layout) or random
                                              ones; prints JSON
    torchref.py same-params A_DIR B_DIR       every A_DIR/*.npy equal to B_DIR's bit for bit
                                              (--dump-params of two policies; prints JSON;
                                              exit 1 if one differs or is missing)

What it is: an independent reference (PyTorch) for the emitted program; both
start from the same weights: the ONNX initializers, or (--strip) the values the
program drew, read back from its --dump-params files.
What it is not: a test by itself; run.sh runs the steps and prints the table.
"""
import json
import os
import re
import sys
import time


def sanitize(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def smooth_cnn(res, classes):
    import torch
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.Tanh(), nn.AvgPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.Tanh(), nn.AvgPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.Tanh(), nn.Flatten(),
        nn.Linear(64 * (res // 4) ** 2, classes))


def examples():
    """make_gpt.py and make_fashion_cnn.py: beside this file in a bundle,
    in examples/ in a checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (here, os.path.join(os.path.dirname(os.path.dirname(here)), "examples")):
        if os.path.exists(os.path.join(d, "make_gpt.py")) and d not in sys.path:
            sys.path.insert(0, d)


def gpt(block):
    """The GPT example (examples/make_gpt.py's defaults: 256 byte tokens, 4
    layers, 4 heads, 64 wide, GELU erf, tied head) with its position ids on
    the model's device."""
    import torch
    examples()
    import make_gpt
    m = make_gpt.GPT(block=block)

    def forward(idx):
        x = m.wte(idx) + m.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in m.blocks:
            x = b(x)
        return m.head(m.lnf(x))
    m.forward = forward
    return m


def build(model, res, classes=10):
    """A torchvision model, smooth_cnn, fashion_cnn (the README's model, at
    28 px, one channel) or gpt (res: the sequence length)."""
    import torch
    torch.manual_seed(0)
    if model == "smooth_cnn":
        return smooth_cnn(res, classes)
    if model == "fashion_cnn":
        examples()
        import make_fashion_cnn
        return make_fashion_cnn.FashionCNN()
    if model == "gpt":
        return gpt(res)
    import torchvision
    m = getattr(torchvision.models, model)(num_classes=classes)
    return m


def export_onnx(m, x, path):
    """Training-mode export without constant folding: an eval-mode export
    folds each BatchNormalization into the conv before it (even with
    do_constant_folding=False), which would leave snc nothing to train and
    rename the weights. Here every parameter stays an initializer named as in
    the state dict (the names of the --dump-grads files); BN nodes carry
    their optional training outputs, which snc ignores."""
    import torch
    torch.onnx.export(m, x, path, input_names=["input"], output_names=["logits"],
                      do_constant_folding=False, opset_version=13,
                      training=torch.onnx.TrainingMode.TRAINING)


def strip(path, keep_re=None):
    """The float initializers of an ONNX file become graph inputs of the same
    name, type and shape (snc gives them PyTorch's default initial values);
    integer ones (BN's num_batches_tracked) stay, and those whose name
    matches keep_re (make_gpt.py's causal masks: constants, not weights)."""
    import onnx
    from onnx import TensorProto, helper
    m = onnx.load(path)
    g = m.graph
    keep = []
    for t in g.initializer:
        if t.data_type == TensorProto.FLOAT and not (keep_re and re.search(keep_re, t.name)):
            g.input.append(helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)))
        else:
            keep.append(t)
    del g.initializer[:]
    g.initializer.extend(keep)
    onnx.save(m, path)


def cmd_export(model, res, batch, out, *flags):
    import numpy as np
    import torch
    res, batch = int(res), int(batch)
    os.makedirs(out, exist_ok=True)
    m = build(model, res)
    m.train()
    # Dropout off: the program's masks and PyTorch's are different random
    # draws, which no gradient comparison could survive (alexnet, vgg,
    # squeezenet and mobilenet have Dropout in their classifiers).
    for mod in m.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    if model == "gpt":   # token ids and the next tokens, (batch, T)
        x = torch.randint(0, 256, (batch, res), generator=torch.Generator().manual_seed(1))
        y = torch.randint(0, 256, (batch, res), generator=torch.Generator().manual_seed(2))
    else:
        ch = 1 if model == "fashion_cnn" else 3
        x = torch.randn(batch, ch, res, res, generator=torch.Generator().manual_seed(1))
        y = torch.randint(0, 10, (batch,), generator=torch.Generator().manual_seed(2))
    export_onnx(m, x, os.path.join(out, "model.onnx"))
    if "--strip" in flags:   # the GPT's causal masks are constants, not weights: they stay
        strip(os.path.join(out, "model.onnx"), "mask" if model == "gpt" else None)
    else:
        torch.save(m.state_dict(), os.path.join(out, "state.pt"))
    np.save(os.path.join(out, "x.npy"), x.numpy() if model == "gpt" else x.numpy().astype(np.float32))
    np.save(os.path.join(out, "y.npy"), y.numpy().astype(np.int32))
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump({"model": model, "res": res, "batch": batch}, f)


def no_tf32():
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def load_dumped(m, params):
    """The model's parameters from an snc program's --dump-params folder
    (<name>.npy, names sanitized as there). Buffers (BN's running
    statistics) are left: a training-mode step does not read them."""
    import numpy as np
    import torch
    with torch.no_grad():
        for name, p in m.named_parameters():
            f = os.path.join(params, sanitize(name) + ".npy")
            if not os.path.exists(f):
                sys.exit("torchref.py: %s has no %s" % (params, os.path.basename(f)))
            v = torch.from_numpy(np.load(f))
            if tuple(v.shape) != tuple(p.shape):
                sys.exit("torchref.py: %s has shape %s, the model's is %s"
                         % (f, tuple(v.shape), tuple(p.shape)))
            p.copy_(v)


def cmd_grads(d, device, precision="fp32", params=None):
    """precision: fp32, bf16 (autocast) or fp64 (the model and the input in
    float64: the reference for a float32 step, whose own rounding PyTorch's
    float32 shares in kind but not in place)."""
    import numpy as np
    import torch
    meta = json.load(open(os.path.join(d, "meta.json")))
    no_tf32()
    m = build(meta["model"], meta["res"])
    for mod in m.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    if params:
        load_dumped(m, params)
    else:
        m.load_state_dict(torch.load(os.path.join(d, "state.pt")))
    m.to(device).train()
    x = torch.from_numpy(np.load(os.path.join(d, "x.npy"))).to(device)
    y = torch.from_numpy(np.load(os.path.join(d, "y.npy")).astype(np.int64)).to(device)
    if precision == "fp64":
        m.double()
        if x.is_floating_point():
            x = x.double()
    if precision == "bf16":
        with torch.autocast(device_type="cuda" if device.startswith("cuda") else "cpu",
                            dtype=torch.bfloat16):
            out = m(x)
    else:
        out = m(x)
    out = out.float() if precision != "fp64" else out
    loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    loss.backward()
    ref = os.path.join(d, "ref")
    os.makedirs(ref, exist_ok=True)
    np.save(os.path.join(ref, "loss.npy"), np.array([loss.item()], dtype=np.float32))
    for name, p in m.named_parameters():
        np.save(os.path.join(ref, sanitize(name) + ".npy"), p.grad.detach().cpu().numpy())


def cmd_compare(ref, got, tol=1e-3, norm=False):
    """Relative error of each tensor: max |got - ref| / max(max |ref|, floor),
    or with norm ||got - ref|| / max(||ref||, 1e-12). The floor is 1e-3 of the
    largest |ref| over all the gradients (loss.npy aside; at least 1e-6): a
    tensor whose gradient is all but zero (a bias right before a
    BatchNormalization, zero but for rounding) is measured against the
    model's scale, not against its own rounding noise."""
    import numpy as np
    worst, worst_name, missing, n, errors = 0.0, None, [], 0, {}
    scale = 0.0
    for f in os.listdir(ref):
        if f.endswith(".npy") and f != "loss.npy":
            r = np.load(os.path.join(ref, f))
            if r.size:
                scale = max(scale, float(np.max(np.abs(r.astype(np.float64)))))
    floor = max(1e-3 * scale, 1e-6)
    for f in sorted(os.listdir(ref)):
        if not f.endswith(".npy"):
            continue
        r = np.load(os.path.join(ref, f)).astype(np.float64).ravel()
        p = os.path.join(got, f)
        if not os.path.exists(p):
            missing.append(f)
            continue
        g = np.load(p).astype(np.float64).ravel()
        if g.shape != r.shape:
            missing.append(f + " (shape)")
            continue
        if not r.size:
            err = 0.0
        elif norm:
            err = float(np.linalg.norm(g - r) / max(float(np.linalg.norm(r)), 1e-12))
        else:
            err = float(np.max(np.abs(g - r)) / max(float(np.max(np.abs(r))), floor))
        if not np.isfinite(err):
            err = float("inf")
        n += 1
        errors[f[:-4]] = err
        if err >= worst:
            worst, worst_name = err, f[:-4]
    ok = not missing and n > 0 and worst <= tol
    print(json.dumps({"tensors": n, "worst": worst, "worst_tensor": worst_name,
                      "missing": missing, "ok": ok, "errors": errors}))
    return 0 if ok else 1


def read_losses(d, n):
    """train_loss of d/m1.json .. d/mN.json (None where missing or unreadable).
    --metrics prints it with 9 significant digits: a float32 round-trips."""
    out = []
    for k in range(1, n + 1):
        try:
            with open(os.path.join(d, "m%d.json" % k)) as f:
                out.append(float(json.load(f)["train_loss"]))
        except (OSError, ValueError, KeyError):
            out.append(None)
    return out


def cmd_same_losses(a, b, n):
    la, lb = read_losses(a, int(n)), read_losses(b, int(n))
    ok = None not in la and None not in lb and la == lb
    print(json.dumps({"a": la, "b": lb, "ok": ok}))
    return 0 if ok else 1


def cmd_same_params(a, b):
    import numpy as np
    names = sorted(f for f in os.listdir(a) if f.endswith(".npy"))
    differ, missing = [], []
    for f in names:
        pb = os.path.join(b, f)
        if not os.path.exists(pb):
            missing.append(f)
            continue
        x, y = np.load(os.path.join(a, f)), np.load(pb)
        if x.shape != y.shape or x.tobytes() != y.tobytes():
            differ.append(f)
    ok = bool(names) and not differ and not missing
    print(json.dumps({"tensors": len(names), "differ": differ[:10], "n_differ": len(differ),
                      "missing": missing[:10], "ok": ok}))
    return 0 if ok else 1


def cmd_bench(model, res, batch, steps, mode="eager"):
    import torch
    res, batch, steps = int(res), int(batch), int(steps)
    tf32 = os.environ.get("SNRT_TF32", "1") != "0"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    m = build(model, res, classes=1000).cuda().train()
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, res, res, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    fwd = torch.compile(m) if mode == "compile" else m
    torch.cuda.reset_peak_memory_stats()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(mode == "autocast")):
            loss = torch.nn.functional.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()

    t0 = time.perf_counter()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    warm = time.perf_counter() - t0
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    print(json.dumps({"images_per_s": batch * steps / dt, "mode": mode, "warmup_s": warm,
                      "peak_bytes": torch.cuda.max_memory_allocated(), "tf32": tf32}))


def cmd_gpt_track(meta, params, xs, ys, steps, lr, mode, device="cuda"):
    """STEPS AdamW steps (lr LR, torch.optim.AdamW's defaults otherwise, as
    snc's) of the GPT described by META (the bundle's data/gpt/meta.json:
    vocab, T, embd, heads, layers, gelu), from an snc program's
    --dump-params folder PARAMS, on one fixed batch (X.npy, Y.npy: token ids
    and next tokens): prints JSON {"losses": [loss before each step]}.
    MODE: tf32 (TF32 on, as the snc program), fp32 (TF32 off) or autocast
    (bfloat16)."""
    import numpy as np
    import torch
    examples()
    import make_gpt
    c = json.load(open(meta))
    steps, lr = int(steps), float(lr)
    tf32 = mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    m = make_gpt.GPT(c["vocab"], c["T"], c["embd"], c["heads"], c["layers"], c["gelu"], True)
    for mod in m.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    load_dumped(m, params)
    m.to(device).train()
    pos = torch.arange(c["T"], device=device)
    x = torch.from_numpy(np.load(xs).astype(np.int64)).to(device)
    y = torch.from_numpy(np.load(ys).astype(np.int64)).to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    dev_type = "cuda" if str(device).startswith("cuda") else "cpu"
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev_type, dtype=torch.bfloat16, enabled=(mode == "autocast")):
            h = m.wte(x) + m.wpe(pos[:x.shape[1]])
            logits = m.head(m.lnf(_blocks(m, h)))
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, c["vocab"]),
                                                 y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print(json.dumps({"losses": losses, "mode": mode}))


def cmd_gpt_bench(batch, steps, mode="eager", tokens=None):
    """The same model snc compiles (examples/make_gpt.py, copied into the
    bundle), its attention as written there (masked softmax, no fused
    kernel), on the GPU."""
    import numpy as np
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_gpt
    batch, steps, T, V = int(batch), int(steps), 1024, 50304
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    m = make_gpt.GPT(vocab=V, block=T, embd=768, heads=12, layers=12, gelu="tanh").cuda().train()
    pos = torch.arange(T, device="cuda")
    m.forward = lambda idx: m.head(m.lnf(_blocks(m, m.wte(idx) + m.wpe(pos[:idx.shape[1]]))))
    fwd = torch.compile(m) if mode == "compile" else m
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.0)
    if tokens:
        tok = np.fromfile(tokens, dtype=np.uint16, offset=1024).astype(np.int64)
    else:
        tok = np.random.default_rng(0).integers(0, V, size=(steps + 4) * batch * (T + 1))
    n_win = (len(tok) - 1) // (T + 1)

    def batch_at(k):
        w = [(k * batch + i) % n_win for i in range(batch)]
        x = np.stack([tok[j * (T + 1):j * (T + 1) + T + 1] for j in w])
        x = torch.from_numpy(x).cuda()
        return x[:, :-1], x[:, 1:]

    losses = []

    def step(k):
        x, y = batch_at(k)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(mode == "autocast")):
            logits = fwd(x)
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, V), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss)

    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for k in range(3):
        step(k)
    torch.cuda.synchronize()
    warm = time.perf_counter() - t0
    t = time.perf_counter()
    for k in range(3, 3 + steps):
        step(k)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    print(json.dumps({"tokens_per_s": batch * T * steps / dt, "ms_per_step": 1e3 * dt / steps,
                      "mode": mode, "batch": batch, "warmup_s": warm,
                      "first_losses": [float(x) for x in losses[:5]],
                      "peak_bytes": torch.cuda.max_memory_allocated()}))


def _blocks(m, x):
    for b in m.blocks:
        x = b(x)
    return x


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd, args = argv[1], argv[2:]
    if cmd == "export" and len(args) in (4, 5) and args[4:] in ([], ["--strip"]):
        return cmd_export(*args)
    if cmd == "grads" and len(args) in (2, 3, 4) and args[2:3] in ([], ["fp32"], ["bf16"], ["fp64"]):
        return cmd_grads(*args)
    if cmd == "compare" and len(args) in (2, 3, 4) and args[3:] in ([], ["norm"]):
        return cmd_compare(args[0], args[1], float(args[2]) if len(args) >= 3 else 1e-3,
                           len(args) == 4)
    if cmd == "onnx" and len(args) in (3, 4) and args[3:] in ([], ["--strip"]):
        import torch
        m = build(args[0], int(args[1]), classes=1000).train()
        export_onnx(m, torch.randn(2, 3, int(args[1]), int(args[1])), args[2])
        if args[3:]:
            strip(args[2])
        return 0
    if cmd == "same-losses" and len(args) == 3:
        return cmd_same_losses(*args)
    if cmd == "bench" and len(args) in (4, 5) and args[4:] in ([], ["eager"], ["autocast"],
                                                                  ["compile"]):
        return cmd_bench(*args)
    if cmd == "gpt-bench" and len(args) in (2, 3, 4) and args[2:3] in ([], ["eager"],
                                                                      ["autocast"], ["compile"]):
        return cmd_gpt_bench(*args)
    if cmd == "gpt-track" and len(args) in (7, 8) and args[6] in ("tf32", "fp32", "autocast"):
        return cmd_gpt_track(*args)
    if cmd == "same-params" and len(args) == 2:
        return cmd_same_params(*args)
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv) or 0)
