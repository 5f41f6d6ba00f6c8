#!/usr/bin/env bash
# gpu runner: nvidia-h200 (x2: the link): `scaldiag calibrate` (torch, JAX, the default save and read-back, the CPU label) -> bench/results/gpu_h200/calibrate/
# `scaldiag calibrate` on the GPU machine (issue 23). From the project root, with .whl carried as for the
# other GPU scripts (device tool, nvidia-h200; the same script on nvidia-h200-x2 measures the link):
#
#     bash bench/gpu/run_calibrate.sh
#
# Steps, each under its own timeout, each exit code written to status.txt, none stopping the rest:
#   env        nvidia-smi -L / topo -m, the frameworks' versions
#   torch      scaldiag calibrate --framework torch (2+ GPUs: NCCL all_reduce 8 B-1 GiB, one process a GPU;
#              one GPU: copy/add bandwidth and a one-rank NCCL call, and what predictions will assume)
#   jax        scaldiag calibrate --framework jax (psum over the local devices; one GPU: as above)
#   default    the torch calibration again on 8 B-64 MiB, saved where reports look (no --out), then
#              find_calibrations() and from_inventory() read back from there
#   cpu        scaldiag calibrate --device cpu (gloo, 2 CPU processes, 8 B-16 MiB): the CPU label
# Results in $OUT: calibration_*.json, calibrate_<step>.txt, env.txt, status.txt. Budget: under
# 4 minutes (timeouts 75 + 75 + 45 + 30 s, and the setup).
set -u
if [ -d .whl ]; then source bench/gpu/setup.sh /tmp/calibrate; else FINAL_OUT="${OUT:-/tmp/calibrate_out}"; fi
# NVLink multicast off, as for every GPU run here (../shared/docs/GPU.md)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" CUDA_DEVICE_ORDER=PCI_BUS_ID
unset SCALDIAG_CALIBRATION
DEST="$FINAL_OUT"
mkdir -p "$DEST"
WORK="$(mktemp -d)"
export XDG_CACHE_HOME="$WORK/cache"  # the default place, empty at the start: what `default` finds is this run's
T0=$SECONDS

step() {  # name, timeout, command...: its output in $DEST/calibrate_<name>.txt, its exit code in status.txt
  local name=$1 limit=$2
  shift 2
  echo "== $name ($((SECONDS - T0)) s so far)" >&2
  timeout -k 10 "$limit" "$@" > "$DEST/calibrate_$name.txt" 2>&1
  local rc=$?
  echo "$name exit $rc after $((SECONDS - T0)) s" | tee -a "$DEST/status.txt" >&2
}

{ nvidia-smi -L
  nvidia-smi topo -m
  nproc
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.device_count())"
  python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
} > "$DEST/env.txt" 2>&1
echo "env written after $((SECONDS - T0)) s" >> "$DEST/status.txt"

# The command through the CLI; where the CLI does not import (another part of the tree mid-change), the
# command's own module, which needs no other command, with the CLI's handling of errors.
SD=(python3 -m scaldiag)
if ! python3 -m scaldiag --version > "$DEST/cli_check.txt" 2>&1; then
  SD=(python3 -c "import argparse, sys
from scaldiag.commands import calibrate
from scaldiag.errors import ScaldiagError
p = argparse.ArgumentParser(prog='scaldiag'); calibrate.add_parser(p.add_subparsers())
try:
    sys.exit(calibrate.run(p.parse_args(sys.argv[1:])))
except ScaldiagError as exc:
    print('scaldiag: error:', exc, file=sys.stderr); sys.exit(2)" )
  echo "the CLI did not import (cli_check.txt): the calibrate module run directly" >> "$DEST/status.txt"
fi

step torch 75 "${SD[@]}" calibrate --framework torch --out "$DEST/calibration_torch.json"
step jax 75 "${SD[@]}" calibrate --framework jax --out "$DEST/calibration_jax.json"
step default 45 "${SD[@]}" calibrate --framework torch --sizes 8,4K,64K,1M,16M,64M
step readback 20 python3 -c "
from scaldiag.analyze import interconnect as ic
found, notes = ic.find_calibrations()
print('found', [(c.path, c.device, c.gpu_name, c.curve.ranks if c.curve else None) for c in found], 'notes', notes)
inv = {'gpus': [{'name': c.gpu_name, 'nvlink_active_links': 0} for c in found[:1]] or [{'name': 'NVIDIA H200'}]}
link = ic.from_inventory(inv)
print(link.describe() if link else 'no link')
for m in (1e6, 25 * 2**20, 147.3e6):
    print(f'all-reduce of {m / 1e6:.1f} MB over 2 GPUs: {link.allreduce_s(m, 2) * 1e6:.1f} us' if link else '')
"
step cpu 30 "${SD[@]}" calibrate --device cpu --framework torch --sizes 8,4K,64K,1M,16M \
  --out "$DEST/calibration_cpu.json"
cp "$XDG_CACHE_HOME"/scaldiag/interconnect/*.json "$DEST/" 2>/dev/null
echo "done after $((SECONDS - T0)) s" >> "$DEST/status.txt"
ls -la "$DEST"
