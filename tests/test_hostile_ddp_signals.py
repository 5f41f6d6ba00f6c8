"""Signals and a rank's own exit under ``scaldiag profile --nproc-per-node 2`` (issue 22, item 10).

A tiny DDP loop (CPU, gloo, two ranks under torchrun) runs under ``scaldiag profile`` in a session
of its own (no terminal: a scheduler, ``timeout``, CI). Once both ranks train, a signal goes to the
launcher's process group, or rank 1 exits 3. ``profile`` exits as ``python SCRIPT`` would: 130 for
SIGINT, 143 for SIGTERM, the rank's own 3 (torchrun itself exits 1 whatever happened); the run's
``run.json`` and ``rank1/run.json`` say how each ended (before: 'finished' after the exit 3 and the
SIGINT, 'running' after SIGTERM).
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import ROOT, as_a_terminal_starts_it

from scaldiag.record.rundir import read_json

pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo"),
    pytest.mark.slow,
]  # torchrun jobs signalled in subprocesses

ENV = {
    **os.environ,
    "PYTHONPATH": str(ROOT),
    "COLUMNS": "100",
    "PYTHONUNBUFFERED": "1",
    "OMP_NUM_THREADS": "1",
}
START_S = 90  # two ranks importing torch on two shared cores (often busy with other tests)
END_S = 45

TRAIN = """
import sys, time
from pathlib import Path
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

mode, marks = sys.argv[1], Path(sys.argv[2])
dist.init_process_group("gloo")
rank = dist.get_rank()
model = DistributedDataParallel(nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 8), torch.randn(16, 2)
for step in range(10_000):
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step == 1:
        (marks / f"training{rank}").write_text("")
        if mode == "exit3" and rank == 1:
            sys.exit(3)
    time.sleep(0.1)  # most of a step: a signal finds each rank here, not inside the all-reduce
"""


def start(tmp_path, mode):
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    marks = tmp_path / "marks"
    marks.mkdir()
    log = open(tmp_path / "log.txt", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "--nproc-per-node",
            "2",
            "--out",
            str(tmp_path / "runs"),
            "train.py",
            "--",
            mode,
            str(marks),
        ],
        env=ENV,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=as_a_terminal_starts_it(),
        cwd=tmp_path,
    )
    return proc, marks


def wait_training(proc, marks, tmp_path):
    deadline = time.monotonic() + START_S
    while not all((marks / f"training{r}").exists() for r in (0, 1)):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            pytest.fail(
                f"the ranks did not start training:\n{(tmp_path / 'log.txt').read_text()[-3000:]}"
            )
        time.sleep(0.1)


def finish(proc, tmp_path) -> int:
    try:
        return proc.wait(END_S)
    except subprocess.TimeoutExpired:
        stop(proc)
        pytest.fail(f"profile did not end:\n{(tmp_path / 'log.txt').read_text()[-3000:]}")


def stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def records(tmp_path):
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    return read_json(run, "run.json"), read_json(run / "rank1", "run.json")


def test_sigint_to_the_group_exits_130_and_every_rank_reads_interrupted(tmp_path):
    proc, marks = start(tmp_path, "loop")
    wait_training(proc, marks, tmp_path)
    os.killpg(proc.pid, signal.SIGINT)
    assert finish(proc, tmp_path) == 130, (tmp_path / "log.txt").read_text()[-3000:]
    job, rank1 = records(tmp_path)
    assert (job["status"], job["exit_code"]) == ("interrupted", -2)
    assert job["signals_received"] == ["SIGINT"]
    assert (rank1["status"], rank1["exit_code"], rank1["signal"]) == ("interrupted", -2, "SIGINT")


def test_sigterm_to_the_group_exits_143_and_rank1_is_not_left_running(tmp_path):
    proc, marks = start(tmp_path, "loop")
    wait_training(proc, marks, tmp_path)
    os.killpg(proc.pid, signal.SIGTERM)  # what a scheduler or `timeout` does
    assert finish(proc, tmp_path) == 143, (tmp_path / "log.txt").read_text()[-3000:]
    job, rank1 = records(tmp_path)
    assert (job["status"], job["exit_code"], job["signal"]) == ("interrupted", -15, "SIGTERM")
    # Rank 1 died of torchrun's SIGTERM without its `finally:`: finalised from the exit code
    # torchrun saw.
    assert (rank1["status"], rank1["exit_code"], rank1["signal"]) == ("interrupted", -15, "SIGTERM")
    assert rank1["signals_received"] == ["SIGTERM"] and rank1["ended_ns"] > rank1["started_ns"]


def test_a_ranks_exit_code_is_the_jobs_and_its_record_says_failed(tmp_path):
    proc, marks = start(tmp_path, "exit3")
    assert finish(proc, tmp_path) == 3, (tmp_path / "log.txt").read_text()[-3000:]
    job, rank1 = records(tmp_path)
    assert (job["status"], job["exit_code"]) == ("failed", 3)
    assert (rank1["status"], rank1["exit_code"]) == ("failed", 3)
    assert (
        "ChildFailedError" in (tmp_path / "log.txt").read_text()
    )  # torchrun's report of the failed rank
