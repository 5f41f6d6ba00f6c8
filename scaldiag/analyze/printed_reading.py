"""A clock the script printed, as read (printed_forms.py, printed_timers.py): the reading, the
forms' names, the units, and the helpers both readers share. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

KERAS_BAR, TQDM, RICH, HF_METRICS, TIMER, RATE, EPOCH_TIME, ARRIVAL = (
    "keras_bar",
    "tqdm",
    "rich",
    "hf_metrics",
    "timer",
    "rate",
    "epoch_time",
    "arrival",
)
MS_PER = {"us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3, "secs": 1e3, "seconds": 1e3}
# Rates whose unit is one step of the loop; samples' rates need the batch; tokens', tokens a step.
STEP_UNITS = {
    "it",
    "its",
    "iter",
    "iters",
    "iteration",
    "iterations",
    "step",
    "steps",
    "batch",
    "batches",
}
SAMPLE_UNITS = {
    "samples",
    "sample",
    "img",
    "imgs",
    "images",
    "examples",
    "ex",
    "seq",
    "seqs",
    "sequences",
}
TOKEN_UNITS = {"tok", "toks", "token", "tokens"}
# A bar whose description says evaluation counts no training steps.
EVALUATION_WORDS = re.compile(r"valid|eval|test|predict|infer", re.I)

_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|[\x00-\x08\x0b-\x1f\x7f]")
NUM = r"\d+(?:\.\d+)?"


@dataclass(frozen=True)
class Reading:
    """One figure of a clock the script printed, as the user reads it."""

    what: str  # words the user recognises ("your tqdm bar 'epoch N'")
    form: str
    scope: str  # analyze/clock.py's scope names
    shown: str  # the figure as printed: "12.3 it/s", "3ms/step"
    ms: float | None  # ms a step of that scope; None: see total_ms, or not comparable (note)
    count: int | None  # steps it counts; None where the line does not say (an epoch's time)
    begin_ns: int  # the window the figure covers
    end_ns: int
    resolution_ms: float  # half the last printed digit, in ms a step (of total_ms where no ms yet)
    text: str  # the line, control characters out
    total_ms: float | None = None  # a span's time over steps the line does not count
    note: str = ""  # why it cannot be compared
    style: str = ""  # Keras: "verbose1" (the bar) or "verbose2"
    evaluation: bool = False  # a bar over evaluation: no training steps in it
    # The window was placed back from the print by this (the figure's own span: an epoch's time,
    # N steps at a timer's ms): a print late by scaldiag's stalls is moved back past them
    span_ms: float | None = None
    skipped: tuple = ()  # scaldiag's stalls inside the window the clock did not count
    median: bool = False  # the figure is its steps' median ("median 174.81 ms/step"), not a mean


def clean(text: str) -> str:
    """The segment as the terminal shows it: escape sequences and control characters out."""
    return _CONTROL.sub("", text).strip()


def half_digit(number: str) -> float:
    """Half a unit of the last digit printed: ``'3'`` 0.5, ``'45.2'`` 0.05."""
    decimals = len(number.split(".")[1]) if "." in number else 0
    return 0.5 * 10.0**-decimals


def scaled(number: str) -> float:
    factor = {"k": 1e3, "M": 1e6, "G": 1e9}.get(number[-1:], 1.0)
    return float(number.rstrip("kMG")) * factor
