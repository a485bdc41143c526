#!/usr/bin/env bash
# tests/gpu/bundle.sh — builds, here (no GPU needed), everything the GPU checks
# run, into one folder that a machine with an NVIDIA GPU and PyTorch runs with
# no build step and no network: docs/gpu.md.
#
#   tests/gpu/bundle.sh [OUTDIR]          (default gpu-bundle, git-ignored)
#   SMALL=1 tests/gpu/bundle.sh OUTDIR    the rehearsal's size (tests/test_gpu_bundle.py):
#                                         small models, the same steps
#
# 1. snc and the CUDA runtime for sm_90 (machine code) and compute_90 (PTX,
#    which later GPUs compile when they load it): configure.py --cuda-arch 90
#    --builddir build-gpu, so the checkout's own build/ is left alone.
# 2. The models, exported here with PyTorch (tests/gpu/torchref.py) with
#    their float initializers stripped (--strip): a program draws its own
#    initial values, and the reference reads them back from the program's
#    --dump-params files there, so no weights travel.
# 3. Every program the checks run, compiled (snc compile --target cuda) and
#    linked here: OUTDIR/progs/NAME/{train, plan.txt, plan.json, params.bin},
#    each plan checked by tests/plan_check.py.
# 4. OUTDIR/lib: the shared libraries the binaries need that a GPU machine's
#    image lacks (ldd; never cuDNN, cuBLAS, cudart, libcuda or NCCL, which come
#    from the machine's driver and PyTorch's pip packages). The binaries'
#    RUNPATH names /usr/local/cuda/lib64 only, so LD_LIBRARY_PATH wins.
# 5. OUTDIR/run-gpu.sh and torchref.py, and MANIFEST.txt (every file, its
#    kind and size).
# 6. OUTDIR.tar.xz, the folder packed: what travels to the GPU machine. Fails
#    if it is over 56 MiB: it travels with the working tree (about 6 MiB)
#    under a 64 MiB limit.
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
OUT=${1:-gpu-bundle}
SMALL=${SMALL:-0}
PY=/usr/bin/python3
LIMIT=$((56 << 20))
T0=$(date +%s)

