"""``compare`` and ``check`` on saved runs (fixtures/runs: synthetic samples around real traces)."""

import json
import math
import shutil

import pytest
from conftest import FIXTURES

from scaldiag.cli import main
from scaldiag.errors import ScaldiagError
from scaldiag.pipeline import diagnose
from scaldiag.rules.check import Limits, check, parse_percent
from scaldiag.rules.compare import Change, compare, ratio_noise

RUNS = FIXTURES / "runs"
FAST, SLOW, SWEEP = RUNS / "sweep" / "gpus1", RUNS / "gpu1_slow", RUNS / "sweep"


@pytest.fixture(scope="module")
def reports():
    return {
        name: diagnose(path) for name, path in (("fast", FAST), ("slow", SLOW), ("sweep", SWEEP))
    }


def test_compare_runs_side_by_side(reports):
    cmp = compare(reports["fast"], reports["slow"])
    by = {c.metric: c for c in cmp.changes}
    step = by["step time (steady, mean)"]
    fast, slow = reports["fast"].analysis.steps, reports["slow"].analysis.steps
    assert (step.before, step.after) == (fast.step_time_ms.mean, slow.step_time_ms.mean)
    assert step.delta_pct == pytest.approx(
        100 * (slow.step_time_ms.mean / fast.step_time_ms.mean - 1)
    )
    assert step.verdict == "worse" and by["throughput"].verdict == "worse"
    assert 15 < step.delta_pct < 25  # the fixture's steady steps are 20% slower
    assert {c.metric for c in cmp.categories} >= {"compute", "input", "host_overhead"}
    assert cmp.most_changed is not None and not cmp.most_changed.within_noise
    forecasts = {f.finding: f for f in cmp.forecasts}
    assert "SD105" in forecasts and forecasts["SD105"].measured == pytest.approx(
        slow.samples_per_s / fast.samples_per_s
    )
    # SD105's number is a ceiling: a slower run does not pass it (a ceiling is broken only from
    # above).
    assert forecasts["SD105"].kind == "ceiling" and forecasts["SD105"].held is True


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


def test_a_forecast_holds_in_its_range_a_ceiling_under_its_top():
    from scaldiag.rules.compare import Forecast

    assert Forecast("SD1", "t", 1.7, 1.4, 2.1, 1.2, kind="forecast").held is False
    assert Forecast("SD1", "t", 1.7, 1.4, 2.1, 1.5, kind="forecast").held is True
    assert Forecast("SD1", "t", 1.7, 1.4, 2.1, 1.2, kind="ceiling").held is True
    assert Forecast("SD1", "t", 1.7, 1.4, 2.1, 2.5, kind="ceiling").held is False


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
        assert [r.check for r in results] == [
            "record",
            "record",
            "regression",
        ]  # the run's, the baseline's
        assert "baseline" in results[1].reason
        return results[-1].passed

    noise = ratio_noise(
        fast.analysis.steps.step_time_ms.mean,
        fast.analysis.steps.step_time_ms.ci95,
        slow.analysis.steps.step_time_ms.mean,
        slow.analysis.steps.step_time_ms.ci95,
    )
    low = 100 * (
        1 - slow.analysis.steps.samples_per_s / fast.analysis.steps.samples_per_s * math.exp(noise)
    )
    assert 0 < low < drop  # the drop's 95% low end
    assert not regression(slow, low - 0.1, fast)
    assert regression(
        slow, low + 0.1, fast
    )  # over by less than the noise: not a regression a gate may fail on
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
    assert "FAIL regression" in out and "beyond the 5% allowed" in out
    assert main(["check", str(FAST), "--min-efficiency", "0.8"]) == 2
    assert "needs a sweep" in capsys.readouterr().err


