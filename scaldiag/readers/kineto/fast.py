"""One Kineto file read as a stream into columns (the fast path; docs/pytorch.md, "Reading traces").

The scanner (readers/_kineto_scan.c) keeps, per complete event, only what the model
of kineto/__init__.py needs: seq, ts, dur, name and cat ids, pid, tid, args.device,
args.stream, args.bytes; each distinct string once. The few events it calls
slow (ph B, E, M, odd fields) go through the reference reader's own code
(kineto_json._Builder) with their seq; both kinds are then put in file order
and built into planes with numpy, so the result is the reference's exactly:
the same name ids (in order of first use), lines, order within a line, stats,
and the same events dropped for times past int64. ``read_file`` returns None
where the scanner gives up; the caller then reads the file with kineto_json.
"""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path

import numpy as np

from scaldiag import native
from scaldiag.errors import TraceError
from scaldiag.readers.kineto import reference as ref
from scaldiag.readers.kineto.stream import GiveUp, scan
from scaldiag.trace import Line, Plane, StepMarks

try:
    from scaldiag.readers import _kineto_scan
except ImportError:  # not built (no C compiler): the reference reader reads every file
    _kineto_scan = None

_F_DEVICE, _F_STREAM, _F_BYTES, _F_PID_STR, _F_TID_STR = 1, 2, 4, 8, 16
_HOST, _DEVICE, _MEMCPY, _SKIP, _DEVICE_STEP = 0, 1, 2, 3, 4
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_COLUMNS = {
    "seq": np.int64,
    "ts_ns": np.int64,
    "dur_ns": np.int64,
    "name": np.int32,
    "cat": np.int32,
    "pid": np.int64,
    "tid": np.int64,
    "device": np.int64,
    "stream": np.int64,
    "bytes": np.int64,
    "flags": np.uint8,
}


def read_file(file: Path):
    """The file's planes, host and rank (a kineto_json._File), or None where the scanner gives
    up."""
    scan_module = native.enabled(_kineto_scan)  # SCALDIAG_NATIVE=0: the reference reader
    native.tell_if_missing(_kineto_scan, "the Kineto reader")
    if scan_module is None:
        return None
    try:
        # One scanner, or more where the file was read in parts (stream.py): each with the
        # number of traceEvents' elements before its part, which its seq counts from.
        parts = scan(file, scan_module.Scanner)
        meta = {}
        for scanner, _ in parts:
            meta.update(scanner.meta())  # a later part's value wins, as json's last key does
        doc = {key: _json(raw) for key, raw in meta.items()}
        strings = _Strings([scanner.strings() for scanner, _ in parts])
        slow = [_parsed(scanner.slow(), seq0) for scanner, seq0 in parts]
    except (
        GiveUp,
        ValueError,
        RecursionError,
    ):  # json's errors (an int of 4,301 digits too): the reference decides
        return None
    rows = _Rows(file, ref.base_ns(doc), strings)
    for canon, (scanner, seq0) in zip(strings.canons, parts):
        columns = _columns(scanner, seq0)
        rows.add_fast(columns, canon)
        del columns
    del parts, scanner
    try:
        # One event parsed at a time, each let go once added: all of them as dicts at once took 17x
        # the file's size where most events are slow ones (ph B/E, args.device as text).
        rows.add_slow(itertools.chain.from_iterable(slow))
    except (ValueError, RecursionError):
        return None
    return ref.file_of(file, doc, rows.planes)


def _columns(scanner, seq0: int) -> dict[str, np.ndarray]:
    """A part's columns (taken from its scanner, without a copy), seq counted in the whole file."""
    columns = {k: np.frombuffer(v, _COLUMNS[k]) for k, v in scanner.take_columns().items()}
    if seq0:
        columns["seq"] = columns["seq"] + seq0
    return columns


def _parsed(slow: list, seq0: int = 0):
    """A scanner's slow events, parsed one by one, each raw text let go as it is parsed; seq
    counted in the whole file (``seq0``: the elements of traceEvents before the scanner's part)."""
    slow.reverse()
    while slow:
        seq, raw = slow.pop()
        yield seq + seq0, _json(raw)


