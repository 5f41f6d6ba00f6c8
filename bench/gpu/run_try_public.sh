#!/usr/bin/env bash
# gpu runner: one GPU: `scaldiag try` on public scripts stored unmodified (issue 47) -> bench/results/try.md, "Public scripts"
# On the GPU machine (device tool, one GPU), from the project root, with .whl carried:
#   bash bench/gpu/run_try_public.sh
# Issue 47: `scaldiag try` on public scripts nobody here wrote (stored unmodified under
# bench/clock/scripts/, their source and commit in bench/clock/manifest.toml), each beside its
# forecast:
#   keras: Keras 3 on JAX, a host-bound fit (SD105), fixed by steps_per_execution:
#          keras-team/keras examples/demo_mnist_convnet.py (synthetic MNIST, 60,000, through
#          bench/clock/shim), else examples/demo_functional.py (random arrays in the script)
#   torch: PyTorch whose input is a DataLoader with few workers (SD101), fixed by more workers:
#          pytorch/examples dcgan/main.py --dataset fake --workers 4 --niter 12, else
#          vae/main.py (torchvision MNIST from synthetic idx files; 1 worker with an accelerator)
# Each: a copy of the script in its own working directory, `scaldiag profile` (its run directory
# outside that folder), then `scaldiag try RUN SDxxx` (default rounds, --budget-s the half's time
# left), the sha256 of every file of the working directory before and after try (try's promise:
# byte-identical). A candidate without the finding: the next one, where time is left.
# Time: everything stops by TRY_PUBLIC_BUDGET_S (default 530 s) from the start; the Keras half
# ends by KERAS_END_S (default 285 s). Results in $OUT: try_public.md (the summary, with the
# card's name), <half>_try.json, <half>_report.json, <half>_profile.err, <half>_try.err,
# <half>_try.out (try's line), env.txt.
# TRY_PUBLIC_DRY=1: the shell logic on a CPU machine with .venv (Keras on TensorFlow, tiny data;
# torchvision is not there, so both PyTorch candidates end "no SD101", then keras_custom_torch_loop
# runs profile + try SD211 where it shows at the load); no GPU claims from it.
set -u
T0=$(date +%s)
BUDGET=${TRY_PUBLIC_BUDGET_S:-530}
KERAS_END=${KERAS_END_S:-285}
DRY=${TRY_PUBLIC_DRY:-0}
ROOT=$PWD
SCRIPTS=$ROOT/bench/clock/scripts
if [ "$DRY" = "1" ]; then
  FINAL_OUT=${OUT:-/tmp/try_public_dry/out}
  WORK=/tmp/try_public_dry/work
  SD=("$ROOT/.venv/bin/scaldiag")
  PY=$ROOT/.venv/bin/python
  export KERAS_BACKEND=tensorflow
  MNIST_N=3200
  CARD="none (dry run on the CPU: $(nproc) cores)"
else
  source bench/gpu/setup.sh /tmp/gpu_try_public   # FINAL_OUT=$OUT; OUT=/tmp/gpu_try_public
  WORK=/tmp/gpu_try_public/work
  SD=(python3 -m scaldiag)
  PY=python3
  export CUDA_VISIBLE_DEVICES=0 KERAS_BACKEND=jax
  MNIST_N=60000
  CARD=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader -i 0 2>/dev/null || echo "nvidia-smi failed")
  gpu_env "$FINAL_OUT/env.txt"
