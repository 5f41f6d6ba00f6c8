"""A Kineto file's bytes, a piece at a time, through the scanner (readers/_kineto_scan.c).

Plain files are read PIECE_BYTES at a time; gzip files are decompressed as a
stream by readers/files.gunzip_pieces, under its caps and padding bound, which
the reference reader's gunzip shares: a damaged, truncated or padded-on gzip is
refused there with its words, and scanned in pieces of about its text's size
(gzip_buffer_bytes), PIECE_BYTES at most. Memory is one piece and the scanner's
columns, never the document.

A plain file of SPLIT_MIN_BYTES or more is read in parts at once where
several cores are (one part per core, ``parts_for``): each part after the
first starts at an event boundary ("}, {" outside any string, if the guess is
right) near its share of the file and is scanned by a thread of its own (the
scanner runs without the GIL) while this one scans the first part. The cuts
are guesses, found by a byte search that knows nothing of strings; they are
checked in file order, exactly: a part is kept only where the scanner of the
part before it, stopping at its start, stands just after an element of
traceEvents, so that it was scanned exactly as one stream would have scanned
it. At the first cut that fails (inside a string, a nested array) that
scanner reads on to the end and the later parts are dropped: the result is
the single scan's, parts or not (tests/test_kineto_fast.py cuts real traces
at every kind of place). One core, a small file or a gzip file: one part.

Where the JSON is not what the fast path reads ``GiveUp`` is raised and the
caller reads the file with the reference reader (reference.py), which says
what is wrong in its words.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from scaldiag.errors import TraceError
from scaldiag.readers.files import gunzip_pieces, is_gzip, open_regular

# JSON per scanner call: large enough that the per-call cost vanishes, small next to the columns
PIECE_BYTES = 16 << 20


# From here a plain file is scanned in parts at once (where several cores are): 1 GB took the
# scanner 1.9 s in one thread, 1.0 s in two. A thread costs well under a millisecond; below this
# the parts' merge (a string table a part, seq shifted) is not worth it either. A part is at least
# half of it; MAX_PARTS at most (each part's columns are joined after; cores past it gain little).
SPLIT_MIN_BYTES = 32 << 20
MAX_PARTS = 8
# A gzip file's buffer is sized from its compressed size at this ratio (real Kineto traces expand
# 13-15x, readers/files.py), up to PIECE_BYTES: a fresh 16 MB buffer for every small rank file cost
# more than decompressing it (0.7 ms against 1.0 ms for a 34 KB rank; bench/results/job_merge.md).
# A file that expands more is scanned in more pieces, as a large one always is.
GZIP_EXPECTED_RATIO = 16
MIN_BUFFER_BYTES = 64 << 10
SEARCH_BYTES = 1 << 20  # looked at from the middle for an event boundary; none there: one part
_BOUNDARY = re.compile(rb"\}[ \t\r\n]*(,)[ \t\r\n]*\{")  # "}, {": the comma between two objects
# A part's buffer grows at most this far: a cut inside a long string can make its scanner see one
# endless unit; that part is then dropped, not read into memory.
SECOND_MAX_BUFFER_BYTES = 4 * PIECE_BYTES


class GiveUp(Exception):
    """The fast path does not read this file: the reference reader will, and say why not if it
    cannot."""


def scan(file: Path, new_scanner: Callable[[], object]) -> list[tuple[object, int]]:
    """The whole file through scanners (``new_scanner()`` makes one: a _kineto_scan.Scanner), as
    (scanner, elements of traceEvents before its part) in file order: one, or more where the file
    was read in parts. GiveUp where it cannot be read this way."""
    with open_regular(file) as f:  # TraceError for a device, a FIFO: no reader opens those
        try:
            head = f.read(2)
            f.seek(0)
            size = os.fstat(f.fileno()).st_size
            if is_gzip(head):
                scanner = new_scanner()
                pieces = _Gunzipped(gunzip_pieces(f, size, file))
                _feed(pieces, scanner, gzip_buffer_bytes(size), file)
                return [(scanner, 0)]
            parts = parts_for(size, _cores())
            if parts > 1:
                return _scan_in_parts(f.fileno(), size, parts, new_scanner, file)
            scanner = new_scanner()
            # a small file gets a buffer of its size (+1: a full buffer is not known to be the end)
            _feed(f, scanner, min(PIECE_BYTES, size + 1), file)
            return [(scanner, 0)]
        # ScanError is a ValueError; a damaged gzip is gunzip_pieces' TraceError, passed on
        except (OSError, ValueError) as exc:
            raise GiveUp(str(exc)) from exc


def gzip_buffer_bytes(compressed_bytes: int) -> int:
    """The scanner's buffer for a gzip file of this size: about its text, PIECE_BYTES at most."""
    return min(PIECE_BYTES, max(MIN_BUFFER_BYTES, GZIP_EXPECTED_RATIO * compressed_bytes))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class _SplitRefused(Exception):
    """A part's scan went where one stream's would not (its buffer past its bound); ``stopped``:
    the offset up to which its scanner had read whole units."""

    def __init__(self, message: str, stopped: int):
        super().__init__(message)
        self.stopped = stopped