# One decoder for every value the scanner hands over as text: json.loads(raw, parse_float=...) made
# a decoder a call (4 of its 10 us; a rank of 34 KB has 18 such values).
_DECODER = json.JSONDecoder(parse_float=ref.decimal_or_none)


def _json(raw: bytes):
    """``json.loads(raw, parse_float=ref.decimal_or_none)``, without a new decoder each call."""
    return _DECODER.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))


class _Strings:
    """The distinct strings: each scanner's raw ids mapped to one id per decoded string (and any
    added later). Parts come in file order, so ids are given in order of first use as one scanner's
    would be."""

    def __init__(self, raw_parts: list[list[bytes]]):
        self.index: dict[str, int] = {}
        self._per_string: dict[tuple, np.ndarray] = {}
        self.canons = [self._ids(raw) for raw in raw_parts]
        self.step_marker = self.id(ref.STEP_MARKER)

    def _ids(self, raw: list[bytes]) -> np.ndarray:
        """Each raw string's id, decoded (``id`` inlined, ``_decode`` called only for escapes: two
        calls a string were half of it)."""
        index, ids = self.index, []
        for r in raw:
            text = _decode(r) if b"\\" in r else r.decode("utf-8")
            found = index.get(text)
            if found is None:
                found = index[text] = len(index)
            ids.append(found)
        return np.array(ids or [0], np.int64)

    def id(self, text: str) -> int:
        found = self.index.get(text)
        if found is None:
            found = self.index[text] = len(self.index)
        return found

    def table(self) -> list[str]:
        return list(self.index)

    def per_string(self, f, dtype) -> np.ndarray:
        """f of every string, by id; computed once while no string is added (each part asks)."""
        key = (f, np.dtype(dtype), len(self.index))
        if key not in self._per_string:
            self._per_string[key] = np.array([f(s) for s in self.index], dtype)
        return self._per_string[key]


def _decode(raw: bytes) -> str:
    # The scanner checked the UTF-8 and the escapes; json decodes escapes as the reference does.
    return json.loads(b'"' + raw + b'"') if b"\\" in raw else raw.decode("utf-8")


# Each rank's file names mostly the same ops and categories as the one before (one job's ranks run
# one program), so what a string says is remembered across files: 73 names a file judged again took
# 0.2 ms of a 34 KB rank. Bounded, in strings and so in memory: names are the file's to choose.
_REMEMBERED_STRINGS = 4096


@functools.lru_cache(maxsize=_REMEMBERED_STRINGS)
def _category(cat: str) -> int:
    cat = cat.lower()
    if cat in ref.DEVICE_CATS:
        return _MEMCPY if cat == "gpu_memcpy" else _DEVICE
    if cat == ref.DEVICE_STEP_CAT:
        return _DEVICE_STEP
    return _SKIP if cat in ref.SKIP_CATS else _HOST


@functools.lru_cache(maxsize=_REMEMBERED_STRINGS)
def _step_num(name: str) -> int:
    m = ref._STEP.match(name)
    return int(m.group(1)) if m else -1


