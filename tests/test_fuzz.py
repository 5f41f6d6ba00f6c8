"""Fuzzing: damaged traces and run directories give a report or one ScaldiagError, never another
exception.

The quick version runs here (a few hundred examples, seconds); the long one
is ``python -m bench fuzz`` (10,000+ cases, results in bench/results/fuzz_long.md).
Both use the generators below:

- XPlane files: a small hand-built trace (and, in the long run, the real
  fixtures) truncated, bit-flipped, overwritten, with bytes inserted or
  zeroed; and traces generated whole, whose events carry stats of the
  wrong type (``step_num`` as text, ``memcpy_details`` as a number...).
- Run directories: a complete synthetic run, then 1-3 damages: a file
  deleted, emptied, truncated, bit-flipped, given invalid UTF-8, a field
  set to a JSON value of any type, a JSONL line replaced by any JSON value;
  sweeps whose sweep.json is damaged the same ways.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip(
    "hypothesis", reason="fuzzing needs hypothesis (pip install -e '.[test]')"
)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from xspace_builder import PlaneBuilder, new_space  # noqa: E402

from scaldiag.errors import ScaldiagError  # noqa: E402
from scaldiag.pipeline import diagnose, diagnose_trace  # noqa: E402
from scaldiag.record.rundir import (  # noqa: E402
    GPU_SAMPLES,
    HOST_SAMPLES,
    STEPS,
    SWEEP_JSON,
    write_json,
)  # noqa: E402
from scaldiag.render import write as render  # noqa: E402

US = 1000
QUICK = settings(
    max_examples=int(__import__("os").environ.get("SCALDIAG_FUZZ_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)


# --- the inputs
# ------------------------------------------------------------------------------------------


def seed_trace() -> bytes:
    """Two GPUs, marked steps, copies with details, collectives, input, layout and a wait: every
    path."""
    space = new_space()
    host = PlaneBuilder(space, "/host:CPU")
    main = host.line("python")
    for g in range(2):
        gpu = PlaneBuilder(space, f"/device:GPU:{g}")
        compute, copies = gpu.line("Stream #1(Compute)"), gpu.line("Stream #2(MemcpyH2D)")
        for step in range(4):
            t = step * 200 * US
            gpu.event(compute, "gemm_fusion", t + 10 * US, 40 * US, correlation_id=step)
            gpu.event(compute, "TransposeNHWCToNCHW", t + 50 * US, 10 * US)
            gpu.event(compute, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", t + 60 * US, 30 * US)
            gpu.event(
                copies,
                "MemcpyH2D",
                t + 100 * US,
                30 * US,
                memcpy_details="kind_src:pageable kind_dst:device size:1000",
            )
    for step in range(4):
        t = step * 200 * US
        host.event(main, "train", t, 190 * US, step_num=step, _r=1)
        host.event(main, "IteratorGetNext", t + 100 * US, 20 * US)
        host.event(main, "python\x00work", t + 130 * US, 50 * US)
        host.event(main, "Wait for LaunchOnDevice completion", t + 150 * US, 20 * US)
    return space.SerializeToString()


def _mutate(data: bytes, ops: list[tuple]) -> bytes:
    buf = bytearray(data)
    for op, pos, arg in ops:
        pos = pos % (len(buf) + 1)
        if op == "truncate":
            del buf[pos:]
        elif op == "flip" and buf:
            buf[pos % len(buf)] ^= 1 << (arg % 8)
        elif op == "overwrite":
            buf[pos : pos + len(arg)] = arg
        elif op == "insert":
            buf[pos:pos] = arg
        elif op == "zero":
            buf[pos : pos + arg] = bytes(min(arg, len(buf) - pos))
    return bytes(buf)


MUTATION = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 1 << 20), st.none()),
    st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(0, 7)),
    st.tuples(st.just("overwrite"), st.integers(0, 1 << 20), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 20), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("zero"), st.integers(0, 1 << 20), st.integers(1, 64)),
)
MUTATIONS = st.lists(MUTATION, min_size=1, max_size=4)

NAMES = [
    "train",
    "MemcpyH2D",
    "MemcpyD2H",
    "IteratorGetNext",
    "ncclDevKernel_AllReduce",
    "CollectiveReduceV2",
    "TransposeNHWCToNCHW",
    "gemm_fusion",
    "Wait for LaunchOnDevice completion",
    "",
    "\x00",
    "[b]x[/b]",
    "\x1b[2J",
    "EagerExecute",
    "tf_data_iterator_get_next",
]
STATS = [
    "step_num",
    "_r",
    "memcpy_details",
    "correlation_id",
    "group_id",
    "hlo_op",
    "tf_op",
    "bytes",
    "_ct",
]
STAT_VALUE = st.one_of(
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.just("kind_src:pageable kind_dst:device size:-1"),
    st.just("size:99999999999999999999"),
)
EVENT = st.tuples(
    st.sampled_from(NAMES),
    st.integers(-(1 << 40), 1 << 40),
    st.integers(-(1 << 30), 1 << 40),
    st.dictionaries(st.sampled_from(STATS), STAT_VALUE, max_size=3),
)
PLANE_NAMES = [
    "/host:CPU",
    "/device:GPU:0",
    "/device:GPU:1",
    "/device:TPU:0",
    "/device:CUSTOM:x",
    "",
    "\x00",
]


@st.composite
def generated_trace(draw) -> bytes:
    """A whole trace from parts: planes, lines, events at any times, stats of any type."""
    space = new_space()
    for plane_name in draw(st.lists(st.sampled_from(PLANE_NAMES), min_size=0, max_size=3)):
        plane = PlaneBuilder(space, plane_name)
        for line_no in range(draw(st.integers(0, 2))):
            line = plane.line(
                draw(st.sampled_from(["python", "Stream #1(Compute)", "Stream #2(MemcpyH2D)", ""])),
                timestamp_ns=draw(st.integers(0, 1 << 40)),
            )
            for name, start, dur, stats in draw(st.lists(EVENT, max_size=12)):
                event = line.events.add(
                    metadata_id=plane.event_id(name), offset_ps=start, duration_ps=dur
                )
                plane.add_stats(event, stats)
            del line_no
    return space.SerializeToString()


def seed_run_dir(root: Path, with_trace: bytes | None) -> Path:
    run_dir = root / "run"
    run_dir.mkdir()
    write_json(
        run_dir,
        "run.json",
        {
            "schema_version": 1,
            "status": "finished",
            "exit_code": 0,
            "command": ["python", "train.py"],
            "started_ns": 1,
            "ended_ns": 10**10,
            "missing": [],
            "host": "fuzz",
            "launcher_pid": 1,
        },
    )
    write_json(
        run_dir,
        "training.json",
        {
            "framework": {"name": "keras", "backend": "tensorflow", "versions": {"keras": "3.0"}},
            "global_batch": 64,
            "per_replica_batch": 32,
            "replicas": 2,
            "steps_per_execution": 1,
            "parameter_bytes": 4000,
            "warmup_steps": 2,
            "trace_steps": 2,
            "input_ceiling": {
                "samples_per_s": 5000.0,
                "batches": 10,
                "seconds": 0.5,
                "source": "x",
            },
            "trace": {"logdir": "trace", "first_step": 2, "last_step": 3},
        },
    )
    write_json(
        run_dir,
        "inventory.json",
        {
            "gpus": [
                {
                    "index": 0,
                    "name": "H200",
                    "uuid": "GPU-a",
                    "pcie_gen_max": 5,
                    "pcie_width_max": 16,
                }
            ],
            "logical_to_nvml_index": [0],
        },
    )
    t0 = 10**9
    # As the recorder writes them: a row per warm-up and traced step, then blocks of begin-only
    # steps.
    steps = [
        {
            "step": i,
            "epoch": 0,
            "begin_ns": t0 + i * 10**7,
            "end_ns": t0 + (i + 1) * 10**7,
            "traced": i in (2, 3),
        }
        for i in range(4)
    ]
    steps += [
        {
            "step": first,
            "epoch": 0,
            "bounds_ns": [t0 + i * 10**7 for i in range(first, last + 1)],
            "batch": list(range(first, last)),
        }
        for first, last in ((4, 17), (17, 30))
    ]
    gpu = [
        {
            "t_ns": t0 + i * 10**7,
            "gpu": 0,
            "util_pct": 90,
            "mem_used_bytes": 10**9,
            "sm_clock_mhz": 1980,
            "clocks_event_reasons": 0,
            "pcie_gen": 5,
            "pcie_width": 16,
            "pcie_tx_bytes": i * 1000,
        }
        for i in range(30)
    ]
    host = [
        {
            "t_ns": t0 + i * 10**7,
            "core_pct": [50.0, 60.0],
            "proc_cpu_pct": 80.0,
            "proc_threads": 9,
            "proc_rss_bytes": 10**8,
            "processes": 1,
        }
        for i in range(30)
    ]
    for name, rows in ((STEPS, steps), (GPU_SAMPLES, gpu), (HOST_SAMPLES, host)):
        (run_dir / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    if with_trace is not None:
        logdir = run_dir / "trace" / "plugins" / "profile" / "r"
        logdir.mkdir(parents=True)
        (logdir / "fuzz.xplane.pb").write_bytes(with_trace)
    return run_dir


RUN_FILES = ["run.json", "training.json", "inventory.json", STEPS, GPU_SAMPLES, HOST_SAMPLES]
KEYS = [
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
    "step",
    "begin_ns",
    "end_ns",
    "bounds_ns",
    "batch",
    "epoch",
    "traced",
    "t_ns",
    "gpu",
    "core_pct",
    "proc_cpu_pct",
    "proc_rss_bytes",
    "util_pct",
    "pcie_gen",
    "clocks_event_reasons",
    "launcher_pid",
    "host",
    "runs",
    "counts",
    "emulate",
]
JSON_VALUE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 70), 1 << 70)
    | st.floats()
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)
    ),
    max_leaves=8,
)
DAMAGE = st.one_of(
    st.tuples(st.just("delete"), st.none(), st.none()),
    st.tuples(st.just("empty"), st.none(), st.none()),
    st.tuples(st.just("bytes"), MUTATIONS, st.none()),
    st.tuples(
        st.just("utf8"),
        st.integers(0, 1 << 16),
        st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"]),
    ),
    st.tuples(st.just("field"), st.sampled_from(KEYS), JSON_VALUE),
    st.tuples(st.just("line"), st.integers(0, 40), JSON_VALUE),
)
DAMAGES = st.lists(st.tuples(st.sampled_from(RUN_FILES), DAMAGE), min_size=1, max_size=3)


def damage(path: Path, how: tuple) -> None:
    op, a, b = how
    if not path.exists():
        return
    data = path.read_bytes()
    if op == "delete":
        path.unlink()
    elif op == "empty":
        path.write_bytes(b"")
    elif op == "bytes":
        path.write_bytes(_mutate(data, a))
    elif op == "utf8":
        pos = a % (len(data) + 1)
        path.write_bytes(data[:pos] + b + data[pos:])
    elif op == "field" and path.suffix == ".json":
        try:
            obj = json.loads(data)
        except ValueError:
            return
        if isinstance(obj, dict):
            obj[a] = b
            path.write_text(json.dumps(obj))
    elif op == "field" or op == "line":  # JSONL: set a field of one row, or replace the row
        lines = data.decode("utf-8", "replace").splitlines()
        if not lines:
            return
        i = (a if op == "line" else len(a)) % len(lines)
        if op == "line":
            lines[i] = json.dumps(b)
        else:
            try:
                row = json.loads(lines[i])
            except ValueError:
                return
            if not isinstance(row, dict):
                return
            row[a] = b
            lines[i] = json.dumps(row)
        path.write_text("\n".join(lines) + "\n")


# --- the property
# ------------------------------------------------------------------------------------------


def survives(run) -> str:
    """Run ``run()`` and render what it returns; 'ok', 'error' (ScaldiagError); any other exception
    propagates."""
    try:
        report = run()
    except ScaldiagError as exc:
        assert str(exc) and "\n" not in str(exc).strip(), "one clear line"
        return "error"
    render(report, "terminal", io.StringIO(), 100)
    render(report, "json", io.StringIO())
    return "ok"


def trace_case(data: bytes) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.xplane.pb"
        path.write_bytes(data)
        return survives(lambda: diagnose_trace(path))


def run_case(damages: list, trace: bytes | None) -> str:
    with tempfile.TemporaryDirectory() as d:
        run_dir = seed_run_dir(Path(d), trace)
        for name, how in damages:
            damage(run_dir / name, how)
        return survives(lambda: diagnose(run_dir))


def sweep_case(damages: list, fail_second: bool) -> str:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        for n in (1, 2):
            run_dir = seed_run_dir(root, None)
            run_dir.rename(root / f"gpus{n}")
        if fail_second:
            write_json(root / "gpus2", "run.json", {"status": "failed", "exit_code": 1})
        write_json(
            root,
            SWEEP_JSON,
            {
                "counts": [1, 2],
                "emulate": True,
                "repeat": 1,
                "runs": [
                    {"gpus": 1, "repeat": 0, "dir": "gpus1"},
                    {"gpus": 2, "repeat": 0, "dir": "gpus2"},
                ],
            },
        )
        for name, how in damages:
            target = root / SWEEP_JSON if name == "run.json" else root / "gpus2" / name
            damage(target, how)
        return survives(lambda: diagnose(root))


SEED = seed_trace()


@QUICK
@given(MUTATIONS)
def test_mutated_traces(ops):
    trace_case(_mutate(SEED, ops))


@QUICK
@given(generated_trace())
def test_generated_traces_with_stats_of_any_type(data):
    trace_case(data)


@QUICK
@given(DAMAGES, st.booleans())
def test_damaged_run_directories(damages, with_trace):
    run_case(damages, SEED if with_trace else None)


@settings(QUICK, max_examples=max(20, QUICK.max_examples // 3))
@given(DAMAGES, st.booleans())
def test_damaged_sweeps(damages, fail_second):
    sweep_case(damages, fail_second)


def test_the_seeds_are_valid(tmp_path):
    """The fuzzers start from inputs that give a full report, so a damage is what they test."""
    assert trace_case(SEED) == "ok"
    assert run_case([], SEED) == "ok"
    report = diagnose_trace_path(tmp_path)
    assert report.analysis.event_count > 0 and len(report.analysis.units) == 2


def diagnose_trace_path(tmp_path):
    path = tmp_path / "seed.xplane.pb"
    path.write_bytes(SEED)
    return diagnose_trace(path)


def test_a_failed_sweep_point_is_left_out_and_named(tmp_path):
    for n in (1, 2):
        seed_run_dir(tmp_path, None).rename(tmp_path / f"gpus{n}")
    write_json(tmp_path / "gpus2", "run.json", {"status": "failed", "exit_code": 1})
    write_json(
        tmp_path,
        SWEEP_JSON,
        {
            "counts": [1, 2],
            "emulate": False,
            "repeat": 1,
            "runs": [
                {"gpus": 1, "repeat": 0, "dir": "gpus1"},
                {"gpus": 2, "repeat": 0, "dir": "gpus2"},
            ],
        },
    )
    report = diagnose(tmp_path)
    assert [p.gpus for p in report.analysis.points] == [1]
    assert any("2 devices" in n and "exit code 1" in n for n in report.analysis.notes)


def test_an_empty_trace_gets_no_verdict(tmp_path):
    path = tmp_path / "empty.xplane.pb"
    space = new_space()
    PlaneBuilder(space, "/device:GPU:0").line("Stream #1(Compute)")
    PlaneBuilder(space, "/host:CPU").line("python")
    path.write_bytes(space.SerializeToString())
    try:
        report = diagnose_trace(path)
    except ScaldiagError:
        return  # refusing an empty trace is as good as not judging it
    assert "Compute-bound" not in report.verdict


def test_damaged_record_files_are_said_not_raised(tmp_path):
    run_dir = seed_run_dir(tmp_path, None)
    (run_dir / "training.json").write_bytes(b'{"global_batch": 6')  # truncated
    with open(run_dir / STEPS, "ab") as f:
        f.write(
            b'{"step": 30, "begin_ns": "\xff"}\n{"step": "x", "begin_ns": 1, "end_ns": 2}\n[1]\n'
        )
    report = diagnose(run_dir)
    missing = " ".join(report.analysis.missing)
    assert "training.json: not valid JSON" in missing
    assert "steps.jsonl: 3 damaged lines skipped" in missing
    assert report.analysis.steps.recorded == 30


def test_an_empty_run_json_is_a_partial_report(tmp_path):
    run_dir = seed_run_dir(tmp_path, None)
    (run_dir / "run.json").write_bytes(b"")
    report = diagnose(run_dir)
    assert report.analysis.steps.recorded == 30
    assert any("run.json: empty" in m for m in report.analysis.missing)


def cleanup(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _decoded(data: bytes, native: str):
    """The reader's columns for these bytes with the C (native "1") or numpy ("0") decoder, or its
    error."""
    from scaldiag.readers.xplane.read import read_trace

    previous = os.environ.get("SCALDIAG_NATIVE")
    os.environ["SCALDIAG_NATIVE"] = native
    try:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "t.xplane.pb"
            path.write_bytes(data)
            trace = read_trace([path])
            return [
                (
                    p.name,
                    p.event_names,
                    [
                        (
                            ln.name,
                            ln.start_ns.tolist(),
                            ln.end_ns.tolist(),
                            ln.name_id.tolist(),
                            {k: ln.stat(k).tolist() for k in ln.stats},
                        )
                        for ln in p.lines
                    ],
                )
                for p in trace.planes
            ]
    except ScaldiagError as exc:
        return type(exc).__name__
    finally:
        (
            os.environ.pop("SCALDIAG_NATIVE")
            if previous is None
            else os.environ.__setitem__("SCALDIAG_NATIVE", previous)
        )


@pytest.mark.skipif(
    __import__("scaldiag.readers.xplane.read", fromlist=["_wire_c"])._wire_c is None,
    reason="the C decoder was not built (no compiler)",
)
@QUICK
@given(st.one_of(MUTATIONS.map(lambda ops: _mutate(SEED, ops)), generated_trace()))
def test_the_c_and_numpy_decoders_agree_on_damaged_and_generated_bytes(data):
    assert repr(_decoded(data, "1")) == repr(_decoded(data, "0"))  # repr: NaN stats compare equal
