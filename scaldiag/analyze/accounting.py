"""Whole-run accounting: every second from launch to exit in exactly one part.

The parts are painted in priority order: a part's intervals count only where
no earlier part already claimed the time, so they are disjoint and, with
``other`` taking the rest, sum to the wall time exactly. The step parts come
from the classified step periods (``recorded_steps``), the others from the marks
the bootstrap and the callback write (``marks.jsonl``) and the launcher's
start and end. *Goodput* is steady training time over the user's wall
time: the run's wall time less scaldiag's own measurements after training
(the input-ceiling and input-free measurements, shown as scaldiag's).

The wait for the device at an epoch's end is inside the epoch's last step
(``recorded_steps``): it is the device finishing training work, so it is training.
The epoch's edges (its iterator starting before its first step, callbacks
after its last) are not: they are the epoch boundaries part.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scaldiag.analyze import intervals as iv
from scaldiag.analyze import recorded_steps
from scaldiag.record.run_json import RunJson

STEADY = "steady training steps"
# Parts that are scaldiag's own work, not the user's: outside goodput's wall.
OWN = ("input-ceiling measurement", "input-free measurement")
PARTS = (  # (part, what it covers), highest priority first
    ("profiler window", "steps traced, and the profiler starting and stopping"),
    ("compilation and warm-up", "the first steps and any retrace"),
    (
        "input prefetch",
        "steps on the batches DataLoader workers made ahead during the warm-up or the window",
    ),
    (STEADY, "steady steps, the device's catch-up at each epoch's end included"),
    ("sanity check", "the loop's sanity check before training (Lightning's)"),
    ("checkpoints", "checkpoint saves inside the loop (the loop's adapter marks them)"),
    ("validation", "validation inside fit, evaluation inside the loop"),
    ("input-ceiling measurement", "scaldiag iterating the input alone after training"),
    (
        "input-free measurement",
        "scaldiag timing a clone of the model on one cached batch after training",
    ),
    ("fit start-up", "from fit's start to its first step"),
    (
        "epoch boundaries",
        "inside fit between steps: an epoch's iterator starting, epoch-end callbacks",
    ),
    ("interpreter and scaldiag start", "launch to the script's first line"),
    ("imports", "the script's first line to Keras imported"),
    ("script before fit", "framework and device start, data, model build"),
    ("teardown", "the script's end to the launcher's end: interpreter exit, profiler flush"),
    ("script outside fit", "after fit, or between fits: evaluation, saving"),
    ("other", "time no mark or step explains"),
)


# The parts in PyTorch's words (part_name): a PyTorch script runs its own training loop, not
# Keras's fit, and an eager one compiles nothing (its first steps are warm-up: the CUDA context,
# cuDNN's autotuning, the caching allocator growing).
PYTORCH_NAMES = {
    "compilation and warm-up": "warm-up steps",
    "fit start-up": "loop start-up (to the first step)",
    "epoch boundaries": "in the loop, between steps",
    "script before fit": "script before the training loop",
    "script outside fit": "script outside the training loop",
}
PYTORCH_COMPILED = "torch.compile and warm-up"


def part_name(part: str, framework: str, compiled: bool = False) -> str:
    """A part's name as a report shows it: the JSON keeps the PARTS names; a PyTorch run reads
    its own words, and "torch.compile" only where the run compiled."""
    if framework != "pytorch":
        return part
    if part == "compilation and warm-up" and compiled:
        return PYTORCH_COMPILED
    return PYTORCH_NAMES.get(part, part)


@dataclass(frozen=True)
class Part:
    part: str
    seconds: float


@dataclass(frozen=True)
class Accounting:
    wall_s: float
    parts: list[Part]

    @property
    def own_s(self) -> float:
        """scaldiag's own measurements after training: not the user's time."""
        return sum(p.seconds for p in self.parts if p.part in OWN)

    @property
    def user_wall_s(self) -> float:
        return self.wall_s - self.own_s

    @property
    def goodput(self) -> float | None:
        steady = next((p.seconds for p in self.parts if p.part == STEADY), 0.0)
        return steady / self.user_wall_s if self.user_wall_s > 0 else None


def account(
    run: RunJson, marks: list[dict], found: list[recorded_steps.Period]
) -> Accounting | None:
    """The run's wall time split into PARTS, or None when the run has no start time."""
    start = run.started_ns
    if start is None:
        return None
    times = [m["t_ns"] for m in marks] + [p.end_ns for p in found]
    end = run.ended_ns if run.ended_ns is not None else max(times, default=start)
    if end <= start:
        return None
    claimed = iv.EMPTY
    parts = []
    for name, _ in PARTS:
        spans = (
            iv.union(*_spans(name, start, end, marks, found))
            if name != "other"
            else (np.array([start], np.int64), np.array([end], np.int64))
        )
        spans = iv.subtract(_clip(spans, start, end), claimed)
        seconds = float(np.sum(spans[1] - spans[0])) / 1e9
        claimed = iv.merge(claimed, spans)
        if seconds > 0:
            parts.append(Part(name, seconds))
    return Accounting(wall_s=(end - start) / 1e9, parts=parts)


