"""Trace readers: files of one format in, a :class:`scaldiag.trace.Trace` out.

``FORMATS`` is the one table of trace formats. A reader is a name, the file
suffix that identifies it, how to find one run's files under a path, and how
to read them. ``find_trace`` picks the format by the files a path holds; a
new format (Kineto's ``*.pt.trace.json``) is one module and one entry here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from scaldiag.errors import TraceError
from scaldiag.readers.typed import typed_stats
from scaldiag.trace import Trace


@dataclass(frozen=True)
class TraceFormat:
    name: str
    suffix: str | tuple[str, ...]  # the file ending(s) that identify it (Kineto's: plain and .gz)
    find: Callable[
        [Path, str | None], tuple[str, list[Path]]
    ]  # (run name, files); raises TraceError
    read: Callable[[list[Path]], Trace]
    claim: Callable[[Path], bool] | None = (
        None  # replaces the suffix test (a format with several endings)
    )
    # A format whose files are a job's ranks, one each, read one at a time (pipeline.py): a file
    # alone (its facts for the labels, its trace); the labels ``read`` would give the files; a
    # rank's trace so named.
    read_rank: Callable[[Path], tuple[object, Trace]] | None = None
    rank_labels: Callable[[list, list[Path]], list[str]] | None = None
    labelled: Callable[[Trace, str], Trace] | None = None

    def claims(self, root: Path) -> bool:
        if self.claim is not None:
            return self.claim(root)
        if root.is_file():
            return root.name.endswith(self.endings)
        return any(next(iter(root.rglob(f"*{e}")), None) is not None for e in self.endings)

    @property
    def endings(self) -> tuple[str, ...]:
        return (self.suffix,) if isinstance(self.suffix, str) else tuple(self.suffix)


def _xplane() -> TraceFormat:
    from scaldiag.readers.xplane import read

    return TraceFormat("xplane", read.XPLANE_SUFFIX, read.find_run, read.read_trace)


def _kineto() -> TraceFormat:
    from scaldiag.readers import kineto

    return TraceFormat(
        "kineto",
        kineto.SUFFIXES,
        kineto.find_run,
        kineto.read_trace,
        kineto.claims,
        kineto.read_rank,
        kineto.rank_labels,
        kineto.labelled,
    )


FORMATS: list[TraceFormat] = [_xplane(), _kineto()]


def find_trace(
    path: str | os.PathLike, run: str | None = None
) -> tuple[TraceFormat, str, list[Path]]:
    """The format, run name and files of the trace at ``path`` (a file, a run directory or a
    logdir)."""
    root = Path(path)
    if not root.exists():
        raise TraceError(f"no such file or directory: {root}")
    # unknown: the first reader says why not
    fmt = next((f for f in FORMATS if f.claims(root)), FORMATS[0])
    name, files = fmt.find(root, run)
    return fmt, name, files


def trace_files(root: Path) -> list[Path]:
    """Every file under ``root`` with an ending of a format (a job node's rank files, one a rank),
    sorted; none where the directory cannot be listed."""
    endings = tuple(e for fmt in FORMATS for e in fmt.endings)
    try:
        return sorted(_named_under(Path(root), endings))
    except OSError:
        return []


def _named_under(root: Path, endings: tuple[str, ...]) -> Iterator[Path]:
    """What ``root.rglob(f"*{e}")`` finds for each ending, in one walk of the tree instead of one an
    ending (three walks a node were a third of a job's listing): every entry so named, directories
    and links included; links to directories not entered; a directory that cannot be read skipped.
    """
    for here, dirnames, filenames in os.walk(root):
        base = Path(here)
        yield from (base / n for n in (*dirnames, *filenames) if n.endswith(endings))


def format_of(file: Path) -> TraceFormat | None:
    """The format whose ending ``file``'s name has, or None."""
    return next((f for f in FORMATS if file.name.endswith(f.endings)), None)


def read_trace(path: str | os.PathLike, run: str | None = None) -> tuple[str, Trace]:
    """Find the trace under ``path`` and read it, whatever its format: (run name, trace), its stats
    of the types the analysis reads (readers/typed.py).

    What the files as given make doubtful is said in ``Trace.notes``, never passed over: a
    directory with files of two formats (one is read), a rank twice, ranks that are not one run's.
    """
    fmt, name, files = find_trace(path, run)
    return read_found(Path(path), fmt, name, files)


def read_found(root: Path, fmt: TraceFormat, name: str, files: list[Path]) -> tuple[str, Trace]:
    """The files ``find_trace`` found under ``root`` read (``read_trace`` without searching
    again)."""
    trace = typed_stats(fmt.read(files))
    notes = other_formats(Path(root), fmt) + rank_notes(trace)
    return name, replace(trace, notes=[*trace.notes, *notes]) if notes else trace


def read_rank(fmt: TraceFormat, file: Path) -> tuple[object, Trace]:
    """One rank's file of a per-rank format read alone: its facts for ``fmt.rank_labels``, its trace
    (stats typed, planes unlabelled)."""
    facts, trace = fmt.read_rank(file)
    return facts, typed_stats(trace)


def other_formats(root: Path, read: TraceFormat) -> list[str]:
    """A directory holding traces of another format too: which one was read, what was left out."""
    if not root.is_dir():
        return []
    notes = []
    for other in FORMATS:
        if other is not read and other.claims(root):
            notes.append(
                f"{root} also holds {other.name} trace files, left out: only the {read.name} files"
                f" are read (one format a directory); name a {other.name} file, or a directory of"
                " them alone, to read them"
            )
    return notes


# Kineto writes these per rank file into the host plane's stats (readers/kineto/__init__.py).
_RANK, _WORLD, _BACKEND = "distributed_rank", "distributed_world_size", "distributed_backend"


def rank_notes(trace: Trace) -> list[str]:
    """Files merged as ranks of one run that may not be (``files_notes``), from the merged trace."""
    # label (one per file) -> (its host plane's stats, (first ns, last ns) of its events)
    files = {}
    for plane in trace.planes:
        if not plane.host:
            continue  # one file, not merged
        stats, span = files.get(plane.host, ({}, None))
        if plane.is_host:
            stats = plane.stats
        files[plane.host] = (stats, _span(plane, span))
    return files_notes(files)


def files_notes(files: dict[str, tuple[dict, tuple[int, int] | None]]) -> list[str]:
    """Files merged as ranks of one run that may not be: the same rank twice, different world sizes
    or backends, or files whose events do not overlap in time (one run's ranks trace the same
    steps).

    ``files``: per file's label, its host plane's stats and the (first ns, last ns) of its events.
    """
    if len(files) < 2:
        return []
    notes = []
    by_rank: dict[object, list[str]] = {}
    for label, (stats, _) in files.items():
        if stats.get(_RANK) is not None:
            by_rank.setdefault(stats[_RANK], []).append(label)
    for rank, labels in by_rank.items():
        if len(labels) > 1:
            notes.append(
                f"rank {rank} is in {len(labels)} files ({', '.join(labels)}): copies of one file,"
                " or files of different runs? They are merged as separate processes, named by file"
            )
    for key, what in ((_WORLD, "world sizes"), (_BACKEND, "backends")):
        values = {stats[key] for stats, _ in files.values() if stats.get(key) is not None}
        if len(values) > 1:
            notes.append(
                f"the files say different {what} ({', '.join(map(str, sorted(values, key=str)))}):"
                " they are not the ranks of one run, yet are merged as one"
            )
    notes += _apart_in_time(files)
    return notes


def _span(plane, span: tuple[int, int] | None) -> tuple[int, int] | None:
    for line in plane.lines:
        if len(line):
            first, last = int(line.start_ns.min()), int(line.end_ns.max())
            span = (first, last) if span is None else (min(span[0], first), max(span[1], last))
    return span


def _apart_in_time(files: dict) -> list[str]:
    """Files whose events share no instant: one run's ranks trace the same steps at the same
    time."""
    spans = sorted((span, label) for label, (_, span) in files.items() if span is not None)
    notes = []
    (_, end), last_label = spans[0]
    for (first, last), label in spans[1:]:
        if first > end:
            notes.append(
                f"{label}'s events begin {(first - end) / 1e9:,.3f} s after {last_label}'s end: "
                "the files share no instant, as ranks of one run would; traces of different runs "
                "(or clocks far apart)?"
            )
        if last > end:
            end, last_label = last, label
    return notes
