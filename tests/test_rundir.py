"""record/rundir.update_run: the one read-modify-rewrite of run.json."""

from __future__ import annotations

import json

from scaldiag.record.rundir import RUN_JSON, read_json, update_run


def test_update_run_merges_fields_after_the_change_and_keeps_the_rest(tmp_path):
    (tmp_path / RUN_JSON).write_text(
        json.dumps({"status": "running", "missing": ["a"], "ended_ns": 5})
    )
    written = update_run(
        tmp_path,
        lambda run: {
            **{k: v for k, v in run.items() if k != "ended_ns"},
            "missing": run["missing"] + ["b"],
        },
        status="finished",
    )
    assert written == read_json(tmp_path, RUN_JSON) == {"status": "finished", "missing": ["a", "b"]}
    assert (
        update_run(tmp_path, exit_code=0)["exit_code"] == 0
    )  # fields alone: merged into what is there


def test_a_change_that_says_none_leaves_run_json_as_it_was(tmp_path):
    (tmp_path / RUN_JSON).write_text('{"status": "finished"}')
    assert (
        update_run(
            tmp_path, lambda run: None if run.get("status") != "running" else {**run, "x": 1}
        )
        is None
    )
    assert (tmp_path / RUN_JSON).read_text() == '{"status": "finished"}'
    assert (
        update_run(tmp_path / "absent", lambda run: run or None) is None
    )  # no record: nothing written
    assert not (tmp_path / "absent").exists()
