"""`scaldiag analyze` is linear in a trace's size, faster than xprof's overview_page, in a fraction
of its memory (docs/analyze.md).

Benchmark: `scaldiag analyze` against xprof's overview_page and the bare-parse floor, at several
sizes.

Traces are made by make_large_trace.py, tiling the real H200 trace in time
(27 MB, 270 MB and 1 GB by default: 156, 1560 and 5700 copies). Each tool
runs in a fresh subprocess, once per trace and round, the tools' order
rotating from round to round so machine noise hits all alike:

- scaldiag: read (stats typed as the pipeline does) + analyse + rules + the terminal and JSON
  reports: what `scaldiag analyze FILE --json OUT` does, argument parsing aside (its C parts where
  they are built: the result names which ran);
- xprof 2.24.2: ``xspace_to_tool_data(..., "overview_page")`` (its C++
  converter), from its own venv;
- bare parse: protobuf's own C parser (upb) reading the file into XSpace
  message objects and walking every line (``len(line.events)``): the floor
  for any tool that builds protobuf objects.

Reported per trace: wall seconds (from process start, imports included),
events/s and peak RSS (ru_maxrss of the child), medians over rounds, the
per-round speed and memory ratios of xprof to scaldiag, and per million
events, to show how each grows. Also: how fast a 100 MB zero-filled file
is rejected.

    python -m bench analyze --xprof-python bench/.venv-xprof/bin/python \\
        [--copies 156,1560,5700] [--rounds 3] [--traces DIR] [--keep]
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

from bench.common import busy_cores, record, show

ROOT = Path(__file__).resolve().parents[2]

_USAGE = """
import json, resource, sys, time
def done(t, **extra):
    u = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"wall_s": time.perf_counter() - t, "cpu_s": u.ru_utime + u.ru_stime,
                      "rss_mb": u.ru_maxrss / 1024, **extra}))
"""

SCALDIAG = (
    _USAGE
    + """
t = time.perf_counter()
import contextlib, os
from scaldiag.cli import _reuse_freed_memory
_reuse_freed_memory()  # as the command does first
from scaldiag.analyze.profile import analyze_trace
from scaldiag.commands.output import emit
from scaldiag.pipeline import read_trace
from scaldiag.rules.report import build_report
# What `scaldiag analyze FILE --json OUT` does, argument parsing aside: its memory setting, read (with
# the stats typed), analyse, rules, then the terminal report and the JSON written.
name, trace = read_trace(sys.argv[1])
report = build_report(analyze_trace(trace, name))
with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
    emit(report, os.devnull, False)
done(t, events=trace.event_count, steps=report.analysis.units[0].steps)
"""  # noqa: E501
)

XPROF = (
    _USAGE
    + """
t = time.perf_counter()
from xprof.convert import raw_to_tool_data
data, _ = raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], "overview_page", {"use_saved_result": False})
assert data, "xprof returned no overview page"
done(t)
"""  # noqa: E501
)

BARE = (
    _USAGE
    + """
t = time.perf_counter()
from scaldiag.readers.xplane.schema import XSpace
space = XSpace.FromString(open(sys.argv[1], "rb").read())
events = sum(len(line.events) for plane in space.planes for line in plane.lines)
done(t, events=events)
"""
)

REJECT = (
    _USAGE
    + """
t = time.perf_counter()
from scaldiag.errors import TraceError
from scaldiag.readers.xplane.read import read_trace
try:
    read_trace([sys.argv[1]])
    raise SystemExit("a zero-filled file was read as a trace")
except TraceError as exc:
    done(t, error=str(exc))
