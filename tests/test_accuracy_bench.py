"""bench/accuracy/run.py's judging: which number is compared with the twin, and the summary line."""

import importlib.util
import sys

import pytest
from conftest import ROOT

spec = importlib.util.spec_from_file_location(
    "accuracy_run", ROOT / "bench" / "accuracy" / "run.py"
)
acc = importlib.util.module_from_spec(spec)
sys.modules["accuracy_run"] = acc  # dataclasses look their module up
spec.loader.exec_module(acc)


def report(rate, findings, trace_findings=()):
    return {
        "stopwatch": rate,
        "wall_s": 1.0,
        "findings": list(findings),
        "trace_report": {"findings": list(trace_findings)},
    }


def finding(id_, category, severity="high", ceiling=None, forecast=None):
    return {
        "id": id_,
        "category": category,
        "severity": severity,
        "predicted_speedup": {"value": ceiling, "kind": "ceiling"} if ceiling else None,
        "forecast": forecast,
    }


def test_a_forecast_is_compared_only_when_it_is_for_the_twins_fix():
    batch = {"value": 4.0, "kind": "forecast", "arithmetic": "per-replica batch x4: ..."}
    top = finding("SD105", "host_overhead", ceiling=8.0, forecast=batch)
    zoo = acc.BY_NAME["host_launch"]  # twin: 4x the batch
    torch = acc.BY_NAME["torch_launch_bound"]  # twin: torch.compile
    r = acc.judge(zoo, report(100.0, [], [top]), report(500.0, []))
    assert (r["number"], r["kind"], r["rank"]) == (4.0, "forecast", 1)
    assert r["measured"] == pytest.approx(5.0) and r["error_pct"] == pytest.approx(-20.0)
    r = acc.judge(torch, report(100.0, [], [top]), report(500.0, []))
    assert (r["number"], r["kind"]) == (8.0, "ceiling")  # the forecast is for another fix


def test_summary_counts_forecasts_only_and_healthy_alarms_every_round():
    top = finding(
        "SD105",
        "host_overhead",
        ceiling=8.0,
        forecast={"value": 4.0, "kind": "forecast", "arithmetic": "per-replica batch x4"},
    )
    launch = [
        acc.judge(acc.BY_NAME["host_launch"], report(100.0, [], [top]), report(r, []))
        for r in (400.0, 500.0)
    ]
    wrong = acc.judge(acc.BY_NAME["input_python"], report(100.0, [], [top]), report(150.0, []))
    healthy = {"analyze": {"findings": [finding("SD105", "host_overhead")]}}
    calm = acc.judge(
        acc.BY_NAME["healthy"], {**report(100.0, [], [top]), **healthy}, report(101.0, [])
    )
    rows = [
        {"case": "host_launch", "planted": "host_overhead", "rounds": launch, "variants": {}},
        {
            "case": "input_python",
            "planted": "input",
            "rounds": [wrong],
            "variants": {"processes": 1.1},
        },
        {"case": "healthy", "planted": "none", "rounds": [calm, calm], "variants": {}},
    ]
    lines, summary = acc.table(rows, "(test)", 2, device_planted=True)
    # host_launch top-1 in both rounds, input_python not; errors 0% and -20%: median 10%; the
    # healthy script's SD105 high, in profile and analyze, in two rounds: 4. the 2-GPU error: the
    # development set's predictions (tests/test_predict_devset.py), where it is here
    assert (
        summary == "top-1 1/2; high false alarms 4; forecast error median 10% (2 forecasts); "
        f"2-GPU prediction error median {acc.devset_error()}"
    )
    assert acc.devset_error().startswith("not measured") != acc.DEVSET.exists()
    assert any("processes: 1.10x" in line for line in lines)
    assert any(
        "| host_launch | 2 | host_overhead |" in line and "4.50x [4.00-5.00]" in line
        for line in lines
    )


def test_the_wide_mlp_is_host_bound_on_a_gpu_and_unplanted_on_the_cpu():
    wide = acc.BY_NAME["torch_wide_mlp"]
    on_gpu, on_cpu = acc.for_device(wide, True), acc.for_device(wide, False)
    assert (on_gpu.planted, on_gpu.twin) == ("host_overhead", ["--fixed", "graphs"])
    assert (on_cpu.planted, on_cpu.twin) == (None, ["--fixed", "compile"])  # SD105's CPU fix
    # The host overhead SD105 names is then a top-1, not a false alarm.
    r = acc.judge(
        on_gpu,
        report(100.0, [], [finding("SD105", "host_overhead", ceiling=1.7)]),
        report(131.0, []),
    )
    assert (r["rank"], r["high_profile"]) == (1, [])


def test_a_healthy_scripts_twin_that_helps_says_the_label_is_doubtful():
    healthy = acc.BY_NAME["torch_healthy"]
    rounds = [acc.judge(healthy, report(100.0, []), report(rate, [])) for rate in (131.0,)]
    lines, _ = acc.table(
        [{"case": "torch_healthy", "planted": "none", "rounds": rounds, "variants": {}}],
        "(t)",
        1,
        device_planted=True,
    )
    assert any("twin helps: label doubtful" in line for line in lines)
    rounds = [acc.judge(healthy, report(100.0, []), report(101.0, []))]
    lines, _ = acc.table(
        [{"case": "torch_healthy", "planted": "none", "rounds": rounds, "variants": {}}],
        "(t)",
        1,
        device_planted=True,
    )
    assert any("- (twin = noise)" in line for line in lines)


def test_a_high_finding_where_the_twin_refutes_the_healthy_label_is_counted_apart():
    """torch_healthy's CPU twin is torch.compile: faster beyond HELPS in every round, the script is
    not healthy there, and SD105 high on it is no false alarm; the line names it."""
    healthy = acc.BY_NAME["torch_healthy"]
    alarm = {"analyze": {"findings": []}}
    high = report(100.0, [], [finding("SD105", "host_overhead")])
    row = {"case": "torch_healthy", "planted": "none", "variants": {}}
    rounds = [acc.judge(healthy, {**high, **alarm}, report(rate, [])) for rate in (120.0, 130.0)]
    _, summary = acc.table([{**row, "rounds": rounds}], "(t)", 2, device_planted=False)
    assert summary.startswith(
        "top-1 0/0; high false alarms 0 (2 more high findings where the fixed twin refutes the"
        " 'none' label: torch_healthy);"
    )
    # One round without the gain: the label stands, and the alarms count.
    rounds = [acc.judge(healthy, {**high, **alarm}, report(rate, [])) for rate in (120.0, 101.0)]
    _, summary = acc.table([{**row, "rounds": rounds}], "(t)", 2, device_planted=False)
    assert summary.startswith("top-1 0/0; high false alarms 2;")
