"""``scaldiag check`` passes only a finished run (exit code 0) whose record reads clean (issue 22,
item 3).

A CI gate must not pass a run it cannot vouch for: killed, interrupted, still
marked running with its launcher gone, failed, or with a damaged run.json;
the same for the baseline and for every run of a sweep. Each case runs the
command in-process and reads its exit code and its reason.
"""

import json
import platform
import shutil
import subprocess
import sys

import pytest
from conftest import FIXTURES

from scaldiag.cli import main

RUNS = FIXTURES / "runs"
# Limits every fixture run meets: a failure below can only come from the record.
LIMIT = ["--max-step-ms", "100000"]


def _run(tmp_path, name="run", **fields):
    """A copy of a recorded run without its trace (fast), run.json updated with ``fields`` (None:
    removed)."""
    run = tmp_path / name
    shutil.copytree(RUNS / "sweep" / "gpus1", run, ignore=shutil.ignore_patterns("trace"))
    record = json.loads((run / "run.json").read_text())
    record.update(fields)
    record = {k: v for k, v in record.items() if v is not None}
    (run / "run.json").write_text(json.dumps(record))
    return run


def _check(capsys, *argv):
    code = main(["check", *map(str, argv), *LIMIT])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_finished_run_with_exit_code_0_passes(tmp_path, capsys):
    code, out = _check(capsys, _run(tmp_path))
    assert code == 0, out
    assert "ok   record: run finished with exit code 0, the record reads clean" in out


@pytest.mark.parametrize(
    "fields, reason",
    [
        (
            {"status": "killed by signal 9", "exit_code": -9},
            "did not finish (status killed by signal 9, exit code -9)",
        ),
        ({"status": "failed", "exit_code": 3}, "did not finish (status failed, exit code 3)"),
        (
            {"status": "interrupted", "exit_code": -2},
            "did not finish (status interrupted, exit code -2)",
        ),
        ({"status": "running", "exit_code": None}, "did not finish (status running)"),
        ({"status": "finished", "exit_code": 3}, "the script exited with code 3"),
        (
            {"status": "finished", "exit_code": None, "launcher_pid": 1},
            "has no exit code in run.json",
        ),
        (
            {"status": "finished", "exit_code": "0"},
            "the record is damaged: run.json: field 'exit_code' ignored",
        ),
    ],
)
def test_a_run_that_did_not_finish_cleanly_fails_with_its_reason(tmp_path, capsys, fields, reason):
    code, out = _check(capsys, _run(tmp_path, **fields))
    assert code == 1, out
    assert "FAIL record: run: " in out and reason in out
    assert out.splitlines()[-1].startswith("check failed: run: ")


def test_a_sigkilled_run_fails(capsys):
    code, out = _check(capsys, RUNS / "killed")
    assert code == 1 and "status killed by signal 9" in out


def test_a_run_left_running_by_a_killed_launcher_fails(tmp_path, capsys):
    run = _run(
        tmp_path, status="running", exit_code=None, launcher_pid=_dead_pid(), host=platform.node()
    )
    code, out = _check(capsys, run)
    assert code == 1 and "status running" in out
    assert "has ended without finalising it" in out


def _flip(data: bytes) -> bytes:
    """The byte of '"finished"' turned into another letter: still JSON, no longer the status."""
    i = data.index(b'"finished"') + 1
    return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]


@pytest.mark.parametrize(
    "damage", ["empty", "truncated", "bit-flipped", "array", "directory", "not utf-8"]
)
def test_a_damaged_run_json_fails_and_says_what(tmp_path, capsys, damage):
    run = _run(tmp_path)
    path = run / "run.json"
    data = path.read_bytes()
    if damage == "directory":
        path.unlink()
        path.mkdir()
    else:
        path.write_bytes(
            {
                "empty": b"",
                "truncated": data[: len(data) // 2],
                "bit-flipped": _flip(data),
                "array": b"[1, 2]",
                "not utf-8": b"\xff" + data,
            }[damage]
        )
    code, out = _check(capsys, run)
    assert code == 1, out
    assert "FAIL record: run: the run did not finish" in out


def test_a_damaged_steps_line_fails_the_check(tmp_path, capsys):
    run = _run(tmp_path)
    with open(run / "steps.jsonl", "a") as f:
        f.write('{"step": 1, "begin_ns": ' + str(2**70) + ', "end_ns": 1}\n')
    code, out = _check(capsys, run)
    assert code == 1 and "the record is damaged: steps.jsonl: 1 damaged line skipped" in out


def test_a_baseline_that_did_not_finish_fails_the_check(tmp_path, capsys):
    good, bad = _run(tmp_path, "good"), _run(tmp_path, "bad", status="failed", exit_code=3)
    code, out = _check(capsys, good, "--baseline", bad, "--max-regression", "50%")
    assert (
        code == 1
        and "FAIL record: baseline run: the run did not finish (status failed, exit code 3)" in out
    )
    (bad / "run.json").write_text("")
    code, out = _check(capsys, good, "--baseline", bad, "--max-regression", "50%")
    assert code == 1 and "FAIL record: baseline run: the run did not finish (status unknown)" in out
    code, out = _check(
        capsys, good, "--baseline", _run(tmp_path, "also_good"), "--max-regression", "50%"
    )
    assert code == 0, out


def test_a_sweep_with_a_run_that_did_not_finish_fails(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    shutil.copytree(RUNS / "sweep", sweep, ignore=shutil.ignore_patterns("trace"))
    code, out = _check(capsys, sweep)
    assert code == 0 and "ok   record: all 2 runs finished with exit code 0" in out
    record = json.loads((sweep / "gpus2" / "run.json").read_text())
    (sweep / "gpus2" / "run.json").write_text(
        json.dumps({**record, "status": "interrupted", "exit_code": -15})
    )
    code, out = _check(capsys, sweep)
    assert (
        code == 1
        and "FAIL record: 2 devices (gpus2): the run did not finish (status interrupted" in out
    )
