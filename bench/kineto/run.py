"""Kineto traces read at the speed of the parser: 1 GB of one rank analyzed in at most 3 s and 700
MiB of memory, time and memory linear in size from 100 MB (issue 37; issue 25 asked 8 s and 1.5 GB).

What it measures (issue 25), each a fresh ``python -m scaldiag analyze FILE --json OUT``
(wall time, CPU time of the process, its peak RSS from wait4), on traces grown from
the real 2-GPU DDP rank traces of fixtures/x2_devset by make_trace.py, in a temporary
directory (never committed):

- one rank of 100 MB to 1 GB, ``--repeats`` times each: time and memory against size;
- 8 ranks of 100 MB each in one directory, one rank at a time in one process and in worker
  processes: peak memory (all the processes', and the largest one's) against one 100 MB rank's;
- the 100 MB rank through revision 088b4d0 (the json.loads reader, built from git in
  the temporary directory), side by side (HolisticTraceAnalysis 0.5 was a third side until
  issue 48: 278 s and 5 GB at 100 MB, docs/pytorch.md; ``git show 2996455:bench/kineto/run.py``);
- the largest trace read with both cores (the split scan: a part per core, stream.py) and with
  one (the process held to one core by its CPU affinity: the single scan), alternating
  ``--split-rounds`` times: the whole command and the read alone (``read_trace``, in a fresh
  process), the two side by side with their ratio per round (issue 50: 1 GB in at most 1.0 s).

The load average is recorded with every timing: the machine is shared.

    python -m bench kineto [--sizes-mb 100,250,500,1000] [--repeats 3] [--ranks 8] [--no-before]
        [--split-rounds 5]
"""  # noqa: E501

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from make_trace import make  # noqa: E402

from bench.common import TreeRss, in_temporary, revision_tree  # noqa: E402

CLAIM = " ".join((__doc__ or "").strip().split("\n\n")[0].split())  # the first paragraph
BEFORE_REV = "088b4d0"
# A job's ranks through the engines (scaldiag/engines.py): in the analyzing process one rank at a
# time, and in worker processes, one per core (the default).
ENGINES = [
    ("local:1", "one rank at a time in one process (--engine local:1)"),
    ("local", "worker processes, one per core (the default)"),
]


