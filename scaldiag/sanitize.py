"""The one sanitiser for text shown on a terminal: names from traces, records and paths made inert.

A file name, a kernel name or a run record's command is the sender's text: it
may hold escape sequences (``ESC ] 0;title BEL``, ``ESC [2J``), C1 controls,
bidirectional marks that reorder what a terminal shows (U+202E, U+200E,
U+200F, U+061C...), newlines that forge report lines, or a megabyte of
characters. Every line scaldiag prints that shows such text goes through here,
in rich (``render/terminal/common.py``) and outside it (the CLI's one-line
messages on stderr, ``check``'s lines): controls are shown as ``\\xNN`` /
``\\uNNNN``, and an over-long line is shortened, saying by how much. JSON keeps
the raw strings (JSON escapes its controls).
"""

from __future__ import annotations

import re

# C0 controls (tab and newline included: in a name they forge columns and lines), DEL, C1 controls;
# the bidirectional marks, embeddings, overrides and isolates, which reorder what a terminal shows
# (ALM U+061C, LRM U+200E, RLM U+200F, U+202A-U+202E, U+2066-U+2069); the Unicode line and
# paragraph separators, which some viewers break lines at.
_MARKS = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_IN_LINE = re.compile(f"[\x00-\x1f{_MARKS}]")
_IN_TEXT = re.compile(f"[\x00-\x08\x0b-\x1f{_MARKS}]")  # the same but tab and newline

# A line longer than this is shortened to its first HEAD and last TAIL characters. Real names stay
# whole: the longest kernel names seen (templated CUTLASS/cuDNN ones) are 1,000-1,500 characters, a
# path at most 4,096 bytes (PATH_MAX); a name of a megabyte printed in full buried the report.
MAX_LINE_CHARS = 2000
HEAD_CHARS, TAIL_CHARS = 1400, 400


def _escape(match: re.Match) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def shorten(value: str, limit: int = MAX_LINE_CHARS) -> str:
    """``value`` whole if it has at most ``limit`` characters, else its head and tail around a
    count."""
    if len(value) <= limit:
        return value
    head, tail = HEAD_CHARS * limit // MAX_LINE_CHARS, TAIL_CHARS * limit // MAX_LINE_CHARS
    return (
        f"{value[:head]}...[{len(value) - head - tail:,} characters left"
        f" out]...{value[len(value) - tail :]}"
    )


def line(value: object) -> str:
    """``value`` as one terminal line: every control (newline and tab too) shown escaped,
    shortened."""
    return _IN_LINE.sub(_escape, shorten(str(value)))


def text(value: object) -> str:
    """Text of several lines (a fix's code, a table cell of two): newlines and tabs kept, each line
    sanitised as :func:`line` does otherwise."""
    return "\n".join(_IN_TEXT.sub(_escape, shorten(part)) for part in str(value).split("\n"))
