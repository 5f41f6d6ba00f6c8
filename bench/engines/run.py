"""The per-rank reduction's engine, chosen by measurement: local worker processes against Dask and
Ray (docs/engines.md).

Each configuration maps one realistic task over the same items: ``bench/engines/task.py``
reads one rank's Kineto trace (grown by bench/kineto/make_trace.py to ``--mb`` MB, ranks 0..N-1
of a job of N, in ``--dir``, kept between runs) and returns a small result. Each run is a fresh
``python bench/engines/run.py --one CONFIG`` process, so that its own peak memory and its
imports are its own; the configurations alternate over ``--rounds`` rounds (the machine is
shared). Measured:

- wall time of import + engine start-up + map + shut-down (and each part; the child's own clock);
  Ray runs through bench/engines/ray_engine.py (Ray is not kept in scaldiag: docs/engines.md);
- peak RSS (VmHWM) of the calling process, of the largest worker, and the process tree's peak
  total RSS, sampled from /proc every 50 ms by this process;
- the RSS a worker keeps once its trace is freed (the task reads it before returning);
- processes of the tree still alive after the engine closed;
- for Dask and Ray, what installing them adds to a bare scaldiag install (the files of every
  distribution their requirements pull in that scaldiag's own do not) and their import time.

Dask and Ray in the same environment: ``pip install 'scaldiag[dask]' ray`` (a configuration
whose package is missing is left out, and the result says so).

    python -m bench engines [--mb 100] [--items 8] [--rounds 3] [--dir /tmp/scaldiag-bench-engines] [--configs A,B]
"""  # noqa: E501

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import TreeRss, descendants, rss_mib  # noqa: E402
from bench.engines.task import count_events  # noqa: E402

SAMPLE_PERIOD_S = 0.05
WORKERS = 2
# name: (spec, local start method, items per local worker: 1 = a fresh process per item, None =
# reused)
CONFIGS = {
    "local:1": ("local:1", None, None),
    "local:2 spawn reused (default)": ("local:2", "spawn", None),
    "local:2 spawn fresh": ("local:2", "spawn", 1),
    "local:2 forkserver fresh": ("local:2", "forkserver", 1),
    "local:2 forkserver reused": ("local:2", "forkserver", None),
    # fork cannot be fresh per item: CPython refuses max_tasks_per_child with fork.
    "local:2 fork reused": ("local:2", "fork", None),
    "dask:2": ("dask:2", None, None),
    "ray:2": ("ray:2", None, None),
}
OPTIONAL = {
    "dask": ("distributed", "dask[distributed]"),
    "ray": ("ray", "ray"),
}  # engine: (module, requirement)
SCALDIAG_CORE = ["numpy", "protobuf", "psutil", "rich", "nvidia-ml-py"]


def _installed(config: str) -> bool:
    kind = config.split(":")[0]
    return kind not in OPTIONAL or importlib.util.find_spec(OPTIONAL[kind][0]) is not None


# --- the child: one configuration, measured from inside
# ---------------------------------------------


def one(name: str, paths: list[str]) -> dict:
    from scaldiag import engines

    spec, start_method, per_worker = CONFIGS[name]
    kind = spec.split(":")[0]
    t0 = time.perf_counter()
    if kind in OPTIONAL:
        __import__(OPTIONAL[kind][0])
    t1 = time.perf_counter()
    if kind == "ray":
        from bench.engines.ray_engine import open_ray

        context = open_ray(WORKERS)
    elif start_method is None:
        context = engines.open_engine(spec)
    else:
        context = contextlib.closing(
            engines.LocalEngine(WORKERS, start_method, per_worker)
        )  # its pool ends here
    with context as engine:
        t2 = time.perf_counter()
        results = engine.map(count_events, paths)
        t3 = time.perf_counter()
    t4 = time.perf_counter()
    time.sleep(0.5)  # what an engine stops asynchronously has had time to go
    left = descendants(os.getpid())
    return {
        "config": name,
        "import_s": t1 - t0,
        "start_s": t2 - t1,
        "map_s": t3 - t2,
        "close_s": t4 - t3,
        "total_s": t4 - t0,
        "events": [r[0] for r in results],
        "worker_pids": len({r[1] for r in results}),
        "kept_rss_mib": max(r[2] for r in results),
        "parent_hwm_mib": rss_mib(os.getpid(), "VmHWM"),
        "engine_workers": engine.workers,
        "left_after_close": [_name(p) for p in left],
    }


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:80]
    except OSError:
        return str(pid)


# --- the parent: runs each configuration in a fresh process, samples its process tree
# -----------------


def measure(name: str, paths: list[str], timeout_s: float = 600) -> dict:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        ),
    )
    cmd = [sys.executable, str(HERE / "run.py"), "--one", name, *paths]
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    tree = TreeRss(proc.pid, SAMPLE_PERIOD_S)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    finally:
        tree.stop()
    peak_by_pid = {p: mib for p, mib in tree.peak_by_pid.items() if p != proc.pid}  # the workers
    tree_peak_mib = tree.peak_sum_mib
    rows = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode or not rows:
        raise RuntimeError(f"{name}: exit {proc.returncode}: {err.strip()[-2000:]}")
    row = json.loads(rows[-1])
    row.update(
        process_wall_s=time.perf_counter() - start,
        tree_peak_mib=tree_peak_mib,
        processes=len(peak_by_pid),
        worker_peak_mib=max(peak_by_pid.values(), default=0.0),
        load_1min=os.getloadavg()[0],
    )
    return row


