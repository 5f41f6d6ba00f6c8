"""The script's printed lines, read as they pass (collect/printed.py): the script's output is the
same bytes with and without capture, to a pipe and to a terminal, and printed.jsonl holds the
segments with a digit, time-stamped, within its bounds."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from conftest import ROOT

from scaldiag.collect import printed
from scaldiag.collect.printed import PrintedCapture, PrintedStream
from scaldiag.record.rundir import PRINTED, read_jsonl

# Every way a clock reaches a stream: a tqdm-like bar redrawn with \r (stderr), Keras's \b-then-\r
# redraws (stdout), unicode, a line in pieces, print(flush=True), a thread's line, a last line
# without its end. It prints what isatty() said, so equal bytes mean equal answers.
SCRIPT = r"""
import sys, threading
print("isatty", sys.stdout.isatty(), sys.stderr.isatty())
for i in range(11):
    sys.stderr.write(f"\r{i * 10:3d}%|{'#' * i}{' ' * (10 - i)}| {i}/10 [00:00<00:00, 123.45it/s]")
    sys.stderr.flush()
sys.stderr.write("\n")
width = 0
for i in range(1, 6):
    body = f"{i}/5 ━━━━━━━━ 0s 3ms/step - loss: 0.{i}"
    sys.stdout.write("\b" * width + "\r" + body)
    sys.stdout.flush()
    width = len(body)
sys.stdout.write("\n")
sys.stdout.write("épo")
sys.stdout.write("que 1: 12.5 ms/step — ✓")
print()
print("no clock in this line")
print("step", 3, "took", 0.25, "s", flush=True)
thread = threading.Thread(target=lambda: print("from a thread: 7 it/s"))
thread.start()
thread.join()
print("epoch 2 done", file=sys.stderr)
sys.stdout.write("the last line has no end 42")
"""


def _env(**more) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8", **more}


def _plain(script) -> list[str]:
    return [sys.executable, str(script)]


def _bootstrap(script) -> list[str]:
    """What `scaldiag profile` starts as its child, with the child's streams (the launcher's)."""
    return [sys.executable, "-m", "scaldiag.collect.bootstrap", str(script)]


def _profile(script, out) -> list[str]:
    return [sys.executable, "-m", "scaldiag", "profile", "-q", "--out", str(out), str(script)]


def _on_a_pipe(command, env, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, env=env, cwd=cwd, timeout=240)


def _on_a_terminal(command, env, cwd, timeout_s: float = 240.0) -> bytes:
    """Everything the command writes to a terminal (stdout and stderr both on it, as in a shell)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env, cwd=cwd
    )
    os.close(follower)
    chunks, deadline = [], time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if not ready:
                continue
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=max(1.0, deadline - time.monotonic())) == 0
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
    return b"".join(chunks)


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    where = tmp_path_factory.mktemp("script")
    path = where / "clocks.py"
    path.write_text(SCRIPT, encoding="utf-8")
    return path


