#!/usr/bin/env bash
# On the GPU machine (device tool, nvidia-h200), from the project root, with .whl carried (Keras wheels,
# as for the other GPU scripts; see bench/README.md):
#   bash bench/gpu/run_clock.sh
# Issue 27: bench/clock/run.py on one H200: the public scripts of bench/clock/manifest.toml that run
# there (Keras 3 on JAX, PyTorch; the TensorFlow-only ones are listed as not run, the torchvision ones
# run only if torchvision imports), each under `scaldiag profile`, against the script's own clock.
# Budget: the runner is stopped at 510 s whatever happens (each script at 100 s, SIGINT); the table is
# rewritten after every script, so a stop keeps what was done. Results: $OUT/gpu_<date>.md and .json
# (copy them to bench/results/clock/), $OUT/clock_runs.tgz (stdout with arrival times, stderr, run
# directories without traces).
set -u
source bench/gpu/setup.sh /tmp/gpu_clock
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0 CUDA_DEVICE_ORDER=PCI_BUS_ID KERAS_BACKEND=jax
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv
  nproc
  python3 -c "import jax, keras, torch; print('jax', jax.__version__, 'keras', keras.__version__, 'torch', torch.__version__)"
  python3 -c "import torchvision; print('torchvision', torchvision.__version__)" || echo "no torchvision"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout -s INT -k 20 "${CLOCK_BUDGET_S:-510}" python3 bench/clock/run.py --machine gpu --timeout 100 \
  --machine-desc "one NVIDIA H200 (device tool nvidia-h200), Keras 3 on JAX, PyTorch; $(nproc) CPUs" \
  --out-dir "$OUT" --keep /tmp/gpu_clock/work
echo "runner exit $?"
cp "$OUT"/gpu_*.md "$OUT"/gpu_*.json "$OUT/env.txt" "$FINAL_OUT"/ 2>/dev/null
tar czf "$FINAL_OUT/clock_runs.tgz" -C /tmp/gpu_clock/work --exclude='*.bin' --exclude='*.pt' --exclude='*.pb' \
  --exclude='*.json.gz' --exclude='data' --exclude='out' --exclude='trace' . 2>/dev/null
ls -la "$FINAL_OUT"
