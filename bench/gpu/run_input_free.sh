#!/usr/bin/env bash
# On the GPU machine (device tool), from the project root, with .whl carried:
#   bash bench/gpu/run_input_free.sh [ROUNDS]
# Issue 9: the input cost scaldiag measures (the step of a clone on one cached batch) against
# twins fed without the slow input, Keras 3 on JAX, 1 GPU: pydataset (NumPy augmentation in a
# PyDataset) against convnet (the same model fed arrays), slowread (a PyDataset waiting 20 ms a
# batch) against tiny (the same model fed arrays). Rounds alternate planted and twin.
set -u
ROUNDS=${1:-2}
source bench/gpu/setup.sh /tmp/gpu_input_free
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import jax, keras; print('jax', jax.__version__, 'keras', keras.__version__)" >> "$OUT/gpu.txt" 2>&1
profile() {  # label, kind args...
  label=$1; shift
  python3 -m scaldiag profile --out "$OUT/runs_$label" --json "$OUT/$label.json" \
    bench/accounting/timed_train.py -- --out "$OUT/$label.stopwatch.json" "$@" > "$OUT/$label.txt" 2>&1
  echo "== $label exit $?"
  python3 bench/accounting/compare.py "$OUT"/runs_"$label"/* "$OUT/$label.stopwatch.json" "$label" >> "$OUT/compare.jsonl"
}
for r in $(seq 1 "$ROUNDS"); do
  profile "pydataset_r$r" --kind pydataset --epochs 4 --steps 30 --batch 256
  profile "convnet_r$r" --kind convnet --epochs 4 --steps 30 --batch 256
  profile "slowread_r$r" --kind slowread --read-ms 20 --epochs 4 --steps 30 --batch 64
  profile "tiny_r$r" --kind tiny --epochs 4 --steps 60 --batch 64
done
python3 bench/accounting/input_free_compare.py "$OUT/compare.jsonl" pydataset:convnet slowread:tiny \
  | tee "$FINAL_OUT/input_free.md"
cp "$OUT/compare.jsonl" "$FINAL_OUT/compare.jsonl"
cp "$OUT/pydataset_r1.txt" "$FINAL_OUT/report_pydataset_r1.txt"
tar czf "$FINAL_OUT/gpu_input_free.tgz" -C /tmp gpu_input_free
