"""The fault matrix: whatever happens to the script or to scaldiag, the script's behaviour,
output and exit code are what ``python SCRIPT`` gives, and the run directory keeps what was
recorded, marked with how the run ended.

Small real scripts run under ``scaldiag profile`` as subprocesses, each in a session of its
own (no controlling terminal: how schedulers, ``timeout`` and CI run it). docs/reliability.md
has the matrix these tests check.
"""

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from conftest import ROOT, as_a_terminal_starts_it

from scaldiag.record.reader import read_steps
from scaldiag.record.rundir import read_json, read_jsonl

pytestmark = pytest.mark.slow  # real trainings killed, signalled or starved in subprocesses

ENV = {
    **os.environ,
    "PYTHONPATH": str(ROOT),
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "KERAS_BACKEND": "tensorflow",
    "COLUMNS": "100",
    "PYTHONUNBUFFERED": "1",
}

SLEEPER = """
import sys, time
print("READY", flush=True)
try:
    for _ in range(600):
        time.sleep(0.05)
finally:
    print("FINALLY start", flush=True)
    time.sleep(1.0)
    print("FINALLY done", flush=True)
"""


def script(tmp_path, source, name="prog.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def profile(tmp_path, path, *args, preexec_fn=None):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "--out",
            str(tmp_path / "runs"),
            str(path),
            "--",
            *args,
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=as_a_terminal_starts_it(preexec_fn),
        cwd=tmp_path,
    )


def run_dir(tmp_path):
    (d,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    return d


def wait_ready(proc):
    assert proc.stdout.readline().strip() == "READY"
    time.sleep(0.6)  # a few host samples


def plain(tmp_path, path):
    return subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, env=ENV, cwd=tmp_path
    )


@pytest.mark.parametrize(
    ("source", "code"),
    [
        ("print('out'); import sys; sys.exit(3)", 3),
        ("print('out', flush=True); import os; os._exit(4)", 4),
        ("print('out'); raise ValueError('boom')", 1),
        ("print('out')", 0),
    ],
)
def test_exit_codes_and_output_are_the_scripts(tmp_path, source, code):
    path = script(tmp_path, source)
    proc = profile(tmp_path, path)
    out, err = proc.communicate(timeout=120)
    expected = plain(tmp_path, path)
    assert proc.returncode == expected.returncode == code
    assert out.startswith(
        expected.stdout
    )  # the script's output first, unchanged; the report after it
    if code == 1:
        assert (
            "ValueError: boom" in err and err.count("Traceback") == 1
        )  # the script's own, not ours
    run = read_json(run_dir(tmp_path), "run.json")
    assert run["exit_code"] == code and run["status"] == ("finished" if code == 0 else "failed")


def test_sigint_to_scaldiag_alone_reaches_the_script_once_and_its_finally_completes(tmp_path):
    proc = profile(tmp_path, script(tmp_path, SLEEPER))
    wait_ready(proc)
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert "FINALLY start" in out and "FINALLY done" in out
    assert "KeyboardInterrupt" in err and proc.returncode == 130
    run = read_json(run_dir(tmp_path), "run.json")
    assert (
        run["status"] == "interrupted"
        and run["exit_code"] == -2
        and run["signals_received"] == ["SIGINT"]
    )


def test_sigint_to_the_whole_group_interrupts_the_script_once(tmp_path):
    proc = profile(tmp_path, script(tmp_path, SLEEPER))
    wait_ready(proc)
    os.killpg(proc.pid, signal.SIGINT)  # the script has a group of its own: one SIGINT, forwarded
    out, _ = proc.communicate(timeout=60)
    assert "FINALLY done" in out and proc.returncode == 130


