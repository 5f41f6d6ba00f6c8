"""Where the steps are: from step markers when the trace has them, else inferred.

Markers: host events carrying a ``step_num`` stat (JAX ``StepTraceAnnotation``,
TF ``tf.profiler.experimental.Trace(..., step_num=)``, our own capture), or TF's
``group_id`` grouping. Without markers (Keras 3 ``model.fit`` traces, where
xprof reports "No step time measured") each call of the compiled train
function on the host is one step: ``multi_step_on_iterator`` (Keras on TF),
``PjitFunction(train_step)`` (Keras on JAX).

A step spans from its start to the next step's start, so that step time is
the period the user's throughput sees, including the time between steps.
The last step ends at its own end, or later if the devices were still busy
then: a device busy without a break past the host's last step is working
through what the host queued.

A device with its own step markers (``Plane.step_marks``: Kineto's GPU-side
``ProfilerStep#N``) has its own steps (``device_steps``): where the host runs
ahead of the GPU, host step spans measure how fast work was queued, and the
device's markers say when each step's work ran.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from scaldiag.analyze import intervals as iv
from scaldiag.trace import Line, Plane, SparseStat, Trace

# Names Keras 3 gives its compiled train functions (keras/src/backend/*/trainer.py),
# and the generic names TF/JAX users give theirs.
_STEP_FUNCTION = re.compile(
    r"^(multi_step_on_iterator|one_step_on_iterator|one_step_on_data|multi_step_on_data"
    r"|one_step_on_data_distributed|train_function|train_step|distributed_train_step)$"
    r"|^PjitFunction\((train_step|multi_train_steps|one_train_step|\w*train\w*|\w*step\w*)\)$"
)


STEP_ANNOTATION = "ProfilerStep#N"
SPAN_PLANE = "span"  # step_evidence's plane of one event: the span of all of a rank's events


@dataclass(frozen=True)
class Steps:
    start_ns: np.ndarray
    end_ns: np.ndarray
    method: str  # "markers", "inferred" or "none"
    description: str  # how they were found, in words for the report
    marker: str | None = None  # the host event that delimits steps, when one does
    numbers: np.ndarray | None = None  # each step's step_num, when markers carry one

    @property
    def count(self) -> int:
        return len(self.start_ns)


def find_steps(trace: Trace, device_events: tuple[np.ndarray, np.ndarray] | None = None) -> Steps:
    """The trace's steps. ``device_events`` (starts, ends) let the last step run on."""
    host_events = list(_host_events(trace))
    for finder in (_from_step_num, _from_group_id, _from_step_function):
        found = finder(host_events)
        if found is not None:
            return _windows(*found[:5], device_events, *found[5:])  # step numbers, where found
    first = min(
        (int(line.start_ns.min()) for p in trace.planes for line in p.lines if len(line)), default=0
    )
    last = max(
        (int(line.end_ns.max()) for p in trace.planes for line in p.lines if len(line)), default=0
    )
    return Steps(
        np.array([first], np.int64),
        np.array([last], np.int64),
        "none",
        "no step markers and no repeated train-function call found: the whole trace is one window",
    )


def _host_events(trace: Trace):
    """(plane, line) for every non-empty host thread."""
    for plane in trace.host_planes:
        for line in plane.lines:
            if len(line):
                yield plane, line


def _from_step_num(host_events):
    by_name: dict[str, list[tuple[int, int, int, bool]]] = defaultdict(list)
    for plane, line in host_events:
        if "step_num" not in line.stats:  # most threads: no all-None column made and searched
            continue
        present, step_num = line.stat_rows("step_num")
        root_rows, root_values = line.stat_rows("_r")
        roots = np.zeros(len(present), bool)  # _r == 1 on the marker's own row
        at = np.searchsorted(root_rows, present)
        found = at < len(root_rows)
        found[found] = root_rows[at[found]] == present[found]
        roots[found] = root_values[at[found]] == 1
        for num, start, end, is_root, name_id in zip(
            step_num.tolist(),
            line.start_ns[present].tolist(),
            line.end_ns[present].tolist(),
            roots.tolist(),
            line.name_id[present].tolist(),
        ):
            by_name[plane.event_names[name_id]].append((int(num), start, end, is_root))
    if not by_name:
        return None
    # The marker name with the most root events (then the most events).
    name = max(by_name, key=lambda n: (sum(r for *_, r in by_name[n]), len(by_name[n])))
    first_by_step: dict[int, tuple[int, int]] = {}
    for num, start, end, _ in sorted(by_name[name], key=lambda m: m[1]):
        first_by_step.setdefault(num, (start, end))
    spans = sorted((start, end, num) for num, (start, end) in first_by_step.items())
    return (
        *_arrays((start, end) for start, end, _ in spans),
        "markers",
        f"step markers: host events '{name}' with a step_num stat",
        name,
        np.array([num for *_, num in spans], np.int64),
    )


