"""Scaling arithmetic on hand-made runs whose answers are known."""

import pytest

from scaldiag.analyze.categories import CATEGORIES
from scaldiag.analyze.profile import CategoryTime, ProfileAnalysis, UnitAnalysis
from scaldiag.analyze.run import RunAnalysis, StepStats
from scaldiag.analyze.scaling import analyze_scaling
from scaldiag.analyze.stats import Summary
from scaldiag.record.run_json import RunJson


def run(step_ms, global_batch, replicas, shares, spread=0.5):
    """A run with a steady step time and a trace whose exclusive shares (percent) are ``shares``."""
    shares = {c: shares.get(c, 0.0) for c in CATEGORIES}
    shares["compute"] += 100 - sum(shares.values())
    cats = {
        c: CategoryTime(step_ms * v / 100, v, spread, step_ms * v / 100) for c, v in shares.items()
    }
    unit = UnitAnalysis("/device:GPU:0", "gpu", 5, Summary.of([step_ms] * 5), 50.0, cats)
    trace = ProfileAnalysis("r", [], [], 0, "markers", "", [unit])
    steps = StepStats(
        100,
        90,
        {},
        Summary.of([step_ms * 0.99, step_ms * 1.01] * 10),
        global_batch,
        None,
        None,
        None,
        (0, 1),
    )
    training = {
        "global_batch": global_batch,
        "replicas": replicas,
        "per_replica_batch": global_batch // replicas,
    }
    return RunAnalysis(RunJson(), training, {}, steps, [], None, trace)


def test_weak_scaling_lost_speedup_adds_up_and_names_the_collective():
    one = run(10.0, 256, 1, {"input": 10})
    # 2 GPUs, same per-replica batch; the step grew by 2.5 ms of all-reduce.
    two = run(12.5, 512, 2, {"input": 8, "collective": 20})
    s = analyze_scaling({1: [one], 2: [two]}, emulated=False)
    assert s.mode == "weak"
    p1, p2 = s.points
    assert p2.speedup == pytest.approx((512 / 12.5) / (256 / 10.0))  # 1.6
    assert p2.efficiency == pytest.approx(0.8)
    (a,) = s.attribution
    assert a.ideal == 2.0 and a.measured == pytest.approx(1.6)
    assert sum(c.lost_speedup for c in a.causes) == pytest.approx(2.0 - 1.6)
    top = a.causes[0]
    assert top.category == "collective" and top.lost_speedup == pytest.approx(2 * 2.5 / 12.5)
    assert not top.within_noise


def test_strong_scaling_and_emulated_ideal():
    one = run(10.0, 256, 1, {})
    two = run(6.0, 256, 2, {"host_overhead": 20})
    s = analyze_scaling({1: [one], 2: [two]}, emulated=True)
    assert s.mode == "strong"
    (a,) = s.attribution
    assert a.ideal == 1.0  # emulated devices share the cores
    assert s.points[1].efficiency == pytest.approx(10.0 / 6.0)  # speedup / ideal speedup
    assert a.measured == pytest.approx(10.0 / 6.0)
    assert sum(c.lost_speedup for c in a.causes) == pytest.approx(1.0 - 10.0 / 6.0)


def test_repeats_widen_the_interval_to_the_run_to_run_spread():
    s = analyze_scaling(
        {1: [run(10.0, 64, 1, {}), run(12.0, 64, 1, {})], 2: [run(11.0, 128, 2, {})]}, False
    )
    p1 = s.points[0]
    assert p1.runs == 2 and p1.step_time_ms == pytest.approx(11.0)
    assert p1.step_time_ci95_ms > 5  # t(1 dof) = 12.7: two repeats say little


def test_a_part_smaller_than_its_spread_is_marked_noise():
    one = run(10.0, 256, 1, {"layout": 5.0}, spread=3.0)
    two = run(10.0, 512, 2, {"layout": 5.5}, spread=3.0)
    (a,) = analyze_scaling({1: [one], 2: [two]}, False).attribution
    layout = next(c for c in a.causes if c.category == "layout")
    assert layout.within_noise


