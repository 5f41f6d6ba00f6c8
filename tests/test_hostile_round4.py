"""Hostile inputs, round 4 (issue 47, "Elsewhere, seen once each"; issue 48's Ctrl-C tests).

Each test failed on the code before it: a SIGINT not forwarded where no terminal sent it, a sample
file of blank lines read for minutes and called clean, a rank directory without run.json passed
by ``check``, B/E Kineto events held as dicts, control characters from the record in the HTML
page, the script's own ``--`` dropped, TensorFlow imported under ``KERAS_BACKEND=torch``, and
``report -o ''`` replacing ./scaldiag_report.html.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT, as_a_terminal_starts_it

from scaldiag.record.rundir import read_json

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100", "PYTHONUNBUFFERED": "1"}

# --- signals: the launcher (collect/launcher.py) --------------------------------------------------

# Says READY once its try: has begun; ends by itself after LONG_S, which a test never waits out.
LONG_S = 120
SLEEPER = f"""
import sys, time
print("READY", flush=True)
try:
    time.sleep({LONG_S})
finally:
    print("FINALLY done", flush=True)
"""

# An embedding program: a thread of its own (started before launch, SIGINT not held there) takes
# a SIGINT once the script is ready, as a process-directed SIGINT may land on any such thread.
EMBEDDED = """
import signal, sys, threading
from pathlib import Path
from scaldiag.collect.launcher import launch

run_dir, script = Path(sys.argv[1]), sys.argv[2]
run_dir.mkdir()
ready = threading.Event()

def embedder_thread():
    ready.wait()
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)

threading.Thread(target=embedder_thread, daemon=True).start()
import scaldiag.collect.launcher as launcher
real_popen = launcher.subprocess.Popen

class Popen(real_popen):  # the script's READY line, read before the signal goes
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{**kwargs, "stdout": launcher.subprocess.PIPE})
        self.stdout.readline()
        ready.set()

launcher.subprocess.Popen = Popen
print("CODE", launch(run_dir, script, []), flush=True)
"""


def _script(tmp_path, source=SLEEPER, name="prog.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


@pytest.mark.slow
def test_a_sigint_caught_by_another_thread_is_forwarded_without_a_terminal(tmp_path):
    # Before: the launcher took it for the terminal's and waited out the script (LONG_S), or the
    # KeyboardInterrupt left its loop and run.json was never finalised.
    embed = _script(tmp_path, EMBEDDED, "embed.py")
    proc = subprocess.run(
        [sys.executable, str(embed), str(tmp_path / "run"), str(_script(tmp_path))],
        env=ENV,
        capture_output=True,
        text=True,
        start_new_session=True,  # no terminal: the script runs in a process group of its own
        preexec_fn=as_a_terminal_starts_it(),
        timeout=LONG_S - 30,
    )
    assert "CODE -2" in proc.stdout, proc.stderr[-2000:]
    run = read_json(tmp_path / "run", "run.json")
    assert (run["status"], run["exit_code"], run["signals_received"]) == (
        "interrupted",
        -2,
        ["SIGINT"],
    )


@pytest.mark.slow
def test_a_sigint_scaldiag_was_started_ignoring_is_ignored_and_not_recorded(tmp_path):
    # `scaldiag profile ... &` in a non-interactive shell: SIGINT ignored, as `python SCRIPT &`
    # ignores it. Before: taken anyway, forwarded to a script that ignored it, and the finished run
    # recorded 'interrupted'.
    script = _script(tmp_path, "print('READY', flush=True)\nimport time\ntime.sleep(3)\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "-q",
            "--out",
            str(tmp_path / "runs"),
            script,
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.stdout.readline().strip() == "READY"
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=LONG_S)
    assert proc.returncode == 0, err[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    run = read_json(run_dir, "run.json")
    assert run["status"] == "finished" and "signals_received" not in run


# An embedding program whose run.json start takes a SIGTERM: the launcher's first step.
EARLY = """
import os, signal, sys
from pathlib import Path
import scaldiag.collect.launcher as launcher

real_start = launcher.start_run_json

def start_then_signalled(*args, **kwargs):
    real_start(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)

