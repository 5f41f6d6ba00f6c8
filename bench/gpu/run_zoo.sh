#!/usr/bin/env bash
# On the GPU machine (device tool), from the project root, with .whl carried:
#   bash bench/gpu/run_zoo.sh
# Issue 11: the accuracy benchmark over the zoo on one GPU (Keras 3 on JAX); issue 12: the NVML
# sampler's CPU use with the real NVML. Results in $OUT/gpu_zoo.tgz and $OUT/accuracy.md.
set -u
source bench/gpu/setup.sh /tmp/gpu_zoo
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
python3 bench/accuracy/run.py --out "$OUT/accuracy" --label "(1 x H200, Keras 3 on JAX)" 2>&1 | tail -n 12
python3 bench/bench_sampler.py --seconds 5 --rounds 3 --out "$OUT/sampler_cpu.md" > "$OUT/sampler.txt" 2>&1
tail -n 12 "$OUT/sampler_cpu.md"
cp "$OUT/accuracy/accuracy.md" "$FINAL_OUT/accuracy.md"
cp "$OUT/sampler_cpu.md" "$FINAL_OUT/sampler_cpu.md"
tar czf "$FINAL_OUT/gpu_zoo.tgz" -C /tmp gpu_zoo
