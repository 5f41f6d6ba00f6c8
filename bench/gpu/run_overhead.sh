#!/usr/bin/env bash
# On the GPU machine (device tool, nvidia-h200), from the project root, with .whl carried:
#   bash bench/gpu/run_overhead.sh            (about 150 s; ATTRIBUTE=1 adds about 70 s)
# The sampler benchmark with the real NVML (1 real GPU; 2, 4, 8 by reading it again), the step hook's
# cost per call, then capture overhead in one Keras-on-JAX process, alternating epochs, for a convnet
# and a tiny model; with ATTRIBUTE=1 also the convnet with the hooks only and with the sampler only
# (tarred: at most 8 files come back). Results go straight into $OUT.
set -u
source bench/gpu/setup.sh /tmp/overhead
R=$FINAL_OUT
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0
timeout 85 python3 bench/bench_sampler.py --seconds ${SAMPLER_S:-3} --rounds 3 --gpus 1,2,4,8 \
  --out "$R/sampler_cpu.md" > "$R/log.txt" 2>&1
timeout 30 python3 bench/bench_step_hook.py > "$R/step_hook.txt" 2>&1
timeout 75 python3 bench/capture_overhead_blocks.py --kind convnet --blocks ${BLOCKS:-120} --steps 100 --batch 256 \
  --label "(1 x H200, Keras 3 on JAX, convnet)" --out "$R/capture_overhead_convnet.md" >> "$R/log.txt" 2>&1
timeout 60 python3 bench/capture_overhead_blocks.py --kind tiny --blocks ${BLOCKS:-120} --steps 200 --batch 256 \
  --label "(1 x H200, Keras 3 on JAX, tiny)" --out "$R/capture_overhead_tiny.md" >> "$R/log.txt" 2>&1
if [ "${ATTRIBUTE:-0}" = 1 ]; then
  mkdir -p /tmp/attribute
  for part in no-sampler no-hooks; do
    timeout 75 python3 bench/capture_overhead_blocks.py --kind convnet --blocks ${BLOCKS:-120} --steps 100 --batch 256 \
      --$part --label "(1 x H200, Keras 3 on JAX, convnet, --$part)" --out "/tmp/attribute/convnet_$part.md" >> "$R/log.txt" 2>&1
  done
  tar czf "$R/attribute.tgz" -C /tmp attribute
fi
cat "$R/step_hook.txt"
grep -h "Time ratio\|Target\|Line through\|CPU ratio" "$R"/*.md /tmp/attribute/*.md 2>/dev/null
