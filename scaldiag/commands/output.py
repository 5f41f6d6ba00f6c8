"""Where a command's report goes: the terminal, a JSON file, or JSON alone on stdout."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from scaldiag.errors import ScaldiagError


def emit(json_path: str | None, to_json: Callable[[], str], to_terminal: Callable[[], None]) -> None:
    """``--json -``: JSON on stdout only; else the terminal report, and JSON to ``json_path`` if given."""
    if json_path == "-":
        sys.stdout.write(to_json())
        return
    to_terminal()
    if json_path:
        write_text(Path(json_path), to_json())


def write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise ScaldiagError(f"cannot write {path}: {exc.strerror}") from exc