die() { echo "bundle.sh: error: $*" >&2; exit 1; }
say() { echo "bundle.sh: $*"; }
case "$OUT" in /*) ;; *) OUT="$ROOT/$OUT" ;; esac
rm -rf "$OUT" "$OUT.tar.xz" && mkdir -p "$OUT/progs" "$OUT/data" "$OUT/lib" "$OUT/bin" || die "cannot make $OUT"
LOGS="$OUT/build-logs"
mkdir -p "$LOGS"

# ---- 1. snc and the runtime for sm_90 ---------------------------------------------
B=build-gpu
./configure.py --cuda on --cuda-arch 90 --builddir "$B" >"$LOGS/configure.log" 2>&1 ||
  die "configure.py failed: $(tail -1 "$LOGS/configure.log")"
nice ninja -f "$B/build.ninja" "$B/snc" "$B/libsnrt_cuda.a" "$B/snc-calibrate-cuda" \
  >"$LOGS/build.log" 2>&1 || die "build failed: see $LOGS/build.log"
SNC="$ROOT/$B/snc"
cp "$SNC" "$B/snc-calibrate-cuda" "$OUT/bin/"
say "built $B ($(( $(date +%s) - T0 )) s)"

# ---- 2. models ----------------------------------------------------------------------
export_model() {  # export_model MODEL RES BATCH NAME: $OUT/data/NAME
  "$PY" tests/gpu/torchref.py export "$1" "$2" "$3" "$OUT/data/$4" --strip \
    >"$LOGS/export-$4.log" 2>&1 || die "export of $1 failed: see $LOGS/export-$4.log"
}
# MODEL:RES:BATCH, each checked against PyTorch in float64 with Dropout off.
# Sizes where a float32 step is well-conditioned (measured on the CPU target
# against float64, bench/gpu_bundle.md): mobilenet_v2 at 32 px needs batch 16;
# vgg11_bn is left out (at 224 px, batch 2 or 4, PyTorch's own float32 step
# is 8e-3 to 2e-2 from float64). alexnet is left out too: at 224 px b4 one
# of conv4's 173,056 pre-activations is 1.2e-8 (its channel's largest: 0.22),
# so a float32 step flips that ReLU and channel 55's gradients move by 1e-2
# (bench/gpu_bundle.md): a float32 rounding at a kink, not an error, but a
# failed row all the same.
if [ "$SMALL" = 1 ]; then
  GRAD_MODELS="resnet18:64:4"
  BENCH=resnet18 BENCH_RES=32 BENCH_B=8
else
  # fashion_cnn and the GPT example (examples/): the issue's models;
  # resnet50 at 128 px b8 is ill-conditioned in float32 (PyTorch's own
  # float32 step 0.23 from float64 on the CPU, snc's 0.21: bench/gpu_bundle.md),
  # checked against twice PyTorch's float32 error like densenet121.
  GRAD_MODELS="resnet18:64:8 mobilenet_v2:32:16 squeezenet1_1:64:8 densenet121:64:4"
  GRAD_MODELS="$GRAD_MODELS fashion_cnn:28:32 gpt:64:8 resnet50:128:8"
  BENCH=resnet50 BENCH_RES=224 BENCH_B=128
fi
for spec in $GRAD_MODELS; do
  IFS=: read -r m res b <<<"$spec"
  export_model "$m" "$res" "$b" "grad-$m"
done
export_model smooth_cnn 32 16 bf16grad
mkdir -p "$OUT/data/bench"
"$PY" tests/gpu/torchref.py onnx "$BENCH" "$BENCH_RES" "$OUT/data/bench/model.onnx" --strip \
  >"$LOGS/export-bench.log" 2>&1 || die "export of $BENCH failed: see $LOGS/export-bench.log"
say "exported ($(( $(date +%s) - T0 )) s)"

# ---- 3. programs --------------------------------------------------------------------
# prog NAME MODEL ARGS...: compiled and linked for the cuda target into
# progs/NAME; the sources and objects are left here.
prog() {
  local name=$1 model=$2; shift 2
  local d="$OUT/progs/$name"
  "$SNC" compile "$model" -o "$d" --target cuda "$@" >"$LOGS/compile-$name.log" 2>&1 ||
    return 1
  nice ninja -C "$d" >"$LOGS/ninja-$name.log" 2>&1 || die "link of $name failed: see $LOGS/ninja-$name.log"
  "$PY" -c 'import json, sys; sys.path.insert(0, "tests"); import plan_check
plan_check.check_plan(json.load(open(sys.argv[1])))' "$d/plan.json" >"$LOGS/plancheck-$name.log" 2>&1 ||
    die "plan_check.py rejects $name's plan: see $LOGS/plancheck-$name.log"
  rm -f "$d/train.c" "$d/train.o" "$d/build.ninja" "$d/.ninja_log" "$d/.ninja_deps"
  echo "$name $*" >>"$OUT/progs/COMMANDS.txt"
}
for spec in $GRAD_MODELS; do
  IFS=: read -r m res b <<<"$spec"
  prog "grad-$m" "$OUT/data/grad-$m/model.onnx" --batch "$b" --lr 0 ||
    die "snc compile grad-$m failed: $(tail -1 "$LOGS/compile-grad-$m.log")"
done
# densenet121's gradients (the second H200 run: 0.18 from float64 where
# PyTorch's float32 step is 9e-5) under policy none too: run-gpu.sh's diag.
if [ -d "$OUT/data/grad-densenet121" ]; then
  prog grad-densenet121-none "$OUT/data/grad-densenet121/model.onnx" --batch 4 --lr 0 --policy none ||
    die "snc compile grad-densenet121-none failed"
fi
prog graph examples/fashion_cnn.onnx --batch 32 --optimizer adam --policy superneurons ||
  die "snc compile graph failed"
prog bf16grad "$OUT/data/bf16grad/model.onnx" --batch 16 --lr 0 --precision bf16 ||
  die "snc compile bf16grad failed"
prog fp16graph examples/fashion_cnn.onnx --batch 32 --precision fp16 || die "snc compile fp16graph failed"
BM="$OUT/data/bench/model.onnx"
for pr in fp32 bf16 fp16; do
  prog "bench-$pr" "$BM" --batch "$BENCH_B" --precision "$pr" || die "snc compile bench-$pr failed"
done
# The budget sweep: 100%, 50%, 25% of the liveness arena (h200). A budget no
# plan fits is an answer: snc's message goes to the table instead.
"$SNC" plan "$BM" --batch "$BENCH_B" --policy liveness --target cuda --json "$OUT/data/bench/liveness.json" \
  >"$LOGS/plan-liveness.log" 2>&1 || die "snc plan failed: see $LOGS/plan-liveness.log"
LIVE=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["arena_bytes"])' \
  "$OUT/data/bench/liveness.json")
for pct in 100 50 25; do
  budget=$(( LIVE * pct / 100 ))
  if ! prog "sweep-$pct" "$BM" --batch "$BENCH_B" --budget "$budget"; then
    grep -h "error" "$LOGS/compile-sweep-$pct.log" | tail -1 >"$OUT/progs/sweep-$pct.infeasible"
    [ -s "$OUT/progs/sweep-$pct.infeasible" ] || die "snc compile sweep-$pct failed"
  fi
done
# The safety checks (run-gpu.sh step 9): a model under every policy, auto at
# the tightest budget it plans for (snc names the smallest budget that fits
# when one is too small). safety_set PREFIX MODEL BATCH.
safety_set() {
  local pre=$1 model=$2 b=$3 pol fl
  for pol in none liveness recompute offload superneurons; do
    prog "$pre-$pol" "$model" --batch "$b" --policy "$pol" || die "snc compile $pre-$pol failed"
  done
  fl=$("$SNC" plan "$model" --batch "$b" --target cuda --policy auto --budget 1 2>&1 |
    sed -n 's/.*the smallest budget that fits is [^(]*(\([0-9]*\) bytes).*/\1/p' | head -1)
  [ -n "$fl" ] || die "snc plan did not name the smallest budget for $model"
  prog "$pre-auto" "$model" --batch "$b" --policy auto --budget "$fl" || die "snc compile $pre-auto failed"
}
safety_set safe examples/fashion_cnn.onnx 32
# The same for resnet18 64 px b8 ("safe18"), and the GPT example, T=64 b8
# ("sgpt": none, and auto at 50% of its liveness arena). SMALL=1: neither.
if [ "$SMALL" != 1 ]; then
  "$PY" tests/gpu/torchref.py onnx resnet18 64 "$OUT/data/safe18.onnx" --strip \
    >"$LOGS/export-safe18.log" 2>&1 || die "export of resnet18 failed: see $LOGS/export-safe18.log"
  safety_set safe18 "$OUT/data/safe18.onnx" 8
  GG="$OUT/data/grad-gpt/model.onnx"
  prog sgpt-none "$GG" --batch 8 --policy none --optimizer adamw || die "snc compile sgpt-none failed"
  GL=$("$SNC" plan "$GG" --batch 8 --target cuda --policy liveness --optimizer adamw --json "$LOGS/sgpt-live.json" \
    >/dev/null 2>&1 && "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["arena_bytes"])' "$LOGS/sgpt-live.json")
  [ -n "$GL" ] || die "snc plan of the GPT example failed"
  prog sgpt-auto50 "$GG" --batch 8 --policy auto --budget $(( GL / 2 )) --optimizer adamw ||
    die "snc compile sgpt-auto50 failed"
fi
# The deleted-wait check (run-gpu.sh section 13): the superneurons program's
# wait events (policy offload moves nothing of fashion_cnn on the h200
# profile; superneurons offloads 20.7 MiB a step), at most 10, spread evenly.
"$PY" - "$OUT/progs/safe-superneurons/plan.json" >"$OUT/progs/safe-superneurons/WAITS" <<'PYEOF' ||
import json, sys
evs = sorted({w for s in json.load(open(sys.argv[1]))["steps"] for w in s["waits"]})
pick = evs if len(evs) <= 10 else [evs[i * len(evs) // 10] for i in range(10)]
print(" ".join(str(e) for e in pick))
PYEOF
  die "cannot list the waits of safe-superneurons"
grep -q '[0-9]' "$OUT/progs/safe-superneurons/WAITS" || die "safe-superneurons' plan has no waits"
# GPT-2 124M (issue: GPT on the H200): make_gpt.py's model (12 layers, 12
# heads, 768 wide, T=1024, vocabulary 50304 = 50257 padded to a multiple of
# 128, tied head, GELU tanh), exported here without its weights (the causal
# masks stay: constants); B=8; fp32 (TF32) and bf16 under auto, and bf16 at
# the liveness plan and at 50% and 25% of its arena. Tokens: the fortunes
# text, byte-tokenized, in llm.c's .bin layout. SMALL=1: 2 layers, T=128.
if [ "$SMALL" = 1 ]; then GPT_L=2 GPT_T=128; else GPT_L=12 GPT_T=1024; fi
GPT_B=8
mkdir -p "$OUT/data/gpt"
cp examples/make_gpt.py examples/make_fashion_cnn.py examples/idx_io.py "$OUT/"
"$PY" examples/make_gpt.py -o "$OUT/data/gpt/model.onnx" --vocab 50304 --block "$GPT_T" --embd 768 \
  --heads 12 --layers "$GPT_L" --gelu tanh --batch "$GPT_B" >"$LOGS/export-gpt.log" 2>&1 &&
  "$PY" -c 'import sys; sys.path.insert(0, "tests/gpu"); import torchref; torchref.strip(sys.argv[1], "mask")' \
    "$OUT/data/gpt/model.onnx" >>"$LOGS/export-gpt.log" 2>&1 || die "GPT export failed: see $LOGS/export-gpt.log"
"$PY" - "$OUT/data/gpt/tokens.bin" <<'PYEOF' || die "cannot write the GPT tokens"
import os, struct, sys
src = "/usr/share/games/fortunes"
data = b""
for n in sorted(os.listdir(src)):
    p = os.path.join(src, n)
    if "." not in n and n != "ascii-art" and os.path.isfile(p):
        data += open(p, "rb").read()
data = data[:2_000_000]
hdr = [20240520, 1, len(data)] + [0] * 253
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *hdr))
    f.write(b"".join(struct.pack("<H", b) for b in data))
PYEOF
GM="$OUT/data/gpt/model.onnx"
prog gpt-fp32 "$GM" --batch "$GPT_B" --optimizer adamw || die "snc compile gpt-fp32 failed"
prog gpt-bf16 "$GM" --batch "$GPT_B" --optimizer adamw --precision bf16 || die "snc compile gpt-bf16 failed"
"$SNC" plan "$GM" --batch "$GPT_B" --optimizer adamw --precision bf16 --policy liveness --target cuda \
  --json "$OUT/data/gpt/liveness.json" >"$LOGS/plan-gpt.log" 2>&1 || die "snc plan gpt failed"
GLIVE=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["arena_bytes"])' "$OUT/data/gpt/liveness.json")
prog gpt-live "$GM" --batch "$GPT_B" --optimizer adamw --precision bf16 --policy liveness ||
  die "snc compile gpt-live failed"
