"""The terminal format (rich): one module per report kind, one entry point."""

from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console

from scaldiag.analyze.interconnect import CalibrationReport
from scaldiag.analyze.try_stats import TryReport
from scaldiag.render import compare
from scaldiag.render.terminal import job, plain, run, sweep, trace
from scaldiag.render.words import tried_words
from scaldiag.rules.check import CheckReport
from scaldiag.rules.compare import Comparison
from scaldiag.rules.report import JobReport, Report, RunReport, SweepReport

_BY_KIND = {
    Report: trace.render,
    RunReport: run.render,
    SweepReport: sweep.render,
    JobReport: job.render,
}
# The reports that are plain lines (``check`` for CI logs, ``calibrate``'s table, ``try``'s result):
# written as they are, no rich layout.
_LINES = {
    CheckReport: plain.check_lines,
    CalibrationReport: plain.calibration_lines,
    TryReport: lambda report: [tried_words(report.result)],
}


class _Console(Console):
    """rich's console, but a reader gone away (``| head``) raises BrokenPipeError for the command to
    take, where rich exits 1 (``SystemExit``): a closed stdout is not an error, and under
    ``profile`` the exit code is the script's."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError("the reader of the output has gone")


def render(
    report: Report | RunReport | SweepReport | JobReport, console: Console, all_fixes: bool = False
) -> None:
    """``all_fixes`` (``--verbose``): the whole report, every framework's fix; else one screen."""
    if isinstance(report, Comparison):
        compare.render(report, console)
        return
    # The detected framework's fix; with --verbose its family's too (common.FAMILIES: a PyTorch run
    # reads PyTorch's words only). Where the framework is unknown, every framework's fix.
    _BY_KIND[type(report)](report, console, None, verbose=all_fixes)


def write(
    report: Report | RunReport | SweepReport | JobReport,
    stream: TextIO | None = None,
    width: int | None = None,
    all_fixes: bool = False,
    **_views,
) -> None:
    """The report on ``stream`` (default: stdout, colour when it is a terminal, none with NO_COLOR).

    ``all_fixes`` (``--verbose``): the whole report, not one screen, and the fixes of the detected
    framework's family (both Keras backends; PyTorch alone). The views (``timelines``...) are the
    timeline formats'; the terminal draws none."""
    if type(report) in _LINES:
        (stream or sys.stdout).write("".join(f"{text}\n" for text in _LINES[type(report)](report)))
        return
    render(report, _Console(file=stream, width=width), all_fixes)
