"""Evidence of what each PyTorch step was, from real CPU training under ``scaldiag profile``: epochs
from the
DataLoader, compiles from torch._dynamo's callbacks; on the CPU no device clock (host times are the
truth).
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from scaldiag.record.reader import read_record  # noqa: E402
from scaldiag.record.rundir import DEVICE_STEPS  # noqa: E402

pytestmark = pytest.mark.slow  # real PyTorch trainings under `scaldiag profile`

ROOT = Path(__file__).resolve().parent.parent

# Epochs of a DataLoader of 4 batches, a validation DataLoader after each; the script prints whether
# our compile callbacks are registered with torch._dynamo (eager PyTorch imports it itself at its
# first step).
EPOCHS = textwrap.dedent("""
    import sys
    import torch, torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset
    epochs, backend = int(sys.argv[1]), sys.argv[2]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    step_model = model if backend == "none" else torch.compile(model, backend=backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(TensorDataset(torch.randn(96, 16), torch.randint(0, 4, (96,))), batch_size=24)
    val = DataLoader(TensorDataset(torch.randn(48, 16), torch.randint(0, 4, (48,))), batch_size=24)
    for epoch in range(epochs):
        for x, y in train:
            loss = nn.functional.cross_entropy(step_model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
        with torch.no_grad():
            print("epoch", epoch, "val", sum(nn.functional.cross_entropy(step_model(x), y).item() for x, y in val))
    import torch._dynamo
    from scaldiag.collect.frameworks.torch_capture import CAPTURE
    print("listening", CAPTURE.compile_started in torch._dynamo.callback.callback_handler.start_callbacks)
    if backend != "none":  # torch._dynamo.reset() clears the callbacks: a compile after it is still seen
        torch._dynamo.reset()
        print("after reset", float(torch.compile(lambda t: (t * 2).sum(), backend="eager")(torch.ones(3))))
""")  # noqa: E501


def profile(tmp_path, *args):
    script = tmp_path / "train.py"
    script.write_text(EPOCHS)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "runs"
    result = subprocess.run(
        [sys.executable, "-m", "scaldiag", "profile", "--out", str(out), str(script), "--", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = list(out.iterdir())
    return run_dir, result.stdout


def marks_named(record, name):
    return [m for m in record.marks if m["mark"] == name]


def test_each_pass_over_the_dataloader_is_an_epoch_and_an_eager_script_compiles_nothing(tmp_path):
    run_dir, stdout = profile(tmp_path, "3", "none")
    assert "epoch 2 val" in stdout and "listening True" in stdout
    record = read_record(run_dir)
    steps = record.steps
    # 4 optimizer steps an epoch; the step open at an epoch's new iter() (from the last step()
    # before it to the first step() after it: validation, the new pass) ends in the new epoch, as
    # its first step.
    assert [s["step"] for s in steps] == list(range(12))
    assert [s["epoch"] for s in steps] == [0] * 4 + [1] * 4 + [2] * 4
    begins, ends = marks_named(record, "epoch_begin"), marks_named(record, "epoch_end")
    assert [m["epoch"] for m in begins] == [0, 1, 2] and [m["epoch"] for m in ends] == [0, 1, 2]
    for k in (
        1,
        2,
    ):  # the edge lies inside the epoch's first step: data ran out, then the new pass began
        first = steps[4 * k]
        assert first["begin_ns"] < ends[k - 1]["t_ns"] < begins[k]["t_ns"] < first["end_ns"]
    assert begins[0]["t_ns"] <= steps[0]["begin_ns"]
    assert (
        ends[2]["t_ns"] < marks_named(record, "fit_end")[0]["t_ns"]
    )  # the input ceiling's pass is no epoch
    # Eager: we listened to torch._dynamo and nothing compiled.
    assert record.training["compile_evidence"] == ["torch._dynamo"]
    assert marks_named(record, "compile") == []
    # The CPU: no device clock, the host's times are the truth.
    assert not (run_dir / DEVICE_STEPS).exists() and "device_clock" not in record.training


def test_torch_compile_is_marked_where_it_ran_the_first_step(tmp_path):
    run_dir, stdout = profile(tmp_path, "2", "aot_eager")
    assert "listening True" in stdout and "after reset 6.0" in stdout
    record = read_record(run_dir)
    steps = record.steps
    assert [s["epoch"] for s in steps] == [0] * 4 + [1] * 4
    compiles = marks_named(record, "compile")
    raw = [json.loads(line) for line in (run_dir / "marks.jsonl").read_text().splitlines()]
    assert all(
        set(m) == {"mark", "t_ns", "end_ns", "source"} and m["source"] == "torch._dynamo"
        for m in raw
        if m["mark"] == "compile"
    )
    assert all(m["t_ns"] < m["end_ns"] for m in compiles)
    # The forward and the backward graphs compile in the first step, inside it.
    first = [m for m in compiles if m["t_ns"] < steps[0]["end_ns"]]
    assert len(first) >= 1
    assert all(
        steps[0]["begin_ns"] <= m["t_ns"] and m["end_ns"] <= steps[0]["end_ns"] for m in first
    )
    # The validation forward (no_grad) recompiles: inside the edge step that begins epoch 1, not a
    # steady one.
    later = [m for m in compiles if steps[0]["end_ns"] <= m["t_ns"] < steps[-1]["end_ns"]]
    assert later and all(
        steps[4]["begin_ns"] <= m["t_ns"] and m["end_ns"] <= steps[4]["end_ns"] for m in later
    )
    # After torch._dynamo.reset(), still listening: the lambda's compile, after the training.
    assert any(m["t_ns"] > marks_named(record, "epoch_end")[-1]["t_ns"] for m in compiles)
    assert record.training["compile_evidence"] == ["torch._dynamo"]
