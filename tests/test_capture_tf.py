"""Capture on real TensorFlow (CPU): `scaldiag profile`, the callback, the loop API."""

import json
import os
import re
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from conftest import ROOT

from scaldiag.record.reader import read_steps
from scaldiag.record.rundir import read_json, read_jsonl

pytestmark = (
    pytest.mark.slow
)  # real TensorFlow trainings, most under `scaldiag profile` in a subprocess

pytest.importorskip("tensorflow", reason="capture tests need TensorFlow (make test installs it)")

ENV = {
    **os.environ,
    "PYTHONPATH": str(ROOT),
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "KERAS_BACKEND": "tensorflow",
    "COLUMNS": "120",
}


def scaldiag(*args, cwd=None, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "scaldiag", *map(str, args)],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=cwd,
        **kwargs,
    )


def only_run_dir(out):
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def report_json(run_dir):
    result = scaldiag("report", run_dir, "--json", "-")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_profile_the_bundled_example(tmp_path):
    result = scaldiag(
        "profile", "--out", tmp_path, ROOT / "examples" / "train_cnn.py", "--", "--steps", "40"
    )
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    assert len(read_steps(run_dir / "steps.jsonl")) == 40
    assert read_jsonl(run_dir / "host_samples.jsonl")
    assert list((run_dir / "trace").rglob("*.xplane.pb"))
    report = report_json(run_dir)
    assert report["run"]["status"] == "finished" and report["run"]["exit_code"] == 0
    assert report["training"]["global_batch"] == 64 and report["training"]["replicas"] == 1
    assert report["steps"]["recorded"] == 40
    # The record agrees with the script's own stopwatch over the same interval: from batch 10's
    # begin to the end of training (the script's figure holds the traced steps, which the report's
    # steady figure leaves out: how far those two differ depends on the load, so they are not
    # compared).
    own = float(re.search(r"(\d+) samples/s", result.stdout).group(1))
    steps = read_steps(run_dir / "steps.jsonl")
    (end_ns,) = [
        m["t_ns"] for m in read_jsonl(run_dir / "marks.jsonl") if m["mark"] == "epoch_end"
    ][-1:]
    ours = 64 * (len(steps) - 10) / ((end_ns - steps[10]["begin_ns"]) / 1e9)
    assert ours == pytest.approx(own, rel=0.02, abs=1)
    assert report["steps"]["samples_per_s"] > 0
    trace = report["trace_report"]
    assert trace["steps"]["method"] == "markers" and trace["steps"]["count"] == 5
    assert any("nvml" in m for m in report["missing"])  # no GPU here: said, not hidden
    assert "Steps:" in result.stdout and "run directory" in result.stderr


def test_script_runs_as_python_would_run_it(tmp_path):
    script = tmp_path / "sub" / "prog.py"
    script.parent.mkdir()
    (script.parent / "helper.py").write_text("VALUE = 7\n")
    script.write_text(
        textwrap.dedent("""
        import os, sys
        import helper  # importable because the script's directory is first on sys.path
        print("NAME", __name__, "ARGV", sys.argv, "PATH0", sys.path[0], "CWD", os.getcwd(), helper.VALUE)
        sys.exit(3)
    """)  # noqa: E501
    )
    result = scaldiag(
        "profile", "--out", tmp_path / "runs", script, "--", "a", "--flag", cwd=tmp_path
    )
    assert result.returncode == 3
    assert (
        f"NAME __main__ ARGV ['{script}', 'a', '--flag'] PATH0 {script.parent} CWD {tmp_path} 7"
        in result.stdout
    )
    run = read_json(only_run_dir(tmp_path / "runs"), "run.json")
    assert run["status"] == "failed" and run["exit_code"] == 3
    assert run["fresh_page_ns_per_byte"] >= 0  # the launcher measured the host after the script
    assert "no training step was recorded" in result.stdout


