"""``scaldiag try``'s statistics: each pair's speed-up, the pairs left out, the range, whether it
is resolved.

A pair is round i's baseline and round i's fixed run. Its ratio is the speed-up in samples/s: the
baseline's mean steady step per sample over the fixed one's (the steps' ratio where either side
does not know its samples a step). A pair where either side failed (a non-zero exit, a signal, no
steady step) is left out, and named. The range is the 2.5th-97.5th percentile of the kept ratios;
a result is *resolved* when at least ``MIN_PAIRS`` pairs are kept and the range excludes 1.0x (all
pairs agree the fix is faster, or slower) or excludes the fix's forecast (the forecast is not what
this machine gives); else it is inside the noise of this load, and said so, never as a bare
figure. Pure: plain dicts in, plain dicts out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TryReport:
    """``scaldiag try``'s report: try.json's document (the rounds, the speed-up and its range)."""

    result: dict


# Fewer pairs than this resolve nothing: with three pairs on one side of 1.0x a coin would do so
# one time in four; the range of so few pairs is their minimum and maximum.
MIN_PAIRS = 3


def _per_sample_ms(side: dict) -> float | None:
    ms, n = side.get("step_ms"), side.get("samples_per_step")
    return ms / n if ms and n else ms


def side_failure(side: dict | None) -> str | None:
    """Why one side of a pair cannot be measured, or None."""
    if not side:
        return "did not run"
    code = side.get("exit")
    if code is None:
        return "did not finish"
    if code < 0:
        return f"killed by signal {-code}"
    if code != 0:
        return f"exited {code}"
    if not side.get("step_ms"):
        return "had no steady steps"
    return None


def pair_ratio(pair: dict) -> float | None:
    """Round i's speed-up in samples/s: the baseline's time a sample over the fix's; per sample
    only where both sides know their samples a step, else the steps' ratio. None where a side
    failed."""
    b, f = pair.get("baseline") or {}, pair.get("fixed") or {}
    if side_failure(b) or side_failure(f):
        return None
    if b.get("samples_per_step") and f.get("samples_per_step"):
        return _per_sample_ms(b) / _per_sample_ms(f)
    return b["step_ms"] / f["step_ms"]


def left_out(rounds: list[dict]) -> list[str]:
    """Each pair that is not measured, with why: "round 2: fixed exited 3"."""
    out = []
    for i, pair in enumerate(rounds):
        why = [
            f"{side} {failure}"
            for side in ("baseline", "fixed")
            if (failure := side_failure(pair.get(side)))
        ]
        if why:
            out.append(f"round {i}: {', '.join(why)}")
    return out


def summary(ratios: list[float], forecast: float | None = None) -> dict | None:
    """The ratios' median and 2.5th-97.5th percentile range, and whether the range is resolved
    (from 1.0x, or from the forecast); None without ratios."""
    if not ratios:
        return None
    a = np.asarray(ratios, dtype=float)
    low, high = float(np.percentile(a, 2.5)), float(np.percentile(a, 97.5))
    enough = len(ratios) >= MIN_PAIRS
    from_one = enough and (low > 1.0 or high < 1.0)
    from_forecast = bool(enough and forecast and (low > forecast or high < forecast))
    return {
        "median": float(np.median(a)),
        "low": low,
        "high": high,
        "pairs": len(ratios),
        "resolved": bool(from_one or from_forecast),
        "separates_from_1": bool(from_one),
        "separates_from_forecast": from_forecast,
    }


def another_round(rounds: list[dict], min_rounds: int, max_rounds: int, forecast) -> bool:
    """Whether to run one more pair: below the minimum, always; up to the maximum, while some
    pair measured and the range is not resolved yet."""
    if len(rounds) < min_rounds:
        return True
    if len(rounds) >= max_rounds:
        return False
    ratios = [r for r in map(pair_ratio, rounds) if r is not None]
    s = summary(ratios, forecast)
    return s is not None and not s["resolved"]


def batch_unchanged(sets: dict, rounds: list[dict]) -> str | None:
    """Why a batch fix measured nothing: its fixed runs kept the script's batch (the input is
    batched by the script: a dataset, a PyDataset, a DataLoader's batch_sampler)."""
    k = sets.get("per_replica_batch_factor")
    seen = [
        (r["baseline"].get("samples_per_step"), r["fixed"].get("samples_per_step"))
        for r in rounds
        if "fixed" in r and "baseline" in r
    ]
    if not k or not any(b and f for b, f in seen):
        return None
    if all(f == b * k for b, f in seen if b and f):
        return None
    return (
        f"the fixed runs did not take a batch x{k} (samples a step: {seen}): the script's input"
        " makes its own batches (a dataset, a PyDataset, a batch_sampler); change it there"
    )


def measured(rounds: list[dict], sets: dict, forecast: float | None = None) -> dict:
    """The pairs' statistics as try.json holds them: the pairs left out and the speed-up (None
    where a batch fix was not taken: ``not_applied`` then says why)."""
    not_applied = batch_unchanged(sets, rounds)
    ratios = [] if not_applied else [x for x in map(pair_ratio, rounds) if x is not None]
    out = {"left_out": left_out(rounds), "speedup": summary(ratios, forecast)}
    if not_applied:
        out["not_applied"] = not_applied
    return out
