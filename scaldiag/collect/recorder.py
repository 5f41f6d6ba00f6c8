"""Step recording for any training loop: wall times of every step, a trace window.

Framework-free: the Keras callback and the custom-loop API both drive it.
Steps reach the disk within STEP_FLUSH_S (and at every mark: an epoch's end,
validation, the profiler), so a killed run keeps all but its last moment of
steps. Which steps are warm-up, compilation or retracing is decided later, by
the analysis, from these facts. Marks (``marks.jsonl``) are the moments
between steps that the whole-run accounting needs: fit and epoch boundaries,
validation, the profiler starting and stopping.

The training thread pays for this on every step, so the usual step costs one clock read and two list
appends (bench/step_hook/run.py). Steps that only begin (Keras, PyTorch: a step ends where the next
begins) and are outside the trace window are kept as a *block*: the steps' begin times in one list,
each step ending where the next begins, written as one ``steps.jsonl`` row (``bounds_ns``) that the
reader expands. Measured on the H200 machine, where a host-bound step takes 1.1 ms: a file write per
step cost ~5% of it (64-76 us); a row per step, formatted at the flush, still ~10 us a step inside a
fit (bench/results/gpu_h200/overhead_pieces/overhead.md#capture_overhead_attributionmd), most of it
Python printing six fields a step. A block prints its integers with one ``str`` each. Steps in the
trace window, and steps a loop ends itself (``end``), keep a row each: they are few, or their ends
are not the next beginnings.
"""

from __future__ import annotations

import collections
import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from scaldiag.collect import trace_budget
from scaldiag.collect.frameworks.tracing import TraceWindow
from scaldiag.record import run_json
from scaldiag.record.rundir import (
    MARKS,
    STEPS,
    TRACE_DIR,
    TRAINING_JSON,
    JsonlWriter,
    close_quietly,
    update_json,
)

WARMUP_STEPS = 3  # compile and first-run effects (allocator growth, autotuning)
TRACE_STEPS = 5  # steady-state steps in the profiler window
STEP_FLUSH_S = 0.1  # steps are on disk at most this long after they end, while steps arrive
_STEP_FLUSH_NS = int(STEP_FLUSH_S * 1e9)
RECENT_STEPS = (
    64  # step beginnings kept in memory (the callback sizes its input-free run from them)
)


_ROW = '{"step":%d,"epoch":%d,"begin_ns":%d,"end_ns":%d,"traced":%s'
ROW_FORMATS = {
    True: _ROW + ',"batch":%d}\n',
    False: _ROW + "}\n",
}  # with and without Keras's batch index


def step_lines(rows: list[tuple]) -> str:
    """steps.jsonl lines for rows ``(step, epoch, begin_ns, end_ns, "true"|"false", batch|None)``,
    as ``json`` writes them (compact; ``%d`` takes NumPy integers too)."""
    return "".join(
        ROW_FORMATS[row[5] is not None] % (row if row[5] is not None else row[:5]) for row in rows
    )


def block_line(step: int, epoch: int, bounds_ns: list[int], batches: list) -> str:
    """The steps.jsonl line of a block: steps ``step, step + 1, ...``, step k from ``bounds_ns[k]``
    to ``bounds_ns[k + 1]``, untraced, with Keras's batch index of each where every step has one."""
    bounds = ",".join(map(str, bounds_ns))
    if None in batches:
        if batches.count(None) == len(batches):  # a loop that gives none (PyTorch, custom loops)
            return f'{{"step":{step:d},"epoch":{epoch:d},"bounds_ns":[{bounds}]}}\n'
        indices = ",".join("null" if b is None else str(b) for b in batches)
    else:
        indices = ",".join(map(str, batches))
    return f'{{"step":{step:d},"epoch":{epoch:d},"bounds_ns":[{bounds}],"batch":[{indices}]}}\n'


def _run_began_ns(run_dir: Path) -> int:
    """Where the run's wall begins for the window's share: the launcher's start (run.json, under
    ``profile``) or this process's, whichever is earlier."""
    began = trace_budget.process_started_ns()
    try:
        launched = run_json.read(run_dir).started_ns
    except Exception:
        return began
    return min(began, launched) if launched else began