def measure(
    cmd: list[str],
    cwd: Path,
    env: dict | None = None,
    timeout_s: float | None = None,
    cores: set[int] | None = None,
    keep_stdout: bool = False,
) -> dict:
    """Wall s, CPU s (user + system, the process and the workers it waited for) and peak RSS MiB of
    one process
    (wait4), the peak of its process tree's summed RSS and the largest peak (VmHWM) of any one
    process in it (bench.common.TreeRss, every 20 ms: worker processes); the 1-minute load when it
    started. Past ``timeout_s`` the process is stopped and RuntimeError says so. ``cores``: the
    CPUs the process may run on (its affinity, which the reader's split follows)."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE if keep_stdout else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores is not None else None,
    )
    timer = threading.Timer(timeout_s, proc.kill) if timeout_s else None
    if timer:
        timer.start()
    tree = TreeRss(proc.pid)
    _, status, usage = os.wait4(proc.pid, 0)
    tree.stop()
    wall = time.perf_counter() - start
    if timer:
        timer.cancel()
        if wall >= timeout_s:
            raise RuntimeError(
                f"not finished in {timeout_s:.0f} s (stopped; {usage.ru_maxrss / 1024:,.0f} MiB by"
                " then)"
            )
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.stderr.close()
    said = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    if proc.stdout:
        proc.stdout.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} failed ({os.waitstatus_to_exitcode(status)}): {err[-2000:]}"
        )
    return {
        "said": said,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss_mib": usage.ru_maxrss / 1024,
        "load": load,
        "tree_rss_mib": max(tree.peak_sum_mib, usage.ru_maxrss / 1024),
        "one_rss_mib": max([*tree.peak_by_pid.values(), usage.ru_maxrss / 1024]),
    }


def analyze(
    path: Path,
    out: Path,
    root: Path,
    env: dict | None = None,
    engine: str | None = None,
    cores: set[int] | None = None,
) -> dict:
    return measure(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "analyze",
            str(path),
            "--json",
            str(out),
            *(["--engine", engine] if engine else []),
        ],
        cwd=root,
        env=env,
        cores=cores,
    )


# The read alone, in a fresh process: imports, then read_trace timed (what the split changes).
READ_ONLY = """
import sys, time
from scaldiag.cli import _reuse_freed_memory
_reuse_freed_memory()
from scaldiag.pipeline import read_trace
t = time.perf_counter()
read_trace(sys.argv[1])
print(time.perf_counter() - t)
"""


def read_alone(path: Path, root: Path, cores: set[int] | None) -> dict:
    run = measure(
        [sys.executable, "-c", READ_ONLY, str(path)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        cores=cores,
        keep_stdout=True,
    )
    return {**run, "read_s": float(run["said"].strip().splitlines()[-1])}


def split_rows(trace: Path, size: int, args, tmp: Path) -> str:
    """The trace with both cores and with one, alternating rounds: the whole command and the read
    alone, side by side, and the ratio of each round."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return "\n(the split scan against the single one: not measured, one core here)\n"
    one, both = {cores[-1]}, set(cores)
    runs: dict[str, list[dict]] = {"one": [], "both": []}
    reads: dict[str, list[dict]] = {"one": [], "both": []}
    for r in range(args.split_rounds):
        for how in ("one", "both") if r % 2 == 0 else ("both", "one"):
            held = one if how == "one" else both
            runs[how].append(analyze(trace, tmp / "out.json", args.scaldiag_root, cores=held))
            reads[how].append(read_alone(trace, args.scaldiag_root, held))
    lines = [
        f"\n## {size / 1e6:,.0f} MB, the split scan (both cores) against the single scan (one"
        " core)\n",
        "| | whole command, wall s, median (min-max) | CPU s | read alone, s | peak RSS MiB |"
        " load (1 min) at each run |",
        "|---|---|---|---|---|---|",
    ]
    names = {
        "both": f"both cores ({len(both)}): a part per core",
        "one": "one core (affinity): the single scan",
    }
    for how in ("both", "one"):
        lines.append(
            f"| {names[how]} | {spread(runs[how], 'wall_s', '{:.2f}')} |"
            f" {spread(runs[how], 'cpu_s', '{:.2f}')} | {spread(reads[how], 'read_s', '{:.2f}')} |"
            f" {spread(runs[how], 'rss_mib', '{:,.0f}')} | {loads(runs[how])} |"
        )
    whole = [o["wall_s"] / b["wall_s"] for o, b in zip(runs["one"], runs["both"])]
    read = [o["read_s"] / b["read_s"] for o, b in zip(reads["one"], reads["both"])]
    lines += [
        "",
        "One core's time over both cores', per round (how much faster the split makes it): whole"
        f" command {', '.join(f'{x:.2f}' for x in whole)} (median {statistics.median(whole):.2f}x);"
        f" the read {', '.join(f'{x:.2f}' for x in read)} (median {statistics.median(read):.2f}x).",
        f"Both cores: the read at most 1.0 s in {sum(r['read_s'] <= 1.0 for r in reads['both'])}"
        f" of {len(reads['both'])} rounds, the whole command in"
        f" {sum(r['wall_s'] <= 1.0 for r in runs['both'])} of {len(runs['both'])}.",
    ]
    return "\n".join(lines) + "\n"


def spread(runs: list[dict], key: str, fmt: str = "{:.1f}") -> str:
    values = [r[key] for r in runs]
    med = statistics.median(values)
    return fmt.format(med) + (
        f" ({fmt.format(min(values))}-{fmt.format(max(values))})" if len(values) > 1 else ""
    )


def loads(runs: list[dict]) -> str:
    return ", ".join(f"{r['load']:.1f}" for r in runs)


