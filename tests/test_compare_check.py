"""``compare`` and ``check`` on saved runs (fixtures/runs: synthetic samples around real traces)."""

import json
import shutil

import pytest
from conftest import FIXTURES

from scaldiag.cli import main
from scaldiag.errors import ScaldiagError
from scaldiag.pipeline import diagnose
from scaldiag.rules.check import Limits, check, parse_percent
from scaldiag.rules.compare import Change, compare

RUNS = FIXTURES / "runs"
FAST, SLOW, SWEEP = RUNS / "sweep" / "gpus1", RUNS / "gpu1_slow", RUNS / "sweep"


@pytest.fixture(scope="module")
def reports():
    return {name: diagnose(path) for name, path in (("fast", FAST), ("slow", SLOW), ("sweep", SWEEP))}


def test_compare_runs_side_by_side(reports):
    cmp = compare(reports["fast"], reports["slow"])
    by = {c.metric: c for c in cmp.changes}
    step = by["step time (steady, mean)"]
    fast, slow = reports["fast"].analysis.steps, reports["slow"].analysis.steps
    assert (step.before, step.after) == (fast.step_time_ms.mean, slow.step_time_ms.mean)
    assert step.delta_pct == pytest.approx(100 * (slow.step_time_ms.mean / fast.step_time_ms.mean - 1))
    assert step.verdict == "worse" and by["throughput"].verdict == "worse"
    assert 15 < step.delta_pct < 25  # the fixture's steady steps are 20% slower
    assert {c.metric for c in cmp.categories} >= {"compute", "input", "host_overhead"}
    assert cmp.most_changed is not None and not cmp.most_changed.within_noise
    forecasts = {f.finding: f for f in cmp.forecasts}
    assert "SD105" in forecasts and forecasts["SD105"].measured == pytest.approx(
        slow.samples_per_s / fast.samples_per_s)
    assert forecasts["SD105"].held is False  # a slower run is not the forecast speedup


def test_compare_a_run_with_itself_is_all_same(reports):
    cmp = compare(reports["fast"], reports["fast"])
    assert {c.verdict for c in cmp.changes} <= {"same", "same (within noise)"}
    assert cmp.most_changed is None


def test_compare_sweeps_per_device_count(reports):
    cmp = compare(reports["sweep"], reports["sweep"])
    metrics = [c.metric for c in cmp.changes]
    assert "2 devices: speedup" in metrics and "2 devices: efficiency" in metrics
    assert "1 devices: speedup" not in metrics  # the base has speedup 1 by definition
    with pytest.raises(ScaldiagError):
        compare(reports["sweep"], reports["fast"])


def test_change_direction():
    assert Change("throughput", "samples/s", 100, 120, lower_is_better=False).verdict == "better"
    assert Change("step", "ms", 2.0, 2.1, noise=0.2).verdict == "same (within noise)"
    assert Change("step", "ms", 2.0, 2.5, noise=0.2).verdict == "worse"
    assert Change("step", "ms", None, 2.5).verdict == "?"


def test_check_limits(reports):
    sweep = reports["sweep"]
    efficiency = sweep.analysis.points[1].efficiency
    assert all(r.passed for r in check(sweep, Limits(min_efficiency=efficiency - 0.01)))
    failed = [r for r in check(sweep, Limits(min_efficiency=efficiency + 0.01)) if not r.passed]
    assert len(failed) == 1 and "2 devices: efficiency" in failed[0].reason
    step = reports["fast"].analysis.steps.step_time_ms.mean
    record, within = check(reports["fast"], Limits(max_step_ms=step + 0.001))
    assert record.check == "record" and record.passed and "exit code 0" in record.reason
    assert within.check == "step time" and within.passed
    assert not check(reports["fast"], Limits(max_step_ms=step - 0.001))[1].passed


def test_check_regression_against_a_baseline(reports):
    slow, fast = reports["slow"], reports["fast"]
    drop = 100 * (1 - slow.analysis.steps.samples_per_s / fast.analysis.steps.samples_per_s)
    def regression(report, pct, baseline):
        results = check(report, Limits(max_regression_pct=pct), baseline)
        assert [r.check for r in results] == ["record", "record", "regression"]  # the run's, the baseline's
        assert "baseline" in results[1].reason
        return results[-1].passed
    assert not regression(slow, drop - 0.5, fast)
    assert regression(slow, drop + 0.5, fast)
    assert regression(fast, 0, slow)  # faster than the baseline


def test_check_usage_errors(reports):
    with pytest.raises(ScaldiagError, match="needs a sweep"):
        check(reports["fast"], Limits(min_efficiency=0.8))
    with pytest.raises(ScaldiagError, match="nothing to check"):
        check(reports["fast"], Limits())
    with pytest.raises(ScaldiagError, match="go together"):
        check(reports["fast"], Limits(max_regression_pct=5))
    assert parse_percent("5%") == parse_percent("5") == 5.0
    with pytest.raises(ScaldiagError):
        parse_percent("five")


def test_check_command_exit_codes(capsys):
    assert main(["check", str(SWEEP), "--min-efficiency", "0.5"]) == 0
    assert "check passed" in capsys.readouterr().out
    assert main(["check", str(SLOW), "--baseline", str(FAST), "--max-regression", "5%"]) == 1
    out = capsys.readouterr().out
    assert "FAIL regression" in out and "slower (beyond the 5% allowed)" in out
    assert main(["check", str(FAST), "--min-efficiency", "0.8"]) == 2
    assert "needs a sweep" in capsys.readouterr().err


def test_compare_command_terminal_and_json(capsys, tmp_path):
    assert main(["compare", str(FAST), str(SLOW)]) == 0
    out = capsys.readouterr().out
    assert "changed most:" in out and "forecast SD105" in out
    assert main(["compare", str(FAST), str(SLOW), "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "run" and data["most_changed"] and data["forecasts"]


def test_a_killed_run_without_steps_compares_with_a_note(tmp_path, reports):
    run = tmp_path / "empty"
    shutil.copytree(RUNS / "killed", run)
    (run / "steps.jsonl").write_text("")
    cmp = compare(diagnose(run), reports["fast"])
    assert any("no steady-state steps" in n for n in cmp.notes)
