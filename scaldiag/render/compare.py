"""A comparison of two runs or sweeps (``scaldiag compare``): the terminal table and its JSON."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from scaldiag.render.json import dumps
from scaldiag.render.terminal.common import add_row, text
from scaldiag.rules.compare import Change, Comparison


def _num(x: float | None, unit: str) -> str:
    if x is None:
        return "?"
    return f"{x:,.0f}" if unit == "samples/s" else f"{x:.1f}" if unit == "%" else f"{x:.3f}"


def _delta(c: Change) -> str:
    if c.delta is None:
        return "?"
    pct = f" ({c.delta_pct:+.1f}%)" if c.delta_pct is not None else ""
    return f"{c.delta:+,.3f}{pct}" if c.unit != "samples/s" else f"{c.delta:+,.0f}{pct}"


def _table(title: str, changes: list[Change]) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("", "before", "after", "change", ""):
        table.add_column(col, justify="left" if col == "" else "right")
    for c in changes:
        add_row(table, f"{c.metric} ({c.unit})", _num(c.before, c.unit), _num(c.after, c.unit), _delta(c), c.verdict)
    return table


def render(cmp: Comparison, console: Console) -> None:
    console.print(text(f"scaldiag compare: {cmp.before} -> {cmp.after}", style="bold"))
    for note in cmp.notes:
        console.print(text(f"note: {note}", style="dim"))
    console.print(_table("Side by side", cmp.changes))
    if cmp.categories:
        console.print(_table("Per-step time by category (exclusive, corrected to the untraced step)", cmp.categories))
    top = cmp.most_changed
    if top is not None:
        console.print(text(f"changed most: {top.metric}, {_num(top.before, top.unit)} -> {_num(top.after, top.unit)} "
                           f"{top.unit}, {_delta(top)}", style="bold"))
    for f in cmp.forecasts:
        measured = "not measured" if f.measured is None else (
            f"measured {f.measured:.2f}x: " + ("within the forecast range" if f.held else "outside the forecast range"))
        console.print(text(f"forecast {f.finding} ({f.title}): {f.predicted:.2f}x "
                           f"[{f.low:.2f}x-{f.high:.2f}x]; {measured}"))


def write(cmp: Comparison, stream=None, width: int | None = None) -> None:
    render(cmp, Console(file=stream, width=width))


def _change(c: Change) -> dict:
    return {"metric": c.metric, "unit": c.unit, "before": c.before, "after": c.after, "delta": c.delta,
            "delta_pct": c.delta_pct, "noise": c.noise, "verdict": c.verdict}


def to_json(cmp: Comparison) -> str:
    top = cmp.most_changed
    return dumps({"before": cmp.before, "after": cmp.after, "kind": cmp.kind,
                  "changes": [_change(c) for c in cmp.changes], "categories": [_change(c) for c in cmp.categories],
                  "most_changed": top.metric if top else None,
                  "forecasts": [{"finding": f.finding, "title": f.title, "predicted": f.predicted, "low": f.low,
                                 "high": f.high, "measured": f.measured, "held": f.held} for f in cmp.forecasts],
                  "notes": cmp.notes})
