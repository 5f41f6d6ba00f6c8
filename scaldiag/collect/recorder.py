"""Step recording for any training loop: wall times of every step, a trace window.

Framework-free: the Keras callback and the custom-loop API both drive it.
Each step is kept as a tuple as it ends and reaches the disk within
STEP_FLUSH_S (and at every mark: an epoch's end, validation, the profiler),
so a killed run keeps all but its last moment of steps. The training thread
pays for this on every step, so it is kept small (bench/bench_step_hook.py):
a file write per step cost 64-76 us a step on the H200 machine's kernel, ~5%
of a 1.5 ms step; a row encoded with ``json`` as it ends cost 3 of the 5 us
left after buffering, so rows are formatted at the flush, with one format
string. Which steps are warm-up, compilation or retracing is decided later,
by the analysis, from these facts. Marks (``marks.jsonl``) are the moments
between steps that the whole-run accounting needs: fit and epoch
boundaries, validation, the profiler starting and stopping.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path

from scaldiag.collect.frameworks.tracing import TraceWindow
from scaldiag.record.rundir import MARKS, STEPS, TRACE_DIR, JsonlWriter, update_json

WARMUP_STEPS = 3  # compile and first-run effects (allocator growth, autotuning)
TRACE_STEPS = 5   # steady-state steps in the profiler window
STEP_FLUSH_S = 0.1  # steps are on disk at most this long after they end, while steps arrive
RECENT_STEPS = 64  # step beginnings kept in memory (the callback sizes its input-free run from them)


def step_line(step: int, epoch: int, begin_ns: int, end_ns: int, traced: bool, batch: int | None) -> str:
    """One steps.jsonl row, as ``json`` writes it (compact). ``step`` and the clocks are the
    recorder's own integers; ``epoch`` and ``batch`` come from the loop, hence ``int``."""
    tail = "" if batch is None else f',"batch":{int(batch)}'
    return (f'{{"step":{step},"epoch":{int(epoch)},"begin_ns":{begin_ns},"end_ns":{end_ns},'
            f'"traced":{"true" if traced else "false"}{tail}}}\n')


class _StepRows:
    """steps.jsonl: rows kept as tuples, formatted and written once per ``max_delay_ns`` (and on flush)."""

    def __init__(self, path: Path, max_delay_s: float):
        self._file = open(path, "a")  # noqa: SIM115 (closed in close())
        self.rows: list[tuple] = []
        self._max_delay_ns = int(max_delay_s * 1e9)
        self.flushed_ns = time.time_ns()

    def add(self, row: tuple) -> None:
        self.rows.append(row)
        waited = row[3] - self.flushed_ns  # row[3]: the step's end, time.time_ns()
        if waited >= self._max_delay_ns or waited < 0:  # (< 0: the clock was set back)
            self.flush()

    def flush(self) -> None:
        if self._file.closed:
            return
        rows, self.rows = self.rows, []
        if rows:
            self._file.write("".join([step_line(*row) for row in rows]))
        self._file.flush()
        self.flushed_ns = time.time_ns()

    def close(self) -> None:
        if not self._file.closed:
            try:
                self.flush()
            except OSError:  # the last rows could not reach the disk (full, gone): a gap, not a failure
                pass
            try:
                self._file.close()
            except OSError:
                pass


class StepRecorder:
    def __init__(self, run_dir: Path, window: TraceWindow | None,
                 warmup_steps: int = WARMUP_STEPS, trace_steps: int = TRACE_STEPS):
        self.run_dir = Path(run_dir)
        self._steps = _StepRows(self.run_dir / STEPS, STEP_FLUSH_S)
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
        self._steps.flush()  # a pause between steps (epoch end, validation) leaves no step in memory
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
            self._finish(now)
        self.step += 1
        self._batch = batch
        window = self._window
        if window is not None:
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
            if late:
                now = time.time_ns()  # the window's own work belongs to neither step
        self._open = True
        self._begin_ns = now
        self.recent_begin_ns.append(now)

    def end(self) -> None:
        """The current step ends (custom loops know; Keras steps end at the next begin)."""
        if self._open:
            self._finish(time.time_ns())

    def _finish(self, end_ns: int) -> None:
        self._open = False
        if self._traced:
            self._window.step_end()
        self._steps.add((self.step, self.epoch, self._begin_ns, end_ns, self._traced, self._batch))
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
        self._steps.close()
        self._marks.close()

