"""Trace files opened with bounds: regular files only, gzip decompressed as a stream under two caps.

A trace bundle is something people send each other, so its bytes may be
hostile. A name that leads to a device (``/dev/zero``) or a FIFO would be
read forever or block, so only regular files are opened (the path is
checked before it is opened, and the file again once open). A gzip member
can expand about a thousand times (a 3 MB file to 6.5 GB was seen), so it
is decompressed a piece at a time and refused as soon as its output passes
``GZIP_MAX_RATIO`` times the compressed size or ``GZIP_MAX_BYTES``, before
that much memory is used (docs/reliability.md).
"""

from __future__ import annotations

import io
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path

from scaldiag.errors import TraceError

# Real Kineto traces compress 13-15x (the fixtures: 20 KB to 172 KB gzipped); 100x leaves room for
# more repetitive ones and refuses a bomb (deflate reaches ~1,000x) after 1% of its expansion.
GZIP_MAX_RATIO = 100
# The Kineto reader streams the text into columns (readers/kineto/stream.py: 1 GB of one rank in 659
# MiB, bench/results/kineto.md), but its fallback, the reference reader, parses JSON whole, and a
# bomb's expansion costs time: 1 GiB of output at most. A larger trace is read gunzipped (plain
# files have no cap: their size is what the user gave).
GZIP_MAX_BYTES = 1 << 30
# Below this a file may expand past the ratio (a tiny file of one repeated event); memory is no
# concern.
GZIP_SLACK_BYTES = 1 << 20
# Zeros after the last member are padding (tar and tape blocks: 10 KiB at most); more than this is
# no writer's padding but a sparse or damaged file: 2 GiB of zeros were checked for 40 s before it
# was read.
GZIP_MAX_PADDING_BYTES = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip header and trailer, not a bare zlib stream
_PIECE_BYTES = 8 << 20  # output per call: memory stays the output so far plus one piece
_READ_BYTES = 8 << 20  # compressed input read at a time


def open_regular(path: Path):
    """``path`` opened for binary reading, or TraceError if it is not a regular file (a device, a
    FIFO)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise TraceError(
                f"{path} is not a regular file (a device, a FIFO or a socket): not read"
            )
        # O_NONBLOCK: a FIFO put in its place after the check does not block the open.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        f.close()
        raise TraceError(f"{path} is not a regular file (a device, a FIFO or a socket): not read")
    return f


def read_text_bytes(path: Path) -> bytes | bytearray:
    """A trace file's bytes, gunzipped where it is gzip. A gzip file is read a piece at a time, so
    memory stays its output (capped) and one piece whatever follows its last member: a 2 GiB sparse
    file with bytes after its end was read whole and copied once more (4.3 GB, issue 34)."""
    with open_regular(path) as f:
        try:
            if is_gzip(f.read(2)):
                f.seek(0)
                return _gunzip_file(f, os.fstat(f.fileno()).st_size, path)
            f.seek(0)
            return f.read()
        except OSError as exc:
            raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from exc


def is_gzip(data: bytes) -> bool:
    return data[:2] == _GZIP_MAGIC


def gzip_cap_bytes(compressed_bytes: int) -> int:
    """The most a gzip file of this size may expand to (GZIP_MAX_RATIO, GZIP_SLACK_BYTES,
    GZIP_MAX_BYTES)."""
    return min(GZIP_MAX_BYTES, max(GZIP_MAX_RATIO * compressed_bytes, GZIP_SLACK_BYTES))


def gunzip(data: bytes, path: Path) -> bytearray:
    """Every gzip member of ``data`` decompressed, or TraceError (``gunzip_pieces``' rules)."""
    return _gunzip_file(io.BytesIO(data), len(data), path)


def _gunzip_file(f, size: int, path: Path) -> bytearray:
    out = bytearray()
    for piece in gunzip_pieces(f, size, path):
        out += piece
    return out


def gunzip_pieces(f, size: int, path: Path) -> Iterator[bytes]:
    """Every gzip member of the open file ``f`` (``size`` bytes), decompressed a piece at a time, or
    TraceError: damaged, truncated, past the cap, or followed by anything but a little zero
    padding. Memory is one piece and one read, whatever the file holds."""
    cap = gzip_cap_bytes(size)
    total = 0
    data = f.read(_READ_BYTES)
    try:
        while True:
            d = zlib.decompressobj(_GZIP_WBITS)
            while not d.eof:  # one member
                if not data:
                    data = f.read(_READ_BYTES)
                    if not data:
                        raise TraceError(
                            f"{path} is not a readable gzip file: it ends before its last member"
                            " does (truncated?)"
                        )
                # never past the cap by more than a byte
                piece = d.decompress(data, min(_PIECE_BYTES, cap + 1 - total))
                total += len(piece)
                if total > cap:
                    raise TraceError(
                        f"{path} is refused: its gzip expands to more than {cap:,} bytes (the"
                        f" caps: {GZIP_MAX_RATIO}x the compressed size,"
                        f" {GZIP_MAX_BYTES >> 30} GiB; docs/reliability.md). If it is a real"
                        " trace, gunzip it and give the .json"
                    )
                data = d.unconsumed_tail
                if piece:
                    yield piece
            data = d.unused_data
            while len(data) < 2 and (more := f.read(_READ_BYTES)):
                data += more
            if not data:
                return
            if not is_gzip(data):
                _only_padding(f, data, path)
                return
    except zlib.error as exc:
        raise TraceError(f"{path} is not a readable gzip file: {exc}") from exc


def _only_padding(f, rest: bytes, path: Path) -> None:
    """Zeros after the last member are padding (tapes, writers), up to GZIP_MAX_PADDING_BYTES; read
    no further than that."""
    seen = 0
    while rest:
        if rest.strip(b"\0"):
            raise TraceError(
                f"{path} is not a readable gzip file: bytes after its end that are not gzip"
            )
        seen += len(rest)
        if seen > GZIP_MAX_PADDING_BYTES:  # a sparse file: checking 2 GiB of zeros took 40 s
            raise TraceError(
                f"{path} is not a readable gzip file: more than {GZIP_MAX_PADDING_BYTES >> 20} MiB"
                " of zeros after its end (a sparse or damaged file)"
            )
        rest = f.read(GZIP_MAX_PADDING_BYTES + 1 - seen)
