"""Find XPlane files in a path and read them into a :class:`scaldiag.trace.Trace`.

Only this module knows the protobuf messages; the analysis sees plain numpy
columns. Per event we read three integers and, when the event carries stats,
just the stats in ``WANTED_STATS``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError

from scaldiag.errors import TraceError
from scaldiag.trace import WANTED_STATS, Line, Plane, Trace
from scaldiag.xplane.schema import XSpace

XPLANE_SUFFIX = ".xplane.pb"


def find_run(path: str | os.PathLike, run: str | None = None) -> tuple[str, list[Path]]:
    """The profile run to analyse under ``path`` and its ``.xplane.pb`` files.

    ``path`` may be one file, a run directory holding ``<host>.xplane.pb``
    files, or a TensorBoard logdir (``plugins/profile/<run>/``, where the
    latest run is taken unless ``run`` names one).
    """
    root = Path(path)
    if not root.exists():
        raise TraceError(f"no such file or directory: {root}")
    if root.is_file():
        if run:
            raise TraceError("--run applies to a logdir, not to a single file")
        return root.name, [root]
    runs = _runs_under(root)
    if not runs:
        raise TraceError(f"no {XPLANE_SUFFIX} files under {root} (expected plugins/profile/<run>/<host>{XPLANE_SUFFIX})")
    if run is None:
        run = sorted(runs)[-1]  # run names are timestamps: the last sorts latest
    elif run not in runs:
        raise TraceError(f"no run named {run!r} under {root}; runs: {', '.join(sorted(runs))}")
    return run, runs[run]


def _runs_under(root: Path) -> dict[str, list[Path]]:
    """Runs found below ``root``, by run name (the directory holding the files)."""
    direct = sorted(root.glob(f"*{XPLANE_SUFFIX}"))
    if direct:
        return {root.name: direct}
    runs: dict[str, list[Path]] = {}
    for file in sorted(root.rglob(f"*{XPLANE_SUFFIX}")):
        runs.setdefault(file.parent.name, []).append(file)
    return runs


def read_trace(files: list[str | os.PathLike]) -> Trace:
    """Read and merge the XPlane files of one run (one file per host)."""
    planes, hostnames = [], []
    files = [Path(f) for f in files]
    for file in files:
        space = parse_xspace(file)
        host = space.hostnames[0] if space.hostnames else file.name.removesuffix(XPLANE_SUFFIX)
        hostnames.append(host)
        planes += [_plane(p, host if len(files) > 1 else "") for p in space.planes]
    return Trace(planes=planes, sources=[str(f) for f in files], hostnames=hostnames)


def parse_xspace(file: Path):
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise TraceError(f"cannot read {file}: {exc.strerror}") from exc
    if not data:
        raise TraceError(f"{file} is empty")
    space = XSpace()
    try:
        space.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise TraceError(f"{file} is not a readable XPlane trace (truncated or another format): {exc}") from exc
    # Arbitrary bytes can parse as a message of unknown fields; a real XSpace
    # has named planes such as /host:CPU or /device:GPU:0.
    if not any(p.name.startswith("/") for p in space.planes):
        raise TraceError(f"{file} is not an XPlane trace: it has no /host or /device planes")
    return space


def _stat_value(stat, stat_names: dict[int, str]):
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":  # interned string: the value is a stat_metadata name
        return stat_names.get(stat.ref_value, "")
    value = getattr(stat, kind)
    return value.decode("utf-8", "replace") if kind == "bytes_value" else value


def _plane(proto, host: str) -> Plane:
    stat_names = {key: meta.name for key, meta in proto.stat_metadata.items()}
    wanted_ids = {key: name for key, name in stat_names.items() if name in WANTED_STATS}
    meta_stats = _metadata_stats(proto, stat_names, wanted_ids)
    names: list[str] = []
    name_index: dict[int, int] = {}
    lines = [_line(line, proto, names, name_index, stat_names, wanted_ids, meta_stats) for line in proto.lines]
    plane_stats = {stat_names.get(s.metadata_id, ""): _stat_value(s, stat_names) for s in proto.stats}
    return Plane(name=proto.name, event_names=names, lines=lines, stats=plane_stats, host=host)


def _metadata_stats(proto, stat_names, wanted_ids) -> dict[int, dict[str, object]]:
    """Wanted stats attached to event metadata (shared by all its events)."""
    found: dict[int, dict[str, object]] = {}
    for key, meta in proto.event_metadata.items():
        for stat in meta.stats:
            if stat.metadata_id in wanted_ids:
                found.setdefault(key, {})[wanted_ids[stat.metadata_id]] = _stat_value(stat, stat_names)
    return found


def _line(line, proto, names, name_index, stat_names, wanted_ids, meta_stats) -> Line:
    events = line.events
    n = len(events)
    offset_ps = np.empty(n, np.int64)
    duration_ps = np.empty(n, np.int64)
    metadata_id = np.empty(n, np.int64)
    stats: dict[str, np.ndarray] = {}
    for i, event in enumerate(events):
        offset_ps[i] = event.offset_ps
        duration_ps[i] = event.duration_ps
        metadata_id[i] = event.metadata_id
        if event.stats and wanted_ids:
            for stat in event.stats:
                name = wanted_ids.get(stat.metadata_id)
                if name is not None:
                    column = stats.get(name)
                    if column is None:
                        column = stats[name] = np.full(n, None, dtype=object)
                    column[i] = _stat_value(stat, stat_names)
    _fill_from_metadata(stats, metadata_id, meta_stats, n)
    start_ns = line.timestamp_ns + offset_ps // 1000
    end_ns = start_ns + (np.maximum(duration_ps, 0) + 500) // 1000
    return Line(name=line.name or line.display_name, start_ns=start_ns, end_ns=end_ns,
                name_id=_name_ids(metadata_id, proto, names, name_index), stats=stats)


def _fill_from_metadata(stats, metadata_id, meta_stats, n) -> None:
    """Events without their own value of a stat take their metadata's."""
    if not meta_stats:
        return
    for key in np.unique(metadata_id):
        for name, value in meta_stats.get(int(key), {}).items():
            column = stats.get(name)
            if column is None:
                column = stats[name] = np.full(n, None, dtype=object)
            rows = (metadata_id == key) & np.equal(column, None)
            column[rows] = value


def _name_ids(metadata_id, proto, names, name_index) -> np.ndarray:
    unique, inverse = np.unique(metadata_id, return_inverse=True)
    local = np.empty(len(unique), np.int32)
    for j, key in enumerate(unique):
        key = int(key)
        if key not in name_index:
            meta = proto.event_metadata.get(key)
            name_index[key] = len(names)
            names.append((meta.name or meta.display_name) if meta is not None else f"<unknown {key}>")
        local[j] = name_index[key]
    return local[inverse].astype(np.int32) if len(unique) else np.empty(0, np.int32)
