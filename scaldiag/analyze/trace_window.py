"""The trace window as it ran: the steps planned and traced, what ended it, and its wall time.

From training.json's ``trace`` (collect/recorder.py, collect/trace_budget.py), the recorded steps'
``traced`` flags and the profiler's marks. The window is planned in steps and bounded in time; where
a bound ended it short of its plan, or the training ended first, the report says how few steps it
had (render/words.py ``trace_window``)."""

from __future__ import annotations

from dataclasses import dataclass

PLAN = "plan"  # collect/trace_budget.py's words, as the record holds them


@dataclass(frozen=True)
class TraceWindow:
    planned_steps: int
    traced_steps: int
    # "plan", "time limit", "share of the run", "training ended"; None: unknown
    ended_by: str | None
    limit_s: float | None  # the window's bounds, as they were set
    share: float | None
    seconds: float | None  # the profiler's start to its stop, from the marks (its export included)
    wall_s: float | None  # the run's wall, for the window's share of it
    traced_s: float = 0.0  # the traced steps' own time, begin to end (what the bounds bound)

    @property
    def short(self) -> bool:
        """Fewer steps traced than planned."""
        return self.traced_steps < self.planned_steps

    @property
    def past_bound(self) -> bool:
        """The traced steps took longer than a bound allows: a step longer than the bound, which
        ran whole (a window ends only at a step's end)."""
        over_limit = self.limit_s is not None and self.traced_s > self.limit_s
        over_share = (
            self.share is not None and self.wall_s and self.traced_s > self.share * self.wall_s
        )
        return bool(over_limit or over_share)


def trace_window(
    training: dict, steps: list[dict], marks: list[dict], wall_s: float | None
) -> TraceWindow | None:
    """The window, or None where none was planned or none began."""
    trace = training.get("trace")
    planned = training.get("trace_steps")
    if not isinstance(trace, dict) or not isinstance(planned, int) or planned <= 0:
        return None
    ended_by = trace.get("ended_by")
    return TraceWindow(
        planned_steps=int(trace.get("planned_steps", planned)),
        traced_steps=sum(1 for s in steps if s.get("traced")),
        ended_by=ended_by if isinstance(ended_by, str) else None,
        limit_s=_number(trace.get("limit_s")),
        share=_number(trace.get("share")),
        seconds=_seconds(marks),
        wall_s=wall_s,
        traced_s=sum(s["end_ns"] - s["begin_ns"] for s in steps if s.get("traced")) / 1e9,
    )


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _seconds(marks: list[dict]) -> float | None:
    """From the first ``trace_start`` mark to the first ``trace_stopped`` after it."""
    start = next((m["t_ns"] for m in marks if m.get("mark") == "trace_start"), None)
    if start is None:
        return None
    stop = next(
        (m["t_ns"] for m in marks if m.get("mark") == "trace_stopped" and m["t_ns"] >= start), None
    )
    return (stop - start) / 1e9 if stop is not None else None
