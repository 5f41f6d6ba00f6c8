#!/usr/bin/env bash
# On the GPU machine (device tool), from the project root, with .whl carried:
#   [PROBES="plain midpass hold profiler scaldiag"] bash bench/gpu/run_loader_exit_probe.sh
# bench/gpu/loader_exit_probe.py plainly with each of the capture's after-steps added, then under
# `scaldiag profile`; each run's wall time from outside. Results: $OUT/loader_exit_probe.txt.
set -u
source bench/gpu/setup.sh /tmp/loader_probe
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
now() { date +%s.%N; }
PROBES=${PROBES:-plain midpass hold profiler scaldiag}
run() {  # $1: label (its first word picks it in PROBES); the rest: the command
  local label=$1; shift
  case " $PROBES " in *" ${label%%[: ]*} "*) ;; *) return ;; esac
  local t0 t1 rc; t0=$(now); timeout -k 10 120 "$@" > /tmp/loader_probe/out.txt 2>&1; rc=$?; t1=$(now)
  echo "== $label: exit $rc, wall $(python3 -c "print(f'{$t1 - $t0:.1f}')") s"
  grep "^\[" /tmp/loader_probe/out.txt
  # the last stack dump (faulthandler, every 6 s after the script's end): where the exit waits
  awk '/^Timeout \(/{buf=""} {buf=buf $0 "\n"} END{printf "%s", buf}' /tmp/loader_probe/out.txt | tail -40
}
{
  gpu_env /dev/stdout
  run plain python3 bench/gpu/loader_exit_probe.py
  run "midpass" python3 bench/gpu/loader_exit_probe.py --midpass
  run "hold: midpass" python3 bench/gpu/loader_exit_probe.py --midpass --hold
  run "profiler: midpass hold" python3 bench/gpu/loader_exit_probe.py --profiler --midpass --hold
  run "scaldiag: profile" python3 -m scaldiag profile -q --out /tmp/loader_probe/runs bench/gpu/loader_exit_probe.py
  grep -E "teardown|input-ceiling|script before" /tmp/loader_probe/out.txt | head
} 2>&1 | tee "$FINAL_OUT/loader_exit_probe.txt"
