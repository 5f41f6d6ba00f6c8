"""Whether a larger per-replica batch fits (analyze/batch_memory.py): plain data in, a bound out."""

from __future__ import annotations

import pytest

from scaldiag.analyze.batch_memory import GIB, brief, describe, device_memory, held, room
from scaldiag.render.words import speedup_words
from scaldiag.rules.base import Speedup

G = 1 << 30
INVENTORY = {
    "gpus": [{"index": 0, "memory_total_bytes": 80 * G}, {"index": 1, "memory_total_bytes": 80 * G}]
}


def _nvml(*used_by_gpu):
    return [{"t_ns": k, "gpu": g, "mem_used_bytes": u} for k, (g, u) in enumerate(used_by_gpu)]


def test_the_allocators_peak_is_preferred_and_the_fullest_device_taken():
    training = {
        "parameter_bytes": 2 * G,
        "device_memory": [
            {"device": 0, "peak_bytes": 10 * G, "limit_bytes": 80 * G, "source": "a"},
            {"device": 1, "peak_bytes": 30 * G, "limit_bytes": 80 * G, "source": "b"},
        ],
    }
    mem = device_memory(training, _nvml((0, 70 * G)), INVENTORY)
    assert (mem.device, mem.peak_bytes, mem.total_bytes, mem.fixed_min_bytes) == (
        1,
        30 * G,
        80 * G,
        2 * G,
    )
    assert mem.allocator and mem.source == "b"


def test_tensorflow_states_no_limit_so_the_devices_memory_is_taken():
    training = {
        "device_memory": [{"device": 1, "peak_bytes": 5 * G, "limit_bytes": 0, "source": "tf"}]
    }
    assert device_memory(training, [], INVENTORY).total_bytes == 80 * G


def test_without_the_allocators_peak_nvml_bounds_it_from_above():
    mem = device_memory({}, _nvml((0, 4 * G), (1, 60 * G), (0, 6 * G)), INVENTORY)
    assert (mem.device, mem.peak_bytes, mem.fixed_min_bytes) == (1, 60 * G, 0)
    assert not mem.allocator and "upper bound" in mem.source
    assert device_memory({}, [], INVENTORY) is None
    assert device_memory({}, _nvml((0, 4 * G)), {"gpus": []}) is None


def test_a_factor_is_sure_where_even_all_but_the_parameters_growing_fits():
    mem = device_memory({"parameter_bytes": 2 * G}, _nvml((0, 10 * G)), INVENTORY)
    r = room(mem, 4)
    # worst case: 2 + 4 x 8 = 34 GiB of 80; the largest sure factor (80 - 2) // 8 = 9
    assert r.sure and r.worst_bytes == 34 * G and r.sure_factor == 9
    text = describe(mem, r, 64)
    assert "x4 stays within it even if all of it but the parameters grows" in text
    assert "sure to stay within it up to x9 (per-replica batch 576)" in text


def test_a_full_card_may_not_take_the_larger_batch_and_says_how_much_may_grow():
    mem = device_memory({}, _nvml((0, 56 * G)), INVENTORY)  # 70% of the card
    r = room(mem, 4)
    assert not r.sure and r.sure_factor == 1
    assert r.may_grow_bytes == pytest.approx(8 * G, abs=1)  # (80 - 56) / 3
    text = describe(mem, r, None)
    assert "x4 may exceed it: it stays within only if at most 8.0 GiB of the peak grows" in text
    assert "NVML's figure holds the framework's pool" in text  # not the allocator's own peak
    assert "no larger batch is sure to stay within it" in text
    assert f"peak {56 * G / GIB:.1f} of 80.0 GiB" in text


def test_the_forecast_line_says_whether_it_fits_and_what_the_ceiling_bounds():
    roomy = device_memory({"parameter_bytes": 2 * G}, _nvml((0, 10 * G)), INVENTORY)
    full = device_memory({}, _nvml((0, 56 * G)), INVENTORY)
    assert brief(roomy, room(roomy, 4)) == "x4 fits in device memory (NVML's peak 10.0 of 80.0 GiB)"
    # NVML's used memory holds the pool: a misfit is not known from it
    assert brief(full, room(full, 4)) == (
        "whether x4 fits is unknown (NVML's 56.0 of 80.0 GiB holds the framework's pool)"
    )
    allocator = device_memory(
        {"device_memory": [{"device": 0, "peak_bytes": 30 * G, "limit_bytes": 80 * G}]},
        [],
        INVENTORY,
    )
    assert brief(allocator, room(allocator, 4)) == (
        "x4 may not fit in device memory (peak 30.0 of 80.0 GiB; sure up to x2)"
    )
    ceiling = Speedup(1.74, 1.46, 2.16, "host work removed", kind="ceiling")
    fits = brief(roomy, room(roomy, 4))
    under = Speedup(1.47, 1.47, 1.47, "per-replica batch x4: ...", kind="forecast", fits=fits)
    what, number = speedup_words(under, ceiling)
    assert what == "forecast of per-replica batch x4:"
    assert number == f"1.47x; within the 1.74x ceiling; {fits}"
    over = Speedup(2.5, 2.5, 2.5, "per-replica batch x4: ...", kind="forecast")
    assert "above the 1.74x ceiling" in speedup_words(over, ceiling)[1]
    same = Speedup(1.74, 1.46, 2.16, "parallel input workers: ...", kind="forecast")
    assert speedup_words(same, ceiling)[1] == "1.74x (95% range 1.46x-2.16x)"  # one number
    assert speedup_words(over)[1] == "2.50x"  # alone: no ceiling, no memory said


def test_a_kept_batch_fitted_where_it_ran():
    mem = device_memory(
        {"device_memory": [{"device": 0, "peak_bytes": 30 * G, "limit_bytes": 80 * G}]},
        [],
        INVENTORY,
    )
    assert held(mem, 64, 1) == "per-replica batch 64 fitted at 1 device(s) (peak 30.0 of 80.0 GiB)"
