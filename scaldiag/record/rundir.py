"""A run directory: the contract between capture and every analysis.

    RUN_DIR/
      run.json             the launch: command, status, exit code, evidence gaps   (launcher)
      training.json        framework, versions, batch sizes, replicas, trace window (recorder)
      inventory.json       GPUs: name, UUID, PCIe link, NVLink                     (NVML sampler)
      steps.jsonl          one line per training step: begin_ns, end_ns, ...       (recorder)
                           (under Keras a step ends where the next begins: see recorder.py)
      marks.jsonl          moments between steps: fit/epoch/validation bounds, compiles (recorder, bootstrap)
      device_steps.jsonl   the device's time of each step (CUDA events), where timed  (PyTorch capture)
      gpu_samples.jsonl    NVML samples                                             (sampler)
      host_samples.jsonl   psutil samples                                           (sampler)
      trace/               TensorBoard logdir: plugins/profile/<run>/<host>.xplane.pb

    SWEEP_DIR/sweep.json   a sweep: GPU counts, repeats, one run directory each  (profile --gpus)

Written incrementally: JSON files are replaced atomically (write, then
rename); JSONL files are appended a line at a time and flushed, so a crash,
kill or Ctrl-C leaves every complete line readable. Readers skip a torn last
line. One clock: integer nanoseconds since the epoch (``time.time_ns``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

RECORD_SCHEMA_VERSION = 1  # the layout of run.json and friends (not the report's JSON)
JSON_FILES = ("run.json", "training.json", "inventory.json")
STEPS, GPU_SAMPLES, HOST_SAMPLES = "steps.jsonl", "gpu_samples.jsonl", "host_samples.jsonl"
MARKS = "marks.jsonl"
DEVICE_STEPS = "device_steps.jsonl"  # {"step": S, "device_ms": [...]}: the device's time of steps S, S+1...
TRACE_DIR = "trace"
SWEEP_JSON = "sweep.json"


def write_json(run_dir: Path, name: str, data: dict) -> None:
    """Replace ``run_dir/name`` atomically: readers see the old or the new file, never half."""
    path = Path(run_dir) / name
    tmp = path.with_name(f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


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
    """A JSON object file and what is wrong with it: None, or one line (absent files are not a problem)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"{path.name}: cannot be read ({exc.strerror or exc})"
    if not data.strip():
        return {}, f"{path.name}: empty (the writer was stopped before its first write)"
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return {}, f"{path.name}: not UTF-8 text (byte {exc.start})"
    except json.JSONDecodeError as exc:
        return {}, f"{path.name}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
    except RecursionError:
        return {}, f"{path.name}: nested too deeply to be a run record"
    if not isinstance(value, dict):
        return {}, f"{path.name}: holds a JSON {type(value).__name__}, not an object"
    return value, None


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
            if len(self._pending) >= self._flush_every or now - self._flushed_ns >= self._max_delay_ns:
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
    """``write_last()``, then close ``file``: where the last rows cannot reach the disk (full, gone),
    that is a gap in the record, not a failure of the run."""
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
    expected end of a killed run. Damaged lines (invalid UTF-8, not JSON, not
    an object) are skipped and counted; the rows after them are kept.
    """
    rows, skipped = [], 0
    try:
        with open(path, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break
                try:
                    row = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                    skipped += raw.strip() != b""
                    continue
                if isinstance(row, dict):
                    rows.append(row)
                else:
                    skipped += 1
    except FileNotFoundError:
        pass
    except OSError:
        skipped += 1
    return rows, skipped
