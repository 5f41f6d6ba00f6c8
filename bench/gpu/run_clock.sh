#!/usr/bin/env bash
# gpu runner: nvidia-h200: `python -m bench clock` on the GPU: the public scripts against their own clocks -> bench/results/clock/
# On the GPU machine (device tool, one GPU: an H200 or an H100; the table names the card nvidia-smi reads), from the project root, with .whl carried (Keras wheels,
# as for the other GPU scripts; see bench/README.md):
#   bash bench/gpu/run_clock.sh
# Issue 27: bench/clock/run.py on one H200: the public scripts of bench/clock/manifest.toml that run
# there (Keras 3 on JAX, PyTorch; the TensorFlow-only ones are listed as not run, the torchvision ones
# run only if torchvision imports), each under `scaldiag profile`, against the script's own clock.
# Budget: the runner is stopped at 510 s whatever happens (each script at 100 s, SIGINT); the table is
# rewritten after every script, so a stop keeps what was done. Results: $OUT/gpu_<date>.md and .json
# (copy them to bench/results/clock/), $OUT/clock_runs.tgz (stdout with arrival times, stderr, run
# directories without traces).
#
# Only some entries (each call stays inside the device's 10-minute limit): CLOCK_ONLY=NAME,NAME, or
# CLOCK_SET=new_loops_a | new_loops_b (issue 32's loop shapes, in two calls of about 7 minutes each):
#   CLOCK_SET=new_loops_a bash bench/gpu/run_clock.sh   # Lightning x2, addition_rnn
#   CLOCK_SET=new_loops_b bash bench/gpu/run_clock.sh   # gat, vae, JAX x3
# The table is then $OUT/gpu_<date>_<names>.md/.json (add it to bench/results/clock/clock.md as a row and section, its .json as a key of clock.json).
set -u
case "${CLOCK_SET:-}" in
  new_loops_a) CLOCK_ONLY="lightning_transformer,lightning_gan,kio3_addition_rnn" ;;
  new_loops_b) CLOCK_ONLY="gat_cora,vae_workers,jax_mnist_fromscratch,jax_mnist_stax,jax_spmd_mnist" ;;
  new_loops_c) CLOCK_ONLY="hf_clm_accum,hf_clm_eval,lightning_autoencoder_cli" ;;  # transformers Trainer x2, LightningCLI (about 5 min)
  new_loops_d) CLOCK_ONLY="flax_train_state,flax_nnx_sharded,flax_vae" ;;  # Flax + optax (about 2 min)
  new_loops_e) CLOCK_ONLY="lightning_template_ptl" ;;  # Lightning-AI multinode template, 2 epochs + test (about 1 min)
  "") ;;
  *) echo "unknown CLOCK_SET=$CLOCK_SET"; exit 2 ;;
esac
ONLY_ARGS=()
[ -n "${CLOCK_ONLY:-}" ] && ONLY_ARGS=(--only "$CLOCK_ONLY")
source bench/gpu/setup.sh /tmp/gpu_clock
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0 CUDA_DEVICE_ORDER=PCI_BUS_ID KERAS_BACKEND=jax
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv
  nproc
  python3 -c "import jax, keras, torch; print('jax', jax.__version__, 'keras', keras.__version__, 'torch', torch.__version__)"
  python3 -c "import torchvision; print('torchvision', torchvision.__version__)" || echo "no torchvision"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout -s INT -k 20 "${CLOCK_BUDGET_S:-510}" python3 bench/clock/run.py --machine gpu --timeout 100 "${ONLY_ARGS[@]}" \
  --machine-desc "one $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null || echo 'GPU (nvidia-smi failed)') (device tool), Keras 3 on JAX, PyTorch; $(nproc) CPUs" \
  --out-dir "$OUT" --keep /tmp/gpu_clock/work
echo "runner exit $?"
cp "$OUT"/gpu_*.md "$OUT"/gpu_*.json "$OUT/env.txt" "$FINAL_OUT"/ 2>/dev/null
tar czf "$FINAL_OUT/clock_runs.tgz" -C /tmp/gpu_clock/work --exclude='*.bin' --exclude='*.pt' --exclude='*.pb' \
  --exclude='*.json.gz' --exclude='data' --exclude='out' --exclude='trace' . 2>/dev/null
# What a script printed, alone (the tarball of run directories can pass what comes back from $OUT).
(cd /tmp/gpu_clock/work && tar czf "$FINAL_OUT/clock_stdout.tgz" ./*/stdout_times.jsonl ./*/stderr.txt 2>/dev/null)
if [ "$(stat -c %s "$FINAL_OUT/clock_runs.tgz" 2>/dev/null || echo 0)" -gt 8000000 ]; then
  rm -f "$FINAL_OUT/clock_runs.tgz"; fi
ls -la "$FINAL_OUT"
