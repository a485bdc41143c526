"""test_dist.py — data-parallel training (snc compile --dist mpi) on the CPU.

Two MPI ranks (`mpirun --oversubscribe -np 2`) at per-rank batch B against
one process at batch 2B, on a small CNN without BatchNorm (BN keeps per-rank
statistics, as PyTorch DDP does, so it would not match): after 20 SGD steps
with momentum the parameters agree to 1e-5 (relative); a checkpoint written
at one rank count resumes at another and continues exactly; a rank that dies
or hangs ends the job with a message and a non-zero exit, within the timeout;
ranks that run different programs or flags are refused at start-up. With
--zero 1 (optimizer state sharded over the ranks) the same equalities hold,
and plan.json's per-rank persistent bytes drop by half the optimizer state.
"""
import glob
import json
import os
import signal
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plan_check  # noqa: E402
from snc_harness import SNC, export, rel_err, run  # noqa: E402

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun not found (openmpi-bin; "
                                "./configure.py --install-deps installs it)")
B = 4          # per-rank batch
STEPS = 20


def mpirun(n, *args):
    cmd = [MPIRUN, "--oversubscribe", "-np", str(n)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    return cmd + list(args)


@pytest.fixture(scope="module")
def progs(tmp_path_factory):
    """The model, its data, and three programs: --dist at batch B and 2B, and
    the plain (non-dist) program at 2B."""
    import torch
    d = tmp_path_factory.mktemp("dist")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                            torch.nn.Linear(4 * 4 * 4, 16), torch.nn.Tanh(),
                            torch.nn.Linear(16, 5))
    model = str(d / "m.onnx")
    export(m, torch.zeros(2, 1, 8, 8), model)
    rng = np.random.default_rng(1)
    # 100 samples: 12 global batches of 8 per epoch (4 dropped), so 20 steps
    # cross an epoch boundary (a new shuffled order).
    np.save(d / "x.npy", rng.standard_normal((100, 1, 8, 8)).astype(np.float32))
    np.save(d / "y.npy", rng.integers(0, 5, 100).astype(np.int64))
    out = {"dir": d, "data": "npy:%s,%s" % (d / "x.npy", d / "y.npy")}
    for name, batch, flags in [("b", B, ["--dist", "mpi", "--bucket", "1000"]),
                               ("b2", 2 * B, ["--dist", "mpi", "--bucket", "1000"]),
                               ("plain2", 2 * B, []),
                               ("z", B, ["--dist", "mpi", "--bucket", "1000", "--zero", "1",
                                         "--ranks", "2"])]:
        run([SNC, "compile", model, "-o", str(d / name), "--batch", str(batch),
             "--optimizer", "sgd", "--momentum", "0.9"] + flags)
        run(["ninja", "-C", str(d / name)])
        out[name] = str(d / name / "train")
    out["model"] = model
    return out


def params(folder):
    return {os.path.basename(f): np.load(f) for f in sorted(glob.glob(os.path.join(folder, "*.npy")))}


def max_rel(a, b):
    assert sorted(a) == sorted(b) and a
    return max(rel_err(a[k], b[k]) for k in a)


def train(progs, prog, *flags, ranks=1, env=None, timeout=60):
    cmd = [prog, "--data", progs["data"], "--threads", "1"] + list(flags)
    if ranks > 1:
        cmd = mpirun(ranks, *cmd)
    e = dict(os.environ, **(env or {}))
    return run(cmd, timeout=timeout, env=e)


