#!/usr/bin/env bash
# run-gpu.sh — the GPU checks of snc, run from a bundle that tests/gpu/bundle.sh
# built elsewhere (docs/gpu.md). Builds nothing: it needs an NVIDIA GPU, its
# driver, and python3 with PyTorch (CUDA) and torchvision, whose pip packages
# (nvidia-cudnn, nvidia-cublas, nvidia-cuda-runtime) provide the CUDA libraries.
#
#   BUNDLE/run-gpu.sh             every step; a table and logs under $OUT
#                                 (default BUNDLE/out)
#   DRY=1 BUNDLE/run-gpu.sh       print every step's commands, run nothing
#
# Time budget on an H200 (expected seconds; each command has its own timeout):
#   0. what is here (GPU, driver, PyTorch, CUDA libraries, ldd)      10
#   1. gradients: one step of four torchvision models, TF32 off,
#      against PyTorch in float64 on the same GPU, same weights        70
#   2. CUDA-graph replay equal to eager (fashion_cnn, 2 x 5 runs)      30
#   3. bf16 gradients against PyTorch autocast (smooth_cnn)           20
#   4. fp16 loss scaling inside a CUDA graph (2 x 5 runs)              30
#   5. resnet50 224 b128: PyTorch eager img/s and peak memory          40
#   6. resnet50 224 b128: snc fp32 (TF32), bf16, fp16 img/s, arena      75
#   7. budget sweep: 100%, 50%, 25% of the liveness arena              75
#   8. snc-calibrate --target cuda (CAL_QUICK=1: --quick): a profile  60
#   9. safety: poison bit-identity and compute-sanitizer, fashion_cnn  45
#  10. --profile of the benchmark programs; a larger conv workspace     40
#  11. GPT-2 124M b8: snc fp32/bf16/liveness/50%/25%, PyTorch x2       90
#  12. max-batch resnet50 20 GiB (auto, superneurons): 3 steps each    60
#  13. a deleted wait caught: superneurons, 10 waits skipped in turn  40
#  14. torch.compile resnet50 b128                                     100
#   whole run: about 760 s; DEADLINE (default 420 s) cuts it, ONLY picks
#   sections (the first H200 run, steps 0-9 and 14: 405 s).
# Exit 0 when every check passed.
set -u -o pipefail

BUNDLE=$(cd "$(dirname "$0")" && pwd)
DRY=${DRY:-0}
OUT=${OUT:-$BUNDLE/out}
PY=${PYTHON:-python3}
DEADLINE=${DEADLINE:-420}
LOG="$OUT/logs"
mkdir -p "$LOG"
WORK=$(mktemp -d /tmp/snc-gpu.XXXXXX)
T0=$(date +%s)
FAILED=0
ROWS=()

say() { echo "run-gpu.sh: $*" | tee -a "$OUT/run.log"; }
row() { ROWS+=("$1"); echo "$1" >>"$OUT/run.log"; }
rowf() {  # rowf CHECK STATUS RESULT (a dry run has no results)
  [ "$DRY" = 1 ] && set -- "$1" dry ""
  row "$(printf '%-36s %-5s %s' "$1" "$2" "$3")"; [ "$2" = FAIL ] && FAILED=1; return 0
}
elapsed() { echo $(( $(date +%s) - T0 )); }
# run NAME TIMEOUT CMD...: logs to $LOG/NAME.log; the program's libraries
# from $PLIB (never for python3: its own come first there).
# Every command ends by DEADLINE seconds after the start (its timeout is cut
# to what is left; none starts with under 5 s left: exit 124 as a timeout),
# so the table and the logs always come back from a device call.
run() {
  local name=$1 t=$2; shift 2
  if [ "$DRY" = 1 ]; then echo "[$name, ${t}s] $*"; return 0; fi
  local left=$(( DEADLINE - $(elapsed) ))
  [ "$left" -lt "$t" ] && t=$left
  if [ "$t" -lt 5 ]; then echo "skipped: past DEADLINE=$DEADLINE s" >"$LOG/$name.log"; return 124; fi
  echo "+ $*" >"$LOG/$name.log"
  timeout -k 5 "$t" "$@" >>"$LOG/$name.log" 2>&1
}
prun() {
  local name=$1 t=$2; shift 2
  run "$name" "$t" env LD_LIBRARY_PATH="$PLIB" "$@"
}
json_get() {
  "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get(sys.argv[2], ""))' "$1" "$2" 2>/dev/null
}
mib() { awk -v b="$1" 'BEGIN { if (b == "") print "-"; else printf "%.0f MiB", b / 1048576 }'; }
# ONLY="grad graph ...": run those sections only (names: grad diag graph bf16
# fp16 torch bench sweep calibrate safety compile profile gpt track maxbatch
# mutation); GRADS="m
# ...": those models' gradient rows only. A rerun spends device time on what
# is left to check.
ONLY=${ONLY:-}
want() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }
REF="$BUNDLE/torchref.py"
P="$BUNDLE/progs"
D="$BUNDLE/data"

