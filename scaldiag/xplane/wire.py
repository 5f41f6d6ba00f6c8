"""Vectorised protobuf decoding of XEvents, straight from a line's bytes.

Reading a million events through protobuf message objects costs about a
microsecond per field access. Instead we serialise each XLine once (in C),
find the event boundaries with one tight loop, and decode every event's
fields, and every stat's, with numpy, a field at a time across all of them.
Only the stats the analysis wants become Python objects.

Wire format facts used (protobuf encoding spec): a field is a varint tag
``field_number << 3 | wire_type``; wire type 0 is a varint, 1 is 8 bytes
little-endian, 2 is a varint length then that many bytes, 5 is 4 bytes.
"""

from __future__ import annotations

import numpy as np

EVENTS_TAG = 0x22  # XLine.events: field 4, wire type 2
_MAX_VARINT = 10


class WireError(ValueError):
    """The bytes are not what the schema says; the caller falls back."""


def varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode one varint at each position: (values as uint64, encoded lengths)."""
    last = len(buf) - 1
    values = np.zeros(len(pos), np.uint64)
    length = np.zeros(len(pos), np.int64)
    done = np.zeros(len(pos), bool)
    for k in range(_MAX_VARINT):
        byte = buf[np.minimum(pos + k, last)]
        live = ~done
        values |= np.where(live, (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k), np.uint64(0))
        length += live
        done |= byte < 0x80
        if done.all():
            return values, length
    raise WireError("varint longer than 10 bytes")


def event_ranges(data: bytes, pos: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Payload [start, end) of each consecutive XLine.events field from ``pos``.

    Sequential by nature (each length says where the next event begins), so
    this is the one loop per event; it does nothing but follow lengths.
    """
    starts: list[int] = []
    ends: list[int] = []
    add_start, add_end = starts.append, ends.append
    size = len(data)
    while pos < size and data[pos] == EVENTS_TAG:
        pos += 1
        length = data[pos]
        pos += 1
        if length >= 0x80:
            length &= 0x7F
            shift = 7
            while True:
                byte = data[pos]
                pos += 1
                length |= (byte & 0x7F) << shift
                shift += 7
                if byte < 0x80:
                    break
        add_start(pos)
        pos += length
        add_end(pos)
    return np.array(starts, np.int64), np.array(ends, np.int64), pos


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
