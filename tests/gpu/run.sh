#!/usr/bin/env bash
# tests/gpu/run.sh — the GPU checks on a machine that can also build snc
# (Debian's -dev packages, nvcc, cuDNN): builds the bundle here, then runs it.
# A machine that cannot build (a lent GPU machine, a CI runner with only
# PyTorch) runs a bundle built elsewhere: docs/gpu.md.
#
#   tests/gpu/run.sh      logs and the table under $OUT (default gpu-bundle/out)
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
"$ROOT/tests/gpu/bundle.sh" "$ROOT/gpu-bundle" || exit 1
exec "$ROOT/gpu-bundle/run-gpu.sh"
