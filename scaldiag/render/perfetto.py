"""A run's timeline as Chrome trace-event JSON: opens in Perfetto (ui.perfetto.dev) and
chrome://tracing.

One process per trace plane (its streams or threads as threads), one for the
steps, one per sampled device (counters). Slices are complete events
(``ph: "X"``), samples counters (``"C"``), names metadata (``"M"``). Times
are microseconds from the first thing shown, on the record's clock (see
analyze/timeline.py for how the trace is put on it); ``otherData.base_ns``
says where zero is, in epoch nanoseconds.

Format: the Trace Event Format document (Google, "Trace Event Format",
docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU).
"""

from __future__ import annotations

import heapq
import json
import sys
from typing import TextIO

import numpy as np

from scaldiag import __version__
from scaldiag.analyze.timeline import WINDOW_MARGIN_NS, RunTimeline
from scaldiag.errors import ScaldiagError
from scaldiag.rules.report import JobReport

# Trace events carry floating-point microseconds; three decimals keep nanoseconds.
_US_DIGITS = 3
# Lanes where slices nest, searched first-fit for each slice. Real traces need one or two (a CUPTI
# stream's overlapping kernels); a crafted one overlapping without nesting needed one per slice, and
# searching them all made the export quadratic (32k slices: 83 s). Slices that fit none go to lanes
# of disjoint slices instead.
NESTING_LANES = 16


def write(
    report,
    stream: TextIO | None = None,
    width: int | None = None,
    timelines: list[RunTimeline] | None = None,
    merged: dict | None = None,
    **_views,
) -> None:
    """``timelines``: a run's or a sweep's (analyze/timeline.py); ``merged``: a job's ranks' events
    on one clock (pipeline.job_trace), written as they are."""
    if isinstance(report, JobReport):
        if merged is None:
            raise ScaldiagError(
                "the Perfetto export of a job needs its ranks' merged trace: "
                "give `scaldiag report` the job's node directories"
            )
        try:  # a number that is not finite left in (the parse refuses them): not written
            text = json.dumps(merged, allow_nan=False)
        except ValueError as exc:
            raise ScaldiagError(f"the merged trace cannot be written as JSON ({exc})") from None
        (stream or sys.stdout).write(text)
        return
    if not timelines:
        raise ScaldiagError(
            "the Perfetto export needs a run's recorded steps and samples: "
            "give `scaldiag report` a run or sweep directory"
        )
    (stream or sys.stdout).write(
        json.dumps(trace_document(timelines), separators=(",", ":"), allow_nan=False) + "\n"
    )


def trace_document(timelines: list[RunTimeline]) -> dict:
    windows = [_shown_window(t) for t in timelines]
    base = min(w[0] for w in windows)
    events: list[dict] = []
    pids = _Pids(events)
    for timeline, window in zip(timelines, windows):
        prefix = f"{timeline.label}: " if len(timelines) > 1 else ""
        _tracks(timeline, prefix, base, pids, events)
        _steps(timeline, window, prefix, base, pids, events)
        _counters(timeline, window, prefix, base, pids, events)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "producer": f"scaldiag {__version__}",
            "base_ns": str(base),
            "clock": "; ".join(t.clock for t in timelines if t.clock) or "record clock (epoch ns)",
        },
    }


def _shown_window(t: RunTimeline) -> tuple[int, int]:
    """The trace window with a margin for the samples; without a trace, the whole run."""
    window = t.window_ns()
    if window is not None:
        return window[0] - WINDOW_MARGIN_NS, window[1] + WINDOW_MARGIN_NS
    times = [t.step_begin_ns, t.step_end_ns] + [s.t_ns for s in t.series]
    times = [x for x in times if len(x)]
    if not times:
        return 0, 0
    return int(min(x.min() for x in times)), int(max(x.max() for x in times))


class _Pids:
    """Process and thread ids, named once with metadata events as they are first used."""

    def __init__(self, events: list[dict]):
        self.events = events
        self.processes: dict[str, int] = {}
        self.threads: dict[tuple[int, str], int] = {}
        self.thread_count: dict[int, int] = {}  # per process: its threads so far

    def pid(self, process: str) -> int:
        if process not in self.processes:
            pid = self.processes[process] = len(self.processes) + 1
            self.events.append(
                {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": process}}
            )
            self.events.append(
                {
                    "ph": "M",
                    "name": "process_sort_index",
                    "pid": pid,
                    "tid": 0,
                    "args": {"sort_index": pid},
                }
            )
        return self.processes[process]

    def tid(self, pid: int, thread: str) -> int:
        key = (pid, thread)
        if key not in self.threads:
            tid = self.threads[key] = self.thread_count[pid] = self.thread_count.get(pid, 0) + 1
            self.events.append(
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}}
            )
            self.events.append(
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "pid": pid,
                    "tid": tid,
                    "args": {"sort_index": tid},
                }
            )
        return self.threads[key]


