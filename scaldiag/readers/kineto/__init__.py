"""Read Kineto (PyTorch profiler) Chrome-trace JSON into a :class:`scaldiag.trace.Trace`.

``torch.profiler`` writes ``*.pt.trace.json`` (``.gz`` too): a Chrome trace
whose ``traceEvents`` carry a ``cat`` (``kernel``, ``gpu_memcpy``,
``gpu_memset`` on GPU streams; ``cpu_op``, ``user_annotation``,
``cuda_runtime``, ``cuda_driver``, ``python_function`` on host threads),
``ts``/``dur`` in microseconds with three decimals, relative to
``baseTimeNanoseconds`` (epoch nanoseconds: base + ts is the wall clock, the
clock of ``time.time_ns``). No PyTorch is needed here.

The trace model it fills:

- ``/device:GPU:N`` per CUDA device (``args.device``), one line per stream
  (``args.stream``), holding kernels, copies and memsets only (GPU-side
  projections of annotations, ``gpu_user_annotation``, are not device work);
  the GPU-side ``ProfilerStep#N`` annotations are kept apart as the device's
  own step markers (``Plane.step_marks``: never busy time, never a category);
- ``/host:CPU``: one line per host thread (process and thread id), every
  other complete event;
- integer nanoseconds on the wall clock, exact (decimals are parsed as such);
- ``ProfilerStep#N`` spans become events named ``ProfilerStep`` with
  ``step_num`` N and ``_r`` 1, the step markers the analysis knows; copies
  get ``memcpy_details`` ("kind_src:pinned kind_dst:device size:N") from
  their name and ``args.bytes``.

Several files (one per rank, as ``torchrun`` writes them) merge into one
trace: each plane's ``host`` is its rank (``rank0``), or ``host/rank0`` when
the files come from more than one host, so reports name a straggler rank and
runs of several hosts merge the same way.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

from scaldiag.errors import TraceError

# The tests reach these here.
from scaldiag.readers.kineto.reference import MAX_DEVICES_PER_FILE, _int, _ns  # noqa: F401
from scaldiag.readers.runs import find_files
from scaldiag.trace import Plane, Trace

KINETO_SUFFIX = ".pt.trace.json"
SUFFIXES = (KINETO_SUFFIX, KINETO_SUFFIX + ".gz")
FILE_SUFFIXES = (".json", ".json.gz")  # a file named on the command line may be any Chrome trace
# tensorboard_trace_handler names files <worker>.<time in ms>.pt.trace.json; a worker writes one per
# cycle.
_WORKER_FILE = re.compile(r"^(?P<worker>.+)\.(?P<ms>[0-9]{10,19})\.pt\.trace\.json(\.gz)?$")
_RANK_IN_NAME = re.compile(r"rank[_-]?([0-9]{1,9})", re.I)


def claims(root: Path) -> bool:
    """Whether ``root`` holds Kineto traces: a ``.json``/``.json.gz`` file (or a file whose start
    names ``traceEvents``), or a directory with ``*.pt.trace.json`` files or, by their content,
    Chrome trace JSON of any name (what ``prof.export_chrome_trace("trace_rank0.json")`` writes)."""
    if root.is_file():
        # By name, else by content: a Chrome trace saved under a name of the user's (trace.txt, no
        # suffix at all) was read as XPlane and refused as a bad protobuf.
        return root.name.endswith(FILE_SUFFIXES) or _looks_like_trace(root)
    return any(next(iter(root.rglob(f"*{s}")), None) is not None for s in SUFFIXES) or bool(
        _by_content(root)
    )


# How much of a file's start is read to know a Chrome trace: Kineto writes "traceEvents" after the
# device properties and distributed info (a few KB on an 8-GPU node); files looked at in a
# directory.
SNIFF_BYTES = 256 * 1024
SNIFF_FILES = 64


def _by_content(root: Path) -> list[Path]:
    """The ``.json``/``.json.gz`` files under ``root`` (looked at up to SNIFF_FILES) that are Chrome
    traces."""
    found = []
    candidates = sorted(f for suffix in FILE_SUFFIXES for f in root.rglob(f"*{suffix}"))
    for file in candidates[:SNIFF_FILES]:
        if _looks_like_trace(file):
            found.append(file)
    return found


def _looks_like_trace(file: Path) -> bool:
    """The file's start names ``traceEvents`` (gzip read as a stream, only that far)."""
    import gzip
    import zlib

    try:
        if not file.is_file():
            return False
        with open(file, "rb") as raw:
            head = raw.read(2)
            raw.seek(0)
            if head == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=raw) as unzipped:
                    start = unzipped.read(SNIFF_BYTES)
            else:
                start = raw.read(SNIFF_BYTES)
    except (OSError, EOFError, zlib.error):
        return False
    return b'"traceEvents"' in start


