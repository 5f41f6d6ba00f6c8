"""Vectorised protobuf decoding of XEvents, straight from a line's bytes.

Reading a million events through protobuf message objects costs about a
microsecond per field access, and holding them all as objects costs several
times the file size. Instead we read the file's bytes in place, find where
each plane, line and event lies (a short loop for few fields, pointer
doubling with numpy for long runs of events: ``bulk_run``), let protobuf
parse only the small parts (names, metadata), and decode every event's
fields, and every stat's, with numpy, a field at a time across all of them.
Only the stats the analysis wants become Python objects.

Wire format facts used (protobuf encoding spec): a field is a varint tag
``field_number << 3 | wire_type``; wire type 0 is a varint, 1 is 8 bytes
little-endian, 2 is a varint length then that many bytes, 5 is 4 bytes.
"""

from __future__ import annotations

import numpy as np

from scaldiag.readers.xplane.schema import WIRE_LENGTH

_MAX_VARINT = 10


class WireError(ValueError):
    """The bytes are not what the schema says; the caller falls back."""


def varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode one varint at each position: (values as uint64, encoded lengths).

    Reads the 8 bytes at each position as one little-endian word and decodes
    it with bit operations on whole arrays (where its first byte without the
    continuation bit is, then the 7-bit groups packed together); the rare
    varints longer than 8 bytes (values of 2^56 and more, negative int64)
    are decoded byte by byte.
    """
    if len(pos) and pos.max() >= len(buf):
        raise WireError("varint past the end")
    first = buf[pos]
    values = first.astype(np.uint64)
    length = np.ones(len(pos), np.int64)
    multi = np.flatnonzero(first >= 0x80)  # most tags and small values are one byte
    if len(multi):
        values[multi], length[multi], long = _decode_words(_words(buf, pos[multi]))
        if len(long):
            values[multi[long]], length[multi[long]] = _long_varints(buf, pos[multi[long]])
    if len(pos) and (pos + length).max() > len(buf):
        raise WireError("varint past the end")
    return values, length


def word_varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``varints`` for positions where most varints are longer than a byte (times, lengths).

    Decodes every position from its 8-byte word, without first splitting
    out the one-byte varints (which cost more to pick out than to decode).
    """
    values, length, long = _decode_words(_words(buf, pos))
    if len(long):
        values[long], length[long] = _long_varints(buf, pos[long])
    if len(pos) and (pos + length).max() > len(buf):
        raise WireError("varint past the end")
    return values, length


def word_varints_unchecked(
    buf: np.ndarray, pos: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, lengths, rows longer than 8 bytes) from 8-byte words, for guesses a caller checks
    itself."""
    return _decode_words(_words(buf, pos))


def varint_lengths(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Encoded length of the varint at each position, from its 8-byte word; 9 where longer than 8
    bytes."""
    stop = np.invert(_words(buf, pos))
    stop &= _HIGH_BITS  # the high bit of every byte that ends a varint
    low = np.invert(stop)
    low += np.uint64(1)
    low &= stop  # the lowest one: the varint's last byte
    none = low == 0
    low -= np.uint64(1)
    length = np.bitwise_count(low).astype(np.int64)
    length += 1
    length >>= 3
    length[none] = 9
    return length


_HIGH_BITS = np.uint64(0x8080808080808080)
_LOW_BITS = np.uint64(0x7F7F7F7F7F7F7F7F)
_PACK = (
    np.uint64(0x7F007F007F007F00),
    np.uint64(0x3FFF00003FFF0000),
    np.uint64(0x0FFFFFFF00000000),
)
_KEEP = (
    np.uint64(0x007F007F007F007F),
    np.uint64(0x00003FFF00003FFF),
    np.uint64(0x000000000FFFFFFF),
)
_SHIFT = (np.uint64(1), np.uint64(2), np.uint64(4))


