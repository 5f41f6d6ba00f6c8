"""Find XPlane files in a path and read them into a :class:`scaldiag.trace.Trace`.

Only this module and wire.py know the format; the analysis sees plain numpy
columns. Per event we decode three integers and, of its stats, only those in
``WANTED_STATS`` become Python values.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError

from scaldiag.errors import TraceError
from scaldiag.readers.xplane.schema import EVENTS_TAG, LINES_TAG, PLANES_TAG, XLine, XPlane, XSpace
from scaldiag.readers.xplane.wire import WireError, as_int64, fields, split_fields
from scaldiag.trace import WANTED_STATS, Line, Plane, Trace

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
        try:
            host, file_planes = _read_file(file)
        except (WireError, IndexError, DecodeError, RuntimeError, ValueError) as exc:
            raise TraceError(f"{file} is not a readable XPlane trace (truncated or another format): {exc}") from exc
        # Arbitrary bytes can decode as a message of unknown fields; a real
        # XSpace has named planes such as /host:CPU or /device:GPU:0.
        if not any(p.name.startswith("/") for p in file_planes):
            raise TraceError(f"{file} is not an XPlane trace: it has no /host or /device planes")
        hostnames.append(host)
        planes += [replace(p, host=host) if len(files) > 1 else p for p in file_planes]
    return Trace(planes=planes, sources=[str(f) for f in files], hostnames=hostnames)


def _read_file(file: Path) -> tuple[str, list[Plane]]:
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise TraceError(f"cannot read {file}: {exc.strerror}") from exc
    if not data:
        raise TraceError(f"{file} is empty")
    rest, plane_starts, plane_ends = split_fields(data, 0, len(data), PLANES_TAG)
    space = XSpace.FromString(rest)  # hostnames, errors: everything but the planes
    host = space.hostnames[0] if space.hostnames else file.name.removesuffix(XPLANE_SUFFIX)
    buf = np.frombuffer(data, np.uint8)
    return host, [_plane(data, buf, s, e) for s, e in zip(plane_starts.tolist(), plane_ends.tolist())]


def _stat_value(stat, stat_names: dict[int, str]):
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":  # interned string: the value is a stat_metadata name
        return stat_names.get(stat.ref_value, "")
    value = getattr(stat, kind)
    return value.decode("utf-8", "replace") if kind == "bytes_value" else value


def _plane(data: bytes, buf: np.ndarray, start: int, end: int) -> Plane:
    rest, line_starts, line_ends = split_fields(data, start, end, LINES_TAG)
    proto = XPlane.FromString(rest)  # name, metadata and plane stats: everything but the lines
    stat_names = {key: meta.name for key, meta in proto.stat_metadata.items()}
    wanted_ids = {key: name for key, name in stat_names.items() if name in WANTED_STATS}
    meta_stats = _metadata_stats(proto, stat_names, wanted_ids)
    names: list[str] = []
    name_index: dict[int, int] = {}
    lines = [_line(data, buf, s, e, proto, names, name_index, stat_names, wanted_ids, meta_stats)
             for s, e in zip(line_starts.tolist(), line_ends.tolist())]
    plane_stats = {stat_names.get(s.metadata_id, ""): _stat_value(s, stat_names) for s in proto.stats}
    return Plane(name=proto.name, event_names=names, lines=lines, stats=plane_stats)


def _metadata_stats(proto, stat_names, wanted_ids) -> dict[int, dict[str, object]]:
    """Wanted stats attached to event metadata (shared by all its events)."""
    found: dict[int, dict[str, object]] = {}
    for key, meta in proto.event_metadata.items():
        for stat in meta.stats:
            if stat.metadata_id in wanted_ids:
                found.setdefault(key, {})[wanted_ids[stat.metadata_id]] = _stat_value(stat, stat_names)
    return found


def _line(data, buf, start, end, proto, names, name_index, stat_names, wanted_ids, meta_stats) -> Line:
    rest, event_starts, event_ends = split_fields(data, start, end, EVENTS_TAG)
    header = XLine.FromString(rest)  # id, name, timestamp: everything but the events
    offset_ps, duration_ps, metadata_id, stats = _event_columns(data, buf, event_starts, event_ends,
                                                               stat_names, wanted_ids)
    _fill_from_metadata(stats, metadata_id, meta_stats, len(offset_ps))
    start_ns = header.timestamp_ns + offset_ps // 1000
    end_ns = start_ns + (np.maximum(duration_ps, 0) + 500) // 1000
    return Line(name=header.name or header.display_name, start_ns=start_ns, end_ns=end_ns,
                name_id=_name_ids(metadata_id, proto, names, name_index), stats=stats)


def _event_columns(data, buf, starts, ends, stat_names, wanted_ids):
    """offset_ps, duration_ps, metadata_id columns and wanted stats of the events at [starts, ends)."""
    f = fields(buf, starts, ends)
    n = len(starts)
    columns = []
    for number in (2, 3, 1):  # offset_ps, duration_ps, metadata_id
        column = np.zeros(n, np.int64)
        rows = f["field"] == number
        column[f["msg"][rows]] = as_int64(f["value"][rows])
        columns.append(column)
    stat_rows = f["field"] == 4
    stats = _wanted_stats(data, buf, f["msg"][stat_rows], f["body_start"][stat_rows], f["body_end"][stat_rows],
                          n, stat_names, wanted_ids) if wanted_ids and stat_rows.any() else {}
    return (*columns, stats)


def _wanted_stats(data, buf, stat_event, body_start, body_end, n, stat_names, wanted_ids):
    """Decode every XStat's metadata_id at once; build Python values only for wanted ones."""
    sf = fields(buf, body_start, body_end)
    meta = np.zeros(len(stat_event), np.int64)
    id_rows = sf["field"] == 1
    meta[sf["msg"][id_rows]] = as_int64(sf["value"][id_rows])
    wanted = np.isin(meta, np.fromiter(wanted_ids, np.int64))
    rows = np.flatnonzero((sf["field"] >= 2) & (sf["field"] <= 7) & wanted[sf["msg"]])
    stat_index = sf["msg"][rows]
    stats: dict[str, np.ndarray] = {}
    for meta_id in np.unique(meta[stat_index]).tolist():
        mine = rows[meta[stat_index] == meta_id]
        column = stats.setdefault(wanted_ids[meta_id], np.full(n, None, dtype=object))
        for number in np.unique(sf["field"][mine]).tolist():
            r = mine[sf["field"][mine] == number]
            column[stat_event[sf["msg"][r]]] = _wire_values(data, number, sf["value"][r], sf["body_start"][r],
                                                            sf["body_end"][r], stat_names)
    return stats


def _wire_values(data: bytes, number: int, raw: np.ndarray, start: np.ndarray, end: np.ndarray, stat_names):
    """Python values of one XStat value field (2..7) for many stats."""
    if number == 2:
        return raw.view(np.float64).tolist()
    if number == 3:
        return raw.tolist()
    if number == 4:
        return raw.view(np.int64).tolist()
    if number in (5, 6):
        return [data[a:b].decode("utf-8", "replace") for a, b in zip(start.tolist(), end.tolist())]
    unique, inverse = np.unique(raw, return_inverse=True)  # 7: ref_value, an interned string
    names = np.array([stat_names.get(int(u), "") for u in unique], dtype=object)
    return names[inverse].tolist()


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