def find_run(path: str | os.PathLike, run: str | None = None) -> tuple[str, list[Path]]:
    """The run to read under ``path`` and its trace files (one per rank).

    ``path``: one file; a directory of one trace per rank; or a TensorBoard
    logdir (``plugins/profile/<run>/`` or ``<run>/``, the latest run unless
    ``run`` names one). A worker with several files (one per profiler cycle)
    contributes its latest.
    """
    if Path(path).is_file():
        return find_files(path, run, SUFFIXES, "")
    root = Path(path)
    if root.is_dir() and not any(
        next(iter(root.rglob(f"*{s}")), None) is not None for s in SUFFIXES
    ):
        files = _by_content(root)  # Chrome trace JSON named as the script chose, one per rank
        if files:
            return _run_of(root, files, run)
    name, files = find_files(path, run, SUFFIXES, f"<run>/<worker>{KINETO_SUFFIX}")
    return name, _latest_per_worker(files)


def _run_of(root: Path, files: list[Path], run: str | None) -> tuple[str, list[Path]]:
    """The run (the directory holding its files) among traces known by their content: the latest
    unless named."""
    runs: dict[str, list[Path]] = {}
    for file in files:
        runs.setdefault(file.parent.name if file.parent != root else root.name, []).append(file)
    name = run if run is not None else sorted(runs)[-1]
    if name not in runs:
        raise TraceError(f"no run named {name!r} under {root}; runs: {', '.join(sorted(runs))}")
    return name, runs[name]


def _latest_per_worker(files: list[Path]) -> list[Path]:
    latest: dict[str, tuple[int, Path]] = {}
    for file in files:
        m = _WORKER_FILE.match(file.name)
        worker, ms = (m["worker"], int(m["ms"])) if m else (file.name, 0)
        if worker not in latest or ms > latest[worker][0]:
            latest[worker] = (ms, file)
    return sorted(f for _, f in latest.values())


def read_trace(files: list[str | os.PathLike]) -> Trace:
    """Read and merge the Kineto traces of one run (one file per rank)."""
    files = [Path(f) for f in files]
    found = [
        read_rank(f) for f in files
    ]  # one at a time: what a file's reading takes is freed before the next
    if len(found) == 1:
        return found[0][1]
    labels = rank_labels([facts for facts, _ in found], files)
    planes = [
        plane for label, (_, trace) in zip(labels, found) for plane in labelled(trace, label).planes
    ]
    return Trace(planes=planes, sources=[str(f) for f in files], hostnames=labels)


def read_rank(file: Path) -> tuple[tuple[str, int | None], Trace]:
    """One rank's file alone: ((host name, rank) for ``rank_labels``, its trace, planes
    unlabelled)."""
    p = _read_file(Path(file))
    host = encodable(p.host_name) if isinstance(p.host_name, str) else p.host_name
    return (host, p.rank), Trace(
        planes=[_encodable_plane(plane) for plane in p.planes],
        sources=[str(file)],
        hostnames=[host or Path(file).name.split(".")[0]],
    )