class _Rows:
    """The file's kept events, as columns per plane kind, in any order (each row has its seq)."""

    def __init__(self, file: Path, base_ns: int, strings: _Strings):
        self.file, self.base_ns, self.strings = file, base_ns, strings
        self.host: list[dict] = []  # column dicts: seq, key, start, end, ok, name, step
        self.fast_parts = 0  # the first this many dicts of each list: a scanner's, seq rising
        self.device: list[dict] = []  # seq, device, key (stream), start, end, ok, name, memcpy
        self.steps: list[dict] = []  # seq, device, start, end, ok, step
        self.keys: dict[object, int] = {}  # line keys (host (pid, tid); device stream) -> key id
        self.thread_names: dict[tuple, str] = {}

    def key_id(self, key) -> int:
        found = self.keys.get(key)
        if found is None:
            found = self.keys[key] = len(self.keys)
        return found

    # ---- the fast events ----

    def add_fast(self, c: dict, canon: np.ndarray) -> None:
        """One scanner's events (``canon``: its string ids to the file's), parts in file order."""
        self.fast_parts += 1
        s = self.strings
        name = canon[c["name"]]
        # Per raw id first (thousands of strings), then one gather per event: kind from cat (-1, no
        # cat, takes the table's last entry, _HOST), step from name.
        kind = np.concatenate((s.per_string(_category, np.int8)[canon], [np.int8(_HOST)]))[c["cat"]]
        start, end, ok = self._absolute(c["ts_ns"], c["ts_ns"] + c["dur_ns"])
        flags = c["flags"]
        pid_int = (flags & _F_PID_STR) == 0
        # A device is args.device, else an integer pid; a stream args.stream, else an integer tid,
        # else -1.
        has_device = (flags & _F_DEVICE) != 0
        device = np.where(has_device, c["device"], c["pid"])
        device_ok = (has_device | pid_int) & (device >= 0)
        step_of = s.per_string(_step_num, np.int64)[canon]
        step = step_of[c["name"]]

        on_device = ((kind == _DEVICE) | (kind == _MEMCPY)) & device_ok
        rows = np.flatnonzero(on_device)
        stream = np.where(
            (flags[rows] & _F_STREAM) != 0,
            c["stream"][rows],
            np.where((flags[rows] & _F_TID_STR) != 0, -1, c["tid"][rows]),
        )
        streams, stream_key, _ = _unique(stream)
        key_of = np.array([self.key_id(int(k)) for k in streams] or [0], np.int64)
        self.device.append(
            {
                "seq": c["seq"][rows],
                "device": device[rows],
                "key": key_of[stream_key],
                "start": start[rows],
                "end": end[rows],
                "ok": ok[rows],
                "name": name[rows],
                "copy": kind[rows] == _MEMCPY,
                "memcpy": self._memcpy(c, canon, rows, kind[rows] == _MEMCPY),
            }
        )

        rows = np.flatnonzero((kind == _DEVICE_STEP) & device_ok & (step >= 0))
        self.steps.append(
            {
                "seq": c["seq"][rows],
                "device": device[rows],
                "start": start[rows],
                "end": end[rows],
                "ok": ok[rows],
                "step": step[rows],
            }
        )

        rows = np.flatnonzero((kind == _HOST) & pid_int)
        self.host.append(
            {
                "seq": c["seq"][rows],
                "key": self._host_keys(c, canon, rows),
                "start": start[rows],
                "end": end[rows],
                "ok": ok[rows],
                "step": step[rows],
                "name": np.where(step_of >= 0, s.step_marker, canon)[c["name"][rows]],
            }
        )

    def _absolute(self, start_rel: np.ndarray, end_rel: np.ndarray):
        """Wall-clock ns (base added) and whether both ends stay in int64 (rows that do not are
        dropped later)."""
        base = self.base_ns
        lo, hi = max(_INT64_MIN - base, _INT64_MIN), min(_INT64_MAX - base, _INT64_MAX)
        if not len(start_rel) or (
            start_rel.min() >= lo
            and start_rel.max() <= hi
            and end_rel.min() >= lo
            and end_rel.max() <= hi
        ):  # the usual: four reductions, no temporaries
            return start_rel + base, end_rel + base, np.ones(len(start_rel), bool)
        ok = (start_rel >= lo) & (start_rel <= hi) & (end_rel >= lo) & (end_rel <= hi)
        return np.where(ok, start_rel, 0) + base, np.where(ok, end_rel, 0) + base, ok

    def _host_keys(self, c: dict, canon: np.ndarray, rows: np.ndarray) -> np.ndarray:
        tid_str = (c["flags"][rows] & _F_TID_STR) != 0
        unique, inverse = _distinct(c["pid"][rows], c["tid"][rows], tid_str)
        table = self.strings.table()
        keys = [
            self.key_id((int(pid), table[canon[tid]] if is_str else int(tid)))
            for pid, tid, is_str in unique
        ]
        return np.array(keys or [0], np.int64)[inverse]

    def _memcpy(
        self, c: dict, canon: np.ndarray, rows: np.ndarray, is_memcpy: np.ndarray
    ) -> np.ndarray | None:
        """memcpy_details per row (None but on copies), computed once per distinct (name, bytes)."""
        if not is_memcpy.any():
            return None
        out = np.full(len(rows), None, dtype=object)
        at = rows[is_memcpy]
        has_bytes = (c["flags"][at] & _F_BYTES) != 0
        unique, inverse = _distinct(
            canon[c["name"][at]], np.where(has_bytes, c["bytes"][at], 0), has_bytes
        )
        table = self.strings.table()
        details = [
            ref._memcpy_details(table[n], {"bytes": int(b)} if has else {}) for n, b, has in unique
        ]
        values = np.empty(len(details), dtype=object)
        values[:] = details
        out[np.flatnonzero(is_memcpy)] = values[inverse]
        return out

    # ---- the slow events: the reference's own code, rows with their seq ----

    def add_slow(self, events: list[tuple[int, object]]) -> None:
        builder = _SlowBuilder(self)
        for seq, event in events:
            if isinstance(event, dict):
                builder.seq = seq
                builder.add(event)
        self.thread_names = builder.thread_names
        host, device, steps = builder.rows
        # The builder and its planes point at each other, and at these rows: left to the cycle
        # collector, every column of the file would stay in memory until its next full pass (ranks
        # read one after another kept ~1 MB a rank more, 70 -> 139 MiB over 32 ranks of 25 MB).
        builder.host, builder.devices, builder._owner = None, {}, None
        if host:
            self.host.append(_slow_columns(host, ("seq", "key", "start", "end", "name", "step")))
        if device:
            memcpy = [row[-1] for row in device]
            columns = _slow_columns(
                [row[:-1] for row in device], ("seq", "device", "key", "start", "end", "name")
            )
            details = np.empty(len(memcpy), dtype=object)
            details[:] = memcpy
            columns["copy"] = np.array([m is not None for m in memcpy], bool)
            columns["memcpy"] = details if any(m is not None for m in memcpy) else None
            self.device.append(columns)
        if steps:
            self.steps.append(_slow_columns(steps, ("seq", "device", "start", "end", "step")))

    # ---- planes ----

    def planes(self, host_stats: dict, device_props: dict[int, dict]) -> list[Plane]:
        table = self.strings.table()
        keys = list(self.keys)
        device = _joined(self.device, ("memcpy",), self.fast_parts)
        steps = _joined(self.steps, (), self.fast_parts)
        devices = _unique(device["device"], inverse=False)[0]
        if len(devices) > ref.MAX_DEVICES_PER_FILE:
            raise TraceError(
                f"{self.file} is refused: its events name more than {ref.MAX_DEVICES_PER_FILE} "
                "distinct GPUs (args.device): one process sees a node's GPUs, far fewer"
            )
        marks = _step_marks(steps)
        planes = []
        for d in devices:
            rows = _take(device, device["device"] == d)
            names, lines = _lines(rows, table, keys, lambda k: f"stream {k}", _device_stats)
            planes.append(
                Plane(
                    name=f"/device:GPU:{d}",
                    event_names=names,
                    lines=lines,
                    stats=ref.device_plane_stats(device_props.get(int(d), {})),
                    step_marks=marks.get(int(d)),
                )
            )
        host = _joined(self.host, (), self.fast_parts)
        names, lines = _lines(host, table, keys, self._thread_name, _host_stats)
        planes.append(Plane(name="/host:CPU", event_names=names, lines=lines, stats=host_stats))
        return planes

    def _thread_name(self, key: tuple) -> str:
        return self.thread_names.get(key) or f"thread {key[1]} (pid {key[0]})"


