"""Device-side step times for PyTorch on CUDA: an event on the stream at each step boundary.

CUDA runs asynchronously: ``optimizer.step()`` returns as soon as its kernels are queued, so where
the host runs ahead of the device the host's step intervals measure how fast work is queued, and the
device's wait surfaces at the script's next synchronisation (a ``.item()``, an epoch's end). At each
step boundary (where the capture calls the recorder's ``begin``) the clock records one
``torch.cuda.Event(enable_timing=True)`` on the current stream of the model's device (looked up
every READ_EVERY boundaries), and never synchronises while training runs: the events are read later,
only once ``query()`` says the device has passed them, and the time between two consecutive
boundaries is ``start.elapsed_time(end)``.

Written to ``RUN_DIR/device_steps.jsonl``, one row per read::

    {"step": S, "device_ms": [d0, d1, ...]}

``d_i`` is the device time from the boundary that begins step ``S + i`` to
the one that begins step ``S + i + 1`` (the numbering of ``steps.jsonl``).
Reads happen every READ_EVERY boundaries, on the training thread, and at
the end (``finish``), which waits once for the last boundary: training is
over by then.

Cost: events come from a pool made at the start and reused as a ring (an
event whose step has been read is free again), so a step pays one
``record()`` and a few attribute updates, no allocation of ours; a read
costs an ``elapsed_time`` a step and a few ``query`` calls. The pool
doubles, rarely, when the device is more than its size behind the host (the
launch queue bounds that), up to MAX_EVENTS; beyond that the clock stops and
says why. The pool logic is free of torch (events and the current stream are
given), so it is tested with a fake event; ``cuda_clock`` builds the real one.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path

from scaldiag.record.rundir import DEVICE_STEPS, JsonlWriter

DEVICE_CLOCK = (  # training.json's device_clock
    "cuda events on the current stream at each optimizer.step boundary"
)
# events made at the start: the device may be this many boundaries behind before the pool grows
POOL_EVENTS = 256
READ_EVERY = 64  # boundaries between reads (a read costs a query and an elapsed_time a step)
# the end's wait for the device's last boundary: the queue holds a few steps, rarely seconds
FINISH_WAIT_S = 30.0
FINISH_POLL_S = 0.001
MAX_EVENTS = 1 << 16  # the pool stops growing here: a device that far behind is not being timed
# rows reach the disk within a second (JsonlWriter's max_delay_s) and at the end, not a write a
# read
WRITE_EVERY_ROWS = 1 << 20


class DeviceClock:
    """A ring of timing events, one recorded at each step boundary, read once the device has passed
    them.

    ``new_event()`` makes an event with ``record(stream)``, ``query()``, ``elapsed_time(other)``
    (ms) and ``synchronize()``, as ``torch.cuda.Event(enable_timing=True)``; ``stream()`` gives the
    stream to record on (the model device's current stream); ``write(row)`` takes each row of
    device_steps.jsonl; ``first_step``: the step the first boundary begins.
    """

    def __init__(
        self,
        new_event: Callable,
        stream: Callable,
        write: Callable[[dict], None],
        first_step: int,
        pool: int = POOL_EVENTS,
        read_every: int = READ_EVERY,
        max_events: int = MAX_EVENTS,
    ):
        if not 0 < read_every <= pool:
            raise ValueError("read_every must be between 1 and the pool's size")
        self._new_event = new_event
        self._stream = stream
        self._current = stream()  # the stream recorded on, looked up again at each read (see tick)
        self._write = write
        self._ring = [new_event() for _ in range(pool)]
        self._size = pool
        self._max = max_events
        self._w = 0  # the slot the next boundary takes
        self._r = 0  # the oldest boundary not yet read: it begins step ``_head_step``
        self._pending = 0  # boundaries recorded and not yet read (the slots from _r on)
        self._head_step = first_step
        self._read_every = read_every
        self._countdown = read_every

    # -- at each step boundary
    # --------------------------------------------------------------------------
    def tick(self) -> None:
        """A step begins: one event on the stream. Raises what ``record`` raises (the caller stops
        the clock).

        Between reads at most ``read_every`` boundaries arrive, and a read leaves room for them
        (``_grow``), so a slot is never taken while its boundary is unread. The current stream is
        looked up at each read, not at each step: ``torch.cuda.current_stream`` costs more than the
        ``record`` itself (5.6 against 3.6 us on the H200 machine,
        bench/results/gpu_h200/torch/torch.md#device_clock_check_1txt).
        """
        w = self._w
        self._ring[w].record(self._current)
        w += 1
        self._w = 0 if w == self._size else w
        self._pending += 1
        self._countdown -= 1
        if self._countdown == 0:
            self._countdown = self._read_every
            self.read()
            self._current = self._stream()
            if self._pending > self._size - self._read_every:
                self._grow()

    # -- reading
    # ------------------------------------------------------------------------------------------
    def read(self) -> None:
        """Every step whose two boundaries the device has passed, as one row; never waits for the
        device.

        Work on a stream completes in order, so the device's progress is found by bisection (a few
        ``query`` calls a read, not one a step); ``elapsed_time`` checks both events itself, and a
        pair it refuses (boundaries on different streams, completing out of order) ends the read
        there."""
        ring, size, r = self._ring, self._size, self._r
        passed, ahead = 0, self._pending - 1  # boundaries r + passed done; r + ahead not known done
        if ahead <= 0:
            return
        if ring[(r + ahead) % size].query():
            passed = ahead
        else:
            while ahead - passed > 1:
                mid = (passed + ahead) // 2
                if ring[(r + mid) % size].query():
                    passed = mid
                else:
                    ahead = mid
        times = []
        try:
            for k in range(passed):
                times.append(ring[(r + k) % size].elapsed_time(ring[(r + k + 1) % size]))
        except RuntimeError:
            pass
        if times:
            self._write({"step": self._head_step, "device_ms": times})
            self._r = (r + len(times)) % size
            self._pending -= len(times)
            self._head_step += len(times)

    def finish(self, wait_s: float = FINISH_WAIT_S, sleep=time.sleep) -> None:
        """Training is over: wait for the last boundary, at most ``wait_s``, then read what the
        device has passed. Polled, never ``synchronize()``: an event CUDA never completes (one
        recorded while a stream was being captured into a graph) must not hang the script's exit.
        """
        if self._pending:
            last = self._ring[self._w - 1]  # slot -1 is the ring's last, the one before slot 0
            deadline = time.monotonic() + wait_s
            while not last.query():
                if time.monotonic() > deadline:
                    self.read()
                    raise RuntimeError(
                        f"the device had not passed the last step's boundary {wait_s:.0f} s after"
                        f" training ended: {self._pending} step(s) left unread"
                    )
                sleep(FINISH_POLL_S)
        self.read()

    def _grow(self) -> None:
        """The device is nearly a pool behind: double the pool (the unread boundaries first, in
        order)."""
        if self._size * 2 > self._max:
            raise RuntimeError(
                f"the device is more than {self._size - self._read_every} steps behind the host"
            )
        ring = self._ring[self._r :] + self._ring[: self._r]
        self._ring = ring + [self._new_event() for _ in range(self._size)]
        self._r, self._w = 0, self._pending
        self._size *= 2


def model_device(optimizer):
    """The device of the optimizer's first parameter (the model's), or None."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            return param.device
    return None


def cuda_clock(run_dir: Path, optimizer, first_step: int) -> tuple[DeviceClock, JsonlWriter] | None:
    """The real clock, where CUDA is available and the model is on a CUDA device; else None (the
    host's step times are then the truth)."""
    import torch

    device = model_device(optimizer)
    if device is None or device.type != "cuda" or not torch.cuda.is_available():
        return None
    writer = JsonlWriter(
        Path(run_dir) / DEVICE_STEPS, flush_every=WRITE_EVERY_ROWS, max_delay_s=1.0
    )
    clock = DeviceClock(
        functools.partial(torch.cuda.Event, enable_timing=True),
        functools.partial(torch.cuda.current_stream, device),
        writer.write,
        first_step,
    )
    return clock, writer
