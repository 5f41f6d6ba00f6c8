"""Where a trace's files are under a path: the run-finding every reader shares.

A path is one file, a directory holding one run's files, or a TensorBoard
logdir (``plugins/profile/<run>/``); a run is the directory holding its files,
and the latest (runs are named by timestamp) is taken unless one is named.
"""

from __future__ import annotations

import os
from pathlib import Path

from scaldiag.errors import TraceError


def runs_under(root: Path, suffixes: tuple[str, ...]) -> dict[str, list[Path]]:
    """Runs found below ``root``, by run name (the directory holding the files)."""
    direct = sorted(f for s in suffixes for f in root.glob(f"*{s}"))
    if direct:
        return {root.name: direct}
    runs: dict[str, list[Path]] = {}
    for file in sorted(f for s in suffixes for f in root.rglob(f"*{s}")):
        runs.setdefault(file.parent.name, []).append(file)
    return runs


def find_files(
    path: str | os.PathLike, run: str | None, suffixes: tuple[str, ...], expected: str
) -> tuple[str, list[Path]]:
    """(run name, files) under ``path``; ``expected`` names the layout in the error when none is
    found."""
    root = Path(path)
    if not root.exists():
        raise TraceError(f"no such file or directory: {root}")
    if not root.is_file() and not root.is_dir():
        raise TraceError(
            f"{root} is not a regular file or a directory (a device, a FIFO or a socket): not read"
        )
    if root.is_file():
        if run:
            raise TraceError("--run applies to a logdir, not to a single file")
        return root.name, [root]
    runs = runs_under(root, suffixes)
    if not runs:
        raise TraceError(f"no {suffixes[0]} files under {root} (expected {expected})")
    if run is None:
        run = sorted(runs)[-1]  # run names are timestamps: the last sorts latest
    elif run not in runs:
        raise TraceError(f"no run named {run!r} under {root}; runs: {', '.join(sorted(runs))}")
    return run, runs[run]
