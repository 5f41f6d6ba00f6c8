"""A comparison of two runs or sweeps (``scaldiag compare``): the terminal table and its JSON."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from scaldiag.render import ranges
from scaldiag.render.json import dumps, pick, tried_dict
from scaldiag.render.terminal.common import Keep, add_row, inert, labelled, say, table
from scaldiag.render.words import tried_words
from scaldiag.rules.compare import Change, Comparison, Forecast


def _num(x: float | None, unit: str) -> str:
    if x is None:
        return "?"
    return f"{x:,.0f}" if unit == "samples/s" else f"{x:.1f}" if unit == "%" else f"{x:.3f}"


def _delta(c: Change) -> str:
    if c.delta is None:
        return "?"
    pct = f" ({c.delta_pct:+.1f}%)" if c.delta_pct is not None else ""
    return f"{c.delta:+,.3f}{pct}" if c.unit != "samples/s" else f"{c.delta:+,.0f}{pct}"


def _noise(c: Change) -> str:
    n = c.noise_pct
    return "-" if n is None else f"±{n:.1f}%"


def _table(title: str, changes: list[Change]) -> Table:
    t = table(title)
    for col in ("", "before", "after", "change", "noise", "verdict"):
        t.add_column(col, justify="left" if col in ("", "verdict") else "right", overflow="fold")
    for c in changes:
        change = (
            "?"
            if c.delta is None
            else f"{c.delta_pct:+.1f}%"
            if c.delta_pct is not None
            else _delta(c)
        )
        # "same" in the table is always within the noise or equal: the column beside it says which.
        add_row(
            t,
            f"{c.metric}, {c.unit}",
            _num(c.before, c.unit),
            _num(c.after, c.unit),
            change,
            _noise(c),
            c.verdict.removesuffix(" (within noise)"),
        )
    return t


def forecast_words(f: Forecast) -> list[str | Keep]:
    """A finding's speed-up and what B measured against it, in the run report's words
    (render/ranges.py)."""
    said = f"{f.finding} ({f.title}): {f.kind}"
    number = Keep(ranges.speedup(f.predicted, f.low, f.high, f.kind) + ";")
    if f.measured is None:
        return [said, number, *_then_tried("the speed-up was not measured", f.tried)]
    where = (
        ("under it" if f.held else "above it: the ceiling did not hold")
        if f.kind == "ceiling"
        else ("inside its range" if f.held else "outside its range")
    )
    return [said, number, "measured", Keep(f"{f.measured:.2f}x:"), *_then_tried(where, f.tried)]


def _then_tried(last: str, t: dict | None) -> list[str]:
    """The line's last words, then `scaldiag try`'s measurement of the same finding on the first
    run where there is one; try.json is a file anyone could write, so its words are shown inert (as
    `report` does)."""
    if not t:
        return [last]
    return [f"{last};", "scaldiag try on the first run:", inert(tried_words(t))]


def render(cmp: Comparison, console: Console) -> None:
    say(console, "scaldiag compare", style="bold")
    labelled(console, "before:", cmp.before)
    labelled(console, "after:", cmp.after)
    for note in cmp.notes:
        say(console, f"note: {note}", style="dim")
    console.print(_table("Side by side (noise: the 95% half-width of the change)", cmp.changes))
    if cmp.categories:
        console.print(
            _table(
                "Per-step time by category (exclusive, corrected to the untraced step)",
                cmp.categories,
            )
        )
    top = cmp.most_changed
    if top is not None:
        say(
            console,
            "changed most:",
            Keep(f"{top.metric},"),
            Keep(f"{_num(top.before, top.unit)} -> {_num(top.after, top.unit)} {top.unit},"),
            Keep(_delta(top)),
            style="bold",
        )
    for f in cmp.forecasts:
        say(console, *forecast_words(f))


def write(cmp: Comparison, stream=None, width: int | None = None) -> None:
    render(cmp, Console(file=stream, width=width))


# A comparison shown in a page that is not ours (a notebook's output): the terminal's text, its
# colours as inline styles (no stylesheet to leak into the page), in one <pre>.
_HTML_PRE = (
    '<pre class="scaldiag-compare" style="font-family:Menlo,\'DejaVu Sans Mono\',consolas,'
    'monospace;font-size:12.5px;line-height:1.35;white-space:pre;overflow-x:auto">'
    "<code>{code}</code></pre>"
)


def to_html(cmp: Comparison, width: int = 110) -> str:
    """The terminal report as HTML: rich's own export of what it printed (it escapes the text);
    never rich's own Jupyter display, which in a kernel showed each line as an output of its own."""
    console = Console(
        record=True, width=width, file=io.StringIO(), color_system="truecolor", force_jupyter=False
    )
    render(cmp, console)
    return console.export_html(inline_styles=True, code_format=_HTML_PRE)


# A Change's public keys, in output order.
_KEYS = ("metric", "unit", "before", "after", "delta", "delta_pct", "noise", "noise_pct", "verdict")


def to_json(cmp: Comparison) -> str:
    top = cmp.most_changed
    return dumps(
        {
            "before": cmp.before,
            "after": cmp.after,
            "kind": cmp.kind,
            "changes": [pick(c, _KEYS) for c in cmp.changes],
            "categories": [pick(c, _KEYS) for c in cmp.categories],
            "most_changed": top.metric if top else None,
            "forecasts": [
                {
                    "finding": f.finding,
                    "title": f.title,
                    "predicted": f.predicted,
                    "low": f.low,
                    "high": f.high,
                    "kind": f.kind,
                    "measured": f.measured,
                    "held": f.held,
                    "said": ranges.speedup(f.predicted, f.low, f.high, f.kind),
                    "tried": tried_dict(f.tried),  # run A's `scaldiag try` of this finding
                }
                for f in cmp.forecasts
            ],
            "notes": cmp.notes,
        }
    )