@pytest.mark.slow
def test_the_output_to_a_pipe_is_the_same_bytes_with_and_without_capture(script, tmp_path):
    plain = _on_a_pipe(_plain(script), _env(), tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.startswith(b"isatty False False\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    child = _on_a_pipe(_bootstrap(script), _env(SCALDIAG_RUN_DIR=str(run_dir)), tmp_path)
    assert (child.returncode, child.stdout, child.stderr) == (0, plain.stdout, plain.stderr)
    assert read_jsonl(run_dir / PRINTED)  # the capture was on

    # Under `scaldiag profile` itself: the script's bytes, then the report after them.
    profiled = _on_a_pipe(_profile(script, tmp_path / "runs"), _env(), tmp_path)
    assert profiled.returncode == 0, profiled.stderr[-2000:]
    assert profiled.stdout.startswith(plain.stdout)
    assert profiled.stderr.startswith(plain.stderr)
    (run,) = (tmp_path / "runs").iterdir()
    assert read_jsonl(run / PRINTED)


@pytest.mark.slow
def test_the_output_to_a_terminal_is_the_same_bytes_with_and_without_capture(script, tmp_path):
    plain = _on_a_terminal(_plain(script), _env(), tmp_path)
    assert plain.startswith(b"isatty True True\r\n")  # the terminal's own \n -> \r\n
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    child = _on_a_terminal(_bootstrap(script), _env(SCALDIAG_RUN_DIR=str(run_dir)), tmp_path)
    assert child == plain
    assert read_jsonl(run_dir / PRINTED)
    profiled = _on_a_terminal(_profile(script, tmp_path / "runs"), _env(), tmp_path)
    assert profiled.startswith(plain)
    (run,) = (tmp_path / "runs").iterdir()
    assert read_jsonl(run / PRINTED)


@pytest.mark.slow
def test_printed_jsonl_holds_the_segments_with_a_digit_in_order(script, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    before_ns = time.time_ns()
    child = _on_a_pipe(_bootstrap(script), _env(SCALDIAG_RUN_DIR=str(run_dir)), tmp_path)
    after_ns = time.time_ns()
    assert child.returncode == 0, child.stderr
    rows = read_jsonl(run_dir / PRINTED)
    got = [(r["stream"], r["text"], r["end"]) for r in rows]
    bar = [
        ("stderr", f"{i * 10:3d}%|{'#' * i}{' ' * (10 - i)}| {i}/10 [00:00<00:00, 123.45it/s]", e)
        for i, e in zip(range(11), ["\r"] * 10 + ["\n"])
    ]
    keras = [
        ("stdout", f"{i}/5 ━━━━━━━━ 0s 3ms/step - loss: 0.{i}", e)
        for i, e in zip(range(1, 6), ["\r"] * 4 + ["\n"])
    ]  # the \b runs taken out
    assert got == [
        *bar,
        *keras,
        ("stdout", "époque 1: 12.5 ms/step — ✓", "\n"),
        ("stdout", "step 3 took 0.25 s", "\n"),
        ("stdout", "from a thread: 7 it/s", "\n"),
        ("stderr", "epoch 2 done", "\n"),
        ("stdout", "the last line has no end 42", ""),
    ]
    stamps = [r["t_ns"] for r in rows]
    assert stamps == sorted(stamps)
    assert before_ns <= stamps[0] and stamps[-1] <= after_ns
    assert all(set(r) == {"t_ns", "stream", "text", "end"} for r in rows)


def _capture_over(tmp_path, **bounds):
    """A capture into tmp_path's printed.jsonl, and a stream that reads a real file through it."""
    capture = PrintedCapture(tmp_path / PRINTED, **bounds)
    original = open(tmp_path / "out.txt", "w", encoding="utf-8")  # noqa: SIM115 (closed by caller)
    return capture, original, PrintedStream(original, "stdout", capture)


def test_past_its_bound_in_rows_one_last_row_counts_what_was_dropped(tmp_path):
    capture, original, stream = _capture_over(tmp_path, max_records=3)
    for i in range(10):
        print(f"step {i}", file=stream)
    print("no clock", file=stream)
    capture.finish()
    original.close()
    rows = read_jsonl(tmp_path / PRINTED)
    assert [r.get("text") for r in rows[:3]] == ["step 0", "step 1", "step 2"]
    assert rows[3:] == [{"dropped": 7}]
    expected = "".join(f"step {i}\n" for i in range(10)) + "no clock\n"
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == expected  # all passed through


def test_past_its_bound_in_bytes_the_file_stays_under_it(tmp_path):
    line_bytes = len(json.dumps({"t_ns": time.time_ns(), "stream": "stdout", "text": "step 10",
                                 "end": "\n"}, separators=(",", ":"))) + 1  # fmt: skip
    capture, original, stream = _capture_over(tmp_path, max_bytes=4 * line_bytes)
    for i in range(10, 30):
        print(f"step {i}", file=stream)
    capture.finish()
    original.close()
    rows = read_jsonl(tmp_path / PRINTED)
    assert [r.get("text") for r in rows[:-1]] == ["step 10", "step 11", "step 12", "step 13"]
    assert rows[-1] == {"dropped": 16}
    assert (tmp_path / PRINTED).stat().st_size <= 4 * line_bytes + len('{"dropped":16}\n')


def test_a_long_segment_is_cut_and_a_redraw_is_read_without_its_backspaces(tmp_path):
    capture, original, stream = _capture_over(tmp_path)
    stream.write("1" * (printed.MAX_TEXT_CHARS + 50))
    stream.write("\n")
    stream.write("\b\b\b\b\r12/20 3ms/step\b\b")
    stream.write("\r\n")  # a Windows line end: an empty segment after the \r, not recorded
    capture.finish()
    original.close()
    rows = read_jsonl(tmp_path / PRINTED)
    assert [(r["text"], r["end"]) for r in rows] == [
        ("1" * printed.MAX_TEXT_CHARS, "\n"),
        ("12/20 3ms/step", "\r"),
    ]


def test_scaldiag_s_own_lines_are_not_the_script_s(tmp_path):
    capture, original, stream = _capture_over(tmp_path)
    print("scaldiag: cannot hook torch 2.9 (ValueError: x)", file=stream)
    print("epoch 3", file=stream)
    capture.finish()
    original.close()
    assert [r["text"] for r in read_jsonl(tmp_path / PRINTED)] == ["epoch 3"]


def test_lines_written_from_many_threads_at_once_are_each_recorded_once(tmp_path):
    capture, original, stream = _capture_over(tmp_path)
    start = threading.Barrier(4)

    def write_lines(k: int) -> None:
        start.wait()
        for i in range(300):
            stream.write(f"thread {k} step {i}\n")  # one write a line: whole lines in the output

    threads = [threading.Thread(target=write_lines, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    capture.finish()
    original.close()
    rows = read_jsonl(tmp_path / PRINTED)
    written = {f"thread {k} step {i}" for k in range(4) for i in range(300)}
    assert sorted(r["text"] for r in rows) == sorted(written)
    stamps = [r["t_ns"] for r in rows]
    assert stamps == sorted(stamps)
    # (The file itself is not compared: CPython's TextIOWrapper is not thread-safe, and a
    # block-buffered file written by 4 threads at once loses lines or gains NULs with or without
    # the capture, seen here on 3.11.)


def test_a_failing_write_raises_as_the_original_s_would(tmp_path):
    capture, original, stream = _capture_over(tmp_path)
    original.close()
    with pytest.raises(ValueError, match="closed file"):
        stream.write("step 1\n")
    with pytest.raises(TypeError):
        stream.write(b"bytes are not text")
    assert capture.on
    capture.finish()


def test_the_stream_answers_as_the_original_does(tmp_path):
    capture, original, stream = _capture_over(tmp_path)
    assert stream.isatty() is original.isatty() is False
    assert stream.fileno() == original.fileno()
    assert (stream.encoding, stream.errors) == (original.encoding, original.errors)
    assert stream.buffer is original.buffer and stream.line_buffering == original.line_buffering
    assert repr(stream) == repr(original)
    stream.reconfigure(line_buffering=True)
    assert original.line_buffering
    stream.writelines(["a 1\n", "b 2\n"])
    stream.flush()
    capture.finish()
    original.close()
    assert (tmp_path / "out.txt").read_text() == "a 1\nb 2\n"
    assert [r["text"] for r in read_jsonl(tmp_path / PRINTED)] == ["a 1", "b 2"]


def test_a_file_that_cannot_be_written_turns_the_capture_off_not_the_script(tmp_path, capsys):
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full (a device whose writes fail: ENOSPC)")
    os.symlink("/dev/full", tmp_path / PRINTED)
    capture, original, stream = _capture_over(tmp_path)
    print("step 1", file=stream)
    capture.finish()
    print("step 2", file=stream)  # after the capture: passed through as before
    original.close()
    assert (tmp_path / "out.txt").read_text() == "step 1\nstep 2\n"
    assert not capture.on
    assert "printed lines are no longer recorded" in capsys.readouterr().err


@pytest.mark.slow
def test_a_forked_child_neither_records_nor_writes_the_parent_s_rows_again(tmp_path):
    script = tmp_path / "forks.py"
    script.write_text(
        textwrap.dedent("""
        import os, sys
        print("before the fork 1", flush=True)
        pid = os.fork()
        if pid == 0:
            print("in the child 2", flush=True)
            sys.exit(0)  # the child leaves through the bootstrap's end, as a script's would
        os.waitpid(pid, 0)
        print("after the fork 3")
    """)
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    done = _on_a_pipe(_bootstrap(script), _env(SCALDIAG_RUN_DIR=str(run_dir)), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines() == [
        "before the fork 1", "in the child 2", "after the fork 3"
    ]  # fmt: skip
    texts = [r.get("text") for r in read_jsonl(run_dir / PRINTED)]
    assert texts == ["before the fork 1", "after the fork 3"]


@pytest.mark.slow
def test_exit_codes_and_tracebacks_are_the_script_s(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("print('epoch 1')\nraise ValueError('the script failed at step 7')\n")
    plain = _on_a_pipe(_plain(script), _env(), tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    child = _on_a_pipe(_bootstrap(script), _env(SCALDIAG_RUN_DIR=str(run_dir)), tmp_path)
    assert (child.returncode, child.stdout, child.stderr) == (1, plain.stdout, plain.stderr)
    assert b"ValueError: the script failed at step 7" in child.stderr
    assert [r["text"] for r in read_jsonl(run_dir / PRINTED)] == ["epoch 1"]


KERAS_FIT = """
import numpy as np
import keras
x = np.random.rand(320, 8).astype("float32")
y = np.random.randint(0, 2, 320)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(2)])
model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
model.fit(x, y, batch_size=32, epochs=2, verbose={verbose})
"""


@pytest.mark.slow
@pytest.mark.parametrize("verbose", [1, 2])
def test_a_real_keras_fit_s_progress_bar_is_recorded(tmp_path, verbose):
    pytest.importorskip("tensorflow")
    script = tmp_path / "fit.py"
    script.write_text(KERAS_FIT.format(verbose=verbose))
    env = _env(KERAS_BACKEND="tensorflow", CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    done = _on_a_pipe(_profile(script, tmp_path / "runs"), env, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = (tmp_path / "runs").iterdir()
    rows = [r for r in read_jsonl(run / PRINTED) if r["stream"] == "stdout"]
    texts = [re.sub(r"\x1b\[[0-9;]*m", "", r["text"]) for r in rows]  # colours aside
    assert texts.count("Epoch 1/2") == texts.count("Epoch 2/2") == 1
    if verbose == 1:  # the bar, redrawn with \r (Keras redraws on POSIX even to a pipe)
        ends = [(t, r["end"]) for t, r in zip(texts, rows) if re.match(r"\s*\d+/10 ", t)]
        assert ends and all(re.search(r"\d+(ms|us|s)/step", t) for t, _ in ends)
        assert ends[-1][0].lstrip().startswith("10/10") and ends[-1][1] == "\n"
        assert any(end == "\r" for _, end in ends)
    else:  # one line an epoch
        lines = [t for t in texts if re.fullmatch(r"10/10 - \S+ - \d+(ms|us|s)/step - .*", t)]
        assert len(lines) == 2, texts
    stamps = [r["t_ns"] for r in rows]
    assert stamps == sorted(stamps)


@pytest.mark.slow
def test_a_real_tqdm_bar_is_recorded(tmp_path):
    pytest.importorskip("tqdm")
    script = tmp_path / "loop.py"
    script.write_text(
        textwrap.dedent("""
        from tqdm import tqdm
        total = 0
        for i in tqdm(range(40), mininterval=0, desc="train"):
            total += sum(range(2000))
        print("total", total)
    """)
    )
    done = _on_a_pipe(_profile(script, tmp_path / "runs"), _env(), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = (tmp_path / "runs").iterdir()
    rows = read_jsonl(run / PRINTED)
    bar = [r for r in rows if r["stream"] == "stderr" and r["text"].startswith("train:")]
    assert bar and all(r["end"] == "\r" for r in bar[:-1]) and bar[-1]["end"] == "\n"
    assert "40/40" in bar[-1]["text"]
    assert all(re.search(r"(it/s|s/it)\] *$", r["text"]) for r in bar)  # padded to the last width
    assert [r["text"] for r in rows if r["stream"] == "stdout"] == [f"total {40 * 1999000}"]