def test_compare_command_terminal_and_json(capsys, tmp_path):
    assert main(["compare", str(FAST), str(SLOW)]) == 0
    out = capsys.readouterr().out
    assert "changed most:" in out and "SD105 (Host-bound" in out
    assert main(["compare", str(FAST), str(SLOW), "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "run" and data["most_changed"] and data["forecasts"]


def test_a_killed_run_without_steps_compares_with_a_note(tmp_path, reports):
    run = tmp_path / "empty"
    shutil.copytree(RUNS / "killed", run)
    (run / "steps.jsonl").write_text("")
    cmp = compare(diagnose(run), reports["fast"])
    assert any("no steady-state steps" in n for n in cmp.notes)


def stretched(tmp_path, factor: float):
    """A copy of the fast run whose every step takes ``factor`` times as long (one clock, end to
    end)."""
    run = tmp_path / f"x{factor}"
    shutil.copytree(FAST, run)
    rows = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    t = rows[0]["begin_ns"]
    for r in rows:
        length = (r["end_ns"] - r["begin_ns"]) * factor
        r["begin_ns"], r["end_ns"] = t, int(t + length)
        t = r["end_ns"]
    (run / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return diagnose(run)


@pytest.mark.parametrize("factor", [1.0005, 1.002, 1.004, 1.006, 1.02, 1.07])
def test_one_noise_model_for_step_time_throughput_and_the_gate(tmp_path, reports, factor):
    """compare's step time and throughput never disagree, and check fails only a pair compare calls
    worse."""
    fast, slow = reports["fast"], stretched(tmp_path, factor)
    by = {c.metric: c for c in compare(fast, slow).changes}
    step, rate = by["step time (steady, mean)"], by["throughput"]
    assert step.within_noise == rate.within_noise
    assert step.noise_pct == rate.noise_pct
    assert (step.verdict, rate.verdict) in {("same (within noise)",) * 2, ("worse", "worse")}
    gate = check(slow, Limits(max_regression_pct=0.0), fast)[-1]
    assert gate.passed == step.within_noise, gate.reason


def test_the_noise_separates_the_stretched_runs(tmp_path, reports):
    """The parametrised factors straddle the noise: both verdicts are exercised."""
    s = reports["fast"].analysis.steps.step_time_ms
    relative = math.sqrt(2) * s.ci95 / s.mean
    assert 0.0005 < relative < 0.07


def test_compare_states_a_range_as_the_run_report_does(capsys, reports):
    """One wording of a speed-up and its range (render/ranges.py) in the run report and in compare.
    """
    from scaldiag.render import ranges

    sd105 = next(f for f in reports["fast"].trace_report.findings if f.id == "SD105")
    said = ranges.speedup_of(sd105.predicted_speedup)
    assert said.startswith("at most ") and "95% range" in said
    assert main(["compare", str(FAST), str(SLOW)]) == 0
    compared = " ".join(capsys.readouterr().out.split())
    assert main(["report", str(FAST)]) == 0
    reported = " ".join(capsys.readouterr().out.split())
    assert said in compared and said in reported
    assert "[" not in compared.split("changed most:")[1]  # no bracketed range of another format


def test_compare_reads_categories_per_batch_under_steps_per_execution(reports):
    """A traced step is one call of the train function: with steps_per_execution=K, K batches.
    compare
    reads each category per batch, so that a fused run is not read as K times the compute (issue
    32).
    """
    from dataclasses import replace

    fast = reports["fast"]
    fused = replace(
        fast,
        analysis=replace(
            fast.analysis, training={**fast.analysis.training, "steps_per_execution": 4}
        ),
    )
    plain = {c.metric: c.before for c in compare(fast, fast).categories}
    per_batch = {c.metric: c.after for c in compare(fast, fused).categories}
    assert plain.keys() == per_batch.keys()
    assert all(per_batch[m] == pytest.approx(plain[m] / 4) for m in plain)


def test_compare_says_when_the_runs_are_not_one_script_before_and_after(reports):
    """Other frameworks, another batch, a run that did not finish: each said (issue 34)."""
    from dataclasses import replace

    fast = reports["fast"]
    other = replace(
        fast,
        run_dir="other",
        analysis=replace(
            fast.analysis,
            run=fast.analysis.run.replace(status="interrupted"),
            training={
                **fast.analysis.training,
                "framework": {"name": "pytorch"},
                "global_batch": (fast.analysis.training.get("global_batch") or 1) * 2,
            },
        ),
    )
    notes = compare(fast, other).notes
    assert any("different frameworks" in n for n in notes)
    assert any("global batch differs" in n for n in notes)
    assert any("other did not finish (interrupted)" in n for n in notes)
    assert not [
        n for n in compare(fast, fast).notes if "framework" in n or "finish" in n or "batch" in n
    ]