def test_predictions_scale_each_part_by_the_stated_model():
    from scaldiag.analyze.predict import Basis, predict

    # 10 ms at 1 device: 6 compute, 2 input, 2 host; weak scaling to 4 devices,
    # 100 MB of parameters over a 100 GB/s link.
    basis = Basis(
        gpus=1,
        step_time_ms=10.0,
        global_batch=64,
        shares={"compute": 0.6, "input": 0.2, "host_overhead": 0.2},
        parameter_bytes=100_000_000,
        link_bytes_per_s=100e9,
    )
    p = predict(basis, 4, "weak")
    collective_ms = 2 * 3 / 4 * 100e6 / 100e9 * 1e3  # 1.5 ms
    assert p.step_time_ms == pytest.approx(6 + 2 * 4 + 2 + collective_ms)
    assert p.samples_per_s == pytest.approx(256 / (p.step_time_ms / 1e3))
    strong = predict(basis, 4, "strong")
    assert strong.step_time_ms == pytest.approx(6 / 4 + 2 + 2 + collective_ms)
    emulated = predict(
        basis, 4, "weak", emulated=True
    )  # same cores: 4x the samples take 4x the compute
    assert emulated.step_time_ms == pytest.approx(6 * 4 + 2 * 4 + 2 + collective_ms)


def test_validation_compares_the_prediction_from_one_device_with_the_measurement():
    one = run(10.0, 256, 1, {"input": 10})
    two = run(12.5, 512, 2, {"input": 8, "collective": 20})
    s = analyze_scaling({1: [one], 2: [two]}, emulated=False)
    (v,) = s.validation
    # No parameter size or link: the collective is left out, so the prediction is optimistic.
    assert v.samples_per_s == pytest.approx(512 / ((9.0 + 2 * 1.0) / 1e3))
    assert v.error_pct == pytest.approx(100 * (v.samples_per_s - 512 / 0.0125) / (512 / 0.0125))
    assert any("optimistic" in a for a in v.assumptions)
    assert [p.gpus for p in s.predictions] == [1, 2, 4, 8]


def test_sd201_per_replica_batch_shrinking():
    from scaldiag.rules import SWEEP_RULES, check_all

    shrinking = analyze_scaling({1: [run(10.0, 256, 1, {})], 2: [run(7.0, 256, 2, {})]}, False)
    (finding,) = check_all(SWEEP_RULES, shrinking)
    assert finding.id == "SD201" and "256" in finding.summary
    weak = analyze_scaling({1: [run(10.0, 256, 1, {})], 2: [run(11.0, 512, 2, {})]}, False)
    assert check_all(SWEEP_RULES, weak) == []


def test_run_rules_on_replicas_and_clocks():
    from dataclasses import replace

    from scaldiag.analyze.run import GpuSummary
    from scaldiag.rules import RUN_RULES, check_all

    gpu = GpuSummary(
        0,
        "H200",
        100,
        100.0,
        50.0,
        None,
        None,
        None,
        None,
        None,
        1500,
        1980,
        500.0,
        ["sw_power_cap"],
    )
    r = replace(run(10.0, 256, 2, {}), inventory={"gpus": [{"uuid": "GPU-a"}]}, gpus=[gpu])
    found = {f.id: f for f in check_all(RUN_RULES, r)}
    assert set(found) == {"SD202", "SD204"}  # 2 replicas on 1 UUID; a power cap
    slow_link = replace(
        r,
        inventory={
            "gpus": [
                {"index": 0, "uuid": "GPU-a", "pcie_gen_max": 5, "pcie_width_max": 16},
                {"index": 1, "uuid": "GPU-b"},
            ]
        },
        gpus=[replace(gpu, clock_event_reasons=[], pcie_gen_max_seen=3, pcie_width_max_seen=16)],
    )
    (link,) = check_all(RUN_RULES, slow_link)
    assert link.id == "SD208" and "Gen3 x16 (supports Gen5 x16)" in link.summary
    assert found["SD204"].predicted_speedup.value == pytest.approx(1980 / 1500)
    calm = replace(
        r,
        inventory={"gpus": [{"uuid": "GPU-a"}, {"uuid": "GPU-b"}]},
        gpus=[replace(gpu, clock_event_reasons=[])],
    )
    assert check_all(RUN_RULES, calm) == []


