"""One profile, analysed: steps, and per execution unit its step-time breakdown.

An execution unit is a GPU (a device plane) or, for traces without devices
(TensorFlow on the CPU), the host itself, whose op execution is the compute.
Pure function of a :class:`Trace`; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from scaldiag.analyze import clock_skew, ranks, tracer_cost
from scaldiag.analyze import intervals as iv
from scaldiag.analyze.batch_memory import DeviceMemory
from scaldiag.analyze.breakdown import breakdown
from scaldiag.analyze.categories import CATEGORIES, DEVICE_CATEGORIES
from scaldiag.analyze.device import DeviceEvents, device_events
from scaldiag.analyze.hoststate import HOST_STATES, HostTimeline, host_states, host_states_during
from scaldiag.analyze.stats import Summary, ci95_half_width
from scaldiag.analyze.trace_steps import Steps, device_steps, find_steps, with_device_tail
from scaldiag.analyze.transfers import copies_per_step, per_step
from scaldiag.trace import Trace

NS_PER_MS = 1e6
INFLATION_UNKNOWN = (
    "profiler inflation unknown: a trace alone has no untraced steps to compare with, so host-side "
    "shares include the tracer's own cost (scaldiag profile measures and removes it)"
)


@dataclass(frozen=True)
class CategoryTime:
    """One category's time per step (means over steps)."""

    exclusive_ms: float
    exclusive_pct: float  # of step time
    exclusive_pct_ci95: float  # half-width of the 95% CI of exclusive_pct
    busy_ms: float
    # The part of exclusive_pct set from a measurement outside the trace, which the trace does not
    # show as this category (the input's measured cost, analyze/input_cost.py); rules rank on what
    # the trace shows where the measured shares do not order the findings (rules/__init__.py).
    beyond_trace_pct: float = 0.0


@dataclass(frozen=True)
class Transfers:
    """Memory copies per step, split by the host memory kind."""

    bytes_per_step: float
    count_per_step: float
    bytes_by_host_kind: dict[str, float]  # "pinned", "pageable", "unknown"
    large_bytes_per_step: float = 0.0  # in copies of more than 32 MiB each (analyze/transfers.py)
    largest_bytes: int = 0  # the largest single copy


@dataclass(frozen=True)
class HostActivity:
    """A host event present while the unit was idle: thread-milliseconds per step."""

    name: str
    state: str  # its host state: input, host_overhead, compute...
    ms_per_step: float


@dataclass(frozen=True)
class UnitAnalysis:
    name: str
    kind: str  # "gpu" or "host"
    steps: int
    step_time_ms: Summary
    busy_pct: float  # device (or, for the host, op execution) busy share of step time
    categories: dict[str, CategoryTime]
    h2d: Transfers | None = None  # None: the unit has no device memory
    d2h: Transfers | None = None
    collective_count_per_step: float = 0.0
    input_pipeline_busy_ms: float = 0.0  # tf.data producers running ahead (background)
    # A host unit's compute pieces per step (the innermost host events in the compute state: an op,
    # or an op's own part beside its children): with the compute time, how long an op runs, which
    # says whether a larger batch grows it (analyze/forecast.py). 0: not counted (device units).
    compute_pieces_per_step: float = 0.0
    # What the host threads were in while the unit did no work, top first.
    host_activity_while_idle: list[HostActivity] = field(default_factory=list)


@dataclass(frozen=True)
class ProfileAnalysis:
    run: str
    sources: list[str]
    hosts: list[str]
    event_count: int
    steps_method: str
    steps_description: str
    units: list[UnitAnalysis]
    framework: str = "unknown"  # "tensorflow", "jax", "pytorch" or "unknown": what the trace shows
    notes: list[str] = field(default_factory=list)
    # Traced / untraced step time, when the run's untraced steps are known (analyze/inflation.py);
    # None for a trace alone, whose host-side shares then include the tracer's own cost.
    profiler_inflation: float | None = None
    # tf.data iterator stages seen in the trace ("Prefetch", "ParallelMapV2", "Cache"...): what the
    # input pipeline already does, so that advice does not ask for what is there.
    input_stages: list[str] = field(default_factory=list)
    # This host's cost of fresh memory pages, measured where the run was recorded
    # (collect/host_costs.py); None for a trace alone (SD102's forecast then takes a development
    # machine's).
    fresh_page_ns_per_byte: float | None = None
    # The most the tracer could have added to a step of a trace alone (analyze/tracer_cost.py), in
    # ms.
    tracer_ms_per_step: float | None = None
    # The fullest device's memory over the run and the per-replica batch, for a batch forecast's
    # "does it fit" (analyze/batch_memory.py); None for a trace alone.
    device_memory: DeviceMemory | None = None
    per_replica_batch: int | None = None


