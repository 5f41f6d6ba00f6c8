"""No damaged trace, Kineto file or run directory makes scaldiag crash, hang or run out of memory
(docs/reliability.md).

The long fuzz run: 10,000+ damaged traces, run and sweep directories; 0 uncaught exceptions
expected.

    python -m bench fuzz [--cases N]
    python -m bench fuzz --mode kineto --cases 10000 [--jobs J]
    python -m bench fuzz --mode rundir --cases 10000 [--jobs J]
    python -m bench fuzz --mode job --cases 10000 [--jobs J]
    python -m bench fuzz --mode calibration --cases 10000 [--jobs J]
    python -m bench fuzz --mode try --cases 20000 [--jobs J]
    python -m bench fuzz --mode kineto --only N       (case N again, alone)

``--mode kineto``: the real Kineto fixtures (fixtures/kineto, fixtures/x2_devset/torch_ddp_sync_*)
with numbers set to huge, negative, non-numeric, unicode-digit and unparseable values (1e999999,
5,000 digits), fields dropped and duplicated, events duplicated and shuffled, bytes truncated,
flipped and inserted, gzip truncated, padded, multi-member, and gzip bombs (2-40 MB of text in 2-40
kB), one file or two ranks, through ``analyze``. ``--mode rundir``: copies of fixtures/runs/* and
the H200 PyTorch run with 1-3 damages (deleted, emptied, truncated, bit-flipped, invalid UTF-8, a
JSON array, nesting 5,000 deep, a field or a JSONL row set to such values, a directory, a FIFO, a
link to /dev/zero, /dev/urandom or /dev/null, a 2 MB line, duplicated lines, rank directories named
rank1, rank², rank-1, ...) through ``report`` (terminal, JSON, HTML, Perfetto), ``check`` (also as
``--baseline``), ``compare`` and ``analyze``. ``--mode job``: damaged node directories of a
multi-node job through ``report NODE_DIR...`` (bench/fuzz/job_cases.py), checking also that an
existing ``-o`` file is never lost when the merge fails. ``--mode calibration``: damaged saved
calibrations (the cache folder, $SCALDIAG_CALIBRATION) through report, check and compare of the GPU
sweep (bench/fuzz/calibration_cases.py). ``--mode try``: hostile run directories and hostile
scripts through ``try``'s rounds, signalled at random times (bench/fuzz/try_cases.py; a real
template run directory is profiled once a run, a few seconds; each case's ``try`` runs in a process
forked from the worker). The others call the CLI's ``main(argv)`` in process; an exit 70 is run
again with ``--debug`` for its traceback. Case N is drawn from (seed, mode, N) alone: the same
under any ``--jobs``.

The generators are tests/test_fuzz.py's (hypothesis strategies, drawn here
with a fixed seed per target so a run is reproducible). Seeds: the
hand-built trace of the tests, and the real fixtures (TF CPU traces, the
H200 JAX trace) for mutation. Each case runs under a 20 s alarm (a hang
is a failure) and the peak RSS of the process is reported. Any exception
other than ScaldiagError is counted, and its first instances printed.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import glob
import gzip
import io
import json
import os
import platform
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench.common import record

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

try:  # the xplane mode's generators; the kineto and rundir modes need neither
    import test_fuzz as fz
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:
    fz = None

CASE_TIMEOUT_S = 20


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def _main(argv: list[str]) -> int | None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--cases", type=int, default=10_000, help="total cases over the four targets"
    )
    parser.add_argument("--out", type=Path, help="write the result as markdown here")
    parser.add_argument(
        "--mode",
        choices=["xplane", *CLI_MODES],
        default="xplane",
        help=(
            "xplane: the hypothesis generators (default); kineto: mutated Kineto traces through"
            " `analyze`; rundir: damaged run directories through report, check, compare; job:"
            " damaged node directories through `report NODE_DIR...`; calibration: damaged"
            " calibration files"
        ),
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="kineto, rundir: case N draws from (seed, mode, N)"
    )
    parser.add_argument(
        "--only", type=int, metavar="N", help="kineto, rundir: run case N alone (to reproduce it)"
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="kineto, rundir: worker processes (case N is the same)"
    )
    parser.add_argument(
        "--time-limit", type=float, help="kineto, rundir: stop drawing cases after this many s"
    )
    args = parser.parse_args(argv)
    if args.mode != "xplane":
        return run_cli_mode(
            args.mode, args.cases, args.seed, args.out, args.only, args.jobs, args.time_limit
        )
    fixtures = [
        Path(p).read_bytes()
        for p in sorted(glob.glob(str(ROOT / "fixtures" / "**" / "*.xplane.pb"), recursive=True))
    ]
    seeds = [fz.SEED, *fixtures]
    share = {
        "mutated traces (hand-built seed and real fixtures)": 0.3,
        "generated traces, stats of any type": 0.2,
        "damaged run directories (with and without a trace)": 0.35,
        "damaged sweeps (a failed point or not)": 0.15,
    }
    targets = {
        list(share)[0]: (
            st.tuples(st.sampled_from(range(len(seeds))), fz.MUTATIONS),
            lambda case: fz.trace_case(fz._mutate(seeds[case[0]], case[1])),
        ),
        list(share)[1]: (fz.generated_trace(), fz.trace_case),
        list(share)[2]: (
            st.tuples(fz.DAMAGES, st.booleans()),
            lambda case: fz.run_case(case[0], fz.SEED if case[1] else None),
        ),
        list(share)[3]: (st.tuples(fz.DAMAGES, st.booleans()), lambda case: fz.sweep_case(*case)),
    }
    signal.signal(signal.SIGALRM, _alarm)
    results: dict[str, collections.Counter] = {}
    failures: list[str] = []
    slowest = 0.0
    started = time.time()
    for name, (strategy, run) in targets.items():
        count = collections.Counter()
        n = max(1, int(args.cases * share[name]))
        worst = _make_case(name, strategy, run, count, failures, n)()
        slowest = max(slowest, worst)
        results[name] = count
        print(f"{name}: {dict(count)}", file=sys.stderr)
    wall = time.time() - started
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    text = report(results, failures, wall, rss_mb, slowest, args.cases)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 1 if failures else 0


def _make_case(name, strategy, run, count, failures, n):
    slowest = [0.0]

    @settings(
        max_examples=n,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )
    @given(strategy)
    def case(value):
        t0 = time.perf_counter()
        signal.alarm(CASE_TIMEOUT_S)
        try:
            count[run(value)] += 1
        except Hang:
            count["hang"] += 1
            failures.append(f"{name}: hang over {CASE_TIMEOUT_S} s")
        except Exception as exc:
            count["uncaught"] += 1
            if len(failures) < 20:
                failures.append(
                    f"{name}: {type(exc).__name__}: {exc}\n" + traceback.format_exc(limit=-4)
                )
        finally:
            signal.alarm(0)
            slowest[0] = max(slowest[0], time.perf_counter() - t0)

    def run_all() -> float:
        case()
        return slowest[0]

    return run_all


def report(results, failures, wall, rss_mb, slowest, cases) -> str:
    total = collections.Counter()
    for c in results.values():
        total.update(c)
    lines = [
        "# Long fuzz run",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M %Z')}",
        (
            f"- machine: {platform.node()}, {platform.machine()}, {platform.processor() or '?'}, "
            f"Python {platform.python_version()}, {platform.system()} {platform.release()}"
        ),
        f"- command: `python -m bench fuzz --cases {cases}`",
        (
            f"- wall time: {wall:.0f} s; slowest case {slowest:.2f} s (limit {CASE_TIMEOUT_S} s); "
            f"peak RSS of the whole run {rss_mb:.0f} MiB"
        ),
        "",
        "| target | cases | report | ScaldiagError (exit 2) | uncaught | hangs |",
        "|---|---|---|---|---|---|",
    ]
    for name, c in [*results.items(), ("**all**", total)]:
        lines.append(
            f"| {name} | {sum(c.values())} | {c['ok']} | {c['error']} | {c['uncaught']} |"
            f" {c['hang']} |"
        )
    lines += [
        "",
        (
            "Hypothesis counts cases it generated; it may run a few more than asked (shrinking) or"
            " fewer (when a strategy's space is exhausted)."
        ),
    ]
    if failures:
        lines += ["", "## Failures (first 20)", "", "```", *failures, "```"]
    return "\n".join(lines) + "\n"


# --- --mode kineto / --mode rundir: the CLI itself, in process
# ------------------------------------------------

CLI_MODES = ("kineto", "rundir", "job", "calibration", "try")
SLOW_S = 10  # a case over this is a failure ("a hang")
ABORT_S = 30  # and one still running here is stopped, so the run goes on
INTERNAL_ERROR = 70


class Abort(BaseException):  # not an Exception: scaldiag's `except Exception` must not swallow it
    pass


def _abort(signum, frame):
    raise Abort()


class Raw:
    """A JSON token written as is (json cannot write 1e999999 or a 5,000-digit integer)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self):
        return f"Raw({self.text[:40]!r}{'...' if len(self.text) > 40 else ''})"


