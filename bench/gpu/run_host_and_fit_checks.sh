# Device tool, nvidia-h200, from the project root with .whl carried (about 250 s):
#   bash bench/gpu/run_host_and_fit_checks.sh
# The host sampler's tick on this host (ProcTree and ProcCores against psutil: on a stand-in and on a
# real JAX training), its CPU in place (the blocks benchmark's sampler arm), and a functional check of
# a Keras-on-JAX fit that raises in the trace window (bench/gpu/check_fit_raises.py).
set -u
source bench/gpu/setup.sh /tmp/host_fit
python3 bench/gpu/check_fit_raises.py /tmp/host_fit_runs > "$OUT/fit_raises_check.txt" 2>&1
python3 -m bench host_tree --rounds 5 > "$OUT/host_tree_stand_in.txt" 2>&1
cp "$OUT"/* "$FINAL_OUT"/
python3 examples/train_cnn.py --steps 100000 > "$OUT/train_cnn.log" 2>&1 &
TRAIN=$!
sleep 40
python3 -m bench host_tree --rounds 5 --pid $TRAIN > "$OUT/host_tree_jax_training.txt" 2>&1
kill $TRAIN
wait $TRAIN
cp "$OUT"/* "$FINAL_OUT"/
python3 -m bench overhead --kind tiny --seconds 90 --block-steps 25 --steps 500 --batch 256 \
    --arms steady,sampler --out "$OUT/blocks_tiny_sampler.md" > "$OUT/keras.log" 2>&1
cp "$OUT"/* "$FINAL_OUT"/
tail -n 12 "$OUT/fit_raises_check.txt" "$OUT"/host_tree_*.txt