@contextlib.contextmanager
def standard_descriptors_held():
    """While the record's files open, a closed stdin, stdout or stderr (0-2) is held by /dev/null,
    so that no file of ours takes its number: a script that closed its stdout had its later
    ``print`` written into steps.jsonl (the step file got descriptor 1), and ``check`` then failed a
    run that exited 0. Released after: the script's descriptors are as it left them."""
    held = []
    try:
        for fd in (0, 1, 2):
            if not _is_open(fd):
                held.append(os.open(os.devnull, os.O_RDWR))  # the lowest free number: this one
        yield
    finally:
        for fd in held:
            os.close(fd)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


class _StepFile:
    """steps.jsonl, appended a flush at a time."""

    def __init__(self, path: Path):
        self._file = open(path, "a")  # noqa: SIM115 (closed in close())

    def write(self, text: str) -> None:
        if not self._file.closed:
            if text:
                self._file.write(text)
            self._file.flush()

    def close(self, text: str) -> None:
        if not self._file.closed:
            close_quietly(self._file, lambda: self.write(text))


class StepRecorder:
    def __init__(
        self,
        run_dir: Path,
        window: TraceWindow | None,
        warmup_steps: int = WARMUP_STEPS,
        trace_steps: int = TRACE_STEPS,
    ):
        self.run_dir = Path(run_dir)
        with standard_descriptors_held():
            self._steps = _StepFile(self.run_dir / STEPS)
            self._marks = JsonlWriter(self.run_dir / MARKS)
        self._lines: list[
            str
        ] = []  # steps ended since the last flush, as lines, in the order they ran
        self._rows: list[
            tuple
        ] = []  # ... the last of them as rows (the window's, or ended by ``end``)
        self._window = window
        self.traced_whole = False
        self._window_due = window is not None  # a step of the window is still to come
        self._trace_first = warmup_steps
        self._trace_last = warmup_steps + trace_steps - 1
        self._trace_steps = trace_steps
        # the window's bounds in time (collect/trace_budget.py), and its first traced step's begin
        self._budget = (
            trace_budget.from_env(run_began_ns=_run_began_ns(run_dir)) if window else None
        )
        self._traced_from_ns: int | None = None
        self._epoch = 0
        # The open step: a block's last (``_in_block``) or a row of its own (``_step``,
        # ``_begin_ns``...).
        self._open = False
        self._in_block = False
        self._step = -1
        self._begin_ns = 0
        self._batch: int | None = None
        self._traced = False
        # The block: its first step and epoch, its steps' begin times and batch indices.
        self._block_step = self._block_epoch = 0
        self._bounds: list[int] = []
        self._batches: list = []
        self._recent = collections.deque(maxlen=RECENT_STEPS)  # beginnings before the block's
        self.on_error: Callable[[str], None] | None = None  # see _begin
        self._set_flushed(time.time_ns())
        update_json(self.run_dir, TRAINING_JSON, warmup_steps=warmup_steps, trace_steps=trace_steps)

    # -- the step hook ---------------------------------------------------------------------------
    def begin(self, batch: int | None = None, logs=None) -> None:
        """A step starts; the step before it, if still open, ends here.

        ``batch``: the index of its first batch in the epoch, where the loop
        says (Keras: with ``steps_per_execution=K`` one step is K batches).
        ``logs`` is ignored: it is there so that this can be a Keras
        callback's ``on_train_batch_begin`` itself (keras_callback.py).

        Callers may mark only beginnings: the Keras callback must not
        implement ``on_train_batch_end``, because Keras then turns each
        step's logs into Python numbers, a device sync that would slow an
        asynchronous (JAX) training loop.
        """
        now = time.time_ns()
        if (
            self._in_block and self._flushed_ns <= now < self._due_ns
        ):  # the usual step: nothing else to do
            self._bounds.append(now)
            self._batches.append(batch)
            return
        self._begin(now, batch)

    def _begin(self, now: int, batch: int | None) -> None:
        """``begin`` for every step but a block's usual one (which cannot fail: a clock read and two
        appends). With ``on_error`` set, a failure here (a write, the profiler) goes to it instead
        of into the training loop."""
        try:
            self._begin_step(now, batch)
        except Exception as exc:
            if self.on_error is None:
                raise
            try:
                self.on_error(f"step begin: {type(exc).__name__}: {exc}")
            except Exception:
                pass  # reporting failed too: the loop still must not see it

    def _begin_step(self, now: int, batch: int | None) -> None:
        if self._open and not self._in_block:
            self._finish(now)
        if self._window_due:
            self._close_block(now)
            self._step = self.step + 1
            self._batch = batch
            now = self._window_begin(now)
            self._open, self._begin_ns = True, now
            self._recent.append(now)
        elif self._in_block:
            self._bounds.append(now)
            self._batches.append(batch)
        else:
            self._block_step, self._block_epoch = self.step + 1, self._epoch
            self._bounds.append(now)
            self._batches.append(batch)
            self._open = self._in_block = True
        self._flush_if_due(now)

    def end(self, at_ns: int | None = None) -> None:
        """The current step ends (custom loops know; Keras steps end at the next begin); ``at_ns``:
        where it ended, if earlier than now (JAX: the script's work after its last step)."""
        if self._open:
            now = time.time_ns() if at_ns is None else at_ns
            if self._in_block:
                self._close_block(now)
            else:
                self._finish(now)

    def drop_open(self) -> None:
        """The open step did not happen (PyTorch: the last ``optimizer.step()`` opens a step no
        update ends)."""
        self._close_block(None)
        self._open = False

    # -- state -----------------------------------------------------------------------------------
    @property
    def step(self) -> int:
        """The number of the step begun last (-1 before the first)."""
        return self._block_step + len(self._bounds) - 1 if self._in_block else self._step

    @property
    def epoch(self) -> int:
        return self._epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        """Steps ended from now on belong to epoch ``value`` (the open one too)."""
        if value != self._epoch and self._in_block:
            self._split_block()
            self._block_epoch = value
        self._epoch = value

    @property
    def recent_begin_ns(self) -> list[int]:
        """The last RECENT_STEPS steps' beginnings."""
        return [*self._recent, *self._bounds][-RECENT_STEPS:]

    # -- the block -------------------------------------------------------------------------------
    def _split_block(self) -> None:
        """The block's ended steps become a line; its open step begins the block."""
        bounds, batches = self._bounds, self._batches
        if len(bounds) > 1:
            self._rows_to_lines()  # rows that ended before the block began come first
            self._lines.append(
                block_line(self._block_step, self._block_epoch, bounds, batches[:-1])
            )
            self._recent.extend(bounds[:-1])
            self._block_step += len(bounds) - 1
            del bounds[:-1], batches[:-1]

    def _close_block(self, end_ns: int | None) -> None:
        """The block's open step ends at ``end_ns`` (None: it did not happen); the block becomes a
        line.

        A block of one step ended by ``end`` becomes a row: custom loops end every step themselves.
        """
        if not self._in_block:
            return
        if end_ns is not None and len(self._bounds) == 1:
            self._rows.append(
                (
                    self._block_step,
                    self._block_epoch,
                    self._bounds[0],
                    end_ns,
                    "false",
                    self._batches[0],
                )
            )
            self._recent.append(self._bounds[0])
            self._block_step += 1
        else:
            if end_ns is not None:  # the bound that ends the last step, as a next begin would
                self._bounds.append(end_ns)
                self._batches.append(None)
            self._split_block()
        self._step = self._block_step - 1
        self._bounds.clear()
        self._batches.clear()
        self._open = self._in_block = False

    # -- the trace window and rows ---------------------------------------------------------------
    def _window_begin(self, now: int) -> int:
        """The trace window's part of a step's beginning; returns the step's begin time."""
        window = self._window
        late = self._step == self._trace_first
        if late:
            self.mark("trace_start")
            window.start()
            self.mark("trace_started")
            update_json(
                self.run_dir,
                TRAINING_JSON,
                trace={
                    "logdir": TRACE_DIR,
                    "first_step": self._step,
                    "backend": window.backend,
                    "error": window.error,
                },
            )
        self._traced = bool(window.active)
        if self._traced:
            window.step_begin(self._step)
            late = True
            if self._traced_from_ns is None:
                self._traced_from_ns = time.time_ns()
        elif self._step >= self._trace_first:  # the window did not start: no step of it is to come
            self._window_due = False
            window.finish()
        return time.time_ns() if late else now  # the window's own work belongs to neither step

    def _finish(self, end_ns: int) -> None:
        self._open = False
        if self._traced:
            self._window.step_end()
        self._rows.append(
            (
                self._step,
                self._epoch,
                self._begin_ns,
                end_ns,
                "true" if self._traced else "false",
                self._batch,
            )
        )
        self._flush_if_due(end_ns)
        if self._traced:
            if self._step >= self._trace_last:
                ended_by = trace_budget.PLAN
            else:  # the next step, as long as this one, would take the window past a bound
                ended_by = self._budget.over(
                    end_ns - self._traced_from_ns, end_ns - self._begin_ns, end_ns
                )
            if ended_by:
                self.stop_trace(ended_by)
                self.traced_whole = True  # the window is over: a later fit does not trace again

    def stop_trace(self, ended_by: str = trace_budget.TRAINING_ENDED) -> None:
        """The window stops (``ended_by``: its plan, a bound of trace_budget, or the training's end:
        the run ended, capture failed, a CUDA graph capture began)."""
        window = self._window
        self._window_due = False
        if window is None:
            return
        window.finish()
        if window.active:
            try:
                self.mark("trace_stop")
            # a mark that cannot be written (a full disk) must not leave the profiler tracing
            finally:
                window.stop()
            self.mark("trace_stopped")
            update_json(
                self.run_dir,
                TRAINING_JSON,
                trace={
                    "logdir": TRACE_DIR,
                    "first_step": self._trace_first,
                    "last_step": self._step,
                    "backend": window.backend,
                    "error": window.error,
                    "planned_steps": self._trace_steps,
                    "ended_by": ended_by,
                    **self._budget.facts(),
                },
            )

    # -- writing ---------------------------------------------------------------------------------
    def mark(self, name: str, **facts) -> None:
        """A moment of the run (``fit_begin``, ``epoch_end``...), for the accounting."""
        # a pause between steps (epoch end, validation) leaves no ended step in memory
        self.flush_steps()
        self._marks.write({"mark": name, "t_ns": time.time_ns(), **facts})

    def _text(self) -> str:
        """The lines of the steps ended since the last flush, in the order they ran."""
        self._rows_to_lines()
        if self._in_block:
            self._split_block()
        text = "".join(self._lines)
        self._lines = []
        return text

    def _rows_to_lines(self) -> None:
        if self._rows:
            self._lines.append(step_lines(self._rows))
            self._rows = []

    def flush_steps(self) -> None:
        """The steps ended so far onto the disk."""
        self._steps.write(self._text())
        self._set_flushed(time.time_ns())

    def _flush_if_due(self, now: int) -> None:
        """Flush once STEP_FLUSH_S has passed since the last flush (or the clock was set back before
        it). ``begin``'s usual step makes the same test inline."""
        if not self._flushed_ns <= now < self._due_ns:
            self.flush_steps()

    def _set_flushed(self, now: int) -> None:
        self._flushed_ns, self._due_ns = now, now + _STEP_FLUSH_NS

    def delay_flush(self, ns: int) -> None:
        """The next flush comes ``ns`` later (bench/overhead/run.py: time the recorder was off)."""
        self._set_flushed(self._flushed_ns + ns)

    def close(self) -> None:
        self.end()
        self.stop_trace()
        self._steps.close(self._text())
        self._marks.close()
