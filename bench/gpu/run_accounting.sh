#!/usr/bin/env bash
# On the GPU machine (device tool), from the project root, with .whl carried:
#   bash bench/gpu/run_accounting.sh
# Issue 9: scaldiag's samples/s against each script's own synchronized stopwatch
# (bench/accounting/timed_train.py), the accounting, the profiler inflation and the
# corrected breakdown, for four kinds of script on 1 GPU (Keras 3 on JAX); the same
# scripts without scaldiag (capture overhead); the JAX host tracer at levels 1 and 2.
set -u
source bench/gpu/setup.sh /tmp/gpu_accounting
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import jax, keras; print('jax', jax.__version__, 'keras', keras.__version__)" >> "$OUT/gpu.txt" 2>&1
profile() {  # label, extra env (VAR=V or -), kind args...
  label=$1; extra=$2; shift 2
  [ "$extra" = "-" ] && extra=""
  env $extra python3 -m scaldiag profile --out "$OUT/runs_$label" --json "$OUT/$label.json" \
    bench/accounting/timed_train.py -- --out "$OUT/$label.stopwatch.json" "$@" > "$OUT/$label.txt" 2>&1
  echo "== $label exit $?"
  python3 bench/accounting/compare.py "$OUT"/runs_"$label"/* "$OUT/$label.stopwatch.json" "$label" | tee -a "$OUT/compare.jsonl"
}
plain() {  # label, kind args...: the same script, no scaldiag
  [ -n "${ACCOUNTING_QUICK:-}" ] && return  # ACCOUNTING_QUICK=1: the four kinds under scaldiag only
  label=$1; shift
  python3 bench/accounting/timed_train.py --out "$OUT/$label.plain.json" "$@" > "$OUT/$label.plain.txt" 2>&1
  echo "== $label plain: $(tail -n 1 "$OUT/$label.plain.txt")"
}
profile convnet - --kind convnet --epochs 6 --steps 60 --batch 256
plain convnet --kind convnet --epochs 6 --steps 60 --batch 256
profile tiny - --kind tiny --epochs 6 --steps 60 --batch 64
plain tiny --kind tiny --epochs 6 --steps 60 --batch 64
profile pydataset - --kind pydataset --epochs 4 --steps 30 --batch 256
plain pydataset --kind pydataset --epochs 4 --steps 30 --batch 256
profile dense - --kind dense --epochs 6 --steps 60 --batch 64
plain dense --kind dense --epochs 6 --steps 60 --batch 64
if [ -z "${ACCOUNTING_QUICK:-}" ]; then
profile tiny_spe8 - --kind tiny --epochs 6 --steps 64 --batch 64 --spe 8
profile convnet_tracer1 SCALDIAG_HOST_TRACER_LEVEL=1 --kind convnet --epochs 6 --steps 60 --batch 256
profile tiny_tracer1 SCALDIAG_HOST_TRACER_LEVEL=1 --kind tiny --epochs 6 --steps 60 --batch 64
fi
cp "$OUT/compare.jsonl" "$FINAL_OUT/compare.jsonl"
tar czf "$FINAL_OUT/gpu_accounting.tgz" --exclude='*.xplane.pb' --exclude='*.json.gz' -C /tmp gpu_accounting
# The tiny run whole (its trace too): the README's excerpt and the golden report (fixtures/runs/h200_keras_jax_tiny)
tar czf "$FINAL_OUT/tiny_run.tgz" -C /tmp/gpu_accounting runs_tiny