def _from_group_id(host_events):
    spans: dict[int, list[int]] = {}
    for _, line in host_events:
        rows, groups = line.stat_rows("group_id")
        for i, group in zip(rows.tolist(), groups.tolist()):
            span = spans.setdefault(int(group), [int(line.start_ns[i]), int(line.end_ns[i])])
            span[0], span[1] = (
                min(span[0], int(line.start_ns[i])),
                max(span[1], int(line.end_ns[i])),
            )
    if len(spans) < 2:
        return None
    return (
        *_arrays(sorted(map(tuple, spans.values()))),
        "markers",
        "step groups: the profiler's group_id stat",
        None,
    )


def _from_step_function(host_events):
    by_name: dict[str, list[tuple[int, int]]] = defaultdict(list)
    step_names: dict[int, np.ndarray] = {}  # per plane: which event names are step functions
    for plane, line in host_events:
        if id(plane) not in step_names:
            step_names[id(plane)] = np.array(
                [bool(_STEP_FUNCTION.match(n)) for n in plane.event_names], bool
            )
        for i in np.flatnonzero(step_names[id(plane)][line.name_id]):
            by_name[plane.event_names[line.name_id[i]]].append(
                (int(line.start_ns[i]), int(line.end_ns[i]))
            )
    candidates = {n: _outermost(spans) for n, spans in by_name.items()}
    candidates = {n: s for n, s in candidates.items() if len(s) >= 2}
    if not candidates:
        return None
    name = max(candidates, key=lambda n: sum(e - s for s, e in candidates[n]))
    return (
        *_arrays(candidates[name]),
        "inferred",
        f"inferred: each host call of '{name}' is one step (the trace has no step markers)",
        name,
    )