# ---- 0. what is here ------------------------------------------------------------------
# The CUDA libraries: PyTorch's pip packages' lib folders (nvidia/*/lib, any
# depth), then the toolkit's; the bundle's own libraries first.
PLIB="$BUNDLE/lib:$("$PY" - <<'EOF' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
dirs = []
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "**", "lib"), recursive=True)):
        if glob.glob(os.path.join(d, "lib*.so*")):
            dirs.append(d)
print(":".join(dict.fromkeys(dirs)))
EOF
):/usr/local/cuda/lib64"
PLIB=$(echo "$PLIB" | tr -s ':')   # an empty entry would mean the current folder
if [ "$DRY" = 1 ]; then
  GPU="(dry run)"
else
  GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  [ -n "$GPU" ] || { say "no GPU found (nvidia-smi failed): nothing to check"; exit 2; }
fi
TORCH_V=$("$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>/dev/null)
say "GPU: $GPU"
say "PyTorch: ${TORCH_V:-not found}"
say "bundle: $(cat "$BUNDLE/BUILT.txt" 2>/dev/null)"
say "program libraries: $PLIB"
MISSING=""
for f in "$BUNDLE"/bin/snc* "$P"/*/train; do
  [ -x "$f" ] || continue
  m=$(LD_LIBRARY_PATH="$PLIB" ldd "$f" 2>&1 | grep "not found")
  [ -n "$m" ] && MISSING="$MISSING ${f#$BUNDLE/}: $(echo $m | tr -s ' ')"
done
if [ -n "$MISSING" ]; then
  say "error: libraries not found:$MISSING"
  [ "$DRY" = 1 ] || exit 2
fi
[ "$DRY" = 1 ] || LD_LIBRARY_PATH="$PLIB" ldd "$P/graph/train" >"$LOG/ldd.log" 2>&1
# A canary: one step of the smallest program. If it hangs, every program
# would: the rest is skipped (DEADLINE cut to now) and the table comes back.
prun canary 60 "$P/safe-none/train" --data synthetic --steps 1
rc=$?
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  rowf "canary: fashion_cnn, 1 step" FAIL "hung (60 s): every later step skipped"
  DEADLINE=0
else
  rowf "canary: fashion_cnn, 1 step" "$([ "$rc" = 0 ] && echo ok || echo FAIL)" "exit $rc: $([ "$DRY" = 1 ] || tail -1 "$LOG/canary.log")"
fi

# ---- 1. gradients ---------------------------------------------------------------------
if want grad; then
# Each program draws its own initial values; --dump-params hands them to
# PyTorch, which runs the same step on the same GPU in float64, and in float32
# (TF32 off) to show how far float32 itself lands from float64 on that model.
# Error: max |g - ref| / max(max |ref|, 1e-3 of the model's largest gradient)
# per parameter, the worst over the parameters; the program's step in float32
# with TF32 off. Bound: 1e-3, or twice PyTorch's own float32 error where
# that is larger (an ill-conditioned step: on densenet121 64 px b4, PyTorch's
# float32 step is 0.27 from float64 on one BatchNorm bias, as snc's is; a
# ReLU flipped by float32 rounding next to zero does the same:
# bench/gpu_bundle.md, alexnet). GRADS="m1 m2" runs those models only.
WORST=0
for d in "$D"/grad-*; do
  m=${d##*/grad-}
  [ -z "${GRADS:-}" ] || [[ " $GRADS " == *" $m "* ]] || continue
  w="$WORK/grad-$m"
  mkdir -p "$w" && cp -r "$d" "$w/m"
  res=$(json_get "$d/meta.json" res); b=$(json_get "$d/meta.json" batch)
  label="grad $m ${res}px b$b"
  [ "$m" = gpt ] && label="grad gpt T=$res b$b"
  if ! SNRT_TF32=0 prun "grad-$m-run" 120 "$P/grad-$m/train" --data "npy:$w/m/x.npy,$w/m/y.npy" \
       --steps 1 --lr 0 --dump-grads "$w/got" --dump-params "$w/p0"; then
    rowf "$label" FAIL "train failed: $(tail -1 "$LOG/grad-$m-run.log")"; continue
  fi
  if ! run "grad-$m-torch32" 180 "$PY" "$REF" grads "$w/m" cuda fp32 "$w/p0" ||
     ! run "grad-$m-mv" 10 mv "$w/m/ref" "$w/m/ref32" ||
     ! run "grad-$m-torch" 180 "$PY" "$REF" grads "$w/m" cuda fp64 "$w/p0"; then
    rowf "$label" FAIL "PyTorch reference failed: see logs/grad-$m-torch*.log"; continue
  fi
  [ "$DRY" = 1 ] && continue
  "$PY" "$REF" compare "$w/m/ref" "$w/got" 1e9 >"$LOG/grad-$m-cmp.json" 2>>"$LOG/grad-$m-torch.log"
  "$PY" "$REF" compare "$w/m/ref" "$w/m/ref32" 1e9 >"$LOG/grad-$m-cmp32.json" 2>>"$LOG/grad-$m-torch.log"
  v=$(json_get "$LOG/grad-$m-cmp.json" worst); v32=$(json_get "$LOG/grad-$m-cmp32.json" worst)
  bound=$(awk -v t="${v32:-0}" 'BEGIN { b = 2 * t; print (b > 1e-3) ? b : 1e-3 }')
  st=$(awk -v v="${v:-inf}" -v b="$bound" -v ok="$(json_get "$LOG/grad-$m-cmp.json" ok)" \
    'BEGIN { print (ok == "True" && v != "inf" && v + 0 <= b + 0) ? "ok" : "FAIL" }')
  rowf "$label" "$st" \
    "worst $(printf '%.2e' "${v:-nan}") in $(json_get "$LOG/grad-$m-cmp.json" worst_tensor) ($(json_get "$LOG/grad-$m-cmp.json" tensors) tensors); PyTorch fp32 $(printf '%.2e' "${v32:-nan}"); bound $(printf '%.1e' "$bound")"
  WORST=$(awk -v a="$WORST" -v b="${v:-inf}" 'BEGIN { print (b + 0 > a + 0 || b == "inf") ? b : a }')
