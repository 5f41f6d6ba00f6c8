"""The reference reader of one Kineto file: ``json.loads`` of the whole document, then one dict per
event.

fast.py reads files this way only where its scanner gives up (odd JSON,
invalid text: see readers/_kineto_scan.c), so the words of every refusal are these;
the tests compare the two readers on every fixture and on mutated traces. The
model it fills is described in kineto/__init__.py.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, DecimalException
from pathlib import Path

import numpy as np

from scaldiag.errors import TraceError
from scaldiag.readers.files import read_text_bytes
from scaldiag.trace import WANTED_STATS, Line, Plane, StepMarks

DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
# Not work of a thread or a stream: the profiler's own spans, GPU projections of annotations, flows.
# Of these, the GPU projections of ProfilerStep#N are kept as the device's step markers.
DEVICE_STEP_CAT = "gpu_user_annotation"
SKIP_CATS = frozenset({"gpu_user_annotation", "trace", "overhead", "ac2g", "fwdbwd", "flow_event"})
STEP_MARKER = "ProfilerStep"
_STEP = re.compile(r"^ProfilerStep#([0-9]{1,18})$")
# Kineto's copy names: "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)".
_MEMCPY_KINDS = re.compile(r"\((\w+) -> (\w+)\)")
# Bounds on the numbers of a trace (issue 22): int(Decimal("1e999999999")) never ends, so a number's
# magnitude is looked at before it is converted. An id or a byte count is an int64; a timestamp
# below 10**16 us (year 2286 as epoch microseconds); an event whose nanoseconds still leave int64 (a
# large base plus a large ts) is dropped when its line is built, at no cost to the others.
_ID_DIGITS = 19  # Decimal.adjusted() below this: under 10**19 (int64 is 9.2e18, checked after)
_TS_US_DIGITS = 16  # Decimal.adjusted() below this: under 10**16 us
# an integer written as text (ASCII digits only: int("²") fails)
_NUMBER_TEXT = re.compile(r"-?[0-9]{1,19}")
_NUMBER_TEXT_CHARS = 40  # longer text is no timestamp or id, whatever it says
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# One process sees a node's GPUs: 8-16 today. Each device plane costs the analysis memory in the
# number of planes (hoststate's gap table), so 16,000 made-up device ids took 8.4 GB (issue 22); far
# fewer is no trace.
MAX_DEVICES_PER_FILE = 256


def decimal_or_none(text: str) -> Decimal | None:
    """A JSON number as a Decimal; None (no number) where Decimal cannot hold it: an exponent of 19
    digits (``1e9999999999999999999``) is past Decimal's own bounds and raised InvalidOperation
    (exit 70).
    """
    try:
        return Decimal(text)
    except DecimalException:
        return None


class _File:
    """One file read: its planes, the host it names and its rank (distributedInfo)."""

    def __init__(self, planes: list[Plane], host_name: str, rank: int | None):
        self.planes, self.host_name, self.rank = planes, host_name, rank


def _load(file: Path):
    raw = read_text_bytes(file)  # gzip refused past its caps (readers/files.py)
    if not raw:
        raise TraceError(f"{file} is empty")
    try:
        # Decimals stay exact: ts are microseconds with nanosecond decimals on a large base.
        return json.loads(raw, parse_float=decimal_or_none)
    except UnicodeDecodeError as exc:
        raise TraceError(
            f"{file} is not a Kineto trace: not UTF-8 text (byte {exc.start})"
        ) from exc
    except json.JSONDecodeError as exc:
        raise TraceError(
            f"{file} is not a Kineto trace: not valid JSON ({exc.msg} at line {exc.lineno}, "
            f"column {exc.colno}; truncated?)"
        ) from exc
    except RecursionError as exc:
        raise TraceError(f"{file} is not a Kineto trace: nested too deeply") from exc
    except (
        ValueError
    ) as exc:  # an integer of more than 4,300 digits (int's limit on text conversion)
        raise TraceError(f"{file} is not a Kineto trace: {exc}") from exc


def read_file(file: Path) -> _File:
    doc = _load(file)
    if isinstance(doc, list):  # the Chrome trace "JSON array" form
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{file} is not a Kineto/Chrome trace: no traceEvents list")
    builder = _Builder(base_ns(doc))
    try:
        for event in doc["traceEvents"]:
            if isinstance(event, dict):
                builder.add(event)
    except TraceError as exc:
        raise TraceError(f"{file} is refused: {exc}") from exc
    return file_of(file, doc, builder.planes)


def base_ns(doc: dict) -> int:
    """The wall clock of ts 0 (epoch ns), from the document's top-level values."""
    return _int(doc.get("baseTimeNanoseconds")) or 0


