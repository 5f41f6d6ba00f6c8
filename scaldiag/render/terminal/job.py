"""A job's report (``scaldiag report NODE_DIR NODE_DIR ...``) for a terminal: the clocks, a row per
node, the ranks, the findings."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from scaldiag.render.terminal.common import add_row, columns, print_findings, say, table
from scaldiag.rules.report import JobReport


def render(
    report: JobReport, console: Console, framework: str | None = None, verbose: bool = False
) -> None:
    a = report.analysis
    say(
        console,
        f"scaldiag job report: {len(a.nodes)} nodes, {a.ranks_per_node} rank(s) a node, "
        f"{a.matched_collectives} collectives matched on every rank",
        style="bold",
    )
    say(console, f"clocks (against {a.offsets[0].name}):")
    for o in a.offsets[1:]:
        say(
            console,
            f"{o.name}: "
            + (
                "not estimated"
                if o.offset_ns is None
                else (
                    f"offset {o.offset_ns / 1e6:+.3f} ms (spread {o.spread_ns / 1e3:.1f} us, "
                    f"{o.collectives} collective ends), corrected"
                )
            ),
            indent=2,
            hang=2,
        )
    for note in a.notes:
        say(console, f"note: {note}", style="dim")
    console.print(_steps(report))
    console.print(_collectives(report))
    say(console, "ranks: " + ", ".join(r for n in a.nodes for r in n.ranks))
    console.print()
    if report.findings:
        print_findings(console, report.findings, framework or report.framework, verbose)
    else:
        say(console, "Findings (0)", style="bold")
        say(console, "none about the job's nodes or the network between them")


def _ms(s, digits: int = 1) -> str:
    """mean ±95% of a per-step summary, as one unbreakable cell (a no-break space between them)."""
    if s is None or s.n == 0 or not math.isfinite(s.mean):
        return "-"
    spread = f"\u00a0±{s.ci95:.{digits}f}" if math.isfinite(s.ci95) else "\u00a0(one\u00a0step)"
    return f"{s.mean:.{digits}f}{spread}"


def _pct(value: float) -> str:
    return f"{value:.0f}%" if math.isfinite(value) else "-"  # no collective matched: no share


def _steps(report: JobReport) -> Table:
    t = table("Per node: the step, ms, mean ±95%")
    columns(
        t,
        ("node", "steady step", "traced step", "input", "late", "last at"),
        left=("node",),
        whole=("node",),
    )
    for n in report.analysis.nodes:
        add_row(
            t,
            n.node,
            _ms(n.steady_step_ms),
            _ms(n.step_ms),
            _ms(n.input_ms),
            _ms(n.lateness_ms),
            _pct(n.last_pct),
        )
    return t


def _collectives(report: JobReport) -> Table:
    t = table("Per node: collectives, ms a step, mean ±95%")
    columns(
        t, ("node", "all-reduce", "link", "exposed", "in-node"), left=("node",), whole=("node",)
    )
    for n in report.analysis.nodes:
        add_row(
            t, n.node, _ms(n.collective_ms), _ms(n.link_ms), _ms(n.exposed_ms), _ms(n.intra_node_ms)
        )
    return t
