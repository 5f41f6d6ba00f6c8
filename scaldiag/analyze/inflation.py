"""The observer effect, taken out: a trace's breakdown scaled to the untraced step.

Tracing slows the host (every traced op and annotation costs it), while the
device runs its kernels and copies at the same speed. So the corrected
breakdown keeps each device-side category's time per step as the trace
measured it and scales the host-side categories (input, host overhead, idle,
other: the time the device waits on the host) so that the step adds up to
the steady, untraced step time:

    r = (t_untraced - D) / (t_traced - D),   D = device-side exclusive time per step

When the untraced step is shorter than the device time alone (the trace is
not of steady steps), every category is scaled by t_untraced / t_traced
instead, and a note says so.

A host-only trace (TensorFlow or PyTorch on the CPU) has no untraced clock:
its "device" side is the host's own op execution, which the tracer slows as
it slows the time between ops (each op's record is taken at its entry and
exit, part inside the op's span, part outside). Every category of a host unit
is then scaled by the one factor t_untraced / t_traced: the shares stay as
traced. Keeping the ops as traced instead put the whole inflation between
them, and the result jumped with the smallest change of the op time: the CPU
torch_launch_bound run of bench/results/accuracy (round 1, inflation 1.34x,
ops 26.5 ms of a 37.1 ms traced step, untraced step 27.8 ms) read host
overhead 4.5%; the same trace read with 29.7 ms of ops (before the host
nesting fix of analyze/hoststate.py) fell into the branch above and read
19.8%. The traced shares, 71.4% ops and 28.2% between them, are what the
trace shows; docs/rules.md (Noise) says why this is not a finding's proof.
"""

from __future__ import annotations

from dataclasses import replace

from scaldiag.analyze.profile import (
    INFLATION_UNKNOWN,
    CategoryTime,
    HostActivity,
    ProfileAnalysis,
    UnitAnalysis,
)

HOST_SIDE = ("input", "host_overhead", "idle", "other")


def correct(profile: ProfileAnalysis, untraced_step_ms: float, inflation: float) -> ProfileAnalysis:
    """``profile`` with every unit's breakdown scaled to ``untraced_step_ms`` per step."""
    units, notes = [], [n for n in profile.notes if n != INFLATION_UNKNOWN]
    for unit in profile.units:
        corrected, note = _unit(unit, untraced_step_ms)
        units.append(corrected)
        notes += [note] if note else []
    notes.append(
        f"profiler inflation {inflation:.2f}x (traced / untraced step time); shares corrected: "
        "device-side times as traced, host-side times scaled to the untraced step"
    )
    return replace(profile, units=units, notes=notes, profiler_inflation=inflation)


def not_measurable(profile: ProfileAnalysis, why: str) -> ProfileAnalysis:
    """``profile`` as traced, saying why no correction was made."""
    notes = [n for n in profile.notes if n != INFLATION_UNKNOWN] + [why]
    return replace(profile, notes=notes, profiler_inflation=None)


def _unit(unit: UnitAnalysis, untraced_ms: float) -> tuple[UnitAnalysis, str | None]:
    traced_ms = unit.step_time_ms.mean
    if not traced_ms > 0:
        return unit, None
    device_ms = sum(t.exclusive_ms for c, t in unit.categories.items() if c not in HOST_SIDE)
    note = None
    if unit.kind == "host":  # no untraced clock: the tracer slows the ops and the gaps alike
        host_scale = device_scale = untraced_ms / traced_ms
    elif untraced_ms >= device_ms and traced_ms > device_ms:
        host_scale, device_scale = (untraced_ms - device_ms) / (traced_ms - device_ms), 1.0
    else:
        host_scale = device_scale = untraced_ms / traced_ms
        note = (
            f"{unit.name}: the untraced step ({untraced_ms:.3f} ms) is shorter than the traced"
            f" device time ({device_ms:.3f} ms): every category scaled by {device_scale:.2f}"
        )
    categories = {
        c: _scaled(t, host_scale if c in HOST_SIDE else device_scale, traced_ms, untraced_ms)
        for c, t in unit.categories.items()
    }
    busy_ms = unit.busy_pct / 100 * traced_ms * device_scale
    summary = unit.step_time_ms
    ratio = untraced_ms / traced_ms
    step = replace(
        summary,
        mean=untraced_ms,
        p50=summary.p50 * ratio,
        p90=summary.p90 * ratio,
        stdev=summary.stdev * ratio,
        ci95=summary.ci95 * ratio,
    )
    activity = [
        HostActivity(h.name, h.state, h.ms_per_step * host_scale)
        for h in unit.host_activity_while_idle
    ]
    return (
        replace(
            unit,
            categories=categories,
            step_time_ms=step,
            busy_pct=100 * busy_ms / untraced_ms,
            host_activity_while_idle=activity,
            input_pipeline_busy_ms=unit.input_pipeline_busy_ms * host_scale,
        ),
        note,
    )


def _scaled(t: CategoryTime, scale: float, traced_ms: float, untraced_ms: float) -> CategoryTime:
    exclusive_ms = t.exclusive_ms * scale
    pct = 100 * exclusive_ms / untraced_ms
    ci = (
        t.exclusive_pct_ci95 * (pct / t.exclusive_pct)
        if t.exclusive_pct > 0
        else t.exclusive_pct_ci95
    )
    return CategoryTime(
        exclusive_ms=exclusive_ms,
        exclusive_pct=pct,
        exclusive_pct_ci95=ci,
        busy_ms=t.busy_ms * scale,
    )
