"""What the terminal reports share: inert text, the line layout, byte sizes, the findings.

Every string that comes from a trace, a script or a file is shown as plain
``Text`` (never parsed as rich markup) with control characters made visible:
an op named ``[link=...]`` or holding an escape sequence prints as itself.

Lines are laid out here, not by rich's word wrap, so that nothing a user copies
is broken: a ``Keep`` token ("replicas: 1", a number with its unit, a call
like ``AdamW(..., fused=True)``) moves whole to the next line; a path or a
command goes on a line of its own (``own``) and is never folded, even where
it is wider than the terminal; a fix's code lines go out unboxed and indented,
one runnable line each, with a comment too wide for the line put above it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from scaldiag import sanitize
from scaldiag.render.words import (
    framework_words as framework_words,
)  # noqa: PLC0414 (the terminal's modules take it here)
from scaldiag.render.words import speedup_words
from scaldiag.rules import Finding
from scaldiag.rules.report import top_cause

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "info": "cyan"}
FRAMEWORK_LABEL = {
    "tensorflow": "TensorFlow / Keras",
    "jax": "JAX / Keras on JAX",
    "pytorch": "PyTorch",
}
ALL_FIXES = "*"  # as the framework: show every framework's fix (--verbose)
CODE_INDENT = 4  # a command or a code line: indented, alone on its line
# Findings shown with their fix in the default report (one screen); the others with their summary
# and speed-up (--verbose: every fix). A fix runs 3-15 lines at 80 columns.
FIXES_SHOWN = 1


@dataclass(frozen=True)
class Keep:
    """Text a line never breaks: it moves whole to the next line (in its own style, if given)."""

    text: str
    style: str = ""


def inert(value: object) -> str:
    """``value`` as one line a terminal shows literally (render/sanitize.py): every control,
    newlines and bidirectional marks included, becomes ``\\xNN`` / ``\\uNNNN``; a huge name is
    shortened."""
    return sanitize.line(value)


def text(value: object, style: str = "", lines: bool = False) -> Text:
    """A renderable that is never markup and never an escape sequence: one line (a name in it cannot
    forge another), or with ``lines`` text whose own newlines are kept."""
    return Text(sanitize.text(value) if lines else sanitize.line(value), style=style)


# A number and its unit stay on one line ("1047.69 ms", "11.0 %", "3 cores").
_NUMBER = re.compile(r"^[(\[]?[-+±~]?[\d,.]*\d(\.\d+)?x?$")
_UNIT = re.compile(
    r"^(ns|us|µs|ms|s|%|x|B|KiB|MiB|GiB|KB|MB|GB|W|MHz|cores?|steps?|samples(/s)?|ms/step|devices?|"
    r"GPUs?|ranks?|threads?|events?|copies|bytes)[),;:.]*$"
)

# A word that opens a call (``AdamW(``, ``Rescaling(1``): its words stay together up to the closing
# parenthesis, where the whole call fits on a line.
_OPENS_CALL = re.compile(r"[\w.\]]\(")


def tokens(parts: Iterable[str | Keep]) -> list[Keep]:
    """The unbreakable tokens of ``parts``: prose split at spaces, a call's words joined, Keep
    whole."""
    out: list[Keep] = []
    for part in parts:
        if isinstance(part, Keep):
            out.append(Keep(inert(part.text), part.style))
            continue
        call: list[str] = []
        for word in inert(part).split():
            if call or _OPENS_CALL.search(word):
                call.append(word)
                joined = " ".join(call)
                if joined.count("(") <= joined.count(")") or len(joined) > 60:
                    out.append(Keep(joined))
                    call = []
            elif out and _UNIT.match(word) and _NUMBER.match(out[-1].text) and not out[-1].style:
                out[-1] = Keep(f"{out[-1].text} {word}")
            else:
                out.append(Keep(word))
        if call:
            out.append(Keep(" ".join(call)))
    return out


def pack(words: list[Keep], width: int, indent: int = 0, hang: int = 0) -> list[list[Keep]]:
    """``words`` in lines of at most ``width`` columns (each line a list of its tokens, the first
    holding the indent), continuation lines indented ``hang`` more; a word wider than its line is
    alone on it, whole."""
    lines: list[list[Keep]] = []
    current: list[Keep] = []
    length = 0
    for word in words:
        if current and length + 1 + len(word.text) <= width:
            current.append(Keep(" " + word.text, word.style))
            length += 1 + len(word.text)
            continue
        if current:
            lines.append(current)
        lead = " " * (indent + (hang if lines else 0))
        current, length = [Keep(lead), word], len(lead) + len(word.text)
    if current:
        lines.append(current)
    return lines


def plain(line: list[Keep]) -> str:
    return "".join(k.text for k in line)


def say(
    console: Console, *parts: str | Keep, style: str = "", indent: int = 0, hang: int = 0
) -> None:
    """Prose laid out at the console's width (module docstring): breaks only between tokens."""
    for line in pack(tokens(parts), console.width, indent, hang):
        # a padded token ends no line with spaces
        line[-1] = Keep(line[-1].text.rstrip(), line[-1].style)
        console.print(
            Text.assemble(*((k.text, k.style) for k in line), style=style), soft_wrap=True
        )