def file_of(file: Path, doc: dict, planes_of) -> _File:
    """A file's planes (``planes_of(host_stats, device_properties)``), host and rank, from its
    top-level values."""
    dist = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
    rank = _int(dist.get("rank"))
    host_name = doc.get("host_name") if isinstance(doc.get("host_name"), str) else ""
    host_stats = {"kineto_schema_version": _int(doc.get("schemaVersion")) or 0}
    for key in ("backend", "world_size", "rank", "pg_count"):
        if isinstance(dist.get(key), (str, int)) and not isinstance(dist.get(key), bool):
            host_stats[f"distributed_{key}"] = dist[key]
    planes = planes_of(host_stats, _device_properties(doc.get("deviceProperties")))
    if not any(p.event_count for p in planes):
        raise TraceError(
            f"{file} is not a Kineto trace with events: no complete (ph X) events on threads or"
            " streams"
        )
    return _File(planes, host_name, rank)


def _device_properties(props) -> dict[int, dict]:
    found = {}
    for p in props if isinstance(props, list) else []:
        if isinstance(p, dict) and _int(p.get("id")) is not None:
            found[_int(p["id"])] = {
                k: v for k, v in p.items() if isinstance(v, (str, int)) and not isinstance(v, bool)
            }
    return found


def _int(value) -> int | None:
    """An id or a byte count (int, integral decimal or float, integer text) within int64, else
    None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if _INT64_MIN <= value <= _INT64_MAX else None
    if isinstance(value, Decimal):
        if (
            not value.is_finite()
            or value.adjusted() >= _ID_DIGITS
            or value != value.to_integral_value()
        ):
            return None
        return _int(int(value))
    if isinstance(value, float):
        return _int(int(value)) if value.is_integer() else None  # NaN and infinity are not integers
    if (
        isinstance(value, str)
        and len(value) <= _NUMBER_TEXT_CHARS
        and _NUMBER_TEXT.fullmatch(value.strip())
    ):
        return _int(int(value))
    return None


def _ns(value) -> int | None:
    """Microseconds (int, decimal, float or numeric text) as integer nanoseconds; None for what is
    no time."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, Decimal):
        # The magnitude first: converting 1e999999999 would never end, 1e999999 overflows the
        # context.
        if value.is_finite() and value.adjusted() < _TS_US_DIGITS:
            return int((value * 1000).to_integral_value())
        return None
    if isinstance(value, float):
        return round(value * 1000) if value == value and abs(value) < 1e16 else None
    if isinstance(value, str) and len(value) <= _NUMBER_TEXT_CHARS:
        try:
            return _ns(Decimal(value))
        except DecimalException:  # not a number
            return None
    return None


class _LineBuilder:
    __slots__ = ("start", "end", "name", "stats")

    def __init__(self):
        self.start: list[int] = []
        self.end: list[int] = []
        self.name: list[int] = []
        self.stats: dict[str, dict[int, object]] = {}

    def add(self, start: int, end: int, name_id: int, stats: dict | None) -> None:
        if stats:
            row = len(self.start)
            for key, value in stats.items():
                self.stats.setdefault(key, {})[row] = value
        self.start.append(start)
        self.end.append(end)
        self.name.append(name_id)

    def line(self, name: str) -> Line:
        try:
            start = np.array(self.start, np.int64)
            end = np.array(self.end, np.int64)
        except (
            OverflowError
        ):  # a time past int64 nanoseconds: no time at all (rare; the common path pays nothing)
            self._drop_beyond_int64()
            start = np.array(self.start, np.int64)
            end = np.array(self.end, np.int64)
        name_id = np.array(self.name, np.int32)
        stats = {}
        for key in WANTED_STATS:
            if key in self.stats:
                column = stats[key] = np.full(len(start), None, dtype=object)
                for row, value in self.stats[key].items():
                    column[row] = value
        order = np.lexsort((-end, start))  # by start, parents before children
        if (order != np.arange(len(order))).any():
            start, end, name_id = start[order], end[order], name_id[order]
            stats = {k: v[order] for k, v in stats.items()}
        return Line(name=name, start_ns=start, end_ns=end, name_id=name_id, stats=stats)

    def _drop_beyond_int64(self) -> None:
        keep = [
            i
            for i, (s, e) in enumerate(zip(self.start, self.end))
            if _INT64_MIN <= s <= _INT64_MAX and _INT64_MIN <= e <= _INT64_MAX
        ]
        new_row = {old: new for new, old in enumerate(keep)}
        self.start = [self.start[i] for i in keep]
        self.end = [self.end[i] for i in keep]
        self.name = [self.name[i] for i in keep]
        self.stats = {
            k: {new_row[r]: v for r, v in rows.items() if r in new_row}
            for k, rows in self.stats.items()
        }


