#!/usr/bin/env bash
# PyTorch on one GPU (issue 14): a real Kineto fixture, and `scaldiag profile` on bench/torch/ scripts
# with their fixed twins. Run from the project root on the GPU machine:
#
#     bash bench/gpu/run_torch.sh            # results in $OUT (the device tool's), else bench/results/torch_gpu
#
# python3 there has torch + CUDA; scaldiag runs from this checkout on PYTHONPATH. Everything lands in one
# torch_gpu.tgz: results/*.txt|json (reports, stdout), fixture/ (the Kineto trace), runs/ (run directories).
# Budget: under 6 minutes (each step has its own timeout).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
OUT="${OUT:-bench/results/torch_gpu}"
mkdir -p "$OUT"
WORK="$(mktemp -d)"
R="$WORK/results"
mkdir -p "$R"
T0=$SECONDS

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
} > "$R/env.txt" 2>&1

echo "== fixture" >&2
timeout 90 python3 bench/torch/record_fixture.py --out "$WORK/fixture" > "$R/fixture.log" 2>&1
timeout 60 python3 -m scaldiag analyze --json "$R/fixture_analyze.json" "$WORK/fixture" > "$R/fixture_analyze.txt" 2>&1

run() {  # name, timeout, script, args...
  local name=$1 limit=$2 script=$3
  shift 3
  echo "== $name ($((SECONDS - T0)) s so far)" >&2
  timeout "$limit" python3 -m scaldiag profile --out "$WORK/runs/$name" --json "$R/$name.json" "$script" -- "$@" \
    > "$R/$name.txt" 2>&1
  echo "exit $? after $((SECONDS - T0)) s" >> "$R/$name.txt"
}

run input_bound        70 bench/torch/input_bound.py --steps 60
run input_bound_fixed  70 bench/torch/input_bound.py --steps 60 --fixed
run launch_bound       60 bench/torch/launch_bound.py --steps 300
run launch_bound_fixed 120 bench/torch/launch_bound.py --steps 300 --fixed
run healthy            60 bench/torch/healthy.py --steps 60

echo "total $((SECONDS - T0)) s" >> "$R/env.txt"
tar czf "$OUT/torch_gpu.tgz" -C "$WORK" results fixture runs
ls -la "$OUT" >&2
