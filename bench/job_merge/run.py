"""The job merge is linear in ranks x collectives with drifting clocks: 10,000 ranks in at most 30 s here, 1,000 -> 3,000 ranks at most 3.3x the time, at most 2 KB a rank, the same JSON on every engine (docs/multinode.md).

Issue 50's targets (issue 37's were 4,096 ranks in 20 s with identical clocks), on the shared
2-core machine.

What it measures, each a fresh process on a job grown by bench/job_merge/grow.py from the real
2-rank CPU DDP job of fixtures/kineto/cpu_ddp_gloo (one rank a node directory by default: the most
nodes, the merge's worst case; 5 steps, 5 collectives a rank), each node's clock off by up to
+-20 ms and running up to +-100 ppm fast or slow (``--clocks drift``, the default; ``jitter``: the
0-49 us of issue 37's runs): ``scaldiag report JOB --format json -o OUT`` end to end, through
``--engine local:1`` (in the command's process, one rank at a time), the default local worker
processes (``local``) and a Dask LocalCluster (``dask:2``, where Dask is installed); and in
process: ``pipeline.diagnose_job`` and the JSON writer in a Python process timed from inside (no
interpreter start or imports). Wall time, CPU time, the peak of the process tree's summed RSS, the
largest process's peak. Per engine, the goals: the time at 1,000 and 3,000 ranks and its ratio,
the time at 10,000, and memory a rank (the largest process's peak at the largest size less that at
the smallest, over the ranks between). Every JSON report of a size must be the same bytes, across
engines (and against ``--old-rev``'s, where ``--before-ranks`` names sizes to run it at).

    python -m bench job_merge [--ranks 1000,3000,10000] [--clocks drift] [--ranks-per-node 1]
                              [--repeats 1] [--engines inproc,local:1,local,dask:2]
                              [--old-rev REV --before-ranks 1000]
"""  # noqa: E501

from __future__ import annotations

import argparse
import filecmp
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench" / "kineto")]

from run import measure  # noqa: E402 (bench/kineto/run.py)

from bench.common import in_temporary, revision_tree  # noqa: E402
from bench.job_merge.grow import CLOCKS, grow  # noqa: E402

