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

Several models trained in one script (Keras: each ``fit`` is keyed by its
model, the ``model`` of its marks) are several trainings: each model's epochs
are compared apart, from its own third epoch on, and an epoch that holds a
compile the framework reported (``compile`` marks: a new model's train
function traced) is left out of the comparison, never an epoch for its
length. The figures are one model's: the one the profiler traced, so the
figures and the trace's findings are of one model; the others' are in
``models``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from scaldiag.analyze.recorded_steps import Period, compile_spans, mark_pairs
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
    model: int | None = None  # the model it trained (the marks' ``model``), None where not recorded
    compiled: bool = False  # a compile the framework reported falls inside it

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
class ModelEpochs:
    """One model's whole epochs, where a script trained several (each figure as in EpochStats)."""

    model: int
    name: str | None
    epochs: list[int]
    compared: list[int]
    batches: int  # over ``compared``
    ms_per_step: float
    ms_per_step_after_first: float | None


@dataclass(frozen=True)
class EpochStats:
    epochs: list[Epoch]  # every whole epoch recorded
    compared: list[int]  # the epochs in the figures below (the third on, where there are such)
    ms_per_step: float  # mean over ``compared``: Keras's verbose=2 ms/step
    ms_per_step_ci95: float  # t-interval over those epochs (nan with one)
    ms_per_step_after_first: float | None  # Keras's verbose=1 ms/step
    validation_s_per_epoch: float
    # Where several models trained: each one's figures, and which one the figures above are of.
    models: list[ModelEpochs] = field(default_factory=list)
    model: int | None = None
    model_why: str = ""
    compiled_left_out: list[int] = field(default_factory=list)  # later epochs that compiled

    @property
    def model_epochs(self) -> set[int] | None:
        """The epochs of the model the figures are of, where several models trained, else None."""
        if len(self.models) < 2:
            return None
        return {e.epoch for e in self.epochs if e.model == self.model}


def epoch_stats(found: list[Period], marks: list[dict]) -> EpochStats | None:
    """Whole epochs (an ``epoch_begin`` and its ``epoch_end`` mark, with steps between), or None."""
    begins = np.array([p.begin_ns for p in found], np.int64)  # (periods are in time order)
    validation = mark_pairs(marks, "test_begin", "test_end")
    compiles = compile_spans(marks)
    epochs = [
        e
        for e in (
            _epoch(found, begins, validation, compiles, begin, end) for begin, end in _spans(marks)
        )
        if e is not None
    ]
    if not epochs:
        return None
    names = _model_names(marks)
    groups: dict[int | None, list[Epoch]] = {}
    for e in epochs:
        groups.setdefault(e.model, []).append(e)
    chosen_of = {m: _compared(group) for m, group in groups.items()}
    model, why = _headlined_model(groups, marks)
    chosen, left_out = chosen_of[model]
    per_step = np.array([e.ms_per_step for e in chosen])
    after = [x for e in chosen if (x := e.ms_per_step_after_first) is not None]
    ci = ci95_half_width(per_step) if len(per_step) > 1 else math.nan
    models = (
        [_model_epochs(m, names.get(m), group, chosen_of[m][0]) for m, group in groups.items()]
        if len(groups) > 1
        else []
    )
    return EpochStats(
        epochs=epochs,
        compared=[e.epoch for e in chosen],
        ms_per_step=float(per_step.mean()),
        ms_per_step_ci95=ci,
        ms_per_step_after_first=float(np.mean(after)) if after else None,
        validation_s_per_epoch=float(np.mean([e.validation_ns for e in chosen])) / 1e9,
        models=models,
        model=model if len(groups) > 1 else None,
        model_why=why if len(groups) > 1 else "",
        compiled_left_out=left_out,
    )


def _compared(group: list[Epoch]) -> tuple[list[Epoch], list[int]]:
    """A model's epochs in its figures: from its third epoch on (its first compiles, its second may
    recompile), less those that hold a compile the framework reported, unless every later epoch
    does (compiling is then its steady state); all of them where it has no third epoch."""
    first = group[0].epoch if group[0].model is not None else 0  # (old records: the run's)
    later = [e for e in group if e.epoch - first >= FIRST_EPOCH_COMPARED]
    clean = [e for e in later if not e.compiled]
    if clean:
        return clean, [e.epoch for e in later if e.compiled]
    return later or group, []


def _model_epochs(
    model: int | None, name: str | None, group: list[Epoch], chosen: list[Epoch]
) -> ModelEpochs:
    after = [x for e in chosen if (x := e.ms_per_step_after_first) is not None]
    return ModelEpochs(
        model=int(model or 0),
        name=name,
        epochs=[e.epoch for e in group],
        compared=[e.epoch for e in chosen],
        batches=sum(e.batches for e in chosen),
        ms_per_step=float(np.mean([e.ms_per_step for e in chosen])),
        ms_per_step_after_first=float(np.mean(after)) if after else None,
    )


def _model_names(marks: list[dict]) -> dict[int, str | None]:
    """Each model's name, from its fits' ``fit_begin`` marks."""
    return {
        m["model"]: m.get("model_name")
        for m in marks
        if m.get("mark") == "fit_begin" and isinstance(m.get("model"), int)
    }


def _headlined_model(groups: dict, marks: list[dict]) -> tuple[int | None, str]:
    """The model the figures are of: the one the profiler traced (the trace's findings are then of
    the same model), else the first trained."""
    starts = [m["t_ns"] for m in marks if m.get("mark") == "trace_start"]
    for model, group in groups.items():
        if any(e.begin_ns <= t <= e.end_ns for e in group for t in starts):
            return model, "the model the profiler traced"
    return next(iter(groups)), "the first model trained (no trace window)"


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
    compiles: tuple[np.ndarray, np.ndarray],
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
        model=begin.get("model") if isinstance(begin.get("model"), int) else None,
        compiled=_holds_compile(begin["t_ns"], end["t_ns"], compiles),
    )


def _holds_compile(begin_ns: int, end_ns: int, compiles: tuple[np.ndarray, np.ndarray]) -> bool:
    starts, ends = compiles
    return bool(((starts < end_ns) & (ends > begin_ns)).any())
