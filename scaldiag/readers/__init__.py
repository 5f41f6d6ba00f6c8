"""Trace readers: files of one format in, a :class:`scaldiag.trace.Trace` out.

``FORMATS`` is the one table of trace formats. A reader is a name, the file
suffix that identifies it, how to find one run's files under a path, and how
to read them. ``find_trace`` picks the format by the files a path holds; a
new format (Kineto's ``*.pt.trace.json``) is one module and one entry here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scaldiag.errors import TraceError
from scaldiag.trace import Trace


@dataclass(frozen=True)
class TraceFormat:
    name: str
    suffix: str
    find: Callable[[Path, str | None], tuple[str, list[Path]]]  # (run name, files); raises TraceError
    read: Callable[[list[Path]], Trace]
    claim: Callable[[Path], bool] | None = None  # replaces the suffix test (a format with several endings)

    def claims(self, root: Path) -> bool:
        if self.claim is not None:
            return self.claim(root)
        if root.is_file():
            return root.name.endswith(self.suffix)
        return next(iter(root.rglob(f"*{self.suffix}")), None) is not None


def _xplane() -> TraceFormat:
    from scaldiag.readers.xplane import read

    return TraceFormat("xplane", read.XPLANE_SUFFIX, read.find_run, read.read_trace)


def _kineto() -> TraceFormat:
    from scaldiag.readers import kineto

    return TraceFormat("kineto", kineto.KINETO_SUFFIX, kineto.find_run, kineto.read_trace, kineto.claims)


FORMATS: list[TraceFormat] = [_xplane(), _kineto()]


def find_trace(path: str | os.PathLike, run: str | None = None) -> tuple[TraceFormat, str, list[Path]]:
    """The format, run name and files of the trace at ``path`` (a file, a run directory or a logdir)."""
    root = Path(path)
    if not root.exists():
        raise TraceError(f"no such file or directory: {root}")
    fmt = next((f for f in FORMATS if f.claims(root)), FORMATS[0])  # unknown: the first reader says why not
    name, files = fmt.find(root, run)
    return fmt, name, files


def read_trace(path: str | os.PathLike, run: str | None = None) -> tuple[str, Trace]:
    """Find the trace under ``path`` and read it, whatever its format: (run name, trace)."""
    fmt, name, files = find_trace(path, run)
    return name, fmt.read(files)