done
rowf "grad: worst relative error" "-" "$WORST (vs float64, TF32 off)"
say "gradients done ($(elapsed) s)"
fi

# ---- 1b. diagnosis: densenet121's gradients -------------------------------------------
# The second H200 run: densenet121 64 px b4 was 0.18 from float64 where
# PyTorch's float32 step is 9e-5 (the CPU target, same plan and weights:
# 1e-4), under policy auto and none alike, with cuDNN's algorithms chosen by
# cudnnFind; 1e-4 with SNRT_DETERMINISTIC=1 (cuDNN's heuristics) or with
# CUDA_LAUNCH_BLOCKING=1. The heuristics are now the default: this section
# runs the step with them (auto, none) and with SNRT_CONV_FIND=1 and every
# choice logged (find, none-find: logs/diag-find*.log name the algorithms);
# the loss beside PyTorch's, and each tensor's error (logs/diag-*-cmp.json).
if want diag && [ -d "$D/grad-densenet121" ]; then
  w="$WORK/diag"
  mkdir -p "$w" && cp -r "$D/grad-densenet121" "$w/m"
  REFP=""
  for v in auto none find none-find; do
    prog="$P/grad-densenet121/train"; envs="SNRT_TF32=0"
    case $v in
      find) envs="$envs SNRT_CONV_FIND=1 SNRT_CONV_LOG=1" ;;
      none) prog="$P/grad-densenet121-none/train" ;;
      none-find) prog="$P/grad-densenet121-none/train"; envs="$envs SNRT_CONV_FIND=1 SNRT_CONV_LOG=1" ;;
    esac
    label="diag densenet121 $v"
    if ! prun "diag-$v" 120 env $envs "$prog" --data "npy:$w/m/x.npy,$w/m/y.npy" --steps 1 --lr 0 \
         --dump-grads "$w/got-$v" --dump-params "$w/p-$v"; then
      rowf "$label" FAIL "train failed: $(tail -1 "$LOG/diag-$v.log" 2>/dev/null)"; continue
    fi
    [ "$DRY" = 1 ] && continue
    # PyTorch in float64 from these initial values (once per distinct set).
    if [ -z "$REFP" ] || ! "$PY" "$REF" same-params "$REFP" "$w/p-$v" >/dev/null 2>&1; then
      rm -rf "$w/m/ref"
      run "diag-$v-torch" 180 "$PY" "$REF" grads "$w/m" cuda fp64 "$w/p-$v" ||
        { rowf "$label" FAIL "PyTorch reference failed"; continue; }
      REFP="$w/p-$v"
    fi
    "$PY" "$REF" compare "$w/m/ref" "$w/got-$v" 1e9 >"$LOG/diag-$v-cmp.json" 2>&1
    rowf "$label" "-" "$("$PY" - "$LOG/diag-$v-cmp.json" "$w/m/ref/loss.npy" "$w/got-$v/loss.npy" <<'PYEOF'
import json, sys
import numpy as np
d = json.load(open(sys.argv[1]))
e = sorted(d["errors"].items(), key=lambda kv: -kv[1])
bad = sum(1 for _, v in e if v > 1e-3)
print("loss %.7g vs %.7g; %d of %d tensors > 1e-3; worst %s" % (
    float(np.load(sys.argv[3]).ravel()[0]), float(np.load(sys.argv[2]).ravel()[0]), bad, len(e),
    ", ".join("%s %.2e" % (k.replace("features.", ""), v) for k, v in e[:3])))
PYEOF
)"
  done
fi

# ---- 2. CUDA graphs replay what eager runs compute --------------------------------------
if want graph; then
# fashion_cnn, Adam, superneurons (offload copies in the graph too),
# SNRT_DETERMINISTIC=1: the loss after k = 1..5 steps (one run of --steps k
# each, exact from --metrics) with graphs off and on must be equal.
replay() {  # replay NAME PROG LABEL [ENV...]: sets REPLAY_OK
  local name=$1 prog=$2; shift 2
  for mode in 0 1; do
    mkdir -p "$WORK/$name/g$mode"
    for k in 1 2 3 4 5; do
      run "$name-g$mode-s$k" 60 env "$@" SNRT_DETERMINISTIC=1 SNRT_CUDA_GRAPH=$mode \
        LD_LIBRARY_PATH="$PLIB" "$prog" --data synthetic --steps $k --metrics "$WORK/$name/g$mode/m$k.json"
    done
  done
  [ "$DRY" = 1 ] && return 0
  "$PY" "$REF" same-losses "$WORK/$name/g0" "$WORK/$name/g1" 5 >"$LOG/$name-losses.json"
}
if replay graph "$P/graph/train"; then
  rowf "CUDA graph replay, 5 steps" ok "losses equal to eager (SNRT_DETERMINISTIC=1)"