def test_a_crashing_script_keeps_its_traceback_and_a_partial_run(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text("raise ValueError('boom')\n")
    result = scaldiag("profile", "--out", tmp_path / "runs", script)
    assert result.returncode == 1
    assert "ValueError: boom" in result.stderr
    assert read_json(only_run_dir(tmp_path / "runs"), "run.json")["status"] == "failed"


def test_killing_the_training_leaves_a_readable_run(tmp_path):
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "--out",
            str(out),
            str(ROOT / "examples" / "train_cnn.py"),
            "--",
            "--steps",
            "2000",
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        if (
            out.exists()
            and list(out.iterdir())
            and len(read_steps(only_run_dir(out) / "steps.jsonl")) >= 15
        ):
            break
        time.sleep(0.2)
    (child,) = psutil.Process(proc.pid).children()
    child.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + 9  # as a shell reports a script killed by SIGKILL
    report = report_json(only_run_dir(out))
    assert report["run"]["status"] == "killed by signal 9"
    assert report["steps"]["recorded"] >= 15 and report["steps"]["samples_per_s"] > 0


CALLBACK_SCRIPT = """
import sys
import numpy as np
import tensorflow as tf
cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from scaldiag.keras import ScaldiagCallback
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
x, y = np.random.rand(32 * 20, 8).astype("float32"), np.random.rand(32 * 20, 1).astype("float32")
model.fit(x, y, batch_size=32, epochs=2, verbose=0,
          callbacks=[ScaldiagCallback(run_dir=sys.argv[1], global_batch=32, trace_steps=3)])
"""


def run_script_recording_into(tmp_path, source: str):
    """Run ``source`` as a script with a run directory as its argument; returns the run directory.
    """
    script = tmp_path / "script.py"
    script.write_text(source)
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, str(script), str(run_dir)], capture_output=True, text=True, env=ENV
    )
    assert result.returncode == 0, result.stderr
    return run_dir


def test_callback_records_a_mirrored_run_in_process(tmp_path):
    run_dir = run_script_recording_into(tmp_path, CALLBACK_SCRIPT)
    run = read_json(run_dir, "run.json")
    assert (
        run["status"] == "finished" and run["fresh_page_ns_per_byte"] >= 0
    )  # measured after training
    training = read_json(run_dir, "training.json")
    assert training["replicas"] == 2 and training["per_replica_batch"] == 16
    steps = read_steps(run_dir / "steps.jsonl")
    assert len(steps) == 40 and {s["epoch"] for s in steps} == {0, 1}
    assert read_jsonl(run_dir / "host_samples.jsonl")  # sampled in-process: no launcher
    report = report_json(run_dir)
    assert report["trace_report"]["steps"]["count"] == 3


LOOP_SCRIPT = """
import sys
import tensorflow as tf
from scaldiag.loop import capture
w = tf.Variable(tf.ones((64, 64)))
@tf.function
def step(x):
    w.assign_sub(0.01 * tf.matmul(x, w))
x = tf.random.normal((64, 64))
with capture(run_dir=sys.argv[1], global_batch=64, warmup_steps=2, trace_steps=4) as run:
    for _ in range(12):
        with run.step():
            step(x)
"""


def test_custom_loop_api_marks_steps_in_the_trace(tmp_path):
    run_dir = run_script_recording_into(tmp_path, LOOP_SCRIPT)
    assert len(read_steps(run_dir / "steps.jsonl")) == 12
    report = report_json(run_dir)
    assert report["training"]["framework"]["backend"] == "tensorflow"
    assert report["trace_report"]["steps"] == {
        "method": "markers",
        "count": 4,
        "description": "step markers: host events 'train' with a step_num stat",
    }


