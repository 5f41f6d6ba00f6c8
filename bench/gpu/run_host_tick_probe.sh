# Device tool, nvidia-h200, from the project root with .whl carried (about 260 s):
#   bash bench/gpu/run_host_tick_probe.sh  (PIECES=noop,now,... SECONDS_A_PIECE=12 NAME=file: fewer, shorter)
# The host sampler's tick, piece by piece, as the sampler runs it (10 Hz, its own niced thread),
# beside a real Keras-on-JAX training (bench/gpu/host_tick_probe.py).
set -u
source bench/gpu/setup.sh /tmp/host_tick
python3 bench/gpu/host_tick_probe.py --seconds ${SECONDS_A_PIECE:-15} --rounds 2 --settle 30 \
    --pieces ${PIECES:-noop,tree,update,cores,psutil_cores,now,before} -- python3 examples/train_cnn.py --steps 1000000 \
    > "$OUT/${NAME:-host_tick_probe}.txt" 2>&1
cp "$OUT"/* "$FINAL_OUT"/
cat "$OUT/${NAME:-host_tick_probe}.txt"
