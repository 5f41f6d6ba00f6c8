"""Faults inside the capture itself (issue 10's fault matrix, the rows below the launcher):
NVML failing mid-run, the profiler failing to start or to stop. The run goes on; the record says
what was lost. (Signals, exits and unwritable output are in test_faults.py.)"""

import os
import time
from pathlib import Path

from fake_nvml import FakeNvml

from scaldiag.collect.frameworks.tracing import TraceWindow
from scaldiag.collect.recorder import StepRecorder
from scaldiag.collect.samplers import Samplers
from scaldiag.pipeline import diagnose_run
from scaldiag.record.reader import read_steps
from scaldiag.record.rundir import GPU_SAMPLES, HOST_SAMPLES, read_json, read_jsonl, write_json


class FailingNvml(FakeNvml):
    """A GPU that falls off the bus after ``healthy_calls`` reads: every device call raises."""

    def __init__(self, healthy_calls: int, **kwargs):
        super().__init__(**kwargs)
        self.healthy_calls = healthy_calls

    def __getattribute__(self, name):
        attr = super().__getattribute__(name)
        if name.startswith("nvmlDevice") and callable(attr) and name != "nvmlDeviceGetCount":

            def guarded(*args, **kwargs):
                self.calls += 1
                if self.calls > self.healthy_calls:
                    raise RuntimeError("GPU has fallen off the bus")
                return attr(*args, **kwargs)

            return guarded
        return attr


