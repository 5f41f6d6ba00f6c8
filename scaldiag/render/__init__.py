"""Renderers: a report object in, text out. They format; they never decide.

``FORMATS`` is the one table of output formats: a name and a
``write(report, stream, width=None)`` that handles every report kind
(trace, run, sweep). A new format (HTML, Perfetto) is one module and one
entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from scaldiag.render import json, terminal

FORMATS: dict[str, Callable[..., None]] = {
    "terminal": terminal.write,
    "json": json.write,
}


def write(report, fmt: str, stream: TextIO | None = None, width: int | None = None) -> None:
    FORMATS[fmt](report, stream, width)
