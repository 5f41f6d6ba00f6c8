"""Lightning's Trainer.fit, followed by its own Callback hooks: the sanity check and each validation
loop are evaluation, not a slow training step; epochs are Lightning's; the batch is the training
loader's (not the sanity check's, which Lightning runs first)."""

import textwrap

import pytest
from loops import intervals, profile

pytest.importorskip("lightning")

from scaldiag.analyze import recorded_steps  # noqa: E402
from scaldiag.pipeline import analyze_run_dir  # noqa: E402
from scaldiag.record.reader import read_record  # noqa: E402

# Validation batches of 16 against training batches of 32: the batch must come from training's
# loader. Lightning puts the model back in training mode by setting ``.training`` (no model.train()
# call), so without its callbacks the validation loop's time stayed inside a training step.
SCRIPT = textwrap.dedent("""
    import time
    import torch
    from torch.utils.data import DataLoader, Dataset
    import lightning.pytorch as pl

    class Data(Dataset):
        def __init__(self, n, delay_s): self.n, self.delay_s = n, delay_s
        def __len__(self): return self.n
        def __getitem__(self, i):
            time.sleep(self.delay_s)
            return torch.randn(16), torch.randint(0, 4, ()).item()

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        def training_step(self, batch, i):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)
        def validation_step(self, batch, i):
            x, y = batch
            self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.set_num_threads(1)
    trainer = pl.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=2)
    trainer.fit(Model(), DataLoader(Data(32 * 20, 0.0), batch_size=32),
                DataLoader(Data(16 * 10, 0.002), batch_size=16))
    print("global_step", trainer.global_step)
""")  # noqa: E501


@pytest.fixture(scope="module")
def lightning_run(tmp_path_factory):
    script = tmp_path_factory.mktemp("lightning") / "fit.py"
    script.write_text(SCRIPT)
    return profile(script)


def test_sanity_check_and_validation_are_marked_by_lightnings_callbacks(lightning_run):
    run_dir, _ = lightning_run
    record = read_record(run_dir)
    assert record.training["loop_adapters"] == ["pytorch", "lightning"]
    assert "logging" in record.training["loop_evidence_lacking"]
    assert len(intervals(record.marks, "sanity check")) == 1
    assert len(intervals(record.marks, "validation")) == 3
    epochs = [m["epoch"] for m in record.marks if m["mark"] == "epoch_begin"]
    assert epochs == [0, 1, 2]  # Lightning's epochs, once each (not also the DataLoader's passes)


def test_no_steady_step_holds_a_validation_loop(lightning_run):
    run_dir, stdout = lightning_run
    record = read_record(run_dir)
    found = recorded_steps.periods(record.steps, record.training, record.marks)
    assert len(found) == 3 * 20  # one per optimizer step: the first begins at on_fit_start
    assert f"global_step {3 * 20}" in stdout
    validation = intervals(record.marks, "validation")
    for period in found:
        for begin, end in validation:
            assert period.end_ns <= begin or period.begin_ns >= end, (period, begin, end)
    parts = {p.part: p.seconds for p in analyze_run_dir(run_dir).accounting.parts}
    assert parts.get("validation", 0) > 0


def test_batch_is_the_training_loaders(lightning_run):
    run_dir, _ = lightning_run
    training = read_record(run_dir).training
    assert training["global_batch"] == 32
    assert "DataLoader" in training["batch_source"]