def parts_for(size: int, cores: int) -> int:
    """How many parts a plain file of ``size`` bytes is scanned in: one per core, each of at least
    SPLIT_MIN_BYTES / 2 (a small file, or one core: one part, the single scan)."""
    if size < SPLIT_MIN_BYTES or cores < 2:
        return 1
    return max(1, min(cores, MAX_PARTS, size // max(1, SPLIT_MIN_BYTES // 2)))


def _scan_in_parts(
    fd: int, size: int, parts: int, new_scanner, file: Path
) -> list[tuple[object, int]]:
    """The file in ``parts`` parts scanned at once, each from an event boundary found near its
    share of the file (this thread the first, a thread each the others), then checked in file
    order: a part is kept only where the scanner of the part before it, stopping at its start,
    stands just after an element of traceEvents (it then was scanned exactly as one stream would
    have scanned it). At the first cut that fails (inside a string, a nested array) the scanner of
    the part before reads on from where it stopped to the end and the later parts are dropped."""
    cuts = _cuts(fd, size, parts)
    if len(cuts) == 2:  # no boundary found: one part
        first = new_scanner()
        _feed(_Pread(fd, 0), first, PIECE_BYTES, file)
        return [(first, 0)]
    top_is_array = _top_is_array(fd)
    scanners = [new_scanner() for _ in cuts[:-1]]
    for scanner in scanners[1:]:
        scanner.resume_in_events(top_is_array)
    # where it stopped, or why not
    outcome: list[BaseException | int | None] = [None] * len(scanners)

    def scan_part(i: int) -> None:
        last = i == len(scanners) - 1
        try:
            outcome[i] = _feed(
                _Pread(fd, cuts[i], None if last else cuts[i + 1]),
                scanners[i],
                PIECE_BYTES,
                file,
                start=cuts[i],
                final=last,
                max_buffer=SECOND_MAX_BUFFER_BYTES,
            )
        except BaseException as exc:  # noqa: BLE001 - judged below, once the parts before say
            outcome[i] = exc

    threads = [
        threading.Thread(target=scan_part, args=(i,), name=f"kineto-part-{i}", daemon=True)
        for i in range(1, len(scanners))
    ]
    for thread in threads:
        thread.start()
    try:
        scan_part(0)
    finally:
        for thread in threads:
            thread.join()
    kept = [(scanners[0], 0)]
    for i, scanner in enumerate(scanners):
        stopped = outcome[i]
        if isinstance(stopped, _SplitRefused):  # its start was right: a huge unit, read on
            _feed(_Pread(fd, stopped.stopped), scanner, PIECE_BYTES, file, start=stopped.stopped)
            return kept
        if isinstance(stopped, BaseException):  # its start was right: its error is the file's
            raise stopped
        if i == len(scanners) - 1:
            return kept
        at = scanner.between_events()  # (elements so far, the document is a bare array) or None
        if stopped != cuts[i + 1] or at is None or at[1] != top_is_array:
            # The cut was not between two events, or the first bytes' guess of a bare array was
            # wrong (whitespace past 4 KB): this part's scanner reads on, the later parts dropped.
            _feed(_Pread(fd, stopped), scanner, PIECE_BYTES, file, start=stopped)
            return kept
        kept.append((scanners[i + 1], kept[-1][1] + at[0]))
    return kept


def _cuts(fd: int, size: int, parts: int) -> list[int]:
    """0, an event boundary near each k/parts of the file (each past the one before), the size."""
    cuts = [0]
    for k in range(1, parts):
        cut = _event_boundary(fd, max(size * k // parts, cuts[-1] + 1))
        if cut is not None and cut < size:
            cuts.append(cut)
    return [*cuts, size]


def _event_boundary(fd: int, near: int) -> int | None:
    """The offset of a comma between two objects ("}, {") from ``near`` on, within SEARCH_BYTES."""
    found = _BOUNDARY.search(os.pread(fd, SEARCH_BYTES, near))
    return near + found.start(1) if found else None


def _top_is_array(fd: int) -> bool:
    """Whether the document is a bare array of events (the first byte past whitespace is '[')."""
    head = os.pread(fd, 4096, 0).lstrip(b" \t\r\n")
    return head[:1] == b"["


class _Pread:
    """readinto over a file descriptor from ``start`` up to ``stop`` (the end where None), by
    positioned reads: two threads read one file's parts through one descriptor."""

    def __init__(self, fd: int, start: int, stop: int | None = None):
        self.fd, self.at, self.stop = fd, start, stop

    def readinto(self, view: memoryview) -> int:
        if self.stop is not None:
            view = view[: max(0, self.stop - self.at)]
        if not len(view):
            return 0
        n = os.preadv(self.fd, [view], self.at)
        self.at += n
        return n


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


def _feed(
    source,
    scanner,
    buffer_bytes: int,
    file: Path | None = None,
    *,
    start: int = 0,
    final: bool = True,
    max_buffer: int | None = None,
) -> int:
    """Whole units to the scanner from one buffer that ``source.readinto`` fills; the unfinished
    rest moves to its front. The buffer is scanned only when full (or at the end), so a unit longer
    than it (a huge event) makes it double, and is scanned again only then: linear time still.
    ``start``: the source's offset in the file (for messages). ``final``: the source's end is the
    document's (else its last piece is scanned as any other). Returns the offset where the scanner
    stopped: the source's end where ``final``."""
    buf = bytearray(buffer_bytes)
    have, done = 0, start
    while True:
        view = memoryview(buf)
        while have < len(buf) and (n := source.readinto(view[have:])):
            have += n
        at_end = have < len(buf)
        try:
            used = scanner.feed(view[:have], at_end and final)
        except ValueError as exc:  # the scanner's ScanError
            view.release()
            _not_json(exc, buf, have, done, file)
            raise
        view.release()
        if at_end:
            return done + used
        if used == 0:
            if max_buffer is not None and 2 * len(buf) > max_buffer:
                raise _SplitRefused(f"a unit of more than {max_buffer:,} bytes", done)
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