WEIRD = [
    0,
    -1,
    -(10**18),
    2**62,
    2**63 - 1,
    2**63,
    -(2**63) - 1,
    2**64,
    10**16,
    10**19,
    10**30,
    2**70,
    1.5,
    0.1,
    -0.0,
    1e308,
    -1e308,
    5e-324,
    float("nan"),
    float("inf"),
    "abc",
    "",
    "12",
    "-3",
    "1e5",
    "\u00b2",
    "\u0661\u0662\u0663",
    "\uff11\uff12",
    "\u202e",
    "x" * 100_000,
    None,
    True,
    False,
    [],
    {},
    [1, 2],
    {"a": 1},
    [[[[[]]]]],
    Raw("1e999999999"),
    Raw("1e999999"),
    Raw("-1e999999"),
    Raw("1E400"),
    Raw("9" * 4301),
    Raw("9" * 5000),
    Raw("1" + "0" * 400),
    Raw("-" + "9" * 30),
    Raw("Infinity"),
    Raw("-Infinity"),
    Raw("NaN"),
    Raw("0." + "0" * 500 + "1"),
    Raw("1e-999999999"),
    Raw("\u00b2"),
    Raw("00012"),
    Raw("1."),
]
EVENT_FIELDS = [
    "ts",
    "dur",
    "pid",
    "tid",
    "ph",
    "name",
    "cat",
    "id",
    "args",
    "args.device",
    "args.stream",
    "args.bytes",
    "args.External id",
    "args.correlation",
    "args.Sequence number",
    "args.memory bandwidth (GB/s)",
    "args.Input Dims",
    "args.rank",
    "args.Collective name",
    "args.In msg nelems",
    "args.dtype",
    "args.Process Group Ranks",
    "args.ProfilerStep",
]
TOP_FIELDS = [
    "baseTimeNanoseconds",
    "traceEvents",
    "deviceProperties",
    "distributedInfo",
    "distributedInfo.rank",
    "distributedInfo.world_size",
    "distributedInfo.backend",
    "displayTimeUnit",
    "schemaVersion",
    "cuda_runtime_version",
]


