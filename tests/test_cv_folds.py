"""K-fold cross-validation under ``scaldiag profile`` (issue 46): a new model, optimizer and
DataLoaders per fold, each fold's training followed by its validation. Every fold's steps are
recorded, each fold's DataLoader passes are epochs, and each fold's validation is validation,
from the framework's evidence: which optimizer stepped, over which loader's batches, and the
models' ``eval()``/``train()`` switches (never from durations)."""

import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from conftest import profile_one_thread  # noqa: E402

from scaldiag.analyze import recorded_steps  # noqa: E402
from scaldiag.pipeline import analyze_run_dir  # noqa: E402
from scaldiag.record.reader import read_record  # noqa: E402

pytestmark = pytest.mark.slow  # real PyTorch trainings under `scaldiag profile`

ROOT = Path(__file__).resolve().parent.parent
CV = Path(__file__).resolve().parent / "cv_folds.py"
# tests/cv_folds.py: 1,152 samples in 3 folds, 768 to train on in batches of 64
STEPS_PER_PASS = 12


def profile(tmp_path, *args, script: Path = CV) -> Path:
    return profile_one_thread(tmp_path, script, *args)


def marks_named(record, *names) -> list[dict]:
    return [m for m in record.marks if m["mark"] in names]


def evaluations(record) -> list[tuple[int, int]]:
    return recorded_steps.mark_pairs(record.marks, "test_begin", "test_end")


def test_every_folds_steps_epochs_and_validation_are_read(tmp_path):
    run_dir = profile(tmp_path, "--folds", "3", "--epochs", "2")
    record = read_record(run_dir)
    per_fold = 2 * STEPS_PER_PASS
    leads = [
        (m["optimizer"], m["step"], m["new"], m["shares_parameters_with"])
        for m in marks_named(record, "optimizer")
        if m["role"] == "leads"
    ]
    # a new optimizer over a new model leads each fold (before: fold 1's steps alone)
    assert leads == [(0, 0, True, []), (1, per_fold, True, []), (2, 2 * per_fold, True, [])]
    assert len(record.steps) == 3 * per_fold
    # each fold's DataLoader is followed: two epochs a fold, each of one pass's steps
    begins = marks_named(record, "epoch_begin")
    assert [m["epoch"] for m in begins] == list(range(6))
    epochs = [row["epoch"] for row in record.steps]
    assert epochs == [k // STEPS_PER_PASS for k in range(3 * per_fold)]
    # each fold's validation (its own model's eval() ... train()) is marked: three of them
    assert len(evaluations(record)) == 3
    # ... between the fold's last pass and the next fold's first (the next fold's iter())
    ends = {m["epoch"]: m["t_ns"] for m in marks_named(record, "epoch_end")}
    starts = {m["epoch"]: m["t_ns"] for m in begins}
    for k, (begin, end) in enumerate(evaluations(record)):
        assert ends[2 * k + 1] <= begin and (k == 2 or end <= starts[2 * k + 2])
    analysis = analyze_run_dir(run_dir)
    assert analysis.steps.recorded == 3 * per_fold
    assert [(p.first_step, p.new_model) for p in analysis.phases] == [
        (0, False),
        (per_fold, True),
        (2 * per_fold, True),
    ]
    # no step holds a validation: it is validation's time, in the epochs it ran in
    periods = recorded_steps.periods(record.steps, record.training, record.marks)
    held = [
        (p.step, e) for p in periods for e in evaluations(record) if p.begin_ns < e[1] < p.end_ns
    ]
    assert not held
    parts = {p.part: p.seconds for p in analysis.accounting.parts}
    assert parts.get("validation", 0) > 0
    assert sum(e.validation_ns > 0 for e in analysis.epochs.epochs) == 2  # folds 1 and 2's


def test_folds_inside_each_epoch_lead_again(tmp_path):
    """Each epoch loops over the folds, each fold's model kept: each fold's optimizer leads its
    steps again in the next epoch (not a new phase: no warm-up)."""
    run_dir = profile(tmp_path, "--folds", "3", "--outer-epochs", "2")
    record = read_record(run_dir)
    leads = [
        (m["optimizer"], m["step"], m["new"])
        for m in marks_named(record, "optimizer")
        if m["role"] == "leads"
    ]
    n = STEPS_PER_PASS
    assert leads == [
        (0, 0, True),
        (1, n, True),
        (2, 2 * n, True),
        (0, 3 * n, False),
        (1, 4 * n, False),
        (2, 5 * n, False),
    ]
    assert len(record.steps) == 6 * n
    assert len(evaluations(record)) == 6
    periods = recorded_steps.periods(record.steps, record.training, record.marks)
    again = [p for p in periods if p.step in (3 * n, 4 * n, 5 * n)]
    assert recorded_steps.WARMUP not in {p.kind for p in again}


def test_validation_under_no_grad_alone_is_validation(tmp_path):
    """No model.eval(): each fold's pass over its validation DataLoader inside torch.no_grad()."""
    run_dir = profile(tmp_path, "--folds", "3", "--epochs", "2", "--no-eval-mode")
    record = read_record(run_dir)
    sources = [m.get("source") for m in marks_named(record, "test_begin", "test_end")]
    assert sources == ["torch.no_grad()"] * 6
    periods = recorded_steps.periods(record.steps, record.training, record.marks)
    spans = evaluations(record)
    held = [(p.step, e) for p in periods for e in spans if p.begin_ns < e[1] and e[0] < p.end_ns]
    assert not held


# Inside each step: a teacher's batch fetched under no_grad (one fetch), gradient clipping and an
# EMA update under no_grad (no fetch): all the step's, none evaluation.
IN_STEP = textwrap.dedent("""
    import torch, torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    model, teacher = nn.Linear(16, 4), nn.Linear(16, 4)
    ema = nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(24 * 12, 16), torch.randint(0, 4, (24 * 12,)))
    aux = iter(DataLoader(TensorDataset(torch.randn(24 * 12, 16)), batch_size=24))
    for x, y in DataLoader(data, batch_size=24):
        with torch.no_grad():
            soft = teacher(next(aux)[0])
        loss = nn.functional.cross_entropy(model(x), y) + (model(x) - soft).pow(2).mean()
        opt.zero_grad(); loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(0.9).add_(p, alpha=0.1)
""")


def test_no_grad_inside_a_step_is_the_steps(tmp_path):
    script = tmp_path / "in_step.py"
    script.write_text(IN_STEP)
    run_dir = profile(tmp_path, script=script)
    record = read_record(run_dir)
    assert len(record.steps) == 12
    assert not marks_named(record, "test_begin", "test_end")
