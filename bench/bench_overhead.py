"""Overhead of capture: the same script with and without `scaldiag profile`.

Each round runs the bundled example plainly, then under `scaldiag profile`,
and reads the script's own timing (median step time from step 10 on, which
is after the profiler window of steps 3-7), so capture is measured where it
runs all the time: step recording and sampling. Rounds alternate, so drifts
in machine load hit both sides.

    python bench/bench_overhead.py [--rounds 5] [--steps 300] [--batch 64] [--label cpu-tf] [-- EXTRA SCRIPT ARGS]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "train_cnn.py"
OWN = re.compile(r"median ([\d.]+) ms/step")


def own_ms(command: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    found = OWN.search(out.stdout)
    if out.returncode != 0 or not found:
        raise SystemExit(f"failed: {' '.join(command)}\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--label", default="cpu-tf")
    parser.add_argument("--out", default=None)
    parser.add_argument("extra", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    script_args = ["--steps", str(args.steps), "--batch", str(args.batch), *extra]
    plain, captured = [], []
    with tempfile.TemporaryDirectory() as runs:
        for _ in range(args.rounds):
            plain.append(own_ms([sys.executable, str(SCRIPT), *script_args]))
            captured.append(own_ms([sys.executable, "-m", "scaldiag", "profile", "--out", runs, str(SCRIPT), "--",
                                    *script_args]))
    ratios = [c / p for p, c in zip(plain, captured)]
    text = "\n".join([
        f"# Capture overhead, {args.label} ({date.today().isoformat()})",
        "",
        f"Machine: {platform.node()}, {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"backend {os.environ.get('KERAS_BACKEND', 'tensorflow')}.",
        f"Script: examples/train_cnn.py {' '.join(script_args)}; its own median step time from step 10 "
        f"(outside the profiler window, steps 3-7). {args.rounds} alternating rounds.",
        "",
        "| round | plain ms/step | under scaldiag profile ms/step | ratio |",
        "|---|---|---|---|",
        *[f"| {i + 1} | {p:.3f} | {c:.3f} | {r:.3f} |" for i, (p, c, r) in enumerate(zip(plain, captured, ratios))],
        "",
        f"Median ratio: {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}). Target <= 1.01.",
        "",
    ])
    out = Path(args.out or ROOT / "bench" / "results" / f"overhead_{args.label}.md")
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
