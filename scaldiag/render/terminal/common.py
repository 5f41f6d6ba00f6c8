"""What the terminal reports share: inert text, byte sizes, the finding panel.

Every string that comes from a trace, a script or a file is shown as plain
``Text`` (never parsed as rich markup) with control characters made visible:
an op named ``[link=...]`` or holding an escape sequence prints as itself.
"""

from __future__ import annotations

import re

from rich.console import Group
from rich.panel import Panel
from rich.text import Text

from scaldiag.rules import Finding

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "info": "cyan"}
FRAMEWORK_LABEL = {"tensorflow": "TensorFlow / Keras", "jax": "JAX / Keras on JAX"}

# C0 controls but tab and newline, DEL, C1 controls; and the Unicode
# bidirectional overrides, which reorder what a terminal shows.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def inert(value: object) -> str:
    """``value`` as text a terminal shows literally: controls become ``\\xNN`` / ``\\uNNNN``."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(value))


def text(value: object, style: str = "") -> Text:
    """A renderable that is never markup and never an escape sequence."""
    return Text(inert(value), style=style)


def bytes_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def add_row(table, *cells) -> None:
    table.add_row(*(text(c) for c in cells))


def finding_panel(f: Finding, framework: str) -> Panel:
    lines = [text(f.summary)]
    for e in f.evidence:
        spread = f" ±{e.spread}" if e.spread is not None else ""
        threshold = f" (threshold {e.threshold}{e.unit})" if e.threshold is not None else ""
        lines.append(text(f"  evidence: {e.metric} = {e.value}{spread} {e.unit}{threshold}", style="dim"))
    if f.predicted_speedup:
        s = f.predicted_speedup
        lines.append(text(f"  predicted: {s.arithmetic} (range {s.low:.2f}x-{s.high:.2f}x)"))
    lines += [text(f"  note: {n}", style="dim") for n in f.notes]
    frameworks = [framework] if framework in f.fix else list(f.fix)
    for fw in frameworks:
        lines.append(text(f"fix ({FRAMEWORK_LABEL.get(fw, fw)}):", style="bold"))
        lines.append(text(f.fix[fw]))
    title = Text.assemble((f"{f.id} ", "bold"), (f"{f.severity} ", SEVERITY_STYLE.get(f.severity, "")), inert(f.title))
    return Panel(Group(*lines), title=title, title_align="left")
