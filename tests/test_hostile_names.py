"""Hostile names, an honest headline, and the edges of a run (issue 22, items 9, 11, 12).

Every test runs the CLI as a subprocess on files crafted in tmp_path:
file and directory names holding escape sequences, bidirectional marks and
newlines; a megabyte name; a device busy under 1% of its steps; a closed
stdout; rank files that are not one run's; a directory of two formats; a
file size limit in the middle of a run.
"""

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys

import pytest
from conftest import FIXTURES, ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
# What a terminal acts on or reorders by: ESC, BEL, CSI, the C1 NEL, the bidi marks and overrides.
FORBIDDEN = [
    "\x1b",
    "\x07",
    "\x9b",
    "\x85",
    "\r",
    "\u202e",
    "\u200e",
    "\u200f",
    "\u061c",
    "\u2066",
    "\u2028",
]
# A name that clears the screen, sets the window title, reorders the line and forges a line of its
# own.
EVIL = "ev\x1b[2J\x1b]0;pwned\x07il\u202e\u200e\u200f\u061c\nscaldiag: forged line"


def scaldiag(*args, **kw):
    r = subprocess.run(
        [sys.executable, "-m", "scaldiag", *map(str, args)],
        capture_output=True,
        env=ENV,
        timeout=120,
        **kw,
    )
    return r.returncode, r.stdout.decode("utf-8"), r.stderr.decode("utf-8")


def assert_inert(text: str) -> None:
    for ch in FORBIDDEN:
        assert ch not in text, f"{ch!r} reached the terminal"
    assert not any(line.startswith("scaldiag: forged") for line in text.splitlines()), (
        "a name forged a line"
    )
    assert "Traceback" not in text