class _SlowBuilder(ref._Builder):
    """The reference's event logic (ph X, B/E pairs, thread names), its output rows with the event's
    seq."""

    def __init__(self, rows: _Rows):
        super().__init__(rows.base_ns)
        self.seq = 0
        self.rows: tuple[list, list, list] = ([], [], [])
        self.host = _SlowPlane(self, rows, None)
        self._owner = rows

    def _new_device(self, device: int):
        # the device limit: counted in planes()
        plane = self.devices[device] = _SlowPlane(self, self._owner, device)
        return plane

    def _step_mark(self, device: int, start: int, end: int, step_num: int) -> None:
        self.rows[2].append((self.seq, device, start, end, step_num))


class _SlowPlane:
    """Stands for kineto_json._PlaneBuilder: a row per event added, names as ids of the file's
    strings."""

    def __init__(self, builder: _SlowBuilder, rows: _Rows, device: int | None):
        self.builder, self.owner, self.device = builder, rows, device

    def name_id(self, name: str) -> int:
        return self.owner.strings.id(name)

    def line(self, key):
        return _SlowLine(self, self.owner.key_id(key))


class _SlowLine:
    def __init__(self, plane: _SlowPlane, key: int):
        self.plane, self.key = plane, key

    def add(self, start: int, end: int, name_id: int, stats: dict | None) -> None:
        b = self.plane.builder
        if self.plane.device is None:
            step = stats["step_num"] if stats else -1
            b.rows[0].append((b.seq, self.key, start, end, name_id, step))
        else:
            b.rows[1].append(
                (
                    b.seq,
                    self.plane.device,
                    self.key,
                    start,
                    end,
                    name_id,
                    stats["memcpy_details"] if stats else None,
                )
            )


