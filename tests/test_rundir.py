"""record/run_json.py: run.json's one owner (keys, types, JSON both ways) and its one
read-modify-rewrite, ``update``."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from scaldiag.errors import ScaldiagError
from scaldiag.record import run_json
from scaldiag.record.reader import read_record
from scaldiag.record.run_json import RunJson
from scaldiag.record.rundir import RUN_JSON, read_json

ROOT = Path(__file__).resolve().parent.parent


def _committed_run_jsons() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*run.json"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / p for p in listed if p.endswith("/run.json")]


def test_every_committed_run_json_reads_clean_and_writes_back_the_same_json(tmp_path):
    files = _committed_run_jsons()
    assert len(files) >= 10  # the fixtures, the golden runs, the printed-clock runs
    for path in files:
        text = path.read_text()
        run, notes = RunJson.load(path.parent)
        assert notes == [], path
        assert json.loads(run.to_json()) == json.loads(text), path
        run.save(tmp_path)
        written = (tmp_path / RUN_JSON).read_text()
        assert written == run.to_json()
        # what scaldiag wrote comes back byte for byte (the hand-made fixtures are indented
        # otherwise)
        if text == json.dumps(json.loads(text), indent=1, sort_keys=True):
            assert written == text, path


def test_unknown_keys_and_values_of_another_type_survive_a_rewrite(tmp_path):
    on_disk = {
        "status": "running",
        "exit_code": "zero",  # another type: not given out, noted, kept in the file
        "ended_ns": None,  # null: the key unsaid, not noted
        "from_a_newer_scaldiag": {"x": [1, 2]},
        "missing": ["a"],
    }
    (tmp_path / RUN_JSON).write_text(json.dumps(on_disk))
    run, notes = RunJson.load(tmp_path)
    assert run.exit_code is None and run.ended_ns is None and run.status == "running"
    assert notes == ["run.json: field 'exit_code' ignored (a str, not what the record holds)"]
    assert run.to_dict() == {
        "from_a_newer_scaldiag": {"x": [1, 2]},
        "missing": ["a"],
        "status": "running",
    }
    run_json.update(tmp_path, lambda r: r.replace(missing=[*r.missing, "b"]))
    assert read_json(tmp_path, RUN_JSON) == {**on_disk, "missing": ["a", "b"]}
    # a writer that sets a key replaces what it held
    run_json.update(tmp_path, exit_code=0, ended_ns=5)
    assert read_json(tmp_path, RUN_JSON)["exit_code"] == 0
    assert read_json(tmp_path, RUN_JSON)["ended_ns"] == 5


def test_update_sets_fields_after_the_change_and_none_removes_a_key(tmp_path):
    (tmp_path / RUN_JSON).write_text(
        json.dumps({"status": "running", "missing": ["a"], "ended_ns": 5})
    )
    written = run_json.update(
        tmp_path,
        lambda run: run.replace(ended_ns=None, missing=[*run.missing, "b"]),
        status="finished",
    )
    assert read_json(tmp_path, RUN_JSON) == {"status": "finished", "missing": ["a", "b"]}
    assert written == RunJson(status="finished", missing=["a", "b"])
    assert run_json.update(tmp_path, exit_code=0).exit_code == 0  # fields alone: set on the file


def test_a_change_that_says_none_leaves_run_json_as_it_was(tmp_path):
    (tmp_path / RUN_JSON).write_text('{"status": "finished"}')
    assert (
        run_json.update(
            tmp_path, lambda run: None if run.status != "running" else run.replace(cwd="/")
        )
        is None
    )
    assert (tmp_path / RUN_JSON).read_text() == '{"status": "finished"}'
    # no record: the change sees an empty one; nothing written
    assert run_json.update(tmp_path / "absent", lambda r: None if r.is_empty() else r) is None
    assert not (tmp_path / "absent").exists()


def test_a_writer_of_the_wrong_type_is_refused_with_the_key_named(tmp_path):
    with pytest.raises(ScaldiagError, match="run.json: exit_code cannot be a str"):
        RunJson(exit_code="0")
    with pytest.raises(ScaldiagError, match="started_ns cannot be a int"):
        RunJson().replace(started_ns=-1)  # a time is in [0, 2**62)
    with pytest.raises(TypeError):
        RunJson().replace(no_such_key=1)  # run.json's keys are RunJson's fields
    assert not (tmp_path / RUN_JSON).exists()


def test_from_json_refuses_what_is_no_record_in_one_line():
    assert RunJson.from_json('{"status": "finished", "x": 1}').unknown == {"x": 1}
    for text, words in [
        ("[1]", "holds a JSON list, not an object"),
        ("{", "not valid JSON"),
        ('{"command": ["python", 3]}', "field 'command' ignored (a list"),
    ]:
        with pytest.raises(ScaldiagError, match=re.escape(words)):
            RunJson.from_json(text)


def test_a_rank_record_is_checked_as_the_main_one(tmp_path):
    """A rank's run.json goes through the same class: a damaged field is noted, not used."""
    rank = tmp_path / "rank1"
    rank.mkdir()
    (rank / RUN_JSON).write_text(json.dumps({"status": ["finished"], "exit_code": 0}))
    record = read_record(rank)
    assert record.run.status is None and record.run.exit_code == 0
    assert any("field 'status' ignored" in m for m in record.run.missing)


def test_run_json_keys_are_spelled_in_one_module():
    """Every key of run.json as a string literal: in record/run_json.py and nowhere else in
    scaldiag/ (the others use RunJson's attributes)."""
    keys = ("status", "exit_code", "ended_ns", "started_ns", "launcher_pid", "signals_received")
    spelled = {}
    for path in (ROOT / "scaldiag").rglob("*.py"):
        text = path.read_text()
        for key in keys:
            if re.search(rf"[\"']{key}[\"']", text):
                spelled.setdefault(key, []).append(str(path.relative_to(ROOT)))
    assert spelled == {k: ["scaldiag/record/run_json.py"] for k in keys}
