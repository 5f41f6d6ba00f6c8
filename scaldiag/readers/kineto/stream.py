"""A Kineto file's bytes, a piece at a time, through the scanner (readers/_kineto_scan.c).

Plain files are read PIECE_BYTES at a time; gzip files are decompressed as a
stream by readers/files.gunzip_pieces, under its caps and padding bound, which
the reference reader's gunzip shares: a damaged, truncated or padded-on gzip is
refused there with its words. Memory is one piece and the scanner's columns,
never the document.

Where the JSON is not what the fast path reads ``GiveUp`` is raised and the
caller reads the file with the reference reader (reference.py), which says
what is wrong in its words.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from scaldiag.errors import TraceError
from scaldiag.readers.files import gunzip_pieces, is_gzip, open_regular

PIECE_BYTES = (
    16 << 20
)  # JSON per scanner call: large enough that the per-call cost vanishes, small next to the columns


class GiveUp(Exception):
    """The fast path does not read this file: the reference reader will, and say why not if it
    cannot."""


def scan(file: Path, scanner) -> None:
    """Feed the whole file to ``scanner`` (a _kineto_scan.Scanner); GiveUp where it cannot be read
    this way."""
    with open_regular(file) as f:  # TraceError for a device, a FIFO: no reader opens those
        try:
            head = f.read(2)
            f.seek(0)
            if is_gzip(head):
                _feed(
                    _Gunzipped(gunzip_pieces(f, os.fstat(f.fileno()).st_size, file)),
                    scanner,
                    PIECE_BYTES,
                    file,
                )
            # a small file gets a buffer of its size (+1: a full buffer is not known to be the end)
            else:
                _feed(f, scanner, min(PIECE_BYTES, os.fstat(f.fileno()).st_size + 1), file)
        # ScanError is a ValueError; a damaged gzip is gunzip_pieces' TraceError, passed on
        except (OSError, ValueError) as exc:
            raise GiveUp(str(exc)) from exc


# Where the scanner stops it stands at a JSON value's or a separator's first byte: a control byte
# there (a NUL of a sparse file, binary data) is in no JSON text, and the reference reader would
# load the whole file only to say so (a 2 GiB sparse file: 4.25 GB). Other bytes it still judges, in
# its words (not UTF-8, not valid JSON).
_CONTROL = frozenset(range(0x20)) - frozenset(b"\t\r\n") | {0x7F}
_STOPPED_AT = re.compile(r"near byte (\d+) of the piece")


def _not_json(exc: ValueError, piece, have: int, before: int, file: Path | None) -> None:
    """Raise TraceError where the scanner stopped at a byte no JSON text has there."""
    found = _STOPPED_AT.search(str(exc))
    at = int(found.group(1)) if found else -1
    if 0 <= at < have and piece[at] in _CONTROL:
        raise TraceError(
            f"{file or 'the file'} is not a Kineto trace: not JSON text (byte {before + at:,} is "
            f"0x{piece[at]:02x})"
        ) from exc


def _feed(source, scanner, buffer_bytes: int, file: Path | None = None) -> None:
    """Whole units to the scanner from one buffer that ``source.readinto`` fills; the unfinished
    rest moves to
    its front. The buffer is scanned only when full (or at the end), so a unit longer than it (a
    huge event) makes it double, and is scanned again only then: linear time still."""
    buf = bytearray(buffer_bytes)
    have = done = 0
    while True:
        view = memoryview(buf)
        while have < len(buf) and (n := source.readinto(view[have:])):
            have += n
        final = have < len(buf)
        try:
            used = scanner.feed(view[:have], final)
        except ValueError as exc:  # the scanner's ScanError
            view.release()
            _not_json(exc, buf, have, done, file)
            raise
        view.release()
        if final:
            return
        if used == 0:
            buf += bytes(len(buf))
        buf[: have - used] = buf[used:have]
        have -= used
        done += used


class _Gunzipped:
    """readinto over the output of files.gunzip_pieces."""

    def __init__(self, pieces: Iterator[bytes]):
        self.pieces, self.rest = pieces, memoryview(b"")

    def readinto(self, view: memoryview) -> int:
        if not self.rest:
            self.rest = memoryview(next(self.pieces, b""))
        n = min(len(view), len(self.rest))
        view[:n] = self.rest[:n]
        self.rest = self.rest[n:]
        return n
