"""Innermost-event segmentation of a thread, against a brute force."""

import numpy as np
import pytest

from scaldiag.analyze.hoststate import _CODE, _GENERIC_CODE, _OVERHEAD, innermost_segments

INPUT = _CODE["input"]
WORK = {_GENERIC_CODE, _OVERHEAD, _CODE["compute"], _CODE["layout"]}


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
    """The innermost event at t (latest start, then shortest); its category walked down from the
    outermost: a generic event takes its parent's; work done inside input is input."""
    covering = [i for i, (s, e) in enumerate(events) if s <= t < e]
    if not covering:
        return None
    chain = sorted(covering, key=lambda i: (events[i][0], -events[i][1]))  # outermost first
    state = None
    for i in chain:
        if own[i] == _GENERIC_CODE:
            state = _OVERHEAD if state is None else state
        elif state == INPUT and own[i] in WORK:
            state = INPUT
        else:
            state = own[i]
    return state


def test_matches_brute_force_on_random_nesting():
    rng = np.random.default_rng(7)
    for _ in range(100):
        events = nested_events(rng, 0, 120)
        if not events:
            continue
        own = rng.choice([_GENERIC_CODE, 0, 3, 5, _OVERHEAD], size=len(events)).tolist()
        s, e, c, _ = innermost_segments(
            np.array([a for a, _ in events]), np.array([b for _, b in events]), np.array(own)
        )
        for t in range(0, 125):
            hit = np.flatnonzero((s <= t) & (t < e))
            got = int(c[hit[0]]) if len(hit) else None
            assert len(hit) <= 1
            assert got == brute_state(events, own, t), (t, events, own)


def test_child_outliving_its_parent_is_clipped():
    s, e, c, i = innermost_segments(np.array([0, 5]), np.array([10, 20]), np.array([1, 2]))
    assert list(zip(s.tolist(), e.tolist(), c.tolist(), i.tolist())) == [
        (0, 5, 1, 0),
        (5, 10, 2, 1),
    ]


def _activity_by_strings(timeline, gaps, per, top=5):
    """activity_during as first written: group on "name\\0state" strings (the reference)."""
    from scaldiag.analyze import intervals as iv
    from scaldiag.analyze.hoststate import _CODE, HOST_STATES

    overlap = iv.measure_in_windows(gaps, timeline.seg_start, timeline.seg_end)
    shown = (overlap > 0) & (timeline.seg_state < _CODE["wait"])
    if not shown.any():
        return []
    keys = np.array(
        [f"{n}\0{c}" for n, c in zip(timeline.seg_name[shown], timeline.seg_state[shown])],
        dtype=object,
    )
    unique, inverse = np.unique(keys, return_inverse=True)
    totals = np.bincount(inverse, weights=overlap[shown])
    best = np.argsort(-totals)[:top]
    return [
        (
            unique[i].rpartition("\0")[0],
            HOST_STATES[int(unique[i].rpartition("\0")[2])],
            float(totals[i]) / per,
        )
        for i in best
    ]


def test_activity_during_matches_string_grouping_with_ties_and_shared_names():
    from scaldiag.analyze.hoststate import host_states
    from scaldiag.trace import Line, Plane

    rng = np.random.default_rng(3)
    names = ["b", "a", "a\0x", "IteratorGetNext", "Wait", "op:MatMul", "c", "d"]
    planes = []
    for p in range(2):
        lines = []
        for _ in range(3):
            start = np.sort(rng.integers(0, 1000, 60)) * 10
            end = start + rng.integers(1, 4, 60) * 10  # equal lengths: ties in the totals
            lines.append(
                Line(
                    name=f"t{p}",
                    start_ns=start,
                    end_ns=end,
                    name_id=rng.integers(0, len(names), 60).astype(np.int32),
                )
            )
        # the second plane lists the same names in another order
        planes.append(
            Plane(name="/host:CPU", event_names=names if p == 0 else names[::-1], lines=lines)
        )
    for p in planes[1].lines:
        object.__setattr__(p, "name_id", (len(names) - 1 - p.name_id).astype(np.int32))
    timeline = host_states(planes, ops_are_compute=False)
    for lo, hi in [(0, 10_000), (500, 3000), (0, 0)]:
        gaps = (np.array([lo, hi + 2000]), np.array([hi, hi + 4000]))
        for top in (1, 3, 20):
            assert timeline.activity_during(gaps, 7, top) == _activity_by_strings(
                timeline, gaps, 7, top
            )