for pct in 50 25; do
  if ! prog "gpt-$pct" "$GM" --batch "$GPT_B" --optimizer adamw --precision bf16 --budget $(( GLIVE * pct / 100 )); then
    grep -h "error" "$LOGS/compile-gpt-$pct.log" | tail -1 >"$OUT/progs/gpt-$pct.infeasible"
    [ -s "$OUT/progs/gpt-$pct.infeasible" ] || die "snc compile gpt-$pct failed"
  fi
done
echo "{\"layers\": $GPT_L, \"T\": $GPT_T, \"batch\": $GPT_B, \"liveness_arena_bytes\": $GLIVE," \
  "\"vocab\": 50304, \"embd\": 768, \"heads\": 12, \"gelu\": \"tanh\"}" >"$OUT/data/gpt/meta.json"
# The loss-tracking check (run-gpu.sh "track"): one fixed batch, the first
# GPT_B windows of GPT_T + 1 tokens of the stream.
"$PY" - "$OUT/data/gpt" "$GPT_B" "$GPT_T" <<'PYEOF' || die "cannot write the GPT's tracking batch"
import os, sys
import numpy as np
d, b, t = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tok = np.fromfile(os.path.join(d, "tokens.bin"), dtype="<u2", offset=1024).astype(np.int64)
w = np.stack([tok[i * (t + 1):(i + 1) * (t + 1)] for i in range(b)])
np.save(os.path.join(d, "track_x.npy"), w[:, :-1])
np.save(os.path.join(d, "track_y.npy"), w[:, 1:])
PYEOF

