"""A sweep's report for a terminal: the scaling table, where the speedup went, predictions."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from scaldiag.analyze.scaling import UNEXPLAINED, ScalingAnalysis
from scaldiag.render import ranges
from scaldiag.render.terminal.common import (
    Keep,
    add_row,
    columns,
    labelled,
    print_findings,
    say,
    table,
)
from scaldiag.rules.report import SweepReport


def render(
    report: SweepReport, console: Console, framework: str | None = None, verbose: bool = False
) -> None:
    s = report.analysis
    labelled(console, "scaldiag sweep:", report.sweep_dir, style="bold")
    kind = "emulated devices" if s.emulated else "GPUs"
    say(
        console,
        f"{s.mode} scaling over {kind}"
        + (
            " (per-replica batch fixed)"
            if s.mode == "weak"
            else " (global batch fixed)"
            if s.mode == "strong"
            else ""
        ),
    )
    for note in s.notes:
        say(console, f"note: {note}", style="dim")
    console.print(_table(s))
    for a in s.attribution:
        _waterfall(a, console)
    if s.validation:
        console.print(_validation(s))
    if s.predictions:
        console.print(_predictions(s))
        assumptions = list(dict.fromkeys(a for p in s.predictions for a in p.assumptions))
        say(console, "assumptions: " + "; ".join(assumptions), style="dim")
    console.print()
    print_findings(console, report.findings, framework or report.framework, verbose)


def _validation(s: ScalingAnalysis) -> Table:
    t = table(f"Predicted from the {s.validation[0].from_gpus}-device run alone vs measured")
    columns(t, ("devices", "predicted\nsamples/s", "measured\nsamples/s", "error"))
    for p in s.validation:
        add_row(
            t,
            str(p.gpus),
            f"{p.samples_per_s:,.0f}",
            _num(p.measured_samples_per_s, "{:,.0f}"),
            _num(p.error_pct, "{:+.1f}%"),
        )
    return t


def _predictions(s: ScalingAnalysis) -> Table:
    base = s.predictions[0].from_gpus
    t = table(f"Predicted from the {base}-device run (model: docs/scaling.md)")
    columns(t, ("devices", "step ms", "samples/s", "95% range"))
    for p in s.predictions:
        add_row(
            t,
            str(p.gpus),
            f"{p.step_time_ms:.3f}",
            f"{p.samples_per_s:,.0f}",
            ranges.interval(p.samples_per_s_low, p.samples_per_s_high)
            if p.samples_per_s_low is not None
            else "",
        )
    return t


def _num(x, fmt):
    return "?" if x is None else fmt.format(x)


def _table(s: ScalingAnalysis) -> Table:
    t = table("Scaling")
    columns(
        t,
        (
            "devices",
            "runs",
            "per-\nreplica\nbatch",
            "global\nbatch",
            "step ms\n±95%",
            "samples/s",
            "speedup\n±95%",
            "effi-\nciency",
        ),
    )
    for p in s.points:
        speedup = "?" if p.speedup is None else f"{p.speedup:.2f}x ±{p.speedup_ci95:.2f}"
        add_row(
            t,
            str(p.gpus),
            str(p.runs),
            _num(p.per_replica_batch, "{:g}"),
            _num(p.global_batch, "{}"),
            ranges.spread(p.step_time_ms, p.step_time_ci95_ms),
            _num(p.samples_per_s, "{:,.0f}"),
            speedup,
            _num(p.efficiency, "{:.0%}"),
        )
    return t


def _waterfall(a, console: Console) -> None:
    """The ideal speedup, each cause's lost (or won) share of it, the measured one: a cause never
    broken."""
    parts = [f"{a.gpus} devices:", Keep(f"ideal {a.ideal:.2f}x")]
    for cause in a.causes:
        if abs(cause.lost_speedup) < 0.005:
            continue
        name = "unexplained (no trace event)" if cause.category == UNEXPLAINED else cause.category
        sign = "-" if cause.lost_speedup >= 0 else "+"
        noise = " (within noise)" if cause.within_noise else ""
        style = "dim" if cause.within_noise else ("red" if cause.lost_speedup > 0 else "green")
        parts.append(Keep(f"{sign} {abs(cause.lost_speedup):.2f}x {name}{noise}", style))
    parts.append(Keep(f"= {a.measured:.2f}x measured", "bold"))
    say(console, *parts)
