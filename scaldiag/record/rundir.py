"""A run directory: the contract between capture and every analysis.

    RUN_DIR/
      run.json             the launch: command, status, exit code, evidence gaps   (run_json.py)
      training.json        framework, versions, batch sizes, replicas, trace window (recorder)
      inventory.json       GPUs: name, UUID, PCIe link, NVLink                     (NVML sampler)
      steps.jsonl          one line per training step: begin_ns, end_ns, ...       (recorder)
                           (under Keras a step ends where the next begins: see recorder.py)
      marks.jsonl          moments between steps: fit/epoch/validation bounds, compiles (recorder, bootstrap)
      printed.jsonl        the script's printed lines that hold a digit, time-stamped (collect/printed.py)
      device_steps.jsonl   the device's time of each step (CUDA events), where timed  (PyTorch capture)
      gpu_samples.jsonl    NVML samples                                             (sampler)
      host_samples.jsonl   psutil samples                                           (sampler)
      trace/               TensorBoard logdir: plugins/profile/<run>/<host>.xplane.pb

    SWEEP_DIR/sweep.json   a sweep: GPU counts, repeats, one run directory each  (profile --gpus)

Written incrementally: JSON files are replaced atomically (write, then
rename); JSONL files are appended a line at a time and flushed, so a crash,
kill or Ctrl-C leaves every complete line readable. Readers skip a torn last
line. One clock: integer nanoseconds since the epoch (``time.time_ns``).
"""  # noqa: E501

from __future__ import annotations

import errno
import json
import os
import stat
import threading
import time
from pathlib import Path

RECORD_SCHEMA_VERSION = 1  # the layout of run.json and friends (not the report's JSON)
# The file names of the contract, spelled here only: every other module imports them.
RUN_JSON, TRAINING_JSON, INVENTORY_JSON = "run.json", "training.json", "inventory.json"
JSON_FILES = (RUN_JSON, TRAINING_JSON, INVENTORY_JSON)
STEPS, GPU_SAMPLES, HOST_SAMPLES = "steps.jsonl", "gpu_samples.jsonl", "host_samples.jsonl"
MARKS = "marks.jsonl"
PRINTED = "printed.jsonl"  # {"t_ns", "stream", "text", "end"} a line printed (collect/printed.py)
DEVICE_STEPS = (  # {"step": S, "device_ms": [...]}: the device's time of steps S, S+1...
    "device_steps.jsonl"
)
TRACE_DIR = "trace"
SWEEP_JSON = "sweep.json"
TRY_JSON = "try.json"  # scaldiag try: baseline and fixed rounds, speed-up (commands/try_fix.py)
# Every file of a record a report reads (an output there would replace an input:
# commands/report.py).
RECORD_FILES = frozenset(
    (
        *JSON_FILES,
        SWEEP_JSON,
        STEPS,
        MARKS,
        PRINTED,
        DEVICE_STEPS,
        GPU_SAMPLES,
        HOST_SAMPLES,
        TRY_JSON,
    )
)

# Reading caps (docs/reliability.md): a record someone damaged or crafted is read within these.
# run.json and friends hold kilobytes; 16 MiB is no record of ours.
MAX_JSON_BYTES = 16 << 20
# Deeper is no record of ours (inventory.json's topology nests 3 deep); renderers recurse over it.
MAX_JSON_DEPTH = 32
# A step row is ~100 bytes, a sample row ~300; a longer line is damage, skipped without reading it
# whole.
MAX_LINE_BYTES = 1 << 20
# Rows are read into memory (~1 KB each as Python objects): 2 GiB of lines is ~10 GB, days of
# sampling.
MAX_JSONL_BYTES = 2 << 30


