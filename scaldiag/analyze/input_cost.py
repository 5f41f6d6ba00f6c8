"""What the input costs each step, measured: the steady step against the input-free step.

After training, the callback times a clone of the model on one cached batch
(``collect/frameworks/input_free.py``). The steady step minus that step is the
input's whole cost: the waits a trace shows as input, and what it cannot show,
input work on other threads slowing the computation (cores, caches, the GIL).
Where the measured cost exceeds the input time in the trace, the breakdown's
input share is raised to it and the other categories give up the difference in
proportion (they are where the interference landed; the trace cannot say in
which). Limits: the difference also holds per-step callbacks other than
scaldiag's (the clone runs none) and anything else ``fit`` does per batch
beyond the model; a cost inside the noise is reported and not counted.

The raised input keeps, as ``beyond_trace_pct``, the part the trace does not
show as input. On a host-bound step (bench/zoo/host_launch.py on an H200,
run 6) the input and the dispatch run on the same Python thread, and the
measured cost moved with the step from round to round while the clone's step
did not: 0.50, 0.41, 0.78 ms of 1.41, 1.18, 1.56 ms steps against clones of
0.90, 0.77, 0.78 ms, each round's own noise 0.08-0.12 ms. The measurement then
does not separate input from host overhead, and the trace decides the order
(rules/__init__.py ``rank``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scaldiag.analyze.profile import CategoryTime, ProfileAnalysis, UnitAnalysis

# Below this fraction of the step a difference is not counted, whatever the intervals say: the
# clone's steps are not the user's steps (no callbacks, a cached batch), so small gaps mean little.
NOISE_FRACTION = 0.05


@dataclass(frozen=True)
class InputCost:
    step_ms: float  # the steady, untraced step (one batch)
    input_free_ms: float  # the clone's step on one cached batch
    input_free_min_ms: float  # its timed epochs' fastest and slowest
    input_free_max_ms: float
    cost_ms: float  # step - input-free, at least 0
    noise_ms: float  # what a difference must exceed to count
    source: str

    @property
    def share_pct(self) -> float:
        return 100 * self.cost_ms / self.step_ms if self.step_ms > 0 else 0.0

    @property
    def significant(self) -> bool:
        return self.cost_ms > self.noise_ms


def input_cost(step_ms: float, step_ci95_ms: float, measured: dict | None) -> InputCost | None:
    """The input's cost per step from the steady step and the callback's ``input_free`` record."""
    if not measured or not step_ms > 0:
        return None
    try:
        free = float(measured["step_ms"])
        low, high = (
            float(measured.get("step_ms_min", free)),
            float(measured.get("step_ms_max", free)),
        )
    except (KeyError, TypeError, ValueError):
        return None
    if not free > 0:
        return None
    ci = step_ci95_ms if step_ci95_ms == step_ci95_ms else 0.0  # NaN with too few steps
    noise = max(ci + (high - low) / 2, NOISE_FRACTION * step_ms)
    return InputCost(
        step_ms=step_ms,
        input_free_ms=free,
        input_free_min_ms=low,
        input_free_max_ms=high,
        cost_ms=max(0.0, step_ms - free),
        noise_ms=noise,
        source=str(measured.get("source", "")),
    )


def describe(cost: InputCost) -> str:
    """The measurement in one sentence, as reports print it."""
    free = (
        f"the step without its input takes {cost.input_free_ms:.1f} ms "
        f"({cost.input_free_min_ms:.1f}-{cost.input_free_max_ms:.1f}; "
        f"{cost.source or 'a clone of the model on one cached batch'})"
    )
    if cost.significant:
        return (
            f"input cost: {cost.cost_ms:.1f} ms of the {cost.step_ms:.1f} ms step"
            f" ({cost.share_pct:.0f}%): {free}; counted as input in the breakdown"
        )
    return (
        f"input cost: none beyond the noise ({cost.cost_ms:.1f} ms, under {cost.noise_ms:.1f} ms):"
        f" {free}, the steady step {cost.step_ms:.1f} ms"
    )


def with_input_cost(
    profile: ProfileAnalysis, cost: InputCost, batches_per_step: int = 1
) -> ProfileAnalysis:
    """``profile`` with each unit's input share raised to the measured cost where the trace shows
    less.

    ``batches_per_step``: batches in one traced step (``steps_per_execution``).
    """
    if not cost.significant:
        return profile
    units, raised = [], False
    for unit in profile.units:
        new = _unit(unit, cost, batches_per_step)
        raised |= new is not unit
        units.append(new)
    if not raised:
        return profile
    note = (
        "input measured: the step without its input (a clone on one cached batch) takes"
        f" {cost.input_free_ms:.1f} ms of the {cost.step_ms:.1f} ms step: the input costs"
        f" {cost.cost_ms:.1f} ms ({cost.share_pct:.0f}%), more than the trace's waits for it; input"
        " share raised to it, the other categories reduced in proportion"
    )
    return replace(profile, units=units, notes=[*profile.notes, note])


def _unit(unit: UnitAnalysis, cost: InputCost, batches_per_step: int) -> UnitAnalysis:
    step_ms = unit.step_time_ms.mean
    target_ms = min(cost.cost_ms * batches_per_step, step_ms)
    current = unit.categories.get("input")
    current_ms = current.exclusive_ms if current else 0.0
    rest_ms = step_ms - current_ms
    if not step_ms > 0 or target_ms <= current_ms or rest_ms <= 0:
        return unit
    scale = (step_ms - target_ms) / rest_ms
    target_pct = 100 * target_ms / step_ms
    # Shares are means of each step's share (profile._unit), not ms over the mean step: they are
    # scaled in their own terms, so that they add up to 100% (scaled by the ms, a CI run's read
    # 99.992%, and its lost speedups no longer added up).
    rest_pct = sum(t.exclusive_pct for name, t in unit.categories.items() if name != "input")
    pct_scale = (100 - target_pct) / rest_pct if rest_pct > 0 else scale
    noise_pct = 100 * cost.noise_ms * batches_per_step / step_ms
    categories = {}
    for name, t in unit.categories.items():
        if name == "input":
            continue
        categories[name] = CategoryTime(
            exclusive_ms=t.exclusive_ms * scale,
            exclusive_pct=t.exclusive_pct * pct_scale,
            exclusive_pct_ci95=t.exclusive_pct_ci95 * pct_scale,
            busy_ms=t.busy_ms,
        )
    # What the trace itself shows as input stays; the rest is the measurement's, which the trace
    # shows as other work (rules rank on the trace where the measured shares overlap:
    # rules/__init__.py).
    categories["input"] = CategoryTime(
        exclusive_ms=target_ms,
        exclusive_pct=target_pct,
        exclusive_pct_ci95=noise_pct,
        busy_ms=max(current.busy_ms if current else 0.0, target_ms),
        beyond_trace_pct=max(0.0, target_pct - (current.exclusive_pct if current else 0.0)),
    )
    # Keep the categories in the unit's order (input where it was, or last).
    order = list(unit.categories) + ([] if "input" in unit.categories else ["input"])
    return replace(unit, categories={name: categories[name] for name in order})