def _distinct(*columns: np.ndarray) -> tuple[list[tuple], np.ndarray]:
    """The distinct rows of equal-length columns (tuples of their values) and each row's index among
    them. Rows come in runs (a thread's events, a stream's kernels): only the first row of each run
    is sorted.
    """
    n = len(columns[0])
    if n == 0:
        return [], np.zeros(0, np.int64)
    change = np.zeros(n, bool)
    change[0] = True
    for column in columns:
        change[1:] |= column[1:] != column[:-1]
    heads = np.flatnonzero(change)
    if len(heads) <= _FEW_RUNS:
        rows, code = _distinct_few([column[heads] for column in columns])
        return rows, np.repeat(code, _run_lengths(heads, n))
    code = np.zeros(len(heads), np.int64)
    for (
        column
    ) in columns:  # one 1-D unique per column: np.unique(axis=0) sorts rows as records, far slower
        distinct, inverse = np.unique(column[heads], return_inverse=True)
        code = np.unique(code * len(distinct) + inverse.reshape(-1), return_inverse=True)[
            1
        ].reshape(-1)
    first = np.unique(code, return_index=True)[1]
    rows = [tuple(column[heads[i]] for column in columns) for i in first]
    return rows, np.repeat(code, _run_lengths(heads, n))  # each run's code over the run


def _run_lengths(heads: np.ndarray, n: int) -> np.ndarray:
    """The lengths of the runs that begin at ``heads`` (rows of ``n``): np.diff(heads, append=n)
    in a third of its time."""
    lengths = np.empty(len(heads), np.int64)
    lengths[:-1] = heads[1:] - heads[:-1]
    lengths[-1] = n - heads[-1]
    return lengths


# Up to this many runs the distinct rows are found by a set of tuples: a file's threads or copy
# kinds come in a few runs, where seven np.unique calls took a quarter of a small rank's reading.
_FEW_RUNS = 4096


def _distinct_few(heads: list[np.ndarray]) -> tuple[list[tuple], np.ndarray]:
    """``_distinct`` of few rows (each run's first): the same rows in the same order (sorted as
    tuples, column by column, as the successive np.unique calls sort them) and each row's index."""
    rows = list(zip(*(column.tolist() for column in heads)))
    distinct = sorted(set(rows))
    index = {row: i for i, row in enumerate(distinct)}
    return distinct, np.array([index[row] for row in rows], np.int64)


def _first_use(ids: np.ndarray) -> np.ndarray:
    """The distinct values of small non-negative ``ids`` in order of first appearance."""
    first = np.full(int(ids.max()) + 1 if len(ids) else 0, len(ids), np.int64)
    np.minimum.at(first, ids, np.arange(len(ids)))
    used = np.flatnonzero(first < len(ids))
    return used[np.argsort(first[used])]