def kineto(
    kernel_us=7, step_us=1000, steps=8, op="aten::mm", rank=None, world=2, sync=False
) -> dict:
    """A small PyTorch trace: ProfilerStep spans on one thread, one kernel a step on device 0."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "ts": 0, "args": {"name": "python"}}
    ]
    for s in range(steps):
        t = s * step_us
        events += [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{s}",
                "pid": 1,
                "tid": 1,
                "ts": t,
                "dur": step_us - 1,
            },
            {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": t + 1, "dur": 3},
            {
                "ph": "X",
                "cat": "kernel",
                "name": "gemm_kernel",
                "pid": 0,
                "tid": 7,
                "ts": t + 5,
                "dur": kernel_us,
                "args": {"device": 0, "stream": 7},
            },
        ]
        if (
            sync
        ):  # the host waits on the device for the rest of the step: no host cause, the device idle
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaDeviceSynchronize",
                    "pid": 1,
                    "tid": 1,
                    "ts": t + 20,
                    "dur": step_us - 30,
                }
            )
    doc = {"schemaVersion": 1, "baseTimeNanoseconds": 1790000000000000000, "traceEvents": events}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    return doc


def write(path, doc) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return str(path)


# Item 9: one sanitiser for every line that shows a name.


def test_a_file_name_that_is_no_trace_gives_one_inert_error_line(tmp_path):
    bad = tmp_path / f"{EVIL}.pt.trace.json"
    bad.write_text("{not json")
    code, out, err = scaldiag("analyze", bad)
    assert code == 2 and out == ""
    assert_inert(err)
    assert len(err.splitlines()) == 1 and err.startswith("scaldiag: error: ")
    assert (
        "\\x1b]0;pwned\\x07" in err and "\\u202e\\u200e\\u200f\\u061c\\n" in err
    )  # shown, not dropped


def test_a_missing_path_with_escapes_is_one_inert_line(tmp_path):
    code, out, err = scaldiag("analyze", tmp_path / EVIL)
    assert code == 2 and len(err.splitlines()) == 1
    assert_inert(err)


def test_a_directory_name_with_escapes_is_inert_in_the_report(tmp_path):
    run = tmp_path / EVIL.replace("/", "_")
    write(run / "rank0.pt.trace.json", kineto(rank=0))
    write(run / "rank1.pt.trace.json", kineto(rank=1))
    code, out, err = scaldiag("analyze", run)
    assert code == 0, err
    assert_inert(out + err)
    assert out.startswith("scaldiag analyze: ev\\x1b[2J")


def test_a_megabyte_name_is_shortened_and_says_so(tmp_path):
    path = write(tmp_path / "big.pt.trace.json", kineto(op="op" + "x" * 1_000_000 + EVIL))
    code, out, err = scaldiag("analyze", path)
    assert code == 0, err
    assert_inert(out + err)
    assert "charactersleftout]" in re.sub(r"[\s│┃]", "", out)  # folded over the table's lines
    assert len(out) < 60_000  # a 1 MB name printed in full before


def test_the_run_directory_line_of_profile_is_inert(tmp_path):
    script = tmp_path / "ev\x1b]0;t\x07\u202eil.py"
    script.write_text("print('trained')\n")
    code, out, err = scaldiag("profile", "-q", "--out", tmp_path / "runs", script, cwd=tmp_path)
    assert code == 0, err
    assert_inert(out + err)
    line = next(x for x in err.splitlines() if x.startswith("scaldiag: run directory "))
    assert "\\x1b]0;t\\x07\\u202eil" in line


# Item 11: the headline and SD106 say what is true.


def test_a_device_busy_under_one_percent_is_not_called_compute_bound(tmp_path):
    path = write(tmp_path / "idle.pt.trace.json", kineto(kernel_us=6.6, sync=True))
    code, out, err = scaldiag("analyze", path, "--json", "-")
    assert code == 0, err
    report = json.loads(out)
    assert not report["verdict"].startswith("Compute-bound")
    assert report["verdict"].startswith("Waiting, not computing") and "SD106" in report["verdict"]
    sd106 = next(f for f in report["findings"] if f["id"] == "SD106")
    # The arithmetic printed is the arithmetic done (was "100 / 0.7 = 100.00x": busy clamped to 1%).
    shown, ceiling = re.search(
        r"100 / ([0-9.]+) = ([0-9.]+)x", sd106["predicted_speedup"]["arithmetic"]
    ).groups()
    assert float(ceiling) == pytest.approx(100 / float(shown), abs=0.006)
    assert float(ceiling) > 100
    assert f"busy {shown}%" in sd106["summary"]


def test_a_busy_device_without_a_cause_is_still_compute_bound(tmp_path):
    path = write(tmp_path / "busy.pt.trace.json", kineto(kernel_us=950, sync=True))
    code, out, err = scaldiag("analyze", path, "--json", "-")
    assert code == 0, err
    report = json.loads(out)
    assert report["verdict"].startswith("Compute-bound") and "SD106" not in report["verdict"]


# Item 12: a closed stdout, doubtful rank files, two formats, a full disk.


@pytest.mark.parametrize("extra", [[], ["--json", "-"]])
def test_a_closed_stdout_is_not_an_error(tmp_path, extra):
    path = write(tmp_path / "t.pt.trace.json", kineto())
    proc = subprocess.Popen(
        [sys.executable, "-m", "scaldiag", "analyze", path, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    proc.stdout.close()  # the reader has gone before the first byte, as `| head -1` after its line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and err == ""


def test_head_minus_one_in_a_shell_pipe(tmp_path):
    path = write(tmp_path / "t.pt.trace.json", kineto())
    r = subprocess.run(
        [
            "bash",
            "-c",
            (
                f'"{sys.executable}" -m scaldiag analyze "{path}" | head -1; '
                'echo "rc=${PIPESTATUS[0]}"'
            ),
        ],
        capture_output=True,
        env=ENV,
        timeout=120,
    )
    assert r.stdout.decode().splitlines() == ["scaldiag analyze: t.pt.trace.json", "rc=0"]
    assert r.stderr == b""


def test_check_keeps_its_verdict_when_stdout_closes(tmp_path):
    run = FIXTURES / "runs" / "gpu1_slow"
    proc = subprocess.Popen(
        [sys.executable, "-m", "scaldiag", "check", run, "--max-step-ms", "0.001"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    proc.stdout.close()
    assert proc.wait(timeout=120) == 1 and proc.stderr.read() == b""


def test_the_same_rank_twice_is_said(tmp_path):
    write(tmp_path / "d" / "a.pt.trace.json", kineto(rank=0))
    write(tmp_path / "d" / "b.pt.trace.json", kineto(rank=0))
    code, out, err = scaldiag("analyze", tmp_path / "d", "--json", "-")
    assert code == 0, err
    assert any(n.startswith("rank 0 is in 2 files") for n in json.loads(out)["notes"])


def test_rank_files_of_different_runs_are_said(tmp_path):
    other = kineto(rank=1, world=4)
    other["distributedInfo"]["backend"] = "gloo"
    write(tmp_path / "d" / "rank0.pt.trace.json", kineto(rank=0))
    write(tmp_path / "d" / "rank1.pt.trace.json", other)
    code, out, err = scaldiag("analyze", tmp_path / "d", "--json", "-")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any("different world sizes (2, 4)" in n for n in notes)
    assert any("different backends (gloo, nccl)" in n for n in notes)


def test_rank_files_apart_in_time_are_said_or_refused(tmp_path):
    later = kineto(rank=1, steps=4, step_us=1000)
    for e in later["traceEvents"]:
        e["ts"] += 10_000  # 10 ms after rank0's last event: no instant shared
    write(tmp_path / "d" / "rank0.pt.trace.json", kineto(rank=0, steps=4))
    write(tmp_path / "d" / "rank1.pt.trace.json", later)
    code, out, err = scaldiag("analyze", tmp_path / "d", "--json", "-")
    # Without a collective to align on, the clock-skew check refuses a rank a step away (item 7);
    # either way the user is told, never a silent merge.
    assert (code == 2 and "rank1" in err) or any(
        "share no instant" in n for n in json.loads(out)["notes"]
    )


def test_one_run_of_real_ranks_gets_no_such_note():
    code, out, err = scaldiag(
        "analyze", FIXTURES / "x2_devset" / "torch_ddp_sync_2gpu", "--json", "-"
    )
    assert code == 0, err
    assert not [
        n
        for n in json.loads(out)["notes"]
        if "rank 0 is in" in n or "different" in n or "no instant" in n
    ]


def test_a_directory_of_xplane_and_kineto_says_which_was_left_out(tmp_path):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(FIXTURES / "x2_devset" / "keras_jax_mlp_sync_2gpu.xplane.pb", mixed)
    write(mixed / "rank0.pt.trace.json", kineto(rank=0))
    code, out, err = scaldiag("analyze", mixed)
    assert code == 0, err
    flat = " ".join(out.split())
    assert "also holds kineto trace files, left out: only the xplane files are read" in flat


def _small_files():
    signal.signal(
        signal.SIGXFSZ, signal.SIG_IGN
    )  # a write past the limit fails (EFBIG), as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))  # run.json (~550 bytes) cannot be written


def test_a_full_disk_leaves_no_temporary_run_files(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint('trained')\nsys.exit(3)\n")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "-q",
            "--out",
            str(tmp_path / "runs"),
            str(script),
        ],
        capture_output=True,
        env=ENV,
        timeout=120,
        preexec_fn=_small_files,
    )
    assert r.returncode == 3, r.stderr.decode()
    assert "Traceback" not in r.stderr.decode()
    runs = list((tmp_path / "runs").iterdir())
    assert runs, "the run directory was made"
    left = [p for p in (tmp_path / "runs").rglob("*") if p.name.endswith(".tmp")]
    assert left == [], f"temporaries left behind: {left}"
