"""The capture's end after the script (collect/bootstrap.py ``finish_within``): a profiler or an
input pipeline that never returns there must not keep the user's finished script from ending; the
process leaves with the script's own status."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scaldiag.collect.bootstrap import exit_status

ROOT = Path(__file__).resolve().parents[1]


def test_the_exit_status_is_the_one_python_would_leave_with():
    assert exit_status(None) == 0
    assert exit_status(SystemExit()) == 0
    assert exit_status(SystemExit(3)) == 3
    assert exit_status(SystemExit("bye")) == 1
    assert exit_status(KeyboardInterrupt()) == 130
    assert exit_status(ValueError("x")) == 1


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


def test_an_end_that_hangs_leaves_with_the_script_s_status_and_its_traceback():
    done = _run("""
        import time
        from scaldiag.collect.bootstrap import finish_within
        try:
            raise ValueError("the script's own error")
        except ValueError as exc:
            finish_within(lambda: time.sleep(60), 0.5, exc)
        print("not reached")
    """)
    assert done.returncode == 1
    assert "the capture's end did not return within" in done.stderr
    assert "ValueError: the script's own error" in done.stderr
    assert "not reached" not in done.stdout


def test_an_end_that_returns_leaves_the_process_be():
    done = _run("""
        from scaldiag.collect.bootstrap import finish_within
        finish_within(lambda: None, 0.5, SystemExit(3))
        import time; time.sleep(1.0)  # past the limit: the watchdog has stood down
        print("after the end")
    """)
    assert done.returncode == 0 and "after the end" in done.stdout, done.stderr


@pytest.mark.slow
def test_a_loader_that_blocks_after_training_does_not_hold_the_script_under_profile(tmp_path):
    """A real case: the torch adapter iterates the DataLoader after training (the input ceiling);
    this script's dataset blocks once training is over (a source closed at the end, say). The
    script's status comes back, and the run is still reported."""
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import threading
        import torch, torch.nn as nn
        from torch.utils.data import DataLoader, Dataset

        CLOSED = threading.Event()

        class Source(Dataset):
            def __len__(self):
                return 24 * 40
            def __getitem__(self, i):
                if CLOSED.is_set():
                    threading.Event().wait()  # the source is gone: blocks for ever
                return torch.randn(8), torch.tensor(i % 2)

        model = nn.Linear(8, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in DataLoader(Source(), batch_size=24):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
        CLOSED.set()
        print("trained")
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "SCALDIAG_FINISH_LIMIT_S": "5"}  # fmt: skip
    out = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "scaldiag", "profile", "-q", "--out", str(out), str(script)],
        capture_output=True, text=True, env=env, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trained" in done.stdout
    assert "the capture's end did not return within 5 s" in done.stderr
    (run_dir,) = list(out.iterdir())
    report = subprocess.run(
        [sys.executable, "-m", "scaldiag", "report", str(run_dir)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-2000:]
