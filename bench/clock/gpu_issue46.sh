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
# Results in $OUT: issue46_gpu_<date>_<set>.md/.json (copy them to bench/results/clock/; <set>_plain for
# a plain call), env.txt, issue46_runs.tgz (each run's stdout with arrival
# times, stderr, report.json).
# Only some entries: ISSUE46_ONLY=NAME,NAME, or ISSUE46_SET=a | b (two calls of about 5-7 minutes each):
#   ISSUE46_SET=a bash bench/clock/gpu_issue46.sh   # JAX VAE (epoch in one fori_loop), Keras custom layers,
#                                                   # JAX ADVI, Flax cached_partial, keras-io autoencoder
#   ISSUE46_SET=b bash bench/clock/gpu_issue46.sh   # minGPT adder and chargpt, Fabric language model
# (The CPU-only entries: the TensorFlow keras-io ports, the GAN (it never moves to a GPU), Flax FSDP
# (an 8-device mesh) and demo_jax_distributed are listed as not run there.)
set -u
case "${ISSUE46_SET:-}" in
  a) ISSUE46_ONLY="jax_mnist_vae_fori,keras_custom_layer_agnostic,jax_advi,flax_cached_partial,kio3_autoencoder_two_fits" ;;
  b) ISSUE46_ONLY="mingpt_adder,mingpt_chargpt,fabric_language_model" ;;
  "") ;;
  *) echo "unknown ISSUE46_SET=$ISSUE46_SET"; exit 2 ;;
esac
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
TAG=${ISSUE46_SET:-all}
[ "${ISSUE46_PLAIN:-0}" = "1" ] && TAG="${TAG}_plain"
timeout -s INT -k 20 "$BUDGET" python3 bench/clock/issue46.py "${PLAIN_ARGS[@]}" --machine gpu --timeout 150 \
  "${ONLY_ARGS[@]}" --tag "$TAG" --machine-desc "$DESC" --out-dir "$OUT" --keep /tmp/gpu_clock46/work
echo "runner exit $?"
cp "$OUT"/issue46_gpu_*.md "$OUT"/issue46_gpu_*.json "$OUT/env.txt" "$FINAL_OUT"/ 2>/dev/null
(cd /tmp/gpu_clock46/work && tar czf "$FINAL_OUT/issue46_runs.tgz" ./*/stdout_times.jsonl ./*/stderr.txt \
  ./*/report.json 2>/dev/null)
ls -la "$FINAL_OUT"
