"""Step recording for any training loop: wall times of every step, a trace window.

Framework-free: the Keras callback and the custom-loop API both drive it.
Each step is kept as a tuple as it ends and reaches the disk within
STEP_FLUSH_S (and at every mark: an epoch's end, validation, the profiler),
so a killed run keeps all but its last moment of steps. The training thread
pays for this on every step, so it is kept small (bench/bench_step_hook.py):
a file write per step cost 64-76 us a step on the H200 machine's kernel, ~5%
of a 1.5 ms step; a row encoded with ``json`` as it ended cost 2-3 of the 5 us
left after buffering, so rows are kept as tuples and formatted at the flush.
Which steps are warm-up, compilation or retracing is decided later, by the
analysis, from these facts. Marks (``marks.jsonl``) are the moments
between steps that the whole-run accounting needs: fit and epoch
boundaries, validation, the profiler starting and stopping.
"""

from __future__ import annotations

import collections
import itertools
import time
from pathlib import Path

from scaldiag.collect.frameworks.tracing import TraceWindow
from scaldiag.record.rundir import MARKS, STEPS, TRACE_DIR, JsonlWriter, close_quietly, update_json

WARMUP_STEPS = 3  # compile and first-run effects (allocator growth, autotuning)
TRACE_STEPS = 5   # steady-state steps in the profiler window
STEP_FLUSH_S = 0.1  # steps are on disk at most this long after they end, while steps arrive
_STEP_FLUSH_NS = int(STEP_FLUSH_S * 1e9)
RECENT_STEPS = 64  # step beginnings kept in memory (the callback sizes its input-free run from them)


_ROW = '{"step":%d,"epoch":%d,"begin_ns":%d,"end_ns":%d,"traced":%s'
ROW_FORMATS = {True: _ROW + ',"batch":%d}\n', False: _ROW + "}\n"}  # with and without Keras's batch index


def step_lines(rows: list[tuple]) -> str:
    """steps.jsonl lines for rows ``(step, epoch, begin_ns, end_ns, "true"|"false", batch|None)``,
    as ``json`` writes them (compact; ``%d`` takes NumPy integers too). Once per flush, on the
    training thread: ~1 us a row in a loop (printing the integers), ~3 us inside a Keras-on-JAX fit on
    the CPU machine. Rows that all have a batch index (Keras) or all lack one (custom loops) go
    through one ``%`` over a repeated format."""
    if not rows:
        return ""
    with_batch = rows[0][5] is not None
    if all((row[5] is not None) is with_batch for row in rows):
        values = rows if with_batch else (row[:5] for row in rows)
        return (ROW_FORMATS[with_batch] * len(rows)) % tuple(itertools.chain.from_iterable(values))
    return "".join(ROW_FORMATS[row[5] is not None] % (row if row[5] is not None else row[:5]) for row in rows)


class _StepFile:
    """steps.jsonl, appended a flush at a time."""

    def __init__(self, path: Path):
        self._file = open(path, "a")  # noqa: SIM115 (closed in close())

    def write(self, rows: list[tuple]) -> None:
        if not self._file.closed:
            if rows:
                self._file.write(step_lines(rows))
            self._file.flush()

    def close(self, rows: list[tuple]) -> None:
        if not self._file.closed:
            close_quietly(self._file, lambda: self.write(rows))


class StepRecorder:
    def __init__(self, run_dir: Path, window: TraceWindow | None,
                 warmup_steps: int = WARMUP_STEPS, trace_steps: int = TRACE_STEPS):
        self.run_dir = Path(run_dir)
        self._steps = _StepFile(self.run_dir / STEPS)
        self._rows: list[tuple] = []  # steps ended since the last flush
        self._flushed_ns = time.time_ns()
        self._marks = JsonlWriter(self.run_dir / MARKS)
        self._batch: int | None = None
        self._window = window
        self._trace_first = warmup_steps
        self._trace_last = warmup_steps + trace_steps - 1
        self.step = -1
        self.epoch = 0
        self._begin_ns = 0
        self._traced = False
        self._open = False
        self.recent_begin_ns = collections.deque(maxlen=RECENT_STEPS)
        update_json(self.run_dir, "training.json", warmup_steps=warmup_steps, trace_steps=trace_steps)

    def mark(self, name: str, **facts) -> None:
        """A moment of the run (``fit_begin``, ``epoch_end``...), for the accounting."""
        self.flush_steps()  # a pause between steps (epoch end, validation) leaves no step in memory
        self._marks.write({"mark": name, "t_ns": time.time_ns(), **facts})

    def begin(self, batch: int | None = None) -> None:
        """A step starts; the step before it, if still open, ends here.

        ``batch``: the index of its first batch in the epoch, where the loop
        says (Keras: with ``steps_per_execution=K`` one step is K batches).

        Callers may mark only beginnings: the Keras callback must not
        implement ``on_train_batch_end``, because Keras then turns each
        step's logs into Python numbers, a device sync that would slow an
        asynchronous (JAX) training loop.
        """
        now = time.time_ns()
        if self._open:
            if self._traced:
                self._finish(now)
            else:  # _finish without the window, inline: every step pays for this method
                self._open = False
                self._rows.append((self.step, self.epoch, self._begin_ns, now, "false", self._batch))
                if now - self._flushed_ns >= _STEP_FLUSH_NS or now < self._flushed_ns:  # (<: clock set back)
                    self.flush_steps()
        self.step += 1
        self._batch = batch
        if self._window is not None:
            now = self._window_begin(now)
        self._open = True
        self._begin_ns = now
        self.recent_begin_ns.append(now)

    def _window_begin(self, now: int) -> int:
        """The trace window's part of a step's beginning; returns the step's begin time."""
        window = self._window
        late = self.step == self._trace_first
        if late:
            self.mark("trace_start")
            window.start()
            self.mark("trace_started")
            update_json(self.run_dir, "training.json", trace={"logdir": TRACE_DIR, "first_step": self.step,
                                                                "backend": window.backend, "error": window.error})
        self._traced = bool(window.active)
        if self._traced:
            window.step_begin(self.step)
            late = True
        return time.time_ns() if late else now  # the window's own work belongs to neither step

    def flush_steps(self) -> None:
        """The steps ended so far onto the disk."""
        rows, self._rows = self._rows, []
        self._steps.write(rows)
        self._flushed_ns = time.time_ns()

    def end(self) -> None:
        """The current step ends (custom loops know; Keras steps end at the next begin)."""
        if self._open:
            self._finish(time.time_ns())

    def _finish(self, end_ns: int) -> None:
        self._open = False
        if self._traced:
            self._window.step_end()
        self._rows.append((self.step, self.epoch, self._begin_ns, end_ns, "true" if self._traced else "false",
                           self._batch))
        if end_ns - self._flushed_ns >= _STEP_FLUSH_NS or end_ns < self._flushed_ns:
            self.flush_steps()
        if self._traced and self.step >= self._trace_last:
            self.stop_trace()

    def stop_trace(self) -> None:
        window = self._window
        if window is not None and window.active:
            self.mark("trace_stop")
            window.stop()
            self.mark("trace_stopped")
            update_json(self.run_dir, "training.json", trace={"logdir": TRACE_DIR, "first_step": self._trace_first,
                                                                "last_step": self.step, "backend": window.backend,
                                                                "error": window.error})

    def close(self) -> None:
        self.end()
        self.stop_trace()
        rows, self._rows = self._rows, []
        self._steps.close(rows)
        self._marks.close()

