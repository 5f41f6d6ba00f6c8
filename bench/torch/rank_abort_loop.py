"""Hunt the rare rank abort: the 2-rank gloo torchrun capture test, run again and again, time-capped.

    python bench/torch/rank_abort_loop.py --minutes 15 --out FILE

Each try runs what tests/test_torch_capture.py::test_torchrun_two_gloo_ranks_record_and_merge runs
(`scaldiag profile --nproc-per-node 2 fixtures/kineto/train_ddp_cpu.py -- --steps 12`, OMP_NUM_THREADS=1)
and records its exit code, its wall time and whether stderr says "terminate called" (the abort seen once in
about 35 runs, docs/pytorch.md). Writes one line per try and a summary to FILE (markdown).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "fixtures" / "kineto" / "train_ddp_cpu.py"


def one_try(tmp: Path, i: int) -> tuple[int, float, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = tmp / f"runs{i}"
    command = [sys.executable, "-m", "scaldiag", "profile", "--quiet", "--nproc-per-node", "2", "--out", str(out), str(SCRIPT), "--",
               "--steps", "12"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    elapsed = time.perf_counter() - start
    text = done.stdout + done.stderr
    abort = "terminate called" in text
    tail = "" if done.returncode == 0 and not abort else text[-1500:].replace("\n", " | ")
    return done.returncode, elapsed, ("ABORT " if abort else "") + tail


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import torch

    rows, deadline = [], time.monotonic() + 60 * args.minutes
    cpu0 = os.times()
    with tempfile.TemporaryDirectory() as tmp:
        while time.monotonic() < deadline:
            code, elapsed, note = one_try(Path(tmp), len(rows))
            rows.append((code, elapsed, note))
            print(f"try {len(rows)}: exit {code} in {elapsed:.1f} s {note[:300]}", flush=True)
    cpu = os.times()
    child_cpu_s = (cpu.children_user - cpu0.children_user) + (cpu.children_system - cpu0.children_system)
    failed = [i + 1 for i, (code, _, note) in enumerate(rows) if code != 0 or note]
    lines = [f"# Rank abort hunt ({date.today().isoformat()})", "",
             f"Machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, torch "
             f"{torch.__version__}. Command: `python bench/torch/rank_abort_loop.py --minutes {args.minutes:g}`.", "",
             f"{len(rows)} tries in {sum(r[1] for r in rows):.0f} s wall, {child_cpu_s:.0f} s of child CPU; "
             f"failed or aborted: {len(failed)} ({', '.join(map(str, failed)) or 'none'}).", "",
             "| try | exit | wall s | note |", "|---|---|---|---|",
             *[f"| {i + 1} | {code} | {elapsed:.1f} | {note[:400]} |" for i, (code, elapsed, note) in enumerate(rows)]]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:5]))


if __name__ == "__main__":
    main()
