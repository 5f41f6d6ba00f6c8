"""Batch-size forecasts in a sweep: known answers on hand-made runs, and real emulated TF sweeps checked
against the measured twin (the same script with the fix)."""

import json

import pytest
from test_scaling import run

from scaldiag.analyze.scaling import analyze_scaling
from scaldiag.rules import SWEEP_RULES, check_all


def test_kept_batch_takes_device_work_from_one_device_and_the_rest_from_n():
    one = run(10.0, 256, 1, {"host_overhead": 20})                  # device work 8 ms for 256 samples
    two = run(7.0, 256, 2, {"collective": 20, "host_overhead": 30})  # per-replica 128: 1.4 ms all-reduce, 2.1 host
    s = analyze_scaling({1: [one], 2: [two]}, emulated=False)
    f = s.kept_batch
    assert (f.gpus, f.per_replica_batch, f.global_batch) == (2, 256, 512)
    # One device's 8 ms of device work (a step's steady time is 1% off the trace's: both scaled to it)
    # plus the two-device run's 3.5 ms of all-reduce and host.
    t1, t2 = one.steps.step_time_ms.mean, two.steps.step_time_ms.mean
    assert f.step_time_ms == pytest.approx(0.8 * t1 + 0.5 * t2)
    assert f.samples_per_s == pytest.approx(512 / (f.step_time_ms / 1e3))
    assert f.speedup == pytest.approx(f.samples_per_s / (256 / (t2 / 1e3)))
    (finding,) = [f for f in check_all(SWEEP_RULES, s) if f.id == "SD201"]
    assert finding.forecast.kind == "forecast"
    assert finding.forecast.value == pytest.approx(f.speedup) and "per-replica batch 256" in finding.forecast.arithmetic


def test_emulated_devices_share_the_cores_so_device_work_grows_with_the_global_batch():
    one = run(10.0, 256, 1, {})
    two = run(7.0, 256, 2, {"collective": 10})
    f = analyze_scaling({1: [one], 2: [two]}, emulated=True).kept_batch
    t2 = two.steps.step_time_ms.mean
    assert f.step_time_ms == pytest.approx(2 * 0.9 * t2 + 0.1 * t2)  # global batch 256 -> 512


def test_sd203_forecasts_a_larger_per_replica_batch_beside_its_ceiling():
    one = run(10.0, 256, 1, {})
    two = run(14.0, 512, 2, {"collective": 40})  # weak scaling; 5.6 ms of exposed all-reduce
    s = analyze_scaling({1: [one], 2: [two]}, emulated=False)
    (finding,) = [f for f in check_all(SWEEP_RULES, s) if f.id == "SD203"]
    assert finding.predicted_speedup.kind == "ceiling" and finding.forecast.kind == "forecast"
    t = two.steps.step_time_ms.mean
    # busy 50%: device work follows the samples (x4), the all-reduce of the same gradients stays.
    assert finding.forecast.value == pytest.approx(4 * t / (4 * 0.6 * t + 0.4 * t))


# --- real sweeps: TensorFlow on the CPU, emulated replicas -----------------------------------------
# Tolerance: the forecast and the twin are each one run on this 2-core machine, shared with other work,
# where the same twin (2 replicas x 64) measured 215 and 322 samples/s an hour apart (load average 5-7).
# So the bound is each run's own 95% interval (relative half-width of its steady step time: the forecast's
# 2-replica run and the twin), plus a model allowance of 20% (SD105's batch forecast measured -10% to +19%
# over three rounds on an H200). Measured here: SD201 -12% and +41% (bounds 39% and ~44%).
MODEL_ALLOWANCE = 0.20


def tolerance(*points) -> float:
    return MODEL_ALLOWANCE + sum(p["step_time_ci95_ms"] / p["step_time_ms"] for p in points)


@pytest.fixture(scope="module")
def emulated_sweep_and_twin(tmp_path_factory):
    pytest.importorskip("tensorflow", reason="capture tests need TensorFlow (make test installs it)")
    from conftest import ROOT
    from test_capture_tf import scaldiag

    tmp = tmp_path_factory.mktemp("sweep")
    script = ROOT / "examples" / "train_cnn.py"
    # Strong scaling: global batch 64 at 1 and 2 replicas (per-replica 64 -> 32): SD201.
    sweep = scaldiag("profile", "--emulate", "--gpus", "1,2", "--out", tmp / "sweep", "--json", tmp / "s.json",
                     script, "--", "--steps", "32", "--batch", "64", "--distribute")
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    # The twin: 2 replicas with the 1-replica run's per-replica batch (global 128).
    twin = scaldiag("profile", "--emulate", "--gpus", "2", "--out", tmp / "twin", "--json", tmp / "t.json",
                    script, "--", "--steps", "32", "--batch", "128", "--distribute")
    assert twin.returncode == 0, twin.stderr[-3000:]
    return json.loads((tmp / "s.json").read_text()), json.loads((tmp / "t.json").read_text()), tmp


def test_sd201_forecast_comes_true_on_an_emulated_tf_sweep(emulated_sweep_and_twin):
    report, twin, _ = emulated_sweep_and_twin
    (finding,) = [f for f in report["findings"] if f["id"] == "SD201"]
    assert finding["forecast"]["kind"] == "forecast"
    measured_two = report["scaling"][1]["samples_per_s"]
    forecast = finding["forecast"]["value"] * measured_two
    (point,) = twin["scaling"]
    assert point["per_replica_batch"] == 64 and point["global_batch"] == 128
    assert forecast == pytest.approx(point["samples_per_s"], rel=tolerance(report["scaling"][1], point))


def test_larger_batch_forecast_comes_true_on_an_emulated_tf_sweep(emulated_sweep_and_twin):
    # The 2-replica run at per-replica 32 forecast at 2x (64), against the same twin.
    from scaldiag.analyze.forecast import larger_batch_at
    from scaldiag.analyze.scaling import _parts_ms
    from scaldiag.pipeline import analyze_run_dir

    report, twin, tmp = emulated_sweep_and_twin
    (sweep_dir,) = [p for p in (tmp / "sweep").iterdir() if p.is_dir()]
    two = analyze_run_dir(sweep_dir / "gpus2")
    f = larger_batch_at(_parts_ms([two]), two.trace.units[0], 2, 32, report["scaling"][1]["samples_per_s"], 2)
    assert f.global_batch == 128
    (point,) = twin["scaling"]
    assert f.samples_per_s == pytest.approx(point["samples_per_s"], rel=tolerance(report["scaling"][1], point))