@dataclass(frozen=True)
class RankReduction:
    """One rank's trace reduced to what the job's analysis keeps of it (``reduce_rank``)."""

    units: list[UnitAnalysis]
    own_steps: list[
        tuple[str, float] | None
    ]  # per device: (how, mean step ns) of its own steps; None: the host's
    steps_method: str  # the steps it was measured in (the job's, for a job's rank)
    steps_description: str
    host_step_ms: float  # their mean span (the last running on while the rank's devices are busy)
    host_events_per_step: (
        float  # host events that start inside the steps, per step (the tracer's cost)
    )
    framework: str
    input_stages: list[str]
    has_devices: bool
    event_count: int


def analyze_trace(trace: Trace, run: str = "") -> ProfileAnalysis:
    """The trace's analysis; a job's ranks (planes of several hosts) one at a time
    (analyze/ranks.py)."""
    found = ranks.split(trace)
    if len(found) == 1:
        return assemble(
            run, trace.sources, trace.hostnames, trace.event_count, [reduce_rank(trace)]
        )
    clock = ranks.job_clock([ranks.evidence(rank, label) for label, rank in found])
    reductions = [
        reduce_rank(rank, clock.steps, clock.shift_ns(i)) for i, (_, rank) in enumerate(found)
    ]
    return assemble(run, trace.sources, trace.hostnames, trace.event_count, reductions, clock)


def reduce_rank(trace: Trace, steps: Steps | None = None, shift_ns: int = 0) -> RankReduction:
    """One rank's units: each device against the rank's own host threads.

    ``steps``: the job's (ranks.job_clock), each rank's last step running on while its own devices
    are busy; None: found from this trace. ``shift_ns``: taken off every time, onto the job's clock.
    """
    if shift_ns:
        trace = replace(trace, planes=[clock_skew.shifted(p, shift_ns) for p in trace.planes])
    events = [device_events(plane) for plane in trace.device_planes]
    devices = [(plane.label, found) for plane, found in zip(trace.device_planes, events)]
    all_device = (
        (
            np.concatenate([d.start_ns for _, d in devices]),
            np.concatenate([d.end_ns for _, d in devices]),
        )
        if devices
        else None
    )
    steps = find_steps(trace, all_device) if steps is None else with_device_tail(steps, all_device)
    # Each device's own steps where it has step markers of its own (analyze/trace_steps.py,
    # device_steps).
    unit_steps = [
        device_steps(plane, events.start_ns, events.end_ns, steps) or steps
        for plane, (_, events) in zip(trace.device_planes, devices)
    ]
    units = (
        _device_units(trace, devices, unit_steps, steps) if devices else _host_units(trace, steps)
    )
    own = [
        (
            (unit.description, float(np.mean(unit.end_ns - unit.start_ns)))
            if unit is not steps
            else None
        )
        for unit in unit_steps
    ]
    return RankReduction(
        units,
        own,
        steps.method,
        steps.description,
        float(np.mean(steps.end_ns - steps.start_ns)) / NS_PER_MS,
        tracer_cost.host_events_per_step(trace, steps),
        detect_framework(trace),
        input_stages(trace),
        bool(devices),
        trace.event_count,
    )


