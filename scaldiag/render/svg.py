"""Small inline SVG charts for the HTML report: lines, stacked bars, error bars, a waterfall.

Generated here rather than by a plotting library: no dependency, no script in
the page, a few kilobytes per chart. Every label is escaped (``esc``).
Charts are drawn in a fixed ``viewBox`` and scale to the page width.
"""

from __future__ import annotations

import math
from html import escape

from scaldiag.sanitize import text as inert

# One colour per step-time category, the same in every chart.
CATEGORY_COLOURS = {
    "compute": "#4c78a8",
    "layout": "#b279a2",
    "collective": "#f58518",
    "h2d": "#e45756",
    "d2h": "#ff9da6",
    "other": "#9d755d",
    "input": "#54a24b",
    "host_overhead": "#eeca3b",
    "idle": "#bab0ac",
    "unexplained": "#bab0ac",
}
LINE_COLOURS = (
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#e45756",
    "#b279a2",
    "#72b7b2",
    "#9d755d",
    "#eeca3b",
)

W, H = 720, 220  # viewBox of a chart
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 30, 34
LEGEND_Y = 2  # the legend sits above the plot area
LEGEND_ROW = 13  # px between legend rows (11 px text)
FONT_PX = 11


def esc(value: object) -> str:
    """``value`` for HTML and SVG: escaped, and inert: controls and bidirectional marks shown as
    escapes, as on the terminal (sanitize.py; a record's ESC, BEL and U+202E reached the page
    raw)."""
    return escape(inert(value), quote=True)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        return [0.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    ticks = [round(first, 12)]
    while ticks[-1] < hi - step * 1e-9 or len(ticks) < 2:
        ticks.append(round(first + len(ticks) * step, 12))
    return ticks


# Glyph widths in em of the widest common sans-serif a browser falls back to (DejaVu Sans, wider
# than Arial or Helvetica): a label laid out with them never runs into the next one, whatever
# font the reader's system picks. The browser test measures the boxes the page really gets.
_NARROW, _WIDE, _UPPER, _OTHER = 0.34, 0.98, 0.76, 0.64


def text_width(text: str, font_px: float = FONT_PX) -> float:
    """An upper estimate of the width ``text`` takes at ``font_px``."""
    em = 0.0
    for ch in text:
        if ch in "iljtf.,:;'|!()[] ":
            em += _NARROW
        elif ch in "mwMW%@":
            em += _WIDE
        elif ch.isupper():
            em += _UPPER
        else:
            em += _OTHER
    return em * font_px


def fit(text: str, width_px: float, font_px: float = FONT_PX) -> str:
    """``text`` cut (with an ellipsis) to fit ``width_px``."""
    if text_width(text, font_px) <= width_px:
        return text
    while text and text_width(text + "…", font_px) > width_px:
        text = text[:-1]
    return text + "…"


def two_lines(text: str, width_px: float, font_px: float = FONT_PX) -> list[str]:
    """``text`` on one line if it fits ``width_px``, else on two: split at the ``_`` or space
    nearest its middle (a word without one is split with a hyphen), each line cut to fit if it still
    does not.
    """
    if text_width(text, font_px) <= width_px:
        return [text]
    cuts = [i for i, ch in enumerate(text) if ch in "_ " and 0 < i < len(text) - 1]
    if cuts:
        i = min(cuts, key=lambda c: abs(c - len(text) / 2))
        first, second = text[: i + (text[i] == "_")], text[i + 1 :]
    else:
        i = (len(text) + 1) // 2
        first, second = text[:i] + "-", text[i:]
    return [fit(first, width_px, font_px), fit(second, width_px, font_px)]


def fmt_number(x: float) -> str:
    """Tick labels: 1.5k, 2M, 0.25."""
    a = abs(x)
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= scale:
            return f"{x / scale:g}{suffix}"
    return f"{x:g}"


class Frame:
    """Axes: data coordinates to the viewBox. ``top``: where the plot area starts (below the
    legend)."""

    def __init__(self, x0, x1, y0, y1, width=W, height=H, top=TOP):
        self.x0, self.x1 = x0, (x1 if x1 > x0 else x0 + 1)
        self.y0, self.y1 = y0, (y1 if y1 > y0 else y0 + 1)
        self.width, self.height, self.top = width, height + (top - TOP), top

    def x(self, v: float) -> float:
        return LEFT + (v - self.x0) / (self.x1 - self.x0) * (self.width - LEFT - RIGHT)

    def y(self, v: float) -> float:
        return (
            self.height
            - BOTTOM
            - (v - self.y0) / (self.y1 - self.y0) * (self.height - self.top - BOTTOM)
        )


def _svg(frame: Frame, body: list[str], title: str, kind: str) -> str:
    return (
        f'<svg class="chart" data-kind="{esc(kind)}" viewBox="0 0 {frame.width} {frame.height}" '
        f'role="img" xmlns="http://www.w3.org/2000/svg"><title>{esc(title)}</title>'
        + "".join(body)
        + "</svg>"
    )


def _axes(
    f: Frame, xticks, yticks, x_label: str, y_label: str, x_fmt=fmt_number, y_fmt=fmt_number
) -> list[str]:
    out = ['<g class="axes" font-size="11" fill="#444">']
    for t in yticks:
        y = f.y(t)
        out.append(
            f'<line x1="{LEFT}" x2="{f.width - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{esc(y_fmt(t))}</text>'
        )
    for t in xticks:
        x = f.x(t)
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{f.height - BOTTOM}" y2="{f.height - BOTTOM + 4}"'
            f' stroke="#888"/><text x="{x:.1f}" y="{f.height - BOTTOM + 16}"'
            f' text-anchor="middle">{esc(x_fmt(t))}</text>'
        )
    out.append(
        f'<line x1="{LEFT}" x2="{f.width - RIGHT}" y1="{f.height - BOTTOM}"'
        f' y2="{f.height - BOTTOM}" stroke="#888"/><text x="{(LEFT + f.width - RIGHT) / 2:.0f}"'
        f' y="{f.height - 4}" text-anchor="middle">{esc(x_label)}</text><text x="12"'
        f' y="{(f.top + f.height - BOTTOM) / 2:.0f}" text-anchor="middle" transform="rotate(-90 12'
        f' {(f.top + f.height - BOTTOM) / 2:.0f})">{esc(y_label)}</text></g>'
    )
    return out


