"""A run on one clock: sample series, recorded steps, and the trace window's events.

What the timeline views (the HTML report's plots, the Perfetto export) draw.
Pure functions over the record's plain data and a :class:`Trace`; no I/O.

The clock is the record's: integer nanoseconds since the epoch. TensorFlow's
profiler writes its events relative to the profiling session's start, and
other profilers may not, so the trace is put on the record's clock by the
steps both saw: the median difference between the recorder's traced step
begins and the trace's own step starts, taken in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scaldiag.analyze import categories as cat
from scaldiag.analyze import intervals as iv
from scaldiag.analyze.categories import CATEGORIES
from scaldiag.analyze.device import device_events
from scaldiag.analyze.hoststate import host_states
from scaldiag.analyze.run import counter_rate
from scaldiag.analyze.trace_steps import Steps, find_steps
from scaldiag.trace import Trace

# Samples this far outside the trace window still go with it: NVML and psutil
# sample at 1-100 Hz, a trace window can be a few milliseconds long.
WINDOW_MARGIN_NS = 2_000_000_000


@dataclass(frozen=True)
class Series:
    """One sampled quantity over time."""

    group: str  # "GPU 0", "host"
    name: str  # "util", "PCIe TX", ...
    unit: str  # "%", "B/s", "MHz", "W"
    t_ns: np.ndarray  # int64, record clock
    values: np.ndarray  # float64


@dataclass(frozen=True)
class Track:
    """Slices on one timeline: a GPU stream, a host thread, a unit's categories, the steps."""

    process: str
    thread: str
    start_ns: np.ndarray  # int64, record clock
    end_ns: np.ndarray
    names: np.ndarray  # object array
    categories: np.ndarray  # object array: the category each slice counts for ("" for none)


@dataclass(frozen=True)
class RunTimeline:
    label: str
    step_begin_ns: np.ndarray
    step_end_ns: np.ndarray
    step_num: np.ndarray
    traced: np.ndarray  # bool: the step ran inside the profiler window
    steady_window_ns: tuple[int, int] | None
    series: list[Series] = field(default_factory=list)
    tracks: list[Track] = field(default_factory=list)  # the trace window; empty without a trace
    clock: str = ""  # how the trace was put on the record's clock

    def window_ns(self) -> tuple[int, int] | None:
        """The trace window's extent, or None without a trace."""
        spans = [
            (int(t.start_ns.min()), int(t.end_ns.max())) for t in self.tracks if len(t.start_ns)
        ]
        return (min(s for s, _ in spans), max(e for _, e in spans)) if spans else None


# --- samples ---------------------------------------------------------------

_GPU_GAUGES = (
    ("util_pct", "util", "%", 1.0),
    ("mem_used_bytes", "memory used", "B", 1.0),
    ("sm_clock_mhz", "SM clock", "MHz", 1.0),
    ("power_mw", "power", "W", 1e-3),
)
_GPU_COUNTERS = (
    ("pcie_tx_bytes", "PCIe TX", 1.0),
    ("pcie_rx_bytes", "PCIe RX", 1.0),
    ("nvlink_tx_kib", "NVLink TX", 1024.0),
    ("nvlink_rx_kib", "NVLink RX", 1024.0),
)


def sample_series(gpu_samples: list[dict], host_samples: list[dict]) -> list[Series]:
    """GPU gauges, GPU counter rates (between consecutive samples), host CPU."""
    out: list[Series] = []
    by_gpu: dict[int, list[dict]] = {}
    for row in gpu_samples:
        by_gpu.setdefault(row["gpu"], []).append(row)
    for index, rows in sorted(by_gpu.items()):
        group = f"GPU {index}"
        for key, name, unit, scale in _GPU_GAUGES:
            t, v = _column(rows, key)
            if len(t):
                out.append(Series(group, name, unit, t, v * scale))
        for key, name, scale in _GPU_COUNTERS:
            t, v = _rates(rows, key, scale)
            if len(t):
                out.append(Series(group, name, "B/s", t, v))
    rows = [r for r in host_samples if r.get("core_pct")]
    if rows:
        t = np.array([r["t_ns"] for r in rows], np.int64)
        cores = [np.asarray(r["core_pct"], float) for r in rows]
        out.append(Series("host", "CPU, all cores", "%", t, np.array([c.mean() for c in cores])))
        out.append(Series("host", "CPU, busiest core", "%", t, np.array([c.max() for c in cores])))
        t_p, v_p = _column(rows, "proc_cpu_pct")
        if len(t_p):
            out.append(Series("host", "training processes (100 = one core)", "%", t_p, v_p))
    return out


