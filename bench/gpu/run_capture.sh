#!/usr/bin/env bash
# gpu runner: nvidia-h200-x2: NVML read for real and the example profiled on 1 and 2 GPUs -> bench/results/gpu_h200x2/
# On the GPU machine (device tool, nvidia-h200-x2), from the project root, with .whl carried:
#   bash bench/gpu/run_capture.sh
# Writes everything into $OUT/gpu_results.tgz (the device tool brings back only a few files).
set -u
source bench/gpu/setup.sh /tmp/gpu_results
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
nvidia-smi --query-gpu=index,name,uuid,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv > "$OUT/gpus.csv" 2>&1
CUDA_VISIBLE_DEVICES=0 python3 -m scaldiag profile --out "$OUT/runs1" --json "$OUT/profile_1gpu.json" \
  examples/train_cnn.py -- --steps 300 --batch 256 > "$OUT/profile_1gpu.txt" 2>&1
echo "exit $?" >> "$OUT/profile_1gpu.txt"
CUDA_VISIBLE_DEVICES=0,1 python3 -m scaldiag profile --out "$OUT/runs2" --json "$OUT/profile_2gpu.json" \
  examples/train_cnn.py -- --steps 300 --batch 512 --distribute > "$OUT/profile_2gpu.txt" 2>&1
echo "exit $?" >> "$OUT/profile_2gpu.txt"
python3 bench/gpu/check_nvml_real.py "$OUT"/runs1/* "$OUT"/runs2/* > "$OUT/check_nvml_real.txt" 2>&1
echo "exit $?" >> "$OUT/check_nvml_real.txt"
tail -n 5 "$OUT/check_nvml_real.txt"
# NVML's call costs (the probe part, bench/gpu/nvml_probe.py, results in bench/results/gpu_h200x2/capture.json):
# git show 2996455:bench/gpu/run_capture.sh and :bench/gpu/nvml_probe.py.
# Capture overhead is measured inside one process now (bash bench/gpu/run_overhead.sh: python -m bench
# overhead); the whole-process rounds (bench/bench_overhead.py: git show 227e679:bench/bench_overhead.py) and
# their results (git show 8678b07:bench/results/gpu_h200x2/overhead_gpu-jax-h200.md) are in git.
tar czf "$FINAL_OUT/gpu_results.tgz" -C /tmp gpu_results