def before_tree(tmp: Path) -> Path:
    """Revision 088b4d0 (the whole-document json.loads reader), its C parts built, in ``tmp``."""
    return revision_tree(tmp, BEFORE_REV, "before")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench kineto", description=CLAIM)
    parser.add_argument("--sizes-mb", default="100,250,500,1000", help="one-rank trace sizes, MB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--ranks", type=int, default=8, help="ranks of --rank-mb each, in one directory"
    )
    parser.add_argument("--rank-mb", type=float, default=100)
    parser.add_argument(
        "--no-gzip", action="store_true", help="leave out the largest trace gzipped"
    )
    parser.add_argument(
        "--no-before", action="store_true", help=f"leave the reader of {BEFORE_REV} out"
    )
    parser.add_argument(
        "--scaldiag-root",
        type=Path,
        default=ROOT,
        help="the checkout whose scaldiag runs (default: this one)",
    )
    parser.add_argument(
        "--tmp", type=Path, help="where traces are grown (default: a new temporary directory)"
    )
    parser.add_argument(
        "--split-rounds",
        type=int,
        default=5,
        help="rounds of the largest trace with both cores and with one (0: not measured)",
    )
    parser.add_argument("--out", type=Path, help="result file (default bench/results/kineto.md)")
    args = parser.parse_args(argv)
    return in_temporary("kineto", CLAIM, argv, lambda tmp: _run(args, tmp), args.tmp, args.out)


def _run(args, tmp: Path) -> str:
    sizes = [float(s) for s in args.sizes_mb.split(",")]
    rows, by_size = [], {}
    for mb in sizes:
        trace = tmp / f"rank0_{mb:g}mb.pt.trace.json"
        events, size = make(trace, mb)
        runs = [analyze(trace, tmp / "out.json", args.scaldiag_root) for _ in range(args.repeats)]
        by_size[mb] = (size, runs)
        rows.append(
            f"| 1 rank, {size / 1e6:,.0f} MB ({events:,} events) | {spread(runs, 'wall_s')} | "
            f"{spread(runs, 'cpu_s')} | {spread(runs, 'rss_mib', '{:,.0f}')} | "
            f"{statistics.median(r['wall_s'] for r in runs) / size * 1e9:.2f} | "
            f"{statistics.median(r['rss_mib'] for r in runs) / size * 1e6:.2f} | {loads(runs)} |"
        )
        if mb == max(sizes) and not args.no_gzip:
            rows.append(_gzipped_row(trace, size, args.scaldiag_root, tmp))
        if mb == max(sizes) and args.split_rounds:
            split = split_rows(trace, size, args, tmp)
        if mb != args.rank_mb:
            trace.unlink()
    fits = _linear_fits(by_size)
    table = [
        (
            "| trace | wall s, median (min-max) | CPU s | peak RSS MiB | wall s per GB | MiB RSS"
            " per MB | load (1 min) at each run |"
        ),
        "|---|---|---|---|---|---|---|",
        *rows,
    ]

    job = tmp / "job"
    job.mkdir()
    for r in range(args.ranks):
        make(job / f"rank{r}.pt.trace.json", args.rank_mb, rank=r, world=args.ranks)
    one_size, one_runs = by_size.get(args.rank_mb, (None, None))
    ratio = ""
    for engine, how in ENGINES:
        job_runs = [
            analyze(job, tmp / "out.json", args.scaldiag_root, engine=engine)
            for _ in range(args.repeats)
        ]
        table.append(
            f"| {args.ranks} ranks x {args.rank_mb:g} MB, {how} | {spread(job_runs, 'wall_s')} |"
            f" {spread(job_runs, 'cpu_s')} | {spread(job_runs, 'tree_rss_mib', '{:,.0f}')} (largest"
            f" process {spread(job_runs, 'one_rss_mib', '{:,.0f}')}) | | | {loads(job_runs)} |"
        )
        if one_runs:
            one_rss = statistics.median(r["rss_mib"] for r in one_runs)
            job_rss = statistics.median(r["tree_rss_mib"] for r in job_runs)
            largest = statistics.median(r["one_rss_mib"] for r in job_runs)
            ratio += (
                f"\n{args.ranks} ranks, {how}: peak RSS of all processes {job_rss / one_rss:.2f}x"
                f" one {args.rank_mb:g} MB rank's ({job_rss:,.0f} MiB against {one_rss:,.0f} MiB);"
                f" the largest process {largest / one_rss:.2f}x.\n"
            )
    shutil.rmtree(job)

    side = _side_by_side(args, tmp, one_runs)
    return (
        "## Time and memory against size\n\n"
        + "\n".join(table)
        + "\n"
        + (split if args.split_rounds else "")
        + "\n\n"
        + fits
        + "\n"
        + ratio
        + side
        + "\nJSON output (not measured here: the tests check it): on every Kineto fixture `analyze"
        " --json` through the streaming reader is byte-identical to the reference reader's"
        " through today's analysis (tests/test_kineto_golden.py). It gave revision"
        f" {BEFORE_REV}'s bytes on that revision's analysis (tests/golden/kineto_reader/); the"
        " analysis has moved on since, and a job's figures changed by design when each device"
        " came to be measured against its own rank's host threads only (docs/pytorch.md, \"A"
        " job's ranks, one at a time\"); the one-rank fixtures' reports did not change with"
        " it.\n"
    )