def _column(rows: list[dict], key: str) -> tuple[np.ndarray, np.ndarray]:
    pairs = [(r["t_ns"], r[key]) for r in rows if r.get(key) is not None]
    return np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], float)


def _rates(rows: list[dict], key: str, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """A cumulative counter's rate between consecutive samples, at the later sample."""
    points = [r for r in rows if r.get(key) is not None]
    rates = [(b["t_ns"], counter_rate([a, b], key, scale)) for a, b in zip(points, points[1:])]
    rates = [(t, v) for t, v in rates if v is not None]
    return np.array([t for t, _ in rates], np.int64), np.array([v for _, v in rates], float)


# --- the trace window --------------------------------------------------------


def trace_tracks(trace: Trace) -> tuple[list[Track], Steps]:
    """Every trace event as a slice on its stream or thread, each unit's exclusive
    categories as slices, and the steps; on the trace's own clock."""
    devices = [(plane, device_events(plane)) for plane in trace.device_planes]
    all_device = (
        (
            np.concatenate([d.start_ns for _, d in devices]),
            np.concatenate([d.end_ns for _, d in devices]),
        )
        if devices
        else None
    )
    steps = find_steps(trace, all_device)
    host = host_states(trace.host_planes, ops_are_compute=not devices)
    tracks = []
    for plane, events in devices:  # device_events flattens the non-empty lines in order
        lines = [line for line in plane.lines if len(line)]
        split = np.split(events.category, np.cumsum([len(line) for line in lines])[:-1])
        tracks += [_event_track(plane, line, cats) for line, cats in zip(lines, split)]
    for plane in trace.host_planes:
        for line in plane.lines:
            if len(line):
                own: dict[str, str] = {}
                names = np.array(plane.event_names, dtype=object)[line.name_id]
                for n in set(names):
                    own[n] = _host_category(n, line.name, not devices)
                tracks.append(
                    _event_track(plane, line, np.array([own[n] for n in names], dtype=object))
                )
    if devices:
        host_sets = {
            "input": host.get("input"),
            "host_overhead": iv.merge(
                *[host.get(c) for c in ("host_overhead", "compute", "layout", "collective")]
            ),
        }
        units = [(plane.label, {**events.sets(), **host_sets}) for plane, events in devices]
    else:
        name = trace.host_planes[0].label if trace.host_planes else "/host:CPU"
        units = [
            (
                name,
                {
                    c: host.get(c)
                    for c in ("compute", "layout", "collective", "input", "host_overhead")
                },
            )
        ]
    tracks += [_category_track(name, sets, steps) for name, sets in units]
    if steps.count and steps.method != "none":
        names = np.array([f"step {i}" for i in range(steps.count)], dtype=object)
        tracks.append(
            Track(
                "steps",
                f"steps ({steps.method})",
                steps.start_ns,
                steps.end_ns,
                names,
                np.full(steps.count, "", dtype=object),
            )
        )
    return tracks, steps


def _host_category(name: str, line_name: str, ops_are_compute: bool) -> str:
    own = cat.host_category(name, ops_are_compute)
    return own or cat.host_line_default(line_name) or ""


def _event_track(plane, line, cats: np.ndarray) -> Track:
    names = np.array(plane.event_names, dtype=object)[line.name_id]
    order = np.lexsort((-(line.end_ns - line.start_ns), line.start_ns))  # parents before children
    return Track(
        plane.label,
        line.name,
        line.start_ns[order],
        line.end_ns[order],
        names[order],
        np.asarray(cats, dtype=object)[order],
    )


def _category_track(unit: str, sets: dict[str, iv.IntervalSet], steps: Steps) -> Track:
    """Each instant of the steps, named for the first category active then (breakdown.py's
    priority)."""
    inside = iv.union(steps.start_ns, steps.end_ns)
    covered = iv.EMPTY
    parts: list[tuple[str, iv.IntervalSet]] = []
    for category in CATEGORIES[:-1]:
        s = sets.get(category, iv.EMPTY)
        if len(s[0]):
            parts.append((category, _intersect(iv.subtract(s, covered), inside)))
            covered = iv.merge(covered, s)
    parts.append(("idle", iv.subtract(inside, covered)))
    start = np.concatenate([p[0] for _, p in parts])
    end = np.concatenate([p[1] for _, p in parts])
    names = np.array([c for c, p in parts for _ in range(len(p[0]))], dtype=object)
    order = np.argsort(start, kind="stable")
    names_arr = names[order]
    return Track(
        unit, "categories (exclusive)", start[order], end[order], names_arr, names_arr.copy()
    )


def _intersect(a: iv.IntervalSet, b: iv.IntervalSet) -> iv.IntervalSet:
    if not len(a[0]) or not len(b[0]):
        return iv.EMPTY
    lo = min(int(a[0][0]), int(b[0][0]))
    hi = max(int(a[1][-1]), int(b[1][-1]))
    return iv.subtract(a, iv.subtract((np.array([lo]), np.array([hi])), b))


def clock_offset_ns(trace_step_starts: np.ndarray, traced_begins: np.ndarray) -> int | None:
    """What to add to trace times to put them on the record's clock, or None
    when there are no steps to match. The steps are matched in order."""
    n = min(len(trace_step_starts), len(traced_begins))
    if n == 0:
        return None
    return int(
        np.median(
            np.asarray(traced_begins[:n], np.int64) - np.asarray(trace_step_starts[:n], np.int64)
        )
    )


def shift(track: Track, offset_ns: int) -> Track:
    return Track(
        track.process,
        track.thread,
        track.start_ns + offset_ns,
        track.end_ns + offset_ns,
        track.names,
        track.categories,
    )


# --- a run -------------------------------------------------------------------


def run_timeline(
    label: str,
    steps: list[dict],
    gpu_samples: list[dict],
    host_samples: list[dict],
    steady_window_ns: tuple[int, int] | None,
    trace: Trace | None = None,
) -> RunTimeline:
    """Everything on the record's clock. ``steps``, samples: the record's rows."""
    begin = np.array([s["begin_ns"] for s in steps], np.int64)
    end = np.array([s.get("end_ns") or s["begin_ns"] for s in steps], np.int64)
    traced = np.array([bool(s.get("traced")) for s in steps], bool)
    tracks, clock = [], ""
    if trace is not None:
        tracks, trace_steps = trace_tracks(trace)
        offset = clock_offset_ns(trace_steps.start_ns, begin[traced])
        if offset is None:
            clock = "trace clock as written (no traced step to align it with the recorded steps)"
        else:
            clock = (
                f"trace shifted by {offset} ns onto the record's clock (epoch ns), matching its "
                f"{min(trace_steps.count, int(traced.sum()))} steps to the recorded traced steps"
            )
            tracks = [shift(t, offset) for t in tracks]
    return RunTimeline(
        label=label,
        step_begin_ns=begin,
        step_end_ns=end,
        step_num=np.array([s["step"] for s in steps], np.int64),
        traced=traced,
        steady_window_ns=steady_window_ns,
        series=sample_series(gpu_samples, host_samples),
        tracks=tracks,
        clock=clock,
    )