launcher.start_run_json = start_then_signalled
Path(sys.argv[1]).mkdir()
print("CODE", launcher.launch(Path(sys.argv[1]), sys.argv[2], []), flush=True)
"""


@pytest.mark.slow
def test_a_signal_before_the_script_starts_reaches_it_and_the_run_is_finalised(tmp_path):
    # Before: the signal killed the launcher between run.json's start and the script's, and the
    # run stayed 'running'.
    proc = subprocess.run(
        [sys.executable, str(_script(tmp_path, EARLY, "early.py")), str(tmp_path / "run")]
        + [str(_script(tmp_path))],
        env=ENV,
        capture_output=True,
        text=True,
        start_new_session=True,
        timeout=LONG_S - 30,
    )
    assert "CODE -15" in proc.stdout, (proc.returncode, proc.stderr[-2000:])
    run = read_json(tmp_path / "run", "run.json")
    assert (run["status"], run["exit_code"], run["signals_received"]) == (
        "interrupted",
        -15,
        ["SIGTERM"],
    )


# --- SD211: host samples over intervals a clock tick can measure -------------------------------


def test_a_host_tick_too_soon_after_the_last_leaves_its_interval_to_the_next(tmp_path):
    # The niced sampler runs late on a busy machine, then early: an interval under the kernel's
    # 10 ms tick read a saturated core 0.0% busy, and SD211 missed 9 processes on 2 cores.
    from scaldiag.collect.host import HostSampler
    from scaldiag.record.rundir import JsonlWriter, read_jsonl

    writer = JsonlWriter(tmp_path / "host_samples.jsonl")
    sampler = HostSampler(writer, os.getpid())
    for _ in range(3):  # at once: the first samples, the next two measure nothing yet
        sampler._tick()
    writer.close()
    assert len(read_jsonl(tmp_path / "host_samples.jsonl")) == 1


def test_sd211_needs_more_than_one_sample():
    from test_rules_machine import _run

    from scaldiag.rules import sd211_cpu_oversubscribed

    rule = sd211_cpu_oversubscribed.RULE
    assert rule.check(_run(2, 100, 190, processes=9, ci=0.0)).id == "SD211"
    assert rule.check(_run(2, 100, 190, processes=9, ci=float("nan"))) is None  # one sample


# --- a samples file of blank lines (record/rundir.py's JSONL reader) ------------------------------


def test_a_samples_file_of_blank_lines_is_damage_read_in_bounded_work(tmp_path):
    # Before: 3.4 s of CPU a MiB (a parser exception a line: hours at the 2 GiB cap), and `check`
    # called the record clean. Work counted in Python lines run, not timed.
    import shutil

    from conftest import lines_run

    from scaldiag.record.rundir import load_jsonl

    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "golden" / "runs" / "torch_cpu_input_bound", run)
    samples = run / "host_samples.jsonl"
    kept, _ = load_jsonl(samples)
    with open(samples, "ab") as f:
        f.write(b"\n" * (1 << 20) + b" \n\t\n")
    (rows, damaged), work = lines_run(load_jsonl, samples)
    assert rows == kept and damaged == (1 << 20) + 2
    assert work < 50 * len(kept) + 1000  # per row (7,433 lines here), not per blank line
    check = subprocess.run(
        [sys.executable, "-m", "scaldiag", "check", str(run), "--max-step-ms", "1e9"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 1, check.stdout + check.stderr
    assert f"host_samples.jsonl: {(1 << 20) + 2} damaged lines skipped" in check.stdout


# --- the command line: the script's own `--`, an empty output path ------------------------------


def _scaldiag(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "scaldiag", *map(str, args)],
        env=ENV,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("typed", "got"),
    [
        (["--", "--", "--foo"], ["--", "--foo"]),  # before: ["--foo"]
        (["--", "--"], ["--"]),  # before: []
        (["--", "--foo"], ["--foo"]),
        (["a", "--", "b"], ["a", "--", "b"]),
    ],
)
def test_the_script_gets_exactly_what_was_typed_after_the_first_separator(tmp_path, typed, got):
    script = _script(tmp_path, "import json, sys\nprint('ARGV', json.dumps(sys.argv[1:]))\n")
    result = _scaldiag("profile", "-q", "--out", tmp_path / "runs", script, *typed)
    assert result.returncode == 0, result.stderr[-2000:]
    (said,) = [ln for ln in result.stdout.splitlines() if ln.startswith("ARGV ")]
    assert json.loads(said.removeprefix("ARGV ")) == got


def test_an_empty_output_path_is_refused_and_the_default_file_kept(tmp_path):
    kept = tmp_path / "scaldiag_report.html"
    kept.write_text("the user's")
    run = ROOT / "tests" / "golden" / "runs" / "torch_cpu_input_bound"
    for option in (["--format", "html", "-o", ""], ["--json", ""]):
        result = _scaldiag("report", run, *option, cwd=tmp_path)
        assert result.returncode == 2 and "an empty path" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert kept.read_text() == "the user's"
    for command in (["compare", run, run], ["analyze", run / "trace"]):  # silently no JSON before
        result = _scaldiag(*command, "--json", "", cwd=tmp_path)
        assert result.returncode == 2 and "an empty path" in result.stderr, result.stderr


# --- the HTML page: the record's controls made inert (svg.esc, through sanitize.py) ------------

HOSTILE = "evil\x1b]0;title\x07\x1b[2J\u202ereversed"


def test_controls_and_bidi_marks_from_the_record_never_reach_the_html_page(tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "golden" / "runs" / "torch_cpu_input_bound", run)

    def plant(name, change):
        data = json.loads((run / name).read_text()) if (run / name).exists() else {}
        change(data)
        (run / name).write_text(json.dumps(data))

    plant("run.json", lambda r: r.update(host=HOSTILE, command=["python", f"{HOSTILE}.py"]))
    plant("training.json", lambda t: t.update(batch_source=HOSTILE, step_source=HOSTILE))
    plant("inventory.json", lambda i: i.update(gpus=[{"index": 0, "name": HOSTILE}]))
    page = tmp_path / "page.html"
    result = _scaldiag("report", run, "--format", "html", "-o", page)
    assert result.returncode == 0, result.stderr[-2000:]
    html = page.read_text(encoding="utf-8")
    assert not {"\x1b", "\x07", "\u202e"} & set(html)
    assert "evil\\x1b]0;title\\x07" in html  # shown, as escapes


# --- check: a rank's directory without run.json ---------------------------------------------------


def test_check_fails_a_rank_directory_of_steps_without_run_json(tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "golden" / "runs" / "torch_cpu_input_bound", run)
    (run / "rank1").mkdir()
    shutil.copy(run / "steps.jsonl", run / "rank1" / "steps.jsonl")
    result = _scaldiag("check", run, "--max-step-ms", "1e9")
    assert result.returncode == 1, result.stdout
    assert "rank 1's directory (rank1/) holds a record but no run.json" in result.stdout
    (run / "rank1" / "steps.jsonl").unlink()  # an empty one records nothing: nothing to vouch for
    assert _scaldiag("check", run, "--max-step-ms", "1e9").returncode == 0


# --- Keras on torch: TensorFlow left unimported ---------------------------------------------------

KERAS_ON_TORCH = """
import sys
import numpy as np
import keras
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(np.zeros((640, 4)), np.zeros((640, 1)), epochs=2, batch_size=8, verbose=0)
print("TENSORFLOW", "tensorflow" in sys.modules, keras.backend.backend())
"""


@pytest.mark.slow
def test_keras_on_torch_is_profiled_without_importing_tensorflow(tmp_path):
    # Before: the input-free measurement's clone_model asked Keras's `tf.available`, which imported
    # TensorFlow into the script's process (7 s, its log lines on the script's stderr).
    pytest.importorskip("torch")
    pytest.importorskip("keras")
    script = _script(tmp_path, KERAS_ON_TORCH)
    result = subprocess.run(
        [sys.executable, "-m", "scaldiag", "profile", "-q", "--out", tmp_path / "runs", script],
        env={**ENV, "KERAS_BACKEND": "torch"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "TENSORFLOW False torch" in result.stdout, result.stdout[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    training = read_json(run_dir, "training.json")
    assert training.get("input_free"), "the input-free step was measured all the same"


# --- Kineto: open B events kept small -------------------------------------------------------------


def _b_events_file(path, n):
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [\n')
        for i in range(n):
            f.write(f'{{"ph":"B","cat":"cpu_op","name":"aten::op{i % 50}","pid":1,"tid":1,')
            f.write(f'"ts":{10 + i}}},\n')
        f.write('{"ph":"X","cat":"cpu_op","name":"last","pid":1,"tid":1,"ts":5,"dur":1}\n]}\n')
    return path


@pytest.mark.slow
def test_a_kineto_file_of_open_b_events_is_read_in_a_few_times_its_size(tmp_path):
    # Before: each B event held whole (a dict of its fields) until its E: 1M of them (75 MB) peaked
    # at 984 MB of RSS, 13x; now 294 MB, as much as the same count of complete (X) events.
    import tracemalloc

    from scaldiag.readers.kineto import read_trace

    trace_file = _b_events_file(tmp_path / "rank0.pt.trace.json", 200_000)
    tracemalloc.start()
    try:
        trace = read_trace([trace_file])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    host = [line for plane in trace.planes for line in plane.lines if len(line.start_ns)]
    assert sum(len(line.start_ns) for line in host) == 1  # the one complete event; none unclosed
    # tracemalloc's peak: 11.1x the file before, 3.8x now (the scanner's raw text of slow events)
    assert peak < 6 * trace_file.stat().st_size, peak / trace_file.stat().st_size
