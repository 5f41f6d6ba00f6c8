"""bench/fuzz/try_cases.py, a few hundred cases here (the long run: `python -m bench fuzz --mode
try --cases 20000`, bench/results/fuzz.md, section try_2026-12-07): hostile run directories,
commands and flags through `scaldiag try`, in process; no exit 70, no case over 10 s, no file of
the user's folder changed."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_hostile_try_inputs_are_refused_in_a_line_and_change_no_user_file():
    sys.path.insert(0, str(ROOT))  # bench/ is the repository's, not an installed package
    from bench.fuzz import run as fuzz

    old = signal.getsignal(signal.SIGALRM)
    try:
        shard = fuzz._shard(("try", range(200), 7, None))
    finally:
        signal.signal(signal.SIGALRM, old)
    counts = shard["counts"]
    assert shard["ran"] == 200
    assert not shard["failures"], "\n".join(shard["failures"][:3])
    assert counts["exit 2"] == 200, counts  # each a refusal: no case here reaches a round
