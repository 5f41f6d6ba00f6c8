"""What every view of a report says alike (the terminal, the HTML): the framework in its users'
words, what a finding's number bounds, the commands that open a trace. Words only: no layout, no
markup."""

from __future__ import annotations

import re

from scaldiag.render import ranges

TENSORBOARD_PIP = "pip install tensorboard tensorboard-plugin-profile"


def framework_words(fw: dict) -> str:
    """The framework as its users name it, in every view (the HTML may use it too): "Keras 3.15.1 on
    JAX 0.11.2", "PyTorch 2.11.0 (CUDA 13.0)"."""
    name, backend, versions = fw.get("name", "?"), fw.get("backend", "?"), fw.get("versions", {})
    label = {"keras": "Keras", "pytorch": "PyTorch", "tensorflow": "TensorFlow", "jax": "JAX"}

    def named(key: str) -> str:
        # The version under the package's name: tensorflow-cpu and tensorflow are one framework.
        version = next(
            (v for k, v in versions.items() if k == key or k.startswith(f"{key}-")), None
        )
        return f"{label.get(key, key)} {version}" if version else label.get(key, key)

    if name == "pytorch":
        cuda = f" (CUDA {versions['cuda']})" if versions.get("cuda") else " (CPU)"
        return named("torch").replace("torch", "PyTorch") + cuda
    return named(name) if name == backend else f"{named(name)} on {named(backend)}"


# The arithmetic of a speed-up won back in a sweep, "(S + lost) / S = G", and the device count it
# names (rules/base.py recovery_speedup).
_RECOVERY = re.compile(r"\([\d.]+ \+ [\d.]+\) / [\d.]+ = [\d.]+x")
_AT_DEVICES = re.compile(r" at (\d+) devices$")


def speedup_words(s, ceiling=None) -> tuple[str, str]:
    """What a finding's number bounds, in words, and the number with its range (render/ranges.py).
    ``ceiling``: the same finding's ceiling, which a forecast is said against (one headline
    speed-up a finding, the other said as a part of it or past it)."""
    at = _AT_DEVICES.search(s.arithmetic)
    if s.kind == "forecast":
        # A forecast's arithmetic opens with the change it forecasts ("per-replica batch x4: ...").
        change = s.arithmetic.split(":", 1)[0] if ":" in s.arithmetic else ""
        of = f" of {change}" if 0 < len(change) <= 50 else ""
        tail = [_against(s, ceiling)] if ceiling is not None and ceiling.kind == "ceiling" else []
        tail += [s.fits]
        return f"forecast{of}:", ranges.speedup_of(s) + "".join(f"; {t}" for t in tail if t)
    what = (
        (f"the speedup at {at[1]} devices" if at else "the sweep's speedup")
        if _RECOVERY.search(s.arithmetic)
        else "this step's speed-up"
    )
    return f"{what} if fixed:", ranges.speedup_of(s)  # "at most": a ceiling


def _against(forecast, ceiling) -> str:
    """A forecast beside its finding's ceiling: the ceiling removes the whole cause, a fix wins a
    part of it, or (a larger batch) more, as it also spreads the step's other per-step costs; ""
    where the two are one number."""
    if f"{forecast.value:.2f}" == f"{ceiling.value:.2f}":
        return ""
    if forecast.value < ceiling.value:
        return f"within the {ceiling.value:.2f}x ceiling"
    return f"above the {ceiling.value:.2f}x ceiling: it also spreads per-step costs"


NO_STEADY_ROUNDS = (
    "no round had steady steps: each failed, or each step was warm-up, profiler window or input"
    " prefetch, which a longer run leaves behind"
)


