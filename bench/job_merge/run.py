"""The job merge is linear in ranks x collectives: 4,096 ranks in at most 20 s here, 1,000 in 5 s,
memory flat (docs/multinode.md).

Issue 37's targets, on the shared 2-core machine.

What it measures, each a fresh process on a job grown by bench/job_merge/grow.py from the real
2-rank CPU DDP job of fixtures/kineto/cpu_ddp_gloo (one rank a node directory by default: the most
nodes, the merge's worst case; 5 steps, 5 collectives a rank): ``scaldiag report JOB --format json
-o OUT`` end to end, through ``--engine local:1`` (in the command's process, one rank at a time),
the default local worker processes (``local``) and a Dask LocalCluster (``dask:2``, where Dask is
installed); and in process: ``pipeline.diagnose_job`` and the JSON writer in a Python process timed
from inside (no interpreter start or imports). Wall time, CPU time, the peak of the process tree's
summed RSS, the largest process's peak. The same job through the code of ``--old-rev`` (git archive,
its C parts built) at ``--before-ranks`` only (quadratic there: minutes at 4,096). Every JSON report
of a size must be the same bytes, across engines and against the old revision's.

    python -m bench job_merge [--ranks 1000,4096] [--ranks-per-node 1] [--repeats 1]
                              [--engines inproc,local:1,local,dask:2] [--old-rev 0c66a1b] [--before-ranks 1000]
"""  # noqa: E501

from __future__ import annotations

import argparse
import filecmp
import importlib.util
import os
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
from bench.job_merge.grow import grow  # noqa: E402

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
    parser.add_argument("--ranks", default="1000,4096", help="job sizes, ranks")
    parser.add_argument("--ranks-per-node", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--engines", default="inproc,local:1,local,dask:2")
    parser.add_argument("--old-rev", default="0c66a1b", help="the code before (git revision)")
    parser.add_argument(
        "--before-ranks", default="1000", help="sizes also run through --old-rev ('' for none)"
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


def _run(args, tmp: Path) -> str:
    engines, notes = _engines(args.engines)
    sizes = [int(x) for x in args.ranks.split(",")]
    before = {int(x) for x in args.before_ranks.split(",") if x}
    old = _before_tree(tmp, args.old_rev) if before else None
    rows, same = [], []
    for n in sizes:
        job = tmp / f"job{n}"
        job.mkdir()
        t0 = time.perf_counter()
        grow(job, n, args.ranks_per_node)
        print(f"grew {n} ranks in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        sides = [("after", ROOT, e) for e in engines]
        if n in before:
            sides += [
                (f"before ({args.old_rev})", old, e) for e in engines if e in ("inproc", "local:1")
            ]
        runs: dict[tuple[str, str], list[dict]] = {}
        outs = []
        for rep in range(args.repeats):
            for (
                label,
                code,
                engine,
            ) in sides:  # alternating within each round: the machine is shared
                out = tmp / f"job{n}_{label.split()[0]}_{engine.replace(':', '')}_{rep}.json"
                try:
                    r = _one(engine, job, out, code, args.timeout_s)
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    notes.append(f"{n} ranks, {label}, {engine}: {str(exc).splitlines()[0][:300]}")
                    continue
                print(
                    {
                        "ranks": n,
                        "side": label,
                        "engine": engine,
                        **{k: round(v, 3) for k, v in r.items()},
                    },
                    flush=True,
                )
                runs.setdefault((label, engine), []).append(r)
                outs.append(out)
        if outs:
            differ = [o.name for o in outs[1:] if not filecmp.cmp(outs[0], o, shallow=False)]
            same.append(
                f"{n} ranks: {len(outs)} JSON reports, "
                + (
                    "all the same bytes"
                    if not differ
                    else f"DIFFERENT from {outs[0].name}: {', '.join(differ)}"
                )
            )
        nnodes = -(-n // args.ranks_per_node)
        for (label, engine), rs in runs.items():
            loads = ", ".join(f"{r['load']:.1f}" for r in rs)
            rows.append(
                f"| {n:,} | {nnodes:,} | {label} | {engine} | {_cell(rs, 'wall_s')} |"
                f" {_cell(rs, 'cpu_s')} | {_cell(rs, 'tree_rss_mib', '{:,.0f}')} |"
                f" {_cell(rs, 'one_rss_mib', '{:,.0f}')} | {loads} |"
            )
    lines = [
        (
            f"Jobs of {args.ranks} ranks, {args.ranks_per_node} a node directory, each rank the"
            f" fixture's (34 KB gzipped, 1,745 events, 5 steps, 5 all-reduces); {args.repeats}"
            " round(s), the sides alternating in each. `inproc`: pipeline.diagnose_job and the"
            " JSON writer timed inside one Python process (no interpreter start or imports; its"
            " peak RSS); the others `python -m scaldiag report JOB --format json -o OUT --engine"
            " E` end to end (CPU: the process and the workers it waited for, not Dask's; memory:"
            " the process tree's summed peak and the largest process's)."
        ),
        "",
        (
            "| ranks | nodes | code | engine | wall s | CPU s | tree peak MiB | largest process MiB"
            " | load (1 min) |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
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
