"""Where a command's report goes: the terminal, a JSON file, or JSON alone on stdout."""

from __future__ import annotations

from pathlib import Path

from scaldiag.errors import ScaldiagError
from scaldiag.render import json, write


def emit(report, json_path: str | None) -> None:
    """``--json -``: JSON on stdout only; else the terminal report, and JSON to ``json_path`` if given."""
    if json_path == "-":
        write(report, "json")
        return
    write(report, "terminal")
    if json_path:
        write_text(Path(json_path), json.render(report))


def write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise ScaldiagError(f"cannot write {path}: {exc.strerror}") from exc