def test_sort_shortcuts_give_lexsorts_order():
    from scaldiag.analyze.hoststate import _by_start_then_longest, _transitions_sorted

    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 50, 2000):
        for ties in (False, True):
            start = (
                np.sort(rng.choice(10**6, n, replace=False))
                if not ties
                else np.sort(rng.integers(0, 40, n))
            )
            end = start + rng.integers(0, 30, n)
            order = _by_start_then_longest(start, end)
            expected = np.lexsort((-end, start))
            assert (np.arange(n) if order is None else order).tolist() == expected.tolist()
            assert order is None or ties
            for base in (1_700_000_000_000_000_000, 0):
                times = np.concatenate((end, start)) + base
                is_start = np.concatenate((np.zeros(n, bool), np.ones(n, bool)))
                depth = rng.integers(0, 6, n).astype(np.int32)
                tie = np.concatenate((-depth, depth))
                expected = np.lexsort((tie, is_start, times))
                sorted_times, order = _transitions_sorted(times.copy(), is_start, tie)
                assert order.tolist() == expected.tolist()
                assert sorted_times.tolist() == times[expected].tolist()
    wide = np.array([0, 2**62, 5, 2**61])  # too wide for one key: the lexsort itself
    sorted_times, order = _transitions_sorted(
        wide.copy(), np.array([0, 1, 0, 1], bool), np.array([0, 0, 0, 0])
    )
    assert order.tolist() == np.lexsort((np.zeros(4), [0, 1, 0, 1], wide)).tolist()


def test_a_long_thread_done_in_pieces_gives_the_same_segments(monkeypatch):
    from scaldiag.analyze import hoststate

    rng = np.random.default_rng(11)
    events = nested_events(rng, 0, 3000)
    events += [
        (s, s + 5) for s in range(3000, 3400, 5)
    ]  # back to back: pieces may start where one ends
    start, end = np.array([s for s, _ in events]), np.array([e for _, e in events])
    own = rng.choice([_GENERIC_CODE, 0, 1, 4], len(events))
    perm = rng.permutation(len(events))  # unsorted input as well
    for s, e, o in ((start, end, own), (start[perm], end[perm], own[perm])):
        whole = hoststate.innermost_segments(s, e, o)
        for size in (1, 7, 100):
            monkeypatch.setattr(hoststate, "_CHUNK", size)
            pieces = hoststate.innermost_segments(s, e, o)
            assert [a.tolist() for a in pieces] == [a.tolist() for a in whole]
        monkeypatch.setattr(hoststate, "_CHUNK", 1 << 20)


