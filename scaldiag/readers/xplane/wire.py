"""Vectorised protobuf decoding of XEvents, straight from a line's bytes.

Reading a million events through protobuf message objects costs about a
microsecond per field access, and holding them all as objects costs several
times the file size. Instead we keep the file's bytes, find where each plane,
line and event lies with one tight loop, let protobuf parse only the small
parts (names, metadata), and decode every event's fields, and every stat's,
with numpy, a field at a time across all of them. Only the stats the
analysis wants become Python objects.

Wire format facts used (protobuf encoding spec): a field is a varint tag
``field_number << 3 | wire_type``; wire type 0 is a varint, 1 is 8 bytes
little-endian, 2 is a varint length then that many bytes, 5 is 4 bytes.
"""

from __future__ import annotations

import numpy as np

_MAX_VARINT = 10


class WireError(ValueError):
    """The bytes are not what the schema says; the caller falls back."""


def varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode one varint at each position: (values as uint64, encoded lengths).

    Works byte by byte on the shrinking set of varints still continuing, so
    the cost follows the bytes decoded, not count x 10.
    """
    if len(pos) and pos.max() >= len(buf):
        raise WireError("varint past the end")
    byte = buf[pos]
    values = (byte & 0x7F).astype(np.uint64)
    length = np.ones(len(pos), np.int64)
    live = np.flatnonzero(byte >= 0x80)
    for k in range(1, _MAX_VARINT):
        if len(live) == 0:
            return values, length
        at = pos[live] + k
        if at.max() >= len(buf):
            raise WireError("varint past the end")
        byte = buf[at]
        values[live] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        length[live] += 1
        live = live[byte >= 0x80]
    if len(live):
        raise WireError("varint longer than 10 bytes")
    return values, length


def split_fields(data: bytes, start: int, end: int, bulk_tag: int) -> tuple[bytes, np.ndarray, np.ndarray]:
    """Split the message in ``data[start:end]`` into its bulk repeated field and the rest.

    Returns the bytes of every other field (itself a valid encoding of the
    same message without the bulk field, for protobuf to parse) and the
    payload [start, end) of each bulk field. ``bulk_tag`` is a one-byte tag
    of a length-delimited field. The loop per bulk field only follows
    lengths: it is the one sequential part of reading a trace.
    """
    rest: list[bytes] = []
    starts: list[int] = []
    ends: list[int] = []
    add_start, add_end = starts.append, ends.append
    pos = start
    while pos < end:
        while pos < end and data[pos] == bulk_tag:  # the hot loop: one pass per event
            length = data[pos + 1]
            pos += 2
            if length >= 0x80:
                length, pos = _varint_tail(data, pos, length)
            add_start(pos)
            pos += length
            add_end(pos)
        if pos >= end:
            break
        field_start = pos
        tag, pos = _varint(data, pos)
        wire = tag & 7
        if wire == 0:
            _, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise WireError(f"unsupported wire type {wire}")
        rest.append(data[field_start:pos])
    if pos != end:
        raise WireError("a field runs past the end of its message (truncated?)")
    return b"".join(rest), np.array(starts, np.int64), np.array(ends, np.int64)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    return _varint_tail(data, pos + 1, byte)


def _varint_tail(data: bytes, pos: int, first: int) -> tuple[int, int]:
    value, shift = first & 0x7F, 7
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos
        if shift > 63:
            raise WireError("varint longer than 10 bytes")


def fields(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> dict[str, np.ndarray]:
    """Every field of many messages at once.

    Returns parallel arrays: ``msg`` (index of the message), ``field``,
    ``value`` (varints and fixed-width values, as uint64) and ``body_start``
    / ``body_end`` (length-delimited fields).
    """
    out: dict[str, list[np.ndarray]] = {k: [] for k in ("msg", "field", "value", "body_start", "body_end")}
    msg = np.flatnonzero(ends > starts)
    cur = starts[msg]
    while len(msg):
        tag, tag_len = varints(buf, cur)
        field, wire = (tag >> np.uint64(3)).astype(np.int64), (tag & np.uint64(7)).astype(np.int64)
        p = cur + tag_len
        value = np.zeros(len(msg), np.uint64)
        body_start, body_end = p.copy(), p.copy()
        nxt = np.full(len(msg), -1, np.int64)
        if (w := wire == 0).any():
            value[w], n = varints(buf, p[w])
            nxt[w] = p[w] + n
        if (w := wire == 2).any():
            n, n_len = varints(buf, p[w])
            body_start[w] = p[w] + n_len
            body_end[w] = body_start[w] + n.astype(np.int64)
            nxt[w] = body_end[w]
        for wire_type, width in ((1, 8), (5, 4)):
            if (w := wire == wire_type).any():
                value[w] = _fixed(buf, p[w], width)
                nxt[w] = p[w] + width
        if (nxt < 0).any() or (nxt > ends[msg]).any():
            raise WireError("field runs past its message (or an unsupported wire type)")
        for key, arr in (("msg", msg), ("field", field), ("value", value),
                         ("body_start", body_start), ("body_end", body_end)):
            out[key].append(arr)
        more = nxt < ends[msg]
        msg, cur = msg[more], nxt[more]
    return {k: np.concatenate(v) if v else np.empty(0, np.int64) for k, v in out.items()}


def _fixed(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    if len(pos) and pos.max() + width > len(buf):
        raise WireError("fixed-width field past the end")
    raw = buf[pos[:, None] + np.arange(width)]
    return np.ascontiguousarray(raw).view("<u8" if width == 8 else "<u4").ravel().astype(np.uint64)


def as_int64(values: np.ndarray) -> np.ndarray:
    """Reinterpret varint bits as int64 (negative int64 values are 10-byte varints)."""
    return values.astype(np.uint64).view(np.int64)