def encodable(text: str) -> str:
    """``text`` with each lone surrogate (JSON's ``"\\ud800"``: no character, and no UTF-8 encodes
    it) written as its escape: a name holding one printed half the report, then UnicodeEncodeError
    (exit 70).
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _encodable_plane(plane: Plane) -> Plane:
    """The plane with its event, thread and text stat names encodable (the usual plane is returned
    as is)."""
    names = [encodable(n) if isinstance(n, str) else n for n in plane.event_names]
    lines = [
        line if encodable(line.name) == line.name else replace(line, name=encodable(line.name))
        for line in plane.lines
    ]
    stats = {k: encodable(v) if isinstance(v, str) else v for k, v in plane.stats.items()}
    if (
        names == plane.event_names
        and all(a is b for a, b in zip(lines, plane.lines))
        and stats == plane.stats
    ):
        return plane
    return replace(plane, event_names=names, lines=lines, stats=stats)


def labelled(trace: Trace, label: str) -> Trace:
    """A rank's trace (``read_rank``) with its planes named by its label, as ``read_trace`` merges
    them."""
    return Trace(
        planes=[_with_host(plane, label) for plane in trace.planes],
        sources=trace.sources,
        hostnames=[label],
        notes=trace.notes,
    )


def rank_labels(found: list[tuple[str, int | None]], files: list[Path]) -> list[str]:
    """``rank0``... per file (``host/rank0`` across hosts); the file's name where ranks are unknown
    or repeat.

    ``found``: each file's (host name, rank). A file without host_name (torch 2.11's CUDA traces
    have none) names no host: files from one torchrun job would otherwise each look like a host of
    their own ("rank0/rank0")."""
    several_hosts = len({host for host, _ in found if host}) > 1
    ranks = []
    for i, ((_, rank), f) in enumerate(zip(found, files)):
        m = _RANK_IN_NAME.search(f.name)
        ranks.append(rank if rank is not None else int(m.group(1)) if m else i)
    labels = [
        f"{host or 'unknown-host'}/rank{r}" if several_hosts else f"rank{r}"
        for (host, _), r in zip(found, ranks)
    ]
    if len(set(labels)) < len(labels):
        labels = [f.name.removesuffix(".gz").removesuffix(".json") for f in files]
    return labels


def _with_host(plane: Plane, host: str) -> Plane:
    return Plane(
        name=plane.name,
        event_names=plane.event_names,
        lines=plane.lines,
        stats=plane.stats,
        host=host,
        step_marks=plane.step_marks,
    )


def _read_file(file: Path):
    """One rank's file: the streaming scanner (fast.py), or the reference reader where it
    gives up."""
    from scaldiag.readers.kineto import fast, reference

    found = fast.read_file(file)
    return found if found is not None else reference.read_file(file)


def read_document(file: Path) -> dict:
    """A file's whole Chrome trace document, its events as given (the merged trace of a job's ranks,
    pipeline.job_trace), read as the reference reader reads it: a regular file only, gzip under the
    readers' caps (readers/files.py). NaN, Infinity and numbers past a double's or int64's range
    read as absent: JSON has no such numbers, and they broke the merged file."""
    import json
    import math

    from scaldiag.readers.files import read_text_bytes

    def finite_or_none(text: str) -> float | None:
        value = float(text)
        return value if math.isfinite(value) else None

    def int64_or_none(
        text: str,
    ) -> int | None:  # a longer one is no Kineto number (10**400 overflowed)
        return int(text) if len(text.lstrip("-")) <= 18 else None

    data = read_text_bytes(file)
    try:
        doc = json.loads(
            data,
            parse_constant=lambda _: None,
            parse_float=finite_or_none,
            parse_int=int64_or_none,
        )
    except (ValueError, RecursionError) as exc:
        raise TraceError(f"{file}: not a Chrome trace ({type(exc).__name__})") from None
    if isinstance(doc, list):  # the Chrome trace "JSON array" form
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict):
        raise TraceError(f"{file}: not a Chrome trace (not a JSON object)")
    return doc