def legend_layout(names: list[str], width: int = W) -> tuple[list[tuple[float, float]], float]:
    """Each entry's (x, y), and the plot's top below the rows: an entry is its swatch, a gap and its
    text at its estimated width (``text_width``), then a gap before the next; a row that is full
    wraps, and the plot moves down for every row."""
    places, x, y = [], LEFT + 8, LEGEND_Y
    for name in names:
        entry = 14 + text_width(name) + 12
        if x + entry > width - RIGHT and x > LEFT + 8:
            x, y = LEFT + 8, y + LEGEND_ROW
        places.append((x, y))
        x += entry
    return places, max(TOP, y + LEGEND_ROW + 4)


def _legend(names: list[tuple[str, str]], places: list[tuple[float, float]]) -> list[str]:
    """Above the plot, at ``legend_layout``'s places."""
    out = ['<g class="legend" font-size="11">']
    for (name, colour), (x, y) in zip(names, places):
        out.append(
            f'<rect x="{x:.0f}" y="{y}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{x + 14:.0f}" y="{y + 9}" fill="#222">{esc(name)}</text>'
        )
    return out + ["</g>"]


def line_chart(
    lines: list[tuple[str, list[float], list[float]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    y_min: float | None = 0.0,
    y_max: float | None = None,
    marks: list[float] = (),
    bands: list[tuple[float, float, str, str]] = (),
    dashes: dict[str, str] | None = None,
) -> str:
    """``lines``: (name, xs, ys), drawn in order (the last on top). ``marks``: x positions drawn as
    ticks along the top (step boundaries). ``bands``: (x0, x1, label, colour) shaded spans (steady
    window, trace window). ``dashes``: a line's name -> SVG dash pattern, so that a line drawn over
    another with the same values leaves the one below visible."""
    xs = [x for _, lx, _ in lines for x in lx] + list(marks)
    ys = [y for _, _, ly in lines for y in ly if math.isfinite(y)]
    if not xs or not ys:
        return ""
    lo = min(ys) if y_min is None else min(y_min, min(ys))
    hi = max(ys) if y_max is None else max(y_max, max(ys))
    yticks = nice_ticks(lo, hi)
    names = [(name, LINE_COLOURS[i % len(LINE_COLOURS)]) for i, (name, _, _) in enumerate(lines)]
    places, top = legend_layout([n for n, _ in names])
    f = Frame(min(xs), max(xs), yticks[0], yticks[-1], top=top)
    body = _axes(f, nice_ticks(f.x0, f.x1, 8), yticks, x_label, y_label)
    for x0, x1, label, colour in bands:
        body.append(
            f'<rect class="band" x="{f.x(x0):.1f}" y="{f.top}"'
            f' width="{max(f.x(x1) - f.x(x0), 1):.1f}" height="{f.height - f.top - BOTTOM}"'
            f' fill="{colour}" opacity="0.18"><title>{esc(label)}</title></rect>'
        )
    if marks:
        d = "".join(f"M{f.x(m):.1f} {f.top}v6" for m in marks)
        body.append(
            f'<path class="steps" d="{d}" stroke="#555" stroke-width="0.6"><title>step'
            " boundaries</title></path>"
        )
    for (name, lx, ly), (_, colour) in zip(lines, names):
        pts = " ".join(f"{f.x(x):.1f},{f.y(y):.1f}" for x, y in zip(lx, ly) if math.isfinite(y))
        dash = (dashes or {}).get(name)
        style = f' stroke-dasharray="{esc(dash)}"' if dash else ""
        body.append(
            f'<polyline class="series" fill="none" stroke="{colour}" stroke-width="1.5"{style} '
            f'points="{pts}"><title>{esc(name)}</title></polyline>'
        )
    body += _legend(names, places)
    return _svg(f, body, title, "line")


def stacked_bars(rows: list[tuple[str, dict[str, float]]], *, title: str, x_label: str) -> str:
    """Horizontal bars, one per row, split into coloured parts (category -> value)."""
    rows = [(label, parts) for label, parts in rows if sum(max(v, 0) for v in parts.values()) > 0]
    if not rows:
        return ""
    total = max(sum(max(v, 0) for v in parts.values()) for _, parts in rows)
    ticks = nice_ticks(0, total)
    seen = {
        c: CATEGORY_COLOURS.get(c, "#999") for _, parts in rows for c, v in parts.items() if v > 0
    }
    places, top = legend_layout(list(seen))
    bar, gap = 22, 10
    height = top + len(rows) * (bar + gap) + BOTTOM
    left = 150
    f = Frame(0, ticks[-1], 0, 1, height=height)
    span = f.width - left - RIGHT

    def x(v):
        return left + v / f.x1 * span

    body = ['<g font-size="11" fill="#444">']
    for t in ticks:
        body.append(
            f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top}" y2="{height - BOTTOM}"'
            f' stroke="#e4e4e4"/><text x="{x(t):.1f}" y="{height - BOTTOM + 14}"'
            f' text-anchor="middle">{esc(fmt_number(t))}</text>'
        )
    body.append(
        f'<text x="{left + span / 2:.0f}" y="{height - 6}"'
        f' text-anchor="middle">{esc(x_label)}</text></g>'
    )
    for i, (label, parts) in enumerate(rows):
        y = top + i * (bar + gap)
        body.append(
            f'<text x="{left - 6}" y="{y + bar / 2 + 4:.0f}" font-size="11" text-anchor="end">'
            f"{esc(fit(label, left - 10))}<title>{esc(label)}</title></text>"
        )
        at = 0.0
        for category, value in parts.items():
            if value <= 0:
                continue
            body.append(
                f'<rect class="bar" x="{x(at):.1f}" y="{y}"'
                f' width="{max(x(at + value) - x(at), 0.5):.1f}" height="{bar}"'
                f' fill="{seen[category]}"><title>{esc(label)}: {esc(category)}'
                f" {value:.3f}</title></rect>"
            )
            at += value
    body += _legend(list(seen.items()), places)
    return _svg(f, body, title, "bars")


def scaling_chart(points: list[tuple[int, float, float, float]], *, title: str) -> str:
    """``points``: (devices, speedup, ±95%, ideal). The measured curve with error bars against
    ideal."""
    if not points:
        return ""
    hi = max(max(s + (c or 0), i) for _, s, c, i in points)
    yticks = nice_ticks(0, hi * 1.1)
    names = [("measured ±95%", LINE_COLOURS[0]), ("ideal", "#888")]
    places, top = legend_layout([n for n, _ in names])
    f = Frame(
        min(p[0] for p in points) - 0.5, max(p[0] for p in points) + 0.5, 0, yticks[-1], top=top
    )
    body = _axes(
        f, [p[0] for p in points], yticks, "devices", "speedup (x)", x_fmt=lambda v: f"{v:g}"
    )
    ideal = " ".join(f"{f.x(n):.1f},{f.y(i):.1f}" for n, _, _, i in points)
    body.append(
        '<polyline class="ideal" fill="none" stroke="#888" stroke-dasharray="5 4"'
        f' points="{ideal}"><title>ideal</title></polyline>'
    )
    measured = " ".join(f"{f.x(n):.1f},{f.y(s):.1f}" for n, s, _, _ in points)
    body.append(
        f'<polyline class="series" fill="none" stroke="{LINE_COLOURS[0]}" stroke-width="2" '
        f'points="{measured}"><title>measured</title></polyline>'
    )
    for n, s, c, _ in points:
        c = c or 0.0
        body.append(
            f'<path class="errorbar" d="M{f.x(n):.1f} {f.y(s - c):.1f}V{f.y(s + c):.1f}'
            f'M{f.x(n) - 5:.1f} {f.y(s - c):.1f}h10M{f.x(n) - 5:.1f} {f.y(s + c):.1f}h10" '
            f'stroke="{LINE_COLOURS[0]}"/><circle cx="{f.x(n):.1f}" cy="{f.y(s):.1f}" r="4" '
            f'fill="{LINE_COLOURS[0]}"><title>{n} devices: {s:.2f}x ±{c:.2f}</title></circle>'
        )
    body += _legend(names, places)
    return _svg(f, body, title, "scaling")


def waterfall(
    ideal: float, causes: list[tuple[str, float, bool]], measured: float, *, title: str
) -> str:
    """From the ideal speedup down (or up) by each cause to the measured one."""
    steps = [(name, lost, noise) for name, lost, noise in causes if abs(lost) >= 0.005]
    levels, at = [], ideal
    for name, lost, noise in steps:
        levels.append((name, at, at - lost, noise))
        at -= lost
    lo = min([0.0, measured] + [min(a, b) for _, a, b, _ in levels])
    hi = max([ideal, measured] + [max(a, b) for _, a, b, _ in levels])
    yticks = nice_ticks(lo, hi * 1.05)
    n = len(levels) + 2
    f = Frame(0, n, yticks[0], yticks[-1], height=260)
    slot = (f.width - LEFT - RIGHT) / n
    width = slot * 0.7
    body = _axes(f, [], yticks, "", "speedup (x)")

    def bar(i, a, b, colour, label, value):
        x = f.x(i + 0.15)
        top, bottom = f.y(max(a, b)), f.y(min(a, b))
        # A label as wide as its slot less a gap, on two lines where it must, so that neighbours
        # never touch (the table below names them whole).
        return (
            f'<rect class="bar" x="{x:.1f}" y="{top:.1f}" width="{width:.1f}"'
            f' height="{max(bottom - top, 1):.1f}" fill="{colour}"><title>{esc(label)}:'
            f" {esc(value)}</title></rect>"
            + "".join(
                f'<text x="{x + width / 2:.1f}" y="{f.height - BOTTOM + 14 + 12 * k}"'
                ' font-size="10"'
                f' text-anchor="middle">{esc(line)}<title>{esc(label)}</title></text>'
                for k, line in enumerate(two_lines(label, slot - 8, 10))
            )
        )

    body.append(bar(0, yticks[0], ideal, "#888", "ideal", f"{ideal:.2f}x"))
    for i, (name, a, b, noise) in enumerate(levels, start=1):
        colour = "#ccc" if noise else ("#e45756" if b < a else "#54a24b")
        body.append(
            bar(i, a, b, colour, name, f"{b - a:+.2f}x" + (" (within noise)" if noise else ""))
        )
    body.append(bar(n - 1, yticks[0], measured, LINE_COLOURS[0], "measured", f"{measured:.2f}x"))
    return _svg(f, body, title, "waterfall")
