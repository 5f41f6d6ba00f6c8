import numpy as np

from scaldiag.analyze import intervals as iv


def brute_cover(intervals, lo=0, hi=200):
    mask = np.zeros(hi - lo, bool)
    for s, e in intervals:
        mask[max(s, lo) - lo : max(min(e, hi), lo) - lo] = True
    return mask


def as_pairs(s):
    return list(zip(s[0].tolist(), s[1].tolist()))


def random_intervals(rng, n):
    starts = rng.integers(0, 180, n)
    return starts, starts + rng.integers(0, 25, n)


def test_union_merges_overlaps_and_touching():
    s = iv.union(np.array([5, 0, 10, 30]), np.array([12, 5, 20, 31]))
    assert as_pairs(s) == [(0, 20), (30, 31)]


def test_set_operations_match_a_brute_force_bitmap():
    rng = np.random.default_rng(1)
    for _ in range(200):
        a = iv.union(*random_intervals(rng, rng.integers(0, 8)))
        b = iv.union(*random_intervals(rng, rng.integers(0, 8)))
        ma, mb = brute_cover(as_pairs(a)), brute_cover(as_pairs(b))
        assert np.array_equal(brute_cover(as_pairs(iv.subtract(a, b))), ma & ~mb)
        assert np.array_equal(brute_cover(as_pairs(iv.merge(a, b))), ma | mb)
        ws = rng.integers(0, 150, 5)
        we = ws + rng.integers(0, 50, 5)
        expected = [brute_cover(as_pairs(a))[w0:w1].sum() for w0, w1 in zip(ws, we)]
        assert iv.measure_in_windows(a, ws, we).tolist() == expected
