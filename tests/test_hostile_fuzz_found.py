"""What the long fuzz runs found (``python -m bench fuzz --mode job|calibration|kineto|rundir``,
issue 34).

Each test is the case the harness drew, cut down to its cause; each failed before its fix (a hang, a
case over 10 s, an exit 70) and passes now. The last tests run a few cases of the job and
calibration modes.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

from scaldiag.cli import main

GLOO = FIXTURES / "kineto" / "cpu_ddp_gloo" / "plugins" / "profile" / "torch"
SWEEP = FIXTURES / "runs" / "sweep"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def alarm():
    """A blocked call fails the test after 60 s instead of hanging it (a causal bound, not a
    timing)."""

    def stop(signum, frame):
        raise TimeoutError("still blocked after 60 s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "internal error" not in out.err, out.err
    return code, out.out, out.err


# -- calibration mode, case 31: $SCALDIAG_CALIBRATION naming a FIFO blocked every GPU sweep's report
# ----------


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_calibration_that_is_no_regular_file_is_noted_not_waited_on(
    tmp_path, capsys, monkeypatch, alarm, special
):
    path = tmp_path / "calibration.json"
    if special == "fifo":
        os.mkfifo(path)  # open() waited for a writer forever
    else:
        path = Path(special)
    monkeypatch.setenv("SCALDIAG_CALIBRATION", str(path))
    code, out, err = cli(capsys, "report", SWEEP, "--format", "json")
    assert code == 0, err
    assert "not a regular file" in out and "the defaults stand" in out


def test_a_calibration_in_the_cache_is_still_read(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "cache" / "scaldiag" / "interconnect"
    folder.mkdir(parents=True)
    rows = [
        {"bytes": m, "median_s": t, "min_s": t, "max_s": t, "repeats": 7}
        for m, t in ((8, 15e-6), (2**20, 25e-6), (2**26, 200e-6), (2**30, 2.9e-3))
    ]
    (folder / "h200.json").write_text(
        json.dumps(
            {
                "schema": "scaldiag.calibration/1",
                "measured_at": "2026-12-02T04:00:00Z",
                "device": "gpu",
                "framework": "torch",
                "backend": "nccl",
                "ranks": 2,
                "machine": {"gpu_name": "NVIDIA H200", "gpu_count": 2, "link": {"kind": "nvlink"}},
                "allreduce": rows,
            }
        )
    )
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SCALDIAG_CALIBRATION", raising=False)
    code, out, err = cli(capsys, "report", SWEEP, "--format", "json")
    assert code == 0, err
    assert "measured by scaldiag calibrate" in out and "h200.json" in out


# -- job mode, case 22 (seed 1): a rank's .json.gz made sparse (2 GiB of zeros after its gzip)
# ----------------- The stream reader checked every zero of the padding: 40 s for one rank of a job
# (or of `analyze`).


def _sparse_gz(path: Path, size: int) -> None:
    shutil.copy(GLOO / "rank0.pt.trace.json.gz", path)
    with path.open("r+b") as f:
        f.truncate(size)


def test_gigabytes_of_zeros_after_a_gzip_trace_are_refused_not_scanned(tmp_path, capsys):
    trace = tmp_path / "rank0.pt.trace.json.gz"
    _sparse_gz(trace, 2 << 30)
    code, _, err = cli(capsys, "analyze", trace)
    assert code == 2 and "MiB of zeros after its end" in err, err


def test_a_little_zero_padding_after_a_gzip_trace_is_still_read(tmp_path, capsys):
    trace = tmp_path / "rank0.pt.trace.json.gz"
    trace.write_bytes(
        (GLOO / "rank0.pt.trace.json.gz").read_bytes() + b"\0" * 10240
    )  # a tar block's padding
    code, out, err = cli(capsys, "analyze", trace, "--json", "-")
    assert code == 0, err
    assert json.loads(out)["event_count"] > 1000


def test_a_sparse_rank_of_a_job_is_left_out_and_named(tmp_path, capsys):
    dirs = []
    for k in range(3):
        d = tmp_path / f"node{k}"
        (d / "trace").mkdir(parents=True)
        node = {"nnodes": 3, "node_rank": k, "host": f"h{k}"}
        (d / "run.json").write_text(
            json.dumps({"node": node, "status": "finished", "exit_code": 0})
        )
        doc = json.loads(gzip.decompress((GLOO / f"rank{k % 2}.pt.trace.json.gz").read_bytes()))
        doc["baseTimeNanoseconds"] += (k // 2) * 10**6  # another rank, not a copy
        (d / "trace" / f"rank{k}.pt.trace.json.gz").write_bytes(
            gzip.compress(json.dumps(doc).encode())
        )
        dirs.append(d)
    _sparse_gz(dirs[2] / "trace" / "rank2.pt.trace.json.gz", 2 << 30)
    code, out, err = cli(capsys, "report", *dirs, "--format", "json", "--engine", "local:1")
    assert code == 0, err
    report = json.loads(out)
    assert [n["node"] for n in report["analysis"]["nodes"]] == ["h0/node0", "h1/node1"]
    assert any("zeros after its end" in n for n in report["analysis"]["notes"])


# -- a few cases of the new fuzz modes (the long runs: bench/results/fuzz_long_{job,calibration}.md)
# ------------


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["job", "calibration"])
def test_twenty_fuzz_cases_of_each_new_mode_pass(mode):
    sys.path.insert(0, str(ROOT))  # bench/ is the repository's, not an installed package
    from bench.fuzz import run as fuzz

    old = signal.getsignal(signal.SIGALRM)
    try:
        shard = fuzz._shard((mode, range(20), 0, None))
    finally:
        signal.signal(signal.SIGALRM, old)
    counts = shard["counts"]
    assert shard["ran"] == 20
    assert not shard["failures"], "\n".join(shard["failures"])
    assert (
        counts["uncaught"] == counts["exit 70"] == counts["over 10 s"] == counts["lost output"] == 0
    )
    assert counts["exit 0"] + counts["exit 1"] + counts["exit 2"] == 20, counts