# The docstring's first sentence, over its line break.
CLAIM = " ".join((__doc__ or "").strip().split("\n\n")[0].split())
# In process: the merge of the job at argv[1] written as JSON to argv[2]; prints its seconds and
# peak RSS.
INPROC = """
import sys, time
from scaldiag.pipeline import diagnose_job
from scaldiag.render import write
t0, c0 = time.perf_counter(), time.process_time()
report = diagnose_job([sys.argv[1]])
with open(sys.argv[2], "w", encoding="utf-8") as f:
    write(report, "json", f)
seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(seconds, cpu, int(hwm) / 1024)
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench job_merge", description=CLAIM)
    parser.add_argument("--ranks", default="1000,3000,10000", help="job sizes, ranks")
    parser.add_argument("--clocks", default="drift", choices=CLOCKS, help="grow.py's node clocks")
    parser.add_argument("--ranks-per-node", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--engines", default="inproc,local:1,local,dask:2")
    parser.add_argument("--old-rev", default="HEAD", help="the code before (git revision)")
    parser.add_argument(
        "--before-ranks", default="", help="sizes also run through --old-rev ('' for none)"
    )
    parser.add_argument("--timeout-s", type=float, default=600)
    parser.add_argument(
        "--tmp", type=Path, help="where the jobs are grown (default: a new temporary directory)"
    )
    parser.add_argument("--out", type=Path, help="result file (default bench/results/job_merge.md)")
    args = parser.parse_args(argv)
    return in_temporary("job_merge", CLAIM, argv, lambda tmp: _run(args, tmp), args.tmp, args.out)


def _engines(spec: str) -> tuple[list[str], list[str]]:
    engines, notes = [], []
    for e in spec.split(","):
        if e.startswith("dask") and importlib.util.find_spec("distributed") is None:
            notes.append(f"{e}: not run, Dask (distributed) is not installed")
            continue
        engines.append(e)
    return engines, notes


def _before_tree(tmp: Path, rev: str) -> Path:
    return revision_tree(tmp, rev, f"before-{rev}")


def _one(engine: str, job: Path, out: Path, code: Path, timeout_s: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code)}
    if engine == "inproc":
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", INPROC, str(job), str(out)],
            cwd=code,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if done.returncode:
            raise RuntimeError(f"in process failed: {done.stderr[-2000:]}")
        seconds, cpu, hwm = map(float, done.stdout.split()[-3:])
        return {
            "wall_s": seconds,
            "process_s": time.perf_counter() - t0,
            "cpu_s": cpu,
            "tree_rss_mib": hwm,
            "one_rss_mib": hwm,
            "load": load,
        }
    return measure(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "report",
            str(job),
            "--format",
            "json",
            "-o",
            str(out),
            "--engine",
            engine,
        ],
        cwd=code,
        env=env,
        timeout_s=timeout_s,
    )


def _cell(runs: list[dict], key: str, fmt: str = "{:.1f}") -> str:
    values = [r[key] for r in runs]
    med = statistics.median(values)
    return fmt.format(med) + (
        f" ({fmt.format(min(values))}-{fmt.format(max(values))})" if len(values) > 1 else ""
    )


# Issue 50's goals, each engine's.
MAX_10K_S = 30.0
MAX_RATIO_1K_3K = 3.3
MAX_KIB_A_RANK = 2.0


def _run(args, tmp: Path) -> str:
    engines, notes = _engines(args.engines)
    sizes = [int(x) for x in args.ranks.split(",")]
    before = {int(x) for x in args.before_ranks.split(",") if x}
    old = _before_tree(tmp, args.old_rev) if before else None
    rows, same, medians = [], [], {}
    for n in sizes:
        job = tmp / f"job{n}"
        job.mkdir()
        t0 = time.perf_counter()
        grow(job, n, args.ranks_per_node, args.clocks)
        print(f"grew {n} ranks in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        sides = [("after", ROOT, e) for e in engines]
        if n in before:
            sides += [
                (f"before ({args.old_rev})", old, e) for e in engines if e in ("inproc", "local:1")
            ]
        runs, outs = _size(args, tmp, n, job, sides, notes)
        if outs:
            same.append(_same_json(n, outs))
        nnodes = -(-n // args.ranks_per_node)
        for (label, engine), rs in runs.items():
            rows.append(_row(n, nnodes, label, engine, rs))
            if label == "after":
                medians[(engine, n)] = {
                    k: statistics.median(r[k] for r in rs)
                    for k in ("wall_s", "cpu_s", "one_rss_mib")
                }
        shutil.rmtree(job, ignore_errors=True)  # the next size's files need the disk, not these
    return _text(args, rows, same, _goals(engines, sizes, medians), notes)


def _size(args, tmp: Path, n: int, job: Path, sides: list, notes: list[str]):
    """Every side's runs at one size, the sides alternating within each round (the machine is
    shared), and the JSON files they wrote."""
    runs: dict[tuple[str, str], list[dict]] = {}
    outs = []
    for rep in range(args.repeats):
        for label, code, engine in sides:
            out = tmp / f"job{n}_{label.split()[0]}_{engine.replace(':', '')}_{rep}.json"
            try:
                r = _one(engine, job, out, code, args.timeout_s)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                notes.append(f"{n} ranks, {label}, {engine}: {str(exc).splitlines()[0][:300]}")
                continue
            shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}
            print({"ranks": n, "side": label, "engine": engine, **shown}, flush=True)
            runs.setdefault((label, engine), []).append(r)
            outs.append(out)
    return runs, outs


def _same_json(n: int, outs: list[Path]) -> str:
    differ = [o.name for o in outs[1:] if not filecmp.cmp(outs[0], o, shallow=False)]
    said = "all the same bytes" if not differ else f"DIFFERENT from {outs[0].name}: {differ}"
    return f"{n:,} ranks: {len(outs)} JSON reports, {said}"


def _row(n: int, nnodes: int, label: str, engine: str, rs: list[dict]) -> str:
    loads = ", ".join(f"{r['load']:.1f}" for r in rs)
    return (
        f"| {n:,} | {nnodes:,} | {label} | {engine} | {_cell(rs, 'wall_s')} |"
        f" {_cell(rs, 'cpu_s')} | {_cell(rs, 'tree_rss_mib', '{:,.0f}')} |"
        f" {_cell(rs, 'one_rss_mib', '{:,.0f}')} | {loads} |"
    )


def _goals(engines: list[str], sizes: list[int], medians: dict) -> list[str]:
    """Per engine: the time at 1,000 and 3,000 ranks and their ratio, the time at 10,000, memory
    a rank (the largest process's peak, largest size less smallest, over the ranks between)."""
    rows = []
    small, large = min(sizes), max(sizes)
    for e in engines:
        got = {n: medians[(e, n)] for n in sizes if (e, n) in medians}
        t1, t3, t10 = (got.get(n, {}).get("wall_s") for n in (1000, 3000, 10000))
        c1, c3 = (got.get(n, {}).get("cpu_s") for n in (1000, 3000))
        ratio = t3 / t1 if t1 and t3 else None
        cpu_ratio = f"{c3 / c1:.2f}x" if c1 and c3 else "-"
        kib = None
        if small in got and large in got and large > small:
            grown = got[large]["one_rss_mib"] - got[small]["one_rss_mib"]
            kib = grown * 1024 / (large - small)
        rows.append(
            f"| {e} | {_num(t1)} | {_num(t3)} | {_judged(ratio, MAX_RATIO_1K_3K, 'x', 2)} |"
            f" {cpu_ratio} |"
            f" {_judged(t10, MAX_10K_S, ' s')} | {_judged(kib, MAX_KIB_A_RANK, ' KiB', 2)} |"
        )
    return rows


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _judged(value: float | None, limit: float, unit: str, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}{unit} ({'met' if value <= limit else 'NOT met'})"


def _text(args, rows: list[str], same: list[str], goals: list[str], notes: list[str]) -> str:
    lines = [
        (
            f"Jobs of {args.ranks} ranks, {args.ranks_per_node} a node directory, each rank the"
            f" fixture's (34 KB gzipped, 1,745 events, 5 steps, 5 all-reduces), node clocks"
            f" `{args.clocks}` (bench/job_merge/grow.py); {args.repeats} round(s), the sides"
            " alternating in each. `inproc`: pipeline.diagnose_job and the JSON writer timed"
            " inside one Python process (no interpreter start or imports; its peak RSS); the"
            " others `python -m scaldiag report JOB --format json -o OUT --engine E` end to end"
            " (CPU: the process and the workers it waited for, not Dask's; memory: the process"
            " tree's summed peak and the largest process's)."
        ),
        "",
        (
            "| ranks | nodes | code | engine | wall s | CPU s | tree peak MiB | largest process MiB"
            " | load (1 min) |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        (
            f"Goals (medians): 1,000 -> 3,000 ranks at most {MAX_RATIO_1K_3K}x the time, 10,000"
            f" ranks in at most {MAX_10K_S:.0f} s, at most {MAX_KIB_A_RANK} KiB a rank (the largest"
            " process's peak, largest size less smallest, over the ranks between); the CPU"
            " ratio beside the wall time's, which a loaded machine moves:"
        ),
        "",
        (
            "| engine | 1,000 ranks s | 3,000 ranks s | ratio | CPU ratio | 10,000 ranks s |"
            " memory a rank |"
        ),
        "|---|---|---|---|---|---|---|",
        *goals,
        "",
        "Same JSON:",
        "",
        *[f"- {s}" for s in same],
    ]
    if notes:
        lines += ["", "Notes:", "", *[f"- {x}" for x in notes]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
