"""Find XPlane files in a path and read them into a :class:`scaldiag.trace.Trace`.

Only this module and wire.py know the format; the analysis sees plain numpy
columns. Per event we decode three integers and, of its stats, only those in
``WANTED_STATS`` become Python values.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError

from scaldiag import native
from scaldiag.errors import TraceError
from scaldiag.readers.files import open_regular
from scaldiag.readers.runs import find_files
from scaldiag.readers.xplane.schema import (
    EVENT_DURATION_PS,
    EVENT_METADATA_ID,
    EVENT_OFFSET_PS,
    EVENT_STATS,
    EVENTS_TAG,
    LINES_TAG,
    PLANES_TAG,
    STAT_BYTES,
    STAT_DOUBLE,
    STAT_INT64,
    STAT_METADATA_ID,
    STAT_REF,
    STAT_STR,
    STAT_UINT64,
    WIRE_FIXED64,
    WIRE_LENGTH,
    WIRE_VARINT,
    XLine,
    XPlane,
    XSpace,
    tag,
)
from scaldiag.readers.xplane.wire import (
    WireError,
    as_int64,
    bulk_batches,
    fields,
    split_fields,
    varint_lengths,
    word_varints,
)
from scaldiag.trace import INT_STATS, WANTED_STATS, Line, Plane, SparseStat, Trace

# the C decoder, where it was built (setup.py); else the numpy one below, which gives the same
# columns
try:
    from scaldiag.readers.xplane import _wire as _wire_c
except ImportError:
    _wire_c = None

XPLANE_SUFFIX = ".xplane.pb"


def find_run(path: str | os.PathLike, run: str | None = None) -> tuple[str, list[Path]]:
    """The profile run to analyse under ``path`` and its ``.xplane.pb`` files.

    ``path`` may be one file, a run directory holding ``<host>.xplane.pb``
    files, or a TensorBoard logdir (``plugins/profile/<run>/``, where the
    latest run is taken unless ``run`` names one).
    """
    return find_files(path, run, (XPLANE_SUFFIX,), f"plugins/profile/<run>/<host>{XPLANE_SUFFIX}")


def read_trace(files: list[str | os.PathLike]) -> Trace:
    """Read and merge the XPlane files of one run (one file per host)."""
    planes, hostnames = [], []
    files = [Path(f) for f in files]
    for file in files:
        try:
            host, file_planes = _read_file(file)
        except (WireError, IndexError, DecodeError, RuntimeError, ValueError) as exc:
            raise TraceError(
                f"{file} is not a readable XPlane trace (truncated or another format): {exc}"
            ) from exc
        # Arbitrary bytes can decode as a message of unknown fields; a real
        # XSpace has named planes such as /host:CPU or /device:GPU:0.
        if not any(p.name.startswith("/") for p in file_planes):
            raise TraceError(f"{file} is not an XPlane trace: it has no /host or /device planes")
        hostnames.append(host)
        planes += [replace(p, host=host) if len(files) > 1 else p for p in file_planes]
    return Trace(planes=planes, sources=[str(f) for f in files], hostnames=hostnames)


def _read_file(file: Path) -> tuple[str, list[Plane]]:
    """Map the file and decode it plane by plane, line by line.

    Nothing holds the file's bytes: the kernel pages them in as the decoder
    reaches them and they are dropped from memory once decoded, so memory
    follows the decoded columns, not the file.
    """
    try:
        with open_regular(file) as f:  # never a device or a FIFO: read forever, or blocked
            if os.fstat(f.fileno()).st_size == 0:
                raise TraceError(f"{file} is empty")
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise TraceError(f"cannot read {file}: {exc.strerror}") from exc
    if len(data) >= _NOTICE_MIN_BYTES:
        native.tell_if_missing(_wire_c, "reading this large trace")
    helper = _Helper.start(file, len(data))
    try:
        return _read_mapped(file, data, helper)
    finally:
        if helper is not None:
            helper.stop()
        try:
            data.close()
        except BufferError:  # an array still views it (an exception's frames): the GC closes it
            pass


_NOTICE_MIN_BYTES = 64 << 20  # from here a missing compiled decoder costs the user seconds


# With SCALDIAG_DECODE_WORKERS=1, a second process decodes every other batch
# of a large file's events. Off by default: on the shared 2-core development
# machine it cut this process's CPU time by a quarter but not the wall time
# (270 MB: 12.8 s against 12.0 s alone, load average ~3.8), since no core was
# free; it pays where one is.
_PARALLEL_MIN_BYTES = 64 << 20
_IN_FLIGHT = 4  # batches sent ahead at most (bounds the memory they hold)


class _Helper:
    """A process that maps the same file and decodes batches of events sent to it."""

    def __init__(self, pool):
        self.pool = pool

    @classmethod
    def start(cls, file: Path, size: int) -> _Helper | None:
        workers = int(os.environ.get("SCALDIAG_DECODE_WORKERS", "0") or 0)
        if workers < 1 or size < _PARALLEL_MIN_BYTES or (os.cpu_count() or 1) < 2:
            return None
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        try:
            pool = ProcessPoolExecutor(
                workers,
                multiprocessing.get_context("spawn"),
                initializer=_helper_open,
                initargs=(str(file),),
            )
        except (OSError, RuntimeError):  # no processes here (sandbox, frozen app): decode alone
            return None
        return cls(pool)

    def submit(self, starts, ends, context: _PlaneContext):
        return self.pool.submit(
            _helper_decode, starts, ends, context.stat_names, context.wanted_ids
        )

    def stop(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


_HELPER_FILE: dict = {}


def _helper_open(path: str) -> None:
    with open(path, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    _HELPER_FILE.update(data=data, buf=np.frombuffer(data, np.uint8))


def _helper_decode(starts, ends, stat_names, wanted_ids):
    context = _PlaneContext(None, stat_names, wanted_ids, {})
    data, buf = _HELPER_FILE["data"], _HELPER_FILE["buf"]
    result = _batch(data, buf, starts, ends, context)
    if hasattr(data, "madvise") and hasattr(mmap, "MADV_DONTNEED"):  # drop what it read from memory
        low = int(starts[0]) - int(starts[0]) % mmap.PAGESIZE
        data.madvise(mmap.MADV_DONTNEED, low, int(ends[-1]) - low)
    return result


def _read_mapped(
    file: Path, data: mmap.mmap, helper: _Helper | None = None
) -> tuple[str, list[Plane]]:
    buf = np.frombuffer(data, np.uint8)
    pages = _Pages(data)
    pages.helper = helper
    rest, plane_starts, plane_ends = split_fields(data, buf, 0, len(data), PLANES_TAG)
    space = XSpace.FromString(rest)  # hostnames, errors: everything but the planes
    host = space.hostnames[0] if space.hostnames else file.name.removesuffix(XPLANE_SUFFIX)
    pages.decoders = _decoders(len(data))
    try:
        return host, [
            _plane(data, buf, s, e, pages)
            for s, e in zip(plane_starts.tolist(), plane_ends.tolist())
        ]
    finally:
        if pages.decoders is not None:
            pages.decoders.shutdown(wait=True)


# From this size a file's long lines are decoded by threads, a batch of _THREAD_BATCH events each
# (the C decoder runs without the GIL), where several cores are. Under load the threads take a
# larger share of the cores than one would: with another process spinning on one of two cores, a
# thread alone gets one core, two threads and the spinner 2/3 of a core each.
_THREADS_MIN_BYTES = 32 << 20
_THREAD_BATCH = 1 << 18


def _decoders(size: int):
    """A pool of decoding threads (one per core, at most 4), or None: one core, a small file, or
    the numpy decoder."""
    if size < _THREADS_MIN_BYTES or _native() is None:
        return None
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if cores < 2:
        return None
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(min(cores, 4), thread_name_prefix="xplane-decode")


class _Pages:
    """Drops decoded parts of the mapped file from this process's memory."""

    def __init__(self, data: mmap.mmap):
        self.data, self.done = data, 0
        self.helper: _Helper | None = None
        self.decoders = None  # a ThreadPoolExecutor for _native_columns, or None
        self.can = hasattr(data, "madvise") and hasattr(mmap, "MADV_DONTNEED")

    def release(self, upto: int) -> None:
        upto -= upto % mmap.PAGESIZE
        if self.can and upto - self.done >= 1 << 24:
            self.data.madvise(mmap.MADV_DONTNEED, self.done, upto - self.done)
            self.done = upto


