"""Whole epochs, as Keras's progress bar times them: from an epoch's begin to its end.

The steady step time leaves out what is not a training step (an epoch's
iterator starting, validation, epoch-end callbacks: analyze/recorded_steps.py). The
clock users read in Keras's output counts them: its ``ms/step`` is the time
from the epoch's ``on_epoch_begin`` to its ``on_epoch_end`` (after
validation) over the epoch's steps, with ``verbose=2``; here an epoch runs
to the next epoch's begin (Keras: a millisecond later; PyTorch: after the
script's own epoch-end work, such as a checkpoint save); with ``verbose=1``
(Keras's "auto") it starts after the epoch's first step
(keras/src/utils/progbar.py, bench/clock/README.md). Both are given here, so
a report can say how the two clocks differ and by what: an epoch's edges and
validation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scaldiag.analyze.recorded_steps import Period, mark_pairs
from scaldiag.analyze.stats import ci95_half_width

# Keras's own figure is read from the third epoch on (the first compiles, the second may recompile).
FIRST_EPOCH_COMPARED = 2


@dataclass(frozen=True)
class Epoch:
    epoch: int
    begin_ns: int
    end_ns: int
    batches: int
    first_step_end_ns: int  # where Keras's verbose=1 clock starts
    validation_ns: int
    first_step_batches: int = 1  # batches of the epoch's first recorded step (steps_per_execution)

    @property
    def ms_per_step(self) -> float:
        return (self.end_ns - self.begin_ns) / self.batches / 1e6

    @property
    def ms_per_step_after_first(self) -> float | None:
        """Keras's verbose=1 figure: the first step left out. Only where that step is one batch:
        with steps_per_execution K > 1 the bar's first update is at batch K, never 1, and Keras
        prints the whole epoch over its steps (keras/src/utils/progbar.py)."""
        if self.batches < 2 or self.first_step_batches != 1:
            return None
        return (self.end_ns - self.first_step_end_ns) / (self.batches - 1) / 1e6


@dataclass(frozen=True)
class EpochStats:
    epochs: list[Epoch]  # every whole epoch recorded
    compared: list[int]  # the epochs in the figures below (the third on, where there are such)
    ms_per_step: float  # mean over ``compared``: Keras's verbose=2 ms/step
    ms_per_step_ci95: float  # t-interval over those epochs (nan with one)
    ms_per_step_after_first: float | None  # Keras's verbose=1 ms/step
    validation_s_per_epoch: float


def epoch_stats(found: list[Period], marks: list[dict]) -> EpochStats | None:
    """Whole epochs (an ``epoch_begin`` and its ``epoch_end`` mark, with steps between), or None."""
    begins = np.array([p.begin_ns for p in found], np.int64)  # (periods are in time order)
    validation = mark_pairs(marks, "test_begin", "test_end")
    epochs = [
        e
        for e in (_epoch(found, begins, validation, begin, end) for begin, end in _spans(marks))
        if e is not None
    ]
    if not epochs:
        return None
    later = [e for e in epochs if e.epoch >= FIRST_EPOCH_COMPARED]
    chosen = later or epochs
    per_step = np.array([e.ms_per_step for e in chosen])
    after = [x for e in chosen if (x := e.ms_per_step_after_first) is not None]
    ci = ci95_half_width(per_step) if len(per_step) > 1 else math.nan
    return EpochStats(
        epochs=epochs,
        compared=[e.epoch for e in chosen],
        ms_per_step=float(per_step.mean()),
        ms_per_step_ci95=ci,
        ms_per_step_after_first=float(np.mean(after)) if after else None,
        validation_s_per_epoch=float(np.mean([e.validation_ns for e in chosen])) / 1e9,
    )


def _spans(marks: list[dict]) -> list[tuple[dict, dict]]:
    """Each epoch's (begin, end) marks, in order: an ``epoch_begin`` to the next one, or to its own
    ``epoch_end`` for the last (a last epoch that never ended is no whole epoch). What a script does
    between its epochs (a checkpoint save after the DataLoader ran out, in PyTorch) is its epoch's:
    a stopwatch around the epochs counts it. A ``fit_begin`` closes the epoch before it at its own
    end.
    """
    out, opened, ended = [], None, None
    for m in marks:
        if m.get("mark") == "fit_begin" and opened is not None:
            # Another fit (fit called in a loop): what ran between the fits is the script's, not
            # the epoch's (Keras's bar of that epoch ended at its on_epoch_end).
            if ended is not None:
                out.append((opened, ended))
            opened, ended = None, None
        elif m.get("mark") == "epoch_begin":
            if (
                opened is not None
            ):  # (a loop that breaks out of its DataLoader early writes no epoch_end)
                out.append((opened, {**m, "epoch": opened.get("epoch")}))
            opened, ended = m, None
        elif (
            m.get("mark") == "epoch_end"
            and opened is not None
            and m.get("epoch") == opened.get("epoch")
        ):
            ended = m
    if opened is not None and ended is not None:
        out.append((opened, ended))
    return out


def _epoch(
    found: list[Period],
    begins: np.ndarray,
    validation: list[tuple[int, int]],
    begin: dict,
    end: dict,
) -> Epoch | None:
    lo, hi = np.searchsorted(begins, [begin["t_ns"], end["t_ns"]], side="left")
    inside = found[lo:hi]
    if not inside:
        return None
    in_epoch = sum(max(0, min(b, end["t_ns"]) - max(a, begin["t_ns"])) for a, b in validation)
    return Epoch(
        epoch=int(begin.get("epoch") or 0),
        begin_ns=begin["t_ns"],
        end_ns=end["t_ns"],
        batches=sum(p.batches for p in inside),
        first_step_end_ns=inside[0].end_ns,
        validation_ns=in_epoch,
        first_step_batches=inside[0].batches,
    )