def _decode_words(word: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, lengths, rows longer than 8 bytes, left undecoded) of the varints starting each
    word.

    Operates in place on few arrays: at a million words, fresh temporaries
    per operation would cost more than the arithmetic.
    """
    stop = np.invert(word)
    stop &= _HIGH_BITS  # the high bit of every byte that ends a varint
    below = np.invert(stop)
    below += np.uint64(1)
    below &= stop  # the lowest one: this varint's last byte
    below -= np.uint64(1)  # every bit below it
    length = np.bitwise_count(below).astype(np.int64)
    length += 1
    length >>= 3
    below <<= np.uint64(1)
    below |= np.uint64(1)  # every bit up to it: the varint's bytes
    below &= word
    below &= _LOW_BITS
    values, part = below, np.empty_like(below)
    for pack, keep, shift in zip(_PACK, _KEEP, _SHIFT):  # 7-bit groups into 14, 28, 56 bits
        np.bitwise_and(values, pack, out=part)
        part >>= shift
        values &= keep
        values |= part
    return values, length, np.flatnonzero(stop == 0)


def _words(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The 8 bytes from each position as little-endian uint64 (zeros past the end of buf)."""
    n = len(buf)
    if n < 8 or (len(pos) and int(pos.max()) + 8 > n):
        at = pos[:, None] + np.arange(8)
        raw = np.where(at < n, buf[np.minimum(at, n - 1)], 0).astype(np.uint8)
        return raw.view("<u8").ravel().astype(np.uint64, copy=False)
    # An overlapping view: word i is bytes i..i+7 (unaligned reads, no copy of buf).
    words = np.ndarray((n - 7,), dtype="<u8", buffer=buf, strides=(1,))
    return words[pos].astype(np.uint64, copy=False)


