"""SD101 or SD102: the input's cost per byte copied decides, on hand-built traces shaped as the
zoo's H200 runs.

The shapes follow bench/results/gpu_h200/accuracy (Keras 3 on JAX, one H200): host_to_device.py's
float32 batches (256 x 128 x 128 x 3 float32, 50 MB a step) took 18.6 of 21.2 ms per step in the
host's hand-over (the `scaldiag_input` annotation around Keras' batch slicing and device_put);
input_python.py's batches (128 x 32 x 32 x 3 float32, 1.6 MB) are blurred in NumPy, about 16 ns per
byte.
"""

import pytest
from xspace_builder import PlaneBuilder, new_space, write

from scaldiag.analyze.profile import analyze_trace
from scaldiag.readers.xplane.read import read_trace
from scaldiag.rules import run_rules

US = 1000  # ns


def zoo_trace(
    tmp_path, step_us: int, input_us: int, copy_bytes: int, copy_us: int, compute_us: int, steps=6
):
    """Marked steps: the host hands over a batch (input), the copy follows, then a short kernel."""
    space = new_space()
    gpu = PlaneBuilder(space, "/device:GPU:0")
    copies, kernels = gpu.line("Stream #1(MemcpyH2D)"), gpu.line("Stream #2(Compute)")
    host = PlaneBuilder(space, "/host:CPU")
    main = host.line("python")
    for i in range(steps):
        t = i * step_us * US
        jitter = (i % 3) * 20 * US  # steps differ a little, as measured ones do
        host.event(main, "train", t, step_us * US - 5 * US, step_num=i, _r=1)
        host.event(main, "scaldiag_input", t + 10 * US, input_us * US + jitter)
        gpu.event(
            copies,
            "MemcpyH2D",
            t + (10 + input_us - copy_us) * US + jitter,
            copy_us * US,
            memcpy_details=f"kind_src:pinned kind_dst:device size:{copy_bytes} dest:0 async:1",
        )
        gpu.event(kernels, "loop_fusion", t + (20 + input_us) * US + jitter, compute_us * US)
    return analyze_trace(read_trace([write(space, tmp_path / "t.xplane.pb")]))


def test_float32_pixels_handed_over_at_memory_speed_are_named_host_to_device(tmp_path):
    batch_bytes = 256 * 128 * 128 * 3 * 4
    analysis = zoo_trace(
        tmp_path,
        step_us=21_200,
        input_us=18_600,
        copy_bytes=batch_bytes,
        copy_us=2_500,
        compute_us=300,
    )
    found = run_rules(analysis)
    assert found[0].id == "SD102" and found[0].category == "h2d"
    assert "SD101" not in [f.id for f in found]
    evidence = {e.metric: e.value for e in found[0].evidence}
    (gpu,) = analysis.units
    # The cost per byte is the input's exclusive time over the bytes copied, as the trace gives
    # them.
    assert evidence["input time per byte copied"] == round(
        gpu.categories["input"].exclusive_ms * 1e6 / batch_bytes, 3
    )
    assert evidence["input time per byte copied"] < 0.4
    assert evidence["H2D bytes per step"] == batch_bytes
    assert (
        found[0].forecast.kind == "forecast"
        and 1.0 < found[0].forecast.value < found[0].predicted_speedup.value
    )


def test_python_augmentation_of_a_light_batch_stays_input(tmp_path):
    batch_bytes = 128 * 32 * 32 * 3 * 4
    found = run_rules(
        zoo_trace(
            tmp_path,
            step_us=28_000,
            input_us=25_800,
            copy_bytes=batch_bytes,
            copy_us=150,
            compute_us=400,
        )
    )
    assert found[0].id == "SD101" and found[0].category == "input"
    assert found[0].forecast is None  # a ceiling: how much faster workers make it is not modelled


def test_a_heavy_batch_that_is_computed_on_stays_input(tmp_path):
    # 50 MB a step, but 250 ms of input: 5 ns a byte, decoding or augmenting, not moving.
    batch_bytes = 256 * 128 * 128 * 3 * 4
    found = run_rules(
        zoo_trace(
            tmp_path,
            step_us=260_000,
            input_us=250_000,
            copy_bytes=batch_bytes,
            copy_us=2_500,
            compute_us=300,
            steps=4,
        )
    )
    assert found[0].id == "SD101"
    assert all("uint8" in text for text in found[0].fix.values())  # still: fewer bytes help


# --- the real H200 runs of the zoo (run 5, round 0: `git show
# 0759376:bench/results/gpu_h200/accuracy/accuracy.md`) ---
PLANTED = "fixtures/gpu/h200_zoo_run5_planted_runs.tgz"


def planted_run(tmp_path, case: str):
    import tarfile

    from conftest import ROOT

    with tarfile.open(ROOT / PLANTED) as tar:
        tar.extractall(tmp_path, filter="data")
    (run_dir,) = (tmp_path / "gpu_zoo" / "accuracy" / "runs" / f"{case}_planted_r0").iterdir()
    return run_dir


