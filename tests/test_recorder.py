"""The step recorder's record, whatever the loop does: every step once, in order, with the times,
epochs, batch indices and trace flags it had. Steps are kept in blocks (one line of begin times) or
rows (the trace window's, steps a loop ends itself); the reader expands both the same way."""

import random
import time

from scaldiag.collect.frameworks.tracing import TraceWindow
from scaldiag.collect.launcher import step_count
from scaldiag.collect.recorder import StepRecorder
from scaldiag.record import validate
from scaldiag.record.reader import read_steps
from scaldiag.record.rundir import read_jsonl


class _Window(TraceWindow):
    """A trace window with no profiler behind it that can start (the recorder's side of tracing)."""

    backend = "test"

    def __init__(self, logdir):
        super().__init__(logdir)
        self.steps: list[int] = []

    def _start(self):
        pass

    def _stop(self):
        pass

    def _begin_marker(self, step):
        self.steps.append(step)


def _drive(tmp_path, seed: int, window: bool):
    """A random loop: Keras-like (begins only), custom (begin/end), epochs, marks, early flushes.
    Returns what it did: per step, the clock before and after its begin, its batch, epoch, whether
    the loop ended it, and when."""
    rng = random.Random(seed)
    recorder = StepRecorder(
        tmp_path, _Window(tmp_path / "trace") if window else None, warmup_steps=3, trace_steps=5
    )
    done: list[dict] = []
    epoch, open_step = 0, None
    for _ in range(rng.randint(1, 400)):
        op = rng.random()
        if op < 0.05:  # an epoch boundary as Keras makes it: the step ends, a mark, the next epoch
            recorder.end()
            if open_step is not None:
                open_step.update(ended=True, end_after=time.time_ns())
                open_step = None
            recorder.mark("epoch_end", epoch=epoch)
            epoch += 1
            recorder.epoch = epoch
        elif op < 0.08:
            recorder.delay_flush(-(10**12))  # the flush is due: the next step writes
        elif op < 0.25:  # a custom loop ends its step itself
            before = time.time_ns()
            recorder.end()
            if open_step is not None:
                open_step.update(ended=True, end_before=before, end_after=time.time_ns())
                open_step = None
        else:
            batch = rng.choice([None, rng.randint(0, 9)]) if seed % 3 else len(done)
            before = time.time_ns()
            recorder.begin(batch)
            after = time.time_ns()
            if open_step is not None:
                open_step["next_begin"] = (before, after)
            open_step = {
                "before": before,
                "after": after,
                "batch": batch,
                "epoch": epoch,
                "ended": False,
            }
            done.append(open_step)
    recorder.close()
    if open_step is not None:
        open_step["ended"] = True  # close() ends it
    return recorder, done


def test_every_step_is_recorded_once_with_its_times_epoch_batch_and_trace_flag(tmp_path):
    for seed in range(60):
        run_dir = tmp_path / str(seed)
        run_dir.mkdir()
        recorder, done = _drive(run_dir, seed, window=seed % 2 == 0)
        rows = read_steps(run_dir / "steps.jsonl")
        assert [r["step"] for r in rows] == list(range(len(done))), seed
        assert step_count((run_dir / "steps.jsonl").read_bytes()) == len(done)
        for r, d in zip(rows, done):
            assert d["before"] <= r["begin_ns"] <= d["after"], seed
            assert r["begin_ns"] <= r["end_ns"], seed
            assert r["epoch"] == d["epoch"], seed
            assert r.get("batch") == d["batch"], seed
            if (
                "next_begin" in d and not d["ended"]
            ):  # ended by the next step's begin: at its clock read
                assert d["next_begin"][0] <= r["end_ns"] <= d["next_begin"][1], seed
        traced = [r["step"] for r in rows if r["traced"]]
        assert traced == ([s for s in range(3, 8) if s < len(done)] if seed % 2 == 0 else []), seed
        if seed % 2 == 0:
            assert recorder._window.steps == traced
        assert all(a["end_ns"] <= b["begin_ns"] for a, b in zip(rows, rows[1:])), seed


def test_begin_only_steps_go_to_disk_as_blocks_and_ended_steps_as_rows(tmp_path):
    recorder = StepRecorder(tmp_path, None, warmup_steps=0, trace_steps=0)
    for k in range(50):
        recorder.begin(k)
    recorder.end()  # Keras at an epoch's end
    for _ in range(3):  # a custom loop
        recorder.begin()
        recorder.end()
    recorder.close()
    raw = read_jsonl(tmp_path / "steps.jsonl")
    assert len(raw) == 4 and len(raw[0]["bounds_ns"]) == 51 and raw[0]["batch"] == list(range(50))
    assert all("begin_ns" in r for r in raw[1:])
    assert len(read_steps(tmp_path / "steps.jsonl")) == 53


def test_a_damaged_block_is_skipped_whole_and_counted():
    good = {"step": 5, "epoch": 1, "bounds_ns": [10, 20, 35], "batch": [0, 1]}
    rows, damaged = validate.expand_step_blocks(
        [
            good,
            {"step": 7, "bounds_ns": [40, 30]},  # time going back
            {"step": 7, "bounds_ns": [40]},  # no step
            {"step": 7, "bounds_ns": [40, 50], "batch": [0, 1]},  # a batch too many
            {"step": "7", "bounds_ns": [40, 50]},
            {"step": 7, "bounds_ns": [40, True]},
            {"step": 9, "begin_ns": 60, "end_ns": 70},
        ]
    )
    assert damaged == 5
    assert rows == [
        {"step": 5, "epoch": 1, "begin_ns": 10, "end_ns": 20, "traced": False, "batch": 0},
        {"step": 6, "epoch": 1, "begin_ns": 20, "end_ns": 35, "traced": False, "batch": 1},
        {"step": 9, "begin_ns": 60, "end_ns": 70},
    ]


def test_the_last_pytorch_step_that_no_update_ends_is_dropped(tmp_path):
    recorder = StepRecorder(tmp_path, None, warmup_steps=0, trace_steps=0)
    for _ in range(10):
        recorder.begin()
    recorder.drop_open()
    recorder.close()
    rows = read_steps(tmp_path / "steps.jsonl")
    assert [r["step"] for r in rows] == list(range(9))
    assert len(recorder.recent_begin_ns) == 9
