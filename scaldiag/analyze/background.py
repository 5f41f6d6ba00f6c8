"""Background input on a saturated host: tf.data work that takes cores from the compute.

When the model runs on the host (TensorFlow on the CPU), the input
pipeline's own threads (tf.data map/generator producers) and the op
executor share the same cores. The step never *waits* for input then (a
prefetch buffer is full), yet it is slower, because input work took core
time from compute. With every core busy (the host samples say so), the
input's thread-time per step B spread over the C cores, B / C, is the part
of the step the input costs; it is moved from ``compute`` to ``input``.

An estimate, and labelled as one: it assumes compute would use the freed
core time fully (true for the executor's parallel ops, less so for a serial
model), and it is applied only when the host was saturated (mean CPU over
all cores >= SATURATED_PCT) and only to host units: with GPUs, the input's
threads compete with kernel launches, not with the compute.
"""

from __future__ import annotations

from dataclasses import replace

from scaldiag.analyze.profile import CategoryTime, ProfileAnalysis, UnitAnalysis

# Mean CPU over all cores during the steady steps at or above which the cores are taken to be
# saturated: the training and its input then compete for them (psutil samples at 10 Hz).
SATURATED_PCT = 80.0


def attribute_background_input(profile: ProfileAnalysis, cores: int, core_pct_mean: float) -> ProfileAnalysis:
    if cores < 1 or core_pct_mean < SATURATED_PCT:
        return profile
    units, notes = [], list(profile.notes)
    for unit in profile.units:
        moved_ms = _moved_ms(unit, cores)
        if moved_ms <= 0:
            units.append(unit)
            continue
        units.append(_move(unit, moved_ms))
        notes.append(f"{unit.name}: the input pipeline's threads were busy {unit.input_pipeline_busy_ms:.2f} "
                     f"thread-ms per step on {cores} saturated cores ({core_pct_mean:.0f}% mean): "
                     f"{moved_ms:.2f} ms of the step counted as input, not compute (an estimate: "
                     "analyze/background.py)")
    return replace(profile, units=units, notes=notes)


def _moved_ms(unit: UnitAnalysis, cores: int) -> float:
    if unit.kind != "host":
        return 0.0
    return min(unit.input_pipeline_busy_ms / cores, unit.categories["compute"].exclusive_ms)


def _move(unit: UnitAnalysis, moved_ms: float) -> UnitAnalysis:
    step_ms = unit.step_time_ms.mean
    compute, inp = unit.categories["compute"], unit.categories["input"]

    def shifted(t: CategoryTime, delta_ms: float) -> CategoryTime:
        # The moved time is one mean per step: each share keeps its own step-to-step spread, in points.
        ms = t.exclusive_ms + delta_ms
        return CategoryTime(exclusive_ms=ms, exclusive_pct=100 * ms / step_ms, exclusive_pct_ci95=t.exclusive_pct_ci95,
                            busy_ms=t.busy_ms)

    categories = {**unit.categories, "compute": shifted(compute, -moved_ms), "input": shifted(inp, moved_ms)}
    return replace(unit, categories=categories)
