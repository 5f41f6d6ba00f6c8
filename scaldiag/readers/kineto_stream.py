"""A Kineto file's bytes, a piece at a time, through the scanner (_kineto_scan.c).

Plain files are read PIECE_BYTES at a time; gzip files are decompressed as a
stream under the caps of readers/files.py (GZIP_MAX_RATIO times the compressed
size, GZIP_MAX_BYTES), refused with its words as soon as the output passes
them. Memory is one piece and the scanner's columns, never the document.

Where the bytes are not what the fast path reads (damaged gzip, bytes after the
last member, odd JSON) ``GiveUp`` is raised and the caller reads the file with
the reference reader (kineto_json.py), which says what is wrong in its words.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

from scaldiag.errors import TraceError
from scaldiag.readers.files import GZIP_MAX_BYTES, GZIP_MAX_RATIO, gzip_cap_bytes, is_gzip, open_regular

PIECE_BYTES = 16 << 20  # JSON per scanner call: large enough that the per-call cost vanishes, small next to the columns
_READ_BYTES = 1 << 20   # compressed bytes per read
_GZIP_WBITS = 16 + zlib.MAX_WBITS


class GiveUp(Exception):
    """The fast path does not read this file: the reference reader will, and say why not if it cannot."""


def scan(file: Path, scanner) -> None:
    """Feed the whole file to ``scanner`` (a _kineto_scan.Scanner); GiveUp where it cannot be read this way."""
    with open_regular(file) as f:  # TraceError for a device, a FIFO: no reader opens those
        try:
            head = f.read(2)
            f.seek(0)
            pieces = _gunzipped(f, file) if is_gzip(head) else _plain(f)
            _feed(pieces, scanner)
        except (OSError, zlib.error, ValueError) as exc:  # ScanError is a ValueError
            raise GiveUp(str(exc)) from exc


def _feed(pieces: Iterator[bytes], scanner) -> None:
    """Whole units to the scanner, the unfinished rest kept for the next piece. A unit longer than a piece
    (a huge event) is scanned again only once the bytes waiting have doubled: linear time still."""
    pending = b""
    waiting: list[bytes] = []
    waiting_bytes = 0
    for piece in pieces:
        waiting.append(piece)
        waiting_bytes += len(piece)
        if waiting_bytes < len(pending):
            continue
        data = b"".join([pending, *waiting]) if pending or len(waiting) > 1 else waiting[0]
        waiting, waiting_bytes = [], 0
        used = scanner.feed(data, False)
        pending = data[used:]
    scanner.feed(b"".join([pending, *waiting]), True)


def _plain(f) -> Iterator[bytes]:
    while piece := f.read(PIECE_BYTES):
        yield piece


def _gunzipped(f, path: Path) -> Iterator[bytes]:
    """Every gzip member's output, PIECE_BYTES at most at a time, refused past the caps (files.gunzip's rules)."""
    import os

    cap = gzip_cap_bytes(os.fstat(f.fileno()).st_size)
    total = 0
    d = zlib.decompressobj(_GZIP_WBITS)
    data = f.read(_READ_BYTES)
    while True:
        if d.eof:
            data = d.unused_data
            while len(data) < 2 and (more := f.read(_READ_BYTES)):
                data += more
            if not data:
                return
            if not is_gzip(data):
                _only_padding(data, f)  # zeros after the last member are padding (tapes, some writers)
                return
            d = zlib.decompressobj(_GZIP_WBITS)
        if not data:
            data = f.read(_READ_BYTES)
        piece = d.decompress(data, min(PIECE_BYTES, cap + 1 - total))  # never past the cap by more than a byte
        if not piece and not data and not d.eof:
            raise GiveUp("the gzip stream ends before its last member does (truncated?)")
        total += len(piece)
        if total > cap:
            raise TraceError(
                f"{path} is refused: its gzip expands to more than {cap:,} bytes "
                f"(the caps: {GZIP_MAX_RATIO}x the compressed size, {GZIP_MAX_BYTES >> 30} GiB; "
                "docs/reliability.md). If it is a real trace, gunzip it and give the .json")
        data = d.unconsumed_tail
        if piece:
            yield piece


def _only_padding(rest: bytes, f) -> None:
    while rest:
        if rest.strip(b"\0"):
            raise GiveUp("bytes after the gzip stream's end that are not gzip")
        rest = f.read(_READ_BYTES)