def test_plan_has_buckets_in_gradient_order(progs):
    """The all-reduces are steps of the plan: each after the step that makes
    its bucket's last gradient final, its wait before the first update that
    reads any of them; the plan passes the independent checker."""
    plan = json.load(open(os.path.join(progs["dir"], "b", "plan.json")))
    plan_check.check_plan(plan)
    steps = plan["steps"][:plan["train_steps"]]
    kinds = [s["kind"] for s in steps]
    starts = [i for i, k in enumerate(kinds) if k == "allreduce"]
    waits = [i for i, k in enumerate(kinds) if k == "comm_wait"]
    assert len(starts) == len(waits) >= 2, kinds   # --bucket 1000: several buckets
    backward = [i for i, k in enumerate(kinds) if k == "backward"]
    updates = [i for i, k in enumerate(kinds) if k == "update"]
    # Overlap: the first bucket starts while backward steps remain.
    assert starts[0] < backward[-1]
    assert min(updates) > max(backward) and min(waits) > max(backward)
    inst = plan["instances"]
    for s0, w in zip(starts, waits):
        grads = set(steps[s0]["inputs"])
        assert grads == set(steps[w]["inputs"])
        assert all(inst[i]["kind"] == "param-grad" for i in grads)
        # written before the start, read by an update only after the wait
        for i in grads:
            assert inst[i]["first"] < s0
            readers = [s["index"] for s in steps if s["kind"] == "update" and i in s["inputs"]]
            assert readers and min(readers) > w
    # Every parameter gradient goes through exactly one bucket.
    bucketed = [i for s0 in starts for i in steps[s0]["inputs"]]
    assert len(bucketed) == len(set(bucketed)) == len(updates)


def test_one_process_is_the_plain_program(progs, tmp_path):
    """Run without mpirun, a --dist program is the plain one (bit for bit)."""
    train(progs, progs["b2"], "--steps", str(STEPS), "--dump-params", str(tmp_path / "d"))
    train(progs, progs["plain2"], "--steps", str(STEPS), "--dump-params", str(tmp_path / "p"))
    a, b = params(tmp_path / "d"), params(tmp_path / "p")
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_two_ranks_equal_one_process_at_twice_the_batch(progs, tmp_path):
    r = train(progs, progs["b"], "--steps", str(STEPS), "--dump-params", str(tmp_path / "two"),
              "--metrics", str(tmp_path / "m.json"), ranks=2)
    assert "2 ranks x batch 4 = global batch 8" in r.stdout
    train(progs, progs["b2"], "--steps", str(STEPS), "--dump-params", str(tmp_path / "one"))
    two, one = params(tmp_path / "two"), params(tmp_path / "one")
    err = max_rel(two, one)
    print("2 ranks x %d vs 1 process x %d, %d SGD steps: max relative difference %.3g"
          % (B, 2 * B, STEPS, err))
    assert err < 1e-5
    # ... and training moved them (the comparison is not of initial values).
    init = params_init(progs, tmp_path)
    assert max_rel(one, init) > 1e-3
    mt = json.load(open(tmp_path / "m.json"))
    assert mt["ranks"] == 2 and mt["global_batch"] == 8 and mt["steps"] == STEPS
    assert mt["comm_s"] >= mt["comm_exposed_s"] >= 0


def params_init(progs, tmp_path):
    train(progs, progs["b2"], "--steps", "0", "--dump-params", str(tmp_path / "init"))
    return params(tmp_path / "init")


@pytest.mark.parametrize("first,second", [(2, 1), (1, 2)])
def test_resume_at_another_rank_count(progs, tmp_path, first, second):
    """10 steps at one rank count, 10 more at another (same global batch):
    the parameters of an uninterrupted 20-step run."""
    prog = {1: progs["b2"], 2: progs["b"]}
    ck = str(tmp_path / "ck.bin")
    train(progs, prog[first], "--steps", "10", "--save", ck, ranks=first)
    r = train(progs, prog[second], "--resume", ck, "--steps", "10", "--dump-params",
              str(tmp_path / "resumed"), ranks=second)
    assert "resumed from" in r.stdout
    train(progs, progs["b2"], "--steps", "20", "--dump-params", str(tmp_path / "straight"))
    err = max_rel(params(tmp_path / "resumed"), params(tmp_path / "straight"))
    print("resume %d -> %d ranks: max relative difference %.3g" % (first, second, err))
    assert err < 1e-5