def test_nvml_failing_mid_run_keeps_the_earlier_samples_and_says_why(tmp_path):
    nvml = FailingNvml(healthy_calls=80)
    samplers = Samplers(tmp_path, os.getpid(), nvml=nvml, env={})
    samplers.start()
    # Until the GPU has failed and both samplers ticked a few times more: counted, not timed (a
    # loaded machine ticks later, not differently). The deadline only ends a hang.
    deadline = time.monotonic() + 60
    while nvml.calls <= nvml.healthy_calls and time.monotonic() < deadline:
        time.sleep(0.05)
    failed_at = samplers.nvml.sampler.ticks
    while (
        samplers.nvml.sampler.ticks < failed_at + 3 or samplers.host.sampler.ticks <= 5
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    stats = samplers.stop()  # no exception reaches the caller: the training's thread
    gpu_rows = read_jsonl(tmp_path / GPU_SAMPLES)
    with_clock = [r for r in gpu_rows if "sm_clock_mhz" in r]
    assert with_clock, "the samples taken before the failure are kept"
    assert with_clock[-1]["t_ns"] < gpu_rows[-1]["t_ns"], (
        "the failure is visible: later rows lack the reads"
    )
    assert any("fallen off the bus" in m for m in samplers.missing)
    assert stats["host"]["ticks"] > 5 and read_jsonl(
        tmp_path / HOST_SAMPLES
    )  # host sampling went on


class _BrokenWindow(TraceWindow):
    backend = "broken"

    def __init__(self, logdir, fail_on: str):
        super().__init__(logdir)
        self.fail_on = fail_on

    def _start(self):
        if self.fail_on == "start":
            raise RuntimeError("profiler session already active")

    def _stop(self):
        if self.fail_on == "stop":
            raise OSError(28, "No space left on device")


def _record_steps(run_dir, window, steps=14):
    write_json(
        run_dir, "run.json", {"status": "finished", "started_ns": time.time_ns(), "missing": []}
    )
    recorder = StepRecorder(run_dir, window, warmup_steps=3, trace_steps=5)
    for _ in range(steps):
        recorder.begin()
        time.sleep(0.002)
    recorder.close()
    return recorder


def test_the_profiler_failing_to_start_costs_the_trace_not_the_steps(tmp_path):
    window = _BrokenWindow(tmp_path / "trace", "start")
    _record_steps(tmp_path, window)
    assert len(read_steps(tmp_path / "steps.jsonl")) == 14
    assert "already active" in read_json(tmp_path, "training.json")["trace"]["error"]
    a = diagnose_run(tmp_path).analysis
    assert a.steps.recorded == 14 and a.trace is None
    assert any(m.startswith("trace:") for m in a.missing)


def test_the_profiler_failing_to_stop_is_recorded_and_the_steps_go_on(tmp_path):
    window = _BrokenWindow(tmp_path / "trace", "stop")
    _record_steps(tmp_path, window)
    assert len(read_steps(tmp_path / "steps.jsonl")) == 14
    assert "No space left" in read_json(tmp_path, "training.json")["trace"]["error"]
    assert not window.active


def test_a_long_run_shows_signs_of_life_on_stderr(tmp_path, capfd):
    """The launcher prints the steps recorded so far while the script runs (profile: every 30 s;
    --quiet: never)."""
    import textwrap

    from scaldiag.collect.launcher import launch

    script = tmp_path / "loop.py"
    script.write_text(
        textwrap.dedent("""
        import time
        from scaldiag.loop import capture
        with capture(global_batch=8, trace_steps=0) as run:
            for _ in range(60):
                with run.step():
                    time.sleep(0.03)
    """)
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {"PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    assert launch(run_dir, str(script), [], env=env, progress_every_s=0.5) == 0
    lines = [line for line in capfd.readouterr().err.splitlines() if "steps recorded" in line]
    assert len(lines) >= 2
    counts = [int(line.split()[1].replace(",", "")) for line in lines]
    assert counts == sorted(counts) and counts[-1] > 0


def test_steps_reach_the_disk_while_training_runs_and_tile_the_time(tmp_path):
    """A run killed mid-epoch keeps its steps up to STEP_FLUSH_S before the kill: steps are kept in
    memory between flushes (a file write per step cost ~5% of a short step), never longer."""
    import json

    from scaldiag.collect.recorder import STEP_FLUSH_S

    recorder = StepRecorder(tmp_path, None, warmup_steps=3, trace_steps=0)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3 * STEP_FLUSH_S:
        recorder.begin(batch=7)
        time.sleep(0.01)
    assert read_steps(tmp_path / "steps.jsonl"), "no step reached the disk within the flush delay"
    recorder.close()
    lines = (tmp_path / "steps.jsonl").read_text().splitlines()
    # Valid compact JSON, as json writes it; several blocks (one a flush), each step ending where
    # the next begins.
    assert lines == [json.dumps(json.loads(line), separators=(",", ":")) for line in lines]
    assert len(lines) >= 3 and all('"bounds_ns"' in line for line in lines)
    rows = read_steps(tmp_path / "steps.jsonl")
    assert [r["step"] for r in rows] == list(range(len(rows)))
    assert all(a["end_ns"] == b["begin_ns"] for a, b in zip(rows, rows[1:]))
    assert all(r["batch"] == 7 and r["traced"] is False and r["epoch"] == 0 for r in rows)


def test_a_window_left_unfinished_leaves_when_it_is_garbage(tmp_path):
    # A fit that raises never finishes its window; the input annotation must not wait for it
    # forever.
    import gc

    from scaldiag.collect.frameworks import tracing

    gc.collect()
    before = tracing.PROCESS_WINDOWS.finished
    window = TraceWindow(tmp_path / "trace")
    assert tracing.windows_to_come()
    window.finish()
    window.finish()  # once only
    assert not tracing.windows_to_come() and tracing.PROCESS_WINDOWS.finished == before + 1
    TraceWindow(tmp_path / "trace")  # dropped at once, unfinished
    gc.collect()
    assert not tracing.windows_to_come() and tracing.PROCESS_WINDOWS.finished == before + 2


def test_a_session_closed_twice_is_closed_once(tmp_path):
    # A capture that failed is closed again on its way out (the Keras callback's on_train_end).
    from scaldiag.collect.session import Session

    session = Session(run_dir=tmp_path / "run", trace_steps=0, sample=True)
    session.close()
    first = read_json(tmp_path / "run", "run.json")
    time.sleep(0.01)
    session.close()
    assert read_json(tmp_path / "run", "run.json") == first


def test_a_run_this_process_started_is_owned_again_and_a_launchers_never(tmp_path):
    # A callback or loop given a run_dir, run again in the same process: the later session samples
    # and sets the status, and the earlier end is not the run's end any more. A launcher's run is
    # its own.
    from scaldiag.collect.session import Session, start_run_json
    from scaldiag.record.rundir import read_json

    first = Session(tmp_path / "mine", trace_steps=0, sample=False)
    first.close("failed")
    started = read_json(tmp_path / "mine", "run.json")
    assert started["status"] == "failed" and "ended_ns" in started
    again = Session(tmp_path / "mine", trace_steps=0, sample=False)
    run = read_json(tmp_path / "mine", "run.json")
    assert again.owns_run and run["status"] == "running" and "ended_ns" not in run
    assert run["started_ns"] == started["started_ns"]
    again.close()
    assert read_json(tmp_path / "mine", "run.json")["status"] == "finished" and again.closed

    (tmp_path / "launched").mkdir()
    start_run_json(tmp_path / "launched", ["scaldiag", "profile", "train.py"])
    theirs = Session(tmp_path / "launched", trace_steps=0)
    assert not theirs.owns_run and theirs.samplers is None
    theirs.close()
    assert (
        read_json(tmp_path / "launched", "run.json")["status"] == "running"
    )  # the launcher's to finish
