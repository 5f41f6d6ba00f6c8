"""A trace's report (``scaldiag analyze``) for a terminal."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from scaldiag.analyze.categories import CATEGORIES
from scaldiag.analyze.profile import Transfers, UnitAnalysis
from scaldiag.render.terminal.common import add_row, bytes_text, columns, print_findings, text
from scaldiag.rules.report import Report


def render(report: Report, console: Console, framework: str | None = None) -> None:
    """``framework``: whose fix to show (default: the trace's; common.ALL_FIXES for every one)."""
    a = report.analysis
    console.print(text(f"scaldiag analyze: {a.run}", style="bold"))
    console.print(text(f"{', '.join(a.sources)}  ({a.event_count:,} events, framework: {a.framework})"))
    console.print(text(f"steps: {a.steps_description}"))
    for note in a.notes:
        console.print(text(f"note: {note}", style="dim"))
    console.print()
    console.print(text(report.verdict, style="bold"))
    console.print()
    if a.units:
        console.print(_step_table(a.units))
        console.print(_breakdown_table(a.units))
        if any(u.h2d is not None for u in a.units):
            console.print(_transfer_table(a.units))
        idlest = min(a.units, key=lambda u: u.busy_pct)
        if idlest.host_activity_while_idle:
            console.print(_activity_table(idlest))
    print_findings(console, report.findings, framework or a.framework)


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3f}"


def _pm(x: float) -> str:
    return "?" if math.isinf(x) or math.isnan(x) else f"{x:.1f}"


def _step_table(units: list[UnitAnalysis]) -> Table:
    table = Table(title="Step time (ms)", title_justify="left")
    columns(table, ("device", "steps", "mean", "±95%", "p50", "p90", "stdev", "busy %"), left=("device",))
    for u in units:
        s = u.step_time_ms
        add_row(table, u.name, str(u.steps), _ms(s.mean), _pm(s.ci95), _ms(s.p50), _ms(s.p90), _ms(s.stdev),
                      f"{u.busy_pct:.1f}")
    return table


def _breakdown_table(units: list[UnitAnalysis]) -> Table:
    table = Table(title="Per-step breakdown: exclusive % ±95% (exclusive ms / busy ms)", title_justify="left")
    table.add_column("category", overflow="fold")
    for u in units:
        table.add_column(text(u.name), justify="right", overflow="fold")
    for category in CATEGORIES:
        cells = []
        for u in units:
            t = u.categories[category]
            cells.append(f"{t.exclusive_pct:5.1f}% ±{_pm(t.exclusive_pct_ci95)} "
                         f"({t.exclusive_ms:.3f} / {t.busy_ms:.3f})")
        if any(u.categories[category].busy_ms > 0 for u in units):
            add_row(table, category, *cells)
    return table


def _copies(t: Transfers | None) -> str:
    if t is None:
        return "-"
    kinds = ", ".join(f"{k} {bytes_text(v)}" for k, v in t.bytes_by_host_kind.items())
    return f"{bytes_text(t.bytes_per_step)} in {t.count_per_step:.1f} copies" + (f" ({kinds})" if kinds else "")


def _transfer_table(units: list[UnitAnalysis]) -> Table:
    table = Table(title="Per step: copies and collectives", title_justify="left")
    columns(table, ("device", "H2D", "D2H", "collectives", "collective\nms"), left=("device", "H2D", "D2H"))
    for u in units:
        add_row(table, u.name, _copies(u.h2d), _copies(u.d2h), f"{u.collective_count_per_step:.1f}",
                      f"{u.categories['collective'].busy_ms:.3f}")
    return table


def _activity_table(u: UnitAnalysis) -> Table:
    work = "kernels or copies" if u.kind == "gpu" else "ops"
    table = Table(title=text(f"While {u.name} runs no {work} ({100 - u.busy_pct:.1f}% of the step), the host is in"),
                  title_justify="left")
    columns(table, ("host event (innermost)", "state", "thread-ms\nper step"), left=("host event (innermost)", "state"))
    for h in u.host_activity_while_idle:
        add_row(table, h.name, h.state, f"{h.ms_per_step:.3f}")
    return table