def _stat_value(stat, stat_names: dict[int, str]):
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":  # interned string: the value is a stat_metadata name
        return stat_names.get(stat.ref_value, "")
    value = getattr(stat, kind)
    return value.decode("utf-8", "replace") if kind == "bytes_value" else value


def _plane(data, buf: np.ndarray, start: int, end: int, pages: _Pages) -> Plane:
    rest, line_starts, line_ends = split_fields(data, buf, start, end, LINES_TAG)
    proto = XPlane.FromString(rest)  # name, metadata and plane stats: everything but the lines
    stat_names = {key: meta.name for key, meta in proto.stat_metadata.items()}
    wanted_ids = {key: name for key, name in stat_names.items() if name in WANTED_STATS}
    context = _PlaneContext(
        proto, stat_names, wanted_ids, _metadata_stats(proto, stat_names, wanted_ids)
    )
    lines = [
        _line(data, buf, s, e, context, pages)
        for s, e in zip(line_starts.tolist(), line_ends.tolist())
    ]
    plane_stats = {
        stat_names.get(s.metadata_id, ""): _stat_value(s, stat_names) for s in proto.stats
    }
    return Plane(name=proto.name, event_names=context.names, lines=lines, stats=plane_stats)


class _PlaneContext:
    """What decoding a plane's lines shares: its metadata, and the names found so far."""

    def __init__(self, proto, stat_names, wanted_ids, meta_stats):
        self.proto, self.stat_names, self.wanted_ids, self.meta_stats = (
            proto,
            stat_names,
            wanted_ids,
            meta_stats,
        )
        # Metadata-level stats of the types the analysis reads (Python values: bool is an int
        # subclass).
        self.meta_stats_typed = all(
            type(v) is (int if name in INT_STATS else str)
            for found in meta_stats.values()
            for name, v in found.items()
        )
        self.names: list[str] = []
        self.name_index: dict[int, int] = {}

    def name_of(self, key: int) -> int:
        """Index in names of event metadata ``key``, added when first seen."""
        found = self.name_index.get(key)
        if found is None:
            meta = self.proto.event_metadata.get(key)
            found = self.name_index[key] = len(self.names)
            self.names.append(
                (meta.name or meta.display_name) if meta is not None else f"<unknown {key}>"
            )
        return found