SHORT_WEIRD = [v for v in WEIRD if len(repr(v)) <= 64]


def _weird(rng):
    return rng.choice(WEIRD)


def _set_path(obj: dict, path: str, value, rng) -> dict:
    """A copy of ``obj`` with ``a.b`` set (copies along the path only); 'DROP' deletes it."""
    obj = dict(obj)
    head, _, rest = path.partition(".")
    if rest:
        inner = obj.get(head)
        obj[head] = _set_path(inner if isinstance(inner, dict) else {}, rest, value, rng)
    elif value == "DROP":
        obj.pop(head, None)
    else:
        obj[head] = value
    return obj


def _dumps(obj) -> bytes:
    raws: dict[
        str, int
    ] = {}  # one placeholder a distinct token, replaced in one pass each (not one per use)

    def default(o):
        if isinstance(o, Raw):
            return f"\x00RAW{raws.setdefault(o.text, len(raws))}\x00"
        raise TypeError(type(o))

    text = json.dumps(obj, default=default)
    for raw, i in raws.items():
        text = text.replace(json.dumps(f"\x00RAW{i}\x00"), raw)
    return text.encode("utf-8", "surrogatepass")


def _mutate_kineto(trace: dict, rng, log: list) -> dict:
    events = trace.get("traceEvents")
    events = list(events) if isinstance(events, list) else []
    trace = dict(trace)
    for _ in range(rng.randint(1, 4)):
        op = rng.choice(["event", "event", "event", "many", "top", "drop", "dup", "reorder"])
        if op == "event" and events:
            i, field, value = rng.randrange(len(events)), rng.choice(EVENT_FIELDS), _weird(rng)
            if isinstance(events[i], dict):
                events[i] = _set_path(events[i], field, value, rng)
            log.append(f"event[{i}].{field}={value!r:.60}")
        elif (
            op == "many" and events
        ):  # one field over many events: distinct ids, all huge, all text
            field = rng.choice(
                ["pid", "tid", "args.device", "args.stream", "ts", "dur", "args.External id"]
            )
            how = rng.choice(["distinct", "same", "drop"])
            value = rng.choice(
                SHORT_WEIRD
            )  # over every event: 100 kB x 10,000 events is no trace, it is 1 GB
            share = rng.choice([0.1, 0.5, 1.0])
            for i in range(len(events)):
                if isinstance(events[i], dict) and rng.random() < share:
                    v = i * 7919 if how == "distinct" else ("DROP" if how == "drop" else value)
                    events[i] = _set_path(events[i], field, v, rng)
            log.append(
                f"{how} {field} on {share:.0%} of events"
                + (f" ={value!r:.40}" if how == "same" else "")
            )
        elif op == "top":
            field = rng.choice(TOP_FIELDS)
            value = rng.choice([_weird(rng), "DROP"])
            if field == "traceEvents":
                if value == "DROP":
                    events = []
                trace = _set_path(trace, field, value, rng)
                log.append(f"traceEvents={value!r:.40}")
                return trace  # the events list is replaced: nothing else to do
            trace = _set_path(trace, field, value, rng)
            log.append(f"{field}={value!r:.60}")
        elif op == "drop" and events:
            field = rng.choice(EVENT_FIELDS)
            share = rng.choice([0.01, 0.3, 1.0])
            for i in range(len(events)):
                if isinstance(events[i], dict) and rng.random() < share:
                    events[i] = _set_path(events[i], field, "DROP", rng)
            log.append(f"drop {field} from {share:.0%}")
        elif op == "dup" and events:
            picked = [rng.randrange(len(events)) for _ in range(rng.choice([1, 10, len(events)]))]
            events += [events[i] for i in picked]
            log.append(f"duplicate {len(picked)} events")
        elif op == "reorder" and events:
            rng.shuffle(events)
            log.append("shuffle events")
    trace["traceEvents"] = events
    return trace