def test_measuring_threads_as_they_are_done_matches_the_kept_segments(monkeypatch):
    """host_states_during gives each gap set what activity_during gives it, and the same states."""
    from scaldiag.analyze import hoststate
    from scaldiag.trace import Line, Plane

    rng = np.random.default_rng(13)
    names = ["train", "IteratorGetNext", "Wait", "op:MatMul", "x", "y"]
    planes = []
    for p in range(2):
        lines = []
        for _ in range(3):
            events = nested_events(rng, 0, 3000)
            lines.append(
                Line(
                    name=f"t{p}",
                    start_ns=np.array([s for s, _ in events]) * 10,
                    end_ns=np.array([e for _, e in events]) * 10,
                    name_id=rng.integers(0, len(names), len(events)).astype(np.int32),
                )
            )
        planes.append(
            Plane(name="/host:CPU", event_names=names if p == 0 else names[::-1], lines=lines)
        )
    gap_sets = [
        (np.array([0, 9000, 20000]), np.array([5000, 15000, 29000])),
        (np.array([100]), np.array([30000])),
        (np.empty(0, np.int64), np.empty(0, np.int64)),
        (np.array([3]), np.array([7])),
    ]
    for chunk in (1 << 20, 97):  # long threads in pieces too
        monkeypatch.setattr(hoststate, "_CHUNK", chunk)
        kept = hoststate.host_states(planes, ops_are_compute=False)
        timeline, activity = hoststate.host_states_during(planes, False, gap_sets, 7, top=4)
        assert activity == [kept.activity_during(gaps, 7, 4) for gaps in gap_sets]
        assert activity[0] and not activity[2]
        assert sorted(timeline.states) == sorted(kept.states)
        for state, (starts, ends) in kept.states.items():
            assert timeline.states[state][0].tolist() == starts.tolist()
            assert timeline.states[state][1].tolist() == ends.tolist()


def test_a_sorted_thread_cut_where_it_is_stored_gives_the_segments_of_the_whole(monkeypatch):
    """Cut before copying (zero-length and outliving events included) as innermost_segments cuts it.
    """
    from scaldiag.analyze import hoststate
    from scaldiag.trace import Line

    rng = np.random.default_rng(17)
    events = nested_events(rng, 0, 4000)
    start, end = np.array([s for s, _ in events]), np.array([e for _, e in events])
    end[rng.choice(len(end), 40)] = start[
        rng.choice(len(end), 40)
    ]  # some last nothing (or end before)
    end = np.maximum(end, start)
    end[rng.choice(len(end), 5)] += 50  # some outlive their parents
    own = rng.choice([_GENERIC_CODE, 0, 1, 4, 5], len(events))
    line = Line(
        name="python", start_ns=start, end_ns=end, name_id=np.arange(len(events), dtype=np.int32)
    )
    # each event its own name, so the names the segments carry are the events' indices (+ 5)
    to_global = np.arange(len(events), dtype=np.int32) + 5
    for native in ("1", "0"):
        monkeypatch.setenv("SCALDIAG_NATIVE", native)
        for size in (7, 100, 1 << 20):
            monkeypatch.setattr(hoststate, "_CHUNK", size)
            keep = np.flatnonzero(end > start)
            s, e, c, i = hoststate.innermost_segments(start[keep], end[keep], own[keep])
            pieces = list(hoststate._line_segments(line, own, to_global))
            got = [np.concatenate([p[k] for p in pieces]).tolist() for k in range(4)]
            assert got == [s.tolist(), e.tolist(), c.tolist(), (keep[i] + 5).tolist()], native
            assert [p[2].dtype for p in pieces] == [np.int8] * len(pieces)
            assert [p[3].dtype for p in pieces] == [np.int32] * len(pieces)
            assert size > len(events) or len(pieces) > 1


def test_the_c_cuts_of_a_stored_thread_are_the_numpy_ones(monkeypatch):
    """_line_pieces by _hoststate.c's one pass and by numpy: the same cuts, zero-length events,
    ties and unsorted threads included."""
    from scaldiag.analyze import hoststate

    if hoststate._hoststate_c is None:
        pytest.skip("the C parts are not built")
    rng = np.random.default_rng(5)
    several = 0
    for trial in range(200):
        start, end = tangled_events(rng, int(rng.integers(2, 400)))
        if trial % 3 == 0:  # nested, as real threads mostly are
            events = nested_events(rng, 0, int(rng.integers(2, 400)))
            start, end = np.array([a for a, _ in events]), np.array([b for _, b in events])
        if trial % 4 == 1:
            end[rng.random(len(end)) < 0.3] = 0
            end = np.maximum(end, start)  # many last nothing
        if trial % 5 == 2:
            start = start[rng.permutation(len(start))]  # unsorted: one piece
            end = start + 1
        size = int(rng.integers(1, 60))
        monkeypatch.setattr(hoststate, "_CHUNK", size)
        got = {}
        for native in ("1", "0"):
            monkeypatch.setenv("SCALDIAG_NATIVE", native)
            got[native] = hoststate._line_pieces(start, end)
        assert got["1"] == got["0"], trial
        several += len(got["0"]) > 1
    assert several > 20  # many threads are cut (a tangled one has few free starts)


