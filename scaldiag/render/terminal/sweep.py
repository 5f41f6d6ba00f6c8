"""A sweep's report for a terminal: the scaling table, where the speedup went, predictions."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from scaldiag.analyze.scaling import UNEXPLAINED, ScalingAnalysis
from scaldiag.render.terminal.common import add_row, columns, print_findings, text
from scaldiag.rules.report import SweepReport


def render(report: SweepReport, console: Console, framework: str | None = None) -> None:
    s = report.analysis
    console.print(text(f"scaldiag sweep: {report.sweep_dir}", style="bold"))
    kind = "emulated devices" if s.emulated else "GPUs"
    console.print(text(f"{s.mode} scaling over {kind}" + (" (per-replica batch fixed)" if s.mode == "weak" else
                                                   " (global batch fixed)" if s.mode == "strong" else "")))
    for note in s.notes:
        console.print(text(f"note: {note}", style="dim"))
    console.print(_table(s))
    for a in s.attribution:
        console.print(_waterfall(a))
    if s.validation:
        console.print(_validation(s))
    if s.predictions:
        console.print(_predictions(s))
    print_findings(console, report.findings, framework or report.framework)


def _validation(s: ScalingAnalysis) -> Table:
    table = Table(title=f"Predicted from the {s.validation[0].from_gpus}-device run alone, against measured",
                  title_justify="left")
    columns(table, ("devices", "predicted\nsamples/s", "measured\nsamples/s", "error"))
    for p in s.validation:
        add_row(table, str(p.gpus), f"{p.samples_per_s:,.0f}", _num(p.measured_samples_per_s, "{:,.0f}"),
                      _num(p.error_pct, "{:+.1f}%"))
    return table


def _predictions(s: ScalingAnalysis) -> Table:
    base = s.predictions[0].from_gpus
    assumptions = list(dict.fromkeys(a for p in s.predictions for a in p.assumptions))
    table = Table(title=f"Predicted from the {base}-device run (model: docs/scaling.md)",
                  caption=text("assumptions: " + "; ".join(assumptions)), caption_justify="left", title_justify="left")
    columns(table, ("devices", "step ms", "samples/s"))
    for p in s.predictions:
        add_row(table, str(p.gpus), f"{p.step_time_ms:.3f}", f"{p.samples_per_s:,.0f}")
    return table


def _num(x, fmt):
    return "?" if x is None else fmt.format(x)


def _table(s: ScalingAnalysis) -> Table:
    table = Table(title="Scaling", title_justify="left")
    columns(table, ("devices", "runs", "per-\nreplica\nbatch", "global\nbatch", "step ms\n±95%", "samples/s",
                    "speedup\n±95%", "effi-\nciency"))
    for p in s.points:
        speedup = "?" if p.speedup is None else f"{p.speedup:.2f}x ±{p.speedup_ci95:.2f}"
        add_row(table, str(p.gpus), str(p.runs), _num(p.per_replica_batch, "{:g}"), _num(p.global_batch, "{}"),
                      f"{p.step_time_ms:.3f} ±{p.step_time_ci95_ms:.3f}", _num(p.samples_per_s, "{:,.0f}"),
                      speedup, _num(p.efficiency, "{:.0%}"))
    return table


def _waterfall(a) -> Text:
    line = Text(f"{a.gpus} devices: ideal {a.ideal:.2f}x")
    for cause in a.causes:
        if abs(cause.lost_speedup) < 0.005:
            continue
        name = "unexplained (no trace event)" if cause.category == UNEXPLAINED else cause.category
        sign = "-" if cause.lost_speedup >= 0 else "+"
        noise = " (within noise)" if cause.within_noise else ""
        style = "dim" if cause.within_noise else ("red" if cause.lost_speedup > 0 else "green")
        line.append(f" {sign} {abs(cause.lost_speedup):.2f}x {name}{noise}", style=style)
    line.append(f" = {a.measured:.2f}x measured", style="bold")
    return line
