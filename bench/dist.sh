#!/bin/sh
# Data-parallel weak scaling on the CPU: examples/fashion_cnn.onnx compiled
# with --dist mpi at a fixed per-rank batch, run as 1 rank and as 2 ranks (1
# thread each), and for comparison one process at the 2-rank global batch
# with 2 threads; synthetic data. The numbers are the program's own --metrics
# (per step, the first 3 steps left out), REPS runs of each, interleaved;
# the table gives the median and, in brackets, the fastest run's step time.
# Usage: sh bench/dist.sh [BATCH] [STEPS] [BUCKET] [REPS]   (after ninja; from the repository root)
set -e
BATCH=${1:-64}
STEPS=${2:-100}
BUCKET=${3:-256KiB}
REPS=${4:-5}
OUT=build/bench_dist
MPIRUN="mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
build/snc compile examples/fashion_cnn.onnx -o $OUT --batch $BATCH --dist mpi --bucket $BUCKET \
    --optimizer sgd > /dev/null
ninja -C $OUT > /dev/null
build/snc compile examples/fashion_cnn.onnx -o $OUT/two --batch $((2 * BATCH)) --dist mpi \
    --bucket $BUCKET --optimizer sgd > /dev/null
ninja -C $OUT/two > /dev/null
echo "fashion_cnn, per-rank batch $BATCH, $STEPS steps, buckets of >= $BUCKET ($(grep -o 'buckets = [0-9]*' $OUT/train.c)), $REPS runs each"
echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
rm -f $OUT/m_*.json
i=0
while [ $i -lt $REPS ]; do
  $OUT/train --data synthetic --steps $STEPS --threads 1 --log-every 100000 --metrics $OUT/m_1_$i.json > /dev/null
  $MPIRUN -np 2 $OUT/train --data synthetic --steps $STEPS --threads 1 --log-every 100000 --metrics $OUT/m_2_$i.json > /dev/null
  $OUT/two/train --data synthetic --steps $STEPS --threads 2 --log-every 100000 --metrics $OUT/m_t_$i.json > /dev/null
  i=$((i + 1))
done
/usr/bin/python3 - $OUT <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
print("| run | global batch | step ms | img/s | all-reduce ms/step | exposed ms | overlapped ms | loss exchange ms |")
print("|---|---|---|---|---|---|---|---|")
for key, name in [("1", "1 rank x 1 thread"), ("2", "2 ranks x 1 thread"), ("t", "1 process x 2 threads")]:
    ms = [json.load(open(f)) for f in sorted(glob.glob("%s/m_%s_*.json" % (out, key)))]
    med = lambda k: statistics.median(m[k] for m in ms)
    print("| %s | %d | %.1f (%.1f) | %.0f | %.2f | %.2f | %.2f | %.2f |" % (
        name, ms[0]["global_batch"], 1000 * med("step_s"), 1000 * min(m["step_s"] for m in ms),
        med("images_per_s"), 1000 * med("comm_s"), 1000 * med("comm_exposed_s"),
        1000 * med("comm_overlapped_s"), 1000 * med("sync_s")))
PY
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