def _mutate_bytes(data: bytes, rng, log: list) -> bytes:
    op = rng.choice(["none", "none", "none", "truncate", "flip", "insert", "dupkey", "utf8"])
    if op == "truncate":
        at = rng.randrange(len(data) + 1)
        data = data[:at]
        log.append(f"truncate at {at}")
    elif op == "flip":
        data = bytearray(data)
        for _ in range(rng.randint(1, 20)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        data = bytes(data)
        log.append("bit flips")
    elif op == "insert":
        at = rng.randrange(len(data) + 1)
        junk = rng.choice(
            [
                b"\x00",
                b"}",
                b"]",
                b",",
                b'{"ts":',
                b"\xff\xfe",
                bytes(rng.randrange(256) for _ in range(8)),
            ]
        )
        data = data[:at] + junk + data[at:]
        log.append(f"insert {junk!r} at {at}")
    elif op == "dupkey":  # a key twice in one object: the second wins in json.loads
        key = rng.choice([b'"ts"', b'"pid"', b'"dur"', b'"traceEvents"', b'"baseTimeNanoseconds"'])
        at = data.find(key)
        if at >= 0:
            data = data[:at] + key + b": " + _dumps(_weird(rng)) + b", " + data[at:]
            log.append(f"duplicate key {key.decode()}")
    elif op == "utf8":
        at = rng.randrange(len(data) + 1)
        data = data[:at] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80"]) + data[at:]
        log.append("invalid UTF-8")
    return data


def _bomb(size: int) -> bytes:
    """A valid Kineto trace whose one event's name is ``size`` bytes of 'A' (~1000x deflated)."""
    return gzip.compress(
        b'{"traceEvents": [{"ph": "X", "name": "'
        + b"A" * size
        + b'", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}',
        compresslevel=9,
    )


class KinetoCases:
    SOURCES = [
        "fixtures/kineto/cpu_ddp_gloo/plugins/profile/torch/rank0.pt.trace.json.gz",
        "fixtures/kineto/cpu_ddp_gloo/plugins/profile/torch/rank1.pt.trace.json.gz",
        "fixtures/kineto/h200_cuda/h200.1796109284225199498.pt.trace.json.gz",
        "fixtures/kineto/h200_ddp_gloo_1gpu/rank0.pt.trace.json.gz",
        "fixtures/kineto/synthetic_gpu/rank0.pt.trace.json",
        "fixtures/kineto/synthetic_gpu/rank1.pt.trace.json",
        "fixtures/kineto/h200_healthy_run/trace/plugins/profile/torch/rank0.pt.trace.json.gz",
        "fixtures/x2_devset/torch_ddp_sync_1gpu_plain/rank0.pt.trace.json.gz",
        "fixtures/x2_devset/torch_ddp_sync_2gpu/rank0.pt.trace.json.gz",
        "fixtures/x2_devset/torch_ddp_sync_2gpu/rank1.pt.trace.json.gz",
    ]
    PAIRS = [(0, 1), (4, 5), (8, 9)]  # two ranks of one job: one of them mutated
    WEIGHTS = [
        3,
        1,
        3,
        1,
        3,
        1,
        2,
        2,
        2,
        1,
    ]  # h200_ddp_gloo_1gpu is 2.4 MB of JSON: drawn less often

    def __init__(self):
        self.traces = []
        for rel in self.SOURCES:
            raw = (ROOT / rel).read_bytes()
            self.traces.append(json.loads(gzip.decompress(raw) if rel.endswith(".gz") else raw))
        self.bombs = [_bomb(n) for n in (2 << 20, 8 << 20, 40 << 20)]

    def make(self, rng, work: Path) -> tuple[str, list[list[str]]]:
        log: list[str] = []
        container = rng.choices(
            ["json", "gz", "bomb", "gz-truncated", "gz-members", "gz-garbage"], [50, 35, 3, 4, 4, 4]
        )[0]
        pair = rng.random() < 0.2 and container != "bomb"
        if pair:
            a, b = rng.choice(self.PAIRS)
            mutated = rng.choice([a, b])
            files = [(f"rank{n}", self.traces[i], i == mutated) for n, i in enumerate((a, b))]
            log.append(f"ranks of {self.SOURCES[a]} (rank{(a, b).index(mutated)} mutated)")
        else:
            i = rng.choices(range(len(self.SOURCES)), self.WEIGHTS)[0]
            files = [("rank0", self.traces[i], True)]
            log.append(self.SOURCES[i])
        log.append(container)
        target = work / "trace"
        target.mkdir()
        for stem, trace, mutate in files:
            if container == "bomb":
                data = rng.choice(self.bombs)
                log.append(f"bomb {len(data)} bytes")
                (target / f"{stem}.pt.trace.json.gz").write_bytes(data)
                continue
            data = _dumps(_mutate_kineto(trace, rng, log) if mutate else trace)
            if mutate:
                data = _mutate_bytes(data, rng, log)
            if container == "json":
                name, blob = f"{stem}.pt.trace.json", data
            else:
                name, blob = f"{stem}.pt.trace.json.gz", gzip.compress(data, compresslevel=1)
                if mutate and container == "gz-truncated":
                    blob = blob[: rng.randrange(len(blob))]
                elif mutate and container == "gz-members":
                    blob = blob + gzip.compress(
                        rng.choice([b"", b"{}", data[:100], b"\x00" * 1000])
                    )
                elif mutate and container == "gz-garbage":
                    blob = blob + bytes(rng.randrange(256) for _ in range(rng.choice([1, 8, 512])))
            (target / name).write_bytes(blob)
        path = str(target) if pair else str(next(target.iterdir()))
        variants = [
            ["analyze", path],
            ["analyze", path, "-v"],
            ["analyze", path, "--json", str(work / "out.json")],
        ]
        return "; ".join(log), [rng.choice(variants)]


RUN_SOURCES = [
    "fixtures/runs/gpu1_slow",
    "fixtures/runs/h200_keras_jax_tiny",
    "fixtures/runs/killed",
    "fixtures/runs/sweep",
    "fixtures/kineto/h200_healthy_run",
]
RUN_KEYS = [
    "status",
    "exit_code",
    "missing",
    "command",
    "framework",
    "global_batch",
    "per_replica_batch",
    "replicas",
    "steps_per_execution",
    "warmup_steps",
    "input_ceiling",
    "gpus",
    "logical_to_nvml_index",
    "launcher_pid",
    "host",
    "runs",
    "counts",
    "emulate",
    "started_ns",
    "ended_ns",
    "trace",
    "parameter_bytes",
    "signal",
    "signals_received",
    "samplers",
    "device_clock",
    "schema_version",
]
ROW_FIELDS = [
    "step",
    "epoch",
    "begin_ns",
    "end_ns",
    "bounds_ns",
    "batch",
    "traced",
    "t_ns",
    "gpu",
    "util_pct",
    "mem_used_bytes",
    "pcie_tx_bytes",
    "sm_clock_mhz",
    "clocks_event_reasons",
    "pcie_gen",
    "core_pct",
    "proc_cpu_pct",
    "proc_rss_bytes",
    "processes",
    "mark",
    "end_ns",
]


class RunDirCases:
    def __init__(self):
        self.pristine = {rel: ROOT / rel for rel in RUN_SOURCES}

    def make(self, rng, work: Path) -> tuple[str, list[list[str]]]:
        rel = rng.choice(RUN_SOURCES)
        run = work / "run"
        shutil.copytree(ROOT / rel, run, symlinks=True)
        log = [rel]
        if rng.random() < 0.15:  # a rank directory: a copy of the run, maybe damaged too
            name = rng.choice(
                ["rank1", "rank1", "rank\u00b2", "rank-1", "rank99999999999999999999", "rank01"]
            )
            if not (run / "sweep.json").exists():
                shutil.copytree(
                    ROOT / rel,
                    run / name,
                    symlinks=True,
                    ignore=shutil.ignore_patterns("trace", "rank*"),
                )
                log.append(f"+{name}")
        files = [p for p in run.rglob("*") if p.is_file() and not p.is_symlink()]
        for _ in range(rng.randint(1, 3)):
            if not files:
                break
            path = rng.choice(files)
            what = _damage_file(path, rng)
            log.append(f"{path.relative_to(run)}: {what}")
        pristine = str(
            ROOT / rng.choice(["fixtures/runs/gpu1_slow", "fixtures/runs/h200_keras_jax_tiny"])
        )
        if rel == "fixtures/runs/sweep":
            pristine = str(ROOT / rel)
        d = str(run)
        commands = [
            (30, ["report", d]),
            (6, ["report", d, "--format", "json", "-o", str(work / "r.json")]),
            (6, ["report", d, "--format", "html", "-o", str(work / "r.html")]),
            (5, ["report", d, "--format", "perfetto", "-o", str(work / "r.perfetto.json")]),
            (8, ["check", d, "--max-step-ms", "1000"]),
            (5, ["check", d, "--baseline", pristine, "--max-regression", "5%"]),
            (5, ["check", pristine, "--baseline", d, "--max-regression", "5%"]),
            (8, ["compare", d, pristine]),
            (5, ["compare", pristine, d]),
        ]
        if (run / "trace").is_dir():
            commands.append((5, ["analyze", str(run / "trace")]))
        argv = rng.choices([c for _, c in commands], [w for w, _ in commands])[0]
        return "; ".join(log), [argv]


def _damage_file(path: Path, rng) -> str:
    if (
        path.is_symlink() or not path.is_file()
    ):  # damaged already (deleted, a directory, a FIFO, a link)
        return "(damaged already)"
    data = path.read_bytes()
    op = rng.choices(
        [
            "delete",
            "empty",
            "truncate",
            "flip",
            "utf8",
            "array",
            "deep",
            "field",
            "line",
            "dir",
            "devzero",
            "fifo",
            "huge-line",
            "dup-lines",
        ],
        [6, 6, 10, 10, 4, 4, 2, 20, 20, 3, 4, 2, 2, 3],
    )[0]
    text_file = path.suffix in (".json", ".jsonl")
    if not text_file and op in ("array", "deep", "field", "line", "huge-line", "dup-lines"):
        op = "flip"
    if op == "delete":
        path.unlink()
    elif op == "empty":
        path.write_bytes(b"")
    elif op == "truncate":
        at = rng.randrange(len(data) + 1)
        path.write_bytes(data[:at])
        op += f" at {at}"
    elif op == "flip":
        b = bytearray(data)
        for _ in range(rng.randint(1, 10)):
            if b:
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(b))
    elif op == "utf8":
        at = rng.randrange(len(data) + 1)
        path.write_bytes(
            data[:at] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"]) + data[at:]
        )
    elif op == "array":
        value = rng.choice([[], [1, 2], "text", 42, None, True, Raw("1e999999")])
        path.write_bytes(_dumps(value) + b"\n")
        op += f" {value!r:.30}"
    elif op == "deep":
        depth = rng.choice([40, 900, 5000])
        path.write_bytes(b'{"a":' * depth + b"1" + b"}" * depth)
        op += f" {depth}"
    elif op == "dir":
        path.unlink()
        path.mkdir()
    elif op == "devzero":
        path.unlink()
        path.symlink_to(rng.choice(["/dev/zero", "/dev/null", "/dev/urandom"]))
        op = f"link to {os.readlink(path)}"
    elif op == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif op == "huge-line":
        path.write_bytes(data + b'{"step": 1, "pad": "' + b"x" * (2 << 20) + b'"}\n')
    elif op == "dup-lines":
        lines = data.splitlines(keepends=True)
        path.write_bytes(b"".join(lines + lines[: rng.randrange(len(lines) + 1)]))
    elif op == "field" and path.suffix == ".json":
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            return "field (unreadable)"
        key = rng.choice([*obj.keys(), *RUN_KEYS] if isinstance(obj, dict) else RUN_KEYS)
        value = rng.choice([_weird(rng), "DROP"])
        if isinstance(obj, dict):
            path.write_bytes(_dumps(_set_path(obj, key, value, rng)))
        op = f"{key}={value!r:.60}"
    else:  # a JSONL line: one field set, or the line replaced
        lines = data.splitlines()
        if not lines:
            return op + " (no lines)"
        i = rng.randrange(len(lines))
        try:
            row = json.loads(lines[i])
        except (ValueError, RecursionError):  # an earlier damage made it no JSON, or nested it deep
            row = None
        if op == "line" or not isinstance(row, dict):
            value = rng.choice(
                [_weird(rng), {"step": Raw("1e999999")}, {"begin_ns": 2**70, "end_ns": 2**71}]
            )
            lines[i] = _dumps(value)
            op = f"line {i}={value!r:.60}"
        else:
            key = rng.choice([*row.keys(), *ROW_FIELDS])
            value = rng.choice([_weird(rng), "DROP"])
            lines[i] = _dumps(_set_path(row, key, value, rng))
            op = f"line {i}.{key}={value!r:.60}"
        path.write_bytes(b"\n".join(lines) + b"\n")
    return op


