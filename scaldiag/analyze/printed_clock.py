"""The script's own clocks beside scaldiag's figure of the same scope.

Each clock the script printed (printed_forms.py) is set beside the figure the report shows at
that clock's scope (analyze/clock.py's ``Clock.scopes``), over the readings whose windows lie on
the steps that figure covers (the compared epochs, the steady steps; a compile epoch's line is
not compared). ``error`` = scaldiag's samples/s over the clock's, less 1 (= clock_ms /
scaldiag_ms - 1). A clock agrees when within ``AGREE`` (5%) of scaldiag's figure, or within the
combined spread: the readings' own 95% interval across readings, the figure's ci95 and half the
clock's last printed digit, in quadrature (a 3ms/step bar is any of 2.5-3.5 ms).

Where a clock counted steps in a window where scaldiag recorded none, or far fewer
(``UNRECORDED``), that is a disagreement of its own: a loop shape scaldiag does not see (a
second optimizer's phase, folds), whatever the figures say.

Pure: readings, the clock, the recorded periods and marks in; plain data out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from scaldiag.analyze import intervals as iv
from scaldiag.analyze import printed_account, printed_sampled, recorded_steps
from scaldiag.analyze.clock import (
    LOOP_ITERATION,
    STEADY_STEP,
    WHOLE_EPOCH,
    Clock,
    Scope,
)
from scaldiag.analyze.epochs import EpochStats
from scaldiag.analyze.printed_forms import ARRIVAL, KERAS_BAR, TIMER, Reading, recognise
from scaldiag.analyze.printed_verdict import (
    AGREE,
    Comparison,
    agreement,
    by_window,
    in_quadrature,
    shown_of,
    spread_ci,
    verdict,
    verdict_of,
)
from scaldiag.analyze.printed_windows import (
    COVERED,
    Figures,
    coverage,
    covered,
    recorded_batches,
    shares,
    touching_batches,
)

# A clock that counted at least twice the steps scaldiag recorded in its window saw a loop
# scaldiag did not (its steps are not in any figure).
UNRECORDED = 0.5


@dataclass(frozen=True)
class PrintedClock:
    comparisons: list[Comparison]  # disagreements first
    headline_contradicted: bool
    dropped: int = 0  # segments the capture could not keep

    @property
    def disagreements(self) -> list[Comparison]:
        """Clocks that disagree with scaldiag's figure of their scope, or with the headline."""
        return [c for c in self.comparisons if c.agrees is False or c.headline_agrees is False]


def printed_clock(
    rows: list[dict] | None,
    c: Clock | None,
    found: list[recorded_steps.Period],
    marks: list[dict],
    epochs: EpochStats | None,
    training: dict,
    every: list[recorded_steps.Period] | None = None,
    readings: list[Reading] | None = None,
) -> PrintedClock | None:
    """None where the run has no printed record (runs from before it was captured). ``found``: the
    steps the figures are of; ``every``: every step recorded (another model's too), where
    different."""
    if rows is None:
        return None
    dropped = sum(int(r["dropped"]) for r in rows if isinstance(r.get("dropped"), int))
    if readings is None:
        readings = read(rows, training, marks)
    return reconcile(readings, c, found, marks, epochs, dropped, every, training)


def read(rows: list[dict], training: dict, marks: list[dict]) -> list[Reading]:
    """The clocks in the script's output; Keras's epochs from its callback's marks where its bar
    prints no ``Epoch k/N`` line (one epoch)."""
    family = _family(training)
    return recognise(
        rows,
        family,
        training.get("global_batch"),
        _keras_epochs(marks) if family == "keras" else [],
    )


def _keras_epochs(marks: list[dict]) -> list[tuple[int, str]]:
    """Each Keras epoch's begin and, where several models were fitted, its model's name: each
    model's bar a clock of its own (a fit called in a loop on one model is one clock)."""
    names = {
        m.get("model"): str(m.get("model_name") or f"model {m.get('model')}")
        for m in marks
        if m.get("mark") == "fit_begin"
    }
    several = len(names) > 1
    return [
        (m["t_ns"], names.get(m.get("model"), "") if several else "")
        for m in marks
        if m.get("mark") == "epoch_begin" and "fit" in m and isinstance(m.get("t_ns"), int)
    ]