def test_the_callback_keeps_keras_asynchronous_dispatch(monkeypatch):
    # A callback with on_train_batch_end makes Keras convert each step's logs
    # to numbers: a device sync per step. Ours must not. Keras decides this
    # only on thread-safe backends (JAX); here (TF) the flag is forced on, as
    # JAX sets it, and a callback that does implement the hook is the control.
    import keras
    from keras.src.callbacks import callback_list
    from keras.src.callbacks.callback_list import CallbackList

    from scaldiag.keras import ScaldiagCallback

    class SyncsEveryStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            pass

    monkeypatch.setattr(callback_list.backend, "IS_THREAD_SAFE", True)
    assert CallbackList([ScaldiagCallback()])._async_train is True
    assert CallbackList([ScaldiagCallback(), SyncsEveryStep()])._async_train is False
    assert ScaldiagCallback.on_train_batch_end is keras.callbacks.Callback.on_train_batch_end


def test_emulated_sweep_gives_the_table_and_an_attribution_that_adds_up(emulated_sweep):
    # An unmodified script calling MirroredStrategy() with no arguments gets N replicas (conftest's
    # sweep).
    report, out, result = emulated_sweep
    sweep_dir = only_run_dir(out)
    assert read_json(sweep_dir / "gpus2", "training.json")["replicas"] == 2
    assert read_json(sweep_dir / "gpus1", "training.json")["replicas"] == 1
    assert report["emulated"] and report["mode"] == "strong"  # --batch is the global batch here
    one, two = report["scaling"]
    assert (one["gpus"], two["gpus"]) == (1, 2) and one["speedup"] == 1.0
    assert two["per_replica_batch"] == 32 and two["global_batch"] == 64
    (attribution,) = report["attribution"]
    assert attribution["ideal"] == 1.0
    lost = sum(c["lost_speedup"] for c in attribution["causes"])
    assert lost == pytest.approx(attribution["ideal"] - attribution["measured"])
    assert "Scaling" in result.stdout and "measured" in result.stdout
    assert [p["gpus"] for p in report["predictions"]] == [1, 2, 4, 8]
    (validation,) = report["validation"]
    assert validation["gpus"] == 2 and validation["error_pct"] is not None


def test_python_input_is_annotated_in_the_trace(tmp_path):
    # PyDataset batches come from Python, which the profiler does not trace:
    # `profile` wraps each fetch in a `scaldiag_input` annotation.
    from scaldiag.readers.xplane.read import find_run, read_trace

    result = scaldiag(
        "profile",
        "--out",
        tmp_path,
        ROOT / "examples" / "train_cnn.py",
        "--",
        "--steps",
        "30",
        "--slow-input",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    run_dir = only_run_dir(tmp_path)
    assert read_json(run_dir, "training.json")["batch_source"] == "SlowBatches.batch_size"
    trace = read_trace(find_run(run_dir / "trace")[1])
    marks = sum(
        plane.event_names[i] == "scaldiag_input"
        for plane in trace.host_planes
        for line in plane.lines
        for i in line.name_id
    )
    assert marks >= 5  # at least one per traced step
    # The input ceiling: the PyDataset iterated alone after training.
    ceiling = read_json(run_dir, "training.json")["input_ceiling"]
    assert ceiling["samples_per_s"] > 0 and ceiling["batches"] >= 10


def test_a_python_generator_still_feeds_fit(tmp_path):
    script = tmp_path / "gen.py"
    script.write_text(
        textwrap.dedent("""
        import numpy as np, keras
        def batches():
            rng = np.random.default_rng(0)
            while True:
                yield rng.random((32, 8), dtype=np.float32), rng.random((32, 1), dtype=np.float32)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        model.fit(batches(), steps_per_epoch=20, epochs=1, verbose=0)
        print("trained")
    """)
    )
    result = scaldiag("profile", "--out", tmp_path / "runs", script)
    assert result.returncode == 0 and "trained" in result.stdout, result.stderr[-2000:]
    assert len(read_steps(only_run_dir(tmp_path / "runs") / "steps.jsonl")) == 20


def test_ctrl_c_stops_the_script_and_keeps_a_readable_run(tmp_path):
    import signal

    out = tmp_path / "runs"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "--out",
            str(out),
            str(ROOT / "examples" / "train_cnn.py"),
            "--",
            "--steps",
            "2000",
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # Ctrl-C once training runs: sent at a fixed deadline instead, under load it found TensorFlow
    # still importing, which aborts (exit 134) or raises another error (exit 1) as under `python`.
    deadline = time.time() + 300  # TensorFlow's import and 15 steps, on two shared cores
    while not (
        out.exists()
        and list(out.iterdir())
        and len(read_steps(only_run_dir(out) / "steps.jsonl")) >= 15
    ):
        if proc.poll() is not None or time.time() > deadline:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"training did not reach 15 steps: {proc.communicate()[1][-2000:]}")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + 2
    assert "KeyboardInterrupt" in stderr  # the script's own interrupt, as Python shows it
    report = report_json(only_run_dir(out))
    assert report["run"]["status"] == "interrupted" and report["steps"]["recorded"] >= 15


