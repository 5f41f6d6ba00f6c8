#!/usr/bin/env bash
# On the GPU machine (device tool), from the project root, with .whl carried:
#   bash bench/gpu/check_graph_twin.sh
# A script that captures its step as a CUDA graph (bench/torch/healthy.py --fixed graphs) under
# `scaldiag profile`, bounded at 70 s: on 2026-12-06 it hung at exit while our CUDA graph hooks were
# not applied (torch.cuda.graphs unwatched), and exited once they were (docs/pytorch.md). A hang gets the script process's Python stacks (faulthandler,
# SIGABRT to the launcher's children only, so the launcher still forwards them). Results:
# $OUT/probe.txt (torch alone), graph.txt, graph.json.
set -u
source bench/gpu/setup.sh /tmp/graph_check
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
# torch alone first (bench/gpu/graph_exit_probe.py): the seconds from its last line to its exit, with
# no trace, with a torch.profiler window before the graph, and the same with TEARDOWN_CUPTI=1
# (PROBE=0: skipped). On 2026-12-06 (H100) each exited within 1.3 s.
variants=("" "--trace" "--trace TEARDOWN_CUPTI=1")
[ "${PROBE:-1}" = 0 ] && variants=()
for variant in "${variants[@]}"; do
  set -- $variant
  flag=${1:-}; envs=${2:-}
  out=$(env $envs timeout 40 python3 bench/gpu/graph_exit_probe.py $flag 2>&1); rc=$?
  trained=$(echo "$out" | sed -n 's/^trained //p')
  echo "torch alone ${variant:-(no trace)}: exit $rc, $(python3 -c "import time; print(f'{time.time() - float(\"${trained:-nan}\"):.1f}')") s from training's end to exit" | tee -a "$FINAL_OUT/probe.txt"
done
python3 -m scaldiag profile -q --out /tmp/graph_check/runs --json "$FINAL_OUT/graph.json" \
  bench/torch/healthy.py -- --steps 40 --fixed graphs > "$FINAL_OUT/graph.txt" 2>&1 &
pid=$!
for _ in $(seq 70); do kill -0 $pid 2>/dev/null || break; sleep 1; done
if kill -0 $pid 2>/dev/null; then
  echo "HUNG after 70 s: the script's stacks"; pkill -ABRT -P $pid; sleep 5; kill -9 $pid
fi
wait $pid; echo "exit $?"; tail -c 4000 "$FINAL_OUT/graph.txt"