def _long_varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte by byte, on the shrinking set of varints still continuing."""
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


# A run of this many bulk fields is followed in Python; longer runs are
# followed by numpy (bulk_run), a window of bytes at a time.
_VECTOR_AFTER = 64
_WINDOW_BYTES = 1 << 21
_VALID_WIRE_TYPES = (0, 1, 2, 5)


def split_fields(
    data, buf: np.ndarray, start: int, end: int, bulk_tag: int
) -> tuple[bytes, np.ndarray, np.ndarray]:
    """Split the message in ``data[start:end]`` into its bulk repeated field and the rest.

    Returns the bytes of every other field (itself a valid encoding of the
    same message without the bulk field, for protobuf to parse) and the
    payload [start, end) of each bulk field. ``bulk_tag`` is a one-byte tag
    of a length-delimited field; ``buf`` is ``data`` as a uint8 array.
    """
    rest: list[bytes] = []
    batches = list(bulk_batches(data, buf, start, end, bulk_tag, rest))
    starts = np.concatenate([s for s, _ in batches]) if batches else np.empty(0, np.int64)
    ends = np.concatenate([e for _, e in batches]) if batches else np.empty(0, np.int64)
    return b"".join(rest), starts, ends


def bulk_batches(
    data,
    buf: np.ndarray,
    start: int,
    end: int,
    bulk_tag: int,
    rest: list[bytes],
    head: tuple[int, int] | None = None,
):
    """Yield the payloads (starts, ends) of the bulk fields, a batch at a time.

    Every other field's bytes are appended to ``rest``. Following one field
    to the next is inherently sequential; a short run is followed in Python,
    a long one by ``bulk_run`` with numpy. Field number 0 and unknown wire
    types are errors at once, so that bytes which are no protobuf (zeros,
    text) are rejected after a few fields instead of a pass over the file.
    """
    pos = start
    while pos < end:
        if data[pos] == bulk_tag:
            starts, ends, pos = _short_run(data, pos, end, bulk_tag)
            if len(starts):
                yield np.array(starts, np.int64), np.array(ends, np.int64)
            while pos < end and data[pos] == bulk_tag:
                run_starts, run_ends, pos = bulk_run(buf, pos, end, bulk_tag, head=head)
                yield run_starts, run_ends
            continue
        field_start = pos
        tag, pos = _varint(data, pos)
        wire = tag & 7
        if tag >> 3 == 0 or wire not in _VALID_WIRE_TYPES:
            raise WireError(
                f"no protobuf field at byte {field_start} (field number {tag >> 3}, wire type"
                f" {wire})"
            )
        if wire == 0:
            _, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            pos += length
        else:
            pos += 8 if wire == 1 else 4
        if pos > end:
            break
        rest.append(data[field_start:pos])
    if pos != end:
        raise WireError("a field runs past the end of its message (truncated?)")


def _short_run(data, pos: int, end: int, bulk_tag: int) -> tuple[list[int], list[int], int]:
    """Follow up to _VECTOR_AFTER consecutive bulk fields in Python."""
    starts: list[int] = []
    ends: list[int] = []
    add_start, add_end = starts.append, ends.append
    for _ in range(_VECTOR_AFTER):
        if pos >= end or data[pos] != bulk_tag:
            break
        if pos + 1 >= end:
            raise WireError("a field runs past the end of its message (truncated?)")
        length = data[pos + 1]
        pos += 2
        if length >= 0x80:
            length, pos = _varint_tail(data, pos, length)
        add_start(pos)
        pos += length
        add_end(pos)
    if pos > end:
        raise WireError("a field runs past the end of its message (truncated?)")
    return starts, ends, pos


def bulk_run(
    buf: np.ndarray,
    pos: int,
    end: int,
    tag: int,
    window: int | None = None,
    head: tuple[int, int] | None = None,
):
    """The consecutive ``tag`` fields from ``pos`` within one window of bytes, by numpy.

    Every byte equal to ``tag`` in the window is a candidate field start; its
    length varint says where the field after it would begin. The true fields
    are the chain of candidates from ``pos``. Where ``head`` gives the two
    tag bytes a payload usually starts with (an XEvent: metadata_id, then
    offset_ps), the chain is first guessed as the candidates that look like
    that and checked link by link (``_checked_chain``); else, or where too
    many links break, it is found by pointer doubling (log2 of the run's
    length passes over the candidates) instead of a loop per field. Returns
    (payload starts, payload ends, position after the last field of the chain).
    """
    limit = min(end, pos + (window or _WINDOW_BYTES))
    cand = pos + np.flatnonzero(buf[pos:limit] == tag)
    if head is not None:
        found = _checked_chain(buf, pos, limit, end, tag, head, cand)
        if found is not None:
            return found
    length, length_len, ok = _varints_bounded(buf, cand + 1, end)
    body = cand + 1 + length_len
    ok &= length <= np.uint64(max(end, 0)) - np.minimum(body, end).astype(np.uint64)
    after = body + np.where(ok, length, 0).astype(np.int64)
    m = len(cand)
    # candidate index at each byte of the window, else m
    node = np.full(limit - pos + 1, m, np.int32)
    node[cand - pos] = np.arange(m, dtype=np.int32)
    jump = np.append(node[np.where(ok, np.minimum(after, limit), limit) - pos], np.int32(m))
    # m: the chain stops here (the sentinel maps to itself)
    path = np.zeros(1, np.int32)
    while True:  # path holds chain nodes 0 .. 2^k - 1; jump maps a node 2^k nodes on
        more = jump[path]
        more = more[more < m]
        path = np.concatenate((path, more))
        if len(more) < len(path) - len(more):
            break
        jump = jump[jump]
    last = path[-1]
    if not ok[last]:
        raise WireError("a field runs past the end of its message (truncated?)")
    return body[path], after[path], int(after[last])


# Links of a guessed chain that may break (a candidate that looked like a field
# and was not, or a field that did not look like one) before pointer doubling
# takes over: each break costs a few numpy calls.
_MAX_BREAKS = 32


def _checked_chain(buf, pos, limit, end, tag, head, cand):
    """The chain of fields from ``pos``, guessed from what their payloads start with, every link
    checked.

    The guess: the candidates with a length of 1 or 2 bytes whose payload
    starts with ``head[0]``, a varint of 1 or 2 bytes, then ``head[1]``
    (most of a trace's events; the stats inside them start differently).
    Every field of the result is the one its predecessor's length points
    to, so a bad guess can only make this slower, never wrong. Returns what
    bulk_run returns, or None (too many breaks: the caller doubles pointers).
    """
    first, second = head
    inside = cand[cand + 6 < len(buf)]
    b1, b2 = buf[inside + 1], buf[inside + 2]
    short = b1 < 0x80  # a one-byte length
    body = inside + np.where(short, 2, 3)
    looks = short | (b2 < 0x80)
    looks &= buf[body] == first
    v1 = buf[body + 1]
    after_varint = np.where(v1 < 0x80, 2, 3)
    looks &= (v1 < 0x80) | (buf[body + 2] < 0x80)
    looks &= buf[body + after_varint] == second
    rows = np.flatnonzero(looks)
    guess, body = inside[rows], body[rows]
    length = np.where(
        short[rows], b1[rows], (b1[rows] & 0x7F).astype(np.int64) | (b2[rows].astype(np.int64) << 7)
    )
    guess_after = body + length
    # breaks[k]: the guessed chain does not go on after its field k
    breaks = np.append(np.flatnonzero(guess_after[:-1] != guess[1:]), len(guess) - 1)
    # runs of the chain: guessed rows [a, b), or a (payload start, end) outside the guess
    pieces: list = []
    p = pos
    while p < limit and buf[p] == tag:
        if len(pieces) > _MAX_BREAKS:
            return None
        i = int(np.searchsorted(guess, p))
        if i < len(guess) and guess[i] == p:
            j = int(breaks[np.searchsorted(breaks, i)])
            if guess_after[j] > end:
                raise WireError("a field runs past the end of its message (truncated?)")
            pieces.append((body[i : j + 1], guess_after[i : j + 1]))
            p = int(guess_after[j])
            continue
        size, start = _varint_at(buf, p + 1, end)  # a field that does not look like the others
        if start + size > end:
            raise WireError("a field runs past the end of its message (truncated?)")
        pieces.append((np.array([start], np.int64), np.array([start + size], np.int64)))
        p = start + size
    if len(pieces) == 1:
        return pieces[0][0], pieces[0][1], p
    return np.concatenate([s for s, _ in pieces]), np.concatenate([e for _, e in pieces]), p


def _varint_at(buf: np.ndarray, pos: int, end: int) -> tuple[int, int]:
    """(value, position after) of the varint at ``pos``, which must end before ``end``."""
    value, k = 0, 0
    while True:
        if pos + k >= end or k >= _MAX_VARINT:
            raise WireError("a field runs past the end of its message (truncated?)")
        byte = int(buf[pos + k])
        value |= (byte & 0x7F) << (7 * k)
        k += 1
        if byte < 0x80:
            return value, pos + k


def _varints_bounded(
    buf: np.ndarray, pos: np.ndarray, end: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Like varints, for candidate positions: (values, lengths, ok) where a varint may run past
    ``end``."""
    values, length, long = _decode_words(_words(buf, pos))
    for row in long.tolist():  # rare: longer than 8 bytes
        value, k, done = 0, 0, False
        while not done and k < _MAX_VARINT and pos[row] + k < end:
            byte = int(buf[pos[row] + k])
            value |= (byte & 0x7F) << (7 * k)
            k, done = k + 1, byte < 0x80
        values[row], length[row] = value & 0xFFFFFFFFFFFFFFFF, k if done else end + 1
    return values, length, pos + length <= end


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
    out: dict[str, list[np.ndarray]] = {
        k: [] for k in ("msg", "field", "value", "body_start", "body_end")
    }
    msg = np.flatnonzero(ends > starts)
    cur = starts[msg]
    while len(msg):
        short = _short_length_fields(buf, cur, ends[msg])
        if short is not None:  # the usual step through stats: no masks, no varints
            field, body_start, body_end = short
            value, nxt = np.zeros(len(msg), np.uint64), body_end
            if (nxt > ends[msg]).any():
                raise WireError("field runs past its message (or an unsupported wire type)")
            msg, cur = _kept_fields(out, ends, msg, field, value, body_start, body_end, nxt)
            continue
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
        msg, cur = _kept_fields(out, ends, msg, field, value, body_start, body_end, nxt)
    return {k: np.concatenate(v) if v else np.empty(0, np.int64) for k, v in out.items()}


def _kept_fields(out, ends, msg, field, value, body_start, body_end, nxt):
    """One field of each message appended to ``out``; the messages with fields left and where they
    go on."""
    for key, arr in (
        ("msg", msg),
        ("field", field),
        ("value", value),
        ("body_start", body_start),
        ("body_end", body_end),
    ):
        out[key].append(arr)
    more = nxt < ends[msg]
    return msg[more], nxt[more]


def _short_length_fields(buf: np.ndarray, cur: np.ndarray, ends: np.ndarray):
    """(field, body start, body end) where every field at ``cur`` is length-delimited with
    one-byte tag and length (stats, mostly); else None."""
    if (cur + 1 >= ends).any():
        return None
    first = buf[cur]
    if ((first & 0x87) != WIRE_LENGTH).any():
        return None
    length = buf[cur + 1]
    if (length >= 0x80).any():
        return None
    body_start = cur + 2
    return (first >> 3).astype(np.int64), body_start, body_start + length


def _fixed(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    if len(pos) and pos.max() + width > len(buf):
        raise WireError("fixed-width field past the end")
    raw = buf[pos[:, None] + np.arange(width)]
    return np.ascontiguousarray(raw).view("<u8" if width == 8 else "<u4").ravel().astype(np.uint64)


def as_int64(values: np.ndarray) -> np.ndarray:
    """Reinterpret varint bits as int64 (negative int64 values are 10-byte varints)."""
    return values.astype(np.uint64).view(np.int64)
