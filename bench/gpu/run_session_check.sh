#!/usr/bin/env bash
# On the GPU machine (device tool, nvidia-h200), from the project root, with .whl carried:
#   bash bench/gpu/run_session_check.sh        (about 5 minutes)
# After the step rows were buffered (0.1 s) and the input-free step added: capture overhead in one
# process and the sampler with the real NVML (run_overhead.sh), then the zoo's healthy script under
# scaldiag profile with the input-free measurement (a false alarm check).
set -u
SAMPLER_S=2 BLOCKS=100 bash bench/gpu/run_overhead.sh
source bench/gpu/setup.sh /tmp/session_check
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0
timeout 120 python3 -m scaldiag profile --json "$FINAL_OUT/healthy.json" bench/zoo/healthy.py > "$FINAL_OUT/healthy.txt" 2>&1
grep -E "input cost|^╭─ SD|Findings|stopwatch|zoo:" "$FINAL_OUT/healthy.txt" | head -20
