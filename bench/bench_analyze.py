"""Benchmark: `scaldiag analyze` against xprof's overview_page on one large trace.

Both run in fresh subprocesses, alternately, ``--repeat`` times each, on the
same file (made by make_large_trace.py from the real H200 trace). Reported:
wall time, events/s and peak RSS (ru_maxrss of the child), medians and the
per-round ratio, so machine noise hits both sides alike.

    python bench/bench_analyze.py --xprof-python bench/.venv-xprof/bin/python [--copies 200] [--repeat 5]

xprof is installed only in its own venv (``make bench-env``), never as a
dependency of scaldiag.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCALDIAG = """
import json, resource, sys, time
t = time.perf_counter()
from scaldiag.analyze.profile import analyze_trace
from scaldiag.rules.report import build_report
from scaldiag.readers.xplane.read import read_trace
trace = read_trace([sys.argv[1]])
report = build_report(analyze_trace(trace))
wall = time.perf_counter() - t
print(json.dumps({"wall_s": wall, "events": trace.event_count,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "steps": report.analysis.units[0].steps}))
"""

XPROF = """
import json, resource, sys, time
t = time.perf_counter()
from xprof.convert import raw_to_tool_data
data, _ = raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], "overview_page", {"use_saved_result": False})
wall = time.perf_counter() - t
assert data, "xprof returned no overview page"
print(json.dumps({"wall_s": wall, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(python: str, code: str, trace: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([python, "-c", code, trace], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--xprof-python", required=True)
    parser.add_argument("--copies", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "analyze_vs_xprof.md"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = str(Path(tmp) / "large.xplane.pb")
        subprocess.run([sys.executable, str(ROOT / "bench" / "make_large_trace.py"), trace,
                        "--copies", str(args.copies)], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        size_mb = Path(trace).stat().st_size / 1e6
        ours, theirs = [], []
        for _ in range(args.repeat):  # alternate, so drifts in machine load hit both
            ours.append(run(sys.executable, SCALDIAG, trace))
            theirs.append(run(args.xprof_python, XPROF, trace))
    write(args, ours, theirs, size_mb)


def write(args, ours, theirs, size_mb) -> None:
    events = ours[0]["events"]
    med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
    ratios = [o["wall_s"] / t["wall_s"] for o, t in zip(ours, theirs)]
    lines = [
        f"# scaldiag analyze vs xprof overview_page ({date.today().isoformat()})",
        "",
        f"Machine: {platform.node()}, {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}.",
        f"Trace: the H200 fixture tiled {args.copies}x: {events:,} events, {size_mb:.1f} MB, "
        f"{ours[0]['steps']} steps per device. {args.repeat} alternating rounds, fresh processes.",
        "",
        "| tool | wall s (median) | min-max | events/s | peak RSS MB |",
        "|---|---|---|---|---|",
        f"| scaldiag analyze (read + analyse + rules) | {med(ours, 'wall_s'):.2f} | "
        f"{min(r['wall_s'] for r in ours):.2f}-{max(r['wall_s'] for r in ours):.2f} | "
        f"{events / med(ours, 'wall_s'):,.0f} | {med(ours, 'rss_mb'):.0f} |",
        f"| xprof overview_page | {med(theirs, 'wall_s'):.2f} | "
        f"{min(r['wall_s'] for r in theirs):.2f}-{max(r['wall_s'] for r in theirs):.2f} | "
        f"{events / med(theirs, 'wall_s'):,.0f} | {med(theirs, 'rss_mb'):.0f} |",
        "",
        f"Time ratio scaldiag/xprof per round: {', '.join(f'{r:.2f}' for r in ratios)} "
        f"(median {statistics.median(ratios):.2f}). "
        f"RSS ratio: {med(ours, 'rss_mb') / med(theirs, 'rss_mb'):.2f}.",
        "",
    ]
    text = "\n".join(lines)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
