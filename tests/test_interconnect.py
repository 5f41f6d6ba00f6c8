"""The interconnect: read, looked up, given or assumed; NCCL's all-reduce curve; DDP's exposed buckets."""

import pytest

from scaldiag.analyze import interconnect as ic
from scaldiag.analyze.collective import DDP_BUCKET_BYTES, ddp_buckets, exposed_ms


def test_one_visible_h200_is_looked_up_as_nvlink4_x18():
    inv = {"gpus": [{"name": "NVIDIA H200", "nvlink_active_links": 0, "pcie_gen_current": 5,
                     "pcie_width_current": 16}]}
    link = ic.from_inventory(inv)
    assert (link.kind, link.generation, link.lanes, link.source) == ("nvlink", 4, 18, "looked up")
    assert link.line_bytes_per_s == pytest.approx(450e9)
    assert link.bus_bytes_per_s == pytest.approx(370e9)
    assert "looked up" in link.describe() and "NVLink 4 x18" in link.describe()


def test_active_links_are_read_and_unknown_cards_use_their_pcie_link():
    read = ic.from_inventory({"gpus": [{"name": "NVIDIA A100-SXM4-80GB", "nvlink_active_links": 12}] * 2})
    assert (read.generation, read.lanes, read.source) == (3, 12, "read")
    card = ic.from_inventory({"gpus": [{"name": "NVIDIA L4", "nvlink_active_links": 0, "pcie_gen_current": 4,
                                        "pcie_width_current": 16}]})
    assert (card.kind, card.source) == ("pcie", "assumed")
    assert card.line_bytes_per_s == pytest.approx(16 * 1.969e9)
    assert ic.from_inventory({"gpus": []}) is None
    two_unlinked = {"gpus": [{"name": "NVIDIA H200", "nvlink_active_links": 0, "pcie_gen_current": 5,
                              "pcie_width_current": 16}] * 2}
    assert ic.from_inventory(two_unlinked).kind == "pcie"  # NVML sees both GPUs and no link between them


def test_the_user_can_name_the_machine():
    given = ic.parse("NVLink4 x18")
    assert (given.kind, given.lanes, given.source) == ("nvlink", 18, "given")
    assert ic.parse("pcie5x16").line_bytes_per_s == pytest.approx(16 * 3.938e9)
    assert ic.from_inventory({"gpus": [{"name": "NVIDIA L4"}]}, override=given) is given
    with pytest.raises(ValueError):
        ic.parse("infiniband")


def test_allreduce_time_is_latency_plus_ring_volume_over_bus_bandwidth():
    link = ic.parse("nvlink4x18")
    assert link.allreduce_s(100e6, 1) == 0.0
    assert link.allreduce_s(100e6, 2) == pytest.approx(ic.NCCL_LATENCY_S + 100e6 / link.bus_bytes_per_s)
    assert link.allreduce_s(100e6, 8) == pytest.approx(ic.NCCL_LATENCY_S + 2 * 7 / 8 * 100e6 / link.bus_bytes_per_s)


def test_ddp_buckets_overlap_backward_and_only_the_exposed_part_counts():
    assert ddp_buckets(60 * 1024 * 1024) == [1024 * 1024, DDP_BUCKET_BYTES, DDP_BUCKET_BYTES, 9 * 1024 * 1024]
    link = ic.parse("nvlink4x18")
    p = 60 * 1024 * 1024
    times = [link.allreduce_s(b, 2) * 1e3 for b in ddp_buckets(p)]
    long_backward, _ = exposed_ms(p, 2, link, True, compute_ms=30.0)  # backward 20 ms hides all but the last bucket
    assert long_backward == pytest.approx(times[-1])
    short, _ = exposed_ms(p, 2, link, True, compute_ms=0.03)  # backward 0.02 ms hides almost nothing
    assert short == pytest.approx(times[-1] + sum(times[:-1]) - 0.02)
    after, how = exposed_ms(p, 2, link, False, compute_ms=30.0)  # Keras/JAX: after backward, all exposed
    assert after == pytest.approx(link.allreduce_s(p, 2) * 1e3) and "no overlap" in how