def tangled_events(rng, n):
    """Random intervals, many of them outliving the ones they start in (as a Python tracer's
    function events and a TraceMe on one thread do), some sharing starts and ends."""
    start = np.sort(rng.integers(0, 4 * n, n))
    length = np.where(rng.random(n) < 0.2, rng.integers(1, 40 * n, n), rng.integers(1, 12, n))
    end = start + length
    order = np.lexsort((-end, start))
    return start[order], end[order]


def _three_ways(start, end, own):
    """innermost segments by the reference loop, the vectorised code where it applies, and the C
    sweep."""
    from scaldiag.analyze import hoststate as hs

    loop = hs._innermost_loop(start, end, own)
    clipped = hs._clipped_ends(start, end)
    vectorised = hs._innermost_sorted(start, *clipped, own) if clipped is not None else None
    native = None
    if hs._hoststate_c is not None:
        *found, unions = hs._hoststate_c.innermost(
            start, end, own, hs._GENERIC_CODE, hs._OVERHEAD, hs._INPUT, hs._INHERITING.tobytes()
        )
        native = tuple(np.frombuffer(c, np.int64) for c in found)
        # the unions the sweep builds as it goes are those of its segments
        expected = hs._unions_by_state(native[0], native[1], native[2].astype(np.int8))
        assert [
            (c, np.frombuffer(a, np.int64).tolist(), np.frombuffer(b, np.int64).tolist())
            for c, a, b in unions
        ] == [(c, a.tolist(), b.tolist()) for c, (a, b) in expected]
    as_lists = lambda segs: [np.asarray(c).tolist() for c in segs]  # noqa: E731
    return as_lists(loop), vectorised and as_lists(vectorised), native and as_lists(native)


def test_the_c_sweep_the_loop_and_the_vectorised_code_agree_on_tangled_threads():
    rng = np.random.default_rng(11)
    settled = 0
    for trial in range(300):
        start, end = tangled_events(rng, int(rng.integers(1, 60)))
        own = rng.choice([_GENERIC_CODE, 0, 1, 3, INPUT, _OVERHEAD], size=len(start)).astype(
            np.int64
        )
        loop, vectorised, native = _three_ways(start, end, own)
        if native is not None:
            assert native == loop, trial
        if vectorised is not None:
            assert vectorised == loop, trial
            settled += 1
    assert settled > 100  # the vectorised code handles most tangles itself


def test_an_event_after_a_clipped_child_is_not_inside_it():
    # a [0, 10) holds b [5, 15), clipped to 10; c starts at 12, after both: on its own.
    s, e, c, i = innermost_segments(
        np.array([0, 5, 12]), np.array([10, 15, 20]), np.array([1, 2, 3])
    )
    assert list(zip(s.tolist(), e.tolist(), c.tolist(), i.tolist())) == [
        (0, 5, 1, 0),
        (5, 10, 2, 1),
        (12, 20, 3, 2),
    ]


def test_every_fixture_thread_gives_the_same_segments_three_ways():
    from pathlib import Path

    from scaldiag.analyze import hoststate as hs
    from scaldiag.readers.xplane.read import read_trace

    files = sorted(Path(__file__).parent.parent.joinpath("fixtures").rglob("*.xplane.pb"))
    threads = 0
    for file in files:
        for plane in read_trace([file]).host_planes:
            own_by_name = hs._own_codes(plane.event_names, False)
            for line in plane.lines:
                keep = np.flatnonzero(line.end_ns > line.start_ns)
                order = np.lexsort((-line.end_ns[keep], line.start_ns[keep]))
                start, end = line.start_ns[keep][order], line.end_ns[keep][order]
                loop, vectorised, native = _three_ways(
                    start, end, own_by_name[line.name_id[keep][order]]
                )
                assert native in (None, loop) and vectorised in (None, loop), (file, line.name)
                threads += 1
    assert threads > 20


