#!/usr/bin/env bash
# On the GPU machine (nvidia-h200-x2), with .whl carried: the slow-input sweep again,
# after PyDataset fetches became annotated (scaldiag_input). Results in $OUT/gpu_slowinput.tgz.
set -u
source bench/gpu/setup.sh /tmp/gpu_slowinput
python3 -m scaldiag profile --gpus 1,2 --out "$OUT/runs" --json "$OUT/sweep_slowinput_marked.json" \
  examples/train_cnn.py -- --steps 200 --distribute --per-replica-batch 256 --slow-input > "$OUT/sweep_slowinput_marked.txt" 2>&1
echo "exit $?"
for d in "$OUT"/runs/*/gpus*; do
  python3 -m scaldiag report "$d" --json "$d.report.json" > /dev/null 2>&1
  python3 - "$d.report.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); t = d["trace_report"]
print(sys.argv[1].split("/")[-1], round(d["steps"]["samples_per_s"]), t["verdict"][:160])
print("   ", [(f["id"], round(f["predicted_speedup"]["value"], 2)) for f in t["findings"] if f["predicted_speedup"]])
PY
done
grep -A3 "ideal" "$OUT/sweep_slowinput_marked.txt"
tar czf "$FINAL_OUT/gpu_slowinput.tgz" -C /tmp gpu_slowinput