def _spans(name: str, start: int, end: int, marks: list[dict], found: list[recorded_steps.Period]):
    kinds = {
        "profiler window": (recorded_steps.TRACED,),
        "compilation and warm-up": (recorded_steps.WARMUP, recorded_steps.COMPILE),
        "input prefetch": (recorded_steps.PREFETCHED,),
        STEADY: (recorded_steps.STEADY,),
    }
    if name in kinds:
        chosen = [p for p in found if p.kind in kinds[name]]
        pairs = [(p.begin_ns, p.end_ns) for p in chosen]
        if name == "profiler window":
            pairs += recorded_steps.mark_pairs(
                marks, "trace_start", "trace_started"
            ) + recorded_steps.mark_pairs(marks, "trace_stop", "trace_stopped")
        return _arrays(pairs)
    if name in _TEST_KINDS:
        kind = _TEST_KINDS[name]
        tests = [
            m
            for m in marks
            if m.get("mark") in ("test_begin", "test_end")
            and (kind is None or m.get("kind") == kind)
        ]
        return _arrays(recorded_steps.mark_pairs(tests, "test_begin", "test_end"))
    if name == "input-ceiling measurement":
        return _arrays(recorded_steps.mark_pairs(marks, "ceiling_begin", "ceiling_end"))
    if name == "input-free measurement":
        return _arrays(recorded_steps.mark_pairs(marks, "input_free_begin", "input_free_end"))
    fits = recorded_steps.mark_pairs(marks, "fit_begin", "fit_end", open_end=end)
    if name == "fit start-up":
        return _arrays(
            [
                (a, min([p.begin_ns for p in found if a <= p.begin_ns < b], default=b))
                for a, b in fits
            ]
        )
    if name == "epoch boundaries":
        return _arrays(fits)
    first = {m["mark"]: m["t_ns"] for m in reversed(marks)}  # the first time of each mark
    script_begin, script_end = first.get("script_begin"), _last(marks, "script_end")
    fit_begin = fits[0][0] if fits else None
    if name == "interpreter and scaldiag start":
        return _arrays([(start, script_begin)] if script_begin else [])
    if name == "imports":
        imported = first.get("keras_imported")
        return _arrays([(script_begin, imported)] if script_begin and imported else [])
    if name == "script before fit":
        begin = first.get("keras_imported") or script_begin
        return _arrays([(begin, fit_begin)] if begin and fit_begin else [])
    if name == "teardown":
        return _arrays([(script_end, end)] if script_end else [])
    if name == "script outside fit":
        return _arrays([(script_begin, script_end or end)] if script_begin else [])
    raise ValueError(name)


# The parts of the loop's ``test_begin``/``test_end`` marks by their kind (an adapter's): the ones
# named here first, the rest (Keras's validation, PyTorch's model.eval()) validation.
_TEST_KINDS = {"sanity check": "sanity check", "checkpoints": "checkpoint", "validation": None}


def _last(marks: list[dict], name: str) -> int | None:
    return next((m["t_ns"] for m in reversed(marks) if m["mark"] == name), None)


def _arrays(pairs):
    pairs = [(a, b) for a, b in pairs if a is not None and b is not None and b > a]
    return (np.array([a for a, _ in pairs], np.int64), np.array([b for _, b in pairs], np.int64))


def _clip(spans, start: int, end: int):
    s, e = np.clip(spans[0], start, end), np.clip(spans[1], start, end)
    keep = e > s
    return s[keep], e[keep]