def _run_cli(argv: list[str]) -> tuple[object, str]:
    """(exit code, or the exception escaping main), scaldiag's stderr."""
    from scaldiag.cli import main as cli_main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli_main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Abort:
        raise
    except BaseException as exc:  # escaped main: uncaught
        return exc, err.getvalue()
    return code, err.getvalue()


def run_cli_mode(
    mode: str,
    cases: int,
    seed: int,
    out: Path | None,
    only: int | None,
    jobs: int = 1,
    time_limit: float | None = None,
) -> int:
    revision = _revision()  # of the tree the cases ran on, not of whatever HEAD is when they end
    started = time.time()
    with _try_template(mode):
        return _run_cli_mode(mode, cases, seed, out, only, jobs, time_limit, revision, started)


@contextlib.contextmanager
def _try_template(mode: str):
    """try mode: the real run directory its cases copy, profiled once for the whole run (each
    worker finds it in its environment); nothing for the other modes."""
    from bench.fuzz import try_cases

    if mode != "try" or os.environ.get(try_cases.TEMPLATE_ENV):
        yield
        return
    where = Path(tempfile.mkdtemp(prefix="fuzz_try_template_"))
    try:
        os.environ[try_cases.TEMPLATE_ENV] = try_cases.template_env(where)
        yield
    finally:
        os.environ.pop(try_cases.TEMPLATE_ENV, None)
        _rmtree(where)