else
  rowf "CUDA graph replay, 5 steps" FAIL "$(cat "$LOG/graph-losses.json")"
fi
fi

# ---- 3. bf16 on tensor cores against PyTorch autocast -----------------------------------
if want bf16; then
# smooth_cnn (conv, BN, tanh, average pool: no ReLU mask or max-pool argmax a
# rounding can flip) with --precision bf16 against torch.autocast(bfloat16)
# on the same GPU: ||g - ref|| / ||ref|| <= 2^-5 per parameter (under 16
# roundings of u = 2^-9 along the chain, tests/test_precision.py's bound),
# and over 1e-3 from the fp32 step (bf16 did happen).
w="$WORK/bf16"
mkdir -p "$w" && cp -r "$D/bf16grad" "$w/m"
label="grad bf16 smooth_cnn 32px b16"
if ! prun bf16-run 120 "$P/bf16grad/train" --data "npy:$w/m/x.npy,$w/m/y.npy" --steps 1 --lr 0 \
       --dump-grads "$w/got" --dump-params "$w/p0" ||
   ! run bf16-torch32 180 "$PY" "$REF" grads "$w/m" cuda fp32 "$w/p0" ||
   ! run bf16-mv 10 mv "$w/m/ref" "$w/m/ref32" ||
   ! run bf16-torch 180 "$PY" "$REF" grads "$w/m" cuda bf16 "$w/p0"; then
  rowf "$label" FAIL "see logs/bf16-*.log"
elif [ "$DRY" != 1 ]; then
  "$PY" "$REF" compare "$w/m/ref" "$w/got" 0.03125 norm >"$LOG/bf16-cmp.json"
  rc=$?
  "$PY" "$REF" compare "$w/m/ref32" "$w/got" 1e-3 norm >"$LOG/bf16-cmp32.json"
  rc32=$?   # 1 expected: bf16 is over 1e-3 from fp32
  v=$(json_get "$LOG/bf16-cmp.json" worst); v32=$(json_get "$LOG/bf16-cmp32.json" worst)
  st=ok; { [ "$rc" = 0 ] && [ "$rc32" = 1 ]; } || st=FAIL
  rowf "$label" "$st" "worst $(printf '%.2e' "${v:-nan}") vs autocast (bound 2^-5), $(printf '%.2e' "${v32:-nan}") vs fp32 (must be > 1e-3)"
fi
fi

# ---- 4. fp16's loss scaling inside a CUDA graph -----------------------------------------
if want fp16; then
# A scale that overflows the first steps (2^24, halved per skipped step):
# replayed graphs give eager's losses and the same skipped steps.
if replay fp16 "$P/fp16graph/train" SNRT_LOSS_SCALE=16777216; then
  s0=$(json_get "$WORK/fp16/g0/m5.json" skipped_steps); s1=$(json_get "$WORK/fp16/g1/m5.json" skipped_steps)
  if [ -n "$s0" ] && [ "$s0" = "$s1" ] && [ "$s0" -gt 0 ]; then
    rowf "fp16 loss scaling, CUDA graph" ok "losses equal to eager, $s0 of 5 steps skipped in both"
  else
    rowf "fp16 loss scaling, CUDA graph" FAIL "skipped $s0 / $s1"
  fi
else
  rowf "fp16 loss scaling, CUDA graph" FAIL "$(cat "$LOG/fp16-losses.json" 2>/dev/null)"
fi
fi

say "16-bit checks done ($(elapsed) s)"

# ---- 5./6. the benchmark ----------------------------------------------------------------
BM=$(json_get "$D/bench/meta.json" model); RES=$(json_get "$D/bench/meta.json" res)
B=$(json_get "$D/bench/meta.json" batch); LIVE=$(json_get "$D/bench/meta.json" liveness_arena_bytes)
STEPS=20
torch_bench() {  # torch_bench NAME MODE LABEL TIMEOUT
  if run "$1" "$4" "$PY" "$REF" bench "$BM" "$RES" "$B" $STEPS "$2" && [ "$DRY" != 1 ]; then
    tail -1 "$LOG/$1.log" >"$LOG/$1.json"
    rowf "$3" ok "$(printf '%.0f' "$(json_get "$LOG/$1.json" images_per_s)") img/s, peak $(mib "$(json_get "$LOG/$1.json" peak_bytes)") (max_memory_allocated)"
  elif [ "$DRY" != 1 ]; then
    rowf "$3" FAIL "see logs/$1.log"
  fi
}
if want torch; then
  torch_bench bench-torch eager "$BM b$B PyTorch eager (TF32)" 240
  torch_bench bench-torch-bf16 autocast "$BM b$B PyTorch eager autocast bf16" 240
