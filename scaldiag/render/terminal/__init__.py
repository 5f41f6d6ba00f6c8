"""The terminal format (rich): one module per report kind, one entry point."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console

from scaldiag.render.terminal import run, sweep, trace
from scaldiag.rules.report import Report, RunReport, SweepReport

_BY_KIND = {Report: trace.render, RunReport: run.render, SweepReport: sweep.render}


def render(report: Report | RunReport | SweepReport, console: Console) -> None:
    _BY_KIND[type(report)](report, console)


def write(report: Report | RunReport | SweepReport, stream: TextIO | None = None, width: int | None = None) -> None:
    """The report on ``stream`` (default: stdout, colour when it is a terminal)."""
    render(report, Console(file=stream, width=width))