def test_sd203_and_sd205_read_the_attribution():
    from scaldiag.rules import SWEEP_RULES, check_all

    one = run(10.0, 256, 1, {"input": 10})
    collective = analyze_scaling(
        {1: [one], 2: [run(12.5, 512, 2, {"input": 8, "collective": 20})]}, False
    )
    found = {f.id: f for f in check_all(SWEEP_RULES, collective)}
    assert set(found) == {"SD203"}
    assert found["SD203"].predicted_speedup.value == pytest.approx((1.6 + 0.4) / 1.6)
    # With parameter bytes and a link: the achieved all-reduce bus bandwidth.
    from dataclasses import replace

    two = run(12.5, 512, 2, {"input": 8, "collective": 20})
    two = replace(
        two,
        training={**two.training, "parameter_bytes": 100_000_000},
        inventory={"gpus": [{"nvlink_active_links": 18}]},
    )
    point = analyze_scaling({1: [one], 2: [two]}, False).points[1]
    assert point.collective_ms == pytest.approx(2.5)
    assert point.allreduce_bus_bytes_per_s == pytest.approx(2 * 1 / 2 * 100e6 / 2.5e-3)  # 40 GB/s
    assert point.link_bytes_per_s == pytest.approx(18 * 25e9)
    host = analyze_scaling({1: [one], 2: [run(14.0, 512, 2, {"input": 35})]}, False)
    found = {f.id: f for f in check_all(SWEEP_RULES, host)}
    assert set(found) == {"SD205"}
    assert "host" in found["SD205"].title.lower()


def test_sd207_input_ceiling_caps_the_speedup():
    from dataclasses import replace

    from scaldiag.rules import RUN_RULES, check_all

    r = run(10.0, 256, 1, {})
    r = replace(r, steps=replace(r.steps, samples_per_s=25_600.0))  # 256 samples per 10 ms
    capped = replace(
        r,
        training={
            **r.training,
            "input_ceiling": {
                "samples_per_s": 30_000.0,
                "batches": 50,
                "seconds": 3.0,
                "source": "test",
            },
        },
    )
    (finding,) = check_all(RUN_RULES, capped)
    assert finding.id == "SD207" and finding.severity == "high"  # 30,000 / 25,600 < 1.2
    roomy = replace(
        r,
        training={
            **r.training,
            "input_ceiling": {
                "samples_per_s": 80_000.0,
                "batches": 50,
                "seconds": 3.0,
                "source": "test",
            },
        },
    )
    assert check_all(RUN_RULES, roomy) == []


def test_the_curve_fits_host_time_growing_with_the_global_batch():
    one = run(10.0, 256, 1, {"host_overhead": 20})  # host 2 ms
    two = run(14.0, 512, 2, {"host_overhead": 100 * 6 / 14})  # host 6 ms: +4 ms for +256 samples
    s = analyze_scaling({1: [one], 2: [two]}, False)
    curve = {p.gpus: p for p in s.predictions}
    assert curve[1].step_time_ms == pytest.approx(10.0)  # back through the 1-device point
    assert curve[2].step_time_ms == pytest.approx(14.0)
    assert curve[4].step_time_ms == pytest.approx(
        8.0 + 6.0 + 4.0 * 2
    )  # device 8 ms, host 6 + 2 x 4 ms
    assert any("per sample" in a for a in curve[4].assumptions)


def test_a_point_whose_framework_ignored_the_devices_is_left_out_and_fails_check():
    """`replicas: 1` at "2 devices" (a script with no distribution strategy): it reads as 1.13x and
    113%
    efficiency if compared; it is named instead, in no speedup, and `check --min-efficiency` fails.
    """
    from scaldiag.rules.check import Limits, check
    from scaldiag.rules.report import SweepReport

    one = run(10.0, 256, 1, {})
    ignored = run(8.85, 256, 1, {})  # the same single replica, a little faster by chance
    s = analyze_scaling({1: [one], 2: [ignored]}, emulated=True)
    assert [p.gpus for p in s.points] == [1] and [p.gpus for p in s.left_out] == [2]
    assert s.left_out[0].speedup is None and s.left_out[0].efficiency is None
    assert any("used 1 replica(s) of the 2 devices" in n for n in s.notes)
    results = check(SweepReport("sweep", s, []), Limits(min_efficiency=0.8))
    assert not all(r.passed for r in results)
    assert any(not r.passed and "used 1 replica(s)" in r.reason for r in results)
