"""A trace's report (``scaldiag analyze``) for a terminal."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from scaldiag.analyze.categories import CATEGORIES
from scaldiag.analyze.profile import Transfers, UnitAnalysis
from scaldiag.render.terminal.common import (
    Keep,
    add_row,
    bytes_text,
    columns,
    headline,
    inert,
    own,
    print_findings,
    say,
    table,
    text,
)
from scaldiag.rules.report import Report, top_cause


def render(
    report: Report,
    console: Console,
    framework: str | None = None,
    verbose: bool = False,
    findings: bool = True,
) -> None:
    """``framework``: whose fix to show (default: the trace's). ``verbose``: every finding's
    evidence, notes and fix. ``findings``: False where the run report shows them with its own. A
    trace's report (``analyze``) keeps its tables by default: it is what the command is for."""
    a = report.analysis
    say(console, f"scaldiag analyze: {a.run}", style="bold")
    say(console, f"({a.event_count:,} events, framework: {a.framework}) from:")
    for source in a.sources:
        own(console, source)
    say(console, f"steps: {a.steps_description}")
    for note in a.notes:
        say(console, f"note: {note}", style="dim")
    if findings:
        console.print()
        headline(console, report)
    console.print()
    if a.units:
        console.print(_step_table(a.units))
        console.print(_breakdown_table(a.units))
        if any(u.h2d is not None for u in a.units):
            console.print(_transfer_table(a.units))
        idlest = min(a.units, key=lambda u: u.busy_pct)
        if idlest.host_activity_while_idle:
            _activity(idlest, console)
    if findings:
        console.print()
        print_findings(
            console,
            report.findings,
            framework or a.framework,
            verbose,
            headlined=top_cause(report.findings),
        )


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3f}"


def _pm(x: float) -> str:
    return "?" if math.isinf(x) or math.isnan(x) else f"{x:.1f}"


def _step_table(units: list[UnitAnalysis]) -> Table:
    t = table("Step time (ms)")
    columns(
        t,
        ("device", "steps", "mean", "±95%", "p50", "p90", "stdev", "busy %"),
        left=("device",),
        whole=("device",),
    )
    for u in units:
        s = u.step_time_ms
        add_row(
            t,
            u.name,
            str(u.steps),
            _ms(s.mean),
            _pm(s.ci95),
            _ms(s.p50),
            _ms(s.p90),
            _ms(s.stdev),
            f"{u.busy_pct:.1f}",
        )
    return t


def _breakdown_table(units: list[UnitAnalysis]) -> Table:
    t = table("Per-step breakdown: exclusive % ±95% (exclusive ms / busy ms)")
    t.add_column("category", overflow="fold")
    for u in units:
        t.add_column(text(u.name), justify="right", overflow="fold")
    for category in CATEGORIES:
        cells = []
        for u in units:
            c = u.categories[category]
            cells.append(
                f"{c.exclusive_pct:5.1f}% ±{_pm(c.exclusive_pct_ci95)} "
                f"({c.exclusive_ms:.3f} / {c.busy_ms:.3f})"
            )
        if any(u.categories[category].busy_ms > 0 for u in units):
            add_row(t, category, *cells)
    return t


def _pageable(t: Transfers | None) -> str:
    """The share of a direction's bytes copied from pageable host memory (which cannot overlap
    compute)."""
    if t is None or not t.bytes_per_step or not t.bytes_by_host_kind:
        return "-"
    return f"{100 * t.bytes_by_host_kind.get('pageable', 0.0) / t.bytes_per_step:.0f}%"


def _transfer_table(units: list[UnitAnalysis]) -> Table:
    """Short cells only, so that no cell wraps at 80 columns (a wrapped cell parts a number from its
    unit)."""
    t = table("Per step: copies and collectives")
    columns(
        t,
        (
            "device",
            "H2D\nbytes",
            "H2D\ncopies",
            "page-\nable",
            "D2H\nbytes",
            "D2H\ncopies",
            "collec-\ntives",
            "collec-\ntive ms",
        ),
        left=("device",),
        whole=("device",),
    )
    for u in units:
        h, d = u.h2d, u.d2h
        add_row(
            t,
            u.name,
            "-" if h is None else bytes_text(h.bytes_per_step),
            "-" if h is None else f"{h.count_per_step:.1f}",
            _pageable(h),
            "-" if d is None else bytes_text(d.bytes_per_step),
            "-" if d is None else f"{d.count_per_step:.1f}",
            f"{u.collective_count_per_step:.1f}",
            f"{u.categories['collective'].busy_ms:.3f}",
        )
    return t


def _activity(u: UnitAnalysis, console: Console) -> None:
    """What the host does while the device waits, one event a line: a name (a trace's, often long)
    is never folded: it moves whole under the line's numbers where it does not fit beside them."""
    work = "kernels or copies" if u.kind == "gpu" else "ops"
    say(
        console,
        f"While {inert(u.name)} runs no {work} ({100 - u.busy_pct:.1f}% of the step), the host is"
        " in (thread-ms per step, state, innermost host event)",
        style="bold",
    )
    state_width = max(len(h.state) for h in u.host_activity_while_idle)
    for h in u.host_activity_while_idle:
        say(console, Keep(f"{h.ms_per_step:9.3f}  {h.state:<{state_width}}"), Keep(h.name), hang=4)
