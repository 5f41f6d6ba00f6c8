#!/usr/bin/env bash
# gpu runner: nvidia-h100-x1 or nvidia-h200 (one GPU, 9 minutes): capture's cost outside the trace window on three public scripts' own clocks, alternating plain/captured pairs (issue 50) -> bench/results/gpu_h200/capture_cost/
# On the GPU machine (device tool, one GPU: H100 or H200), from the project root, with .whl carried:
#   bash bench/gpu/run_capture_cost.sh
# Issue 50: capture's cost outside the trace window, on the script's own clock, at most 1%:
# alternating plain/captured pairs of three public scripts stored unmodified under
# bench/clock/scripts (Keras 3 on JAX: keras-team/keras examples/demo_functional.py; PyTorch eager:
# pytorch/examples gat/main.py; torch.compile: karpathy/nanoGPT train.py --compile=True), each
# script's own printed clock read by scaldiag's printed-clock readers on both sides, the traced
# window's readings left out by the record's marks (bench/gpu/capture_cost.py says how).
# Time: the whole runner fits 9 minutes: the driver stops starting rounds when one more would pass
# CAPTURE_COST_BUDGET_S (default 460 s from its start) by the last round's time, and is stopped at
# that plus 45 s; the table is rewritten after every round, so a cut run keeps its finished pairs.
# Pairs: CAPTURE_COST_PAIRS (default 5). Setup (the wheels, the C parts) takes 30-40 s before it.
# Results in $OUT: capture_cost.md (the table, with the card), capture_cost.json (every reading),
# env.txt, logs/ (each run's stderr or output).
# CAPTURE_COST_DRY=1: the same on this CPU machine with .venv and tiny sizes (no GPU claims).
set -u
ROOT=$PWD
BUDGET=${CAPTURE_COST_BUDGET_S:-460}
PAIRS=${CAPTURE_COST_PAIRS:-5}
if [ "${CAPTURE_COST_DRY:-0}" = "1" ]; then
  FINAL_OUT=${OUT:-/tmp/capture_cost_dry/out}
  PY=$ROOT/.venv/bin/python
  MACHINE=(--machine cpu --tiny)
  export CAPTURE_COST_CARD="none (dry run on the CPU)"
  mkdir -p "$FINAL_OUT"
else
  source bench/gpu/setup.sh /tmp/gpu_capture_cost   # FINAL_OUT=$OUT; OUT=/tmp/gpu_capture_cost
  PY=python3
  MACHINE=(--machine gpu)
  export CUDA_VISIBLE_DEVICES=0
  export CAPTURE_COST_CARD=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader -i 0 2>/dev/null || echo "nvidia-smi failed")
  gpu_env "$FINAL_OUT/env.txt"
  cat "$FINAL_OUT/env.txt"
fi
export NCCL_NVLS_ENABLE=0
WORK=/tmp/capture_cost_work
timeout -s INT -k 15 $(( BUDGET + 45 )) "$PY" bench/gpu/capture_cost.py --out "$FINAL_OUT" \
  --pairs "$PAIRS" --budget-s "$BUDGET" --work "$WORK" "${MACHINE[@]}"
echo "capture_cost.py exit $?"
mkdir -p "$FINAL_OUT/logs"
cp "$WORK"/logs/* "$FINAL_OUT/logs/" 2>/dev/null
# the last captured run of each script: its record's marks and training.json, for the window
for d in "$WORK"/runs/*; do
  [ -d "$d" ] || continue
  mkdir -p "$FINAL_OUT/records/$(basename "$d")"
  cp "$d"/marks.jsonl "$d"/training.json "$d"/run.json "$FINAL_OUT/records/$(basename "$d")/" 2>/dev/null
done
ls -la "$FINAL_OUT"