fi
bench() {  # bench NAME LABEL: sets IPS, ARENA
  IPS=""; ARENA=""
  prun "$1" 240 "$P/$1/train" --data synthetic --steps $((STEPS + 3)) --metrics "$WORK/$1.json" || return 1
  IPS=$(json_get "$WORK/$1.json" images_per_s); ARENA=$(json_get "$WORK/$1.json" arena_bytes)
  [ "$DRY" = 1 ] || cp "$WORK/$1.json" "$LOG/$1-metrics.json"
}
if want bench; then
IPS32=""; ARENA32=""
for pr in fp32 bf16 fp16; do
  label="$BM b$B snc $pr (auto)"
  if bench "bench-$pr"; then
    loss=$(json_get "$WORK/bench-$pr.json" train_loss)
    st=ok; [ "$DRY" = 1 ] || "$PY" -c 'import math,sys; sys.exit(0 if math.isfinite(float(sys.argv[1])) else 1)' "$loss" || st=FAIL
    extra=""; [ "$pr" = fp16 ] && extra=", $(json_get "$WORK/bench-$pr.json" skipped_steps) steps skipped"
    rowf "$label" "$st" "$(printf '%.0f' "$IPS") img/s, arena $(mib "$ARENA"), loss $loss$extra"
    [ "$pr" = fp32 ] && IPS32=$IPS ARENA32=$ARENA
    if [ "$pr" = bf16 ] && [ -n "$IPS32" ] && [ -n "$ARENA32" ]; then
      rowf "$BM b$B bf16 / fp32" "-" "$(awk -v a="$IPS" -v b="$IPS32" -v c="$ARENA" -v d="$ARENA32" 'BEGIN { printf "%.2fx img/s, %.3fx arena", a / b, c / d }')"
    fi
  else
    rowf "$label" FAIL "see $LOG/bench-$pr.log"
  fi
done
fi
say "benchmark done ($(elapsed) s)"

# ---- 7. budget sweep ------------------------------------------------------------------
if want sweep; then
for pct in 100 50 25; do
  label="$BM budget ${pct}% ($(mib $(( LIVE * pct / 100 ))))"
  if [ -f "$P/sweep-$pct.infeasible" ]; then
    rowf "$label" "-" "$(cat "$P/sweep-$pct.infeasible")"
  elif bench "sweep-$pct"; then
    est=$([ "$DRY" = 1 ] || "$PY" -c 'import json,sys; print("%.1f ms" % (1e3 * json.load(open(sys.argv[1]))["est_step_seconds"]))' "$P/sweep-$pct/plan.json")
    rowf "$label" ok "$(printf '%.0f' "$IPS") img/s, arena $(mib "$ARENA"), plan's estimate $est/step"
  else
    rowf "$label" FAIL "see $LOG/sweep-$pct.log"
  fi
done
fi

# ---- 8. a measured profile -------------------------------------------------------------
if want calibrate; then
# CAL_QUICK=1: --quick (batch 4: launch-bound on an H200, the first run's
# profile estimated resnet50 b128 at 62x its measured step); default: the
# full shapes (batch 16), the profile schemas/devices.json's h200 takes.
CALQ=""; [ "${CAL_QUICK:-0}" = 1 ] && CALQ=--quick
if prun calibrate 180 "$BUNDLE/bin/snc-calibrate-cuda" --target cuda $CALQ -o "$OUT/calibrate-cuda.json"; then
  rowf "snc-calibrate --target cuda $CALQ" ok "$OUT/calibrate-cuda.json"
else
  rowf "snc-calibrate --target cuda $CALQ" FAIL "see $LOG/calibrate.log"
fi
fi

safe_run() {  # safe_run NAME PROG [ARGS...]: 3 steps, params into $WORK/NAME
  local name=$1 prog=$2; shift 2
  prun "$name" 90 env SNRT_DETERMINISTIC=1 "$prog" --data synthetic --steps 3 \
    --dump-params "$WORK/$name" "$@"
}