def _run_cli_mode(mode, cases, seed, out, only, jobs, time_limit, revision, started) -> int:
    deadline = started + time_limit if time_limit else None
    if only is not None:
        shards = [_shard((mode, [only], seed, None))]
    elif jobs > 1:  # case N is the same case whichever worker draws it
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            shards = pool.map(
                _shard, [(mode, range(i, cases, jobs), seed, deadline) for i in range(jobs)]
            )
    else:
        shards = [_shard((mode, range(cases), seed, deadline))]
    counts = collections.Counter()
    failures, times, raised, ran = [], [], [], 0
    for shard in shards:
        counts.update(shard["counts"])
        failures += shard["failures"]
        times += shard["times"]
        raised += shard["raised"]
        ran += shard["ran"]
    rss_mb = max(
        [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]
        + [sh["rss_mb"] for sh in shards]
    )
    text = cli_report(
        mode,
        counts,
        failures,
        times,
        time.time() - started,
        rss_mb,
        cases,
        seed,
        partial=ran if ran < cases and only is None else None,
        revision=revision,
        jobs=jobs,
        raised=raised,
    )
    print(text)
    if out and only is None:
        out.write_text(text)
    bad = (
        counts["uncaught"]
        + counts["exit 70"]
        + counts["over 10 s"]
        + counts["lost output"]
        + counts["harness error"]
        + sum(
            v
            for k, v in counts.items()
            if k.startswith("exit ")
            and k not in ("exit 0", "exit 1", "exit 2", "exit 70")
            and mode != "try"  # try: 128+N of the signal sent is documented; verify checks each
        )
    )
    return 1 if bad or rss_mb >= 1024 else 0


def _revision() -> str:
    import subprocess

    try:
        revision = (
            subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            or "?"
        )
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except Exception:
        return "?"
    return revision + (" (with uncommitted changes in tracked files)" if dirty else "")


def _peak_mib() -> float:
    """The peak RSS so far of this process or of any one child it waited for (an engine's worker
    processes: job mode's --engine local:2)."""
    return (
        max(
            resource.getrusage(who).ru_maxrss
            for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        )
        / 1024
    )


