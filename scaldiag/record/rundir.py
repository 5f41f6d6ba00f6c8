"""A run directory: the contract between capture and every analysis.

    RUN_DIR/
      run.json             the launch: command, status, exit code, evidence gaps   (launcher)
      training.json        framework, versions, batch sizes, replicas, trace window (recorder)
      inventory.json       GPUs: name, UUID, PCIe link, NVLink                     (NVML sampler)
      steps.jsonl          one line per training step: begin_ns, end_ns, ...       (recorder)
                           (under Keras a step ends where the next begins: see recorder.py)
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
    try:
        return json.loads((Path(run_dir) / name).read_text())
    except FileNotFoundError:
        return {}


class JsonlWriter:
    """Append rows as JSON lines; flushed every ``flush_every`` rows, at least every
    ``max_delay_s`` seconds while rows arrive, and on close."""

    def __init__(self, path: Path, flush_every: int = 1, max_delay_s: float = 1.0):
        self._file = open(path, "a", buffering=1 << 16)  # noqa: SIM115 (closed in close())
        self._pending = 0
        self._flush_every = flush_every
        self._max_delay_ns = int(max_delay_s * 1e9)
        self._flushed_ns = time.monotonic_ns()
        self._lock = threading.Lock()

    def write(self, row: dict) -> None:
        with self._lock:
            if self._file.closed:
                return
            self._file.write(json.dumps(row, separators=(",", ":")) + "\n")
            self._pending += 1
            now = time.monotonic_ns()
            if self._pending >= self._flush_every or now - self._flushed_ns >= self._max_delay_ns:
                self._file.flush()
                self._pending = 0
                self._flushed_ns = now

    def flush(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.flush()
                self._pending = 0

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()


def read_jsonl(path: Path) -> list[dict]:
    """Every complete row; a torn last line (the writer was killed) is skipped."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                if not line.endswith("\n"):
                    break
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    except FileNotFoundError:
        pass
    return rows
