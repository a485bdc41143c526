"""plan_check.py — an independent checker of plan.json, shared by the tests.

It reads only plan.json (schemas/plan.schema.json) and checks it against the
definitions in docs/reference.md and docs/planning.md, never against the planner's code:

- the schema (a small JSON Schema validator for the keywords it uses);
- the route's shape (forward..., loss, backward/update/recompute/copies...,
  then eval), lifetimes (what a step touches is live at that step, every
  non-persistent instance is written by its first step);
- where each instance lives: compute steps touch only device instances; an
  offload copies a device instance to a host one, a prefetch a host instance
  to a device one, of the same tensor and size; recompute steps rebuild
  tensors some forward step made, between the loss and the updates' end;
- both arenas: aligned, inside their arena, no two instances whose lifetimes
  overlap share bytes (device and pinned host arena alike);
- values of persistent tensors (parameters, state, optimizer state, which
  may live on the host): every read sees the latest value, every copy copies
  the latest value, and at the end of the training step the persistent
  instance holds it (the update was written back);
- the copy schedule (`event`, `waits`): a copy is known complete after a
  wait for its event, or for a later copy's event on the same queue (one
  queue per direction: waiting for a later offload implies the earlier
  offloads are done, never the prefetches). A prefetched instance is read
  only after its copy is complete; an offloaded device region and a
  prefetched host region stay allocated (and unwritten) until their copy is
  complete; a host copy is prefetched only after the copy that wrote it is
  complete; every copy of the training step completes within it;
- --precision bf16|fp16: a step's float32 working copies lie at the start of
  its workspace (convert_bytes, aligned), the largest training step's are the
  plan's convert_bytes;
- the summary numbers recomputed from the instances: live bytes per step,
  peak live, persistent bytes, layer peak, high water per step, baseline
  (policy none), offload bytes, the step-time breakdown.
"""
import collections
import heapq
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = json.load(open(os.path.join(ROOT, "schemas", "plan.schema.json")))
ALIGN = 256          # runtime/snrt.h SNRT_ALIGN: every arena offset is a multiple of it
PERSISTENT_KINDS = ("param", "state", "optimizer")


# ---- a small JSON Schema validator (the keywords plan.schema.json uses) ----