def _shard(task) -> dict:
    """Cases ``indices`` in this process; its counts, failures, case times, the cases that raised
    its peak RSS, and the peak."""
    mode, indices, seed, deadline = task
    maker = _maker(mode)
    verify = getattr(
        maker, "verify", None
    )  # job: what the command lost or left (an -o file, a temporary)
    signal.signal(signal.SIGALRM, _abort)
    slow_s, abort_s = getattr(maker, "slow_s", SLOW_S), getattr(maker, "abort_s", ABORT_S)
    counts = collections.Counter()
    failures: list[str] = []
    times: list[tuple[float, int, str, str]] = []
    raised: list[tuple[float, int, float, float, str, str]] = []  # (MiB raised, n, before, after)
    tmp_root = Path(tempfile.mkdtemp(prefix=f"fuzz_{mode}_"))
    ran = 0
    for n in indices:
        if deadline and time.time() > deadline:
            break
        ran += 1
        rng = random.Random(f"{seed}:{mode}:{n}")
        work = tmp_root / str(n)
        work.mkdir()
        what, argv = "(the case was being built)", ["?"]
        before = _peak_mib()  # the peak only rises: a case that raises it is one that took more
        t0 = time.perf_counter()
        signal.alarm(abort_s)
        try:
            try:
                what, (argv,) = maker.make(rng, work)
            except Exception:  # the harness' own bug: said, and the run goes on
                counts["harness error"] += 1
                failures.append(
                    _failure(n, what, argv, "building the case: " + traceback.format_exc(limit=-3))
                )
                continue
            t0 = time.perf_counter()  # scaldiag's time, not the harness' building of the case
            if hasattr(maker, "run"):  # try: a process of its own, which the case signals
                result, err = maker.run(argv, work)
            else:
                with _environ(getattr(maker, "env", None)):
                    result, err = _run_cli(argv)
            signal.alarm(0)
            elapsed = time.perf_counter() - t0
            lost = (
                verify(work, argv, result)
                if verify and not isinstance(result, BaseException)
                else None
            )
            if lost:
                counts["lost output"] += 1
                failures.append(_failure(n, what, argv, f"lost output: {lost}"))
            if isinstance(result, BaseException):
                counts["uncaught"] += 1
                failures.append(
                    _failure(
                        n, what, argv, "uncaught " + "".join(traceback.format_exception(result))
                    )
                )
            elif result == INTERNAL_ERROR:
                counts["exit 70"] += 1
                again = "(not run again: try mode)"
                if getattr(maker, "debug_again", True):
                    with _environ(getattr(maker, "env", None)):
                        again = _debug_traceback(argv)
                failures.append(_failure(n, what, argv, err.strip()[-3000:] + "\n" + again))
            elif result == "hang":  # try mode: the case's process stopped at its own wall
                counts["hang"] += 1
                counts["over 10 s"] += 1
            else:
                counts[f"exit {result}"] += 1
                if result not in (0, 1, 2) and not hasattr(maker, "run"):  # try: verify says
                    failures.append(_failure(n, what, argv, f"exit {result}: {err.strip()[:500]}"))
            if elapsed > slow_s:
                counts["over 10 s"] += 1
                failures.append(_failure(n, what, argv, f"took {elapsed:.1f} s"))
        except Abort:
            elapsed = time.perf_counter() - t0
            counts["over 10 s"] += 1
            counts["aborted at 30 s"] += 1
            failures.append(_failure(n, what, argv, f"still running after {abort_s} s: stopped"))
        finally:
            signal.alarm(0)
            _rmtree(work)
        command = " ".join(argv).replace(str(work), "CASE")
        times.append((elapsed, n, what, command))
        after = _peak_mib()
        if after > before:
            raised = sorted([*raised, (after - before, n, before, after, what, command)])[-20:]
        if ran % 500 == 0:
            print(
                f"{mode}: {ran} cases in this worker: {dict(counts)}", file=sys.stderr, flush=True
            )
    _rmtree(tmp_root)
    counts.update({f"try: {k}": v for k, v in getattr(maker, "tally", {}).items()})
    return {
        "counts": counts,
        "failures": failures,
        "times": sorted(times, reverse=True)[:20],
        "raised": raised,
        "ran": ran,
        "rss_mb": _peak_mib(),
    }


def _maker(mode: str):
    if mode == "job":
        from bench.fuzz.job_cases import JobCases

        return JobCases()
    if mode == "calibration":
        from bench.fuzz.calibration_cases import CalibrationCases

        return CalibrationCases()
    if mode == "try":
        from bench.fuzz.try_cases import TryCases

        return TryCases()
    return KinetoCases() if mode == "kineto" else RunDirCases()


@contextlib.contextmanager
def _environ(env: dict | None):
    """The case's environment variables (None: unset) for the command, then the harness' again."""
    if not env:
        yield
        return
    saved = {k: os.environ.get(k) for k in env}
    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _failure(n: int, what: str, argv: list[str], detail: str) -> str:
    text = f"case {n}: {what}\n  scaldiag {' '.join(argv)}\n  {detail.strip()}"
    # said as found too: a long run's failures are otherwise known only at its end
    print(f"FAILURE {text}", file=sys.stderr, flush=True)
    return text


def _debug_traceback(argv: list[str]) -> str:
    """The traceback behind an exit 70: the same command again with --debug."""
    signal.alarm(ABORT_S)
    try:
        result, _ = _run_cli(["--debug", *argv])
    except Abort:
        return "(--debug: stopped after 30 s)"
    finally:
        signal.alarm(0)
    if isinstance(result, BaseException):
        return "".join(traceback.format_exception(result)[-12:])
    return f"(--debug gave {result})"