# ---- 9. the memory schedule is safe -----------------------------------------------------
if want safety; then
# Each set of programs (PREFIX-POLICY: fashion_cnn b32 "safe", resnet18
# 64 px b8 "safe18", the GPT example T=64 b8 "sgpt"; auto at the tightest
# budget it plans for, the GPT's at 50% of its liveness arena),
# SNRT_DETERMINISTIC=1: 3 steps with --poison give parameters bit for bit
# equal to policy none's; then compute-sanitizer: memcheck on every policy,
# racecheck, synccheck and initcheck on the offloading one (fashion_cnn's
# superneurons; the others' where SAN_ALL=1: they are slow).
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ "$DRY" = 1 ] || say "compute-sanitizer: $("$SAN" --version 2>&1 | tail -1)"
sanitize() {  # sanitize TOOL PREFIX POLICY LABEL
  local name="san-$1-$2-$3" prog="$P/$2-$3/train"
  [ -x "$prog" ] || [ "$DRY" = 1 ] || return 0
  prun "$name" 90 env SNRT_DETERMINISTIC=1 "$SAN" --tool "$1" --error-exitcode 9 \
    --print-limit 20 "$prog" --data synthetic --steps 3
  local rc=$?
  [ "$DRY" = 1 ] && return 0
  local n; n=$(grep -Eo "ERROR SUMMARY: [0-9]+|RACECHECK SUMMARY: [0-9]+ hazard" "$LOG/$name.log" | tail -1)
  rowf "compute-sanitizer $1 $4 $3" "$([ $rc = 0 ] && echo ok || echo FAIL)" "exit $rc; ${n:-no summary}"
}
for set in safe:fashion_cnn safe18:resnet18 sgpt:gpt; do
  pre=${set%%:*} ml=${set#*:}
  [ -x "$P/$pre-none/train" ] || continue   # (the SMALL bundle has fashion_cnn's only)
  safe_run "$pre-none" "$P/$pre-none/train" || rowf "$ml policy none, 3 steps" FAIL "see logs/$pre-none.log"
  pols=""
  for d in "$P/$pre"-*/; do
    pol=${d%/}; pol=${pol##*/$pre-}
    [ "$pol" = none ] && continue
    pols="$pols $pol"
    label="poison $ml $pol, 3 steps"
    safe_run "poison-$pre-$pol" "$d/train" --poison
    rc=$?
    if [ "$rc" != 0 ]; then
      rowf "$label" FAIL "exit $rc: $(tail -1 "$LOG/poison-$pre-$pol.log" 2>/dev/null)"
    elif [ "$DRY" != 1 ]; then
      "$PY" "$REF" same-params "$WORK/$pre-none" "$WORK/poison-$pre-$pol" >"$LOG/poison-$pre-$pol.json"
      rc=$?
      rowf "$label" "$([ $rc = 0 ] && echo ok || echo FAIL)" \
        "params vs none: $(json_get "$LOG/poison-$pre-$pol.json" tensors) tensors, $(json_get "$LOG/poison-$pre-$pol.json" n_differ) differ"
    fi
  done
  for pol in $pols; do sanitize memcheck "$pre" "$pol" "$ml"; done
  if [ "$pre" = safe ] || [ "${SAN_ALL:-0}" = 1 ]; then
    for tool in racecheck synccheck initcheck; do
      for pol in $pols; do
        case $pol in superneurons|auto*) sanitize "$tool" "$pre" "$pol" "$ml" ;; esac
      done
    done
  fi
done
fi

say "safety done ($(elapsed) s)"

# ---- 10. where the time goes -------------------------------------------------------------
# --profile (each plan step timed by CUDA events, eagerly) of the benchmark's
# fp32 and bf16 programs: the op classes summed, measured beside the plan's
# estimate (logs/prof-*.json); then the same programs with SNRT_CONV_WS_MIB:
# is the plan's convolution workspace what holds cuDNN back?
inuse() { grep -Eo '[0-9.]+ [KMG]iB in use on the GPU' "$LOG/$1.log" 2>/dev/null | head -1 | sed 's/ in use.*//'; }
# profile NAME PROG LABEL ARGS...: --profile of PROG, a row of the op
# classes that took longest (measured/estimated).
profile() {
  local name=$1 prog=$2 label=$3; shift 3
  [ -x "$prog" ] || [ "$DRY" = 1 ] || return 0
  if ! prun "$name" 150 "$prog" "$@" --profile "$LOG/$name.json"; then
    rowf "$label" FAIL "see logs/$name.log"; return 0
  fi
  [ "$DRY" = 1 ] || rowf "$label" ok "$("$PY" - "$LOG/$name.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
c = sorted(d["by_class"].items(), key=lambda kv: -kv[1]["measured_s"])
tot = d["step"]["measured_s"]
print("step %.1f ms (est %.1f); " % (1e3 * tot, 1e3 * d["step"]["estimated_s"]) +
      ", ".join("%s %.1f/%.1f ms" % (k, 1e3 * v["measured_s"], 1e3 * v["estimated_s"]) for k, v in c[:6]))
PYEOF
)"
}
if want profile; then
  for pr in fp32 bf16; do
    profile "prof-$pr" "$P/bench-$pr/train" "$BM b$B snc $pr --profile" --data synthetic --steps 8
  done
  # The GPT-2 programs too (the second H200 run: 0.16-0.26x PyTorch's tokens/s).
  for v in fp32 bf16; do
    profile "prof-gpt-$v" "$P/gpt-$v/train" "GPT-2 124M b8 snc $v --profile" \
      --data "tokens:$D/gpt/tokens.bin" --steps 6
  done
  [ "${PROF_WS:-1}" = 1 ] && for pr in fp32 bf16; do
    if SNRT_CONV_WS_MIB=4096 bench "bench-$pr"; then
      rowf "$BM b$B snc $pr, conv workspace +4 GiB" ok "$(printf '%.0f' "$IPS") img/s (SNRT_CONV_WS_MIB=4096)"
    else
      rowf "$BM b$B snc $pr, conv workspace +4 GiB" FAIL "see logs/bench-$pr.log"
    fi
  done
fi