def make_traces(folder: Path, items: int, mb: float) -> list[str]:
    """Ranks 0..items-1 of a job of ``items``, each ``mb`` MB; files already there of about that
    size are kept."""
    sys.path.insert(0, str(ROOT / "bench" / "kineto"))
    from make_trace import SOURCES, Grower

    folder.mkdir(parents=True, exist_ok=True)
    growers = {}
    paths = []
    for rank in range(items):
        path = folder / f"rank{rank}.pt.trace.json"
        if not (path.is_file() and abs(path.stat().st_size - mb * 1e6) < 0.05 * mb * 1e6):
            if rank % 2 not in growers:  # a source's parse takes seconds: once for all its ranks
                growers[rank % 2] = Grower(SOURCES[rank % 2])
            growers[rank % 2].write(path, int(mb * 1e6), rank, items)
        paths.append(str(path))
    return paths


# --- what installing an engine adds ---------------------------------------------------------------


def _closure(requirements: list[str]) -> set[str]:
    """Every installed distribution the requirements pull in (extras and markers followed)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[tuple[str, tuple[str, ...]]] = set()
    found: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        key = (canonicalize_name(req.name), tuple(sorted(req.extras)))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue
        found.add(key[0])
        for text in dist.requires or []:
            sub = Requirement(text)
            if sub.marker is None or any(
                sub.marker.evaluate({"extra": e}) for e in (*req.extras, "")
            ):
                todo.append(sub)
    return found


def _size_mib(names: set[str]) -> float:
    total = 0
    for name in names:
        for f in metadata.distribution(name).files or []:
            with contextlib.suppress(OSError):
                total += os.path.getsize(f.locate())
    return total / 2**20


def install_cost(engine: str) -> dict:
    module, requirement = OPTIONAL[engine]
    added = _closure([requirement]) - _closure(SCALDIAG_CORE)
    version = metadata.version(requirement.split("[")[0])
    imports = []
    for _ in range(3):  # fresh interpreters; the page cache is warm after the first
        code = (
            f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
        )
        imports.append(
            float(
                subprocess.run(
                    [sys.executable, "-c", code], capture_output=True, text=True, check=True
                ).stdout
            )
        )
    return {
        "engine": engine,
        "version": version,
        "added": sorted(added),
        "added_mib": _size_mib(added),
        "import_s": statistics.median(imports),
    }


# --- the tables
# ---------------------------------------------------------------------------------------


def _spread(values: list[float], digits: int = 2) -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def table(rows: list[dict]) -> list[str]:
    by_config: dict[str, list[dict]] = {}
    for row in rows:
        by_config.setdefault(row["config"], []).append(row)
    out = [
        (
            "| engine | total s (min-max) | import s | start s | map s | close s | caller peak MiB"
            " | largest worker peak MiB | tree peak MiB | RSS a worker keeps MiB | processes | left"
            " after close |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, runs in by_config.items():

        def col(key, digits=2, runs=runs):
            return _spread([r[key] for r in runs], digits)

        left = max(len(r["left_after_close"]) for r in runs)
        out.append(
            f"| {name} | {col('total_s')} | {col('import_s')} | {col('start_s')} | {col('map_s')} |"
            f" {col('close_s')} | {col('parent_hwm_mib', 0)} | {col('worker_peak_mib', 0)} |"
            f" {col('tree_peak_mib', 0)} | {col('kept_rss_mib', 0)} |"
            f" {max(r['processes'] for r in runs)} | {left} |"
        )
    return out


def install_table(costs: list[dict]) -> list[str]:
    out = [
        (
            "| engine | version | added to a bare scaldiag install MiB | distributions added |"
            " import s (median of 3) |"
        ),
        "|---|---|---|---|---|",
    ]
    for c in costs:
        out.append(
            f"| {c['engine']} | {c['version']} | {c['added_mib']:.0f} | {len(c['added'])}:"
            f" {', '.join(c['added'])} | {c['import_s']:.2f} |"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench engines")
    parser.add_argument("--mb", type=float, default=100)
    parser.add_argument("--items", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/scaldiag-bench-engines"))
    parser.add_argument("--configs", default=",".join(CONFIGS))
    args = parser.parse_args(argv)
    from bench.common import record

    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    missing = [n for n in names if not _installed(n)]
    names = [n for n in names if n not in missing]
    paths = make_traces(args.dir, args.items, args.mb)

    def body() -> int:
        if missing:
            print(f"Left out, their package not installed: {', '.join(missing)}.\n")
        print(
            f"{args.items} ranks of {args.mb:.0f} MB (bench/kineto/make_trace.py), {WORKERS}"
            f" workers where not local:1, {args.rounds} rounds, configurations alternating (rotated"
            " each round); each cell: median (min-max over rounds).\n"
        )
        rows = []
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                row = measure(name, paths)
                print(json.dumps(row))
                rows.append(row)
        events = {tuple(row["events"]) for row in rows}
        print("\n## Time and memory\n")
        print("\n".join(table(rows)))
        print(
            f"\nSame results from every engine: {'yes' if len(events) == 1 else 'NO'} "
            f"({sum(next(iter(events))):,} events over the {args.items} ranks)."
        )
        print("\n## Installing and importing\n")
        print("\n".join(install_table([install_cost(e) for e in OPTIONAL if _installed(e)])))
        return 0 if len(events) == 1 else 1

    return record("engines", __doc__, argv if argv is not None else sys.argv[1:], body)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2], sys.argv[3:])))
    else:
        sys.exit(main())