def _group(keys: np.ndarray) -> dict[int, np.ndarray]:
    """Row indices per key, each in row order (a radix sort where the keys fit 16 bits)."""
    distinct, small, counts = _unique(keys)
    if len(distinct) <= _FEW_KEYS:  # a few threads or streams: one comparison each, no sort
        return {k: np.flatnonzero(small == i) for i, k in enumerate(distinct.tolist())}
    small = small.astype(np.int16 if len(distinct) < 2**15 else np.int64)
    order = np.argsort(small, kind="stable")
    return dict(zip(distinct.tolist(), np.split(order, np.cumsum(counts)[:-1])))


_COUNTED_MAX = 1 << 20  # values below this are counted (a table of this many), not sorted
_FEW_KEYS = 8  # up to this many keys a group is found by comparing, not by a sort and a split


def _unique(values: np.ndarray, inverse: bool = True) -> tuple:
    """np.unique(values, return_inverse=True, return_counts=True): the distinct values, sorted,
    each value's index among them (None unless ``inverse``) and their counts. Line keys, streams
    and devices are small non-negative integers: counted, not sorted (a sort of every event's key
    was a third of building the planes)."""
    if not len(values):  # np.unique of nothing took 60 us: a CPU trace's streams, every file
        empty = np.zeros(0, np.int64)
        return values[:0], empty if inverse else None, empty
    if values.min() >= 0 and values.max() < _COUNTED_MAX:
        counts = np.bincount(values)
        present = counts > 0
        distinct = np.flatnonzero(present)
        index = (np.cumsum(present) - 1)[values] if inverse else None
        return distinct.astype(values.dtype), index, counts[distinct]
    distinct, index, counts = np.unique(values, return_inverse=True, return_counts=True)
    return distinct, index.reshape(-1) if inverse else None, counts


def _fits(start: int, end: int) -> bool:
    return _INT64_MIN <= start <= _INT64_MAX and _INT64_MIN <= end <= _INT64_MAX


def _slow_columns(rows: list[tuple], names: tuple[str, ...]) -> dict:
    """Rows of integers as int64 columns, one a name; ``ok`` where both ``start`` and ``end`` fit
    int64, the times 0 where they do not."""
    columns = dict(zip(names, zip(*rows)))
    ok = [_fits(s, e) for s, e in zip(columns["start"], columns["end"])]
    columns["start"], columns["end"] = _clip(columns["start"], ok), _clip(columns["end"], ok)
    return {**{k: np.array(v, np.int64) for k, v in columns.items()}, "ok": np.array(ok, bool)}


def _clip(values, ok) -> list[int]:
    return [v if fits else 0 for v, fits in zip(values, ok)]


def _joined(parts: list[dict], optional: tuple[str, ...] = (), rising: int = 0) -> dict:
    """One column dict from several, in seq order; an optional object column is None-filled where a
    part lacks it. ``rising``: the first this many parts are known to have their seq rising (a
    scanner's, in file order): where they are all there is, no row's seq is compared (np.diff of
    a 1 GB file's 2.6 M host rows took 0.1 s)."""
    known = all(not len(p["seq"]) for p in parts[rising:])
    # the fast events' part is always there
    parts = [p for p in parts if len(p["seq"])] or parts[:1]
    if len(parts) == 1:  # the usual (one scanner, no slow rows): its columns as they are, no copy
        return dict(parts[0])
    out = {}
    for k in parts[0]:
        if k in optional:
            if all(p[k] is None for p in parts):
                out[k] = None
                continue
            out[k] = np.concatenate(
                [p[k] if p[k] is not None else np.full(len(p["seq"]), None, object) for p in parts]
            )
        else:
            out[k] = np.concatenate([p[k] for p in parts])
    if known and all(a["seq"][-1] < b["seq"][0] for a, b in zip(parts, parts[1:])):
        return out  # the fast events alone, parts in file order: in seq order already
    if (np.diff(out["seq"]) > 0).all():
        return out
    order = np.argsort(out["seq"], kind="stable")
    return {k: v[order] if v is not None else None for k, v in out.items()}