def bar_style(readings: list[Reading] | None) -> str | None:
    """The style of Keras's bar as the script printed it (the last one's), None where none."""
    styles = [r.style for r in readings or [] if r.form == KERAS_BAR]
    return styles[-1] if styles else None


def _family(training: dict) -> str:
    adapters = training.get("loop_adapters") or []
    return adapters[-1] if adapters else (training.get("framework") or {}).get("name") or ""


def reconcile(
    readings: list[Reading],
    c: Clock | None,
    found: list[recorded_steps.Period],
    marks: list[dict],
    epochs: EpochStats | None,
    dropped: int = 0,
    every: list[recorded_steps.Period] | None = None,
    training: dict | None = None,
) -> PrintedClock:
    # A clock "saw steps scaldiag did not record" against every recorded step, not only those the
    # figures are of (another model's fit is recorded, and compared with nothing)
    training = training or {}
    every = found if every is None else every
    stall = printed_account.stalls(marks)
    readings = [_destalled(r, stall) for r in readings]
    evaluation = iv.of_pairs(recorded_steps.mark_pairs(marks, "test_begin", "test_end"))
    in_evaluation = shares(evaluation, readings) if readings else np.zeros(0)
    counted = recorded_batches(every, readings) if readings else np.zeros(0, np.int64)
    touching = touching_batches(every, readings) if readings else np.zeros(0, np.int64)
    accumulation = _positive(training.get("gradient_accumulation"))
    calls = _step_loop(training, c)
    out: list[Comparison] = []
    groups: dict[str, list[Reading]] = {}
    for r, evaluating, recorded, touched in zip(
        readings, in_evaluation, counted.tolist(), touching.tolist()
    ):
        if r.evaluation or evaluating >= COVERED:
            continue  # evaluation's bars count no training steps
        if r.ms is None and r.total_ms is not None and recorded:
            r = Reading(
                **{
                    **r.__dict__,
                    "ms": r.total_ms / recorded,
                    "resolution_ms": r.resolution_ms / recorded,  # (it was the total's)
                }
            )
        r = _accumulated(r, recorded, accumulation)
        if calls is not None and r.scope == WHOLE_EPOCH:  # the step is the epoch: one call
            r = replace(r, scope=LOOP_ITERATION if r.form == ARRIVAL else STEADY_STEP)
        if _unrecorded(r, touched):
            out.append(_unrecorded_comparison(r, touched))
            continue
        groups.setdefault(r.what, []).append(r)
    figures = Figures(found, epochs)
    accountant = printed_account.Accountant(every, marks)  # (another model's steps too)
    for group in groups.values():
        x = _compare(group, c, found, epochs, figures, accountant, training)
        if calls is not None and x.scope == STEADY_STEP and not _within(x):
            x = _with_evaluation(x, group, c, found, epochs, figures, accountant, training)
        out.append(replace(x, batches_a_step=calls) if calls and x.ms is not None else x)
    out = [headline_off(x, c) for x in _merge_unrecorded(out)]
    headline = c.user_scope if c is not None else None
    contradicted = any(
        (x.agrees is False and (x.unrecorded or x.scope == headline)) or x.headline_agrees is False
        for x in out
    )
    out.sort(
        key=lambda x: (x.agrees is not False and x.headline_agrees is not False, x.agrees is None)
    )
    return PrintedClock(out, contradicted, dropped)


def headline_off(x: Comparison, c: Clock | None) -> Comparison:
    if c is None or x.ms is None or x.headline_agrees is not None or x.agrees is False:
        return x
    figure = c.scopes[c.user_scope].user_ms  # (as the headline prints it)
    if abs(figure / x.ms - 1) <= AGREE:
        return x
    return replace(x, headline_off_ms=figure, headline_scope=c.user_scope)