def own(console: Console, value: str, style: str = "", indent: int = CODE_INDENT) -> None:
    """A path or a command on a line of its own, never folded: a triple-click copies it whole."""
    console.print(Text(" " * indent + inert(value), style=style), soft_wrap=True)


def labelled(console: Console, label: str, value: str, style: str = "") -> None:
    """``label``, then the path or command ``value`` on its own line (``own``)."""
    say(console, label, style=style)
    own(console, value)


# A code line's trailing comment: two spaces or more, then '#'.
_COMMENT = re.compile(r"^(?P<code>.*?\S)\s{2,}(?P<comment>#.*)$")


def code_lines(line: str, width: int) -> list[str]:
    """One code line of a fix, indented: whole, with a comment that does not fit moved above it."""
    body = line[2:] if line.startswith("  ") else line.lstrip()
    pad = " " * CODE_INDENT
    if len(pad + body) <= width:
        return [pad + body]
    m = _COMMENT.match(body)
    if not m:
        return [
            pad + body
        ]  # wider than the terminal, still one line: the terminal folds it, a copy is whole
    lead = " " * (len(m["code"]) - len(m["code"].lstrip()))
    words = [Keep(w) for w in m["comment"].removeprefix("#").split()]
    comment = [
        f"{pad}{lead}# {plain(c).strip()}" for c in pack(words, width - len(pad + lead) - 2, 0, 0)
    ]
    return comment + [pad + m["code"]]


def fix_block(console: Console, fix: str, indent: int = 2) -> None:
    """A fix: prose laid out at the width, code lines (indented in the rule's text) unboxed."""
    for raw in sanitize.text(fix).split("\n"):
        if raw[:1].isspace():
            for line in code_lines(raw, console.width):
                console.print(Text(line), soft_wrap=True)
        elif raw.strip():
            say(console, raw, indent=indent)


def table(title: str | Text, caption: str | Text | None = None) -> Table:
    """A table without side borders: a number is never folded by a border's columns."""
    # At least as wide as its title, so that a narrow table does not fold its title (the console
    # caps it).
    return Table(
        title=title,
        title_justify="left",
        caption=caption,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        min_width=len(str(title)),
    )


def bytes_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


# In a table cell (which rich wraps), a number and its unit are joined by a no-break space.
_CELL_UNIT = re.compile(r"(\d) (?=(B|KiB|MiB|GiB|copies|ms|s|x|%)\b)")


def add_row(table, *cells) -> None:
    """One row; a cell already made (``text(..., lines=True)``) is kept as it is."""
    table.add_row(
        *(c if isinstance(c, Text) else text(_CELL_UNIT.sub("\\1\u00a0", inert(c))) for c in cells)
    )


def columns(table, names, left=(), whole=()) -> None:
    """Columns that fold a long cell onto more lines instead of cutting it ('…'); those in ``whole``
    (a device's name) are never wrapped: the others give way."""
    for name in names:
        table.add_column(
            name,
            justify="left" if name in left else "right",
            overflow="fold",
            no_wrap=name in whole,
        )


def exit_text(code: int, signal: str | None = None) -> str:
    """An exit status as a shell reports it: a run killed by SIGKILL exited 137, not -9."""
    if code < 0:
        return f"exit code {128 - code} ({signal or f'signal {-code}'})"
    return f"exit code {code}"


