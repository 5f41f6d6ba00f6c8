"""A job's ranks are reduced one at a time: 8, 32 and 64 ranks, each process holding one rank,
locally and on Dask.

What it measures (issue 26), each a fresh ``python -m scaldiag analyze JOB --json OUT --engine E``:
wall time, CPU time (the process and the workers it waited for), the peak of the process tree's
summed RSS and its largest process's peak (bench.common.TreeRss through bench/kineto/run.py's
``measure``), for jobs of 8, 32 and 64 ranks of ``--rank-mb`` MB each, grown from the real 2-GPU
DDP rank traces of fixtures/x2_devset (bench/kineto/make_trace.py) in a temporary directory, and
for one rank alone: the reference "one rank's memory". Engines: ``local:1`` (one rank at a time in
the analyzing process), ``local`` (a worker process per core, the default), ``dask:N`` (a Dask
LocalCluster of N workers started by the command). Engines alternate within each round (the
machine is shared); the load is recorded with every timing. The JSON reports of every engine are
compared: they must be the same bytes.

    python -m bench ranks [--ranks 8,32,64] [--rank-mb 25] [--repeats 2] [--engines local:1,local,dask:2]
"""  # noqa: E501

from __future__ import annotations

import argparse
import filecmp
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench" / "kineto")]

from make_trace import make  # noqa: E402
from run import analyze, loads, spread  # noqa: E402 (bench/kineto/run.py)

from bench.common import in_temporary  # noqa: E402

CLAIM = (__doc__ or "").strip().splitlines()[0]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench ranks", description=CLAIM)
    parser.add_argument("--ranks", default="8,32,64", help="job sizes, ranks")
    parser.add_argument("--rank-mb", type=float, default=25, help="each rank's trace, MB")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--engines", default="local:1,local,dask:2")
    parser.add_argument(
        "--tmp", type=Path, help="where traces are grown (default: a new temporary directory)"
    )
    parser.add_argument("--out", type=Path, help="result file (default bench/results/ranks.md)")
    args = parser.parse_args(argv)
    return in_temporary("ranks", CLAIM, argv, lambda tmp: _run(args, tmp), args.tmp, args.out)


def _run(args, tmp: Path) -> str:
    engines = args.engines.split(",")
    one = tmp / "one"
    one.mkdir()
    make(one / "rank0.pt.trace.json", args.rank_mb, rank=0, world=1)
    one_runs = [
        analyze(one / "rank0.pt.trace.json", tmp / "one.json", ROOT) for _ in range(args.repeats)
    ]
    one_rss = statistics.median(r["rss_mib"] for r in one_runs)
    rows = [
        f"| 1 rank (the reference) | | {spread(one_runs, 'wall_s')} | {spread(one_runs, 'cpu_s')} |"
        f" {spread(one_runs, 'rss_mib', '{:,.0f}')} | {spread(one_runs, 'rss_mib', '{:,.0f}')} |"
        f" 1.00 | {loads(one_runs)} |"
    ]
    same = []
    for n in [int(r) for r in args.ranks.split(",")]:
        job = tmp / f"job{n}"
        job.mkdir()
        for r in range(n):
            make(job / f"rank{r}.pt.trace.json", args.rank_mb, rank=r, world=n)
        runs: dict[str, list[dict]] = {e: [] for e in engines}
        for k in range(args.repeats):
            for engine in (
                engines[k % len(engines) :] + engines[: k % len(engines)]
            ):  # rotated each round
                runs[engine].append(
                    analyze(job, tmp / f"{n}_{engine.replace(':', '_')}.json", ROOT, engine=engine)
                )
        outputs = [tmp / f"{n}_{e.replace(':', '_')}.json" for e in engines]
        same.append(
            f"{n} ranks:"
            f" {'the same' if all(filecmp.cmp(outputs[0], o, shallow=False) for o in outputs) else 'DIFFERENT'}"  # noqa: E501
        )
        for engine in engines:
            largest = statistics.median(r["one_rss_mib"] for r in runs[engine])
            rows.append(
                f"| {n} x {args.rank_mb:g} MB | {engine} | {spread(runs[engine], 'wall_s')} |"
                f" {spread(runs[engine], 'cpu_s')} |"
                f" {spread(runs[engine], 'tree_rss_mib', '{:,.0f}')} |"
                f" {spread(runs[engine], 'one_rss_mib', '{:,.0f}')} | {largest / one_rss:.2f} |"
                f" {loads(runs[engine])} |"
            )
        shutil.rmtree(job)
    table = [
        (
            "| job | engine | wall s, median (min-max) | CPU s | peak RSS of all processes MiB |"
            " largest process MiB | largest / one rank's | load (1 min) at each run |"
        ),
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    return (
        "\n".join(table)
        + "\n\nJSON reports of the engines, byte for byte: "
        + "; ".join(same)
        + ".\n"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