_TYPE_OK = {"object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
            "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
            "null": lambda v: v is None,
            "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)}


def validate(doc, schema, root=None, path="$"):
    root = root or schema
    if "$ref" in schema:
        ref = schema["$ref"]
        assert ref.startswith("#/$defs/"), ref
        return validate(doc, root["$defs"][ref[8:]], root, path)
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        assert any(_TYPE_OK[t](doc) for t in types), "%s: %r is not %s" % (path, doc, types)
    if "const" in schema:
        assert doc == schema["const"], "%s: %r != %r" % (path, doc, schema["const"])
    if "enum" in schema:
        assert doc in schema["enum"], "%s: %r not in %r" % (path, doc, schema["enum"])
    if isinstance(doc, (int, float)) and not isinstance(doc, bool):
        if "minimum" in schema:
            assert doc >= schema["minimum"], "%s: %r < %r" % (path, doc, schema["minimum"])
        if "multipleOf" in schema:
            assert doc % schema["multipleOf"] == 0, "%s: %r" % (path, doc)
    if isinstance(doc, dict):
        for k in schema.get("required", []):
            assert k in doc, "%s: missing key %r" % (path, k)
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is False:
            extra = set(doc) - set(props)
            assert not extra, "%s: unexpected keys %s" % (path, sorted(extra))
        for k, v in doc.items():
            if k in props:
                validate(v, props[k], root, path + "." + k)
    if isinstance(doc, list) and "items" in schema:
        for i, v in enumerate(doc):
            validate(v, schema["items"], root, "%s[%d]" % (path, i))


# ---- the checker ----

# The steps whose workspace the cuda target may grow into a free hole.
CONV_OPS = ("Conv", "CONV_BWD_DATA", "CONV_BWD_FILTER")


def planned(i):
    """An instance's planned bytes: a lent workspace's size before lending."""
    return i["bytes"] - i.get("lent_bytes", 0)


def no_overlap(items, arena, where):
    """items: (offset, bytes, first, last, index); no two that share a step share bytes."""
    items = sorted((it for it in items if it[1]), key=lambda it: it[0])
    for k, (off, nb, first, last, idx) in enumerate(items):
        assert off % ALIGN == 0, "%s: instance %d at %d is not aligned" % (where, idx, off)
        assert off + nb <= arena, "%s: instance %d [%d, %d) outside the arena of %d" % (
            where, idx, off, off + nb, arena)
        end = off + nb
        for off2, nb2, first2, last2, idx2 in items[k + 1:]:
            if off2 >= end:
                break
            assert last2 < first or last < first2, (
                "%s: instances %d [%d, %d) steps %d-%d and %d [%d, %d) steps %d-%d overlap"
                % (where, idx, off, end, first, last, idx2, off2, off2 + nb2, first2, last2))


class Copies:
    """The copy schedule: when each copy is known to be complete."""

    def __init__(self, steps):
        self.copies = [s for s in steps if s["kind"] in ("offload", "prefetch")]
        self.done = {c["index"]: None for c in self.copies}   # None: never waited for
        by_event = {}
        for c in self.copies:
            by_event.setdefault(c["event"], []).append(c)
        pending = {k: collections.deque(c["index"] for c in self.copies if c["kind"] == k)
                   for k in ("offload", "prefetch")}
        for s in steps:
            w = s["index"]
            for e in s["waits"]:
                # A wait for e covers every copy issued with e so far; on a
                # FIFO queue per direction, also every earlier copy of that
                # direction.
                for d in by_event.get(e, []):
                    if d["index"] > w:
                        break
                    q = pending[d["kind"]]
                    while q and q[0] <= d["index"]:
                        self.done[q.popleft()] = w

    def done_before(self, c, s):
        """c is known complete when step s starts."""
        d = self.done[c["index"]]
        return d is not None and d < s


def check_plan(p):
    """Independent checks of one plan.json; asserts, returns a few facts."""
    validate(p, SCHEMA)
    inst, steps = p["instances"], p["steps"]
    T = len(steps)
    assert [s["index"] for s in steps] == list(range(T))
    assert [i["index"] for i in inst] == list(range(len(inst)))
    for s in steps:
        assert "event" in s and "waits" in s, "plan.json without the copy schedule"
    # Route shape: forward..., loss, backward/update/recompute/copies..., then eval.
    kinds = [s["kind"] for s in steps]
    tr = p["train_steps"]
    assert all(k != "eval" for k in kinds[:tr]) and all(k == "eval" for k in kinds[tr:] if
                                                        k not in ("prefetch", "offload"))
    assert "loss" in kinds
    loss = kinds.index("loss")
    assert "forward" in kinds[:loss]
    assert all(k in ("forward", "offload", "prefetch") for k in kinds[:loss]), kinds[:loss]
    assert all(k in ("loss", "backward", "update", "recompute", "offload", "prefetch",
                     "allreduce", "comm_wait", "reduce_scatter", "allgather")
               for k in kinds[loss:tr])
    on_dev = [i["offset"] >= 0 for i in inst]
    on_host = [i["host_offset"] >= 0 for i in inst]
    for i in inst:
        assert 0 <= i["first"] <= i["last"] < T, i
        assert not (on_dev[i["index"]] and on_host[i["index"]]), ("in both arenas", i)
        if i["kind"] in PERSISTENT_KINDS and i["persistent"]:
            assert i["first"] == 0 and i["last"] == T - 1, i
            assert on_dev[i["index"]] or on_host[i["index"]], ("persistent but nowhere", i)
        if i["kind"] == "loss":
            assert i["last"] >= tr - 1
    # Lifetimes: what a step touches is live at that step, and on the device
    # unless the step is a copy.
    written = set()
    convert_max = 0
    for s in steps:
        touched = [i for i in s["inputs"] + s["outputs"] if i >= 0]
        for i in touched:
            assert inst[i]["first"] <= s["index"] <= inst[i]["last"], (s, inst[i])
        if s["workspace"] is not None:
            w = inst[s["workspace"]]
            assert w["kind"] == "workspace" and w["first"] == w["last"] == s["index"]
            touched.append(w["index"])
            # A 16-bit step's float32 working copies: the start of its workspace.
            cb = w.get("convert_bytes", 0)
            assert 0 <= cb <= w["bytes"] and cb % ALIGN == 0, w
            # cuda: a conv step's workspace grown into a free hole (the
            # overlap check below sees its whole size; live bytes its planned one).
            lent = w.get("lent_bytes", 0)
            assert 0 <= lent <= w["bytes"] and lent % ALIGN == 0, w
            assert not lent or ("workspace_cap_bytes" in p and s["op"] in CONV_OPS), (s, w)
            assert not cb or p.get("precision"), ("float32 copies in an fp32 plan", w)
            if s["index"] < tr:
                convert_max = max(convert_max, cb)
        if s["kind"] in ("offload", "prefetch"):
            assert s["op"] == "copy" and s["event"] is not None, s
            assert len(s["inputs"]) == len(s["outputs"]) == 1, s
            src, dst = inst[s["inputs"][0]], inst[s["outputs"][0]]
            # The host copy carries the tensor's name; the device instance may
            # be another tensor's that this one was written over in place.
            hostside = dst if s["kind"] == "offload" else src
            assert hostside["tensor"] == s["node"] and src["bytes"] == dst["bytes"], (s, src, dst)
            if s["kind"] == "offload":
                assert on_dev[src["index"]] and on_host[dst["index"]], (s, src, dst)
            else:
                assert on_host[src["index"]] and on_dev[dst["index"]], (s, src, dst)
            assert dst["persistent"] or dst["first"] == s["index"], (s, dst)
        else:
            assert s["event"] is None, s
            for i in touched:
                assert on_dev[i], ("step %d (%s %s) touches instance %d, not on the device"
                                   % (s["index"], s["kind"], s["node"], i), inst[i])
        for i in s["outputs"]:
            if i >= 0 and inst[i]["first"] == s["index"]:
                written.add(i)
    if p.get("precision"):
        assert p["convert_bytes"] == convert_max, (p["convert_bytes"], convert_max)
    for i in inst:
        if i["persistent"] or i["kind"] in ("input", "label", "workspace", "constant-data"):
            continue
        if i["bytes"]:
            assert i["index"] in written, ("instance %d is not written by its first step %d"
                                           % (i["index"], i["first"]), i)
    # Recompute steps rebuild what a forward step made, after the loss.
    fwd_ops = {s["node"]: s["op"] for s in steps if s["kind"] == "forward"}
    for s in steps:
        if s["kind"] != "recompute":
            continue
        assert loss < s["index"] < tr, s
        if s["node"].endswith("/recompute"):       # BN from its saved batch statistics
            assert s["node"][:-len("/recompute")] in fwd_ops, s
        else:
            assert fwd_ops.get(s["node"]) == s["op"], ("recomputes no forward step", s)
    if p["recompute_flops"] > 0:
        assert "recompute" in kinds
    # Both arenas.
    no_overlap([(i["offset"], i["bytes"], i["first"], i["last"], i["index"])
                for i in inst if on_dev[i["index"]]], p["arena_bytes"], "device arena")
    hosted = [i for i in inst if on_host[i["index"]]]
    no_overlap([(i["host_offset"], i["bytes"], i["first"], i["last"], i["index"]) for i in hosted],
               p["host_bytes"], "host arena")
    assert (p["host_bytes"] == 0) == (not any(i["bytes"] for i in hosted)), p["host_bytes"]
    assert p["host_bytes"] <= sum(i["bytes"] for i in hosted)
    # Values of persistent tensors: every read and every copy sees the latest
    # value; the update reaches the persistent instance by the end of training.
    pers_names = {i["tensor"] for i in inst if i["kind"] in PERSISTENT_KINDS}
    homes = {n: set() for n in pers_names}    # a tensor's persistent instances
    for i in inst:
        if i["persistent"] and i["tensor"] in homes:
            homes[i["tensor"]].add(i["index"])
    holders = {n: set(h) for n, h in homes.items()}
    for s in steps:
        if s["index"] == tr:
            for n in pers_names:
                home = homes[n]
                assert home & holders[n], "%s: the updated value never reaches %s" % (n, home)
        for i in s["inputs"]:
            if i >= 0 and inst[i]["tensor"] in pers_names:
                assert i in holders[inst[i]["tensor"]], (
                    "step %d (%s %s) reads a stale copy of %s (instance %d)"
                    % (s["index"], s["kind"], s["node"], inst[i]["tensor"], i))
        outs = [i for i in s["outputs"] if i >= 0 and inst[i]["tensor"] in pers_names]
        if s["kind"] in ("offload", "prefetch"):
            for i in outs:
                holders[inst[i]["tensor"]].add(i)
        else:
            for i in outs:
                holders[inst[i]["tensor"]] = {i}
    # The copy schedule.
    cs = Copies(steps)
    by_index = {c["index"]: c for c in cs.copies}
    users = {}
    for s in steps:
        for i in set(x for x in s["inputs"] + s["outputs"] if x >= 0):
            users.setdefault(i, []).append(s)
    writes_host = {}                       # host instance -> the offloads writing it, in order
    for d in cs.copies:
        if d["kind"] == "offload":
            writes_host.setdefault(d["outputs"][0], []).append(d)
    for c in cs.copies:
        s0, done = c["index"], cs.done[c["index"]]
        src, dst = c["inputs"][0], c["outputs"][0]
        end = tr - 1 if s0 < tr else T - 1
        assert done is not None and done <= end, (
            "copy at step %d (%s %s, event %d) is never waited for in its part of the route"
            % (s0, c["kind"], c["node"], c["event"]))
        # The destination is not used before the copy completes.
        for u in users.get(dst, []):
            if u["index"] > s0 and u["index"] <= end:
                assert cs.done_before(c, u["index"]), (
                    "step %d (%s %s) uses instance %d before the %s at step %d completes"
                    % (u["index"], u["kind"], u["node"], dst, c["kind"], s0))
        # The source stays allocated and unwritten until the copy completes.
        assert inst[src]["last"] >= done, (
            "the %s at step %d reads instance %d (last step %d) until step %d"
            % (c["kind"], s0, src, inst[src]["last"], done))
        for u in users.get(src, []):
            if s0 < u["index"] <= done:
                assert src not in u["outputs"], (
                    "step %d writes instance %d while the copy at step %d reads it"
                    % (u["index"], src, s0))
        # A host copy is read back only after the copy that wrote it completes.
        if c["kind"] == "prefetch":
            writers = [d for d in writes_host.get(src, []) if d["index"] < s0]
            if writers:
                assert cs.done_before(writers[-1], s0 + 1) and cs.done[writers[-1]["index"]] < s0, (
                    "the prefetch at step %d reads host instance %d before the offload at step %d "
                    "that writes it completes" % (s0, src, writers[-1]["index"]))
            else:
                assert inst[src]["persistent"], ("prefetch of a host copy nobody wrote", c)
            # ...and is not overwritten by a later offload while it reads it.
            for d in writes_host.get(src, []):
                if d["index"] > s0:
                    assert cs.done_before(c, d["index"]), (
                        "the offload at step %d writes host instance %d while the prefetch at "
                        "step %d reads it" % (d["index"], src, s0))
    assert set(by_index) == {s["index"] for s in steps if s["event"] is not None}
    # Live bytes per step (device instances), and the summary numbers.
    dev = [i for i in inst if on_dev[i["index"]]]
    live = [0] * (T + 1)
    for i in dev:
        live[i["first"]] += planned(i)
        live[i["last"] + 1] -= planned(i)
    run_, per_step = 0, []
    for s in range(T):
        run_ += live[s]
        per_step.append(run_)
    assert per_step == [s["live_bytes"] for s in steps]
    assert p["peak_live_bytes"] == max(per_step)
    if p["planned_policy"] == "none":
        # The baseline is the none arena: every primary instance in its own region.
        assert p["baseline_bytes"] == sum(planned(i) for i in inst)
    pers = sum(i["bytes"] for i in dev if i["persistent"])
    assert p["persistent_bytes"] == pers
    layer = max(pers + sum(planned(inst[i]) for i in
                           set(x for x in s["inputs"] + s["outputs"] if x >= 0 and on_dev[x] and
                               not inst[x]["persistent"]) |
                           ({s["workspace"]} if s["workspace"] is not None else set()))
                for s in steps)
    assert p["layer_peak_bytes"] == layer, (p["layer_peak_bytes"], layer)
    assert p["persistent_bytes"] <= p["layer_peak_bytes"] <= p["peak_live_bytes"]
    assert p["arena_bytes"] >= p["peak_live_bytes"]
    # High water per step from the instances: a sweep, the live ends in a
    # max-heap (entries of instances already dead dropped when on top).
    hw, heap = [0] * T, []
    starts = sorted((i for i in dev if i["bytes"]), key=lambda i: i["first"])
    k = 0
    for s in range(T):
        while k < len(starts) and starts[k]["first"] == s:
            heapq.heappush(heap, (-(starts[k]["offset"] + starts[k]["bytes"]), starts[k]["last"]))
            k += 1
        while heap and heap[0][1] < s:
            heapq.heappop(heap)
        hw[s] = -heap[0][0] if heap else 0
    assert hw == [s["high_water_bytes"] for s in steps]
    copied = sum(inst[c["inputs"][0]]["bytes"] for c in cs.copies if c["index"] < tr)
    assert (p["offload_bytes"] > 0) == (copied > 0), (p["offload_bytes"], copied)
    parts = p["compute_seconds"] + p["recompute_seconds"] + p["exposed_seconds"]
    assert abs(parts - p["est_step_seconds"]) <= 1e-9 + 1e-6 * p["est_step_seconds"], p
    # Per step: the compute and recompute steps' seconds add up to those
    # parts (copies overlap compute: theirs are apart), eval steps have none.
    if all(st.get("est_seconds") is not None for st in steps[:tr]):
        by = {"recompute": 0.0, "compute": 0.0}
        for st in steps[:tr]:
            assert st["est_seconds"] >= 0, st
            if st["kind"] not in ("offload", "prefetch"):
                extra = st.get("rebuild_seconds") or 0.0   # a carrier: its rebuild's part
                assert 0 <= extra <= st["est_seconds"], st
                by["recompute" if st["kind"] == "recompute" else "compute"] += st["est_seconds"] - extra
                by["recompute"] += extra
        for k in by:
            assert abs(by[k] - p[k + "_seconds"]) <= 1e-12 + 1e-6 * p["est_step_seconds"], (k, by[k], p)
        assert all(st.get("est_seconds") is None for st in steps[tr:])
    return {"recompute": kinds.count("recompute"), "copies": len(cs.copies),
            "selected": p.get("selected_rebuilds", 0),
            "optimal": p.get("optimal_schedule_kept", -1) >= 0,
            "recompute_expensive": sum(1 for s in steps if s["kind"] == "recompute" and
                                       s["op"] in EXPENSIVE_OPS),
            "host_optimizer": any(i["kind"] == "optimizer" and i["persistent"] and
                                  on_host[i["index"]] for i in inst),
            "host_params": any(i["kind"] == "param" and i["persistent"] and on_host[i["index"]]
                               for i in inst)}


# ---- auto's tiers, found from the plans ----

TIERS = ["recompute", "selective", "checkpoint", "offload", "host-optimizer", "host-params"]
# (tier_of also says "optimal": auto's optimal persistent schedules, which
# plain chains choose: tests/test_plan_optimal.py; the tier tests above walk
# models where it need not appear, and leave it out.)
# Ops the cheap rule never rebuilds: a plan that recomputes one of them is a
# checkpointed plan (recompute.c's checkpoint mode).
EXPENSIVE_OPS = ("Conv", "Gemm", "MatMul")


def tier_of(facts):
    """What a plan moves (facts from check_plan): the auto tier it belongs to."""
    if facts["host_params"]:
        return "host-params"
    if facts["host_optimizer"]:
        return "host-optimizer"
    if facts["copies"]:
        return "offload"
    if facts["selected"]:
        return "selective"
    if facts["optimal"]:
        return "optimal"
    if facts["recompute_expensive"]:
        return "checkpoint"
    if facts["recompute"]:
        return "recompute"
    return "liveness"


def auto_tiers(plan_at, largest, smallest, points=24):
    """One budget per tier of `auto`, from the plans themselves: plan_at(budget)
    returns auto's plan.json at that budget; budgets from `largest` (a plan
    with room to spare) down to `smallest` (the smallest budget that fits),
    geometrically spaced, each also one alignment under the arena planned at
    the budget before (the next tier starts there). Returns {tier: (budget,
    plan, facts)}, the largest budget found for each tier; every plan seen is
    checked by check_plan."""
    found = {}
    budgets = sorted({int(largest * (smallest / largest) ** (k / (points - 1)))
                      for k in range(points)} | {smallest}, reverse=True)
    seen = set()
    queue = list(budgets)
    while queue:
        b = queue.pop(0)
        if b < smallest or b in seen:
            continue
        seen.add(b)
        p = plan_at(b)
        assert p["arena_bytes"] <= b, (b, p["arena_bytes"])
        facts = check_plan(p)
        t = tier_of(facts)
        if t not in found or b > found[t][0]:
            found[t] = (b, p, facts)
        nxt = p["arena_bytes"] - ALIGN
        if nxt >= smallest and nxt not in seen:
            queue.append(nxt)
            queue.sort(reverse=True)
    return found