# ---- 11. GPT-2 124M ------------------------------------------------------------------------
# make_gpt.py's GPT-2 124M at B=8, T=1024 on the fortunes bytes: snc fp32
# (TF32) and bf16 (auto), bf16 at the liveness plan and at 50% and 25% of its
# arena, against PyTorch eager (TF32; autocast bf16) on the same model.
# Memory: snc's is what the GPU has in use after the warm-up step (context
# included), PyTorch's is max_memory_allocated (context not included).
if want gpt; then
  GT=$(json_get "$D/gpt/meta.json" T); GB=$(json_get "$D/gpt/meta.json" batch)
  GLIVE=$(json_get "$D/gpt/meta.json" liveness_arena_bytes)
  for v in fp32 bf16 live 50 25; do
    case $v in
      50|25) label="GPT-2 124M b$GB snc bf16 ${v}% ($(mib $(( GLIVE * v / 100 ))))" ;;
      live) label="GPT-2 124M b$GB snc bf16 liveness" ;;
      *) label="GPT-2 124M b$GB snc $v (auto)" ;;
    esac
    if [ -f "$P/gpt-$v.infeasible" ]; then rowf "$label" "-" "$(cat "$P/gpt-$v.infeasible")"; continue; fi
    if prun "gpt-$v" 180 "$P/gpt-$v/train" --data "tokens:$D/gpt/tokens.bin" --steps 13 \
         --log-every 1 --metrics "$WORK/gpt-$v.json"; then
      [ "$DRY" = 1 ] && continue
      cp "$WORK/gpt-$v.json" "$LOG/gpt-$v-metrics.json"
      est=$("$PY" -c 'import json,sys; print("%.1f" % (1e3 * json.load(open(sys.argv[1]))["est_step_seconds"]))' "$P/gpt-$v/plan.json")
      rowf "$label" ok "$(awk -v s="$(json_get "$WORK/gpt-$v.json" images_per_s)" -v t="$GT" 'BEGIN { printf "%.0f tokens/s", s * t }'), arena $(mib "$(json_get "$WORK/gpt-$v.json" arena_bytes)"), in use $(inuse "gpt-$v"), est $est ms/step, loss $(json_get "$WORK/gpt-$v.json" train_loss)"
    else
      rowf "$label" FAIL "exit: see logs/gpt-$v.log: $(tail -1 "$LOG/gpt-$v.log" 2>/dev/null)"
    fi
  done
  for mode in autocast eager; do
    label="GPT-2 124M b$GB PyTorch $mode"
    if run "gpt-torch-$mode" 180 "$PY" "$REF" gpt-bench "$GB" 10 "$mode" "$D/gpt/tokens.bin" && [ "$DRY" != 1 ]; then
      tail -1 "$LOG/gpt-torch-$mode.log" >"$LOG/gpt-torch-$mode.json"
      rowf "$label" ok "$(printf '%.0f' "$(json_get "$LOG/gpt-torch-$mode.json" tokens_per_s)") tokens/s, peak $(mib "$(json_get "$LOG/gpt-torch-$mode.json" peak_bytes)") (max_memory_allocated)"
    elif [ "$DRY" != 1 ]; then
      rowf "$label" FAIL "see logs/gpt-torch-$mode.log"
    fi
  done
fi

# ---- 11b. GPT-2 124M: the loss from the same weights ----------------------------------------
# The snc program's initial values (--dump-params after 0 steps) loaded into
# PyTorch's model; 20 AdamW steps (lr 1e-4) on one fixed batch in both. fp32
# (TF32) against PyTorch with TF32 on, bf16 against autocast; the bound is
# 0.01 (fp32) or 0.03 (bf16), or twice how far PyTorch's own run moves from
# its TF32-off run, whichever is larger.
if want track; then
  X="$D/gpt/track_x.npy" Y="$D/gpt/track_y.npy" w="$WORK/track"
  mkdir -p "$w"
  for v in fp32 bf16; do
    label="GPT-2 124M b8 loss vs PyTorch, $v, 20 steps"
    [ -x "$P/gpt-$v/train" ] || [ "$DRY" = 1 ] || continue
    same=tf32; [ "$v" = bf16 ] && same=autocast
    if ! prun "track-$v-p0" 120 "$P/gpt-$v/train" --data "npy:$X,$Y" --steps 0 --dump-params "$w/p0-$v" ||
       ! prun "track-$v" 300 "$P/gpt-$v/train" --data "npy:$X,$Y" --steps 20 --lr 1e-4 --log-every 1 ||
       ! run "track-$v-torch-$same" 300 "$PY" "$REF" gpt-track "$D/gpt/meta.json" "$w/p0-$v" "$X" "$Y" 20 1e-4 "$same" ||
       ! run "track-$v-torch-fp32" 300 "$PY" "$REF" gpt-track "$D/gpt/meta.json" "$w/p0-$v" "$X" "$Y" 20 1e-4 fp32; then
      rowf "$label" FAIL "see logs/track-$v*.log"; continue
    fi
    [ "$DRY" = 1 ] && continue
    res=$("$PY" - "$LOG/track-$v.log" "$LOG/track-$v-torch-$same.log" "$LOG/track-$v-torch-fp32.log" "$v" <<'PYEOF'
import json, re, sys
snc = [float(m) for m in re.findall(r"step \d+/\d+ loss ([-0-9.eE+naif]+)", open(sys.argv[1]).read())]
ref = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])["losses"]
f32 = json.loads(open(sys.argv[3]).read().strip().splitlines()[-1])["losses"]
n = min(len(snc), len(ref))
d = max(abs(a - b) for a, b in zip(snc, ref)) if n else float("inf")
noise = max(abs(a - b) for a, b in zip(ref, f32))
bound = max(0.01 if sys.argv[4] == "fp32" else 0.03, 2 * noise)
ok = n == 20 and len(ref) == 20 and d <= bound
print("%s max |snc - PyTorch| %.4f over %d steps (bound %.3f; PyTorch vs its TF32-off run %.4f); "
      "loss %.4f -> %.4f (PyTorch %.4f -> %.4f)" % ("ok" if ok else "FAIL", d, n, bound, noise,
      snc[0] if snc else float("nan"), snc[-1] if snc else float("nan"), ref[0], ref[-1]))