def test_resume_at_another_global_batch_is_refused(progs, tmp_path):
    ck = str(tmp_path / "ck.bin")
    train(progs, progs["b2"], "--steps", "2", "--save", ck)
    r = run([progs["b"], "--data", progs["data"], "--resume", ck, "--steps", "1"], check=False)
    assert r.returncode == 2
    assert "global batch 8" in r.stderr and "1 rank x batch 4" in r.stderr


def test_killed_rank_ends_the_job(progs, tmp_path):
    """Rank 1 dies (SIGKILL) before step 6: rank 0, waiting for it, ends with
    a message; the job exits non-zero long before the timeout."""
    t0 = time.time()
    r = run(mpirun(2, progs["b"], "--data", progs["data"], "--steps", "50", "--threads", "1",
                   "--comm-timeout", "20", "--save", str(tmp_path / "ck.bin"), "--save-every", "2"),
            check=False, timeout=60,
            env=dict(os.environ, SNRT_DIST_FAIL="1:5", SNRT_SLOW_STEPS="100:20000"))
    took = time.time() - t0
    assert r.returncode != 0
    assert took < 20, took
    assert "rank 0 of 2: SIGTERM while waiting for the other ranks (the gradient all-reduce " \
           "of bucket 0 at step 6)" in r.stderr or \
        "rank 0 of 2: SIGTERM while waiting for the other ranks (the exchange of the loss " \
        "after step 6)" in r.stderr, r.stderr
    assert "process rank 1" in r.stderr and "signal 9" in r.stderr   # mpirun names the rank
    # The last good checkpoint is kept (written at step 4).
    ok = run([progs["b2"], "--data", progs["data"], "--resume", str(tmp_path / "ck.bin"),
              "--steps", "1"])
    assert "at step 4" in ok.stdout


def rank_pids(mpirun_pid):
    """The processes mpirun started (its children)."""
    try:
        kids = open("/proc/%d/task/%d/children" % (mpirun_pid, mpirun_pid)).read().split()
    except OSError:
        return []
    return [int(k) for k in kids]


@pytest.mark.parametrize("how", ["usr1-to-mpirun", "term-to-ranks"])
def test_signal_stops_every_rank_after_the_same_step(progs, tmp_path, how):
    """A graceful stop: every rank finishes the same step, rank 0 saves, the
    checkpoint resumes there and mpirun exits 0. Open MPI's mpirun passes
    SIGUSR1 on at once; a batch scheduler (Slurm's scancel) sends SIGTERM to
    every rank. (SIGTERM to mpirun itself is followed by SIGKILL 1 s later:
    docs/dist.md; a CI run on a loaded machine was killed in that second.)"""
    ck = str(tmp_path / "ck.bin")
    cmd = mpirun(2, progs["b"], "--data", progs["data"], "--steps", "1000", "--threads", "1",
                 "--save", ck, "--log-every", "1")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, SNRT_SLOW_STEPS="1000:20000"))
    time.sleep(2.5)
    if how == "usr1-to-mpirun":
        p.send_signal(signal.SIGUSR1)
        name = "SIGUSR1"
    else:
        pids = rank_pids(p.pid)
        assert len(pids) == 2, pids
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        name = "SIGTERM"
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, (p.returncode, out[-2000:], err)
    assert "stopped by %s after step" % name in out, (out[-2000:], err)
    step = int(out.split("stopped by %s after step " % name)[1].split(";")[0])
    assert 0 < step < 1000
    r = run([progs["b2"], "--data", progs["data"], "--resume", ck, "--steps", "1"])
    assert "at step %d " % step in r.stdout


def test_hung_rank_times_out(progs):
    """Rank 1 stops (SIGSTOP) before step 6, so mpirun sees nothing wrong:
    rank 0's wait times out after --comm-timeout and ends every rank."""
    t0 = time.time()
    r = run(mpirun(2, progs["b"], "--data", progs["data"], "--steps", "50", "--threads", "1",
                   "--comm-timeout", "2"), check=False, timeout=60,
            env=dict(os.environ, SNRT_DIST_FAIL="1:5:hang"))
    took = time.time() - t0
    assert r.returncode == 5, (r.returncode, r.stderr)
    assert took < 15, took
    assert "rank 0 of 2: the gradient all-reduce of bucket 0 at step 6 did not complete " \
           "within 2 s" in r.stderr, r.stderr