def test_the_input_annotation_keeps_no_batch_alive():
    # A generator suspended at `yield item` kept the batch it yielded alive until the next one was
    # made: on the H200 that cost 4% of a Keras-on-JAX convnet step (3 MiB batches). The annotated
    # input must hold nothing of the user's batches between fetches (here TF's real annotation).
    import gc
    import weakref

    from scaldiag.collect.frameworks.input_marks import mark_input

    class Batch:
        pass

    made = []

    def make():
        batch = Batch()
        made.append(weakref.ref(batch))
        return batch

    def batches():
        for _ in range(3):
            yield make()

    seen = []
    marked = mark_input(batches(), "tensorflow", on_first_batch=lambda b: seen.append(type(b)))
    first = next(marked)
    del first
    gc.collect()
    assert made[0]() is None, "the first batch outlived its consumer"
    assert len(list(marked)) == 2 and seen == [Batch]


CALLBACK_LIST_SCRIPT = """
import sys
import numpy as np
import keras
from scaldiag.keras import ScaldiagCallback
from keras.src.callbacks.callback_list import CallbackList
x, y = np.zeros((64, 4), np.float32), np.zeros((64, 1), np.float32)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
ours = ScaldiagCallback(run_dir=sys.argv[1], trace_steps=0, input_free=False, input_ceiling_s=0)
model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=CallbackList([ours], add_history=True, model=model))
"""  # noqa: E501


def test_fit_given_a_callback_list_is_captured(tmp_path):
    run_dir = run_script_recording_into(tmp_path, CALLBACK_LIST_SCRIPT)
    training = read_json(run_dir, "training.json")
    assert training["global_batch"] == 16, training.get("batch_source")
    steps = read_steps(run_dir / "steps.jsonl")
    assert len(steps) == 8 and [s["batch"] for s in steps] == [0, 1, 2, 3] * 2


FAILING_DISK_SCRIPT = """
import errno
import sys
import numpy as np
import keras
from scaldiag.keras import ScaldiagCallback

class DiskFills(keras.callbacks.Callback):
    # Before ours in the list: at batch 5 the steps file stops taking writes, and the recorder's
    # next step is due to write (as it would be 0.1 s after the last write).
    def on_train_batch_begin(self, batch, logs=None):
        if batch == 5:
            recorder = ours.session.recorder
            def write(text):
                raise OSError(errno.ENOSPC, "No space left on device")
            recorder._steps.write = write
            recorder._due_ns = 0

x, y = np.zeros((160, 4), np.float32), np.zeros((160, 1), np.float32)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
ours = ScaldiagCallback(run_dir=sys.argv[1], trace_steps=0, input_free=False, input_ceiling_s=0)
history = model.fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=[DiskFills(), ours])
print("epochs trained", len(history.history["loss"]))
print("hook", "on_train_batch_begin" in vars(ours))
model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[ours])  # the disk has room again
print("second fit failed:", ours._failed)
"""


