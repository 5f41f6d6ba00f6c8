#!/usr/bin/env bash
# gpu runner: one GPU: `python -m bench try --gpu`, `scaldiag try` against the hand-written twins (issue 36) -> bench/results/try.md
# On the GPU machine (device tool, one GPU), from the project root, with .whl carried:
#   [TRY_CASES=keras_mlp] [ROUNDS=3] [TRY_BUDGET_S=540] bash bench/gpu/run_try.sh
# Issue 36: `python -m bench try --gpu` (bench/try/run.py): `scaldiag try` against the hand-written
# twin on one GPU (Keras 3 on JAX, PyTorch). Results: $OUT/try.md (rewritten after every case, so a
# stop at TRY_BUDGET_S keeps the cases done), env.txt and try_reports.tgz; copy try.md to
# bench/results/gpu_h200/try.md (or the card's folder).
set -u
source bench/gpu/setup.sh /tmp/gpu_try
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
gpu_env "$FINAL_OUT/env.txt"
cat "$FINAL_OUT/env.txt"
timeout -s INT -k 20 "${TRY_BUDGET_S:-540}" python3 -m bench try --gpu --rounds "${ROUNDS:-3}" \
  ${TRY_CASES:+--cases "$TRY_CASES"} --out "$FINAL_OUT/try.md" --work "$OUT/work" 2>&1 | cut -c1-600
# Every round's report and try.json (no traces), to read what a disagreement is made of.
(cd "$OUT" && find work -name "*.json" -size -2M | tar czf "$FINAL_OUT/try_reports.tgz" -T -)
cat "$FINAL_OUT/try.md" 2>/dev/null