def _take(rows: dict, mask: np.ndarray) -> dict:
    return {k: v[mask] if v is not None else None for k, v in rows.items()}


def _step_marks(steps: dict) -> dict[int, StepMarks]:
    """Each device's step markers: the first MAX_DEVICES_PER_FILE devices to have one, times past
    int64 dropped."""
    marks = {}
    if not len(steps["device"]):  # no GPU: np.unique of nothing took 20 us a file
        return marks
    devices, first = np.unique(steps["device"], return_index=True)
    for d in devices[np.argsort(first)][: ref.MAX_DEVICES_PER_FILE]:
        at = (steps["device"] == d) & steps["ok"]
        if at.any():
            marks[int(d)] = StepMarks(
                steps["start"][at], steps["end"][at], steps["step"][at].astype(np.int64)
            )
    return marks


def _lines(
    rows: dict, table: list[str], keys: list, line_name, stats_of
) -> tuple[list[str], list[Line]]:
    """A plane's event names (in order of first use) and lines (by key), rows in seq order: as
    the reference reader builds them."""
    used = _first_use(rows["name"])
    local = np.zeros(int(used.max()) + 1 if len(used) else 1, np.int32)
    local[used] = np.arange(len(used), dtype=np.int32)
    groups = _group(rows["key"])
    lines = []
    for k in sorted(groups, key=lambda k: ref._sort_key(keys[k])):
        at = groups[k]
        stats = stats_of(rows, at)
        at_ok = rows["ok"][at]
        if (
            not at_ok.all()
        ):  # times past int64: no times at all, dropped as the reference drops them
            at = at[at_ok]
            stats = {name: column[at_ok] for name, column in stats.items()}
        lines.append(
            _line(
                line_name(keys[k]),
                rows["start"][at],
                rows["end"][at],
                local[rows["name"][at]],
                stats,
            )
        )
    return [table[i] for i in used], lines


def _line(name: str, start: np.ndarray, end: np.ndarray, name_id: np.ndarray, stats: dict) -> Line:
    order, start, end = _by_start_longest_first(start, end)
    if order is not None:
        name_id = name_id[order]
        stats = {k: v[order] for k, v in stats.items()}
    return Line(name=name, start_ns=start, end_ns=end, name_id=name_id, stats=stats)


def _by_start_longest_first(start: np.ndarray, end: np.ndarray):
    """np.lexsort((-end, start)), the reference reader's order (by start, parents before children),
    in a third of its time where it can: a stable sort by start, kept if every run of equal starts
    is longest first already. Returns the order (None where the rows are in it already) and start
    and end in it (the sorted copies the check made, not made twice)."""
    if len(start) < 2 or (start[1:] > start[:-1]).all():
        # Starts rising already (most threads and streams as Kineto writes them): that is the
        # order, whatever the ends; one comparison instead of a sort and its checks.
        return None, start, end
    order = np.argsort(start, kind="stable")
    in_order_start, in_order_end = start[order], end[order]
    ties = np.diff(in_order_start) == 0
    if (ties & (np.diff(in_order_end) > 0)).any() or (
        len(end) and end.min() == _INT64_MIN
    ):  # -INT64_MIN wraps
        order = np.lexsort((-end, start))
        in_order_start, in_order_end = start[order], end[order]
    if not (order != np.arange(len(order))).any():
        return None, start, end
    return order, in_order_start, in_order_end


def _host_stats(rows: dict, at: np.ndarray) -> dict:
    step = rows["step"][at]
    is_step = step >= 0
    if not is_step.any():
        return {}
    step_num = np.full(len(at), None, dtype=object)
    step_num[is_step] = [int(n) for n in step[is_step]]
    root = np.full(len(at), None, dtype=object)
    root[is_step] = 1
    return {k: v for k, v in (("step_num", step_num), ("_r", root)) if k in ref.WANTED_STATS}


def _device_stats(rows: dict, at: np.ndarray) -> dict:
    if (
        rows["memcpy"] is None
        or not rows["copy"][at].any()
        or "memcpy_details" not in ref.WANTED_STATS
    ):
        return {}
    return {"memcpy_details": rows["memcpy"][at]}