def _linear_fits(by_size: dict) -> str:
    """Least-squares lines through the medians (a fixed part plus a part per GB) and how far each
    size is off."""
    import numpy as np

    if len(by_size) < 3:
        return ""
    gb = np.array([size / 1e9 for size, _ in by_size.values()])
    out = []
    for key, unit in (("wall_s", "s"), ("cpu_s", "CPU s"), ("rss_mib", "MiB")):
        y = np.array([statistics.median(r[key] for r in runs) for _, runs in by_size.values()])
        slope, fixed = np.polyfit(gb, y, 1)
        off = np.abs(y - (fixed + slope * gb)) / y
        out.append(
            f"{key}: {fixed:,.1f} {unit} + {slope:,.1f} {unit} per GB, each size within"
            f" {off.max():.0%} of the line"
        )
    return "Linear in size (least squares through the medians): " + "; ".join(out) + "."


def _gzipped_row(trace: Path, size: int, root: Path, tmp: Path) -> str:
    """The largest trace gzipped (level 6, as gzip does by default): read under the caps of
    readers/files.py."""
    import zlib

    packed = trace.with_suffix(".json.gz")
    with open(trace, "rb") as src, open(packed, "wb") as dst:
        z = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        while chunk := src.read(16 << 20):
            dst.write(z.compress(chunk))
        dst.write(z.flush())
    runs = [analyze(packed, tmp / "out.json", root)]
    ratio = size / packed.stat().st_size
    packed.unlink()
    return (
        f"| the same, gzipped ({ratio:.0f}x: under the caps of 100x and 1 GiB) |"
        f" {spread(runs, 'wall_s')} | {spread(runs, 'cpu_s')} |"
        f" {spread(runs, 'rss_mib', '{:,.0f}')} | | | {loads(runs)} |"
    )


def _side_by_side(args, tmp: Path, one_runs: list[dict] | None) -> str:
    trace = tmp / f"rank0_{args.rank_mb:g}mb.pt.trace.json"
    if not one_runs or not trace.exists():
        return ""
    lines = [
        f"\n## One {args.rank_mb:g} MB rank, side by side\n",
        "| reader | wall s | CPU s | peak RSS MiB | load | scaldiag faster: wall, CPU |",
        "|---|---|---|---|---|---|",
    ]
    ours = (
        statistics.median(r["wall_s"] for r in one_runs),
        statistics.median(r["cpu_s"] for r in one_runs),
    )
    lines.append(
        f"| scaldiag (this revision) | {spread(one_runs, 'wall_s')} | {spread(one_runs, 'cpu_s')} |"
        f" {spread(one_runs, 'rss_mib', '{:,.0f}')} | {loads(one_runs)} | |"
    )
    if not args.no_before:
        tree = before_tree(tmp)
        runs = [analyze(trace, tmp / "out.json", root=tree)]
        lines.append(
            f"| scaldiag {BEFORE_REV} (json.loads, one dict per event) | {spread(runs, 'wall_s')} |"
            f" {spread(runs, 'cpu_s')} | {spread(runs, 'rss_mib', '{:,.0f}')} | {loads(runs)} |"
            f" {runs[0]['wall_s'] / ours[0]:.1f}x, {runs[0]['cpu_s'] / ours[1]:.1f}x |"
        )
    return (
        "\n".join(lines)
        + "\n(one run of the revision before; the ratio is against scaldiag's median)\n"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