def test_a_failing_step_write_disables_capture_not_training(tmp_path):
    # The Keras step hook is the recorder's begin itself; its slow path (a write here) must report
    # to the callback, which stops recording and lets fit finish; the run is still closed.
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-c", FAILING_DISK_SCRIPT, str(run_dir)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "epochs trained 3" in result.stdout and "hook False" in result.stdout
    assert (
        result.stderr.count("capture disabled, training continues") == 1
        and "No space left" in result.stderr
    )
    assert "No space left" in read_json(run_dir, "training.json")["capture_error"]
    assert read_json(run_dir, "run.json")["status"] == "finished"
    # a later fit with the same callback is captured again: its 10 steps are all on disk
    assert "second fit failed: None" in result.stdout
    assert [s["batch"] for s in read_steps(run_dir / "steps.jsonl")][-10:] == list(range(10))


def test_array_batches_are_annotated_only_while_a_trace_window_is_to_come(tmp_path):
    # Keras asks its array adapter for an iterator every epoch. While scaldiag's trace window is to
    # come, the batches go through the annotation (TF's real one here; the JAX backend uses this);
    # from the moment it is over, the same epoch's iterator hands on the adapter's own batches.
    import gc

    from scaldiag.collect.frameworks import input_marks, tracing
    from scaldiag.collect.recorder import StepRecorder

    class Adapter:
        def _get_iterator(self):
            return iter(range(6))

    annotate, tracing_now = input_marks._annotation("tensorflow")
    asked = []
    get_iterator = input_marks.annotating(
        Adapter._get_iterator, (annotate, lambda: asked.append(1) or tracing_now())
    )
    plain = type(iter(range(3)))
    gc.collect()  # windows of earlier tests that were not finished leave as garbage
    assert not tracing.windows_to_come() and type(get_iterator(Adapter())) is plain
    window = tracing.TraceWindow(tmp_path / "trace")  # no profiler: it fails to start, and says so
    recorder = StepRecorder(tmp_path, window, warmup_steps=1, trace_steps=2)
    epoch = get_iterator(Adapter())
    assert tracing.windows_to_come() and [next(epoch), next(epoch)] == [0, 1] and len(asked) == 2
    for _ in range(3):
        recorder.begin()
    assert not tracing.windows_to_come()  # the window did not start at its step: it will not now
    assert list(epoch) == [2, 3, 4, 5] and len(asked) == 2  # the rest of the epoch, not annotated
    assert type(get_iterator(Adapter())) is plain  # and the next epochs are the adapter's own
    recorder.close()

    class Starts(tracing.TraceWindow):
        def _start(self):
            pass

    (tmp_path / "second").mkdir()
    recorder = StepRecorder(
        tmp_path / "second", Starts(tmp_path / "trace2"), warmup_steps=1, trace_steps=2
    )
    for step in range(4):
        recorder.begin()
        assert tracing.windows_to_come() == (
            step < 3
        )  # steps 1 and 2 are traced; step 3 begins after the stop
    recorder.close()


def test_batches_wrapped_before_the_fit_makes_its_window_stay_annotated_until_it_ends(tmp_path):
    # `scaldiag profile` wraps a generator at fit, before the callback makes the fit's trace window,
    # and Keras takes batches in between: they must not stop the annotation that the window needs.
    from scaldiag.collect.frameworks import input_marks, tracing

    annotate, tracing_now = input_marks._annotation("tensorflow")
    asked = []
    batches = input_marks._annotated_iterator(
        iter(range(6)),
        (annotate, lambda: asked.append(1) or tracing_now()),
        input_marks._FirstBatch(None),
    )
    assert next(batches) == 0 and len(asked) == 1  # no window yet
    window = tracing.TraceWindow(tmp_path / "trace")
    assert next(batches) == 1 and len(asked) == 2  # the window is to come
    window.finish()
    assert list(batches) == [2, 3, 4, 5] and len(asked) == 2


