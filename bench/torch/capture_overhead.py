"""Capture overhead on PyTorch against the script's synchronized stopwatch, with its 95% interval.

    python3 bench/torch/capture_overhead.py --rounds 4 --out FILE [--keep DIR] [-- healthy.py args]

Each round runs bench/torch/healthy.py plainly and under `scaldiag profile`, in alternating order
(plain first in odd rounds, captured first in even ones), as the Keras whole-process benchmark did
(git show 227e679:bench/bench_capture_overhead.py), and reads the script's own stopwatch: samples/s
over the steps after its warm-up, each window ended by torch.cuda.synchronize() (the profiler
window, steps 3-7, is inside the warm-up, so what is measured is what runs all the time: the
optimizer step hooks, step recording, marks, NVML and host sampling). Reported: each round's time
ratio captured / plain, their geometric mean and its 95% interval (Student t on the log ratios).
--keep copies the last captured run directory there.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "bench" / "torch" / "healthy.py"
T95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    13: 2.160,
    14: 2.145,
    15: 2.131,
}
DEFAULT_ARGS = ["--batch", "4096", "--steps", "250", "--warmup", "10", "--windows", "6"]


def rate(command: list[str], watch: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
    if done.returncode != 0 or not watch.exists():
        raise SystemExit(
            f"failed: {' '.join(command)}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
    value = json.loads(watch.read_text())
    watch.unlink()
    return value


def interval(ratios: list[float]) -> tuple[float, float, float]:
    """Geometric mean and its 95% interval (Student t on the logs)."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.mean(logs)
    half = (
        T95.get(len(logs) - 1, 1.96) * statistics.stdev(logs) / math.sqrt(len(logs))
        if len(logs) > 1
        else math.inf
    )
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def versions() -> str:
    try:
        import torch

        return f"torch {torch.__version__}, CUDA {torch.version.cuda}, " + (
            torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
        )
    except Exception as exc:  # the report still says what ran
        return f"torch not importable here ({exc})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", required=True)
    parser.add_argument("--keep")
    parser.add_argument("extra", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    script_args = extra or DEFAULT_ARGS
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        watch, runs = Path(tmp) / "stopwatch.json", Path(tmp) / "runs"
        plain = [sys.executable, str(SCRIPT), "--json", str(watch), *script_args]
        captured = [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "--quiet",
            "--out",
            str(runs),
            str(SCRIPT),
            "--",
            "--json",
            str(watch),
            *script_args,
        ]
        for i in range(args.rounds):
            first, second = (plain, captured) if i % 2 == 0 else (captured, plain)
            a, b = rate(first, watch), rate(second, watch)
            p, c = (a, b) if i % 2 == 0 else (b, a)
            rows.append(
                (p, c, p["samples_per_s"] / c["samples_per_s"])
            )  # time ratio captured / plain
            print(
                f"round {i + 1}: plain {p['samples_per_s']:,.0f} captured {c['samples_per_s']:,.0f}"
                f" samples/s, time ratio {rows[-1][2]:.4f}",
                flush=True,
            )
        if args.keep and runs.exists():
            shutil.copytree(sorted(runs.iterdir())[-1], Path(args.keep), dirs_exist_ok=True)
    gm, lo, hi = interval([r for _, _, r in rows])
    window_spread = [
        100 * statistics.stdev(w) / statistics.mean(w)
        for p, c, _ in rows
        for w in (p["window_samples_per_s"], c["window_samples_per_s"])
        if len(w) > 1
    ]
    text = "\n".join(
        [
            (
                "# Capture overhead of PyTorch against the script's synchronized stopwatch "
                f"({datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')})"
            ),
            "",
            (
                f"Machine: {platform.node()}, {platform.machine()}, {os.cpu_count()} cores, Python"
                f" {platform.python_version()}; {versions()}."
            ),
            (
                f"Command: `python3 bench/torch/capture_overhead.py --rounds {args.rounds} --"
                f" {' '.join(script_args)}`; alternating order per round; samples/s of the steps"
                " after the warm-up, each window ended by torch.cuda.synchronize(), by the"
                " script's own stopwatch."
            ),
            "",
            "| round | plain samples/s | under scaldiag profile | time ratio captured / plain |",
            "|---|---|---|---|",
            *[
                f"| {i + 1} | {p['samples_per_s']:,.0f} | {c['samples_per_s']:,.0f} | {r:.4f} |"
                for i, (p, c, r) in enumerate(rows)
            ],
            "",
            (
                f"Geometric mean time ratio {gm:.4f}, 95% interval [{lo:.4f}, {hi:.4f}] over"
                f" {len(rows)} rounds. Target: at most 1.01."
            ),
            (
                "Within a process, the windows' samples/s vary by"
                f" {statistics.mean(window_spread):.2f}% (mean coefficient of variation)."
                if window_spread
                else ""
            ),
        ]
    )
    Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