def write_json(run_dir: Path, name: str, data: dict) -> None:
    """Replace ``run_dir/name`` atomically: readers see the old or the new file, never half."""
    path = Path(run_dir) / name
    tmp = path.with_name(f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except (
        BaseException
    ):  # a full disk, a file size limit, an interrupt: no half-written temporary is left
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


def update_json(run_dir: Path, name: str, **fields) -> dict:
    """Merge ``fields`` into a JSON file of the run (one writer per file)."""
    data = read_json(run_dir, name)
    data.update(fields)
    write_json(run_dir, name, data)
    return data


def read_json(run_dir: Path, name: str) -> dict:
    """The file's object; ``{}`` if it is absent or damaged (``load_json`` says which)."""
    return load_json(Path(run_dir) / name)[0]


def load_json(path: Path) -> tuple[dict, str | None]:
    """A JSON object file and what is wrong with it: None, or one line (absent files are not a
    problem)."""
    path = Path(path)
    try:
        with open_regular(path) as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"{path.name}: cannot be read ({exc.strerror or exc})"
    if len(data) > MAX_JSON_BYTES:
        return (
            {},
            f"{path.name}: larger than {MAX_JSON_BYTES >> 20} MiB, not a run record; not read",
        )
    if not data.strip():
        return {}, f"{path.name}: empty (the writer was stopped before its first write)"
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return {}, f"{path.name}: not UTF-8 text (byte {exc.start})"
    except json.JSONDecodeError as exc:
        return (
            {},
            f"{path.name}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})",
        )
    except RecursionError:
        return {}, f"{path.name}: nested too deeply to be a run record"
    except (
        ValueError
    ) as exc:  # (after JSONDecodeError, its subclass) an integer of more than 4,300 digits
        return {}, f"{path.name}: not a run record ({exc})"
    if not isinstance(value, dict):
        return {}, f"{path.name}: holds a JSON {type(value).__name__}, not an object"
    if _deeper_than(value, MAX_JSON_DEPTH):
        return {}, f"{path.name}: nested more than {MAX_JSON_DEPTH} deep, not a run record"
    return value, None


def _deeper_than(value, limit: int) -> bool:
    """Whether containers nest more than ``limit`` deep (iterative: a deep value must not overflow
    the stack)."""
    level = [value]
    for _ in range(limit):
        level = [
            x
            for v in level
            for x in (v.values() if isinstance(v, dict) else v)
            if isinstance(x, (dict, list))
        ]
        if not level:
            return False
    return True


def open_regular(path: Path):
    """``path`` opened for binary reading, if it is a regular file.

    A device (``steps.jsonl`` a link to /dev/zero) would be read until memory
    runs out, and a FIFO blocks the open: neither is opened (OSError, with
    the reason as its strerror). FileNotFoundError where there is nothing.
    """
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(errno.EINVAL, "not a regular file (a device, a FIFO or a socket)")
    # O_NONBLOCK: a FIFO put there after the check does not block the open.
    f = os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)), "rb")
    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
        f.close()
        raise OSError(errno.EINVAL, "not a regular file (a device, a FIFO or a socket)")
    return f


