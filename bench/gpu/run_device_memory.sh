#!/usr/bin/env bash
# gpu runner: nvidia-h200 or nvidia-h100-x1: the framework allocators' peaks a profiled run records (torch, JAX) against NVML's, and the batch x4 statement made from them (issue 35) -> bench/results/gpu_h200/
# On the GPU machine (device tool, one GPU), from the project root, with .whl carried:
#   bash bench/gpu/run_device_memory.sh
# Issue 35: the framework allocators' peaks that a profiled run records (training.json's
# device_memory: torch.cuda.max_memory_allocated, JAX's memory_stats) against NVML's used memory,
# and the batch x4 statement made from them (bench/gpu/check_device_memory.py). Two short runs:
# bench/torch/healthy.py (PyTorch) and examples/train_cnn.py (Keras 3 on JAX). Result:
# $OUT/device_memory.txt (copy it into bench/results/gpu_h200/device_memory.md).
set -u
ROOT=$PWD
source bench/gpu/setup.sh /tmp/mem
cd /tmp/mem
timeout 60 python3 -m scaldiag profile -q --out /tmp/mem/runs "$ROOT/bench/torch/healthy.py" -- --steps 60 > torch.txt 2>&1
KERAS_BACKEND=jax timeout 80 python3 -m scaldiag profile -q --out /tmp/mem/runs "$ROOT/examples/train_cnn.py" -- --steps 60 > jax.txt 2>&1
cd "$ROOT"
python3 bench/gpu/check_device_memory.py $(find /tmp/mem/runs -name training.json -printf '%h\n') > "$FINAL_OUT/device_memory.txt" 2>&1
echo "exit $?" >> "$FINAL_OUT/device_memory.txt"
cat "$FINAL_OUT/device_memory.txt"
