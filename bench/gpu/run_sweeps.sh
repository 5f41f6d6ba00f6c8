#!/usr/bin/env bash
# gpu runner: nvidia-h200-x2: sweeps of 1 and 2 GPUs on three variants of examples/train_cnn.py -> bench/results/gpu_h200x2/sweeps/
# On the GPU machine (nvidia-h200-x2), from the project root, with .whl carried:
#   bash bench/gpu/run_sweeps.sh
# Sweeps of 1 and 2 GPUs on three variants of examples/train_cnn.py with different
# bottlenecks (weak scaling: per-replica batch fixed). Results in $OUT/gpu_sweeps.tgz.
set -u
source bench/gpu/setup.sh /tmp/gpu_sweeps
run() {  # name, steps, script args...
  name=$1; steps=$2; shift 2
  python3 -m scaldiag profile --gpus 1,2 --out "$OUT/runs_$name" --json "$OUT/sweep_$name.json" \
    examples/train_cnn.py -- --steps "$steps" --distribute "$@" > "$OUT/sweep_$name.txt" 2>&1
  echo "$name exit $?"; grep -A30 "^Scaling" "$OUT/sweep_$name.txt" | grep -v "^│ *│" | head -40
}
run hostbound 300 --per-replica-batch 256
run bigbatch 200 --per-replica-batch 4096
run slowinput 200 --per-replica-batch 256 --slow-input
tar czf "$FINAL_OUT/gpu_sweeps.tgz" -C /tmp gpu_sweeps
