"""What the terminal reports share: inert text, byte sizes, the finding panel.

Every string that comes from a trace, a script or a file is shown as plain
``Text`` (never parsed as rich markup) with control characters made visible:
an op named ``[link=...]`` or holding an escape sequence prints as itself.
"""

from __future__ import annotations

import math

from rich.console import Group
from rich.panel import Panel
from rich.text import Text

from scaldiag import sanitize
from scaldiag.rules import Finding

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "info": "cyan"}
FRAMEWORK_LABEL = {"tensorflow": "TensorFlow / Keras", "jax": "JAX / Keras on JAX", "pytorch": "PyTorch"}


def inert(value: object) -> str:
    """``value`` as one line a terminal shows literally (render/sanitize.py): every control, newlines
    and bidirectional marks included, becomes ``\\xNN`` / ``\\uNNNN``; a huge name is shortened."""
    return sanitize.line(value)


def text(value: object, style: str = "", lines: bool = False) -> Text:
    """A renderable that is never markup and never an escape sequence: one line (a name in it cannot
    forge another), or with ``lines`` text whose own newlines are kept (a fix's code)."""
    return Text(sanitize.text(value) if lines else sanitize.line(value), style=style)


def bytes_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def add_row(table, *cells) -> None:
    """One row; a cell already made (``text(..., lines=True)``) is kept as it is."""
    table.add_row(*(c if isinstance(c, Text) else text(c) for c in cells))


def columns(table, names, left=()) -> None:
    """Columns that fold a long cell onto more lines instead of cutting it ('…')."""
    for name in names:
        table.add_column(name, justify="left" if name in left else "right", overflow="fold")


def exit_text(code: int, signal: str | None = None) -> str:
    """An exit status as a shell reports it: a run killed by SIGKILL exited 137, not -9."""
    if code < 0:
        return f"exit code {128 - code} ({signal or f'signal {-code}'})"
    return f"exit code {code}"


def speedup_range(low: float, high: float) -> str:
    """A forecast's range, without a range of one value or an unbounded top."""
    if not math.isfinite(high) or high >= 10 * max(low, 1e-9):
        return f"at least {low:.2f}x"
    if abs(high - low) < 0.005:
        return ""
    return f"range {low:.2f}x-{high:.2f}x"


ALL_FIXES = "*"  # as the framework: show every framework's fix (--verbose)


def print_findings(console, findings: list[Finding], framework: str) -> None:
    """The Findings heading, always, then one panel per finding."""
    console.print(text(f"Findings ({len(findings)})", style="bold"))
    if not findings:
        console.print(text("none: no rule's threshold is cleared beyond the step-to-step noise"))
    for finding in findings:
        console.print(finding_panel(finding, framework))


def finding_panel(f: Finding, framework: str) -> Panel:
    lines = [text(f.summary)]
    for e in f.evidence:
        spread = f" ±{e.spread}" if e.spread is not None else ""
        unit = e.unit if e.unit in ("%", "x") else f" {e.unit}"
        threshold = f" (threshold {e.threshold}{unit})" if e.threshold is not None else ""
        lines.append(text(f"  evidence: {e.metric} = {e.value}{spread} {e.unit}{threshold}", style="dim"))
    if f.predicted_speedup:
        s = f.predicted_speedup
        span = speedup_range(s.low, s.high)
        lines.append(text(f"  {s.kind}: {s.arithmetic}" + (f" ({span})" if span else "")))
    if f.forecast:
        lines.append(text(f"  forecast: {f.forecast.arithmetic}"))
    lines += [text(f"  note: {n}", style="dim") for n in f.notes]
    frameworks = [framework] if framework in f.fix and framework != ALL_FIXES else list(f.fix)
    for fw in frameworks:
        lines.append(text(f"fix ({FRAMEWORK_LABEL.get(fw, fw)}):", style="bold"))
        lines.append(text(f.fix[fw], lines=True))
    title = Text.assemble((f"{f.id} ", "bold"), (f"{f.severity} ", SEVERITY_STYLE.get(f.severity, "")), inert(f.title))
    return Panel(Group(*lines), title=title, title_align="left")