fi
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
mkdir -p "$FINAL_OUT" "$WORK"
rm -rf "${WORK:?}"/*
SUMMARY=$FINAL_OUT/try_public.md
{ echo "### try on public scripts (issue 47), $(date -u '+%Y-%m-%d %H:%M UTC')"; echo
  echo "- card: $CARD; $(nproc) CPUs; load $(cat /proc/loadavg)"
  echo "- scaldiag at $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo; } > "$SUMMARY"
cat "$FINAL_OUT/env.txt" 2>/dev/null

left() { echo $(( $1 - ($(date +%s) - T0) )); }
# The sha256 of every file under the working directory, by relative path.
shas() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum) > "$2"; }

# try_one HALF NAME FINDING END_S SOURCE COMMIT UPSTREAM_PATH WORKDIR SCRIPT [ARGS...]
# Returns 0 where profile found FINDING (and try ran), 1 where it did not (the next candidate).
try_one() {
  local half=$1 name=$2 finding=$3 end=$4 source=$5 commit=$6 upath=$7 wd=$8 script=$9
  shift 9
  local runs=$WORK/${name}_runs rep=$FINAL_OUT/${half}_${name}_report.json
  local cap=$(left "$end")
  if [ "$cap" -lt 90 ]; then
    echo "- $name: not run ($cap s left of this half)" >> "$SUMMARY"; return 1
  fi
  echo "== $half: $name: profile ($cap s left of this half)"
  (cd "$wd" && timeout -s INT -k 20 $(( cap - 60 )) "${SD[@]}" profile -q --out "$runs" \
     --json "$rep" "$script" -- "$@") > "$FINAL_OUT/${half}_${name}_profile.out" \
     2> "$FINAL_OUT/${half}_${name}_profile.err"
  local rc=$?
  tail -5 "$FINAL_OUT/${half}_${name}_profile.err"
  if [ ! -s "$rep" ]; then
    echo "- $name: profile exit $rc, no report (tail of its stderr in ${half}_${name}_profile.err)" >> "$SUMMARY"
    return 1
  fi
  local has; has=$($PY bench/try/public.py has "$rep" "$finding")
  if [ $? -ne 0 ]; then
    echo "- $name: profile exit $rc, no $finding ($has): next candidate" >> "$SUMMARY"; return 1
  fi
  local run; run=$($PY bench/try/public.py run-dir "$rep")
  cap=$(left "$end")
  local budget=$(( cap - 25 ))
  shas "$wd" "$FINAL_OUT/${half}_${name}_sha_before.txt"
  local load; load=$(cat /proc/loadavg)
  echo "== $half: $name: try $finding (--budget-s $budget)"
  (cd "$wd" && timeout -s INT -k 20 $(( cap - 5 )) "${SD[@]}" try --budget-s "$budget" \
     --json "$FINAL_OUT/${half}_try.json" "$run" "$finding") > "$FINAL_OUT/${half}_try.out" \
     2> "$FINAL_OUT/${half}_try.err"
  rc=$?
  shas "$wd" "$FINAL_OUT/${half}_${name}_sha_after.txt"
  cp "$rep" "$FINAL_OUT/${half}_report.json"
  cat "$FINAL_OUT/${half}_try.out"; tail -3 "$FINAL_OUT/${half}_try.err"
  if [ -s "$FINAL_OUT/${half}_try.json" ]; then
    $PY bench/try/public.py summary --name "$name" --source "$source" --commit "$commit" \
      --path "$upath" --finding "$finding" --try-json "$FINAL_OUT/${half}_try.json" \
      --report "$rep" --sha-before "$FINAL_OUT/${half}_${name}_sha_before.txt" \
      --sha-after "$FINAL_OUT/${half}_${name}_sha_after.txt" --args "$*" --card "$CARD" \
      --load "$load (at try's start)" --line "$FINAL_OUT/${half}_try.out" \
      --command "scaldiag try --budget-s $budget RUN $finding (try exit $rc)" >> "$SUMMARY"
  else
    echo "- $name: try exit $rc, no try.json (tail of ${half}_try.err: $(tail -2 "$FINAL_OUT/${half}_try.err" | tr '\n' ' '))" >> "$SUMMARY"
  fi
  echo >> "$SUMMARY"
  return 0
}

KERAS_C=3422977a5e38fb2f7709aaa9a08e47f0c43d0f60
TORCH_C=77f55b912142e11fcfdf5b530231fb9c52f181e8

# ---- Keras (SD105, steps_per_execution): the MNIST shim answers keras.datasets.mnist offline.
keras_half() {
  local wd=$WORK/keras_mnist_convnet
  mkdir -p "$wd" && cp "$SCRIPTS/keras/examples/demo_mnist_convnet.py" "$wd/"
  PYTHONPATH=$ROOT/bench/clock/shim${PYTHONPATH:+:$PYTHONPATH} SCALDIAG_CLOCK_SHIM=mnist \
    SCALDIAG_CLOCK_MNIST_N=$MNIST_N \
    try_one keras keras_demo_mnist_convnet SD105 "$KERAS_END" keras-team/keras "$KERAS_C" \
      examples/demo_mnist_convnet.py "$wd" demo_mnist_convnet.py && return 0
  wd=$WORK/keras_functional
  mkdir -p "$wd" && cp "$SCRIPTS/keras/examples/demo_functional.py" "$wd/"
  try_one keras keras_demo_functional SD105 "$KERAS_END" keras-team/keras "$KERAS_C" \
    examples/demo_functional.py "$wd" demo_functional.py
}

# ---- PyTorch (SD101, DataLoader workers).
torch_half() {
  local end=$(( BUDGET - 10 ))
  local wd=$WORK/dcgan
  mkdir -p "$wd" && cp "$SCRIPTS/pytorch-examples/dcgan/main.py" "$wd/"
  try_one torch dcgan_fake SD101 "$end" pytorch/examples "$TORCH_C" dcgan/main.py "$wd" main.py \
    --dataset fake --niter 12 --batchSize 64 --workers 4 --accel --outf out && return 0
  # vae: torchvision.datasets.MNIST('../data') reads raw idx files there before downloading
  wd=$WORK/vae/work
  mkdir -p "$wd/results" && cp "$SCRIPTS/pytorch-examples/vae/main.py" "$wd/"
  $PY -c "import sys; sys.path.insert(0, '$ROOT'); from pathlib import Path; \
from bench.clock.run import _mnist_idx; _mnist_idx(Path('$WORK/vae/data/MNIST/raw'), 12800, 1280, gz=False)"
  try_one torch vae_workers SD101 "$end" pytorch/examples "$TORCH_C" vae/main.py "$wd" main.py \
    --epochs 8 --log-interval 20 && return 0
  # Dry run only (no torchvision on the CPU machine): the try and summary path on a PyTorch
  # script that runs there, keras_custom_torch_loop (a DataLoader, no workers; SD211 at load)
  [ "$DRY" = "1" ] || return 1
  wd=$WORK/custom_torch_loop
  mkdir -p "$wd" && cp "$SCRIPTS/keras/examples/demo_custom_torch_workflow.py" "$wd/"
  PYTHONPATH=$ROOT/bench/clock/shim${PYTHONPATH:+:$PYTHONPATH} SCALDIAG_CLOCK_SHIM=mnist \
    SCALDIAG_CLOCK_MNIST_N=$MNIST_N \
    try_one torch keras_custom_torch_loop SD211 "$end" keras-team/keras "$KERAS_C" \
      examples/demo_custom_torch_workflow.py "$wd" demo_custom_torch_workflow.py
}

keras_half
torch_half
echo "- total: $(( $(date +%s) - T0 )) s of $BUDGET" >> "$SUMMARY"
(cd "$WORK" && find . -name "try.json" -size -2M | tar czf "$FINAL_OUT/try_public_rounds.tgz" -T - 2>/dev/null)
cat "$SUMMARY"
