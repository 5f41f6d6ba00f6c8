#!/usr/bin/env bash
# gpu runner: nvidia-h200: `python -m bench accuracy` over the zoo and bench/torch/ on one GPU -> bench/results/gpu_h200/accuracy/, accuracy/
# On the GPU machine (device tool), from the project root, with .whl carried:
#   bash bench/gpu/run_zoo.sh
# Issue 11: the accuracy benchmark over the zoo on one GPU: Keras 3 on JAX (bench/zoo) and PyTorch
# (bench/torch), each case and its fixed twin in ROUNDS alternating rounds (PyTorch cases TORCH_ROUNDS),
# no new round started after BUDGET_S seconds (CASES: a comma list, default all). Results: $OUT/accuracy.md, accuracy.json, env.txt and
# gpu_zoo.tgz (every report and stdout), planted_runs.tgz (the round-0 planted run directories of
# input_python and host_to_device and host_to_device's twin, and host_launch's planted runs of every round,
# traces included); with FRESH_PAGES=N (pairs),
# fresh_pages.json: the host's fresh-page cost per byte (bench/accuracy/fresh_pages.py), first.
set -u
source bench/gpu/setup.sh /tmp/gpu_zoo
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
gpu_env "$OUT/env.txt"
cp "$OUT/env.txt" "$FINAL_OUT/"
if [ -n "${FRESH_PAGES:-}" ]; then
  python3 bench/accuracy/fresh_pages.py --pairs "$FRESH_PAGES" > "$FINAL_OUT/fresh_pages.json" 2>&1; cat "$FINAL_OUT/fresh_pages.json"
  python3 bench/accuracy/fresh_pages.py --pairs 2 --dtype uint8 >> "$FINAL_OUT/fresh_pages.json" 2>&1; tail -1 "$FINAL_OUT/fresh_pages.json"
fi
python3 bench/accuracy/run.py --out "$OUT/accuracy" ${CASES:+--cases "$CASES"} --rounds "${ROUNDS:-3}" --torch-rounds "${TORCH_ROUNDS:-1}" \
  --budget-s "${BUDGET_S:-380}" --timeout-s "${PROFILE_TIMEOUT_S:-120}" --table-to "$FINAL_OUT" --label "(1 x $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null || echo GPU), Keras 3 on JAX; PyTorch)" 2>&1 | cut -c1-400
keep=$(cd /tmp && ls -d gpu_zoo/accuracy/runs/{input_python_planted,host_to_device_planted,host_to_device_twin}_r0 \
  gpu_zoo/accuracy/runs/host_launch_planted_r* 2>/dev/null)  # host_launch: every round, to re-analyse its ranking
tar czf "$FINAL_OUT/gpu_zoo.tgz" -C /tmp --exclude=gpu_zoo/accuracy/runs gpu_zoo
[ -n "$keep" ] && tar czf "$FINAL_OUT/planted_runs.tgz" -C /tmp $keep
ls -la "$FINAL_OUT"
