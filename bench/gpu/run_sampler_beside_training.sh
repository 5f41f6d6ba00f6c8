# Device tool, nvidia-h200, from the project root with .whl carried (about 200 s):
#   bash bench/gpu/run_sampler_beside_training.sh
# The NVML sampler's CPU (python -m bench sampler: real NVML, GPU 0 read again for the counts above 1)
# in place: beside a Keras-on-JAX training on the same GPU, as under `scaldiag profile`.
set -u
source bench/gpu/setup.sh /tmp/sampler_beside
python3 examples/train_cnn.py --steps 1000000 > /dev/null 2>&1 &
TRAIN=$!
sleep 30
python3 -m bench sampler --seconds 4 --rounds 3 --gpus 1,4,8 --out "$OUT/sampler_cpu_beside_training.md" \
    > "$OUT/sampler.log" 2>&1
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader >> "$OUT/sampler.log" 2>&1
kill $TRAIN
wait $TRAIN
cp "$OUT"/* "$FINAL_OUT"/
cat "$OUT/sampler_cpu_beside_training.md"
