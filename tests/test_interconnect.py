"""The interconnect: read, looked up, given or assumed; NCCL's all-reduce curve; DDP's exposed
buckets."""

import json
import math

import pytest

from scaldiag.analyze import interconnect as ic
from scaldiag.analyze.collective import DDP_BUCKET_BYTES, ddp_buckets, exposed_ms
from scaldiag.errors import ScaldiagError

H200 = {
    "gpus": [
        {
            "name": "NVIDIA H200",
            "nvlink_active_links": 0,
            "pcie_gen_current": 5,
            "pcie_width_current": 16,
        }
    ]
}


@pytest.fixture(autouse=True)
def no_saved_calibration(tmp_path, monkeypatch):
    """Each test sees an empty calibration folder of its own, never the machine's."""
    monkeypatch.delenv(ic.CALIBRATION_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_one_visible_h200_is_looked_up_as_nvlink4_x18():
    link = ic.from_inventory(H200)
    assert (link.kind, link.generation, link.lanes, link.source) == ("nvlink", 4, 18, "looked up")
    assert link.line_bytes_per_s == pytest.approx(450e9)
    assert link.bus_bytes_per_s == pytest.approx(370e9)
    assert link.curve is ic.NVLINK4_X18_CURVE
    assert "looked up" in link.describe() and "NVLink 4 x18" in link.describe()
    assert "2-GPU H200 training traces" in link.describe() and "NVIDIA/nccl#1455" in link.describe()


def test_active_links_are_read_and_unknown_cards_use_their_pcie_link():
    read = ic.from_inventory(
        {"gpus": [{"name": "NVIDIA A100-SXM4-80GB", "nvlink_active_links": 12}] * 2}
    )
    assert (read.generation, read.lanes, read.source) == (3, 12, "read")
    card = ic.from_inventory(
        {
            "gpus": [
                {
                    "name": "NVIDIA L4",
                    "nvlink_active_links": 0,
                    "pcie_gen_current": 4,
                    "pcie_width_current": 16,
                }
            ]
        }
    )
    assert (card.kind, card.source) == ("pcie", "assumed")
    assert card.line_bytes_per_s == pytest.approx(16 * 1.969e9)
    assert ic.from_inventory({"gpus": []}) is None
    two_unlinked = {
        "gpus": (
            [
                {
                    "name": "NVIDIA H200",
                    "nvlink_active_links": 0,
                    "pcie_gen_current": 5,
                    "pcie_width_current": 16,
                }
            ]
            * 2
        )
    }
    assert (
        ic.from_inventory(two_unlinked).kind == "pcie"
    )  # NVML sees both GPUs and no link between them


def test_the_user_can_name_the_machine():
    given = ic.parse("NVLink4 x18")
    assert (given.kind, given.lanes, given.source) == ("nvlink", 18, "given")
    assert ic.parse("pcie5x16").line_bytes_per_s == pytest.approx(16 * 3.938e9)
    assert ic.from_inventory({"gpus": [{"name": "NVIDIA L4"}]}, override=given) is given
    with pytest.raises(ValueError):
        ic.parse("infiniband")


def test_links_without_a_measured_curve_use_latency_plus_ring_volume_over_bus_bandwidth():
    link = ic.parse("nvlink3x12")
    assert link.allreduce_s(100e6, 1) == 0.0
    assert link.allreduce_s(100e6, 2) == pytest.approx(
        ic.NCCL_LATENCY_S + 100e6 / link.bus_bytes_per_s
    )
    assert link.allreduce_s(100e6, 8) == pytest.approx(
        ic.NCCL_LATENCY_S + 2 * 7 / 8 * 100e6 / link.bus_bytes_per_s
    )
    assert link.bus_bytes_per_s == pytest.approx(300e9 * 370 / 450)
    assert "assumed" in link.describe()


def test_the_nvlink4_default_passes_through_the_measured_two_gpu_points():
    link = ic.parse("nvlink4x18")
    for size, seconds, _ in ic.NVLINK4_X18_POINTS:
        assert link.allreduce_s(size, 2) == pytest.approx(seconds)
    # the 2-GPU H200 traces: 67 MB took 246.6-258.4 us (medians); the old 370 GB/s figure said 201
    # us
    assert 240e-6 < link.allreduce_s(67.1e6, 2) < 260e-6
    bus = [ic.NVLINK4_X18_CURVE.bus_bytes_per_s(m) for m in (1e6, 13e6, 67e6, 512e6, 2**31, 2**33)]
    assert bus == sorted(bus) and bus[-1] == pytest.approx(
        370e9, rel=1e-3
    )  # rises to NCCL's ring plateau


def test_the_curve_interpolates_in_log_log_and_extends_with_latency_and_bus_bandwidth():
    curve = ic.Curve((1e6, 100e6), (30e-6, 600e-6), 2, 10e-6, 200e9, "test")
    mid = math.sqrt(
        1e6 * 100e6
    )  # the geometric middle of the sizes: the geometric middle of the times
    assert curve.time_s(mid, 2) == pytest.approx(math.sqrt(30e-6 * 600e-6))
    assert curve.time_s(0.5e6, 2) == pytest.approx(
        10e-6 + 20e-6 / 2
    )  # below: a line from the latency
    assert curve.time_s(300e6, 2) == pytest.approx(
        600e-6 + 200e6 / 200e9
    )  # above: the tail bandwidth
    # 8 GPUs: the part above the latency grows with the ring volume, 2 x 7 / 8 against 1 at 2 GPUs
    assert curve.time_s(100e6, 8) == pytest.approx(10e-6 + 590e-6 * 1.75)
    with pytest.raises(ValueError):
        ic.Curve((2e6, 1e6), (1e-5, 2e-5), 2, 0.0, 1e9, "sizes out of order")


def _calibration(path, name="NVIDIA H200", ranks=2, device="gpu", link="nvlink", framework="torch"):
    rows = [
        {"bytes": m, "median_s": t, "min_s": t * 0.9, "max_s": t * 1.1, "repeats": 7}
        for m, t in ((8, 15e-6), (2**20, 25e-6), (2**26, 200e-6), (2**30, 2.9e-3))
    ]
    doc = {
        "schema": ic.CALIBRATION_SCHEMA,
        "measured_at": "2026-12-02T04:00:00Z",
        "device": device,
        "framework": framework,
        "backend": "nccl",
        "ranks": ranks,
        "machine": {"gpu_name": name, "gpu_count": ranks, "link": {"kind": link}},
        "allreduce": rows,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def test_a_saved_calibration_for_this_gpu_is_found_and_used(tmp_path):
    saved = _calibration(
        tmp_path / "cache" / "scaldiag" / "interconnect" / "nvidia-h200-x2-torch.json"
    )
    link = ic.from_inventory(H200)
    assert link.source == "looked up" and link.curve.ranks == 2
    assert link.allreduce_s(2**26, 2) == pytest.approx(
        200e-6
    )  # the measured point, not the default
    assert link.allreduce_s(2**26, 4) == pytest.approx(15e-6 + 185e-6 * 1.5)
    assert "measured by scaldiag calibrate" in link.describe() and str(saved) in link.describe()
    assert (
        ic.from_inventory(H200, override=ic.parse("nvlink4x18")).curve is ic.NVLINK4_X18_CURVE
    )  # given machine
    assert ic.from_inventory(H200, calibrations=[]).curve is ic.NVLINK4_X18_CURVE


def test_calibrations_of_other_gpus_cpus_or_one_gpu_are_not_used(tmp_path, monkeypatch):
    folder = tmp_path / "cache" / "scaldiag" / "interconnect"
    _calibration(folder / "a100.json", name="NVIDIA A100-SXM4-80GB")
    _calibration(folder / "cpu.json", name=None, device="cpu", link=None)
    _calibration(folder / "h200-pcie.json", link="pcie")
    one = _calibration(folder / "h200-x1.json", ranks=1)
    found, notes = ic.find_calibrations()
    assert len(found) == 4 and notes == []
    assert ic.load_calibration(one).curve is None  # one GPU: nothing measured between GPUs
    assert ic.from_inventory(H200).curve is ic.NVLINK4_X18_CURVE
    monkeypatch.setenv(
        ic.CALIBRATION_ENV, str(_calibration(tmp_path / "mine.json"))
    )  # this file only
    assert ic.from_inventory(H200).curve.ranks == 2


def test_a_corrupt_calibration_is_a_clear_error_and_reports_fall_back_to_the_defaults(
    tmp_path, monkeypatch
):
    bad = tmp_path / "broken.json"
    bad.write_text('{"schema": "scaldiag.calibration/1", "machine": {')
    with pytest.raises(
        ScaldiagError, match=r"broken.json: not a scaldiag calibration \(JSONDecodeError"
    ):
        ic.load_calibration(bad)
    wrong = _calibration(tmp_path / "wrong.json")
    wrong.write_text(wrong.read_text().replace('"median_s": 0.0002,', '"median_s": -1,'))
    with pytest.raises(ScaldiagError, match="positive"):
        ic.load_calibration(wrong)
    with pytest.raises(ScaldiagError, match="cannot read it"):
        ic.load_calibration(tmp_path / "absent.json")
    monkeypatch.setenv(ic.CALIBRATION_ENV, str(bad))
    link = ic.from_inventory(H200)
    assert link.curve is ic.NVLINK4_X18_CURVE
    assert (
        link.notes
        and "not a scaldiag calibration" in link.notes[0]
        and "the defaults stand" in link.notes[0]
    )
    assert "the defaults stand" in link.describe()


def test_ddp_buckets_overlap_backward_and_only_the_exposed_part_counts():
    assert ddp_buckets(60 * 1024 * 1024) == [
        1024 * 1024,
        DDP_BUCKET_BYTES,
        DDP_BUCKET_BYTES,
        9 * 1024 * 1024,
    ]
    link = ic.parse("nvlink4x18")
    p = 60 * 1024 * 1024
    times = [link.allreduce_s(b, 2) * 1e3 for b in ddp_buckets(p)]
    long_backward, _ = exposed_ms(
        p, 2, link, True, compute_ms=30.0
    )  # backward 20 ms hides all but the last bucket
    assert long_backward == pytest.approx(times[-1])
    short, _ = exposed_ms(
        p, 2, link, True, compute_ms=0.03
    )  # backward 0.02 ms hides almost nothing
    assert short == pytest.approx(times[-1] + sum(times[:-1]) - 0.02)
    after, how = exposed_ms(
        p, 2, link, False, compute_ms=30.0
    )  # Keras/JAX: after backward, all exposed
    assert after == pytest.approx(link.allreduce_s(p, 2) * 1e3) and "no overlap" in how


def test_with_each_parameters_size_the_buckets_are_ddps_own():
    # the devset's MLP 784-4096-4096-4096-10 (float32 kernels and biases in the model's order): its
    # 2-GPU DDP trace (../shared/fixtures/x2_devset/torch_ddp_sync) all-reduced 16,822,282,
    # 16,781,312 and 3,215,360 floats, in that order: a parameter over the 25 MiB cap is a bucket of
    # its own
    sizes = [4 * n for n in (784 * 4096, 4096, 4096 * 4096, 4096, 4096 * 4096, 4096, 4096 * 10, 10)]
    assert ddp_buckets(sum(sizes), sizes) == [4 * 16_822_282, 4 * 16_781_312, 4 * 3_215_360]
    link = ic.parse("nvlink4x18")
    exposed, how = exposed_ms(
        sum(sizes), 2, link, True, compute_ms=0.03, parameter_sizes_bytes=sizes
    )
    times = [link.allreduce_s(b, 2) * 1e3 for b in (4 * 16_822_282, 4 * 16_781_312, 4 * 3_215_360)]
    assert exposed == pytest.approx(sum(times) - 0.02) and "DDP's assignment" in how


def test_the_peer_matrix_where_recorded_gives_the_links_between_visible_gpus():
    gpu = {
        "name": "NVIDIA H200",
        "nvlink_active_links": 18,
        "pcie_gen_current": 5,
        "pcie_width_current": 16,
    }
    pair = {"gpus": [0, 1], "common_ancestor": 50, "path": "SYS"}
    nv18 = ic.from_inventory({"gpus": [gpu] * 2, "topology": [{**pair, "nvlink_links": 18}]})
    assert (nv18.kind, nv18.lanes, nv18.source) == (
        "nvlink",
        18,
        "read",
    ) and "peer matrix: NV18" in nv18.why
    # three GPUs, one pair joined by 6 links only: the ring runs at its slowest hop
    three = [
        {**pair, "nvlink_links": 18},
        {**pair, "gpus": [0, 2], "nvlink_links": 6},
        {**pair, "gpus": [1, 2], "nvlink_links": 18},
    ]
    assert ic.from_inventory({"gpus": [gpu] * 3, "topology": three}).lanes == 6
    # NVLink active on each GPU (to a bridge or other GPUs) but none between this pair: PCIe
    apart = ic.from_inventory({"gpus": [gpu] * 2, "topology": [{**pair, "nvlink_links": 0}]})
    assert apart.kind == "pcie" and "no NVLink between them" in apart.why
    # not recorded (today's inventories): the active links, as before
    assert ic.from_inventory({"gpus": [gpu] * 2, "topology": [pair]}).why == "NVML's active links"
