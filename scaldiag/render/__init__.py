"""Renderers: a report object in, text out. They format; they never decide.

``FORMATS`` is the one table of output formats: a name and a
``write(report, stream, width=None, **views)`` that handles every report
kind (trace, run, sweep, job; the terminal and JSON also ``compare``'s comparison, ``check``'s,
``calibrate``'s and ``try``'s reports). A new format is one module and one entry here.

The views that draw timelines (``VIEW_FORMATS``) also take what the report
object does not hold, built by the command from the record
(analyze/timeline.py): ``timelines`` (each run's samples, steps and trace
events on one clock) and, for a sweep, ``runs`` (each run's own report).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from scaldiag.render import compare, html, json, perfetto, terminal
from scaldiag.rules.compare import Comparison


def _json_write(report, stream: TextIO | None = None, width: int | None = None, **views) -> None:
    """json.write, and a comparison's JSON (render/compare.py, which builds on json.py)."""
    if isinstance(report, Comparison):
        (stream or sys.stdout).write(compare.to_json(report))
    else:
        json.write(report, stream, width, **views)


FORMATS: dict[str, Callable[..., None]] = {
    "terminal": terminal.write,
    "json": _json_write,
    "html": html.write,
    "perfetto": perfetto.write,
}
VIEW_FORMATS = {"html", "perfetto"}  # they take ``timelines`` / ``runs`` too


def write(
    report, fmt: str, stream: TextIO | None = None, width: int | None = None, **views
) -> None:
    FORMATS[fmt](report, stream, width, **views)