@pytest.mark.parametrize(
    ("target", "sig"),
    [
        ("scaldiag", signal.SIGTERM),
        ("group", signal.SIGTERM),
        ("scaldiag", signal.SIGHUP),
        ("script", signal.SIGTERM),
    ],
)
def test_termination_leaves_a_finalised_run_with_its_samples(tmp_path, target, sig):
    # As a terminal starts it: under nohup (SIGHUP ignored, and inherited) scaldiag rightly ignores
    # SIGHUP too
    proc = profile(
        tmp_path, script(tmp_path, SLEEPER), preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL)
    )
    wait_ready(proc)
    if target == "scaldiag":
        os.kill(proc.pid, sig)
    elif target == "group":
        os.killpg(proc.pid, sig)
    else:
        (child,) = psutil.Process(proc.pid).children()
        child.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig
    d = run_dir(tmp_path)
    run = read_json(d, "run.json")
    assert run["exit_code"] == -sig and run["signal"] == signal.Signals(sig).name
    assert run["status"] == ("killed by signal 15" if target == "script" else "interrupted")
    assert read_jsonl(d / "host_samples.jsonl")
    report = subprocess.run(
        [sys.executable, "-m", "scaldiag", "report", str(d), "--json", "-"],
        env=ENV,
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["run"]["exit_code"] == -sig


def test_sigkill_to_scaldiag_takes_the_script_with_it(tmp_path):
    proc = profile(tmp_path, script(tmp_path, SLEEPER))
    wait_ready(proc)
    (child,) = psutil.Process(proc.pid).children()
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    child.wait(timeout=10)  # PR_SET_PDEATHSIG: no orphan training under PID 1
    assert not child.is_running()
    d = run_dir(tmp_path)
    assert read_json(d, "run.json")["status"] == "running"  # nobody could finalise it...
    report = subprocess.run(
        [sys.executable, "-m", "scaldiag", "report", str(d)],
        env=ENV,
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0, report.stderr  # ...and the report says so, with what was kept
    assert "has ended without finalising it" in report.stdout.replace("\n", " ").replace(
        "  ", " "
    ) or "without finalising" in " ".join(report.stdout.split())


def test_an_output_directory_under_a_file_runs_the_script_without_capture(tmp_path):
    path = script(tmp_path, "import sys; print('ran'); sys.exit(3)")
    (tmp_path / "afile").write_text("")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "--out",
            str(tmp_path / "afile" / "runs"),
            str(path),
        ],
        env=ENV,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 3 and result.stdout == "ran\n"
    (line,) = result.stderr.splitlines()
    assert "cannot create a run directory" in line and "without capture" in line


def test_an_unusable_out_under_nproc_per_node_still_runs_torchrun(tmp_path):
    """The fallback is the same launch without capture: a DDP script needs torchrun's RANK (issue
    22, item 8)."""
    pytest.importorskip("torch")
    # one write a line: two ranks share the pipe, and unbuffered print() writes each piece on its
    # own
    path = script(
        tmp_path,
        "import os; os.write(1, f\"rank {os.environ['RANK']} of"
        " {os.environ['WORLD_SIZE']}\\n\".encode())",
    )
    (tmp_path / "afile").write_text("")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "--nproc-per-node",
            "2",
            "--out",
            str(tmp_path / "afile" / "runs"),
            str(path),
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["rank 0 of 2", "rank 1 of 2"]
    assert (
        "running the script without capture" in result.stderr and "Traceback" not in result.stderr
    )


def test_a_disk_filling_mid_run_never_changes_the_exit_code(tmp_path):
    source = "import time, sys\nprint('ran', flush=True)\ntime.sleep(2.5)\nsys.exit(3)\n"
    path = script(tmp_path, source)

    def small_files():  # files over 2 KiB cannot grow: what a full disk does to the record
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    proc = profile(tmp_path, path, preexec_fn=small_files)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3 and out.startswith("ran\n")
    assert "Traceback" not in err


def test_file_is_absolute_and_the_script_may_change_directory(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data.txt").write_text("beside")
    script(
        tmp_path / "sub",
        """
        import os
        os.chdir("/")
        print(open(os.path.join(os.path.dirname(__file__), "data.txt")).read(), os.path.isabs(__file__))
    """,  # noqa: E501
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "--out",
            str(tmp_path / "runs"),
            "sub/prog.py",
        ],
        env=ENV,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("beside True")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repeat", "0", "--emulate", "prog.py"], "must be 1 or more"),
        (["sub"], "is a directory, not a Python script"),
        (["missing.py"], "no such script"),
    ],
)
def test_bad_arguments_are_one_clear_line(tmp_path, args, message):
    (tmp_path / "sub").mkdir()
    script(tmp_path, "print('never')")
    result = subprocess.run(
        [sys.executable, "-m", "scaldiag", "profile", *args],
        env=ENV,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 2 and message in result.stderr and "never" not in result.stdout
    assert "Traceback" not in result.stderr


KERAS = """
import sys
import numpy as np
import keras
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)])
model.compile("sgd", "mse")
x, y = np.random.rand(32 * 400, 8).astype("float32"), np.random.rand(32 * 400, 1).astype("float32")

class Ready(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if batch == 20:
            print("READY", flush=True)

model.fit(x, y, batch_size=32, epochs=50, verbose=0, callbacks=[Ready()])
"""


def test_keras_training_terminated_through_its_group_keeps_steps_and_report(tmp_path):
    pytest.importorskip("tensorflow")
    proc = profile(tmp_path, script(tmp_path, KERAS))
    wait_ready(proc)
    os.killpg(proc.pid, signal.SIGTERM)  # what a scheduler or `timeout` does
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    d = run_dir(tmp_path)
    run = read_json(d, "run.json")
    assert run["status"] == "interrupted" and run["exit_code"] == -15
    assert len(read_steps(d / "steps.jsonl")) >= 20 and read_jsonl(d / "host_samples.jsonl")