PYEOF
)
    rowf "$label" "${res%% *}" "${res#* }"
  done
fi

# ---- 12. max-batch answers that run --------------------------------------------------------
# snc max-batch resnet50 --budget 20GiB --device h200 (auto, superneurons),
# asked here: the answer's program runs 3 steps; the memory in use beside
# the plan's arena (one batch more was refused at compile time, bundle.sh).
if want maxbatch; then
  for pol in auto superneurons; do
    mb=$(cat "$P/maxb-$pol/BATCH" 2>/dev/null)
    label="max-batch 20GiB $pol: b$mb"
    if prun "maxb-$pol" 240 "$P/maxb-$pol/train" --data synthetic --steps 3 --log-every 1 \
         --metrics "$WORK/maxb-$pol.json"; then
      [ "$DRY" = 1 ] || rowf "$label" ok "3 steps, $(printf '%.0f' "$(json_get "$WORK/maxb-$pol.json" images_per_s)") img/s, arena $(mib "$(json_get "$WORK/maxb-$pol.json" arena_bytes)") + host $(mib "$(json_get "$WORK/maxb-$pol.json" host_bytes)"), in use $(inuse "maxb-$pol")"
    else
      rowf "$label" FAIL "see logs/maxb-$pol.log: $(tail -1 "$LOG/maxb-$pol.log" 2>/dev/null)"
    fi
  done
fi

# ---- 13. a deleted wait is caught on the GPU --------------------------------------------
# fashion_cnn under superneurons (policy offload moves nothing of it on the
# h200 profile), SNRT_DETERMINISTIC=1, each copy stream slowed by
# a sleeping kernel (SNRT_COPY_DELAY_US=2000) so that a missing wait loses
# the race: first with every wait (parameters after 3 steps bit for bit
# policy none's), then with the waits of one event skipped in turn
# (SNRT_SKIP_WAIT, up to 10 events): each must be caught, by --poison
# (exit 4) or by parameters that differ from policy none's.
if want mutation; then
  mut() {  # mut NAME [ENV...]: 3 poisoned steps, params into $WORK/NAME; sets MRC
    local name=$1; shift
    prun "$name" 90 env SNRT_DETERMINISTIC=1 SNRT_COPY_DELAY_US=2000 "$@" "$P/safe-superneurons/train" \
      --data synthetic --steps 3 --poison --dump-params "$WORK/$name"
    MRC=$?
  }
  [ -d "$WORK/safe-none" ] || safe_run safe-none "$P/safe-none/train"
  mut mut-all
  if [ "$DRY" != 1 ]; then
    same=1; "$PY" "$REF" same-params "$WORK/safe-none" "$WORK/mut-all" >"$LOG/mut-all.json" || same=0
    rowf "superneurons, copies delayed, all waits" "$([ "$MRC" = 0 ] && [ $same = 1 ] && echo ok || echo FAIL)" \
      "exit $MRC, params $([ $same = 1 ] && echo equal to || echo DIFFER from) policy none's"
  fi
  caught=0; total=0; missed=""
  for ev in $(cat "$P/safe-superneurons/WAITS" 2>/dev/null); do
    mut "mut-skip$ev" SNRT_SKIP_WAIT="$ev"
    [ "$DRY" = 1 ] && continue
    total=$((total + 1))
    if [ "$MRC" = 4 ]; then caught=$((caught + 1))
    elif [ "$MRC" = 0 ] && ! "$PY" "$REF" same-params "$WORK/safe-none" "$WORK/mut-skip$ev" >/dev/null; then
      caught=$((caught + 1))
    else missed="$missed $ev(exit $MRC)"; fi
  done
  [ "$DRY" = 1 ] || rowf "superneurons, one wait deleted" "$([ -z "$missed" ] && [ $total -gt 0 ] && echo ok || echo FAIL)" \
    "$caught of $total deleted waits caught${missed:+; missed:$missed}"
fi

# ---- 14. torch.compile, if it compiles in the time left ----------------------------------
want compile && torch_bench bench-torch-compile compile "$BM b$B torch.compile (TF32)" 240

# ---- the table -------------------------------------------------------------------------
{
  echo
  echo "snc GPU checks — $GPU — PyTorch ${TORCH_V:-?} — $(elapsed) s"
  printf '%-36s %-5s %s\n' "check" "ok" "result"
  printf '%s\n' "${ROWS[@]}"
} | tee "$OUT/table.txt"
rm -rf "$WORK"
# A device call brings back at most 8 files from $OUT: the logs travel as one.
[ "$DRY" = 1 ] || { tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOG"; }
exit $FAILED
