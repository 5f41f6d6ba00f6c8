"""Hostile inputs and faults, round 3 (issue 34): the job merge, outputs, environment.

Each case failed before (a lost file, exit 70, a traceback, a silent wrong merge) and is one clear
line (exit 2), or a report that leaves the bad part out and names it, now. Jobs are built from the
two ranks of a real CPU DDP run (fixtures/kineto/cpu_ddp_gloo), one rank a "node".
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from conftest import FIXTURES

from scaldiag.cli import main

GLOO = FIXTURES / "kineto" / "cpu_ddp_gloo" / "plugins" / "profile" / "torch"
ROOT = Path(__file__).resolve().parents[1]


def make_job(tmp_path: Path, nodes: int = 2, **node_fields) -> list[Path]:
    """``nodes`` node directories (rank r's trace in node r, the two ranks alternating)."""
    dirs = []
    for k in range(nodes):
        d = tmp_path / f"node{k}"
        (d / "trace").mkdir(parents=True)
        node = {"nnodes": nodes, "node_rank": k, "host": f"h{k}", **node_fields}
        (d / "run.json").write_text(
            json.dumps({"node": node, "status": "finished", "exit_code": 0})
        )
        shutil.copy(
            GLOO / f"rank{k % 2}.pt.trace.json.gz", d / "trace" / f"rank{k}.pt.trace.json.gz"
        )
        if k >= 2:  # another rank, not a copy: its clock 1 ms further off
            shift_base(d, (k // 2) * 10**6)
        dirs.append(d)
    return dirs


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "internal error" not in out.err, out.err
    return code, out.out, out.err


# -- 1. lose nothing on -o -------------------------------------------------------------------------


def test_a_failing_merge_leaves_an_existing_output_as_it_was(tmp_path, capsys):
    dirs = make_job(tmp_path)
    for d in dirs:  # no rank with steps: the merge fails
        next((d / "trace").iterdir()).unlink()
    out = tmp_path / "report.txt"
    out.write_text("yesterday's report\n")
    code, _, err = cli(capsys, "report", *dirs, "-o", out)
    assert code == 2 and "nothing to merge" in err
    assert out.read_text() == "yesterday's report\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


@pytest.mark.parametrize("fmt", ["term", "json", "perfetto"])
def test_an_output_naming_a_rank_trace_is_refused_before_it_is_touched(tmp_path, capsys, fmt):
    dirs = make_job(tmp_path)
    trace = dirs[1] / "trace" / "rank1.pt.trace.json.gz"
    before = trace.read_bytes()
    code, _, err = cli(capsys, "report", *dirs, "--format", fmt, "-o", trace, "--engine", "local:1")
    assert code == 2 and "is an input of this report" in err
    assert trace.read_bytes() == before


def test_an_output_naming_a_run_record_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(
        FIXTURES / "runs" / "sweep" / "gpus1", run, ignore=shutil.ignore_patterns("trace")
    )
    before = (run / "steps.jsonl").read_bytes()
    code, _, err = cli(capsys, "report", run, "--json", run / "steps.jsonl")
    assert code == 2 and "is an input" in err
    assert (run / "steps.jsonl").read_bytes() == before


def test_a_job_report_replaces_its_output_whole_and_keeps_its_mode(tmp_path, capsys):
    dirs = make_job(tmp_path)
    out = tmp_path / "merged.json"
    out.write_text("old")
    out.chmod(0o640)
    code, _, err = cli(
        capsys, "report", *dirs, "--format", "perfetto", "-o", out, "--engine", "local:1"
    )
    assert code == 0, err
    assert json.loads(out.read_text())["traceEvents"]
    assert out.stat().st_mode & 0o777 == 0o640


def test_a_full_device_as_output_is_one_line(tmp_path, capsys):
    dirs = make_job(tmp_path)
    code, _, err = cli(
        capsys, "report", *dirs, "--format", "json", "-o", "/dev/full", "--engine", "local:1"
    )
    assert code == 2 and "cannot write /dev/full: No space left on device" in err
    assert Path("/dev/full").is_char_device()  # written in place, never renamed over


# -- 3. never merge what is not one job ------------------------------------------------------------


def edit_trace(path: Path, edit) -> None:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    edit(doc)
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))


def shift_base(node: Path, shift_ns: int) -> None:
    def edit(doc):
        doc["baseTimeNanoseconds"] += shift_ns

    edit_trace(next((node / "trace").iterdir()), edit)


@pytest.mark.parametrize(
    "shift_ns, said",
    [
        (55 * 60 * 10**9, "55.0 minutes from"),
        (86400 * 10**9, "1.0 days from"),
        (-100 * 365 * 86400 * 10**9, "years from"),
    ],
)
def test_another_jobs_node_far_off_in_time_is_refused(tmp_path, capsys, shift_ns, said):
    dirs = make_job(tmp_path)
    shift_base(dirs[1], shift_ns)
    code, _, err = cli(capsys, "report", *dirs, "--engine", "local:1")
    assert code == 2 and said in err and "another job" in err, err


def test_an_unreadable_base_time_is_not_taken_as_a_clock(tmp_path, capsys):
    dirs = make_job(tmp_path)
    edit_trace(
        next((dirs[1] / "trace").iterdir()), lambda doc: doc.update(baseTimeNanoseconds="soon")
    )
    code, _, err = cli(capsys, "report", *dirs, "--engine", "local:1")
    assert code == 2 and "years from" in err, err


def test_the_same_rank_trace_in_two_nodes_is_refused(tmp_path, capsys):
    dirs = make_job(tmp_path)
    shutil.copy(next((dirs[0] / "trace").iterdir()), next((dirs[1] / "trace").iterdir()))
    code, _, err = cli(capsys, "report", *dirs, "--engine", "local:1")
    assert code == 2 and "are the same trace" in err, err


def test_runs_that_do_not_overlap_are_not_one_job(tmp_path, capsys):
    dirs = make_job(tmp_path)
    hour_ns = 3600 * 10**9
    for k, d in enumerate(dirs):
        record = json.loads((d / "run.json").read_text())
        record.update(
            started_ns=1_790_857_000 * 10**9 + k * hour_ns,
            ended_ns=1_790_857_100 * 10**9 + k * hour_ns,
        )
        (d / "run.json").write_text(json.dumps(record))
    code, _, err = cli(capsys, "report", *dirs, "--engine", "local:1")
    assert code == 2 and "do not overlap (3,500 s apart" in err, err


def test_nodes_of_two_rendezvous_are_not_one_job(tmp_path, capsys):
    dirs = make_job(tmp_path)
    for k, d in enumerate(dirs):
        record = json.loads((d / "run.json").read_text())
        record["node"].update(launcher="torchrun", rdzv_endpoint=f"10.0.0.{k}:29500")
        (d / "run.json").write_text(json.dumps(record))
    code, _, err = cli(capsys, "report", *dirs, "--engine", "local:1")
    assert code == 2 and "rdzv_endpoint differ" in err, err


# -- 4. a bad node is left out and named, not the job
# -----------------------------------------------


@pytest.mark.parametrize(
    "damage, said",
    [
        ("truncated", "(truncated?)): this rank is left out"),
        ("no steps", "no rank's trace with steps"),
        ("node_rank", 'node_rank is "one", not a node number: this node is left out'),
    ],
)
def test_one_bad_node_of_four_is_left_out_and_named(tmp_path, capsys, damage, said):
    dirs = make_job(tmp_path, nodes=4)
    trace = next((dirs[2] / "trace").iterdir())
    if damage == "truncated":
        trace.write_bytes(trace.read_bytes()[:5000])
    elif damage == "no steps":
        edit_trace(
            trace,
            lambda doc: doc.update(
                traceEvents=[
                    e for e in doc["traceEvents"] if "ProfilerStep" not in str(e.get("name"))
                ]
            ),
        )
    else:
        record = json.loads((dirs[2] / "run.json").read_text())
        record["node"]["node_rank"] = "one"
        (dirs[2] / "run.json").write_text(json.dumps(record))
    code, out, err = cli(capsys, "report", *dirs, "--engine", "local:1", "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    assert [n["node"] for n in report["analysis"]["nodes"]] == ["h0/node0", "h1/node1", "h3/node3"]
    assert said in report["analysis"]["notes"][0]
    assert "3 of the job's 4 nodes merged" in " ".join(report["analysis"]["notes"])


# -- 8. job merge fields
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "node_fields",
    [
        {"node_rank": "one"},
        {"node_rank": None},
        {"node_rank": [1]},
        {"node_rank": True},
        {"node_rank": 10**400},
        {"nnodes": [2]},
    ],
)
def test_a_node_field_of_another_type_is_one_line(tmp_path, capsys, node_fields):
    dirs = make_job(tmp_path)
    record = json.loads((dirs[1] / "run.json").read_text())
    record["node"].update(node_fields)
    (dirs[1] / "run.json").write_text(json.dumps(record))
    code, _, err = cli(capsys, "report", *dirs, "--engine", "local:1")
    assert code == 2 and "this node is left out" in err, err


@pytest.mark.parametrize(
    "table",
    [{"²": [5]}, {"1": [10**400]}, {"1": [1e400]}, {"1" * 5000: [5]}, {"1": "x"}, [10**400]],
)
def test_an_intra_node_reference_of_another_shape_is_absent(tmp_path, capsys, table):
    dirs = make_job(tmp_path)
    record = json.loads((dirs[0] / "run.json").read_text())
    record["intra_node_allreduce"] = {"times_ns": table}
    (dirs[0] / "run.json").write_text(json.dumps(record))
    code, out, err = cli(capsys, "report", *dirs, "--engine", "local:1", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["analysis"]["nodes"][0]["intra_node_ms"] is None


@pytest.mark.parametrize("base", ["1" + "0" * 400, "1e400", "NaN"])
def test_a_huge_base_time_or_nan_never_reaches_the_merged_trace(tmp_path, capsys, base):
    dirs = make_job(tmp_path)
    for d in (
        dirs
    ):  # the merged file is written from the traces as given: the job's own base time is read
        path = next((d / "trace").iterdir())
        text = gzip.decompress(path.read_bytes()).decode()
        text = text.replace('"ts": 5251', f'"ts": {base}, "x": 5251', 1)  # one event's ts
        path.write_bytes(gzip.compress(text.encode()))
    out = tmp_path / "merged.json"
    code, _, err = cli(
        capsys, "report", *dirs, "--format", "perfetto", "-o", out, "--engine", "local:1"
    )
    assert code in (0, 2), err
    if code == 0:
        json.loads(
            out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the merged trace")
        )


def test_a_job_without_collectives_says_no_share_not_nan(tmp_path, capsys):
    dirs = make_job(tmp_path)
    for d in dirs:
        edit_trace(
            next((d / "trace").iterdir()),
            lambda doc: doc.update(
                traceEvents=[
                    e
                    for e in doc["traceEvents"]
                    if not str(e.get("name", "")).startswith(("gloo:", "c10d::"))
                ]
            ),
        )
    code, out, err = cli(capsys, "report", *dirs, "--engine", "local:1")
    assert code == 0, err
    assert "nan" not in out.lower()


# -- 2. the recorder's descriptors stay above 2
# -----------------------------------------------------


def test_a_script_that_closes_its_stdout_prints_nothing_into_the_step_file(tmp_path):
    script = f"""
import os, sys
from scaldiag.collect.recorder import StepRecorder
os.close(1)  # the script closes its stdout, then training starts
recorder = StepRecorder({str(tmp_path)!r}, None, warmup_steps=0, trace_steps=0)
for _ in range(3):
    recorder.begin()
try:
    os.write(1, b"the script's print\\n")
    sys.stderr.write("fd 1 took the print\\n")
except OSError:
    pass
recorder.end()
recorder.close()
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "fd 1 took" not in done.stderr
    lines = (tmp_path / "steps.jsonl").read_text().splitlines()
    assert lines and all(json.loads(x) for x in lines)


# -- 5. the calibration cache
# -------------------------------------------------------------------------

SWEEP = FIXTURES / "runs" / "sweep"  # two H200 runs: the sweep's predictions read the saved curves


def _saved_calibration(ranks=2, gpu_count=2, rows=None) -> dict:
    rows = rows or [
        {"bytes": m, "median_s": t, "min_s": t, "max_s": t, "repeats": 7}
        for m, t in ((8, 15e-6), (2**20, 25e-6), (2**26, 200e-6), (2**30, 2.9e-3))
    ]
    return {
        "schema": "scaldiag.calibration/1",
        "measured_at": "2026-12-02T04:00:00Z",
        "device": "gpu",
        "framework": "torch",
        "backend": "nccl",
        "ranks": ranks,
        "machine": {"gpu_name": "NVIDIA H200", "gpu_count": gpu_count, "link": {"kind": "nvlink"}},
        "allreduce": rows,
    }


CRAFTED = {
    "ranks Infinity": json.dumps(_saved_calibration()).replace('"ranks": 2', '"ranks": Infinity'),
    "gpu_count Infinity": (
        json.dumps(_saved_calibration()).replace('"gpu_count": 2', '"gpu_count": Infinity')
    ),
    "ranks 1e400": json.dumps(_saved_calibration()).replace('"ranks": 2', '"ranks": 1e400'),
    "a time of 1e400": json.dumps(_saved_calibration()).replace("0.0029", "1e400"),
    "nested 3,000 deep": (
        json.dumps(_saved_calibration()).replace(
            '"backend": "nccl"', '"backend": ' + "[" * 3000 + "]" * 3000
        )
    ),
    "a time of 1e-300": json.dumps(_saved_calibration()).replace("0.0029", "1e-300"),
    "a time of an hour": json.dumps(_saved_calibration()).replace("0.0029", "3600"),
    "ranks 10**9": json.dumps(_saved_calibration(ranks=10**9)),
    "a row a list": json.dumps(_saved_calibration(rows=[[8, 1e-5]])),
    "a JSON array": "[1, 2]",
    "not JSON": "\x00\xff",
}


@pytest.mark.parametrize("case", list(CRAFTED))
def test_a_crafted_calibration_is_noted_and_the_defaults_stand(tmp_path, capsys, monkeypatch, case):
    folder = tmp_path / "cache" / "scaldiag" / "interconnect"
    folder.mkdir(parents=True)
    (folder / "crafted.json").write_text(CRAFTED[case])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    code, out, err = cli(capsys, "report", SWEEP, "--format", "json")
    assert code == 0, err
    assert "not a scaldiag calibration" in out or "cannot read it" in out, case
    code, out, err = cli(capsys, "check", SWEEP, "--max-step-ms", "100000")
    assert code in (0, 1), err
    code, _, err = cli(capsys, "compare", SWEEP / "gpus1", SWEEP / "gpus2")
    assert code in (0, 1), err


# -- 9. Kineto: a lone surrogate, an exponent of 19 digits
# ---------------------------------------------

HEALTHY = FIXTURES / "kineto" / "h200_healthy_run"


def _every_name(text: str, suffix: str) -> str:
    return re.sub(r'"name": "([^"]*)"', lambda m: f'"name": "{m.group(1)}{suffix}"', text)


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_a_lone_surrogate_in_names_is_shown_escaped_not_exit_70(tmp_path, command):
    run = shutil.copytree(HEALTHY, tmp_path / "run")
    path = next((run / "trace").rglob("*.gz"))
    text = _every_name(gzip.decompress(path.read_bytes()).decode(), "\\ud800")
    path.write_bytes(gzip.compress(text.encode()))
    target = run / "trace" if command == "analyze" else run
    verbose = ["-v"] if command == "report" else []  # the short run report names no event
    done = subprocess.run(
        [sys.executable, "-m", "scaldiag", command, str(target), *verbose],
        capture_output=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"\\ud800" in done.stdout and b"Traceback" not in done.stderr


@pytest.mark.parametrize("field", ["ts", "dur", "pid", "tid", "baseTimeNanoseconds"])
def test_an_exponent_of_19_digits_is_no_number(tmp_path, capsys, field):
    text = gzip.decompress((GLOO / "rank0.pt.trace.json.gz").read_bytes()).decode()
    text = re.sub(f'"{field}": [0-9.]+', f'"{field}": 1e9999999999999999999', text, count=20)
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(text)
    code, _, err = cli(capsys, "analyze", path)
    assert code in (0, 2), err


# -- 13. check vouches only for one clean run ------------------------------------------------------


def _checked_run(tmp_path, **fields) -> Path:
    run = tmp_path / "run"
    shutil.copytree(SWEEP / "gpus1", run, ignore=shutil.ignore_patterns("trace"))
    record = json.loads((run / "run.json").read_text())
    record.update(fields)
    (run / "run.json").write_text(json.dumps(record))
    return run


def _another_runs_steps(run: Path) -> None:
    day_ns = 86400 * 10**9
    rows = [json.loads(x) for x in (run / "steps.jsonl").read_text().splitlines()]
    (run / "steps.jsonl").write_text(
        "".join(
            json.dumps({**r, "begin_ns": r["begin_ns"] + day_ns, "end_ns": r["end_ns"] + day_ns})
            + "\n"
            for r in rows
        )
    )


def _rank_killed(run: Path) -> None:
    (run / "rank1").mkdir()
    (run / "rank1" / "run.json").write_text(
        json.dumps({"status": "killed by signal 9", "exit_code": -9})
    )


def _capture_stopped(run: Path) -> None:
    training = json.loads((run / "training.json").read_text())
    training["capture_error"] = "OSError: [Errno 28] No space left on device"
    (run / "training.json").write_text(json.dumps(training))


@pytest.mark.parametrize(
    "fields, damage, said",
    [
        ({}, _another_runs_steps, "steps lie outside the run's start and end"),
        ({"ended_ns": 1795999999000000000}, None, "ended before it started"),
        ({"schema_version": 99}, None, "record schema 99"),
        ({"scaldiag_version": "99.0.0"}, None, "written by scaldiag 99.0.0"),
        ({}, _capture_stopped, "the capture stopped during the run (OSError: [Errno 28]"),
        (
            {},
            _rank_killed,
            "rank 1 did not finish cleanly (status killed by signal 9, exit code -9)",
        ),
    ],
)
def test_check_fails_a_record_that_is_not_one_clean_run(tmp_path, capsys, fields, damage, said):
    run = _checked_run(tmp_path, **fields)
    if damage is not None:
        damage(run)
    code, out, err = cli(capsys, "check", run, "--max-step-ms", "100000")
    assert code == 1 and said in out, out + err


def test_check_still_passes_the_clean_run(tmp_path, capsys):
    code, out, err = cli(capsys, "check", _checked_run(tmp_path), "--max-step-ms", "100000")
    assert code == 0, out + err


# -- 10. the environment: a directory it may not read, a full disk
# -------------------------------------


# Root reads any file: without its two capabilities that bypass permissions, it is refused as a user
# is.
WITHOUT_DAC = (
    ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
)


@pytest.mark.skipif(
    os.geteuid() == 0 and shutil.which("setpriv") is None, reason="root without setpriv"
)
@pytest.mark.parametrize(
    "argv",
    [
        ["report", "{run}"],
        ["check", "{run}", "--max-step-ms", "1000"],
        ["analyze", "{run}/trace"],
        ["compare", "{run}", str(SWEEP / "gpus2")],
    ],
)
def test_a_run_directory_without_read_permission_is_one_line(tmp_path, argv):
    run = shutil.copytree(SWEEP / "gpus1", tmp_path / "run")
    run.chmod(0)
    done = subprocess.run(
        [*WITHOUT_DAC, sys.executable, "-m", "scaldiag", *(a.format(run=run) for a in argv)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    run.chmod(0o755)
    assert done.returncode == 2 and "Permission denied" in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "argv, code",
    [
        (["check", str(SWEEP / "gpus1"), "--max-step-ms", "100000"], 0),
        (["check", str(SWEEP / "gpus1"), "--max-step-ms", "0.001"], 1),
        (["analyze", str(FIXTURES / "kineto" / "h200_cuda")], 2),
    ],
)
def test_stdout_on_a_full_device_keeps_checks_verdict_and_is_one_line(argv, code):
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "scaldiag", *argv],
            cwd=ROOT,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert done.returncode == code, done.stderr
    assert "No space left on device" in done.stderr and len(done.stderr.splitlines()) == 1, (
        done.stderr
    )


# -- 6, 7. the engines: a killed worker, an unreachable scheduler, SIGTERM
# ------------------------------


def _kill_myself(item):
    if item == "killed":
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
    return item


def test_a_local_worker_killed_is_one_line_and_no_worker_is_left():
    from scaldiag.engines import open_engine
    from scaldiag.errors import ScaldiagError

    with pytest.raises(ScaldiagError, match="a worker process of the local engine ended"):
        with open_engine("local:2") as engine:
            engine.map(_kill_myself, ["a", "killed", "b"])
    assert [
        c
        for c in psutil.Process().children(recursive=True)
        if c.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(c.cmdline())
    ] == []


def test_an_unreachable_scheduler_is_one_line_within_its_timeout(tmp_path, capsys):
    pytest.importorskip("distributed")
    dirs = make_job(tmp_path)
    started = time.monotonic()
    code, _, err = cli(capsys, "report", *dirs, "--engine", "tcp://127.0.0.1:9")
    assert code == 2 and "no Dask scheduler answered at tcp://127.0.0.1:9" in err, err
    assert time.monotonic() - started < 25


def test_sigterm_to_report_leaves_no_worker(tmp_path):
    dirs = make_job(tmp_path, nodes=4)
    proc = subprocess.Popen(
        [sys.executable, "-m", "scaldiag", "report", *map(str, dirs), "--engine", "local:2"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    me = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    while (
        time.monotonic() < deadline and len(me.children(recursive=True)) < 2
    ):  # the pool has started
        time.sleep(0.05)
    workers = me.children(recursive=True)
    assert workers, "no worker started"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 143), err  # 0: it had finished first
    assert "Traceback" not in err
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert alive == [], [p.pid for p in alive]


# -- 11. hash flooding the Kineto scanner's string table
# ---------------------------------------------


def _unseeded_slot(w: np.ndarray) -> np.ndarray:
    """The scanner's string hash of an 8-byte name before it was seeded (readers/_kineto_scan.c)."""
    with np.errstate(over="ignore"):
        h = (np.uint64(1469598103934665603 ^ 8) ^ w) * np.uint64(0x9E3779B97F4A7C15)
    h ^= h >> np.uint64(29)
    return h ^ (h >> np.uint64(32))


def _names(n: int, crafted: bool) -> list[bytes]:
    """``n`` distinct 8-byte names; crafted: each one's home slot among the table's first 256."""
    rng = np.random.default_rng(34)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", np.uint8)
    found: set[bytes] = set()
    while len(found) < n:
        w = (
            alphabet[rng.integers(0, len(alphabet), (4_000_000 if crafted else n, 8))]
            .view("<u8")
            .ravel()
        )
        if crafted:
            w = w[(_unseeded_slot(w) & np.uint64(0xFFFF)) < 256]
        raw = w.tobytes()
        found.update(raw[i : i + 8] for i in range(0, len(raw), 8))
    return sorted(found)[:n]


def _read_cpu_s(path: Path, names: list[bytes]) -> float:
    from scaldiag.readers.kineto import fast as kineto_fast

    events = [
        {
            "ph": "X",
            "name": x.decode(),
            "ts": 1000 + i,
            "dur": 1,
            "pid": 1,
            "tid": 1,
            "cat": "cpu_op",
        }
        for i, x in enumerate(names)
    ]
    path.write_text(json.dumps({"traceEvents": events}))
    started = time.process_time()
    assert kineto_fast.read_file(path) is not None
    return time.process_time() - started


def test_names_built_to_share_a_slot_read_as_fast_as_random_ones(tmp_path):
    """50,000 names in one cluster of the unseeded table: 0.97 s against 0.09 s for random names
    (11x,
    quadratic in the names); seeded, 0.09 s against 0.07 s."""
    from scaldiag.readers.kineto import fast as kineto_fast

    if kineto_fast._kineto_scan is None:
        pytest.skip("the C scanner is not built")
    crafted = _read_cpu_s(tmp_path / "crafted.pt.trace.json", _names(50_000, True))
    plain = _read_cpu_s(tmp_path / "random.pt.trace.json", _names(50_000, False))
    assert crafted < 3 * plain + 0.1, (crafted, plain)


# -- smaller: bidi overrides in the HTML heading
# -------------------------------------------------------


def test_bidi_overrides_in_a_run_name_do_not_reorder_the_html_heading(tmp_path, capsys):
    run = shutil.copytree(
        SWEEP / "gpus1", tmp_path / "run\u202egnp.exe", ignore=shutil.ignore_patterns("trace")
    )
    out = tmp_path / "r.html"
    code, _, err = cli(capsys, "report", run, "--format", "html", "-o", out)
    assert code == 0, err
    heading = re.search(r"<h1>(.*?)</h1>", out.read_text()).group(1)
    assert "\u202e" not in heading and "\\u202e" in heading
