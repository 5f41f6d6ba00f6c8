"""What the loop adapters' tests share: a script profiled for real, and its marked intervals."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def profile(script: Path, *flags: str, env: dict | None = None, timeout_s: int = 300):
    """``scaldiag profile -q`` of ``script`` into ``script``'s folder / runs: (run_dir, stdout)."""
    inherited = {
        k: v for k, v in os.environ.items() if k != "SCALDIAG_GLOBAL_BATCH"
    }  # the script's own
    env = {**inherited, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    runs = script.parent / "runs"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "-q",
            "--out",
            str(runs),
            *flags,
            str(script),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = list(runs.iterdir())
    return run_dir, result.stdout


def intervals(marks: list[dict], kind: str) -> list[tuple[int, int]]:
    """(begin, end) of each ``test_begin``/``test_end`` pair of that kind."""
    begins = [m["t_ns"] for m in marks if m["mark"] == "test_begin" and m.get("kind") == kind]
    ends = [m["t_ns"] for m in marks if m["mark"] == "test_end" and m.get("kind") == kind]
    assert len(begins) == len(ends)
    return list(zip(begins, ends))