def _with_evaluation(x: Comparison, group, c, found, epochs, figures, accountant, training):
    """An epoch timer where one call is the epoch: the call alone (tests/jax_epoch_call.py stops
    its timer before evaluating), or the call and the evaluation after it (JAX's mnist_vae.py
    prints time.time() around both), which the marks cannot tell apart: the loop iteration
    (a step's end to the next one's, the evaluation in) where the step alone disagrees and it
    agrees, said in the line."""
    if c is None or LOOP_ITERATION not in c.scopes:  # (no two steady steps in a row)
        on = shares(covered(STEADY_STEP, found, epochs), group)
        steady = [r for r, part in zip(group, on) if part >= COVERED] or group
        after = [replace(r, scope=LOOP_ITERATION) for r in steady]
        base = dict(what=x.what, scope=LOOP_ITERATION, begin_ns=x.begin_ns, end_ns=x.end_ns)
        y = by_window(after, c, found, accountant, False, base, recorded_only=True)
        return _better(x, y)
    y = _compare(
        [replace(r, scope=LOOP_ITERATION) for r in group],
        c,
        found,
        epochs,
        figures,
        accountant,
        training,
    )
    return _better(x, y)


def _within(x: Comparison) -> bool:
    return bool(x.agrees) and x.error is not None and abs(x.error) <= AGREE


def _better(x: Comparison, y: Comparison) -> Comparison:
    """The call and what follows it where that agrees and the call alone does not, or agrees only
    within a wide spread (JAX's mnist_vae: 762 ms a call and its evaluation against the call's
    697, within the spread of 96 readings; 774 with it)."""
    if not y.agrees or (x.agrees and abs(y.error) >= abs(x.error)):
        return x
    return replace(y, what=f"{x.what} (the call and what follows it)")


def _destalled(r: Reading, stall) -> Reading:
    """A window placed back from its print by the clock's own span, moved back past scaldiag's
    stalls between (a JAX epoch timer printed after the profiler's 0.3-4 s stop: its window lay
    in the stop, where no step was, and read as a loop scaldiag did not see)."""
    if r.span_ms is None or not len(stall[0]):
        return r
    begin_ns, skipped = printed_account.walk_back(r.end_ns, int(r.span_ms * 1e6), stall)
    return replace(r, begin_ns=max(begin_ns, 0), skipped=tuple(skipped))


def _positive(value) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 1
    return value if ok else None


def _accumulated(r: Reading, recorded: int, k: int | None) -> Reading:
    """A clock of micro-batches, where the record knows the gradient accumulation (the Trainer's
    gradient_accumulation_steps, Lightning's accumulate_grad_batches) and the clock counted k of
    them a recorded step: its figure a step is k of its own."""
    if not k or not r.count or not recorded or abs(r.count / recorded - k) > AGREE * k:
        return r
    return replace(
        r,
        what=f"{r.what} (micro-batches, {k} a step)",
        ms=r.ms * k if r.ms is not None else None,
        count=round(r.count / k),
        resolution_ms=r.resolution_ms * k,
    )


def _step_loop(training: dict, c: Clock | None) -> int | None:
    """A step that is one call looping over a whole epoch's batches inside (JAX: ``step_loop``)
    where the record has no epochs of its own: the batches a call (0 where not known)."""
    if not isinstance(training.get("step_loop"), dict) or (
        c is not None and WHOLE_EPOCH in c.scopes
    ):
        return None
    return (c.inner_batches if c is not None else None) or 0


def _unrecorded(r: Reading, recorded: int) -> bool:
    if r.end_ns <= r.begin_ns:
        return False  # a moment: no window to count in
    if r.count is not None:
        return recorded < UNRECORDED * r.count
    return recorded == 0 and r.total_ms is not None


def _unrecorded_comparison(r: Reading, recorded: int) -> Comparison:
    return Comparison(
        r.what,
        r.scope,
        r.shown,
        r.ms,
        None,
        None,
        False,
        begin_ns=r.begin_ns,
        end_ns=r.end_ns,
        counted=r.count or 0,
        recorded=recorded,
        note=_unrecorded_note(r.count or 0, recorded),
    )


