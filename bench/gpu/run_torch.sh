#!/usr/bin/env bash
# gpu runner: nvidia-h200: PyTorch: ARG zoo (fixture, bench/torch/ scripts and twins) or open (SD105's twins, DDP on one GPU) -> bench/results/gpu_h200/torch/
# PyTorch on one GPU (issue 14). Run from the project root on the GPU machine (device tool, .whl carried):
#
#     bash bench/gpu/run_torch.sh zoo     # a real Kineto fixture, `scaldiag profile` on bench/torch/ scripts and twins
#     bash bench/gpu/run_torch.sh open    # SD105's twins of healthy.py, DDP mechanics on one GPU
#
# python3 there has torch + CUDA; scaldiag runs from this checkout on PYTHONPATH. Everything lands in one
# torch_<stage>.tgz in the device tool's $OUT (bench/results/torch_gpu elsewhere): results/*.txt|json|md,
# fixture/ (zoo), runs/ (run directories). Budget: zoo under 6 minutes, open about 1 (each step has a timeout).
# Removed, their results in bench/results/gpu_h200/torch/torch.md: capture_overhead.py (the script's stopwatch,
# plain against profiled: python -m bench gpu capture_cost now) and nccl_same_gpu.py; git show 2996455:bench/torch/NAME.
set -uo pipefail
STAGE="${1:-zoo}"
OUT="${OUT:-bench/results/torch_gpu}"
# setup.sh keeps the tool's $OUT as FINAL_OUT (a shell variable: it must be sourced here, not by the caller,
# or the tarball stays on the machine, as it did once).
if [ -d .whl ]; then source bench/gpu/setup.sh "/tmp/torch_$STAGE"; else FINAL_OUT=$OUT; fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
DEST="$FINAL_OUT"
mkdir -p "$DEST"
WORK="$(mktemp -d)"
R="$WORK/results"
mkdir -p "$R" "$WORK/runs"
T0=$SECONDS

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nproc
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
} > "$R/env.txt" 2>&1

profile() {  # name, timeout, scaldiag profile args... (the script and its args after them)
  local name=$1 limit=$2
  shift 2
  echo "== $name ($((SECONDS - T0)) s so far)" >&2
  timeout "$limit" python3 -m scaldiag profile --out "$WORK/runs/$name" --json "$R/$name.json" "$@" > "$R/$name.txt" 2>&1
  echo "exit $? after $((SECONDS - T0)) s" >> "$R/$name.txt"
}

plain() {  # name, timeout, script args...
  local name=$1 limit=$2
  shift 2
  echo "== $name ($((SECONDS - T0)) s so far)" >&2
  timeout "$limit" python3 "$@" > "$R/$name.txt" 2>&1
  echo "exit $? after $((SECONDS - T0)) s" >> "$R/$name.txt"
}

zoo() {
  echo "== fixture" >&2
  timeout 90 python3 bench/torch/record_fixture.py --out "$WORK/fixture" > "$R/fixture.log" 2>&1
  timeout 60 python3 -m scaldiag analyze --json "$R/fixture_analyze.json" "$WORK/fixture" > "$R/fixture_analyze.txt" 2>&1
  profile input_bound        70 bench/torch/input_bound.py -- --steps 60
  profile input_bound_fixed  70 bench/torch/input_bound.py -- --steps 60 --fixed
  profile launch_bound       60 bench/torch/launch_bound.py -- --steps 300
  profile launch_bound_fixed 120 bench/torch/launch_bound.py -- --steps 300 --fixed
  profile healthy            60 bench/torch/healthy.py -- --steps 60
}

open_parts() {
  # SD105 on healthy.py at batch 1024: the script plain, its two twins (same kernels as one CUDA graph;
  # torch.compile reduce-overhead), then under scaldiag profile for the trace.
  plain twin_eager   40 bench/torch/healthy.py --steps 160 --windows 6 --json "$R/twin_eager.json"
  plain twin_graphs  40 bench/torch/healthy.py --steps 160 --windows 6 --fixed graphs --json "$R/twin_graphs.json"
  plain twin_compile 90 bench/torch/healthy.py --steps 160 --windows 6 --fixed compile --json "$R/twin_compile.json"
  profile healthy    40 bench/torch/healthy.py -- --steps 60
  # DDP mechanics on ONE GPU (not scaling): 2 torchrun ranks on cuda:0 with gloo (NCCL refuses 2 ranks on 1 GPU)
  profile ddp_2rank_1gpu 60 --nproc-per-node 2 bench/torch/ddp_one_gpu.py -- --steps 20
  profile ddp_sweep_1_2 20 --torchrun --gpus 1,2 bench/torch/ddp_one_gpu.py -- --steps 20
}

case "$STAGE" in
  zoo) zoo ;;
  open) open_parts ;;
  *) echo "stage: zoo or open" >&2; exit 2 ;;
esac
echo "total $((SECONDS - T0)) s" >> "$R/env.txt"
# Kineto traces are the bulk of the run directories: keep them, compressed in the tarball.
tar czf "$DEST/torch_$STAGE.tgz" -C "$WORK" results runs $([ -d "$WORK/fixture" ] && echo fixture)
ls -la "$DEST" >&2