class JsonlWriter:
    """Append rows as JSON lines; on disk every ``flush_every`` rows, at least every
    ``max_delay_s`` seconds while rows arrive, and on close.

    Rows are encoded as they come (a later change to the dict cannot reach the
    file) and written in one call per flush: between flushes a row costs its
    encoding and a list append, not a file write. The encoder is made once:
    ``json.dumps`` with ``separators`` builds a new one per call (half its cost
    on a short row, measured).
    """

    _encode = json.JSONEncoder(separators=(",", ":")).encode

    def __init__(self, path: Path, flush_every: int = 1, max_delay_s: float = 1.0):
        self._file = open(path, "a")  # noqa: SIM115 (closed in close())
        self._pending: list[str] = []
        self._flush_every = flush_every
        self._max_delay_ns = int(max_delay_s * 1e9)
        self._flushed_ns = time.monotonic_ns()
        self._lock = threading.Lock()

    def write(self, row: dict) -> None:
        self.write_many((row,))

    def write_many(self, rows) -> None:
        """Several rows at once (one sampler tick: a row per GPU), under one lock."""
        with self._lock:
            if self._file.closed:
                return
            self._pending.extend(self._encode(row) + "\n" for row in rows)
            now = time.monotonic_ns()
            if (
                len(self._pending) >= self._flush_every
                or now - self._flushed_ns >= self._max_delay_ns
            ):
                self._write_pending()
                self._flushed_ns = now

    def _write_pending(self) -> None:
        """The buffered lines to the file and the file to the OS (under the lock)."""
        if self._pending:
            text, self._pending = "".join(self._pending), []
            self._file.write(text)
        self._file.flush()

    def flush(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._write_pending()

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                close_quietly(self._file, self._write_pending)


def close_quietly(file, write_last) -> None:
    """``write_last()``, then close ``file``: where the last rows cannot reach the disk (full,
    gone), that is a gap in the record, not a failure of the run."""
    try:
        write_last()
    except OSError:
        pass
    try:
        file.close()
    except OSError:
        pass


def append_mark(run_dir: str | os.PathLike | None, name: str) -> None:
    """One mark of the run's timeline, from a process without a recorder; never raises."""
    if not run_dir:
        return
    try:
        with open(Path(run_dir) / MARKS, "a") as f:
            f.write(json.dumps({"mark": name, "t_ns": time.time_ns()}) + "\n")
    except OSError:
        pass  # a lost mark is a gap in the accounting ("other"), never a failure of the run


def read_jsonl(path: Path) -> list[dict]:
    """Every complete row; a torn last line (the writer was killed) is skipped."""
    return load_jsonl(path)[0]


def load_jsonl(path: Path) -> tuple[list[dict], int]:
    """Every complete row that is a JSON object, and how many other lines were skipped.

    A torn last line (the writer was killed) is not counted: it is the
    expected end of a killed run. Damaged lines (blank, invalid UTF-8, not
    JSON, not an object) are skipped and counted; the rows after them are kept.
    A line that is no object's (not ``{...}``) is skipped unparsed: a file of
    blank lines took 3.4 s of CPU a MiB through the parser's exceptions.
    """
    rows, skipped = [], 0
    try:
        with open_regular(path) as f:
            for lines, damaged in _line_blocks(f):
                skipped += damaged
                for raw in lines:
                    row = _object_row(raw)
                    if row is None:
                        skipped += 1
                    else:
                        rows.append(row)
    except FileNotFoundError:
        pass
    except OSError:
        skipped += 1
    return rows, skipped


def _object_row(raw: bytes) -> dict | None:
    """The JSON object a line holds, or None."""
    raw = raw.strip()
    if not (raw.startswith(b"{") and raw.endswith(b"}")):
        return None
    try:
        row = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # ValueError: an int of 4,300+ digits
        return None
    return row if isinstance(row, dict) else None


READ_BLOCK_BYTES = 1 << 20


def _line_blocks(f):
    """The file's complete lines, a block read at a time: (the lines of the block that are not
    empty, each at most MAX_LINE_BYTES, and how many were damage: empty, too long, or the file past
    MAX_JSONL_BYTES, counted once, the rest unread). A torn last line (the writer was killed) is
    not damage. Empty lines are dropped in C: a MiB of them is one split, not a million reads."""
    read, pending, long_line = 0, b"", False
    while True:
        block = f.read(min(READ_BLOCK_BYTES, MAX_JSONL_BYTES - read))
        over = not block and read >= MAX_JSONL_BYTES and f.read(1) != b""
        if not block:
            if over:
                yield [], 1
            return
        read += len(block)
        lines = (pending + block).split(b"\n")
        pending = lines.pop()  # after the last newline: the next block's start, or a torn line
        if long_line and lines:  # the end of a line already over the cap, its start not kept
            lines[0], long_line = b"", False
        if len(pending) > MAX_LINE_BYTES:
            pending, long_line = b"", True
        kept = [line for line in filter(None, lines) if len(line) <= MAX_LINE_BYTES]
        yield kept, len(lines) - len(kept)