def _unrecorded_note(counted: int, recorded: int) -> str:
    """Why the counts differ, as far as the counts say: a whole multiple is what a clock of
    micro-batches under gradient accumulation reads, and also a loop stepping k optimizers of
    which one was seen; the counts cannot tell which."""
    ratio = counted / recorded if recorded else 0.0
    if ratio >= 2 and abs(ratio - round(ratio)) <= 0.05 * ratio:
        return (
            f"{round(ratio)} of your clock's counts a recorded step: micro-batches of gradient "
            "accumulation, or steps scaldiag did not record"
        )
    return "steps scaldiag did not record: a loop it does not see, in no figure of the report"


def _merge_unrecorded(out: list[Comparison]) -> list[Comparison]:
    """One line a clock for its windows without steps: their span, the steps summed."""
    merged: dict[str, Comparison] = {}
    rest = []
    for x in out:
        if not x.unrecorded:
            rest.append(x)
            continue
        before = merged.get(x.what)
        merged[x.what] = (
            x
            if before is None
            else Comparison(
                **{
                    **before.__dict__,
                    "begin_ns": min(before.begin_ns, x.begin_ns),
                    "end_ns": max(before.end_ns, x.end_ns),
                    "counted": before.counted + x.counted,
                    "recorded": before.recorded + x.recorded,
                    "note": _unrecorded_note(
                        before.counted + x.counted, before.recorded + x.recorded
                    ),
                    "shown": x.shown,
                }
            )
        )
    return list(merged.values()) + rest


def _compare(
    group: list[Reading],
    c: Clock | None,
    found: list[recorded_steps.Period],
    epochs: EpochStats | None,
    figures: Figures,
    accountant: printed_account.Accountant,
    training: dict,
) -> Comparison:
    first, last = group[0], group[-1]
    base = dict(what=first.what, scope=first.scope, begin_ns=first.begin_ns, end_ns=last.end_ns)
    if first.ms is None and first.note:
        return Comparison(
            shown=last.shown,
            ms=None,
            scaldiag_ms=None,
            error=None,
            agrees=None,
            note=first.note,
            **base,
        )
    after_first = _after_first(first, training)
    if c is None or first.scope not in c.scopes:
        return by_window(group, c, found, accountant, after_first, base)
    windows = covered(first.scope, found, epochs)
    on = shares(windows, group)
    compared = [r for r, part in zip(group, on) if r.ms is not None and part >= COVERED]
    if not compared:  # (a one-epoch run's bar: its only epoch compiled) its own window, in parts
        return by_window(group, c, found, accountant, after_first, base)
    steps_scope = first.scope in (LOOP_ITERATION, STEADY_STEP)
    if first.form == TIMER and steps_scope:  # minGPT's iter_dt: one iteration a print
        spans = [figures.spans(first.scope, r) for r in compared]
        one = printed_sampled.sampled(compared, spans)
        if one is not None:
            return printed_sampled.comparison(one, base)
    scope = c.scopes[first.scope]
    whole = _figure(scope, first, c, training)
    local, accounts = _own_figures(compared, first, figures, accountant, after_first, steps_scope)
    if steps_scope and all(a is not None for a in accounts):
        # every reading's window holds more than steady steps (a phase's timer over its new
        # optimizer's first steps and its loader's passes): each beside its window, in parts
        return by_window(compared, c, found, accountant, after_first, base)
    if first.scope == WHOLE_EPOCH and _all_compiled(compared, accountant, after_first):
        # Every epoch it read compiled (a one-epoch run's): the user's figure holds the compile, and
        # scaldiag's own window, in parts, says how much of it is which
        return by_window(compared, c, found, accountant, after_first, base, epochs_headline=True)
    return _paired(compared, local, accounts, whole, scope, first, c, windows, base)


