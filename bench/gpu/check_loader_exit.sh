#!/usr/bin/env bash
# On the GPU machine (device tool), from the project root, with .whl carried:
#   bash bench/gpu/check_loader_exit.sh
# On 2026-12-06 (H100) bench/torch/input_bound.py's fixed twin (persistent DataLoader workers,
# pin_memory) spent 41 s (8 workers) and 76 s (15 workers) in "teardown" under `scaldiag profile`,
# about 5 s a worker (the DataLoader's per-worker join timeout); on the CPU (8 workers, no pinning)
# 1.4 s. This times the same script's exit plainly and under profile (the input ceiling iterates
# the script's persistent iterator after training and leaves it mid-pass: a suspect). Results:
# $OUT/loader_exit.txt.
set -u
source bench/gpu/setup.sh /tmp/loader_exit
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
args="--steps 200 --fixed --workers 15"
seconds() { python3 -c "import time; print(f'{time.time():.3f}')"; }
{
  t0=$(seconds); out=$(timeout 300 python3 bench/torch/input_bound.py $args 2>&1); rc=$?; t1=$(seconds)
  echo "plain: exit $rc, wall $(python3 -c "print(f'{$t1 - $t0:.1f}')") s; $(echo "$out" | tail -1)"
  t0=$(seconds)
  timeout 300 python3 -m scaldiag profile -q --out /tmp/loader_exit/runs bench/torch/input_bound.py -- $args > /tmp/loader_exit/profile.txt 2>&1
  rc=$?; t1=$(seconds)
  echo "profile: exit $rc, wall $(python3 -c "print(f'{$t1 - $t0:.1f}')") s"
  grep -E "teardown|input-ceiling|script before" /tmp/loader_exit/profile.txt
} 2>&1 | tee "$FINAL_OUT/loader_exit.txt"
