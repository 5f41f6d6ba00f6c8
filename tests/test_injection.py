"""Every string from a trace, a script or a run record is inert in every output.

Names with rich markup, ANSI/OSC escape sequences, C0/C1 controls, NUL and
bidirectional overrides are put everywhere a name is shown (op, kernel,
host event, thread, stream, host name, run name, framework versions, the
command, evidence gaps), then ``scaldiag analyze`` and ``scaldiag report``
run as subprocesses, at 80 and 120 columns and as JSON.
"""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from xspace_builder import PlaneBuilder, new_space, write

from scaldiag.record.rundir import STEPS, write_json

US = 1000
LINK = "[link=file:///etc/passwd]x[/link]"
EVIL = [
    LINK,
    "read_shard[/data/train]",
    "ComputeSemaphoreAcquire [capacity=32, value=32]",
    "[bold red]",
    "cls\x1b[2J\x1b]0;pwned\x07",
    "osc8\x1b]8;;http://evil\x1b\\l\x1b]8;;\x1b\\",
    "c0\x07\x08\r\x0b\x0c",
    "c1\x9b31m\x85\x90",
    "nul\x00x",
    "bidi\u202eabc\u2066",
]
# Bytes a terminal acts on: ESC, CSI, BEL, BS, CR, VT, FF, NUL, the C1 controls, the bidi overrides.
FORBIDDEN = [
    "\x1b",
    "\x9b",
    "\x07",
    "\x08",
    "\r",
    "\x0b",
    "\x0c",
    "\x00",
    "\x85",
    "\x90",
    "\u202e",
    "\u2066",
]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def evil_trace(path):
    space = new_space()
    space.hostnames[0] = "host" + EVIL[4]
    gpu = PlaneBuilder(space, "/device:GPU:0")
    compute = gpu.line("Stream #1(Compute)" + EVIL[8])
    copies = gpu.line("Stream #2(MemcpyH2D)" + EVIL[5])
    host = PlaneBuilder(space, "/host:CPU")
    main = host.line("python" + EVIL[4])
    for step in range(6):
        t = step * 1000 * US
        for i, name in enumerate(EVIL):
            gpu.event(compute, name, t + 10 * US + i * 50 * US, 40 * US)
        gpu.event(
            copies,
            "MemcpyH2D",
            t + 600 * US,
            300 * US,
            memcpy_details="kind_src:pageable kind_dst:device size:1000" + EVIL[0],
        )
        host.event(main, "train", t, 990 * US, step_num=step, _r=1)
        for i, name in enumerate(EVIL):
            host.event(main, name, t + 5 * US + i * 60 * US, 50 * US)
        host.event(main, "IteratorGetNext" + EVIL[8], t + 900 * US, 80 * US)
    return write(space, path)


def scaldiag(*args, columns=120):
    result = subprocess.run(
        [sys.executable, "-m", "scaldiag", *map(str, args)],
        capture_output=True,
        env={**ENV, "COLUMNS": str(columns)},
    )
    return result.returncode, result.stdout.decode("utf-8"), result.stderr.decode("utf-8")


def assert_inert(text):
    for ch in FORBIDDEN:
        assert ch not in text, f"{ch!r} reached the terminal"
    assert "Traceback" not in text


@pytest.mark.parametrize("columns", [80, 120])
def test_trace_names_are_printed_literally_by_analyze(tmp_path, columns):
    path = evil_trace(tmp_path / "evil.xplane.pb")
    code, out, err = scaldiag("analyze", path, columns=columns)
    assert code == 0, err
    assert_inert(out + err)
    # Markup is shown as the text it is, never interpreted (no link, no missing bracket).
    flat = out.replace("\n", "")
    assert "[link=file:///etc/passwd]" in flat or "[link=file:///" in flat
    assert "\\x1b" in out or "\\x00" in out  # controls are shown escaped, not dropped silently


def test_trace_names_stay_raw_in_json(tmp_path):
    path = evil_trace(tmp_path / "evil.xplane.pb")
    code, out, err = scaldiag("analyze", path, "--json", "-")
    assert code == 0, err
    assert "\x1b" not in out and "\x00" not in out  # JSON escapes controls: \u001b, \u0000
    report = json.loads(out)
    text = json.dumps(report, ensure_ascii=False)
    assert any(name in text for name in (LINK, "nul\\u0000x")), "names should be kept as they are"
    strings = list(_strings(report))
    assert any(
        "\x00" in s for s in strings
    )  # the raw string, NUL included, round-trips through JSON


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def evil_run_dir(tmp_path):
    run_dir = tmp_path / "run"
    logdir = run_dir / "trace" / "plugins" / "profile" / ("run" + EVIL[4])
    logdir.mkdir(parents=True)
    evil_trace(logdir / "host.xplane.pb")
    write_json(
        run_dir,
        "run.json",
        {
            "status": "finished" + EVIL[6],
            "exit_code": 0,
            "command": ["python", "train.py", *EVIL],
            "missing": list(EVIL),
        },
    )
    write_json(
        run_dir,
        "training.json",
        {
            "framework": {
                "name": "keras" + EVIL[0],
                "backend": "tensorflow",
                "versions": {"keras" + EVIL[3]: "3" + EVIL[4]},
            },
            "global_batch": 32,
            "replicas": 1,
            "per_replica_batch": 32,
            "warmup_steps": 1,
            "batch_source": EVIL[1],
        },
    )
    write_json(
        run_dir,
        "inventory.json",
        {"gpus": [{"index": 0, "name": "H200" + EVIL[5], "uuid": "GPU-" + EVIL[8]}]},
    )
    rows = [
        {"step": i, "epoch": 0, "begin_ns": i * 10_000_000, "end_ns": (i + 1) * 10_000_000}
        for i in range(12)
    ]
    (run_dir / STEPS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


@pytest.mark.parametrize("columns", [80, 120])
def test_run_record_strings_are_inert_in_report(tmp_path, columns):
    run_dir = evil_run_dir(tmp_path)
    code, out, err = scaldiag("report", run_dir, columns=columns)
    assert code == 0, err
    assert_inert(out + err)
    assert "read_shard[/data/train]" in out.replace("\n", "") or "[/data/train]" in out


def test_run_record_strings_stay_raw_in_report_json(tmp_path):
    run_dir = evil_run_dir(tmp_path)
    code, out, err = scaldiag("report", run_dir, "--json", "-")
    assert code == 0, err
    report = json.loads(out)
    assert LINK in list(_strings(report))
