"""Innermost-event segmentation of a thread, against a brute force."""

import numpy as np

from scaldiag.analyze.hoststate import _GENERIC_CODE, _OVERHEAD, innermost_segments


def nested_events(rng, lo, hi, depth=0):
    """Random properly nested intervals inside [lo, hi)."""
    events = []
    t = lo
    while t < hi and depth < 4:
        s = t + int(rng.integers(0, 4))
        e = min(hi, s + int(rng.integers(1, 20)))
        if s >= e:
            break
        events.append((s, e))
        events += nested_events(rng, s, e, depth + 1)
        t = e + int(rng.integers(0, 3))
    return events


def brute_state(events, own, t):
    """The innermost event at t (latest start, then shortest), then walk up for a category."""
    covering = [i for i, (s, e) in enumerate(events) if s <= t < e]
    if not covering:
        return None
    chain = sorted(covering, key=lambda i: (events[i][0], -events[i][1]))  # outermost first
    for i in reversed(chain):
        if own[i] != _GENERIC_CODE:
            return own[i]
    return _OVERHEAD


def test_matches_brute_force_on_random_nesting():
    rng = np.random.default_rng(7)
    for _ in range(100):
        events = nested_events(rng, 0, 120)
        if not events:
            continue
        own = rng.choice([_GENERIC_CODE, 0, 3, 5], size=len(events)).tolist()
        s, e, c, _ = innermost_segments(np.array([a for a, _ in events]), np.array([b for _, b in events]),
                                     np.array(own))
        for t in range(0, 125):
            hit = np.flatnonzero((s <= t) & (t < e))
            got = int(c[hit[0]]) if len(hit) else None
            assert len(hit) <= 1
            assert got == brute_state(events, own, t), (t, events, own)


def test_child_outliving_its_parent_is_clipped():
    s, e, c, i = innermost_segments(np.array([0, 5]), np.array([10, 20]), np.array([1, 2]))
    assert list(zip(s.tolist(), e.tolist(), c.tolist(), i.tolist())) == [(0, 5, 1, 0), (5, 10, 2, 1)]
