#!/bin/sh
# Conv kernel micro-benchmark: ours (bench/kernels.c) and PyTorch's, 2 threads.
# Usage: sh bench/kernels.sh [BATCH]   (after ninja; run from the repository root)
set -e
gcc -std=c11 -O3 -fopenmp -mavx2 -mfma -Iruntime bench/kernels.c build/libsnrt_cpu.a \
    -lopenblas -lm -o build/bench_kernels
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2
echo "== snrt (cpu) =="
./build/bench_kernels "$@"
echo "== PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') =="
/usr/bin/python3 -c 'import torch; torch.set_num_threads(2); import runpy, sys; sys.argv=["x"]+sys.argv[1:]; runpy.run_path("bench/kernels_torch.py", run_name="__main__")' "$@"