def test_the_real_float32_hand_over_on_an_h200_is_named_host_to_device(tmp_path):
    from scaldiag.pipeline import diagnose_run

    report = diagnose_run(planted_run(tmp_path, "host_to_device"))
    top = report.trace_report.findings[0]
    assert top.id == "SD102" and "SD101" not in [f.id for f in report.trace_report.findings]
    evidence = {e.metric: e.value for e in top.evidence}
    # 256 x 128 x 128 x 3 float32 images a batch (and 256 int32 labels). The trace's 5 steps hold 4
    # image copies: Keras on JAX copies a batch ahead, and the first window's was copied before the
    # profiler started, so bytes per step leave the first window out.
    assert evidence["H2D bytes per step"] == 256 * 128 * 128 * 3 * 4 + 256 * 4
    assert evidence["input time per byte copied"] < 1.0


def test_the_first_traced_step_that_lost_its_copy_to_the_profilers_start_is_left_out(tmp_path):
    import numpy as np

    from scaldiag.analyze.transfers import copies_per_step, per_step
    from scaldiag.pipeline import read_trace

    _, trace = read_trace(planted_run(tmp_path, "host_to_device") / "trace")
    copies = [line for p in trace.device_planes for line in p.lines if "MemcpyH2D" in line.name]
    starts = np.concatenate([line.start_ns for line in copies])
    details = [d for line in copies for d in line.stat("memcpy_details")]
    (host,) = trace.host_planes
    marks = [
        (s, e)
        for line in host.lines
        for s, e, n in zip(line.start_ns, line.end_ns, line.name_id)
        if host.event_names[n] == "train"
    ]
    ws = np.array(sorted(s for s, _ in marks))
    we = np.append(ws[1:], max(e for _, e in marks))
    totals = copies_per_step(starts, details, "h2d", ws, we)
    image = 256 * 128 * 128 * 3 * 4
    # Read from the trace: no image copy in the first window, one in each later one.
    assert [round(b / image) for b in totals.bytes_per_step] == [0, 1, 1, 1, 1]
    assert per_step(totals.bytes_per_step) == pytest.approx(image, rel=1e-3)
    assert totals.largest_bytes == image and per_step(totals.large_bytes_per_step) == image


# --- SD102's forecast: fewer bytes, and fresh pages over glibc's 32 MiB mmap ceiling
# --------------------
def _forecast(tmp_path, batch_bytes: int):
    from scaldiag.analyze.forecast import fewer_bytes

    analysis = zoo_trace(
        tmp_path,
        step_us=21_200,
        input_us=18_600,
        copy_bytes=batch_bytes,
        copy_us=2_500,
        compute_us=300,
    )
    (gpu,) = analysis.units
    return gpu, fewer_bytes(gpu, 4)


def test_a_batch_under_the_mmap_ceiling_costs_the_same_per_byte_with_fewer_bytes(tmp_path):
    gpu, f = _forecast(tmp_path, 30 * 2**20)
    assert gpu.h2d.large_bytes_per_step == 0 and f.fresh_ms == 0
    step = sum(t.exclusive_ms for t in gpu.categories.values())
    assert f.speedup == pytest.approx(step / (step - 0.75 * f.handover_ms))


def test_a_batch_that_stays_over_the_ceiling_keeps_its_fresh_pages_per_byte(tmp_path):
    gpu, f = _forecast(tmp_path, 200 * 2**20)  # a quarter is 50 MiB: still mapped anew every step
    assert f.fresh_ms > 0 and not f.fresh_gone
    step = sum(t.exclusive_ms for t in gpu.categories.values())
    assert f.speedup == pytest.approx(step / (step - 0.75 * f.handover_ms))


def test_a_batch_brought_under_the_ceiling_loses_its_fresh_pages(tmp_path):
    from scaldiag.analyze.transfers import FRESH_PAGE_NS_PER_BYTE

    batch = 48 * 2**20  # 12 MiB as uint8
    gpu, f = _forecast(tmp_path, batch)
    assert f.fresh_gone and f.fresh_ms == pytest.approx(batch * FRESH_PAGE_NS_PER_BYTE / 1e6)
    step = sum(t.exclusive_ms for t in gpu.categories.values())
    assert f.after_ms == pytest.approx(step - f.handover_ms + (f.handover_ms - f.fresh_ms) / 4)
    assert f.speedup > step / (step - 0.75 * f.handover_ms)


