"""The user's own clock first: one step's time at each scope a training loop is timed at.

- *steady step*: a training step alone (recorded_steps: evaluation, epoch edges and
  compiles cut out, by the framework's evidence);
- *loop iteration*: from one steady step's end to the next one's, in the same
  epoch: the step plus what the loop does between steps (evaluation inside
  the loop, logging, a checkpoint): what a timer around a loop's body reads;
- *whole epoch*: an epoch's begin to its end over its steps, validation and
  edges in (analyze/epochs.py): Keras's progress bar, most per-epoch timers;
- *whole training*: the loop's start (``fit_begin``, or the first recorded
  step's begin) to the end of the epoch its last step is in, everything inside
  (compiles, warm-up, evaluation, the evaluation and checkpoint due at the last
  step), over every step: what a stopwatch around a trainer's ``train()`` reads
  (transformers' train_runtime).

Which one the user reads is guessed from the loop's adapter (``USER_SCOPE``); where the script
printed a clock that agrees with scaldiag, the headline follows that clock instead
(analyze/printed_headline.py). The report leads with it and names the parts between it and the
steady step.
Pure: periods, marks and training.json in, plain data out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scaldiag.analyze import intervals as iv
from scaldiag.analyze import recorded_steps
from scaldiag.analyze.epochs import EpochStats
from scaldiag.analyze.stats import ci95_half_width

STEADY_STEP, LOOP_ITERATION, WHOLE_EPOCH, WHOLE_TRAINING, HOST_DISPATCH = (
    "steady_step",
    "loop_iteration",
    "whole_epoch",
    "whole_training",
    "host_dispatch",
)
WORDS = {
    STEADY_STEP: "a training step alone",
    LOOP_ITERATION: "a loop iteration",
    WHOLE_EPOCH: "whole epochs",
    WHOLE_TRAINING: "the whole training loop",
    HOST_DISPATCH: "the host's dispatch, before any sync",
}
# The clock each loop family's users read, and where it is printed.
USER_SCOPE = {
    "keras": (WHOLE_EPOCH, "Keras's progress bar"),
    # Its bar's it/s is the rate of the epoch running: rich's (the default where rich imports) over
    # the epoch's batch ends, so at the end of training the last epoch's batches after its first
    # (an H200 run: 26.25 ms both); tqdm's counts from the epoch's start, its first batch in.
    "lightning": (LOOP_ITERATION, "Lightning's progress bar"),
    "transformers": (WHOLE_TRAINING, "the Trainer's train_runtime"),
    "pytorch": (LOOP_ITERATION, "your loop's timer"),
    "jax": (LOOP_ITERATION, "your loop's timer"),
}


@dataclass(frozen=True)
class Scope:
    scope: str
    ms: float  # per training step (one batch)
    ms_ci95: float  # nan where one figure only
    steps: int
    what: str
    ms_after_first: float | None = (
        None  # whole epochs from each one's first step's end (Keras verbose=1)
    )
    ms_last_epoch: float | None = None  # the last epoch's alone (a loop iteration: Lightning's bar)
    reads_last_epoch: bool = False  # the user's clock shows the last epoch's figure

    @property
    def user_ms(self) -> float:
        """The figure as the user reads it: Keras's bar (verbose=1) leaves each epoch's first step
        out; Lightning's shows the epoch running (at the end, the last one's batches after its
        first)."""
        if self.reads_last_epoch and self.ms_last_epoch is not None:
            return self.ms_last_epoch
        return self.ms_after_first if self.ms_after_first is not None else self.ms

    @property
    def over_every_epoch_ms(self) -> float:
        """The figure the parts add up to and the printed clocks are set beside: over every epoch
        where the user's clock shows the last one's (Lightning's bar), else as the user reads it."""
        return self.ms if self.reads_last_epoch else self.user_ms


@dataclass(frozen=True)
class Clock:
    user_scope: str
    user_clock: str  # where the user reads it
    scopes: dict[str, Scope]
    parts_ms: list[tuple[str, float]]  # the user's scope = steady step + these, per step
    reported: dict | None = None  # the framework's own figure, where it wrote one
    # A step that is one call looping over batches inside (JAX: training.json ``step_loop``): the
    # loop, its batches a call (None: not known at trace time), the user's figure per batch.
    inner_loop: str | None = None
    inner_batches: int | None = None
    inner_batch_ms: float | None = None
    # each scope's parts, so the headline can move to the scope of a clock the script printed
    # (analyze/printed_headline.py)
    parts_by_scope: dict[str, list[tuple[str, float]]] | None = None


def clock(
    found: list[recorded_steps.Period],
    marks: list[dict],
    training: dict,
    epochs: EpochStats | None,
    steady_ms: float | None,
    steady_ci95: float,
    bar_style: str | None = None,
) -> Clock | None:
    """``bar_style``: Keras's bar as the script printed it (printed_clock.bar_style): verbose=1
    leaves each epoch's first step out (and times the whole epoch under steps_per_execution > 1,
    its first update past step 1); verbose=2 times the whole epoch."""
    if steady_ms is None:
        return None
    scopes = {
        STEADY_STEP: Scope(
            STEADY_STEP,
            steady_ms,
            steady_ci95,
            sum(p.batches for p in found if p.kind == recorded_steps.STEADY),
            "steady steps: evaluation, epoch edges, compiles left out",
        )
    }
    evaluation = recorded_steps.mark_pairs(marks, "test_begin", "test_end")
    family = _family(training)
    iteration = _loop_iteration(found, evaluation, reads_last_epoch=family == "lightning")
    if iteration is not None:
        scopes[LOOP_ITERATION] = iteration[0]
    if epochs is not None:
        scopes[WHOLE_EPOCH] = Scope(
            WHOLE_EPOCH,
            epochs.ms_per_step,
            epochs.ms_per_step_ci95,
            sum(e.batches for e in epochs.epochs if e.epoch in epochs.compared),
            f"{_model_words(epochs)}{_epoch_words(epochs.compared)}: "
            "each epoch's begin to its end, validation and edges in",
            epochs.ms_per_step_after_first if _after_first(family, bar_style, training) else None,
        )
    whole, eval_ns_per_step = _whole_training(found, marks, evaluation)
    if whole is not None:
        scopes[WHOLE_TRAINING] = whole
    dispatch = _host_dispatch(found, marks)
    if dispatch is not None:
        scopes[HOST_DISPATCH] = dispatch
    user, where = _user_scope(family, scopes)
    by_scope = {
        s: _parts(scopes, s, iteration[1] if iteration else 0.0, epochs, eval_ns_per_step / 1e6)
        for s in scopes
    }
    # a batch of a call's inner loop: the training step (the call with its device work) over them
    loop, inner, inner_ms = _inner_loop(training, steady_ms)
    return Clock(
        user,
        where,
        scopes,
        by_scope[user],
        training.get("user_clock"),
        loop,
        inner,
        inner_ms,
        by_scope,
    )


def _whole_training(
    found: list[recorded_steps.Period], marks: list[dict], evaluation: list[tuple[int, int]]
) -> tuple[Scope | None, float]:
    """The training loop's whole span over every step (None without steps), and the evaluation's
    ns a step inside it."""
    if not found:
        return None, 0.0
    begin_ns, end_ns = _training_span(found, marks)
    batches = sum(p.batches for p in found)
    eval_ns_per_step = (
        float(
            iv.measure_in_windows(
                iv.of_pairs(evaluation),
                np.array([begin_ns], np.int64),
                np.array([end_ns], np.int64),
            ).sum()
        )
        / batches
    )
    whole = Scope(
        WHOLE_TRAINING,
        (end_ns - begin_ns) / batches / 1e6,
        math.nan,
        batches,
        "the training loop's start to the end of the epoch its last step is in, "
        "all inside, over every step",
    )
    return whole, eval_ns_per_step


def _user_scope(family: str, scopes: dict[str, Scope]) -> tuple[str, str]:
    """The scope the user's own clock reads, guessed from the loop's family, and its words."""
    user, where = USER_SCOPE.get(family, (STEADY_STEP, "the steady step"))
    if family == "jax" and _waited(scopes):
        user = HOST_DISPATCH  # JAX's own examples stop their timers before any sync
    if user not in scopes:
        user = LOOP_ITERATION if LOOP_ITERATION in scopes else STEADY_STEP
    return user, where


def _after_first(family: str, bar_style: str | None, training: dict) -> bool:
    """Keras's bar leaves the epoch's first step out where it is updated at step 1 (verbose=1,
    one step an execution); a script that printed no bar reads Keras's default, verbose=1."""
    per_execution = training.get("steps_per_execution") or 1
    return family == "keras" and bar_style != "verbose2" and per_execution == 1


def _waited(scopes: dict[str, Scope]) -> bool:
    """The device's backlog waited for at the syncs is a part of the step worth a scope of its own
    (at least 1% of it); where the script waited for each step itself, there was none to wait for,
    and the host's dispatch is the step."""
    dispatch = scopes.get(HOST_DISPATCH)
    return dispatch is not None and dispatch.ms < 0.99 * scopes[STEADY_STEP].ms


def _inner_loop(training: dict, step_ms: float) -> tuple[str | None, int | None, float | None]:
    """A step that loops over batches inside one call (``step_loop``): the loop, its batches, the
    training step's time per batch where that count is known (not the host's dispatch's: the
    batches run on the device after the call returns)."""
    found = training.get("step_loop")
    if not isinstance(found, dict) or not isinstance(found.get("loop"), str):
        return None, None, None
    batches = found.get("batches")
    if not isinstance(batches, int) or isinstance(batches, bool) or batches < 1:
        return found["loop"], None, None
    return found["loop"], batches, step_ms / batches


def _model_words(epochs: EpochStats) -> str:
    """Whose epochs, where several models trained (analyze/epochs.py)."""
    found = next((m for m in epochs.models if m.model == epochs.model), None)
    return f"{found.name or f'model {found.model}'}: " if found is not None else ""


def _epoch_words(compared: list[int]) -> str:
    first, last = compared[0] + 1, compared[-1] + 1
    return f"epoch {first}" if first == last else f"epochs {first}-{last}"


def _family(training: dict) -> str:
    adapters = training.get("loop_adapters") or []
    if adapters:
        return adapters[-1]  # the most specific: Lightning over the torch hooks under it
    return (training.get("framework") or {}).get("name") or ""


def _training_span(found: list[recorded_steps.Period], marks: list[dict]) -> tuple[int, int]:
    """What a stopwatch around the training call reads (transformers' train_runtime: from just
    before on_train_begin to the end of the last epoch): from the loop's start (its ``fit_begin`` at
    or before the first step, where the adapter marks one) to the end of the epoch the last step is
    in (its first ``epoch_end`` at or after that step's end), so what the loop does after its last
    step and before the epoch ends (the evaluation and the checkpoint due at that step) is in; the
    steps' own span where those marks are missing."""
    begin_ns, end_ns = found[0].begin_ns, found[-1].end_ns
    starts = [m["t_ns"] for m in marks if m.get("mark") == "fit_begin" and m["t_ns"] <= begin_ns]
    ends = [m["t_ns"] for m in marks if m.get("mark") == "epoch_end" and m["t_ns"] >= end_ns]
    return (max(starts) if starts else begin_ns), (min(ends) if ends else end_ns)


def _loop_iteration(
    found: list[recorded_steps.Period],
    evaluation: list[tuple[int, int]],
    reads_last_epoch: bool = False,
) -> tuple[Scope, float] | None:
    """Each steady step's end to the previous step's end, where both are in one epoch; with the
    evaluation inside those iterations, in ms per step."""
    pairs = [
        (before, p)
        for before, p in zip(found, found[1:])
        if p.kind == recorded_steps.STEADY and before.epoch == p.epoch
    ]
    if not pairs:
        return None
    begins = np.array([before.end_ns for before, _ in pairs], np.int64)
    ends = np.array([p.end_ns for _, p in pairs], np.int64)
    counts = np.array([p.batches for _, p in pairs])
    epochs = [p.epoch for _, p in pairs]
    batches = int(counts.sum())
    # (one pass over the evaluation intervals: evaluation inside every iteration is a pair each)
    eval_ns = float(iv.measure_in_windows(iv.of_pairs(evaluation), begins, ends).sum())
    per = (ends - begins) / counts / 1e6
    ci = ci95_half_width(per) if len(per) > 1 else math.nan
    last = per[np.array(epochs) == epochs[-1]]
    scope = Scope(
        LOOP_ITERATION,
        float(per.mean()),
        ci,
        batches,
        "a steady step's end to the next one's in the same epoch: the loop's own work in",
        ms_last_epoch=float(last.mean()),
        reads_last_epoch=reads_last_epoch,
    )
    return scope, eval_ns / batches / 1e6


def _host_dispatch(found: list[recorded_steps.Period], marks: list[dict]) -> Scope | None:
    """The steady steps less the waits for the device's backlog the adapter made at each sync
    (``device_wait`` marks, JAX): what a timer around the loop reads when it stops before a sync."""
    waits = [
        (m["t_ns"], m.get("end_ns", m["t_ns"])) for m in marks if m.get("mark") == "device_wait"
    ]
    steady = [p for p in found if p.kind == recorded_steps.STEADY]
    if not waits or not steady:
        return None
    total_ns = sum(p.duration_ns for p in steady)
    waited_ns = float(
        iv.measure_in_windows(
            iv.of_pairs(waits),
            np.array([p.begin_ns for p in steady], np.int64),
            np.array([p.end_ns for p in steady], np.int64),
        ).sum()
    )
    batches = sum(p.batches for p in steady)
    return Scope(
        HOST_DISPATCH,
        (total_ns - waited_ns) / batches / 1e6,
        math.nan,
        batches,
        "the steady steps less the device's backlog waited for at each sync",
    )


def _parts(
    scopes: dict[str, Scope],
    user: str,
    eval_ms: float,
    epochs: EpochStats | None,
    training_eval_ms: float = 0.0,
) -> list[tuple[str, float]]:
    """The user's scope as the steady step plus named parts, per step (the rest is 'other')."""
    step = scopes[STEADY_STEP].ms
    total = scopes[user].over_every_epoch_ms
    if user == STEADY_STEP:
        return []
    if user == HOST_DISPATCH:  # the step is the dispatch and the device's backlog after it
        return [("the device's backlog at each sync (after your timer stops)", step - total)]
    parts: list[tuple[str, float]] = []
    if user == LOOP_ITERATION:
        parts.append(("evaluation inside the loop", eval_ms))
    elif user == WHOLE_EPOCH and epochs is not None:
        compared = [e for e in epochs.epochs if e.epoch in epochs.compared]
        batches = sum(e.batches for e in compared) or 1
        parts.append(("validation", sum(e.validation_ns for e in compared) / batches / 1e6))
    elif user == WHOLE_TRAINING:
        parts.append(("evaluation and checkpoints inside training", training_eval_ms))
    rest = total - step - sum(ms for _, ms in parts)
    parts.append(
        (
            (
                "epoch edges, compiles and the loop's other work"
                if user != LOOP_ITERATION
                else "the loop's other work between steps"
            ),
            rest,
        )
    )
    return parts