def tried_words(t: dict) -> str:
    """A `scaldiag try` result (try.json's fields) in one line, as `try` prints it and `report`
    repeats it: what was set, the measured speed-up with its range, the forecast and ceiling."""
    sets = ", ".join(
        f"per-replica batch x{v}" if k == "per_replica_batch_factor" else f"{k}={v}"
        for k, v in (t.get("sets") or {}).items()
    )
    s = t.get("speedup")
    measured = (
        f"measured {s['median']:.2f}x (range {s['low']:.2f}-{s['high']:.2f}, {s['pairs']} pairs)"
        if s
        else f"not measured ({t.get('not_applied') or NO_STEADY_ROUNDS})"
    )
    if s and s.get("resolved") is False:  # try's range inside the noise (analyze/try_stats.py)
        measured = f"not resolvable at this load ({measured[0].lower()}{measured[1:]})"
    sets = sets or "its fix"
    fc, ce = (f"{t[k]:.2f}x" if t.get(k) else "none" for k in ("forecast", "ceiling"))
    forecast = "no forecast for this fix" if t.get("no_forecast") else f"forecast {fc}"
    return f"{t['finding']}: {sets}: {measured}; {forecast}, ceiling {ce}"


_ENDED = {
    "time limit": lambda w: f"the window's time limit ({_seconds(w.limit_s)}) ended it",
    "share of the run": lambda w: (
        f"the window's share of the run (at most {w.share:.0%} of its wall so far) ended it"
    ),
    "training ended": lambda w: "the training ended (or the window was closed) first",
}


def trace_window_words(w) -> str | None:
    """The trace window where it traced fewer steps than planned (analyze/trace_window.py): "traced
    1 step of a planned 5: the window's time limit (30 s) ended it; the window took 12.6 s (40% of
    the run)"; None where it ran its plan (the figures had the steps they were planned on)."""
    if w is None:
        return None
    if not w.short:
        return _past_bound(w) if w.past_bound else None
    steps = f"{w.traced_steps} step{'s' if w.traced_steps != 1 else ''}"
    why = _ENDED.get(w.ended_by or "")
    text = f"traced {steps} of a planned {w.planned_steps}" + (f": {why(w)}" if why else "")
    if w.seconds is not None:
        share = f" ({w.seconds / w.wall_s:.0%} of the run)" if w.wall_s else ""
        digits = 1 if w.seconds >= 10 else 2
        text += f"; the window took {w.seconds:.{digits}f} s{share}, the profiler's start and stop"
        text += " included"
    if w.traced_steps == 1 and w.ended_by in ("time limit", "share of the run"):
        text += " (a window ends only at a step's end, and its first step runs whole)"
    return text


def _seconds(s: float | None) -> str:
    if s is None:
        return "?"
    return f"{s:g} s"


def capture_cost_words(c) -> str:
    """What the capture measured of its own cost in the run (analyze/capture_cost.py), and what it
    did not."""
    parts = []
    if c.sampler_cpu_s is not None:
        pct = f" ({c.sampler_core_pct:.2f}% of one core over the run)" if c.sampler_core_pct else ""
        parts.append(f"the samplers used {c.sampler_cpu_s:.2f} s of CPU in scaldiag's process{pct}")
    if c.window_s is not None:
        share = f" ({100 * c.window_s / c.wall_s:.1f}% of the run)" if c.wall_s else ""
        parts.append(f"the trace window took {c.window_s:.2f} s{share}")
    measured = "; ".join(parts) if parts else "nothing"
    return (
        f"capture's cost measured in this run: {measured}; not measured in a run: the step hook"
        " outside the window (0.6-0.9 us a step, measured apart) and the samplers' share of the"
        " cores taken from training"
    )


def _past_bound(w) -> str:
    """A window that ran its plan but whose steps took longer than its bounds: a step longer than
    the bound runs whole. "the trace window's 1 step took 12.6 s (40% of the run), past its bounds
    (30 s, 10% of the run's wall so far): a window ends only at a step's end"."""
    steps = f"{w.traced_steps} step{'s' if w.traced_steps != 1 else ''}"
    share = f" ({w.traced_s / w.wall_s:.0%} of the run)" if w.wall_s else ""
    return (
        f"the trace window's {steps} took {w.traced_s:.1f} s{share}, past its bounds"
        f" ({_seconds(w.limit_s)}, {w.share:.0%} of the run's wall so far): a window ends only at"
        " a step's end, and a step runs whole"
    )
