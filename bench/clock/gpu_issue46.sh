#!/usr/bin/env bash
# Issue 46's validation set on the GPU machine (device tool, one GPU; .whl carried with the Keras
# wheels as for bench/gpu/run_clock.sh; see bench/gpu/setup.sh), from the project root:
#   bash bench/clock/gpu_issue46.sh
# Runs bench/clock/issue46.py --machine gpu: the manifest entries with set = "issue46" that list
# "gpu" (Keras 3 on JAX, PyTorch, Lightning Fabric, JAX; the TensorFlow-only ones are listed as not
# run), each under `scaldiag profile`, every clock each prints against scaldiag's figure of that
# scope, with the report's own reading (clock.printed) where this scaldiag writes it.
# ISSUE46_PLAIN=1 runs the same scripts plain instead (`python SCRIPT ARGS`, no scaldiag: which
# clocks a plain run prints; a second call). Budget: everything stops at ISSUE46_BUDGET_S (default
# 540 s) whatever happens; each script at 150 s (SIGINT); the table is rewritten after every script.
# Results in $OUT: issue46_gpu_<date>.md/.json (copy them to bench/results/clock/), the plain run's
# issue46_gpu_<date>_plain.md/.json, env.txt, issue46_runs.tgz (each run's stdout with arrival
# times, stderr, report.json).
# Only some entries: ISSUE46_ONLY=NAME,NAME.
set -u
source bench/gpu/setup.sh /tmp/gpu_clock46
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0 CUDA_DEVICE_ORDER=PCI_BUS_ID KERAS_BACKEND=jax
gpu_env "$OUT/env.txt"
python3 -c "import lightning, tqdm; print('lightning', lightning.__version__, 'tqdm', tqdm.__version__)" >> "$OUT/env.txt" 2>&1
cat /proc/loadavg >> "$OUT/env.txt"
cat "$OUT/env.txt"
ONLY_ARGS=()
[ -n "${ISSUE46_ONLY:-}" ] && ONLY_ARGS=(--only "$ISSUE46_ONLY")
DESC="one $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null || echo 'GPU (nvidia-smi failed)') (device tool), Keras 3 on JAX, PyTorch; $(nproc) CPUs"
BUDGET=${ISSUE46_BUDGET_S:-540}
PLAIN_ARGS=()
[ "${ISSUE46_PLAIN:-0}" = "1" ] && PLAIN_ARGS=(--plain)
timeout -s INT -k 20 "$BUDGET" python3 bench/clock/issue46.py "${PLAIN_ARGS[@]}" --machine gpu --timeout 150 \
  "${ONLY_ARGS[@]}" --machine-desc "$DESC" --out-dir "$OUT" --keep /tmp/gpu_clock46/work
echo "runner exit $?"
cp "$OUT"/issue46_gpu_*.md "$OUT"/issue46_gpu_*.json "$OUT/env.txt" "$FINAL_OUT"/ 2>/dev/null
(cd /tmp/gpu_clock46/work && tar czf "$FINAL_OUT/issue46_runs.tgz" ./*/stdout_times.jsonl ./*/stderr.txt \
  ./*/report.json 2>/dev/null)
ls -la "$FINAL_OUT"
