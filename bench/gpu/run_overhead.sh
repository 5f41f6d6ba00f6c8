#!/usr/bin/env bash
# gpu runner: nvidia-h200: `python -m bench step_hook`, `overhead` (convnet, tiny) and, SAMPLER=1, `sampler` with real NVML -> bench/results/gpu_h200/overhead_pieces/, gpu_h200/sampler.md
# On the GPU machine (device tool, nvidia-h200), from the project root, with .whl carried:
#   bash bench/gpu/run_overhead.sh            (257 s on 2026-12-01: CONVNET_S + TINY_S + ~85 s of set-up and compiles)
# What capture costs the training thread per call (python -m bench step_hook), then capture overhead in one
# Keras-on-JAX process, piece by piece, in short sync-bounded blocks (python -m bench overhead) for a
# convnet and a tiny model. SAMPLER=1 adds the sampler's CPU benchmark (about 80 s). Results go
# straight into $OUT (at most 8 files come back: the .md and .json of each model, the log, the hook's).
set -u
source bench/gpu/setup.sh /tmp/overhead
R=$FINAL_OUT
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0
ARMS=${ARMS:-steady,steady,full,callback,annotate,sampler}
if [ "${SAMPLER:-0}" = 1 ]; then
  timeout 85 python3 -m bench sampler --seconds ${SAMPLER_S:-3} --rounds 3 --gpus 1,2,4,8 \
    --out "$R/sampler_cpu.md" > "$R/log.txt" 2>&1
fi
timeout 40 python3 -m bench step_hook --seconds ${HOOK_S:-0.4} --rounds 3 > "$R/step_hook.txt" 2>&1
cat "$R/step_hook.txt"
timeout $(( ${CONVNET_S:-100} + 60 )) python3 -m bench overhead --kind convnet --seconds ${CONVNET_S:-100} \
  --block-steps ${BLOCK:-25} --steps 500 --batch 256 --arms "$ARMS" \
  --label "(1 x H200, Keras 3 on JAX, convnet)" --out "$R/capture_overhead_blocks_convnet.md" >> "$R/log.txt" 2>&1
timeout $(( ${TINY_S:-70} + 60 )) python3 -m bench overhead --kind tiny --seconds ${TINY_S:-70} \
  --block-steps ${BLOCK:-25} --steps 500 --batch 256 --arms "$ARMS" \
  --label "(1 x H200, Keras 3 on JAX, tiny)" --out "$R/capture_overhead_blocks_tiny.md" >> "$R/log.txt" 2>&1
grep -h "^| \|Per-comparison\|^Model" "$R"/capture_overhead_blocks_*.md
tail -n 5 "$R/log.txt"
