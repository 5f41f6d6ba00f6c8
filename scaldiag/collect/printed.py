"""The script's printed lines, time-stamped: the clocks its user reads (``printed.jsonl``).

In ``scaldiag profile``'s child (collect/bootstrap.py; each torchrun rank too, into its own run
directory), before the script runs, ``sys.stdout`` and ``sys.stderr`` become a ``PrintedStream``
each. Its ``write`` hands the very same text to the original stream first (what the original
raises is raised as it would have been), then scans it; every other attribute is the original's
(``isatty``, ``fileno``, ``encoding``, ``buffer``, ``flush``, ``line_buffering``, ``reconfigure``,
``repr``), so the bytes, their buffering and ``isatty()`` are the original's.

The scan cuts the text into segments, each ended by ``\\n`` or ``\\r`` (tqdm's and Keras's bars
redraw with ``\\r``), and keeps those that hold a digit (a clock needs numbers), one row each:

    {"t_ns": time.time_ns() when the segment ended, "stream": "stdout" | "stderr",
     "text": the segment without its end, "end": "\\n" | "\\r" | ""}

- ``\\b`` is taken out of ``text`` (Keras writes a run of them before each ``\\r`` redraw: they
  only move the cursor); everything else is kept as written, ANSI colour escapes included.
- ``text`` is cut at ``MAX_TEXT_CHARS``; a segment still open when the capture finishes (the last
  write had no end) is recorded then, with end ``""``.
- Lines scaldiag itself says ("scaldiag: ...", collect/frameworks/guard.py) are not the script's:
  left out.
- At most ``MAX_RECORDS`` rows and ``MAX_BYTES`` of file; past either, one last row
  ``{"dropped": N}`` counts the rest.
- The file is written by a thread (started at the first row) every ``FLUSH_EVERY_S``, not in
  ``write()``: there the scan is a lock, a split and a list append. The lock guards the scan's
  open segments only, never the original's write: two threads writing at once reach the stream
  as they would have; their segments are cut in the order the scan sees them.
- A scan that fails, or a file that cannot be written, turns the capture off (one line on
  stderr); the script's writes go on untouched.

Not seen: bytes written to ``sys.stdout.buffer`` or to file descriptors 1 and 2 (C++ logs such
as TensorFlow's, subprocesses), a stream the script installs itself (``sys.stdout = ...``;
``contextlib.redirect_stdout`` while it lasts), what held on to ``sys.stdout`` before the script
ran, and a forked child's lines (the capture is off after ``fork``: the child's copy of the
unwritten rows is never written). What the script could notice: ``sys.stdout is sys.__stdout__``
is False, and ``sys.stdout`` is not an ``io.TextIOWrapper``. Armed by the bootstrap alone: the
Keras callback and the loop API, used in a process ``profile`` did not start, read no output.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from pathlib import Path

from scaldiag.collect.frameworks.guard import reason, say
from scaldiag.record.rundir import PRINTED

MAX_TEXT_CHARS = 2000  # a bar's line is ~100 characters; a longer one is a dump, not a clock
MAX_RECORDS = 100_000  # a bar redrawn 10 times a second for 3 hours; bounds the volume
MAX_BYTES = 32 << 20
FLUSH_EVERY_S = 0.5  # on disk at most this long after it was printed
OWN_PREFIX = "scaldiag: "
STREAMS = ("stdout", "stderr")

_ENDS = re.compile(r"([\r\n])")
_DIGIT = re.compile(r"\d")
_encode = json.JSONEncoder(separators=(",", ":")).encode  # ASCII: a line's length is its bytes


def _kept(segment: str, piece: str) -> str:
    """The segment so far with ``piece`` after it, its ``\\b`` taken out, cut at MAX_TEXT_CHARS."""
    if not piece or len(segment) >= MAX_TEXT_CHARS:
        return segment
    if "\b" in piece:
        piece = piece.replace("\b", "")
    return (segment + piece)[:MAX_TEXT_CHARS]


class PrintedStream:
    """``sys.stdout`` or ``sys.stderr`` as the script sees it: the original, read as it writes."""

    __slots__ = ("_original", "_name", "_capture")

    def __init__(self, original, name: str, capture: PrintedCapture):
        object.__setattr__(self, "_original", original)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_capture", capture)

    def write(self, text):
        written = self._original.write(text)  # first, unchanged: its failure is the script's
        if self._capture.on:
            self._capture.scan(self._name, text)
        return written

    def writelines(self, lines):
        lines = list(lines)
        self._original.writelines(lines)
        if self._capture.on:
            for text in lines:
                self._capture.scan(self._name, text)

    def __getattr__(self, name):
        return getattr(self._original, name)

    def __setattr__(self, name, value):
        setattr(self._original, name, value)

    def __delattr__(self, name):
        delattr(self._original, name)

    def __repr__(self):
        return repr(self._original)

    def __iter__(self):
        return iter(self._original)

    def __next__(self):
        return next(self._original)

    def __enter__(self):
        return self._original.__enter__()

    def __exit__(self, *exc):
        return self._original.__exit__(*exc)


class PrintedCapture:
    """The scan of both streams and the rows it keeps, written to ``run_dir/printed.jsonl``."""

    def __init__(self, path: Path, max_records: int = MAX_RECORDS, max_bytes: int = MAX_BYTES):
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        # A bare descriptor, no buffer of Python's: a forked child holds no half-written copy that
        # its exit could flush into the file.
        self._fd = os.open(path, flags, 0o644)
        self._pid = os.getpid()
        self.on = True
        self._max_records, self._max_bytes = max_records, max_bytes
        self._lock = threading.RLock()  # the scan's state; re-entered only by a signal handler
        self._busy = False
        self._open = dict.fromkeys(STREAMS, "")  # each stream's segment so far
        self._rows: list[tuple] = []
        self._records = self._dropped = 0
        self._full = self._failed = False
        self._file_lock = threading.Lock()  # the writer's side: the thread, then finish
        self._bytes = self._dropped_late = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the write path (any thread of the script) ---

    def scan(self, stream: str, text) -> None:
        if type(text) is not str and not isinstance(text, str):
            return
        lock = self._lock
        lock.acquire()  # (not ``with``: a third of the scan's cost, measured)
        try:
            # A signal handler or a finaliser that prints while this thread scans: its text
            # reached the stream; the scan's state is mid-change, so it is not read.
            if self._busy or not self.on:
                return
            self._busy = True
            try:
                if text == "\n":  # print's own end, the commonest write
                    segment, self._open[stream] = self._open[stream], ""
                    self._end(stream, segment, "\n")
                elif "\n" in text or "\r" in text:
                    self._cut(stream, text)
                else:  # a piece of a line (print's text before its end)
                    segment = self._open[stream]
                    if len(segment) < MAX_TEXT_CHARS:
                        self._open[stream] = _kept(segment, text)
            finally:
                self._busy = False
        except Exception as exc:
            self._turn_off(f"its scan failed ({reason(exc)})")
        finally:
            lock.release()

    def _cut(self, stream: str, text: str) -> None:
        if "\n" not in text or "\r" not in text:  # one kind of end (a bar's redraw: \r alone)
            end = "\r" if "\n" not in text else "\n"
            parts = text.split(end)
            for piece in parts[:-1]:
                segment, self._open[stream] = _kept(self._open[stream], piece), ""
                self._end(stream, segment, end)
            self._open[stream] = _kept("", parts[-1])
            return
        parts = _ENDS.split(text)  # [segment, end, segment, end, ..., the open rest]
        for i in range(0, len(parts) - 1, 2):
            segment, self._open[stream] = _kept(self._open[stream], parts[i]), ""
            self._end(stream, segment, parts[i + 1])
        self._open[stream] = _kept("", parts[-1])

    def _end(self, stream: str, text: str, end: str) -> None:
        if not text or _DIGIT.search(text) is None or text.startswith(OWN_PREFIX):
            return
        if self._full or self._records >= self._max_records:
            self._dropped += 1
            return
        self._records += 1
        self._rows.append((time.time_ns(), stream, text, end))
        if self._thread is None and not self._stop.is_set():  # (finish writes its own rows)
            self._start_writer()

    def _start_writer(self) -> None:
        self._thread = threading.Thread(
            target=self._write_every, name="scaldiag-printed", daemon=True
        )
        self._thread.start()

    # --- the writer's side ---

    def _write_every(self) -> None:
        while not self._stop.wait(FLUSH_EVERY_S):
            self._write_rows(self._take_rows())

    def _take_rows(self) -> list[tuple]:
        with self._lock:
            rows, self._rows = self._rows, []
        return rows

    def _write_rows(self, rows: list[tuple], scan_dropped: int | None = None) -> None:
        """The rows to the file; the last time (``scan_dropped``: the scan's count), with the
        count of every row dropped."""
        with self._file_lock:
            if self._fd < 0:
                return
            lines = []
            for t_ns, stream, text, end in rows:
                line = _encode({"t_ns": t_ns, "stream": stream, "text": text, "end": end}) + "\n"
                if self._full or self._bytes + len(line) > self._max_bytes:
                    self._full = True
                    self._dropped_late += 1
                    continue
                self._bytes += len(line)
                lines.append(line)
            dropped = 0 if scan_dropped is None else scan_dropped + self._dropped_late
            if dropped:
                lines.append(_encode({"dropped": dropped}) + "\n")
            if not lines:
                return
            data = "".join(lines).encode("ascii")
            try:
                while data:
                    data = data[os.write(self._fd, data) :]
            except OSError as exc:
                os.close(self._fd)
                self._fd = -1
                self._turn_off(f"{PRINTED} cannot be written ({exc.strerror or exc})")

    def _turn_off(self, why: str) -> None:
        self.on = False
        if not self._failed:
            self._failed = True
            say(f"the script's printed lines are no longer recorded: {why}")

    def finish(self) -> None:
        """After the script: the open segments (end ""), the last rows and what was dropped
        written, the file closed, the original streams put back where ours still are."""
        _restore()
        if os.getpid() != self._pid:  # a forked child that reached the bootstrap's end
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        with self._lock:
            on, self.on = self.on, False
            if on:
                for stream in STREAMS:
                    segment, self._open[stream] = self._open[stream], ""
                    self._end(stream, segment, "")
            rows, self._rows = self._rows, []
            dropped = self._dropped
        self._write_rows(rows, scan_dropped=dropped)
        with self._file_lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def _forget(self) -> None:
        """In a forked child: off, and no lock a vanished thread may have held."""
        self.on = False
        self._lock = threading.RLock()
        self._file_lock = threading.Lock()
        self._rows = []


_active: PrintedCapture | None = None


def start(run_dir: str | os.PathLike | None) -> PrintedCapture | None:
    """Read the script's ``sys.stdout`` and ``sys.stderr`` into ``run_dir/printed.jsonl`` (None: no
    run directory, or the file cannot be opened, said in one line; the script runs as it would)."""
    global _active
    if not run_dir:
        return None
    try:
        capture = PrintedCapture(Path(run_dir) / PRINTED)
    except OSError as exc:
        say(f"the script's printed lines are not recorded ({exc.strerror or exc})")
        return None
    for name in STREAMS:
        original = getattr(sys, name)
        if original is not None:  # None: Python started without that stream
            setattr(sys, name, PrintedStream(original, name, capture))
    _active = capture
    return capture


def _restore() -> None:
    """The original streams back in ``sys``, where ours are still there (a stream the script put
    there itself is left)."""
    for name in STREAMS:
        stream = getattr(sys, name)
        if type(stream) is PrintedStream:
            setattr(sys, name, object.__getattribute__(stream, "_original"))


def _after_fork_in_child() -> None:
    if _active is not None:
        _active._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
