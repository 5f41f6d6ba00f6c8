"""Batch-size forecasts in a sweep: known answers on hand-made runs, and what a real emulated TF
sweep's
forecasts are made of (whether they come true against a twin is `python -m bench accuracy`'s)."""

from dataclasses import replace

import pytest
from test_scaling import run

from scaldiag.analyze.batch_memory import DeviceMemory
from scaldiag.analyze.scaling import analyze_scaling
from scaldiag.rules import SWEEP_RULES, check_all


def test_kept_batch_takes_device_work_from_one_device_and_the_rest_from_n():
    one = run(10.0, 256, 1, {"host_overhead": 20})  # device work 8 ms for 256 samples
    two = run(
        7.0, 256, 2, {"collective": 20, "host_overhead": 30}
    )  # per-replica 128: 1.4 ms all-reduce, 2.1 host
    s = analyze_scaling({1: [one], 2: [two]}, emulated=False)
    f = s.kept_batch
    assert (f.gpus, f.per_replica_batch, f.global_batch) == (2, 256, 512)
    # One device's 8 ms of device work (a step's steady time is 1% off the trace's: both scaled to
    # it) plus the two-device run's 3.5 ms of all-reduce and host.
    t1, t2 = one.steps.step_time_ms.mean, two.steps.step_time_ms.mean
    assert f.step_time_ms == pytest.approx(0.8 * t1 + 0.5 * t2)
    assert f.samples_per_s == pytest.approx(512 / (f.step_time_ms / 1e3))
    assert f.speedup == pytest.approx(f.samples_per_s / (256 / (t2 / 1e3)))
    (finding,) = [f for f in check_all(SWEEP_RULES, s) if f.id == "SD201"]
    assert finding.forecast.kind == "forecast"
    assert (
        finding.forecast.value == pytest.approx(f.speedup)
        and "per-replica batch 256" in finding.forecast.arithmetic
    )


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


# --- real sweeps: TensorFlow on the CPU, emulated replicas
# ----------------------------------------- Whether a forecast comes true is a comparison of two
# runs' throughputs (the forecast against the measured twin, the same script with the fix): on this
# 2-core machine, shared with other work, the same twin (2 replicas x 64) measured 215 and 322
# samples/s an hour apart, and SD201's forecast read -12% to +59% of it. That claim is guarded by
# `python -m bench accuracy` (the zoo's planted scripts and their fixed twins, docs/scaling.md);
# here, on a real emulated sweep (conftest's emulated_sweep), what the forecast is made of.


@pytest.mark.slow
def test_sd201_forecasts_the_one_replica_runs_batch_on_an_emulated_tf_sweep(emulated_sweep):
    from scaldiag.analyze.forecast import kept_batch
    from scaldiag.analyze.scaling import _parts_ms
    from scaldiag.pipeline import analyze_run_dir

    report, out, _ = emulated_sweep
    (finding,) = [f for f in report["findings"] if f["id"] == "SD201"]
    assert (
        finding["forecast"]["kind"] == "forecast"
        and "per-replica batch 64" in finding["forecast"]["arithmetic"]
    )
    one_point, two_point = report["scaling"]
    assert (one_point["per_replica_batch"], two_point["per_replica_batch"]) == (64, 32)
    # The forecast is the 1-replica run's device work and the 2-replica run's rest, at per-replica
    # 64.
    (sweep_dir,) = [p for p in out.iterdir() if p.is_dir()]
    one, two = analyze_run_dir(sweep_dir / "gpus1"), analyze_run_dir(sweep_dir / "gpus2")
    f = kept_batch(
        _parts_ms([one]),
        _parts_ms([two]),
        two.trace.units[0],
        1,
        64,
        2,
        two_point["global_batch"],
        two_point["samples_per_s"],
        True,
    )
    assert (f.gpus, f.per_replica_batch, f.global_batch) == (2, 64, 128)
    assert finding["forecast"]["value"] == pytest.approx(f.speedup)
    assert f.samples_per_s == pytest.approx(128 / (f.step_time_ms / 1e3))


@pytest.mark.slow
def test_larger_batch_forecast_on_an_emulated_tf_sweep(emulated_sweep):
    # The 2-replica run at per-replica 32 forecast at 2x (64).
    from scaldiag.analyze.forecast import larger_batch_at
    from scaldiag.analyze.scaling import _parts_ms
    from scaldiag.pipeline import analyze_run_dir

    report, out, _ = emulated_sweep
    (sweep_dir,) = [p for p in out.iterdir() if p.is_dir()]
    two = analyze_run_dir(sweep_dir / "gpus2")
    measured = report["scaling"][1]["samples_per_s"]
    f = larger_batch_at(_parts_ms([two]), two.trace.units[0], 2, 32, measured, 2)
    assert f.global_batch == 128 and f.measured_samples_per_s == measured
    assert f.samples_per_s == pytest.approx(128 / (f.step_time_ms / 1e3))
    assert f.speedup == pytest.approx(f.samples_per_s / measured)


def _holding(r, peak_gib: float):
    """A hand-made run whose allocator peaked at ``peak_gib`` of an 80 GiB card."""
    mem = DeviceMemory(0, int(peak_gib * (1 << 30)), 80 << 30, 0, "the allocator", True)
    return replace(r, device_memory=mem)


def test_batch_forecasts_say_whether_the_batch_fits():
    one, two = _holding(run(10.0, 256, 1, {}), 30), _holding(run(7.0, 256, 2, {}), 20)
    (kept,) = [f for f in check_all(SWEEP_RULES, analyze_scaling({1: [one], 2: [two]}, False))]
    # SD201 keeps the one-device run's batch: it fitted there
    assert (
        kept.forecast.fits == "per-replica batch 256 fitted at 1 device(s) (peak 30.0 of 80.0 GiB)"
    )
    one, two = run(10.0, 256, 1, {}), _holding(run(14.0, 512, 2, {"collective": 40}), 30)
    s = analyze_scaling({1: [one], 2: [two]}, emulated=False)
    (grown,) = [f for f in check_all(SWEEP_RULES, s) if f.id == "SD203"]
    # SD203 grows the two-device run's batch x4: 4 x 30 GiB may not fit in 80 (x2 surely does)
    assert (
        grown.forecast.fits
        == "x4 may not fit in device memory (peak 30.0 of 80.0 GiB; sure up to x2)"
    )