def _outermost(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Drop calls nested inside an earlier call of the same name (wrappers)."""
    kept: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if not kept or start >= kept[-1][1]:
            kept.append((start, end))
    return kept


def _arrays(spans):
    spans = list(spans)
    return np.array([s for s, _ in spans], np.int64), np.array([e for _, e in spans], np.int64)


def _windows(starts, ends, method, how, marker, device_events, numbers=None) -> Steps:
    window_end = np.empty_like(starts)
    window_end[:-1] = starts[1:]
    window_end[-1] = ends[-1]
    return with_device_tail(Steps(starts, window_end, method, how, marker, numbers), device_events)


def with_device_tail(steps: Steps, device_events: tuple[np.ndarray, np.ndarray] | None) -> Steps:
    """``steps`` (their last ending where the host's last step did) with the last running on while
    ``device_events`` (starts, ends) keep the devices busy past it (``_busy_until``)."""
    if steps.method == "none" or device_events is None or not len(device_events[0]):
        return steps
    host_end = int(steps.end_ns[-1])
    last_end = max(host_end, _busy_until(*device_events, host_end))
    if last_end == host_end:
        return steps
    ends = steps.end_ns.copy()
    ends[-1] = last_end
    return replace(steps, end_ns=ends)


def step_evidence(planes: list[Plane]) -> list[Plane]:
    """``planes`` (one rank's) cut to what ``find_steps`` reads: the host events with a step_num or
    a group_id, the calls of train functions, and one event spanning all of the planes' events (the
    window of a trace without steps). A job's steps are found from every rank's evidence, while only
    one rank's events are held at a time (analyze/ranks.py)."""
    spans = [
        (int(line.start_ns.min()), int(line.end_ns.max()))
        for p in planes
        for line in p.lines
        if len(line)
    ]
    cut = []
    for plane in planes:
        if not plane.is_host:
            continue
        is_step_function = np.array(
            [bool(_STEP_FUNCTION.match(n)) for n in plane.event_names], bool
        )
        lines = []
        for line in plane.lines:
            keep = is_step_function[line.name_id] if len(line) else np.zeros(0, bool)
            for stat in ("step_num", "group_id"):
                if stat in line.stats:
                    keep[line.stat_rows(stat)[0]] = True
            if keep.any():
                lines.append(_rows(line, np.flatnonzero(keep)))
        cut.append(replace(plane, lines=lines))
    if spans:  # a plane of neither kind: only the window of a trace without steps reads it
        span = Line(
            "span",
            np.array([min(s for s, _ in spans)], np.int64),
            np.array([max(e for _, e in spans)], np.int64),
            np.zeros(1, np.int32),
            stats_typed=True,
        )
        cut.append(Plane(SPAN_PLANE, [""], [span]))
    return cut


def _rows(line: Line, rows: np.ndarray) -> Line:
    """The line with only ``rows`` (ascending), its stats with them."""
    stats = {}
    for name, column in line.stats.items():
        if isinstance(column, SparseStat):
            at = np.searchsorted(rows, column.rows)
            found = (at < len(rows)) & (rows[np.minimum(at, len(rows) - 1)] == column.rows)
            stats[name] = SparseStat(at[found].astype(np.int64), column.values[found])
        else:
            stats[name] = column[rows]
    return replace(
        line,
        start_ns=line.start_ns[rows],
        end_ns=line.end_ns[rows],
        name_id=line.name_id[rows],
        stats=stats,
    )


def _busy_until(dev_s: np.ndarray, dev_e: np.ndarray, host_end: int) -> int:
    """Where the device work of a last step ends: past ``host_end`` while the devices stay busy.

    The work the devices were running at ``host_end`` (launched in the step, or queued in an
    earlier one and still running) and all the work that follows it without a break: a device
    busy without a break is working through what was queued. The earlier rule kept only work
    that started on a device within the host's span, and lost the rest of the queue."""
    later = dev_e > host_end  # only work ending past the host's end can carry the window on
    if not later.any():
        return host_end
    runs_s, runs_e = iv.union(dev_s[later], dev_e[later])
    running = np.flatnonzero(runs_s < host_end)  # at most one: each run ends past host_end
    return int(runs_e[running[0]]) if len(running) else host_end


def device_steps(
    plane: Plane, device_s: np.ndarray, device_e: np.ndarray, host: Steps
) -> Steps | None:
    """A device's own steps, from its step markers; None where it has none to trust.

    Step N runs from its marker's start (the first GPU work of host step N) to step N+1's; the last
    ends where the device's work that began after its start ends. Used only where the markers name
    the host's steps, each once (more or fewer would leave a window holding the work of two steps or
    none), at least two, in order; ``device_s``/``device_e``: the device's work.
    """
    marks = plane.step_marks
    if marks is None or len(marks.start_ns) < 2:
        return None
    # by number, then start: each number's first
    order = np.lexsort((marks.start_ns, marks.step_num))
    nums, starts = marks.step_num[order], marks.start_ns[order]
    first = np.r_[True, nums[1:] != nums[:-1]]
    nums, starts = nums[first], starts[first]
    by_time = np.argsort(starts, kind="stable")
    nums, starts = nums[by_time], starts[by_time]
    if len(nums) < 2 or (np.diff(nums) != 1).any():
        return None  # steps out of order or one missing
    if host.numbers is None or not np.array_equal(np.sort(host.numbers), np.sort(nums)):
        return None
    last = int(starts[-1])
    after = device_s >= last
    own_end = int(marks.end_ns[marks.step_num == nums[-1]].max())
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    ends[-1] = max(own_end, int(device_e[after].max()) if after.any() else own_end)
    how = (
        f"step markers: the device's own GPU-side '{STEP_ANNOTATION}' annotations (where the host"
        " runs ahead, its step spans time how fast it queued work)"
    )
    return Steps(starts, ends, "markers", how, host.marker, nums)
