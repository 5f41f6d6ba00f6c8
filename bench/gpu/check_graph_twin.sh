#!/usr/bin/env bash
# On the GPU machine (device tool), from the project root, with .whl carried:
#   bash bench/gpu/check_graph_twin.sh
# A script that captures its step as a CUDA graph (bench/torch/healthy.py --fixed graphs) under
# `scaldiag profile`, bounded at 70 s: on 2026-12-06 it hung at exit in the profiler's stop (CUPTI
# teardown with a graph captured). A hang gets the script process's Python stacks (faulthandler,
# SIGABRT to the launcher's children only, so the launcher still forwards them). Results:
# $OUT/graph.txt, graph.json.
set -u
source bench/gpu/setup.sh /tmp/graph_check
export CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
python3 -m scaldiag profile -q --out /tmp/graph_check/runs --json "$FINAL_OUT/graph.json" \
  bench/torch/healthy.py -- --steps 40 --fixed graphs > "$FINAL_OUT/graph.txt" 2>&1 &
pid=$!
for _ in $(seq 70); do kill -0 $pid 2>/dev/null || break; sleep 1; done
if kill -0 $pid 2>/dev/null; then
  echo "HUNG after 70 s: the script's stacks"; pkill -ABRT -P $pid; sleep 5; kill -9 $pid
fi
wait $pid; echo "exit $?"; tail -c 4000 "$FINAL_OUT/graph.txt"