def _metadata_stats(proto, stat_names, wanted_ids) -> dict[int, dict[str, object]]:
    """Wanted stats attached to event metadata (shared by all its events)."""
    found: dict[int, dict[str, object]] = {}
    for key, meta in proto.event_metadata.items():
        for stat in meta.stats:
            if stat.metadata_id in wanted_ids:
                found.setdefault(key, {})[wanted_ids[stat.metadata_id]] = _stat_value(
                    stat, stat_names
                )
    return found


def _line(data, buf, start, end, context: _PlaneContext, pages: _Pages) -> Line:
    """Decode one line, a batch of events at a time."""
    rest: list[bytes] = []
    native = _native()
    if native is not None:
        start_ns, end_ns, metadata_id, stat_parts = _native_columns(
            native, data, start, end, context, rest, pages
        )
    else:
        start_ns, end_ns, metadata_id, stat_parts = _numpy_columns(
            data, buf, start, end, context, rest, pages
        )
    n = len(start_ns)
    header = XLine.FromString(b"".join(rest))  # id, name, timestamp: everything but the events
    start_ns += header.timestamp_ns
    end_ns += header.timestamp_ns
    stats = {}
    typed = context.meta_stats_typed
    first_id = {name: key for key, name in sorted(context.wanted_ids.items(), reverse=True)}
    for name in sorted(stat_parts, key=first_id.__getitem__):  # the order of their stat ids
        parts = stat_parts[name]
        stats[name] = _stat_column(parts, n)
        fields_ok = _INT_FIELDS if name in INT_STATS else _TEXT_FIELDS
        typed = typed and all(number in fields_ok for _, _, number in parts)
    name_id, local, unique = _name_ids(metadata_id, context)
    _fill_from_metadata(stats, unique, local, context.meta_stats, n)
    return Line(
        name=header.name or header.display_name,
        start_ns=start_ns,
        end_ns=end_ns,
        name_id=name_id,
        stats=stats,
        stats_typed=typed,
    )


