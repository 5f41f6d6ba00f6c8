"""The phases of a PyTorch run (analyze/recorded_steps.py ``Phase``): which optimizer led which
steps, each phase's steady step, and the optimizers that stepped in turn within a pass."""

from __future__ import annotations

# Phases named one by one; the others are counted (every one is in the JSON's ``phases``).
SHOWN = 6


def lines(phases: list, verbose: bool = False) -> list[str]:
    """A line on the phases where there is more than one, or optimizers in turn; [] otherwise."""
    if not phases or (len(phases) == 1 and not phases[0].in_turn):
        return []
    if len(phases) == 1:
        return [f"Optimizers in turn: {_turns(phases[0])}; a step is one pass of the loop."]
    shown = phases if verbose else phases[:SHOWN]
    words = "; ".join(_phase(p, k == 0) for k, p in enumerate(shown))
    more = len(phases) - len(shown)
    tail = f"; {more} more (--verbose, JSON phases)" if more else ""
    return [
        f"{len(phases)} phases, each led by its own optimizer (every phase's steps are in the "
        f"figures): {words}{tail}."
    ]


def _phase(p, first: bool) -> str:
    if first:
        what = f"phase 1 from step 1: {p.kind} (optimizer {p.optimizer + 1})"
    elif p.new:
        model = "over a new model" if p.new_model else "over parameters of the model before"
        what = (
            f"phase {p.number} from step {p.first_step + 1:,}: a new optimizer ({p.kind}) {model}"
        )
    else:
        what = (
            f"phase {p.number} from step {p.first_step + 1:,}: optimizer {p.optimizer + 1} "
            f"({p.kind}) again"
        )
    figure = (
        f"{p.steady_ms:.3g} ms a steady step"
        if p.steady_ms is not None
        else f"{p.steps} step(s), none steady"
    )
    turns = f", {_turns(p)}" if p.in_turn else ""
    return f"{what}, {figure}{turns}"


def _turns(p) -> str:
    others = " and ".join(f"{kind} (optimizer {index + 1})" for index, kind in p.in_turn)
    return f"{others} stepped in turn with {p.kind} (optimizer {p.optimizer + 1}) in each pass"
