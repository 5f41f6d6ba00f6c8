"""Exclusive attribution on small hand-built traces whose answer is known."""

import pytest
from xspace_builder import PlaneBuilder, new_space, write

from scaldiag.analyze.profile import analyze_trace
from scaldiag.readers.xplane.read import read_trace

US = 1000  # ns


def two_step_trace(tmp_path):
    """Two marked steps of 100 us on one GPU, with known activity:

    step 0 [0, 100): compute [10, 50), H2D copy [40, 70) (10 us hidden under compute),
                     host input [70, 90) while the device is idle, nothing [90, 100).
    step 1 [100, 195): collective [100, 130), host Python [130, 180) with a
                     wait inside [150, 180) (not host work). The last step
                     ends where its marker ends.
    """
    space = new_space()
    gpu = PlaneBuilder(space, "/device:GPU:0")
    compute, copies = gpu.line("Stream #1(Compute)"), gpu.line("Stream #2(MemcpyH2D)")
    gpu.event(compute, "gemm_fusion", 10 * US, 40 * US)
    gpu.event(
        copies,
        "MemcpyH2D",
        40 * US,
        30 * US,
        memcpy_details="kind_src:pageable kind_dst:device size:1000",
    )
    gpu.event(compute, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 100 * US, 30 * US)
    host = PlaneBuilder(space, "/host:CPU")
    main = host.line("python")
    host.event(main, "train", 0, 95 * US, step_num=0, _r=1)
    host.event(main, "train", 100 * US, 95 * US, step_num=1, _r=1)
    host.event(main, "IteratorGetNext", 70 * US, 20 * US)
    host.event(main, "python_work", 130 * US, 50 * US)
    host.event(main, "Wait for LaunchOnDevice completion", 150 * US, 30 * US)
    return read_trace([write(space, tmp_path / "t.xplane.pb")])


def test_exclusive_and_busy_times(tmp_path):
    analysis = analyze_trace(two_step_trace(tmp_path))
    (gpu,) = analysis.units
    assert gpu.steps == 2
    # The 'train' markers cover the step, so the host counts as busy
    # (host_overhead) wherever no finer event says otherwise.
    expected_exclusive_us = {
        "compute": 40 / 2,
        "h2d": 20 / 2,
        "collective": 30 / 2,
        "input": 20 / 2,
        "host_overhead": (
            (10 + 5 + 20 + 15) / 2
        ),  # marker-only time: [0,10) [90,95) [130,150) [180,195)
        "idle": (5 + 30) / 2,  # [95,100) and the wait [150,180)
    }
    for category, us in expected_exclusive_us.items():
        assert gpu.categories[category].exclusive_ms == pytest.approx(us / 1000), category
    assert gpu.categories["h2d"].busy_ms == pytest.approx(30 / 2 / 1000)
    assert gpu.step_time_ms.mean == pytest.approx((100 + 95) / 2 / 1000)
    assert gpu.busy_pct == pytest.approx(100 * ((40 + 20) / 100 + 30 / 95) / 2)
    # Bytes per step leave out the first traced window (transfers.per_step: loaders that copy ahead
    # copied its batch before the profiler started), so step 0's copy is not counted.
    assert gpu.h2d.bytes_by_host_kind == {"pageable": 0.0}


def test_waiting_is_not_host_work(tmp_path):
    analysis = analyze_trace(two_step_trace(tmp_path))
    # [150, 180) is a wait nested in python_work: the thread is blocked, and
    # the train marker above it is not the innermost event there.
    host_busy_ms = analysis.units[0].categories["host_overhead"].busy_ms
    assert host_busy_ms == pytest.approx((95 - 20 + 95 - 30) / 2 / 1000)


def test_what_the_host_is_in_while_the_device_idles(tmp_path):
    (gpu,) = analyze_trace(two_step_trace(tmp_path)).units
    # Device idle: [0,10) [70,100) in step 0, [130,195) in step 1. Innermost host
    # events there: train [0,10) [90,95) [180,195), IteratorGetNext [70,90),
    # python_work [130,150); the wait [150,180) is left out.
    got = {(h.name.split(" ")[0], h.state): h.ms_per_step for h in gpu.host_activity_while_idle}
    assert got == pytest.approx(
        {
            ("train", "host_overhead"): 30 / 2 / 1000,
            ("IteratorGetNext", "input"): 20 / 2 / 1000,
            ("python_work", "host_overhead"): 20 / 2 / 1000,
        }
    )
    # The step marker's own time is named for what it is.
    assert gpu.host_activity_while_idle[0].name.startswith("train (step itself")
