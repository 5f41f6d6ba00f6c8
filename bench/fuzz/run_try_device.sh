#!/usr/bin/env bash
# On the GPU machine (device tool; its 16 cores, not its GPU), from the project root:
#   [CASES=20000] [SEED=0] [JOBS=48] [FUZZ_TIME_S=480] [SKIP_BUILD=1] bash bench/fuzz/run_try_device.sh
# Issue 47: `python -m bench fuzz --mode try` (bench/fuzz/try_cases.py), hostile scripts through
# try's rounds with signals at random times. Needs torch (the template run it profiles once); no
# TensorFlow. Installs nothing: scaldiag runs from this checkout (PYTHONPATH), its C parts built
# where a compiler is (best effort; the template's analysis is small either way).
# JOBS above the cores: a case mostly waits (its budget, its signal's time, GRACE_S): on the 2-core
# VM 0.39 s of CPU a case, 1.3 s of wall a case a worker. FUZZ_TIME_S: no case is
# drawn after it (a case may then take up to ~80 s), so one device command (10 minutes at most)
# ends with its result; a partial run says how many cases ran, and the rest
# are run as another command with another SEED (case N is drawn from SEED and N alone).
# Result: $OUT/fuzz_try_seed$SEED.md, a section for bench/results/fuzz.md (merged by hand).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
[ -n "${SKIP_BUILD:-}" ] || python3 setup.py -q build_ext --inplace > /tmp/build_ext.log 2>&1 \
  || echo "scaldiag C parts not built (numpy and json.loads instead): $(tail -1 /tmp/build_ext.log)"
{ date -u; nproc; uptime
  python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)"
} | tee "${OUT:-/tmp}/env.txt"
python3 -m bench fuzz --mode try --cases "${CASES:-20000}" --seed "${SEED:-0}" \
  --jobs "${JOBS:-48}" --time-limit "${FUZZ_TIME_S:-480}" \
  --out "${OUT:-/tmp}/fuzz_try_seed${SEED:-0}.md" > "${OUT:-/tmp}/fuzz_try.log" 2>&1
echo "exit status $?"
uptime
sed -n '1,/^## Slowest/p' "${OUT:-/tmp}/fuzz_try_seed${SEED:-0}.md"
grep -A12 "^## Failures" "${OUT:-/tmp}/fuzz_try_seed${SEED:-0}.md" | cut -c1-400
tail -5 "${OUT:-/tmp}/fuzz_try.log" | cut -c1-400