RAISING_FIT_SCRIPT = """
import sys
import numpy as np
import tensorflow as tf
import keras
from scaldiag.keras import ScaldiagCallback
from scaldiag.collect.frameworks import tracing
from scaldiag.record.rundir import read_json

class RaisesAt(keras.callbacks.Callback):
    def __init__(self, error):
        super().__init__()
        self.error = error

    def on_train_batch_begin(self, batch, logs=None):
        if batch == 4:  # inside the trace window (steps 1-6)
            raise self.error

x, y = np.zeros((160, 4), np.float32), np.zeros((160, 1), np.float32)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
ours = ScaldiagCallback(run_dir=sys.argv[1], warmup_steps=1, trace_steps=6, input_free=False, input_ceiling_s=0)
for error in (ValueError("bad batch"), KeyboardInterrupt()):
    try:
        model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[ours, RaisesAt(error)])
    except (ValueError, KeyboardInterrupt):
        pass
    print("status", read_json(sys.argv[1], "run.json")["status"], "windows to come", tracing.windows_to_come(),
          "hook", "on_train_batch_begin" in vars(ours))
tf.profiler.experimental.start(sys.argv[1] + "/own_trace")  # raises where a profiler was left tracing
tf.profiler.experimental.stop()
model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[ours])
print("sampled", ours.session.samplers is not None)
print("status", read_json(sys.argv[1], "run.json")["status"], "trace", read_json(sys.argv[1], "training.json")["trace"])

from scaldiag.collect.frameworks import input_ceiling
def interrupted(*args, **kwargs):
    raise KeyboardInterrupt
input_ceiling.measure = interrupted  # Ctrl-C while the input is measured, after training, in on_train_end
late = ScaldiagCallback(run_dir=sys.argv[1] + "_late", trace_steps=0, input_free=False, input_ceiling_s=1)
try:
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[late])
except KeyboardInterrupt:
    pass
print("late", read_json(sys.argv[1] + "_late", "run.json")["status"], late.session.closed,
      late.session.samplers._writers[0]._file.closed)
"""  # noqa: E501


def test_a_fit_that_raises_closes_its_capture_and_the_next_fit_is_captured(tmp_path):
    # Keras calls no on_train_end when fit raises. A notebook's user who interrupts a fit (or whose
    # input fails) and fits again must not find the profiler still tracing and the run "running".
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-c", RAISING_FIT_SCRIPT, str(run_dir)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "status failed windows to come False hook False" in lines
    assert "status interrupted windows to come False hook False" in lines
    assert "sampled True" in lines  # the run this process started is the later fit's too
    assert (
        "late interrupted True True" in lines
    )  # interrupted inside on_train_end: closed, samplers stopped
    last_fit = next(line for line in lines if line.startswith("status finished trace"))
    assert "'error': None" in last_fit, last_fit
    marks = [json.loads(line) for line in (run_dir / "marks.jsonl").read_text().splitlines()]
    assert [m.get("raised") for m in marks if m["mark"] == "fit_end"] == [
        "ValueError",
        "KeyboardInterrupt",
        None,
    ]
    assert sum(m["mark"] == "trace_stopped" for m in marks) == 3
    # the step each failed fit was in is not a step: it did not complete
    assert [s["batch"] for s in read_steps(run_dir / "steps.jsonl")] == [0, 1, 2, 3] * 2 + list(
        range(10)
    )


def test_a_pydataset_is_annotated_until_the_window_is_over_then_its_own_getitem_runs(tmp_path):
    # After scaldiag's trace window a PyDataset's batches call the user's own __getitem__ again, and
    # a second fit's annotation replaces the first's rather than wrapping it.
    import keras

    from scaldiag.collect.frameworks import input_marks, tracing

    class Data(keras.utils.PyDataset):
        def __len__(self):
            return 100

        def __getitem__(self, index):
            return index

    data = Data()
    seen = []
    assert input_marks.mark_input(data, "tensorflow", on_first_batch=seen.append) is data
    annotated = type(data)
    assert annotated is not Data and data[0] == 0 and seen == [0]
    input_marks.mark_input(data, "tensorflow")  # a second fit, before any window
    assert type(data).__bases__ == (Data,)
    window = tracing.TraceWindow(tmp_path / "trace")
    assert data[1] == 1 and type(data) is not Data  # the window is to come
    window.finish()
    assert data[2] == 2 and type(data) is Data
    assert data[3] == 3 and isinstance(data, keras.utils.PyDataset)
