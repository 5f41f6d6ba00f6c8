"""Capture overhead against a synchronized stopwatch, with its 95% interval.

    python bench/bench_capture_overhead.py --rounds 12 --out FILE [-- timed_train args]

Each round runs bench/accounting/timed_train.py plainly and under `scaldiag profile`, in alternating
order (plain first in odd rounds, captured first in even ones), and reads the script's own stopwatch:
samples/s over epochs 2..N, where Keras has synchronised with the device at each epoch's end (the
profiler window is in epoch 1, so what is measured is what runs all the time: step recording, marks,
sampling). Reported: each round's time ratio captured / plain, their geometric mean and its 95%
interval (Student t on the log ratios). bench_overhead.py measured host step periods, which on an
asynchronous backend time the dispatch, not the work.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "accounting" / "timed_train.py"
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093}


def rate(command: list[str], out: Path) -> float:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0 or not out.exists():
        raise SystemExit(f"failed: {' '.join(command)}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    value = json.loads(out.read_text())["samples_per_s"]
    out.unlink()
    return value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", required=True)
    parser.add_argument("extra", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    script_args = extra or ["--kind", "convnet", "--epochs", "6", "--steps", "60", "--batch", "256"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        watch = Path(tmp) / "stopwatch.json"
        plain = [sys.executable, str(SCRIPT), "--out", str(watch), *script_args]
        captured = [sys.executable, "-m", "scaldiag", "profile", "--out", str(Path(tmp) / "runs"), str(SCRIPT),
                    "--", "--out", str(watch), *script_args]
        for i in range(args.rounds):
            first, second = (plain, captured) if i % 2 == 0 else (captured, plain)
            a, b = rate(first, watch), rate(second, watch)
            p, c = (a, b) if i % 2 == 0 else (b, a)
            rows.append((p, c, p / c))  # time ratio captured / plain = rate plain / rate captured
            print(f"round {i + 1}: plain {p:,.0f} captured {c:,.0f} samples/s, time ratio {p / c:.3f}", flush=True)
    logs = [math.log(r) for _, _, r in rows]
    mean = statistics.mean(logs)
    half = T95.get(len(logs) - 1, 1.96) * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.inf
    lo, hi, gm = math.exp(mean - half), math.exp(mean + half), math.exp(mean)
    text = "\n".join([
        f"# Capture overhead against the script's synchronized stopwatch {args.label} ({date.today().isoformat()})",
        "",
        f"Machine: {platform.node()}, {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"backend {os.environ.get('KERAS_BACKEND', 'tensorflow')}.",
        f"Command: `python bench/bench_capture_overhead.py --rounds {args.rounds} -- {' '.join(script_args)}`; "
        "alternating order per round; samples/s of epochs 2..N by the script's own epoch stopwatch.",
        "",
        "| round | plain samples/s | under scaldiag profile | time ratio captured / plain |",
        "|---|---|---|---|",
        *[f"| {i + 1} | {p:,.0f} | {c:,.0f} | {r:.3f} |" for i, (p, c, r) in enumerate(rows)],
        "",
        f"Geometric mean time ratio {gm:.3f}, 95% interval [{lo:.3f}, {hi:.3f}] over {len(rows)} rounds. "
        f"Target: at most 1.01.",
    ])
    Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