# max-batch (issue: the schedule is safe and its promises hold): the largest
# resnet50 224 px batch whose plan fits 20 GiB on the h200 profile, under
# auto and superneurons; each answer compiled, and one batch more refused.
# The host budget: 64 GiB, half the lent H200 machine's 128 GiB (the h200
# profile's default, 256 GiB, pinned 122 GiB there: the first try was killed).
HB=64GiB
for pol in auto superneurons; do
  mb=$("$SNC" max-batch "$BM" --budget 20GiB --host-budget $HB --device h200 --policy "$pol" 2>"$LOGS/maxbatch-$pol.log" |
    grep -Eo '[0-9]+' | head -1)
  [ -n "$mb" ] || die "snc max-batch --policy $pol gave no batch: see $LOGS/maxbatch-$pol.log"
  prog "maxb-$pol" "$BM" --batch "$mb" --budget 20GiB --host-budget $HB --policy "$pol" ||
    die "snc compile maxb-$pol failed"
  if "$SNC" plan "$BM" --batch $((mb + 1)) --budget 20GiB --host-budget $HB --policy "$pol" --target cuda \
       >/dev/null 2>&1; then
    die "max-batch said $mb under $pol, but batch $((mb + 1)) plans within 20 GiB (host $HB)"
  fi
  echo "$mb" >"$OUT/progs/maxb-$pol/BATCH"