def _own_figures(
    compared: list[Reading],
    first: Reading,
    figures: Figures,
    accountant: printed_account.Accountant,
    after_first: bool,
    steps_scope: bool,
) -> tuple[list[float | None], list]:
    """scaldiag's figure beside each reading, and its window's account where one was made."""
    # scaldiag's figure over each reading's own steps (a phase's clock beside its phase); where
    # its window holds scaldiag's own profiler or measurements, the window in parts, them named
    local, accounts = [], []
    for r in compared:
        figure, account = figures.over(first.scope, r, after_first), None
        # (a median: unmoved by a few steps' stalls)
        if not r.median and accountant.own_share(r.begin_ns, r.end_ns, edges=steps_scope):
            account = accountant.account(r.begin_ns, r.end_ns, after_first, r.skipped)
            if account is not None and steps_scope:
                # the steps' figures leave scaldiag's own time and the epochs' edges out; the
                # user's timer around the loop paid for them
                figure = account.ms
        local.append(figure)
        accounts.append(account)
    return local, accounts


def _all_compiled(
    compared: list[Reading], accountant: printed_account.Accountant, after_first: bool
) -> bool:
    """Whether every reading's window, in parts, holds a compile."""
    windows_of = [
        accountant.account(r.begin_ns, r.end_ns, after_first, r.skipped) for r in compared
    ]
    return all(a is not None and a.compiled for a in windows_of)


def _paired(
    compared: list[Reading],
    local: list[float | None],
    accounts: list,
    whole: float,
    scope: Scope,
    first: Reading,
    c: Clock,
    windows: tuple[np.ndarray, np.ndarray],
    base: dict,
) -> Comparison:
    """The readings' mean beside scaldiag's, each paired with its own steps' figure, and beside the
    headline where the clock times the steps it covers."""
    beside = np.array([whole if f is None else f for f in local])
    values = np.array([r.ms for r in compared])
    ms, figure = float(values.mean()), float(beside.mean())
    # (rounding errors of separate readings are independent: the mean's is the bound over sqrt(n))
    resolution_ms = float(np.mean([r.resolution_ms for r in compared])) / math.sqrt(len(values))
    # Paired: each reading beside scaldiag's figure over its own steps, so the spread is that of
    # their differences; the scope's ci95 only where a reading had no steps of its own to match.
    scope_ci = 0.0 if math.isnan(scope.ms_ci95) or None not in local else scope.ms_ci95
    spread_ms = in_quadrature(spread_ci(values - beside), scope_ci, resolution_ms)
    # The headline, where the clock times the steps it covers (a phase's clock times a part)
    headline = first.scope == c.user_scope and coverage(windows, compared) >= COVERED
    headline_ms = scope.over_every_epoch_ms
    headline_spread = in_quadrature(
        spread_ci(values), 0.0 if math.isnan(scope.ms_ci95) else scope.ms_ci95, resolution_ms
    )
    headline_by = agreement(ms, headline_ms, headline_spread) if headline else ""
    own = [a for a in accounts if a is not None]
    return Comparison(
        shown=shown_of(compared),
        **verdict(ms, figure, spread_ms),
        readings=len(compared),
        parts=list(c.parts_ms) if headline and abs(figure / headline_ms - 1) < 0.01 else [],
        headline=headline,
        headline_ms=headline_ms if headline else None,
        headline_agrees=verdict_of(headline_by) if headline else None,
        own_ms=float(np.sum([a.own_ms for a in own])) / len(compared),
        **{**base, "begin_ns": compared[0].begin_ns, "end_ns": compared[-1].end_ns},
    )


def _after_first(r: Reading, training: dict) -> bool:
    """Keras's verbose=1 bar times each epoch from its first step's end (Progbar's
    ``_time_after_first_step``, set where it is updated at step 1: with steps_per_execution > 1
    its first update is at step k, and the bar times the whole epoch); verbose=2 updates only at
    the epoch's end, from the bar's creation at the epoch's begin."""
    per_execution = training.get("steps_per_execution") or 1
    return r.form == KERAS_BAR and r.style == "verbose1" and per_execution == 1


def _figure(scope, reading: Reading, c: Clock, training: dict) -> float:
    """The figure of the scope the clock is compared with: the headline's own where the clock is
    the one the report leads with (Keras's verbose=1 bar leaves each epoch's first step out)."""
    if reading.form == KERAS_BAR:
        if _after_first(reading, training) and scope.ms_after_first is not None:
            return scope.ms_after_first
        return scope.ms
    if reading.scope == c.user_scope and not scope.reads_last_epoch:
        return scope.user_ms
    return scope.ms