def _device_units(
    trace: Trace, devices: list, unit_steps: list[Steps], steps: Steps
) -> list[UnitAnalysis]:
    """Each device's unit: its own categories, the host's input and launch work beside it."""
    # The devices' idle gaps do not depend on the host, so the host threads are measured
    # against all of them as each is done, without keeping every thread's segments.
    device_sets = [events.sets() for _, events in devices]
    # device steps are the host's, counted once each
    host, activity = host_states_during(
        trace.host_planes,
        False,
        [_gaps(sets, DEVICE_CATEGORIES, unit) for sets, unit in zip(device_sets, unit_steps)],
        steps.count,
    )
    # With GPUs, host ops are the host side of launches: all of it is host work.
    host_sets = {
        "input": host.get("input"),
        "host_overhead": iv.merge(
            *[host.get(c) for c in ("host_overhead", "compute", "layout", "collective")]
        ),
    }
    return [
        _unit(
            name,
            "gpu",
            {**sets, **host_sets},
            DEVICE_CATEGORIES,
            unit,
            host,
            activity=found,
            **_device_extras(events, unit),
        )
        for (name, events), sets, found, unit in zip(devices, device_sets, activity, unit_steps)
    ]


def _host_units(trace: Trace, steps: Steps) -> list[UnitAnalysis]:
    """The host's one unit where the trace has no device: its ops are the compute."""
    host = host_states(trace.host_planes, ops_are_compute=True)
    name = trace.host_planes[0].label if trace.host_planes else "/host:CPU"
    sets = {c: host.get(c) for c in ("compute", "layout", "collective", "input", "host_overhead")}
    return [
        _unit(
            name,
            "host",
            sets,
            ("compute", "layout", "collective"),
            steps,
            host,
            compute_pieces_per_step=_compute_pieces_per_step(host, steps),
        )
    ]


def assemble(
    run: str,
    sources: list[str],
    hosts: list[str],
    event_count: int,
    reductions: list[RankReduction],
    clock: ranks.JobClock | None = None,
) -> ProfileAnalysis:
    """The job's analysis from its ranks' reductions (one, for a trace of one process)."""
    first = reductions[0]
    notes = list(clock.notes) if clock is not None else []
    units = [u for r in reductions for u in r.units]
    own = [o for r in reductions for o in r.own_steps]
    method = first.steps_method
    description = _device_steps_note(first.steps_description, own, first.host_step_ms, notes)
    if not any(r.has_devices for r in reductions):
        notes.append(
            "no device planes in the trace: the host ran the model (a CPU run); "
            "its op execution is reported as compute, and there are no host-to-device copies"
        )
    if method == "none":
        notes.append("steps could not be found: figures are for the whole trace as one window")
    notes.append(INFLATION_UNKNOWN)
    framework = next(
        (r.framework for r in reductions if r.framework in ("jax", "pytorch")), None
    ) or ("tensorflow" if any(r.framework == "tensorflow" for r in reductions) else first.framework)
    # Each rank's tracer runs in the rank's own process: the busiest rank's cost bounds a step's.
    tracer_ms = tracer_cost.tracer_ms_per_step(
        framework, max(r.host_events_per_step for r in reductions)
    )
    return ProfileAnalysis(
        run=run,
        sources=sources,
        hosts=hosts,
        event_count=event_count,
        steps_method=method,
        steps_description=description,
        units=units,
        framework=framework,
        notes=notes,
        input_stages=sorted({s for r in reductions for s in r.input_stages}),
        tracer_ms_per_step=tracer_ms,
    )


def _device_steps_note(
    description: str, own: list[tuple[str, float] | None], host_ms: float, notes: list[str]
) -> str:
    """The steps' description; a note where devices have steps of their own, with both step
    times."""
    mine = [o for o in own if o is not None]
    if not mine:
        return description
    device_ms = float(np.mean([mean_ns for _, mean_ns in mine])) / NS_PER_MS
    notes.append(
        f"steps on the device: {len(mine)} of {len(own)} devices have their own step markers, and"
        f" their step times are the device's ({device_ms:.3f} ms a step on average) where the"
        f" host's step spans average {host_ms:.3f} ms; host-side shares are measured in each"
        " device's steps"
    )
    return mine[0][0] if len(mine) == len(own) else f"{description}; {mine[0][0]}"


def input_stages(trace: Trace) -> list[str]:
    """The stages of tf.data iterators named in the host planes
    (``Iterator::Root::Prefetch::...``)."""
    stages = set()
    for plane in trace.host_planes:
        for name in plane.event_names:  # distinct names: cheap whatever the event count
            if name.startswith("Iterator::"):
                stages.update(part.split("[")[0] for part in name.split("::")[1:])
    return sorted(stages - {"Root"})