done

cat >"$OUT/data/bench/meta.json" <<EOF
{"model": "$BENCH", "res": $BENCH_RES, "batch": $BENCH_B, "liveness_arena_bytes": $LIVE}
EOF
say "compiled $(ls -d "$OUT"/progs/*/ | wc -l) programs ($(( $(date +%s) - T0 )) s)"

# ---- 4. shared libraries the device lacks -------------------------------------------
# System libraries any Linux image has, and the CUDA libraries the device's
# driver and pip packages bring: everything else ldd names is copied.
provided() {
  case "$1" in
    linux-vdso.so.*|ld-linux*|libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*) return 0 ;;
    libstdc++.so.*|libgcc_s.so.*|libz.so.*) return 0 ;;
    libcuda.so.*|libcudart.so.*|libcudnn*.so.*|libcublas*.so.*|libnccl.so.*) return 0 ;;
  esac
  return 1
}
for f in "$OUT"/bin/* "$OUT"/progs/*/train; do
  ldd "$f" | awk '$2 == "=>" { print $1, $3 }' | while read -r soname path; do
    provided "$soname" && continue
    [ -e "$OUT/lib/$soname" ] || cp -L "$path" "$OUT/lib/$soname" || die "cannot copy $path"
  done
done
say "libraries: $(ls "$OUT/lib" | tr '\n' ' ')"

# ---- 5. scripts and the manifest ------------------------------------------------------
cp tests/gpu/run-gpu.sh tests/gpu/torchref.py "$OUT/"
cp tests/plan_check.py "$OUT/bin/"
chmod +x "$OUT/run-gpu.sh"
rm -rf "$LOGS"
echo "built from $(git rev-parse --short HEAD 2>/dev/null || echo ?)$(git diff --quiet 2>/dev/null || echo +changes)" \
  "on $(date -u '+%Y-%m-%d %H:%M UTC'), SMALL=$SMALL" >"$OUT/BUILT.txt"
( cd "$OUT" && find . -type f ! -name MANIFEST.txt | sort | while read -r f; do
    case "$f" in
      */train|./bin/snc*) kind=program ;; ./lib/*) kind=library ;;
      *.onnx|*.npy|*/meta.json|*/liveness.json) kind=input ;;
      */plan.txt|*/plan.json|*/params.bin|*.infeasible|*/COMMANDS.txt) kind=plan ;;
      *) kind=script ;;
    esac
    printf '%-8s %10d %s\n' "$kind" "$(stat -c %s "$f")" "$f"
  done ) >"$OUT/MANIFEST.txt"
SIZE=$(du -sb "$OUT" | cut -f1)
awk '{ s[$1] += $2; n[$1]++ } END { for (k in s) printf "  %-8s %3d files %8.1f MiB\n", k, n[k], s[k] / 1048576 }' \
  "$OUT/MANIFEST.txt" | sort
say "$OUT: $(awk -v s="$SIZE" 'BEGIN { printf "%.1f MiB", s / 1048576 }') ($(( $(date +%s) - T0 )) s)"
# ---- 6. the packed bundle: what travels ---------------------------------------------
# The programs share the runtime's device code and the plans are text, so xz
# packs the folder about 8 to 1: OUT.tar.xz (one folder, named as OUT) is what
# a device call carries and unpacks there (docs/gpu.md).
( cd "$(dirname "$OUT")" && tar cf - "$(basename "$OUT")" | xz -T2 -6 >"$OUT.tar.xz.tmp" ) &&
  mv "$OUT.tar.xz.tmp" "$OUT.tar.xz" || die "cannot pack $OUT.tar.xz"
PACKED=$(stat -c %s "$OUT.tar.xz")
say "$OUT.tar.xz: $(awk -v s="$PACKED" 'BEGIN { printf "%.1f MiB", s / 1048576 }') packed ($(( $(date +%s) - T0 )) s)"
[ "$PACKED" -le "$LIMIT" ] || die "the packed bundle is $PACKED bytes, over $LIMIT"
exit 0