"""
)

TOOLS = {"scaldiag": SCALDIAG, "xprof": XPROF, "bare parse": BARE}
TARGET_X = 6  # issue 37 and 50: scaldiag at least this many times faster than xprof, every round


def run(python: str, code: str, trace: str, root: Path = ROOT) -> dict:
    env = {**os.environ, "PYTHONPATH": str(root), "TF_CPP_MIN_LOG_LEVEL": "3"}
    load = os.getloadavg()[0]  # other work on the machine when the run starts (1-minute average)
    # cwd outside the checkout, so that only PYTHONPATH says which scaldiag runs
    out = subprocess.run(
        [python, "-c", code, trace],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "load": load}


def make_trace(folder: Path, copies: int) -> Path:
    path = folder / f"h200x2_tiled_{copies}.xplane.pb"
    if not path.exists():
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "analyze" / "make_large_trace.py"),
                str(path),
                "--copies",
                str(copies),
            ],
            check=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    return path


def _main(argv: list[str]) -> int | None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--xprof-python",
        default=str(ROOT / "bench" / ".venv-xprof" / "bin" / "python"),
        help="xprof's own venv (make bench-env makes it; never a dependency of scaldiag)",
    )
    parser.add_argument(
        "--copies",
        default="156,1560,5700",
        help="copies of the fixture per trace (27 MB, 270 MB, 1 GB)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--traces", help="folder for the traces (default: a temporary one, deleted after)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the traces in --traces")
    parser.add_argument(
        "--busy-cores",
        type=int,
        default=1,
        help="processes spinning on a core each while the tools run (default 1: the load beside"
        " training that issue 37 measures under; 0 for a quiet machine)",
    )
    parser.add_argument(
        "--before",
        metavar="REV",
        help="also run scaldiag as it was at git revision REV (its C parts built in the temporary"
        " folder): its rounds and ratios beside this revision's, in the same run",
    )
    parser.add_argument(
        "--out", help="also write the table here (it always goes to bench/results/analyze.md)"
    )
    args = parser.parse_args(argv)
    if not Path(args.xprof_python).is_file():
        parser.error(f"no xprof venv at {args.xprof_python}: make bench-env makes it")
    copies = [int(c) for c in args.copies.split(",")]
    tmp = tempfile.TemporaryDirectory()
    folder = Path(args.traces or tmp.name)
    folder.mkdir(parents=True, exist_ok=True)
    traces = {c: make_trace(folder, c) for c in copies}
    args.xprof_python = os.path.abspath(
        args.xprof_python
    )  # the tools run with another working directory
    tools = dict(TOOLS)
    pythons = {"scaldiag": sys.executable, "xprof": args.xprof_python, "bare parse": sys.executable}
    roots = {name: ROOT for name in tools}
    if args.before:
        from bench.common import revision_tree

        before = f"scaldiag {args.before}"
        tools = {
            "scaldiag": SCALDIAG,
            before: SCALDIAG,
            **{k: TOOLS[k] for k in TOOLS if k != "scaldiag"},
        }
        pythons[before] = sys.executable
        roots[before] = revision_tree(Path(tmp.name), args.before, "before")
    args.tools, args.pythons, args.roots = tools, pythons, roots
    results: dict[int, dict[str, list[dict]]] = {c: {t: [] for t in tools} for c in copies}
    with busy_cores(args.busy_cores):
        _rounds(args, copies, traces, pythons, results)
    zeros = folder / "zeros_100mb.xplane.pb"
    with open(zeros, "wb") as f:
        f.truncate(100 * 10**6)
    rejected = [run(sys.executable, REJECT, str(zeros)) for _ in range(args.rounds)]
    zeros.unlink()
    sizes = {c: traces[c].stat().st_size / 1e6 for c in copies}
    if not (args.traces and args.keep):
        for path in traces.values():
            path.unlink(missing_ok=True)
    tmp.cleanup()
    write(args, copies, sizes, results, rejected)


def _rounds(args, copies, traces, pythons, results) -> None:
    for r in range(args.rounds):
        for c in copies:
            names = list(args.tools)
            names = names[r % len(names) :] + names[: r % len(names)]  # rotate who goes first
            for name in names:
                row = run(pythons[name], args.tools[name], str(traces[c]), args.roots[name])
                results[c][name].append(row)
                print(json.dumps({"copies": c, "tool": name, "round": r, **row}), flush=True)


def _versions(xprof_python: str) -> str:
    import numpy
    from google import protobuf

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        commit = "?"
    xprof = subprocess.run(
        [xprof_python, "-c", "from importlib.metadata import version; print(version('xprof'))"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    from scaldiag.analyze import hoststate
    from scaldiag.readers.xplane import read

    native = (
        "C parts built"
        if read._native() and hoststate._native()
        else "numpy only (C parts not built)"
    )
    return (
        f"Python {platform.python_version()}, numpy {numpy.__version__}, protobuf"
        f" {protobuf.__version__}, xprof {xprof}, scaldiag at {commit} ({native})"
    )


def _machine() -> str:
    model = ""
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in open("/proc/cpuinfo")
            if line.startswith("model name")
        )
        mem_gb = (
            int(
                next(
                    line.split()[1] for line in open("/proc/meminfo") if line.startswith("MemTotal")
                )
            )
            / 2**20
        )
        model += f", {mem_gb:.0f} GiB"
    except (OSError, StopIteration):
        pass
    return f"{platform.node()}, {platform.machine()}, {os.cpu_count()} cores ({model})"


def write(args, copies, sizes, results, rejected) -> None:
    def med(rows, key):
        return statistics.median(r[key] for r in rows)

    lines = [
        f"# scaldiag analyze vs xprof overview_page, 27 MB to 1 GB ({date.today().isoformat()})",
        "",
        f"Machine: {_machine()}; shared with other work, so only ratios within a round mean much.",
        f"Versions: {_versions(args.xprof_python)}.",
        f"({args.rounds} rounds, tools rotating, fresh processes; wall time from process start;"
        f" {args.busy_cores} other process(es) spinning on a core each for the whole run, started"
        " by the benchmark: --busy-cores).",
        (
            "Traces: the H200 fixture (fixtures/gpu/h200x2_jax_dataparallel.xplane.pb) tiled in"
            " time by bench/analyze/make_large_trace.py."
        ),
        "",
        (
            "| trace | tool | wall s (median, min-max) | CPU s | events/s | peak RSS MB | s per M"
            " events | MB per M events |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in copies:
        events = results[c]["scaldiag"][0]["events"]
        for name in args.tools:
            rows = results[c][name]
            wall = [r["wall_s"] for r in rows]
            lines.append(
                f"| {sizes[c]:.0f} MB, {events / 1e6:.2f} M events | {name} |"
                f" {med(rows, 'wall_s'):.2f} ({min(wall):.2f}-{max(wall):.2f}) |"
                f" {med(rows, 'cpu_s'):.2f} | {events / med(rows, 'wall_s'):,.0f} |"
                f" {med(rows, 'rss_mb'):.0f} | {med(rows, 'wall_s') / events * 1e6:.2f} |"
                f" {med(rows, 'rss_mb') / events * 1e6:.1f} |"
            )
    lines += [
        "",
        "xprof / scaldiag, per round (time: how many times faster scaldiag is; memory: peak RSS):",
        "",
    ]
    ours_names = [n for n in args.tools if n.startswith("scaldiag")]
    for c, name in ((c, name) for c in copies for name in ours_names):
        ours, theirs = results[c][name], results[c]["xprof"]
        speed = [t["wall_s"] / o["wall_s"] for o, t in zip(ours, theirs)]
        memory = [t["rss_mb"] / o["rss_mb"] for o, t in zip(ours, theirs)]
        who = "" if name == "scaldiag" else f" ({name})"
        lines.append(
            f"- {sizes[c]:.0f} MB{who}: time {', '.join(f'{x:.2f}' for x in speed)} (median "
            f"{statistics.median(speed):.2f}x; at least {TARGET_X:g}x in"
            f" {sum(x >= TARGET_X for x in speed)} of {len(speed)} rounds); memory"
            f" {', '.join(f'{x:.2f}' for x in memory)} (median {statistics.median(memory):.2f}x)"
        )
    loads = [r["load"] for c in copies for rows in results[c].values() for r in rows]
    lines += [
        "",
        (
            f"Load average (1 min) on the {os.cpu_count()} cores when each run started: median"
            f" {statistics.median(loads):.1f}, {min(loads):.1f}-{max(loads):.1f} (the busy cores"
            " and any other work; 1.0 = one core busy)."
        ),
    ]
    lines += [
        "",
        (
            f"A 100 MB zero-filled file is rejected (TraceError) in {med(rejected, 'wall_s'):.3f} s"
            f" from process start, peak RSS {med(rejected, 'rss_mb'):.0f} MB:"
            f' "{rejected[0]["error"]}"'
        ),
        "",
    ]
    show(lines, args.out)


def main(argv: list[str]) -> int:
    """``python -m bench analyze [ARGS]``: the run, its output kept as bench/results/analyze.md."""
    return record("analyze", __doc__, argv, lambda: _main(argv))