def _us(ns: np.ndarray | int, base: int) -> np.ndarray:
    return np.round((np.asarray(ns, np.int64) - base) / 1e3, _US_DIGITS)


def _slices(events, pid, tid, start_ns, end_ns, names, cats, base, tids=None) -> None:
    """Complete events; ``tids``, one per slice, where they are not all ``tid``."""
    ts = _us(start_ns, base).tolist()
    dur = np.round(
        np.maximum(np.asarray(end_ns, np.int64) - np.asarray(start_ns, np.int64), 0) / 1e3,
        _US_DIGITS,
    ).tolist()
    for t, d, name, category, thread in zip(ts, dur, names, cats, tids or [tid] * len(ts)):
        events.append(
            {
                "ph": "X",
                "name": str(name),
                "cat": str(category) or "event",
                "ts": t,
                "dur": d,
                "pid": pid,
                "tid": thread,
            }
        )


def _tracks(t: RunTimeline, prefix: str, base: int, pids: _Pids, events: list[dict]) -> None:
    seen: dict[tuple[int, str], int] = {}
    for track in t.tracks:
        pid = pids.pid(prefix + track.process)
        n = seen[(pid, track.thread)] = seen.get((pid, track.thread), 0) + 1
        # threads of one name (python3) stay apart
        name = track.thread if n == 1 else f"{track.thread} #{n}"
        lanes = nesting_lanes(track.start_ns, track.end_ns)
        # Lane by lane, each lane's slices in their order: one pass over the track, whatever the
        # lanes.
        order = np.argsort(lanes, kind="stable")
        tid_of_lane = {
            lane: pids.tid(pid, name if lane == 0 else f"{name} (overlapping {lane})")
            for lane in np.unique(lanes).tolist()
        }
        _slices(
            events,
            pid,
            None,
            track.start_ns[order],
            track.end_ns[order],
            track.names[order],
            track.categories[order],
            base,
            [tid_of_lane[lane] for lane in lanes[order].tolist()],
        )


def nesting_lanes(
    start_ns: np.ndarray, end_ns: np.ndarray, nesting: int = NESTING_LANES
) -> np.ndarray:
    """A lane per slice such that the slices of each lane nest (trace viewers need that of a
    thread): a CUPTI stream or a host line can hold events that overlap without nesting.
    ``start_ns`` sorted, parents first (as timeline tracks are).

    The first ``nesting`` lanes are searched in order (the first lane a slice nests in);
    a slice that fits none goes to a lane after them whose slices have all ended (one
    of disjoint slices, which nest trivially), found in a heap: O(n log n) at worst."""
    lanes = np.zeros(len(start_ns), np.int64)
    open_ends: list[list[int]] = []  # per nesting lane, the ends of the slices still open
    free_at: list[tuple[int, int]] = []  # (end of its last slice, lane) per lane of disjoint slices
    for i, (start, end) in enumerate(zip(start_ns.tolist(), end_ns.tolist())):
        for lane, stack in enumerate(open_ends):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                lanes[i] = lane
                break
        else:
            if len(open_ends) < nesting:
                open_ends.append([end])
                lanes[i] = len(open_ends) - 1
            else:
                lanes[i] = _disjoint_lane(free_at, start, end, nesting)
    return lanes


def _disjoint_lane(free_at: list[tuple[int, int]], start: int, end: int, first: int) -> int:
    """The lane of disjoint slices that has been free longest, if free at ``start``, else a new
    one."""
    if free_at and free_at[0][0] <= start:
        lane = heapq.heapreplace(free_at, (end, free_at[0][1]))[1]
    else:
        lane = first + len(free_at)
        heapq.heappush(free_at, (end, lane))
    return lane


def _steps(t: RunTimeline, window, prefix, base, pids: _Pids, events) -> None:
    shown = (t.step_end_ns >= window[0]) & (t.step_begin_ns <= window[1])
    if not shown.any():
        return
    pid = pids.pid(prefix + "steps")
    names = [
        f"step {n}" + (" (traced)" if traced else "")
        for n, traced in zip(t.step_num[shown], t.traced[shown])
    ]
    _slices(
        events,
        pid,
        pids.tid(pid, "recorded steps (steps.jsonl)"),
        t.step_begin_ns[shown],
        t.step_end_ns[shown],
        names,
        ["step"] * len(names),
        base,
    )


def _counters(t: RunTimeline, window, prefix, base, pids: _Pids, events) -> None:
    for series in t.series:
        shown = (series.t_ns >= window[0]) & (series.t_ns <= window[1]) & np.isfinite(series.values)
        if not shown.any():
            continue
        source = "NVML" if series.group.startswith("GPU") else "psutil"
        pid = pids.pid(f"{prefix}{series.group} samples ({source})")
        name = f"{series.name} ({series.unit})"
        for ts, value in zip(_us(series.t_ns[shown], base).tolist(), series.values[shown].tolist()):
            events.append(
                {"ph": "C", "name": name, "ts": ts, "pid": pid, "tid": 0, "args": {"value": value}}
            )