def test_mismatched_ranks_are_refused(progs):
    """Different programs (per-rank batch) or flags on the ranks: exit 2 with
    one message from rank 0, before any training."""
    r = run([MPIRUN, "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else []) +
            ["-np", "1", progs["b"], "--data", progs["data"], "--steps", "3", ":",
             "-np", "1", progs["b2"], "--data", progs["data"], "--steps", "3"],
            check=False, timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("differs from rank 0") == 1
    assert "rank 1 of 2 differs from rank 0 in the per-rank batch (8, rank 0: 4)" in r.stderr
    assert "epoch" not in r.stdout
    r = run([MPIRUN, "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else []) +
            ["-np", "1", progs["b"], "--data", progs["data"], "--steps", "3", ":",
             "-np", "1", progs["b"], "--data", progs["data"], "--steps", "3", "--seed", "7"],
            check=False, timeout=60)
    assert r.returncode == 2 and "differs from rank 0 in --seed (7, rank 0: 0)" in r.stderr


def test_plain_program_under_mpirun_is_refused(progs):
    r = run(mpirun(2, progs["plain2"], "--data", progs["data"], "--steps", "1"), check=False,
            timeout=60)
    assert r.returncode != 0
    assert "compiled without --dist mpi" in r.stderr


def test_policies_and_poison_under_two_ranks(progs, tmp_path):
    """The all-reduce steps through every planner pass: superneurons (recompute
    and offload) with --poison gives the liveness plan's bits at 2 ranks."""
    d = progs["dir"]
    for pol in ("liveness", "superneurons"):
        run([SNC, "compile", progs["model"], "-o", str(d / pol), "--batch", str(B), "--dist",
             "mpi", "--bucket", "1000", "--policy", pol])
        run(["ninja", "-C", str(d / pol)])
        plan_check.check_plan(json.load(open(d / pol / "plan.json")))
        train(progs, str(d / pol / "train"), "--steps", "8", "--poison", "--dump-params",
              str(tmp_path / pol), ranks=2, env={"SNRT_COPY_LAZY": "1"})
    a, b = params(tmp_path / "liveness"), params(tmp_path / "superneurons")
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_zero_plan_halves_the_optimizer_state(progs, init0):
    """Per-rank persistent bytes: parameters and state, plus one shard of
    ceil(P / 2) (rounded up to 64) elements instead of P elements of
    momentum."""
    b = json.load(open(os.path.join(progs["dir"], "b", "plan.json")))
    z = json.load(open(os.path.join(progs["dir"], "z", "plan.json")))
    plan_check.check_plan(z)
    assert z["ranks"] == 2 and z["zero"] == 1 and "ranks" not in b
    opt = sum(i["bytes"] for i in b["instances"] if i["kind"] == "optimizer")
    P = sum(int(np.prod(np.load(f).shape)) for f in glob.glob(os.path.join(progs["dir"], "init0", "*.npy")))
    shard = z["zero_shard_elements"]
    assert shard == -(-(-(-P // 2)) // 64) * 64
    shard_bytes = -(-4 * shard // 256) * 256
    assert [i["bytes"] for i in z["instances"] if i["kind"] == "optimizer"] == [shard_bytes]
    assert z["persistent_bytes"] == b["persistent_bytes"] - opt + shard_bytes
    drop = b["persistent_bytes"] - z["persistent_bytes"]
    print("persistent per rank: %d -> %d bytes (optimizer state %d bytes, drop %d)"
          % (b["persistent_bytes"], z["persistent_bytes"], opt, drop))
    assert abs(drop - opt / 2) <= 512   # alignment of the unsharded tensors and the shard
    kinds = [s["kind"] for s in z["steps"][:z["train_steps"]]]
    assert "reduce_scatter" in kinds and "allgather" in kinds and "allreduce" not in kinds


@pytest.fixture(scope="module")
def init0(progs):
    train(progs, progs["b2"], "--steps", "0", "--dump-params", str(progs["dir"] / "init0"))


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_zero_two_ranks_equal_one_process(progs, init0, tmp_path, optimizer):
    prog = {"sgd": progs["z"]}
    ref = progs["b2"]
    if optimizer == "adam":
        for name, batch, flags in [("za", B, ["--zero", "1", "--ranks", "2"]), ("a2", 2 * B, [])]:
            run([SNC, "compile", progs["model"], "-o", str(tmp_path / name), "--batch", str(batch),
                 "--optimizer", "adam", "--dist", "mpi", "--bucket", "1000"] + flags)
            run(["ninja", "-C", str(tmp_path / name)])
        prog["adam"], ref = str(tmp_path / "za" / "train"), str(tmp_path / "a2" / "train")
    train(progs, prog[optimizer], "--steps", str(STEPS), "--dump-params", str(tmp_path / "two"),
          ranks=2)
    train(progs, ref, "--steps", str(STEPS), "--dump-params", str(tmp_path / "one"))
    err = max_rel(params(tmp_path / "two"), params(tmp_path / "one"))
    print("--zero 1, %s: 2 ranks x %d vs 1 process x %d, %d steps: max relative difference %.3g"
          % (optimizer, B, 2 * B, STEPS, err))
    assert err < 1e-5
    assert max_rel(params(tmp_path / "one"), params(progs["dir"] / "init0")) > 1e-3


@pytest.mark.parametrize("first", ["zero", "one"])
def test_zero_resume_across_sharding(progs, tmp_path, first):
    """A sharded run's checkpoint resumes unsharded at 1 rank, and the reverse:
    the optimizer state is gathered per parameter and scattered back."""
    ck = str(tmp_path / "ck.bin")
    prog = {"zero": (progs["z"], 2), "one": (progs["b2"], 1)}
    second = "one" if first == "zero" else "zero"
    train(progs, prog[first][0], "--steps", "10", "--save", ck, ranks=prog[first][1])
    train(progs, prog[second][0], "--resume", ck, "--steps", "10", "--dump-params",
          str(tmp_path / "resumed"), ranks=prog[second][1])
    train(progs, progs["b2"], "--steps", "20", "--dump-params", str(tmp_path / "straight"))
    err = max_rel(params(tmp_path / "resumed"), params(tmp_path / "straight"))
    print("--zero 1 resume (%s first): max relative difference %.3g" % (first, err))
    assert err < 1e-5


def test_zero_needs_its_rank_count(progs):
    r = run([progs["z"], "--data", progs["data"], "--steps", "1"], check=False)
    assert r.returncode == 1 and "compiled with --zero 1 --ranks 2" in r.stderr
    r = run([SNC, "compile", progs["model"], "-o", str(progs["dir"] / "bad"), "--batch", "4",
             "--dist", "mpi", "--zero", "1"], check=False)
    assert r.returncode == 1 and "--zero 1 needs --ranks N" in r.stderr


@pytest.mark.skipif(not os.path.exists(os.path.join(os.path.dirname(SNC), "snrt_nccl.o")),
                    reason="no CUDA runtime with NCCL was built (configure.py found no nvcc, "
                           "cuDNN or NCCL)")
@pytest.mark.parametrize("zero", [False, True])
def test_cuda_nccl_program_links(progs, tmp_path, zero):
    """--target cuda --dist mpi: the NCCL exchanges compile and the program
    links against NCCL and MPI (it is not run: no GPU here)."""
    out = tmp_path / "cuda"
    flags = ["--zero", "1", "--ranks", "2"] if zero else []
    run([SNC, "compile", progs["model"], "-o", str(out), "--batch", str(B), "--target", "cuda",
         "--dist", "mpi", "--bucket", "1000"] + flags)
    src = open(out / "train.c").read()
    assert ("SNRT_COMM_REDUCE" in src and "SNRT_COMM_BCAST" in src) if zero else \
        "SNRT_COMM_ALLREDUCE" in src
    run(["ninja", "-C", str(out)], timeout=300)
    libs = run(["ldd", str(out / "train")]).stdout
    assert "libnccl" in libs and "libmpi" in libs


def zero_plans_by_tier(progs, tmp_path, zero=True):
    """Budgets (scanned down from the default plan's arena) at which the
    (--zero 1) plan keeps the optimizer state, then the parameters too, in
    host memory: {"optimizer": bytes, "param": bytes} (absent: not met)."""
    base = ["plan", progs["model"], "--batch", str(B), "--dist", "mpi", "--bucket", "1000"]
    if zero:
        base += ["--zero", "1", "--ranks", "2"]
    js = str(tmp_path / "p.json")
    run([SNC] + base + ["--json", js])
    arena = json.load(open(js))["arena_bytes"]
    found = {}
    for k in range(100, 30, -2):
        budget = arena * k // 100
        r = run([SNC] + base + ["--budget", str(budget), "--json", js], check=False)
        if r.returncode:
            continue
        host = {i["kind"] for i in json.load(open(js))["instances"]
                if i["offset"] < 0 and i["host_offset"] >= 0}
        for kind in ("optimizer", "param"):
            if kind in host and kind not in found and (kind == "param" or "param" not in host):
                found[kind] = budget
    return found


def test_zero_with_state_in_host_memory(progs, tmp_path):
    """Tight budgets: the optimizer shard in the host arena still gives the
    reference parameters (2 ranks, --poison, lazy copies); parameters in host
    memory are refused with a message (the broadcast would miss them)."""
    tiers = zero_plans_by_tier(progs, tmp_path)
    if "optimizer" not in tiers:
        pytest.skip("no budget put the optimizer shard alone in host memory: %s" % tiers)
    out = tmp_path / "zo"
    run([SNC, "compile", progs["model"], "-o", str(out), "--batch", str(B), "--dist", "mpi",
         "--bucket", "1000", "--zero", "1", "--ranks", "2", "--budget", str(tiers["optimizer"])])
    run(["ninja", "-C", str(out)])
    plan_check.check_plan(json.load(open(out / "plan.json")))
    train(progs, str(out / "train"), "--steps", str(STEPS), "--poison", "--dump-params",
          str(tmp_path / "two"), ranks=2, env={"SNRT_COPY_LAZY": "1"})
    train(progs, progs["b2"], "--steps", str(STEPS), "--dump-params", str(tmp_path / "one"))
    assert max_rel(params(tmp_path / "two"), params(tmp_path / "one")) < 1e-5
    if "param" in tiers:
        r = run([SNC, "compile", progs["model"], "-o", str(tmp_path / "zp"), "--batch", str(B),
                 "--dist", "mpi", "--zero", "1", "--ranks", "2", "--bucket", "1000",
                 "--budget", str(tiers["param"])], check=False)
        assert r.returncode == 2 and "keeps parameters in host memory" in r.stderr, r.stderr


def test_dist_with_parameters_in_host_memory(progs, tmp_path):
    """Without --zero, the tightest tier (parameters and optimizer state in
    the host arena, copied around the steps that use them) all-reduces the
    gradients as well: the reference parameters at 2 ranks."""
    tiers = zero_plans_by_tier(progs, tmp_path, zero=False)
    if "param" not in tiers:
        pytest.skip("no budget put the parameters in host memory: %s" % tiers)
    out = tmp_path / "dh"
    run([SNC, "compile", progs["model"], "-o", str(out), "--batch", str(B), "--dist", "mpi",
         "--bucket", "1000", "--budget", str(tiers["param"])])
    run(["ninja", "-C", str(out)])
    plan_check.check_plan(json.load(open(out / "plan.json")))
    train(progs, str(out / "train"), "--steps", str(STEPS), "--poison", "--dump-params",
          str(tmp_path / "two"), ranks=2, env={"SNRT_COPY_LAZY": "1"})
    train(progs, progs["b2"], "--steps", str(STEPS), "--dump-params", str(tmp_path / "one"))
    assert max_rel(params(tmp_path / "two"), params(tmp_path / "one")) < 1e-5