def test_the_uint8_forecast_on_the_real_h200_run_against_its_twins(tmp_path):
    """Run 5's planted trace against the uint8 twins measured beside it (3 rounds): within 15%."""
    import json

    from conftest import ROOT

    from scaldiag.pipeline import diagnose_run

    report = diagnose_run(planted_run(tmp_path, "host_to_device"))
    top = report.trace_report.findings[0]
    assert top.forecast.kind == "forecast" and "fresh pages" in top.forecast.arithmetic
    (case,) = [
        c
        for c in json.loads((ROOT / "fixtures/gpu/h200_zoo_run5_keras.json").read_text())
        if c["case"] == "host_to_device"
    ]
    twins = sorted(r["measured"] for r in case["rounds"])
    assert abs(top.forecast.value / twins[len(twins) // 2] - 1) < 0.15


def test_the_real_python_augmentation_on_an_h200_stays_input(tmp_path):
    from scaldiag.pipeline import diagnose_run

    report = diagnose_run(planted_run(tmp_path, "input_python"))
    assert report.trace_report.findings[0].id == "SD101"


# --- run 6 (`git show 0759376:bench/results/gpu_h200/accuracy/accuracy.md`, accuracy_run6.md): the
# planted run, its uint8 twin ---
RUN6 = "fixtures/gpu/h200_zoo_run6_planted_runs.tgz"


def run6(tmp_path, name: str):
    import tarfile

    from conftest import ROOT

    with tarfile.open(ROOT / RUN6) as tar:
        tar.extractall(tmp_path, filter="data")
    (run_dir,) = (tmp_path / "gpu_zoo" / "accuracy" / "runs" / name).iterdir()
    return run_dir


def _as_traced(run_dir):
    from scaldiag.analyze.profile import analyze_trace
    from scaldiag.pipeline import read_trace

    return analyze_trace(read_trace(run_dir / "trace")[1])


def test_the_twins_own_trace_shows_the_hand_over_the_model_forecast(tmp_path):
    """What goes away with uint8, read from the twin's trace: the hand-over shrank by more than the
    bytes, by
    about the fresh pages of the 48 MiB float32 array (the 12 MiB uint8 one reuses freed memory)."""
    from scaldiag.analyze.forecast import fewer_bytes, unit_handover
    from scaldiag.analyze.transfers import MMAP_THRESHOLD_MAX_BYTES

    # The traces as traced: these runs were recorded before compile evidence, so their steady steps
    # now hold the first epoch's end (Keras on JAX compiles the metrics' read-out there) and the
    # twin's inflation is not measurable; the hand-over model is about the trace's own copies,
    # compared like with like.
    (planted,) = _as_traced(run6(tmp_path / "p", "host_to_device_planted_r0")).units
    (twin,) = _as_traced(run6(tmp_path / "t", "host_to_device_twin_r0")).units
    f = fewer_bytes(planted, 4)
    assert planted.h2d.largest_bytes > MMAP_THRESHOLD_MAX_BYTES >= twin.h2d.largest_bytes
    assert twin.h2d.bytes_per_step == pytest.approx(planted.h2d.bytes_per_step / 4, rel=0.01)
    measured = unit_handover(twin).ms
    modelled = f.handover_ms / 4 if not f.fresh_gone else (f.handover_ms - f.fresh_ms) / 4
    constant_per_byte = f.handover_ms / 4  # the run-5 model: the same cost per byte
    assert abs(modelled / measured - 1) < 0.15
    assert abs(constant_per_byte / measured - 1) > 0.3


def test_the_fresh_page_cost_measured_on_the_runs_host_feeds_the_uint8_forecast(tmp_path):
    """A profiled run carries its host's fresh-page cost (collect/host_costs.py, in run.json);
    SD102's forecast
    takes it, and says so, where a trace alone takes the development machine's constant."""
    import json

    from scaldiag.analyze.transfers import FRESH_PAGE_NS_PER_BYTE
    from scaldiag.pipeline import diagnose_run

    run_dir = run6(tmp_path, "host_to_device_planted_r0")
    by_constant = next(
        f for f in diagnose_run(run_dir).trace_report.findings if f.id == "SD102"
    ).forecast
    run = json.loads((run_dir / "run.json").read_text())
    assert "fresh_page_ns_per_byte" not in run  # recorded before the probe existed
    assert f"({FRESH_PAGE_NS_PER_BYTE:g} ns/byte, a development machine's" in by_constant.arithmetic
    for measured in (0.02, 0.3):
        (run_dir / "run.json").write_text(json.dumps({**run, "fresh_page_ns_per_byte": measured}))
        forecast = next(
            f for f in diagnose_run(run_dir).trace_report.findings if f.id == "SD102"
        ).forecast
        assert f"({measured:g} ns/byte, measured on this run's host)" in forecast.arithmetic
        # Dearer fresh pages: more of the hand-over goes away with the fix, so a larger speedup.
        assert (forecast.value > by_constant.value) == (measured > FRESH_PAGE_NS_PER_BYTE)


def test_the_fresh_page_probe_measures_this_host():
    """The probe itself, on this machine: a real, small, non-negative cost per byte
    (bench/host_costs/run.py
    compares it with bench/accuracy/fresh_pages.py's batch slices: medians 0.074 and 0.079 ns/byte
    here).
    """
    from scaldiag.collect import host_costs

    value = host_costs.fresh_page_ns_per_byte(size=16 << 20, rounds=3)
    assert value is not None and 0.0 <= value < 5.0
    assert 0.0 <= host_costs.measured_or_none() < 5.0  # what run.json records