def cli_report(
    mode,
    counts,
    failures,
    times,
    wall,
    rss_mb,
    cases,
    seed,
    partial: int | None = None,
    revision: str = "?",
    jobs: int = 1,
    raised: list | None = None,
) -> str:
    title = {
        "kineto": "mutated Kineto traces through `analyze`",
        "rundir": "damaged run directories through `report`, `check`, `compare`, `analyze`",
        "job": "damaged node directories of a multi-node job through `report NODE_DIR...`",
        "calibration": (
            "damaged calibration files through `report`, `check`, `compare` of a GPU sweep"
        ),
        "try": "hostile run directories, commands and flags through `try` (try_cases.py)",
    }[mode]
    total = sum(
        v
        for k, v in counts.items()
        if k.startswith("exit ") or k in ("uncaught", "aborted at 30 s", "hang")
    )
    lines = [
        f"# Long fuzz run: {title}",
        "",
        *(
            [f"**Partial: {partial} of {cases} cases (stopped at the time limit).**", ""]
            if partial
            else []
        ),
        f"- date: {time.strftime('%Y-%m-%d %H:%M %Z')}",
        (
            f"- machine: {platform.node()}, {platform.machine()}, {os.cpu_count()} cores (shared), "
            f"Python {platform.python_version()}, {platform.system()} {platform.release()}"
        ),
        (
            f"- command: `python -m bench fuzz --mode {mode} --cases {cases} --seed {seed} "
            f"--jobs {jobs}`"
        ),
        f"- revision: {revision}",
        (
            "- each case's `try` in a process of its own, forked from the worker, signalled at"
            " random times; a case past its budget + GRACE_S + 40 s is a hang"
            if mode == "try"
            else f"- the CLI's `main(argv)` in one process, each case under a {ABORT_S} s alarm;"
            f" a case over {SLOW_S} s is a failure"
        ),
        (
            f"- wall time: {wall:.0f} s over {jobs} worker process{'es' if jobs > 1 else ''}; peak"
            f" RSS {rss_mb:.0f} MiB (the largest of any one process: each worker runs its cases in"
            " one process)"
        ),
        "",
        (
            "| cases | exit 0 | exit 1 | exit 2 | exit 70 | uncaught | other exit | over 10 s |"
            " lost output |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
        (
            f"| {total} | {counts['exit 0']} | {counts['exit 1']} | {counts['exit 2']} |"
            f" {counts['exit 70']} | {counts['uncaught']} |"
            f" {sum(v for k, v in counts.items() if k.startswith('exit ') and k not in ('exit 0', 'exit 1', 'exit 2', 'exit 70'))}"  # noqa: E501
            f" | {counts['over 10 s']} | {counts['lost output']} |"
        ),
        "",
        *_try_tally(counts),
        *(
            [
                (
                    f"**{counts['harness error']} cases could not be built (the harness' own error,"
                    " not counted above).**"
                ),
                "",
            ]
            if counts["harness error"]
            else []
        ),
        (
            "Exit 0: a report; 1: `check` failed (or a run that cannot be vouched for); 2: one"
            " line, a refused input. Lost output (job mode): an existing `-o`/`--json` file changed"
            " or removed by a command that failed, an input named as output changed, a temporary"
            " left, or an output not written by a command that exited 0. A case is reproduced with"
            " `--only N`."
        ),
        "",
        "## Slowest cases",
        "",
        "| case | seconds | input | command |",
        "|---|---|---|---|",
    ]
    for elapsed, n, what, argv in sorted(times, reverse=True)[:10]:
        lines.append(f"| {n} | {elapsed:.2f} | {what.replace('|', '/')[:300]} | `{argv}` |")
    lines += [
        "",
        "## Cases that raised the peak",
        "",
        (
            "The peak RSS (of the process, or of any one engine worker it started) before and after"
            " the case; the first case's includes importing scaldiag."
        ),
        "",
        "| case | MiB before | MiB after | input | command |",
        "|---|---|---|---|---|",
    ]
    for _, n, before, after, what, argv in sorted(raised or [], reverse=True)[:10]:
        lines.append(
            f"| {n} | {before:.0f} | {after:.0f} | {what.replace('|', '/')[:300]} | `{argv}` |"
        )
    if failures:
        lines += [
            "",
            f"## Failures ({len(failures)}; the first 30)",
            "",
            "```",
            *failures[:30],
            "```",
        ]
    return "\n".join(lines) + "\n"


def _try_tally(counts) -> list[str]:
    """try mode: what the cases reached (rounds, signals, the budget), and what they left."""
    tally = {k[len("try: ") :]: v for k, v in counts.items() if k.startswith("try: ")}
    if not tally:
        return []
    keys = [
        "refused before round 0 (by design)",
        "with rounds' run directory",
        "reached round 0",
        "got a signal",
        "signal while a side ran",
        "stopped by a signal (try.json)",
        "stopped by the budget",
        "killed mid-try, then a second try",
        "hangs",
        "leftover processes",
    ]
    exits = ", ".join(f"{k[5:]}: {v}" for k, v in sorted(counts.items()) if k.startswith("exit "))
    return [
        "| " + " | ".join(keys) + " |",
        "|" + "---|" * len(keys),
        "| " + " | ".join(str(tally.get(k, 0)) for k in keys) + " |",
        "",
        f'Exit codes: {exits}. In try mode "lost output" is every case that failed its checks: a'
        " file of the user's changed, something in try's own folder, a process left running, or an"
        " exit code try does not document for the signal sent.",
        "",
    ]


def main(argv: list[str]) -> int:
    """``python -m bench fuzz [ARGS]``: the run, its output kept as bench/results/fuzz.md; with
    ``--out FILE`` (a probe, a case reproduced) only there: bench/results/fuzz.md holds the long
    runs, merged by hand, and a short run had replaced them."""
    if any(a == "--out" or a.startswith("--out=") for a in argv):
        return int(_main(argv) or 0)
    return record("fuzz", __doc__, argv, lambda: _main(argv))
