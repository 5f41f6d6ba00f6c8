"""SD101 or SD102: the input's cost per byte copied decides, on hand-built traces shaped as the zoo's H200 runs.

The shapes follow bench/results/gpu_h200/accuracy (Keras 3 on JAX, one H200): host_to_device.py's float32
batches (256 x 128 x 128 x 3 float32, 50 MB a step) took 18.6 of 21.2 ms per step in the host's hand-over
(the `scaldiag_input` annotation around Keras' batch slicing and device_put); input_python.py's batches
(128 x 32 x 32 x 3 float32, 1.6 MB) are blurred in NumPy, about 16 ns per byte.
"""

import pytest
from xspace_builder import PlaneBuilder, new_space, write

from scaldiag.analyze.profile import analyze_trace
from scaldiag.readers.xplane.read import read_trace
from scaldiag.rules import run_rules

US = 1000  # ns


def zoo_trace(tmp_path, step_us: int, input_us: int, copy_bytes: int, copy_us: int, compute_us: int, steps=6):
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
        gpu.event(copies, "MemcpyH2D", t + (10 + input_us - copy_us) * US + jitter, copy_us * US,
                  memcpy_details=f"kind_src:pinned kind_dst:device size:{copy_bytes} dest:0 async:1")
        gpu.event(kernels, "loop_fusion", t + (20 + input_us) * US + jitter, compute_us * US)
    return analyze_trace(read_trace([write(space, tmp_path / "t.xplane.pb")]))


def test_float32_pixels_handed_over_at_memory_speed_are_named_host_to_device(tmp_path):
    batch_bytes = 256 * 128 * 128 * 3 * 4
    analysis = zoo_trace(tmp_path, step_us=21_200, input_us=18_600, copy_bytes=batch_bytes, copy_us=2_500,
                         compute_us=300)
    found = run_rules(analysis)
    assert found[0].id == "SD102" and found[0].category == "h2d"
    assert "SD101" not in [f.id for f in found]
    evidence = {e.metric: e.value for e in found[0].evidence}
    (gpu,) = analysis.units
    # The cost per byte is the input's exclusive time over the bytes copied, as the trace gives them.
    assert evidence["input time per byte copied"] == round(gpu.categories["input"].exclusive_ms * 1e6 / batch_bytes, 3)
    assert evidence["input time per byte copied"] < 0.4
    assert evidence["H2D bytes per step"] == batch_bytes
    assert found[0].forecast.kind == "forecast" and 1.0 < found[0].forecast.value < found[0].predicted_speedup.value


def test_python_augmentation_of_a_light_batch_stays_input(tmp_path):
    batch_bytes = 128 * 32 * 32 * 3 * 4
    found = run_rules(zoo_trace(tmp_path, step_us=28_000, input_us=25_800, copy_bytes=batch_bytes, copy_us=150,
                                compute_us=400))
    assert found[0].id == "SD101" and found[0].category == "input"
    assert found[0].forecast is None  # a ceiling: how much faster workers make it is not modelled


def test_a_heavy_batch_that_is_computed_on_stays_input(tmp_path):
    # 50 MB a step, but 250 ms of input: 5 ns a byte, decoding or augmenting, not moving.
    batch_bytes = 256 * 128 * 128 * 3 * 4
    found = run_rules(zoo_trace(tmp_path, step_us=260_000, input_us=250_000, copy_bytes=batch_bytes,
                                copy_us=2_500, compute_us=300, steps=4))
    assert found[0].id == "SD101"
    assert all("uint8" in text for text in found[0].fix.values())  # still: fewer bytes help


# --- the real H200 runs of the zoo (bench/results/gpu_h200/accuracy, run 5, round 0) ------------------
PLANTED = "bench/results/gpu_h200/accuracy/run5_planted_runs.tgz"


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
    # 256 x 128 x 128 x 3 float32 images a batch. The trace's 5 steps hold 4 image copies (Keras on JAX
    # copies the next batch during the step; the first window's was copied before the profiler started).
    assert 5 * evidence["H2D bytes per step"] == pytest.approx(4 * 256 * 128 * 128 * 3 * 4, rel=0.01)
    assert evidence["input time per byte copied"] < 1.0


def test_the_real_python_augmentation_on_an_h200_stays_input(tmp_path):
    from scaldiag.pipeline import diagnose_run

    report = diagnose_run(planted_run(tmp_path, "input_python"))
    assert report.trace_report.findings[0].id == "SD101"