def speedup_line(s, ceiling=None) -> list[str | Keep]:
    """What a finding's number bounds, in words, and the number with its range (render/ranges.py),
    as parts for ``say``: the number and its range are never split. ``ceiling``: the finding's,
    beside a forecast."""
    what, number = speedup_words(s, ceiling)
    head, *tail = number.split("; ", 1)
    return [what, Keep(head + (";" if tail else "")), *tail]


def headline(console: Console, report) -> None:
    """A trace report's verdict, and what fixing its cause gives, in the words of the finding's
    line."""
    say(console, report.verdict, style="bold")
    top = top_cause(report.findings)
    if top is not None and top.predicted_speedup is not None:
        say(console, *speedup_line(top.predicted_speedup), style="bold")


def print_findings(
    console: Console,
    findings: list[Finding],
    framework: str,
    verbose: bool = False,
    heading: str = "Findings",
    headlined: Finding | None = None,
) -> None:
    """The heading, always, then each finding; the first FIXES_SHOWN fixes, or every one with
    ``verbose``. ``headlined``: the finding the headline already told (its summary is not said
    twice)."""
    say(console, f"{heading} ({len(findings)})", style="bold")
    if not findings:
        say(console, "none: no rule's threshold is cleared beyond the step-to-step noise")
    shown: dict[str, str] = {}  # a fix's text -> the first finding that showed it
    for n, finding in enumerate(findings):
        if n:
            console.print()
        print_finding(
            console,
            finding,
            framework,
            verbose,
            with_fix=verbose or n < FIXES_SHOWN,
            shown=shown,
            said=not verbose and finding is headlined,
        )


# Frameworks whose fixes read alike: Keras runs on either backend, so --verbose shows a Keras run
# both; a PyTorch run reads only PyTorch's (its report is in PyTorch's words, verbose or not).
FAMILIES = {
    "tensorflow": ("tensorflow", "jax"),
    "jax": ("tensorflow", "jax"),
    "pytorch": ("pytorch",),
}


def _fixes(f: Finding, framework: str, verbose: bool) -> list[str]:
    if framework not in f.fix:  # unknown (or ALL_FIXES): every framework's fix
        return list(f.fix)
    if not verbose:
        return [framework]
    family = FAMILIES.get(framework, (framework,))
    return [framework] + [fw for fw in f.fix if fw in family and fw != framework]


def print_finding(
    console: Console,
    f: Finding,
    framework: str,
    verbose: bool,
    with_fix: bool,
    shown: dict[str, str],
    said: bool = False,
) -> None:
    """One finding, unboxed; ``said``: its summary and ceiling are the headline's, above."""
    say(
        console,
        Keep(f.id, "bold"),
        Keep(f.severity, SEVERITY_STYLE.get(f.severity, "")),
        Keep(inert(f.title), "bold"),
        *([Keep("(above)")] if said else []),
    )
    if not said:
        say(console, f.summary, indent=2)
    for s in (None if said else f.predicted_speedup, f.forecast):
        if s is not None:
            say(console, *speedup_line(s, f.predicted_speedup), indent=2)
            if verbose:
                say(console, f"arithmetic: {s.arithmetic}", indent=4, style="dim")
    if verbose:
        for e in f.evidence:
            spread = f" ±{e.spread}" if e.spread is not None else ""
            unit = e.unit if e.unit in ("%", "x") else f" {e.unit}"
            threshold = f" (threshold {e.threshold}{unit})" if e.threshold is not None else ""
            say(
                console,
                f"evidence: {e.metric} = {e.value}{spread} {e.unit}{threshold}",
                indent=2,
                style="dim",
            )
        for note in f.notes:
            say(console, f"note: {note}", indent=2, style="dim")
    if not with_fix:
        return
    for fw in _fixes(f, framework, verbose):
        label = f"fix ({FRAMEWORK_LABEL.get(fw, fw)})"
        key = f"{fw}\n{f.fix[fw]}"
        if key in shown:
            say(console, f"{label}: as {shown[key]} above", indent=2, style="bold")
            continue
        shown[key] = f.id
        say(console, f"{label}:", indent=2, style="bold")
        fix_block(console, f.fix[fw])
