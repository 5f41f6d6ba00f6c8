"""``scaldiag.capture()`` in this very process, as in a notebook's kernel: a Keras fit and a PyTorch
loop, each captured twice in a row; every patch taken back after the block (training after it is
not recorded); an exception in the block propagates unchanged after a partial record is closed;
the ``%%scaldiag`` cell magic in IPython's own shell."""

import json
import os

import pytest

pytestmark = pytest.mark.slow
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

torch = pytest.importorskip("torch")
keras = pytest.importorskip("keras")

import scaldiag  # noqa: E402
from scaldiag.collect.env import RUN_DIR_ENV  # noqa: E402
from scaldiag.collect.inprocess import IN_PROCESS_UNKNOWN  # noqa: E402
from scaldiag.record.reader import read_record  # noqa: E402

KERAS_STEPS, KERAS_EPOCHS, KERAS_BATCH = 30, 2, 32
TORCH_STEPS, TORCH_BATCH = 40, 16


def keras_fit(model, x, y):
    model.fit(x, y, batch_size=KERAS_BATCH, epochs=KERAS_EPOCHS, verbose=0)


def keras_model():
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.random((KERAS_STEPS * KERAS_BATCH, 16), dtype=np.float32)
    y = rng.integers(0, 4, KERAS_STEPS * KERAS_BATCH)
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)]
    )
    model.compile(
        optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model, x, y


def torch_loop(steps: int = TORCH_STEPS) -> int:
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(steps * TORCH_BATCH, 16), torch.randint(0, 4, (steps * 16,)))
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    for x, y in DataLoader(data, batch_size=TORCH_BATCH):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        done += 1
    return done


def torch_patch_points() -> dict:
    """What the PyTorch adapter patches, as it is now (the global hooks' counts, the methods)."""
    from torch.optim import optimizer
    from torch.utils.data import dataloader

    return {
        "pre_hooks": len(optimizer._global_optimizer_pre_hooks),
        "post_hooks": len(optimizer._global_optimizer_post_hooks),
        "iter": dataloader.DataLoader.__dict__["__iter__"],
        "next": dataloader._BaseDataLoaderIter.__dict__["__next__"],
        "train": torch.nn.Module.__dict__["train"],
        "forward_hooks": len(torch.nn.modules.module._global_forward_pre_hooks),
    }


def recorded_steps(run_dir) -> int:
    from scaldiag.pipeline import analyze_run_dir

    return analyze_run_dir(run_dir).steps.recorded


def check_run(cap, steps: int) -> None:
    """A finished in-process run with every step, its report loaded, the unknowns said."""
    run = json.loads((cap.run_dir / "run.json").read_text())
    assert run["status"] == "finished"
    assert run["in_process"]["api"] == "scaldiag.capture()"
    assert cap.report is not None, cap.report_error
    assert cap.report.kind == "run"
    assert recorded_steps(cap.run_dir) == steps
    for unknown in IN_PROCESS_UNKNOWN:  # said as missing evidence, in the report itself
        assert unknown in cap.report.raw.analysis.missing
    assert (cap.run_dir / "trace").is_dir()  # each capture traces its own window


def test_keras_then_torch_each_captured_twice_in_one_process(tmp_path):
    out = tmp_path / "runs"
    fit_before = keras.Model.__dict__.get("fit")
    torch_before = torch_patch_points()
    model, x, y = keras_model()
    caps = []
    for _ in range(2):
        with scaldiag.capture(out=out) as cap:
            keras_fit(model, x, y)  # the same model, fitted again in the next block: a new run
        check_run(cap, KERAS_STEPS * KERAS_EPOCHS)
        assert keras.Model.__dict__.get("fit") is fit_before
        training = read_record(cap.run_dir).training
        assert training["framework"]["name"] == "keras"
        assert training["global_batch"] == KERAS_BATCH
        caps.append(cap)
        with scaldiag.capture(out=out) as cap:
            assert torch_loop() == TORCH_STEPS
        check_run(cap, TORCH_STEPS)
        assert torch_patch_points() == torch_before
        assert read_record(cap.run_dir).training["global_batch"] == TORCH_BATCH
        caps.append(cap)
    assert len({c.run_dir for c in caps}) == 4
    assert RUN_DIR_ENV not in os.environ
    # Training after the blocks: not recorded anywhere.
    keras_fit(model, x, y)
    torch_loop(8)
    assert sorted(out.iterdir()) == sorted(c.run_dir for c in caps)


def test_an_exception_in_the_block_propagates_after_a_partial_record(tmp_path):
    before = torch_patch_points()
    failure = ValueError("the user's own error")
    with pytest.raises(ValueError) as raised:
        with scaldiag.capture(out=tmp_path / "runs") as cap:
            torch_loop(12)
            raise failure
    assert raised.value is failure  # unchanged: the very object, its traceback the user's
    assert cap.report is None
    run = json.loads((cap.run_dir / "run.json").read_text())
    assert (run["status"], run["error"]) == ("failed", "ValueError")
    assert recorded_steps(cap.run_dir) == 12  # what was recorded until then stays readable
    assert scaldiag.load(cap.run_dir).kind == "run"
    assert torch_patch_points() == before
    assert RUN_DIR_ENV not in os.environ


MAGIC_CELL = """%%scaldiag --out {out}
steps = torch_loop()
steps * 2
"""


@pytest.fixture
def shell():
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "scaldiag")
    ip.user_ns["torch_loop"] = torch_loop
    return ip


def test_the_cell_magic_captures_the_cell_and_displays_its_report(shell, tmp_path, capsys):
    out = tmp_path / "runs"
    result = shell.run_cell(MAGIC_CELL.format(out=out))
    assert result.success, result.error_in_exec
    assert result.result == TORCH_STEPS * 2  # the cell's last expression is its value still
    assert shell.user_ns["steps"] == TORCH_STEPS  # the cell ran in the notebook's namespace
    cap = shell.user_ns["_scaldiag"]
    assert cap.run_dir.parent == out
    check_run(cap, TORCH_STEPS)
    shown = capsys.readouterr().out
    assert repr(cap.report) in shown  # displayed (as text: this shell shows no HTML)


def test_the_cell_magic_lets_the_cells_error_be_the_cells(shell, tmp_path, capsys):
    before = torch_patch_points()
    cell = f"%%scaldiag --out {tmp_path / 'runs'}\ntorch_loop(8)\nraise KeyError('in the cell')\n"
    result = shell.run_cell(cell)
    assert isinstance(result.error_in_exec, KeyError)
    run_dir = shell.user_ns["_scaldiag"].run_dir
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"
    assert torch_patch_points() == before
    assert "in the cell" in capsys.readouterr().out  # IPython showed the cell's own traceback


def test_bad_magic_arguments_are_one_clear_error(shell, tmp_path, capsys):
    result = shell.run_cell("%%scaldiag --outt x\n1\n")
    assert not result.success
    assert "%%scaldiag --outt x: unknown --outt x" in str(result.error_in_exec)
    assert "Traceback" not in capsys.readouterr().out  # IPython's usage error: its line alone


def test_a_capture_inside_a_capture_records_into_the_outer_run(tmp_path):
    with scaldiag.capture(out=tmp_path / "runs") as outer:
        with scaldiag.capture(out=tmp_path / "inner") as inner:
            torch_loop(10)
    assert inner.run_dir == outer.run_dir and inner.report is None
    assert "another capture" in inner.report_error
    assert not (tmp_path / "inner").exists()
    assert recorded_steps(outer.run_dir) == 10