def _many_gap_sets(rng, devices, span, per_device=4):
    """Each device's idle gaps within 10 steps, as profile builds them: a few events per device."""
    from scaldiag.analyze import intervals as iv

    steps = iv.union(np.arange(10) * span // 10, np.arange(1, 11) * span // 10 - span // 1000)
    sets = []
    for _ in range(devices):
        start = np.sort(rng.integers(0, span, per_device))
        sets.append(
            iv.subtract(steps, iv.merge((start, start + rng.integers(1, span // 100, per_device))))
        )
    return sets


def _host_planes(rng, threads, events, span):
    from scaldiag.trace import Line, Plane

    names = ["train", "IteratorGetNext", "Wait", "op:MatMul", "x", "y"]
    lines = []
    for t in range(threads):
        start = np.sort(rng.integers(0, span, events))
        lines.append(
            Line(
                name=f"t{t}",
                start_ns=start,
                end_ns=start + rng.integers(1, span // 200, events),
                name_id=rng.integers(0, len(names), events).astype(np.int32),
            )
        )
    return [Plane(name="/host:CPU", event_names=names, lines=lines)]


def test_many_gap_sets_measured_in_groups_match_the_kept_segments(monkeypatch):
    """Sets measured a table of _GROUP_SETS at a time (empty sets, a whole group empty, a short last
    group) give each set what activity_during gives it, by the C loop and by numpy."""
    from scaldiag.analyze import hoststate

    rng = np.random.default_rng(19)
    planes = _host_planes(rng, 3, 400, 100_000)
    sets = _many_gap_sets(rng, 27, 100_000)
    empty = (np.empty(0, np.int64), np.empty(0, np.int64))
    sets[3] = empty
    sets[8:16] = [empty] * 8  # the second group has no boundaries at all
    kept = hoststate.host_states(planes, ops_are_compute=False)
    expected = [kept.activity_during(gaps, 7, 4) for gaps in sets]
    assert sum(map(bool, expected)) == 27 - 9
    for native in ("1", "0"):
        monkeypatch.setenv("SCALDIAG_NATIVE", native)
        for group in (1, 8, 100):
            monkeypatch.setattr(hoststate, "_GROUP_SETS", group)
            assert hoststate.host_states_during(planes, False, sets, 7, top=4)[1] == expected, (
                native,
                group,
            )


def test_many_devices_take_memory_linear_in_their_gaps(monkeypatch):
    """Issue 22: one table of every device's gap boundaries per device took devices x all boundaries
    (16,000 devices: gigabytes). 800 devices' tables: 144 bytes a boundary at most; one table would
    take 800 x ~6,400 x 16 bytes (82 MB). Four times the devices: about four times the memory."""
    import tracemalloc

    from scaldiag.analyze import hoststate

    peaks = {}
    for native in ("1", "0"):
        monkeypatch.setenv("SCALDIAG_NATIVE", native)
        for devices in (200, 800):
            rng = np.random.default_rng(23)
            planes, sets = _host_planes(rng, 2, 3000, 10**9), _many_gap_sets(rng, devices, 10**9)
            bounds = sum(2 * len(s[0]) for s in sets)
            tracemalloc.start()
            try:
                _, activity = hoststate.host_states_during(planes, False, sets, 10)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert len(activity) == devices and all(activity)
            # tables: (2 x 8 + 2) int64 cells a boundary; totals and a thread's temporaries: 2 MB
            assert peak < 144 * bounds + (2 << 20), (native, devices, peak, bounds)
            peaks[native, devices] = peak
        assert peaks[native, 800] < 5 * peaks[native, 200], peaks
