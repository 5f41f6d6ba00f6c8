"""The headline follows the clock the script prints (issue 46).

analyze/clock.py guesses the clock a user reads from the loop's family (JAX: a timer that stops
before any sync, the host's dispatch). Where the script printed a clock that scaldiag recognised
and that agrees with scaldiag's figure of its scope, that clock is what the user reads: the
headline leads with its scope and its name, so it never shows a figure the user's own clock
contradicts (JAX's mnist_vae.py: "2.74 ms a step" of dispatch beside an epoch timer reading
712 ms a call). The family's guess stays where no printed clock agrees.

Pure: the clock and the reconciled printed clocks in, the same two out.
"""

from __future__ import annotations

import math
from dataclasses import replace

from scaldiag.analyze import recorded_steps
from scaldiag.analyze.clock import STEADY_STEP, Clock, Scope
from scaldiag.analyze.printed_clock import AGREE, PrintedClock, headline_off
from scaldiag.analyze.printed_verdict import Comparison

# A window's parts (printed_verdict.by_window) named as the headline's; "steady" is the step.
STEADY_PART, REST_PART = "steady", "rest"


def followed(
    c: Clock | None, p: PrintedClock | None, found: list[recorded_steps.Period]
) -> tuple[Clock | None, PrintedClock | None]:
    """The clock with the headline at the agreeing printed clock's scope and name, and the
    comparisons' headline fields set against it; both unchanged where no printed clock agrees."""
    if c is None or p is None:
        return c, p
    x = _chosen(c, p.comparisons)
    if x is None:
        return c, p
    if x.scope == c.user_scope:  # (already compared as the headline)
        return replace(c, user_clock=x.what), p
    new = _headline_at(c, x, found)
    comparisons = [_against(y, new, y is x) for y in p.comparisons]
    contradicted = any(
        (y.agrees is False and (y.unrecorded or y.scope == new.user_scope))
        or y.headline_agrees is False
        for y in comparisons
    )
    return new, replace(p, comparisons=comparisons, headline_contradicted=contradicted)


def _chosen(c: Clock, comparisons: list[Comparison]) -> Comparison | None:
    """The agreeing clock the headline follows: one of the family's guessed scope where there is
    one (it is already the headline's scope), then the most readings, then the closest."""
    agreeing = [
        x
        for x in comparisons
        if x.agrees is True
        and x.headline_agrees is not False
        and not x.unrecorded
        and x.ms is not None
        and x.scaldiag_ms is not None
        and _figure_agrees(c, x)
    ]
    if not agreeing:
        return None
    guessed = [x for x in agreeing if x.scope == c.user_scope] or agreeing
    return max(guessed, key=lambda x: (x.readings, -abs(x.error or 0.0)))


def _figure_agrees(c: Clock, x: Comparison) -> bool:
    """The headline's figure at the clock's scope is the one it agreed with: the scope's own, or,
    for a clock set beside its own windows, the scope's within 5% of it; the windows' figure
    where no scope's covers them (one call an epoch)."""
    if x.scope not in c.scopes:
        return x.window
    if x.sampled_every:
        return False  # a timer of one iteration in ten: the headline is of every iteration
    return not x.window or abs(c.scopes[x.scope].user_ms / x.ms - 1) <= AGREE


def _headline_at(c: Clock, x: Comparison, found: list[recorded_steps.Period]) -> Clock:
    step_ms = c.scopes[STEADY_STEP].ms
    if x.scope in c.scopes:
        return replace(
            c, user_scope=x.scope, user_clock=x.what, parts_ms=c.parts_by_scope.get(x.scope, [])
        )
    # scaldiag's figure over the clock's own windows (no scope's figure covers them: one call an
    # epoch, each step in an epoch of its own): the steady step plus the window's named parts,
    # what is left of the figure in the last so the parts add up to it
    parts = [(name, ms) for name, ms in x.parts if name not in (STEADY_PART, REST_PART)]
    rest = x.scaldiag_ms - step_ms - sum(ms for _, ms in parts)
    parts.append(("the loop's other work", rest))  # (the report leaves out a part under 0.5%)
    steps = sum(
        p.batches
        for p in found
        if p.kind == recorded_steps.STEADY and x.begin_ns <= p.begin_ns and p.end_ns <= x.end_ns
    )
    scope = Scope(
        x.scope,
        x.scaldiag_ms,
        math.nan,
        steps,
        "scaldiag over your clock's windows: the steps in them and what the loop did between",
    )
    return replace(
        c,
        user_scope=x.scope,
        user_clock=x.what,
        scopes={**c.scopes, x.scope: scope},
        parts_ms=parts,
    )


def _against(x: Comparison, c: Clock, chosen: bool) -> Comparison:
    """A comparison's headline fields against the new headline: the chosen clock is the headline's
    own; another is said to be of other steps or another scope where over 5% off it."""
    if chosen:
        return replace(
            x,
            headline=True,
            headline_ms=c.scopes[c.user_scope].user_ms,
            headline_agrees=None,
            headline_off_ms=None,
            headline_scope="",
        )
    cleared = replace(
        x,
        headline=False,
        headline_ms=None,
        headline_agrees=None,
        headline_off_ms=None,
        headline_scope="",
    )
    return headline_off(cleared, c)
