#!/bin/sh
# build.sh — builds the compiler fuzzer (tests/fuzz/fuzz_model.c) with clang's
# libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer, and a seed
# corpus of small models.
#
#   tests/fuzz/build.sh [OUTDIR]       (default build/fuzz; run from the repo root)
#
# Writes OUTDIR/fuzz_model and OUTDIR/seeds/ (the shipped example, small
# ResNets, torch exports, and copies with initializers turned into declared
# inputs, so that seeds stay small and mutations reach the graph).
# Needs clang and libclang-rt-14-dev (configure.py --install-test-deps).
# Run: OUTDIR/fuzz_model -max_len=65536 OUTDIR/corpus OUTDIR/seeds
set -eu
out=${1:-build/fuzz}
mkdir -p "$out/gen" "$out/seeds"
protoc-c --c_out="$out/gen" --proto_path=schemas schemas/onnx.proto
srcs=$(ls compiler/*.c compiler/*/*.c | grep -v '^compiler/main.c$')
# -O1: fast enough, and the sanitizers' reports stay readable.
# -fno-sanitize-recover: a UBSan finding is a crash the fuzzer keeps.
${CLANG:-clang} -std=c11 -D_GNU_SOURCE -DSNC_FUZZ -g -O1 \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -I"$out/gen" -Wall -Wno-unused-parameter \
  -o "$out/fuzz_model.new" tests/fuzz/fuzz_model.c $srcs "$out/gen/onnx.pb-c.c" \
  -lprotobuf-c -lz -lm
# A rename: a fuzzer running in -fork mode picks up the new binary safely.
mv -f "$out/fuzz_model.new" "$out/fuzz_model"
if [ "${SNC_FUZZ_NO_SEEDS:-}" = "" ]; then
  /usr/bin/python3 tests/fuzz/make_seeds.py "$out/seeds"
fi
echo "built $out/fuzz_model; seeds in $out/seeds"
