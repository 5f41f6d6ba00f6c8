"""Issue 34's smaller items: a script's own traceback under ``profile`` as ``python SCRIPT`` prints
it (none of scaldiag's bootstrap or runpy's frames before it); a Kineto trace of any name read as
one, by its content."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_users_traceback_starts_at_the_users_script(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("def f():\n    raise ValueError('boom')\n\nf()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    profiled = subprocess.run(
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
        text=True,
        env=env,
        timeout=120,
    )
    assert profiled.returncode == plain.returncode == 1
    traceback = profiled.stderr[
        profiled.stderr.index("Traceback") : profiled.stderr.index("ValueError: boom")
    ]
    assert "bootstrap" not in traceback and "runpy" not in traceback
    assert traceback == plain.stderr[: plain.stderr.index("ValueError: boom")]


def test_a_kineto_trace_saved_under_a_name_of_the_users_is_read_as_kineto(tmp_path, capsys):
    """Read by its content where its name says nothing (it was read as XPlane and refused)."""
    from scaldiag.cli import main

    source = ROOT / "fixtures" / "kineto" / "synthetic_gpu" / "rank0.pt.trace.json"
    renamed = tmp_path / "trace_of_tuesday"
    renamed.write_bytes(source.read_bytes())
    assert (
        main(["analyze", "--engine", "local:1", "--json", str(tmp_path / "a.json"), str(renamed)])
        == 0
    )
    assert (
        main(["analyze", "--engine", "local:1", "--json", str(tmp_path / "b.json"), str(source)])
        == 0
    )
    a, b = (json.loads((tmp_path / name).read_text()) for name in ("a.json", "b.json"))
    assert a["framework"] == b["framework"] == "pytorch" and a["event_count"] == b["event_count"]
    assert a["devices"] == b["devices"] and a["findings"] == b["findings"]


def test_a_file_that_is_not_json_text_is_refused_at_its_first_bad_byte(tmp_path, monkeypatch):
    """A sparse file (zeros after a JSON start): refused where the scanner stops, without the
    reference
    reader loading the whole file to say so (a 2 GiB one took 4.25 GB; issue 34, item 12)."""
    import pytest

    from scaldiag import native
    from scaldiag.errors import TraceError
    from scaldiag.readers import kineto
    from scaldiag.readers.kineto import fast as kineto_fast
    from scaldiag.readers.kineto import reference as kineto_json

    if native.enabled(kineto_fast._kineto_scan) is None:
        pytest.skip("the compiled scanner is not built here")
    sparse = tmp_path / "sparse.json"
    with open(sparse, "wb") as f:
        f.write(b'{"traceEvents": [')
        f.truncate(64 << 20)

    def whole_file(file):
        raise AssertionError("the reference reader loaded the whole file")

    monkeypatch.setattr(kineto_json, "read_file", whole_file)
    with pytest.raises(TraceError, match=r"not JSON text \(byte 17 is 0x00\)"):
        kineto._read_file(sparse)


def test_slow_events_are_parsed_one_at_a_time():
    """The scanner's slow events (ph B/E, args.device as text) parsed one by one, each let go: all
    of
    them as dicts at once took 17x the file's size (issue 34, item 12). A 16 MB file of B/E events:
    294 MiB peak before, 112 MiB after (the same JSON report)."""
    from scaldiag.readers.kineto.fast import _parsed

    slow = [(i, b'{"ph": "B", "ts": %d}' % i) for i in range(5)]
    events = _parsed(slow)
    first = next(events)
    assert first == (0, {"ph": "B", "ts": 0}) and len(slow) == 4  # the rest not parsed yet
    assert [seq for seq, _ in events] == [1, 2, 3, 4] and slow == []
