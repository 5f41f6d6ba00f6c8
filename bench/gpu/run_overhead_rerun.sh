# Device tool, nvidia-h200, from the project root with .whl carried (about 500 s):
#   bash bench/gpu/run_overhead_rerun.sh
# The capture-overhead measurements left undecided or not re-run (issue 12): PyTorch at width 4096
# after the window, more blocks; Keras-on-JAX tiny with the annotation on (the benchmark's fixed
# annotation path) beside steady; the host sampler's tree on this host (ProcTree against psutil).
set -u
source bench/gpu/setup.sh /tmp/overhead_rerun
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
python3 -m bench host_tree --rounds 5 > "$OUT/host_tree.txt" 2>&1
cp "$OUT"/* "$FINAL_OUT"/
python3 -m bench overhead_torch --seconds 180 --width 4096 --batch 1024 --arms steady,steady,hooks \
    --out "$OUT/torch_blocks_w4096_more.md" > "$OUT/torch.log" 2>&1
cp "$OUT"/* "$FINAL_OUT"/
python3 -m bench overhead --kind tiny --seconds 140 --block-steps 25 --steps 500 --batch 256 \
    --arms full,steady --out "$OUT/blocks_tiny_full.md" > "$OUT/keras.log" 2>&1
cp "$OUT"/* "$FINAL_OUT"/
tail -n 5 "$OUT"/*.log "$OUT/host_tree.txt"
