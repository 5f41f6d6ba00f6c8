# Device tool, nvidia-h200, from the project root with .whl carried (about 260 s):
#   bash bench/gpu/run_host_tick_probe.sh
# The host sampler's tick, piece by piece, as the sampler runs it (10 Hz, its own niced thread),
# beside a real Keras-on-JAX training (bench/gpu/host_tick_probe.py).
set -u
source bench/gpu/setup.sh /tmp/host_tick
python3 bench/gpu/host_tick_probe.py --seconds 15 --rounds 2 --settle 30 -- python3 examples/train_cnn.py --steps 1000000 \
    > "$OUT/host_tick_probe.txt" 2>&1
cp "$OUT"/* "$FINAL_OUT"/
cat "$OUT/host_tick_probe.txt"