def detect_framework(trace: Trace) -> str:
    """JAX writes its version into /host:metadata; TF names its host threads tf_*; Kineto traces are
    PyTorch's."""
    for plane in trace.planes:
        if "jax_version" in plane.stats:
            return "jax"
        if "kineto_schema_version" in plane.stats:  # set by readers/kineto/__init__.py
            return "pytorch"
    for plane in trace.host_planes:
        if any(line.name.startswith(("tf_Compute", "tf_data_", "tf_numa")) for line in plane.lines):
            return "tensorflow"
    return "unknown"


def _device_extras(events: DeviceEvents, steps: Steps) -> dict:
    collective = events.start_ns[events.of("collective")]
    step = np.searchsorted(steps.start_ns, collective, side="right") - 1
    inside = (step >= 0) & (collective < steps.end_ns[np.maximum(step, 0)])
    return {
        "h2d": _transfers(events, "h2d", steps),
        "d2h": _transfers(events, "d2h", steps),
        "collective_count_per_step": float(inside.sum()) / steps.count,
    }


def _compute_pieces_per_step(host: HostTimeline, steps: Steps) -> float:
    """How many compute pieces (host_states' innermost segments in the compute state) begin inside
    the steps, per step."""
    begin = host.seg_start[host.seg_state == HOST_STATES.index("compute")]
    step = np.searchsorted(steps.start_ns, begin, side="right") - 1
    inside = (step >= 0) & (begin < steps.end_ns[np.maximum(step, 0)])
    return float(inside.sum()) / max(steps.count, 1)


def _transfers(events: DeviceEvents, direction: str, steps: Steps) -> Transfers:
    rows = events.of(direction)
    totals = copies_per_step(
        events.start_ns[rows],
        list(events.memcpy_details[rows]),
        direction,
        steps.start_ns,
        steps.end_ns,
    )
    return Transfers(
        bytes_per_step=per_step(totals.bytes_per_step),
        count_per_step=per_step(totals.count_per_step),
        bytes_by_host_kind={k: per_step(v) for k, v in sorted(totals.bytes_by_kind.items())},
        large_bytes_per_step=per_step(totals.large_bytes_per_step),
        largest_bytes=totals.largest_bytes,
    )


def _label(event: str, steps: Steps) -> str:
    """Name the step marker's own time for what it is: code that no finer event covers."""
    if event == steps.marker:
        return f"{event} (step itself, outside any traced call: Python, framework loop)"
    return event


def _gaps(sets, busy_categories, steps: Steps) -> iv.IntervalSet:
    """Where the unit does no work within the steps."""
    return iv.subtract(
        iv.union(steps.start_ns, steps.end_ns),
        iv.merge(*[sets[c] for c in busy_categories if c in sets]),
    )


def _unit(
    name, kind, sets, busy_categories, steps: Steps, host: HostTimeline, activity=None, **extra
) -> UnitAnalysis:
    """``busy_categories``: those that count as the unit doing work; ``activity``: what the host
    did in its gaps, when already measured (else measured here)."""
    result = breakdown(sets, steps, busy_categories)
    step_ns = np.maximum(result.step_ns, 1)
    categories = {}
    for c, category in enumerate(CATEGORIES):
        share = 100.0 * result.exclusive_ns[:, c] / step_ns
        categories[category] = CategoryTime(
            exclusive_ms=float(result.exclusive_ns[:, c].mean()) / NS_PER_MS,
            exclusive_pct=float(share.mean()),
            exclusive_pct_ci95=ci95_half_width(share),
            busy_ms=float(result.busy_ns[:, c].mean()) / NS_PER_MS,
        )
    if activity is None:
        activity = host.activity_during(_gaps(sets, busy_categories, steps), steps.count)
    activity = [
        HostActivity(_label(name, steps), state, ns / NS_PER_MS) for name, state, ns in activity
    ]
    background = iv.measure_in_windows(host.get("background"), steps.start_ns, steps.end_ns)
    return UnitAnalysis(
        name=name,
        kind=kind,
        steps=steps.count,
        step_time_ms=Summary.of(result.step_ns / NS_PER_MS),
        busy_pct=float((100.0 * result.device_busy_ns / step_ns).mean()),
        categories=categories,
        host_activity_while_idle=activity,
        input_pipeline_busy_ms=float(background.mean()) / NS_PER_MS,
        **extra,
    )
