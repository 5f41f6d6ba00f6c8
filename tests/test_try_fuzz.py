"""bench/fuzz/try_cases.py, a few hundred cases here (the long run: `python -m bench fuzz --mode
try --cases 20000`, bench/results/fuzz.md): hostile run directories, commands and flags through
`scaldiag try`, each in a process of its own; no exit 70, no hang, no file of the user's folders
changed, no process left. Without the template run directory every case is a refusal before round
0; with it (profiled here once, a tiny PyTorch script), most cases run rounds of a hostile script,
signalled at random times."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

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


@pytest.mark.slow
def test_hostile_scripts_in_rounds_signalled_at_random_change_no_user_file(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT))
    from bench.fuzz import run as fuzz
    from bench.fuzz import try_cases

    monkeypatch.setenv(try_cases.TEMPLATE_ENV, try_cases.template_env(tmp_path))
    old = signal.getsignal(signal.SIGALRM)
    try:
        shard = fuzz._shard(("try", range(16), 3, None))
    finally:
        signal.signal(signal.SIGALRM, old)
    counts = shard["counts"]
    assert not shard["failures"], "\n".join(shard["failures"][:3])
    assert counts["exit 70"] == 0 and counts["hang"] == 0
    # the draws are the seed's: these cases ran rounds, and some got a signal meanwhile
    assert counts["try: with rounds' run directory"] >= 8, counts
    assert counts["try: reached round 0"] >= 1, counts
    assert counts["try: got a signal"] >= 1, counts
