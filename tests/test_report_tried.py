"""`scaldiag try`'s result kept in a run directory (try.json) is read by `report`: one line in the
terminal, ``tried`` in the JSON; a damaged try.json is a record note, never a crash."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "fixtures" / "kineto" / "h200_healthy_run"

TRIED = {
    "finding": "SD105",
    "sets": {"steps_per_execution": 32},
    "forecast": 1.47,
    "ceiling": 1.74,
    "rounds": [{"baseline": {"dir": "x", "exit": 0, "step_ms": 2.0}}],
    "interrupted": False,
    "speedup": {"median": 1.31, "low": 1.2, "high": 1.4, "pairs": 3},
}


def _report(run_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scaldiag", "report", str(run_dir), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},  # the line unwrapped
    )


def _copy(tmp_path: Path, tried) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(RUN, run_dir)
    (run_dir / "try.json").write_text(tried if isinstance(tried, str) else json.dumps(tried))
    return run_dir


def test_report_says_what_try_measured(tmp_path):
    run_dir = _copy(tmp_path, TRIED)
    text = _report(run_dir)
    assert text.returncode == 0, text.stderr
    assert (
        "Tried (scaldiag try): SD105: steps_per_execution=32: measured 1.31x (range 1.20-1.40,"
        " 3 pairs); forecast 1.47x, ceiling 1.74x" in text.stdout
    )
    data = json.loads(_report(run_dir, "--format", "json").stdout)
    assert data["tried"]["speedup"] == TRIED["speedup"] and "rounds" not in data["tried"]


def test_a_damaged_try_json_is_a_note_and_no_line(tmp_path):
    run_dir = _copy(tmp_path, '{"finding": 7, "speedup": {"median": "fast"}}')
    done = _report(run_dir, "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["tried"] is None
    assert any("try.json" in m for m in data["missing"])
    run_dir = _copy(tmp_path / "b", "not json")
    assert "Tried" not in _report(run_dir).stdout


def test_the_tried_line_is_inert(tmp_path):
    run_dir = _copy(tmp_path, {**TRIED, "sets": {"\x1b[31mred": "\x1b]0;title\x07"}})
    out = _report(run_dir).stdout
    assert "Tried (scaldiag try): SD105" in out and "\x1b" not in out and "\\x1b" in out


def test_compare_sets_try_beside_the_finding_it_tried(tmp_path):
    """`compare A B`: the forecast line of the finding that `try` tried on A carries try's
    measurement after B's; the JSON forecast holds it (without the rounds)."""
    before = _copy(tmp_path, TRIED)
    after = tmp_path / "after"
    shutil.copytree(RUN, after)
    args = [sys.executable, "-m", "scaldiag", "compare", str(before), str(after)]
    env = {**os.environ, "COLUMNS": "300"}
    text = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env)
    assert text.returncode == 0, text.stderr
    line = next(ln for ln in text.stdout.splitlines() if ln.startswith("SD105"))
    assert line.endswith(
        "; scaldiag try on the first run: SD105: steps_per_execution=32: measured 1.31x (range"
        " 1.20-1.40, 3 pairs); forecast 1.47x, ceiling 1.74x"
    ), line
    data = json.loads(
        subprocess.run([*args, "--json", "-"], capture_output=True, text=True, cwd=ROOT).stdout
    )
    (sd105,) = [f for f in data["forecasts"] if f["finding"] == "SD105"]
    assert sd105["tried"]["speedup"] == TRIED["speedup"] and "rounds" not in sd105["tried"]


def test_compare_without_try_says_nothing_of_it(tmp_path):
    after = tmp_path / "after"
    shutil.copytree(RUN, after)
    args = [sys.executable, "-m", "scaldiag", "compare", str(RUN), str(after), "--json", "-"]
    data = json.loads(subprocess.run(args, capture_output=True, text=True, cwd=ROOT).stdout)
    assert [f["tried"] for f in data["forecasts"]] == [None] * len(data["forecasts"])
    assert data["forecasts"], data  # SD105 is there to carry it


def test_check_vets_try_json_with_the_record(tmp_path):
    """`check` reads try.json as part of the run's record: a whole one changes no result; a
    damaged one fails the gate with its reason, as any damaged file of the record does."""
    run_dir = _copy(tmp_path, TRIED)
    args = [sys.executable, "-m", "scaldiag", "check", str(run_dir), "--max-step-ms", "1000"]
    assert subprocess.run(args, capture_output=True, text=True, cwd=ROOT).returncode == 0
    (run_dir / "try.json").write_text('{"finding": 7}')
    failed = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "the record is damaged: try.json: field 'finding' ignored" in failed.stdout
