"""The Perfetto export is not quadratic in slices that overlap without nesting (issue 22, item 5).

A 130 KB trace of 32k such slices took 83 s: each slice searched every lane
(one per slice), and naming a thread counted the threads named before it.
The tests count the Python lines each run takes, at n and 4n: work, not time (which the
machine's load changes); linear work grows 4x, the quadratic search grew 16x.
"""

import numpy as np
import pytest
from conftest import lines_run

from scaldiag.render.perfetto import NESTING_LANES, _Pids, nesting_lanes

# 4x the input may cost at most this much more work (linear: 4x; n log n: a little more; quadratic:
# 16x).
LINEAR_GROWTH = 6


def _lanes_nest(start: np.ndarray, end: np.ndarray, lanes: np.ndarray) -> bool:
    """Within each lane, any two slices are disjoint or one holds the other (the slices sorted by
    start)."""
    for lane in np.unique(lanes):
        stack: list[int] = []
        for s, e in zip(start[lanes == lane].tolist(), end[lanes == lane].tolist()):
            while stack and stack[-1] <= s:
                stack.pop()
            if stack and e > stack[-1]:
                return False
            stack.append(e)
    return True


def _staircase(
    n: int, step_ns: int = 100, length_ns: int = 10_000_000
) -> tuple[np.ndarray, np.ndarray]:
    start = np.arange(n, dtype=np.int64) * step_ns
    return start, start + length_ns


def test_a_staircase_of_32k_slices_gets_its_lanes_in_linear_time():
    start, end = _staircase(32_000)
    lanes = nesting_lanes(start, end)
    # every slice overlaps every other without nesting: one lane each, none shared
    assert len(np.unique(lanes)) == 32_000
    assert list(lanes[:NESTING_LANES]) == list(range(NESTING_LANES))
    _, small = lines_run(nesting_lanes, *_staircase(2_000))
    _, large = lines_run(nesting_lanes, *_staircase(8_000))
    assert large < LINEAR_GROWTH * small, f"{large / small:.1f}x the work for 4x the slices"


def test_slices_beyond_the_nesting_lanes_share_lanes_once_disjoint():
    # 3 waves of 40 overlapping slices, each wave after the last has ended: 40 lanes, not 120
    start = np.concatenate([np.arange(40) * 10 + wave * 1_000_000 for wave in range(3)]).astype(
        np.int64
    )
    end = start + 1000
    lanes = nesting_lanes(start, end)
    assert len(np.unique(lanes)) == 40
    assert _lanes_nest(start, end, lanes)


@pytest.mark.parametrize("seed", range(30))
def test_random_slices_nest_in_every_lane(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    start = np.sort(rng.integers(0, 1000, n)).astype(np.int64)
    end = start + rng.integers(0, 300, n)
    order = np.lexsort((-end, start))  # parents first, as timeline tracks are
    start, end = start[order], end[order]
    lanes = nesting_lanes(start, end, nesting=int(rng.integers(1, 5)))
    assert _lanes_nest(start, end, lanes)


def test_nested_slices_stay_in_one_lane():
    start = np.array([0, 1, 2, 10, 11], np.int64)
    end = np.array([9, 8, 3, 20, 12], np.int64)
    assert nesting_lanes(start, end).tolist() == [0, 0, 0, 0, 0]


def test_naming_many_threads_is_linear():
    events: list[dict] = []
    pids = _Pids(events)
    pid = pids.pid("p")
    tids = [pids.tid(pid, f"lane {i}") for i in range(30_000)]
    assert tids == list(range(1, 30_001))
    assert pids.tid(pids.pid("q"), "lane 0") == 1  # numbered per process

    def name(n):
        named = _Pids([])
        for i in range(n):
            named.tid(named.pid("p"), f"lane {i}")

    _, small = lines_run(name, 2_000)
    _, large = lines_run(name, 8_000)
    assert large < LINEAR_GROWTH * small, f"{large / small:.1f}x the work for 4x the threads"