# A stat on at most this share of a line's events (of lines this long or longer) is kept as a
# SparseStat: at 270 MB, two step-marker columns of the host thread's 6.8 M events took 0.2 s to
# fill with None and 0.2 s more to search.
SPARSE_SHARE, SPARSE_MIN_EVENTS = 1 / 16, 4096


def _stat_column(parts: list[tuple[np.ndarray, list, int]], n: int) -> np.ndarray | SparseStat:
    """A stat's values on a line's n events from its assignments (rows, values, field), applied in
    order."""
    assigned = sum(len(rows) for rows, _, _ in parts)
    if n < SPARSE_MIN_EVENTS or assigned > n * SPARSE_SHARE:
        column = np.full(n, None, dtype=object)
        for rows, values, _ in parts:
            column[rows] = values
        return column
    rows = np.concatenate([np.asarray(r, np.int64) for r, _, _ in parts])
    values = np.empty(len(rows), dtype=object)
    at = 0
    for r, v, _ in parts:
        values[at : at + len(r)] = v
        at += len(r)
    order = np.argsort(rows, kind="stable")
    rows, values = rows[order], values[order]
    last = np.ones(len(rows), bool)  # where an event has the stat twice, the later assignment wins
    last[:-1] = rows[1:] != rows[:-1]
    return SparseStat(rows[last], values[last])


# The XStat value fields whose values are already of the type the analysis reads (readers/typed.py):
# integers for INT_STATS, text for the other wanted stats (ref_value: an interned text).
_INT_FIELDS = (STAT_UINT64, STAT_INT64)
_TEXT_FIELDS = (STAT_STR, STAT_BYTES, STAT_REF)


def _numpy_columns(data, buf, start, end, context: _PlaneContext, rest: list[bytes], pages: _Pages):
    """(start, end relative to the line's timestamp, metadata id, stat assignments) of a line's
    events."""
    rel_start, rel_end, metadata_ids = [], [], []
    stat_parts: dict[str, list[tuple[np.ndarray, list]]] = {}
    n = 0
    for first, last, metadata_id, stats in _numpy_batches(
        data, buf, start, end, context, rest, pages
    ):
        rel_start.append(first)
        rel_end.append(last)
        metadata_ids.append(metadata_id)
        for name, parts in stats.items():
            stat_parts.setdefault(name, []).extend(
                (rows + n, values, number) for rows, values, number in parts
            )
        n += len(first)
    return (
        _joined(rel_start, np.int64),
        _joined(rel_end, np.int64),
        _joined(metadata_ids, np.int64),
        stat_parts,
    )


def _native():
    """The C decoder (_wire.c), unless it was not built or SCALDIAG_NATIVE=0 asks for the numpy
    one."""
    return native.enabled(_wire_c)


_NATIVE_BATCH = 1 << 20  # events decoded per call: the file's pages are released between calls
_BYTES_PER_EVENT = 12


