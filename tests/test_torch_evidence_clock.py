"""The device clock's event pool and reader (torch_device_clock.DeviceClock), with a fake CUDA
stream.

The real events need a GPU (``git show 6a74f68:bench/gpu/check_torch_device_clock.py`` ran them
there: docs/pytorch.md); the pool's logic is the same for any event with ``record``, ``query``,
``elapsed_time`` and ``synchronize``. The fake device below runs the work queued on its stream in
order: an event completes once the device has passed the point where it was recorded.
"""

import json

import pytest

from scaldiag.collect.frameworks.torch_device_clock import DeviceClock
from scaldiag.record.rundir import DEVICE_STEPS, JsonlWriter


class FakeStream:
    """The device's timeline: work queued (``queued_ms``) and how far the device has got
    (``done_ms``)."""

    def __init__(self):
        self.queued_ms = 0.0
        self.done_ms = 0.0
        self.syncs = 0
        self.elapsed_calls = 0

    def run(self, ms: float) -> None:
        """The host queues ``ms`` of device work."""
        self.queued_ms += ms

    def wait(self, seconds: float) -> None:
        """The clock's end polls and sleeps: the device catches up meanwhile."""
        self.syncs += 1
        self.done_ms = self.queued_ms


class FakeEvent:
    made = 0

    def __init__(self, stream: FakeStream):
        FakeEvent.made += 1
        self.stream, self.at = stream, None

    def record(self, stream):
        assert stream is self.stream
        self.at = stream.queued_ms

    def query(self) -> bool:
        return self.at is not None and self.at <= self.stream.done_ms

    def elapsed_time(self, end) -> float:
        self.stream.elapsed_calls += 1
        if not (self.query() and end.query()):  # as torch.cuda.Event refuses: it never waits
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        return end.at - self.at

    def synchronize(self) -> None:
        raise AssertionError("the clock never blocks on an event")


def make_clock(rows, first_step=1, **sizes):
    stream = FakeStream()
    FakeEvent.made = 0
    clock = DeviceClock(lambda: FakeEvent(stream), lambda: stream, rows.append, first_step, **sizes)
    return clock, stream


def device_times(rows):
    """{step: ms} from the rows, checking that no step is written twice."""
    times = {}
    for row in rows:
        for i, ms in enumerate(row["device_ms"]):
            assert row["step"] + i not in times
            times[row["step"] + i] = ms
    return times


def test_each_step_is_the_device_time_between_its_boundaries_read_only_once_passed():
    rows = []
    clock, stream = make_clock(rows, first_step=1, pool=8, read_every=4)
    work = [2.0, 3.0, 5.0, 7.0, 11.0, 13.0]  # step 1 + i queues work[i]
    for ms in work:
        clock.tick()  # the boundary that begins the step
        stream.run(ms)
    assert (
        rows == [] and stream.done_ms == 0
    )  # nothing passed yet: nothing read, nothing waited for
    stream.done_ms = (
        2.0 + 3.0 + 5.0
    )  # the device has passed the boundaries of steps 1-4: steps 1-3 are readable
    clock.read()
    assert rows == [{"step": 1, "device_ms": [2.0, 3.0, 5.0]}]
    clock.read()
    assert len(rows) == 1  # nothing new
    clock.tick()  # the boundary that begins step 7 ends step 6
    clock.finish(sleep=stream.wait)  # training over: a wait, for the last boundary
    assert stream.syncs == 1
    assert device_times(rows) == {1 + i: ms for i, ms in enumerate(work)}
    assert rows[-1]["step"] == 4


def test_the_pool_is_reused_when_the_device_keeps_up():
    rows = []
    clock, stream = make_clock(rows, first_step=0, pool=8, read_every=4)
    for step in range(1000):
        clock.tick()
        stream.run(1.0 + step % 3)
        stream.done_ms = max(
            0.0, stream.queued_ms - 2.5
        )  # the device one or two steps behind the host
    clock.finish(sleep=stream.wait)
    assert FakeEvent.made == 8  # no event made after the start
    assert device_times(rows) == {
        step: 1.0 + step % 3 for step in range(999)
    }  # the last boundary ends 998
    assert len(rows) >= 1000 // 4 - 1  # read as training went, a row every 4 boundaries
    assert stream.elapsed_calls == 999  # never asked before the device had passed both boundaries


def test_the_pool_grows_when_the_device_falls_a_pool_behind_and_loses_nothing():
    rows = []
    clock, stream = make_clock(rows, first_step=5, pool=8, read_every=4)
    for step in range(100):  # the device passes nothing until the end: every boundary stays unread
        clock.tick()
        stream.run(0.5 * (step % 7 + 1))
    assert rows == [] and FakeEvent.made >= 100
    clock.finish(sleep=stream.wait)
    assert device_times(rows) == {5 + step: 0.5 * (step % 7 + 1) for step in range(99)}


def test_a_device_too_far_behind_stops_the_clock():
    clock, stream = make_clock([], pool=8, read_every=4, max_events=16)
    with pytest.raises(RuntimeError, match="steps behind the host"):
        for _ in range(100):
            clock.tick()
            stream.run(1.0)


def test_rows_are_the_contracts_lines(tmp_path):
    """device_steps.jsonl as the capture writes it (JsonlWriter, one line a read)."""
    writer = JsonlWriter(tmp_path / DEVICE_STEPS)
    stream = FakeStream()
    clock = DeviceClock(
        lambda: FakeEvent(stream), lambda: stream, writer.write, 1, pool=4, read_every=2
    )
    for ms in (1.5, 2.5, 4.0):
        clock.tick()
        stream.run(ms)
    clock.tick()
    clock.finish(sleep=stream.wait)
    writer.close()
    lines = (tmp_path / DEVICE_STEPS).read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"step": 1, "device_ms": [1.5, 2.5, 4.0]}]


def test_a_boundary_on_another_stream_that_completes_late_holds_the_read_back_without_losing_steps():  # noqa: E501
    rows = []
    clock, stream = make_clock(rows, first_step=0, pool=8, read_every=8)
    events = []
    for _ in range(6):
        events.append(clock._ring[clock._w])
        clock.tick()
        stream.run(1.0)
    stream.done_ms = 5.0  # the device has passed every boundary ...
    events[2].at = 99.0  # ... but the one that begins step 2 was on a stream still busy
    clock.read()
    assert rows == [{"step": 0, "device_ms": [1.0]}]  # step 1 ends at that boundary: it waits too
    events[2].at = 2.0
    clock.read()
    assert device_times(rows) == {step: 1.0 for step in range(5)}


def test_a_last_boundary_the_device_never_passes_ends_the_wait_with_what_was_read():
    """An event CUDA never completes (recorded while a stream was captured into a graph) must not
    hang the script's exit: the end polls for at most its wait and says why it stopped."""
    rows = []
    clock, stream = make_clock(rows, first_step=1, pool=8, read_every=4)
    for ms in (2.0, 3.0, 5.0):
        clock.tick()
        stream.run(ms)
    clock._ring[clock._w - 1].at = None  # the last boundary's event: recorded, never completes
    stream.done_ms = stream.queued_ms
    with pytest.raises(RuntimeError, match="had not passed the last step's boundary"):
        clock.finish(wait_s=0.05)
    assert device_times(rows) == {1: 2.0}  # the one step both of whose boundaries passed