class _PlaneBuilder:
    def __init__(self):
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.lines: dict[object, _LineBuilder] = {}

    def name_id(self, name: str) -> int:
        found = self.index.get(name)
        if found is None:
            found = self.index[name] = len(self.names)
            self.names.append(name)
        return found

    def line(self, key) -> _LineBuilder:
        found = self.lines.get(key)
        if found is None:
            found = self.lines[key] = _LineBuilder()
        return found


class _Builder:
    """Events of one file, sorted into device streams and host threads."""

    def __init__(self, base_ns: int):
        self.base_ns = base_ns
        self.host = _PlaneBuilder()
        self.devices: dict[int, _PlaneBuilder] = {}
        self.thread_names: dict[tuple, str] = {}
        self.open: dict[tuple, list] = {}  # B/E pairs per thread
        self.texts: dict[str, str] = {}  # the open events' names and categories, each once
        self.device_steps: dict[
            int, tuple[list, list, list]
        ] = {}  # GPU-side ProfilerStep#N: starts, ends, N

    def add(self, e: dict) -> None:
        ph = e.get("ph")
        if ph == "X":
            start = _ns(e.get("ts"))
            if start is None:
                return
            dur = _ns(e.get("dur")) or 0
            self._complete(e, start + self.base_ns, start + self.base_ns + max(dur, 0))
        elif ph == "M":
            if e.get("name") == "thread_name" and isinstance(e.get("args"), dict):
                name = e["args"].get("name")
                if isinstance(name, str):
                    self.thread_names[(_id(e.get("pid")), _id(e.get("tid")))] = name.strip()
        elif ph == "B":
            start = _ns(e.get("ts"))
            if start is not None:
                self.open.setdefault((_id(e.get("pid")), _id(e.get("tid"))), []).append(
                    (*self._kept(e), start + self.base_ns)
                )
        elif ph == "E":
            stack = self.open.get((_id(e.get("pid")), _id(e.get("tid"))))
            end = _ns(e.get("ts"))
            if stack and end is not None:
                name, cat, pid, tid, args, start = stack.pop()
                begin = {"name": name, "cat": cat, "pid": pid, "tid": tid, "args": args}
                self._complete(begin, start, max(end + self.base_ns, start))

    def _kept(self, e: dict) -> tuple:
        """What ``_complete`` reads of an open B event, its strings shared: the whole event held
        until its E took 13x the file's size for a file of 1M B events (984 MB for 75 MB)."""
        name, cat = e.get("name"), e.get("cat")
        name = self.texts.setdefault(name, name) if isinstance(name, str) else name
        cat = self.texts.setdefault(cat, cat) if isinstance(cat, str) else cat
        args = e.get("args") or None  # an empty one is as none to _complete
        return name, cat, e.get("pid"), e.get("tid"), args

    def _complete(self, e: dict, start: int, end: int) -> None:
        name = e.get("name")
        if not isinstance(name, str):
            name = "" if name is None else str(name)
        cat = e.get("cat")
        cat = cat.lower() if isinstance(cat, str) else ""
        if cat in SKIP_CATS:
            if cat == DEVICE_STEP_CAT and name.startswith(STEP_MARKER):
                self._device_step(e, name, start, end)
            return
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        pid, tid = _id(e.get("pid")), _id(e.get("tid"))
        if cat in DEVICE_CATS:
            device = _int(args.get("device"))
            device = device if device is not None else _int(pid)
            stream = _int(args.get("stream"))
            stream = stream if stream is not None else _int(tid)
            if device is None or device < 0:
                return
            plane = self.devices.get(device)
            if plane is None:
                plane = self._new_device(device)
            stats = {"memcpy_details": _memcpy_details(name, args)} if cat == "gpu_memcpy" else None
            plane.line(stream if stream is not None else -1).add(
                start, end, plane.name_id(name), stats
            )
            return
        if not isinstance(pid, int):  # the profiler's own pseudo-processes ("Spans", "Traces")
            return
        stats = None
        step = _STEP.match(name)
        if step:
            name, stats = STEP_MARKER, {"step_num": int(step.group(1)), "_r": 1}
        self.host.line((pid, tid)).add(start, end, self.host.name_id(name), stats)

    def _device_step(self, e: dict, name: str, start: int, end: int) -> None:
        """A GPU-side ``ProfilerStep#N``: a step marker of its device (``args.device``, else its
        pid)."""
        step = _STEP.match(name)
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        device = _int(args.get("device"))
        device = device if device is not None else _int(e.get("pid"))
        if step is None or device is None or device < 0:
            return
        self._step_mark(device, start, end, int(step.group(1)))

    def _step_mark(self, device: int, start: int, end: int, step_num: int) -> None:
        marks = self.device_steps.get(device)
        if marks is None:
            if len(self.device_steps) >= MAX_DEVICES_PER_FILE:
                return  # no more devices than the work may name
            marks = self.device_steps[device] = ([], [], [])
        marks[0].append(start)
        marks[1].append(end)
        marks[2].append(step_num)

    def _step_marks(self, device: int) -> StepMarks | None:
        marks = self.device_steps.get(device)
        if not marks:
            return None
        rows = [
            i
            for i, (s, e) in enumerate(zip(marks[0], marks[1]))
            if _INT64_MIN <= s <= _INT64_MAX and _INT64_MIN <= e <= _INT64_MAX
        ]
        if not rows:
            return None
        return StepMarks(*(np.array([column[i] for i in rows], np.int64) for column in marks))

    def _new_device(self, device: int) -> _PlaneBuilder:
        if len(self.devices) >= MAX_DEVICES_PER_FILE:
            raise TraceError(
                f"its events name more than {MAX_DEVICES_PER_FILE} distinct GPUs (args.device): "
                "one process sees a node's GPUs, far fewer"
            )
        plane = self.devices[device] = _PlaneBuilder()
        return plane

    def planes(self, host_stats: dict, device_props: dict[int, dict]) -> list[Plane]:
        planes = []
        for device in sorted(self.devices):
            b = self.devices[device]
            lines = [b.lines[s].line(f"stream {s}") for s in sorted(b.lines, key=_sort_key)]
            stats = device_plane_stats(device_props.get(device, {}))
            planes.append(
                Plane(
                    name=f"/device:GPU:{device}",
                    event_names=b.names,
                    lines=lines,
                    stats=stats,
                    step_marks=self._step_marks(device),
                )
            )
        host_lines = [
            self.host.lines[key].line(self._thread_name(key))
            for key in sorted(self.host.lines, key=_sort_key)
        ]
        planes.append(
            Plane(name="/host:CPU", event_names=self.host.names, lines=host_lines, stats=host_stats)
        )
        return planes

    def _thread_name(self, key: tuple) -> str:
        return self.thread_names.get(key) or f"thread {key[1]} (pid {key[0]})"


def device_plane_stats(props: dict) -> dict:
    """A device plane's stats from its entry of deviceProperties."""
    return {
        f"device_{k}": v
        for k, v in props.items()
        if k in ("name", "totalGlobalMem", "computeMajor", "computeMinor", "numSms")
    }


def _id(value):
    """A pid or tid: an integer when it is one (Kineto writes both numbers and names)."""
    number = _int(value)
    return number if number is not None else ("" if value is None else str(value))


def _sort_key(key):
    return tuple(
        (0, k, "") if isinstance(k, int) else (1, 0, str(k))
        for k in (key if isinstance(key, tuple) else (key,))
    )


def _memcpy_details(name: str, args: dict) -> str:
    """CUPTI's memcpy_details form from Kineto's name ("Memcpy HtoD (Pinned -> Device)") and
    args.bytes."""
    parts = []
    kinds = _MEMCPY_KINDS.search(name)
    if kinds:
        parts += [f"kind_src:{kinds.group(1).lower()}", f"kind_dst:{kinds.group(2).lower()}"]
    size = _int(args.get("bytes"))
    if size is not None and size >= 0:
        parts.append(f"size:{size}")
    return " ".join(parts)