def _native_columns(
    native, data, start, end, context: _PlaneContext, rest: list[bytes], pages: _Pages
):
    """_numpy_columns by the C decoder: one pass over the events' bytes, into the columns
    themselves."""
    wanted = np.fromiter(context.wanted_ids, np.int64).tobytes()
    if pages.decoders is not None:
        found = _decoded_by_threads(native, data, start, end, wanted, context, rest, pages)
        if found is not None:
            return found
    # Room for an event every _BYTES_PER_EVENT bytes (real events take 20-100), grown and in the end
    # shrunk in place (realloc: no copy where the block has pages of its own). Reserving for the
    # smallest possible event (2 bytes) would ask for 4x the line's bytes per column, which a
    # multi-GB trace may not be granted.
    columns = [np.empty((end - start) // _BYTES_PER_EVENT + 1024, np.int64) for _ in range(3)]
    stat_parts: dict[str, list[tuple[np.ndarray, list]]] = {}
    n, pos = 0, start
    while pos < end:
        if n == len(columns[0]):
            for column in columns:
                # nothing else refers to them yet
                column.resize(len(column) * 3 // 2, refcheck=False)
        try:
            pos, got, head, records = native.decode_events(
                data, pos, end, wanted, _NATIVE_BATCH, *columns, n
            )
        except ValueError as exc:
            raise WireError(str(exc)) from None
        rest.append(head)
        _add_stats(stat_parts, data, records, context)
        n += got
        pages.release(pos)
    for column in columns:
        column.resize(n, refcheck=False)  # realloc: no copy; nothing else refers to them yet
    return (*columns, stat_parts)


def _add_stats(stat_parts: dict, data, records: bytes, context) -> None:
    """A decoded batch's stat records (six int64 a record) added to ``stat_parts`` by name."""
    rows = np.frombuffer(records, np.int64).reshape(-1, 6)
    if len(rows):
        for name, parts in _stat_assignments(
            data, *rows.T, context.stat_names, context.wanted_ids
        ).items():
            stat_parts.setdefault(name, []).extend(parts)


def _decoded_by_threads(native, data, start, end, wanted: bytes, context, rest, pages: _Pages):
    """_native_columns by the decoding threads: the line's batches found by stepping over its
    fields (event_batches), each decoded into its own rows of columns of the exact size, results
    taken in file order (so stats apply, and the first error is raised, as in one pass). None where
    the line is one batch, or its fields do not step cleanly (one pass then says what is wrong)."""
    found = native.event_batches(data, start, end, _THREAD_BATCH)
    if found is None:
        return None
    bounds, n = np.frombuffer(found[0], np.int64).tolist(), found[1]
    if len(bounds) < 3:
        return None
    columns = [np.empty(n, np.int64) for _ in range(3)]

    def decode(k: int):
        return native.decode_events(
            data, bounds[k], bounds[k + 1], wanted, n, *columns, k * _THREAD_BATCH
        )

    stat_parts: dict[str, list[tuple[np.ndarray, list]]] = {}
    decoded = 0
    try:
        for pos, got, head, records in pages.decoders.map(decode, range(len(bounds) - 1)):
            rest.append(head)
            _add_stats(stat_parts, data, records, context)
            decoded += got
            pages.release(pos)
    except ValueError as exc:
        raise WireError(str(exc)) from None
    if decoded != n:  # the two passes disagree on what an event is: never, by their code
        raise WireError(f"decoded {decoded} events where {n} were counted")
    return (*columns, stat_parts)


def _numpy_batches(data, buf, start, end, context: _PlaneContext, rest: list[bytes], pages: _Pages):
    """The line's events in batches (following the byte windows of bulk_batches), decoded with
    numpy; every other batch by the helper process where there is one."""
    pending: list = []  # batches in order: decoded here, or futures of the helper
    for k, (starts, ends) in enumerate(
        bulk_batches(data, buf, start, end, EVENTS_TAG, rest, _EVENT_HEAD)
    ):
        if pages.helper is not None and k % 2 == 0:
            pending.append(pages.helper.submit(starts, ends, context))
        else:
            pending.append(_batch(data, buf, starts, ends, context))
        while len(pending) > _IN_FLIGHT or (pending and not hasattr(pending[0], "result")):
            batch = pending.pop(0)
            yield batch.result() if hasattr(batch, "result") else batch
        pages.release(int(ends[-1]))
    for batch in pending:
        yield batch.result() if hasattr(batch, "result") else batch


# What an XEvent's bytes start with as serializers write them: the tags of metadata_id and
# offset_ps.
_EVENT_HEAD = (tag(EVENT_METADATA_ID, WIRE_VARINT), tag(EVENT_OFFSET_PS, WIRE_VARINT))


def _batch(data, buf, starts, ends, context: _PlaneContext):
    """(start ns, end ns, both relative to the line's timestamp; metadata_id; stats) of a batch of
    events."""
    offset_ps, duration_ps, metadata_id, stats = _event_columns(data, buf, starts, ends, context)
    first = offset_ps // 1000
    return first, first + (np.maximum(duration_ps, 0) + 500) // 1000, metadata_id, stats


def _joined(parts: list[np.ndarray], dtype) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype)
    joined = np.concatenate(parts) if len(parts) > 1 else parts[0]
    parts.clear()
    return joined


# XEvent's leading fields as serializers write them (in field-number order):
# (tag byte, field number) of metadata_id, offset_ps, duration_ps.
_EVENT_PREFIX = tuple(
    (tag(n, WIRE_VARINT), n) for n in (EVENT_METADATA_ID, EVENT_OFFSET_PS, EVENT_DURATION_PS)
)


def _event_columns(data, buf, starts, ends, context: _PlaneContext):
    """offset_ps, duration_ps, metadata_id columns and wanted stats of the events at [starts, ends).

    The leading metadata_id, offset_ps and duration_ps fields, where each
    is where serializers put it, are decoded positionally for all events at
    once; what follows (stats, and any field out of that order) goes through
    the general decoder, whose values then apply last, as they come last.
    """
    columns = {}
    pos = starts.copy()
    for prefix_tag, number in _EVENT_PREFIX:
        columns[number] = _leading_varint(buf, pos, ends, prefix_tag)
    more = np.flatnonzero(pos < ends)
    f = fields(buf, pos[more], ends[more])
    msg = more[f["msg"]]
    for number, column in columns.items():
        rows = f["field"] == number
        column[msg[rows]] = as_int64(f["value"][rows])
    stat_rows = f["field"] == EVENT_STATS
    stats = (
        _wanted_stats(
            data,
            buf,
            msg[stat_rows],
            f["body_start"][stat_rows],
            f["body_end"][stat_rows],
            context.stat_names,
            context.wanted_ids,
        )
        if context.wanted_ids and stat_rows.any()
        else {}
    )
    return columns[EVENT_OFFSET_PS], columns[EVENT_DURATION_PS], columns[EVENT_METADATA_ID], stats


def _leading_varint(buf, pos, ends, field_tag) -> np.ndarray:
    """The varint field ``field_tag`` at ``pos`` of each event that has it there (else 0); ``pos``
    moves past it."""
    has = pos < ends
    has &= buf[np.minimum(pos, len(buf) - 1)] == field_tag
    if has.all():  # the usual case: every event has the field, no subsets to gather
        value, length = word_varints(buf, pos + 1)
        pos += length
        pos += 1
        if (pos > ends).any():
            raise WireError("field runs past its message")
        return as_int64(value)
    column = np.zeros(len(pos), np.int64)
    at = np.flatnonzero(has)
    if len(at):
        value, length = word_varints(buf, pos[at] + 1)
        after = pos[at] + 1 + length
        if (after > ends[at]).any():
            raise WireError("field runs past its message")
        column[at] = as_int64(value)
        pos[at] = after
    return column


def _unwanted_stats(buf, body_start, body_end, wanted_ids) -> np.ndarray:
    """Stats that are surely not wanted: exactly a metadata_id not wanted, then one value field.

    Those are the most of a trace's stats; they are dropped before decoding.
    Settled from a few bytes of each: a one-byte id, the value's tag, and
    the value's length (its varint's, a text's one- or two-byte size, a
    double's 8 bytes). A stat this cannot settle (a longer id or size,
    another layout) is kept for the general decoder.
    """
    n = len(buf)
    sure = body_end - body_start >= 3
    at = np.minimum(body_start, n - 3)
    sure &= buf[at] == tag(STAT_METADATA_ID, WIRE_VARINT)
    meta = buf[at + 1]
    sure &= meta < 0x80
    wanted = np.zeros(256, bool)
    wanted[[k for k in wanted_ids if 0 <= k < 0x80]] = True
    sure &= ~wanted[meta]
    value_at = body_start + 2
    value_tag = buf[at + 2]
    varint = (value_tag == tag(STAT_UINT64, WIRE_VARINT)) | (
        value_tag == tag(STAT_INT64, WIRE_VARINT)
    )
    varint |= value_tag == tag(STAT_REF, WIRE_VARINT)
    text = (value_tag == tag(STAT_STR, WIRE_LENGTH)) | (value_tag == tag(STAT_BYTES, WIRE_LENGTH))
    double = value_tag == tag(STAT_DOUBLE, WIRE_FIXED64)
    sure &= varint | text | double
    after_tag = np.where(sure, value_at + 1, 0)
    length = varint_lengths(buf, after_tag)  # of a varint value, or of a text's size
    sure &= length <= 8
    value_end = after_tag + length
    rows = np.flatnonzero(sure & text)
    s0, s1 = buf[after_tag[rows]], buf[np.minimum(after_tag[rows] + 1, n - 1)]
    size = np.where(s0 < 0x80, s0, (s0 & 0x7F).astype(np.int64) | (s1.astype(np.int64) << 7))
    value_end[rows] = np.where((s0 < 0x80) | (s1 < 0x80), value_end[rows] + size, -1)
    value_end[double] = value_at[double] + 9
    sure &= value_end == body_end
    return sure


def _wanted_stats(data, buf, stat_event, body_start, body_end, stat_names, wanted_ids):
    """Decode every XStat's metadata_id at once; build Python values only for wanted ones.

    Returns, per stat name, the (event rows, values, field number) assignments in the order
    they apply (a later one wins where an event has a stat twice).
    """
    decode = np.flatnonzero(~_unwanted_stats(buf, body_start, body_end, wanted_ids))
    stat_event, body_start, body_end = stat_event[decode], body_start[decode], body_end[decode]
    sf = fields(buf, body_start, body_end)
    meta = np.zeros(len(stat_event), np.int64)
    id_rows = sf["field"] == STAT_METADATA_ID
    meta[sf["msg"][id_rows]] = as_int64(sf["value"][id_rows])
    wanted = np.isin(meta, np.fromiter(wanted_ids, np.int64))
    rows = np.flatnonzero(
        (sf["field"] >= STAT_DOUBLE) & (sf["field"] <= STAT_REF) & wanted[sf["msg"]]
    )
    return _stat_assignments(
        data,
        stat_event[sf["msg"][rows]],
        meta[sf["msg"][rows]],
        sf["field"][rows],
        sf["value"][rows],
        sf["body_start"][rows],
        sf["body_end"][rows],
        stat_names,
        wanted_ids,
    )


def _stat_assignments(
    data, event, meta, field, value, body_start, body_end, stat_names, wanted_ids
):
    """Per stat name, the (event rows, values, field number) assignments of wanted stats' value
    fields, in the order they apply: by stat id, then value field, each in the events' order (a
    later one wins where an event has a stat twice). One row per value field: its event, stat id,
    field number, raw bits and body.
    """
    stats: dict[str, list[tuple[np.ndarray, list, int]]] = {}
    for meta_id in _distinct(meta):
        mine = np.flatnonzero(meta == meta_id)
        parts = stats.setdefault(wanted_ids[meta_id], [])
        for number in _distinct(field[mine]):
            r = mine[field[mine] == number]
            parts.append(
                (
                    event[r],
                    _wire_values(
                        data,
                        number,
                        value[r].astype(np.uint64),
                        body_start[r],
                        body_end[r],
                        stat_names,
                    ),
                    number,
                )
            )
    return stats


def _distinct(ids: np.ndarray) -> list[int]:
    """np.unique(ids).tolist() of small non-negative ids (stat ids, field numbers) by a count, not a
    sort: at 270 MB the sorts of the stats' 1-2 M records were 0.1 s."""
    if len(ids) and 0 <= int(ids.min()) and int(ids.max()) < 1 << 16:
        return np.flatnonzero(np.bincount(ids)).tolist()
    return np.unique(ids).tolist()


def _wire_values(
    data, number: int, raw: np.ndarray, start: np.ndarray, end: np.ndarray, stat_names
):
    """Python values of one XStat value field (double .. ref) for many stats."""
    if number == STAT_DOUBLE:
        return raw.view(np.float64).tolist()
    if number == STAT_UINT64:
        return raw.tolist()
    if number == STAT_INT64:
        return raw.view(np.int64).tolist()
    if number in (
        STAT_STR,
        STAT_BYTES,
    ):  # one str per distinct text: a trace repeats its op names every step
        native = _native()
        if native is not None and len(start):
            inverse, firsts = native.distinct_texts(
                data, np.ascontiguousarray(start, np.int64), np.ascontiguousarray(end, np.int64)
            )
            firsts = np.frombuffer(firsts, np.int64).tolist()
            texts = np.empty(len(firsts), dtype=object)
            texts[:] = [data[start[k] : end[k]].decode("utf-8", "replace") for k in firsts]
            return texts[np.frombuffer(inverse, np.int64)]
        texts: dict[bytes, str] = {}
        values = []
        for a, b in zip(start.tolist(), end.tolist()):
            raw = data[a:b]
            text = texts.get(raw)
            if text is None:
                text = texts[raw] = raw.decode("utf-8", "replace")
            values.append(text)
        return values
    # ref_value: an interned string, named by a stat_metadata id. The ids are small (they number
    # the plane's stat names): a table by id, not np.unique's sort (0.12 s at 270 MB, each batch's
    # step names in the thread that takes the decoders' results).
    if len(raw) and int(raw.max()) < _TABLE_IDS:
        ids = raw.astype(np.intp)
        table = np.empty(int(ids.max()) + 1, dtype=object)
        present = np.zeros(len(table), bool)
        present[ids] = True
        for u in np.flatnonzero(present).tolist():
            table[u] = stat_names.get(u, "")
        return table[ids].tolist()
    unique, inverse = np.unique(raw, return_inverse=True)
    names = np.array([stat_names.get(int(u), "") for u in unique], dtype=object)
    return names[inverse].tolist()


# Metadata ids below this bound are mapped through a table, without sorting the events.
_TABLE_IDS = 1 << 22


def _name_ids(metadata_id: np.ndarray, context: _PlaneContext):
    """(name index per event, index of each event's id in unique, the line's distinct ids
    ascending).

    Names are numbered in the order the plane's lines first use them, each
    line's new ids ascending.
    """
    if not len(metadata_id):
        return np.empty(0, np.int32), np.empty(0, np.intp), np.empty(0, np.int64)
    low, high = int(metadata_id.min()), int(metadata_id.max())
    if low >= 0 and high < _TABLE_IDS:
        present = np.zeros(high + 1, bool)
        present[metadata_id] = True
        unique = np.flatnonzero(present)
        slot = np.zeros(high + 1, np.intp)
        slot[unique] = np.arange(len(unique))
        local = slot[metadata_id]
    else:
        unique, local = np.unique(metadata_id, return_inverse=True)
    names = np.array([context.name_of(key) for key in unique.tolist()], np.int32)
    return names[local], local, unique


def _fill_from_metadata(stats, unique, local, meta_stats, n) -> None:
    """Events without their own value of a stat take their metadata's."""
    if not meta_stats:
        return
    tables: dict[str, np.ndarray] = {}
    for j, key in enumerate(unique.tolist()):
        for name, value in meta_stats.get(key, {}).items():
            table = tables.get(name)
            if table is None:
                table = tables[name] = np.full(len(unique), None, dtype=object)
                if name not in stats:
                    stats[name] = np.full(n, None, dtype=object)
            table[j] = value
    for name, table in tables.items():
        if isinstance(stats[name], SparseStat):  # the metadata may give it to many events
            stats[name] = stats[name].dense(n)
        column = stats[name]
        values = table[local]
        rows = np.not_equal(values, None) & np.equal(column, None)
        column[rows] = values[rows]
