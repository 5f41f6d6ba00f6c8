"""Evaluation inside a PyTorch loop, from the model's own mode switches: not a slow step,
validation."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from scaldiag.analyze import recorded_steps  # noqa: E402
from scaldiag.pipeline import analyze_run_dir  # noqa: E402
from scaldiag.record.reader import read_record  # noqa: E402

pytestmark = pytest.mark.slow  # a real PyTorch training under `scaldiag profile`

ROOT = Path(__file__).resolve().parent.parent

# A hand-written loop with no DataLoader (no epoch marks): after each "epoch" of 20 steps, 0.3 s of
# evaluation between model.eval() and model.train(); a second model (an EMA copy, its own
# eval/train) holds none of the optimizer's parameters and marks nothing.
LOOP = textwrap.dedent("""
    import copy, time
    import torch, torch.nn as nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    ema = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
    for epoch in range(4):
        model.train()
        for step in range(20):
            model.train()  # some scripts say it every step: no switch, no mark
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
            time.sleep(0.005)
        ema.eval(); ema.train()
        model.eval()
        with torch.no_grad():
            time.sleep(0.3)
            model(x)
""")


def test_evaluation_between_steps_is_validation_not_a_step(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "--out",
            str(tmp_path / "runs"),
            "--global-batch",
            "32",
            str(script),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = list((tmp_path / "runs").iterdir())
    marks = [m["mark"] for m in read_record(run_dir).marks if m["mark"].startswith("test_")]
    # Three evaluations followed by model.train() inside training; the last is after the last step.
    assert marks[:6] == ["test_begin", "test_end"] * 3
    analysis = analyze_run_dir(run_dir)
    steps = analysis.steps
    # Before: the steps after each evaluation (20, 40, 60) held its 0.3 s and were outliers.
    assert not {20, 40, 60} & set(steps.outliers)
    # No steady step holds an evaluation: its 0.3 s is validation's, not spread over the steps.
    record = read_record(run_dir)
    marks = record.marks
    evaluations = [
        (b["t_ns"], e["t_ns"])
        for b, e in zip(
            [m for m in marks if m["mark"] == "test_begin"],
            [m for m in marks if m["mark"] == "test_end"],
        )
    ]
    steady = [
        p
        for p in recorded_steps.periods(record.steps, record.training, record.marks)
        if p.kind == recorded_steps.STEADY
    ]
    assert steady and len(evaluations) >= 3
    assert not [
        (p, e) for p in steady for e in evaluations if p.begin_ns < e[1] and e[0] < p.end_ns
    ]
    parts = {p.part: p.seconds for p in analysis.accounting.parts}
    assert (
        parts["validation"] >= 0.85
    )  # three evaluations of 0.3 s inside training (the fourth after it)
