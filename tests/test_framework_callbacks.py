"""The public Lightning and Hugging Face callbacks (scaldiag.lightning, scaldiag.hf): the same
script, run as ``python SCRIPT`` with the callback recording on its own and under ``scaldiag
profile`` (the import hook's adapter, the user's callback in the Trainer), gives the same record:
the loop's adapters and parts, its steps, its batch, and steady step times within each other's
spread."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from loops import intervals, profile

from scaldiag.pipeline import analyze_run_dir
from scaldiag.record.reader import read_record

pytestmark = pytest.mark.slow
ROOT = __import__("conftest").ROOT

LIGHTNING_SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    import lightning.pytorch as pl
    from scaldiag.lightning import ScaldiagCallback

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

    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(32 * 25, 16), torch.randint(0, 4, (32 * 25,)))
    callback = ScaldiagCallback(out=OUT)
    trainer = pl.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=2, callbacks=[callback])
    trainer.fit(Model(), DataLoader(data, batch_size=32), DataLoader(data, batch_size=64))
    print("callbacks", sum(type(c).__name__ == "ScaldiagLightningCallback" for c in trainer.callbacks))
    print("own_run", callback.run_dir)
""")  # noqa: E501

HF_SCRIPT = textwrap.dedent("""
    import torch
    from torch.utils.data import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    from scaldiag.hf import ScaldiagCallback

    class Tokens(Dataset):
        def __init__(self, n): self.ids = torch.randint(0, 128, (n, 16))
        def __len__(self): return len(self.ids)
        def __getitem__(self, i): return {"input_ids": self.ids[i], "labels": self.ids[i]}

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=128, n_positions=32))
    args = TrainingArguments(output_dir=OUTPUT, num_train_epochs=2, per_device_train_batch_size=8,
                             gradient_accumulation_steps=1, eval_strategy="no", save_strategy="no",
                             logging_steps=10, report_to=[], use_cpu=True, dataloader_num_workers=0,
                             disable_tqdm=True)
    callback = ScaldiagCallback(out=OUT)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(8 * 24), callbacks=[callback])
    trainer.train()
    print("callbacks", sum(type(c).__name__ == "ScaldiagTrainerCallback"
                           for c in trainer.callback_handler.callbacks))
    print("own_run", callback.run_dir)
""")  # noqa: E501

HF_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_plain(script, env: dict | None = None) -> tuple[str, str]:
    """``python SCRIPT``: the callback records on its own. (its run directory, stdout)"""
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    own = [
        line.split(" ", 1)[1] for line in result.stdout.splitlines() if line.startswith("own_run")
    ]
    return Path(own[0]), result.stdout


def both_runs(tmp_path, text: str, env: dict | None = None):
    """The script run both ways: (the callback's own run, profile's run), each with its stdout."""
    script = tmp_path / "train.py"
    own_out = tmp_path / "own"
    script.write_text(f"OUT = {str(own_out)!r}\nOUTPUT = {str(tmp_path / 'out')!r}\n" + text)
    own_dir, own_stdout = run_plain(script, env)
    profiled_dir, profiled_stdout = profile(script, env=env)
    assert "own_run None" in profiled_stdout  # under profile: profile's run, none of its own
    assert "callbacks 1" in profiled_stdout and "callbacks 1" in own_stdout  # not added twice
    assert [p.name for p in own_out.iterdir()] == [os.path.basename(own_dir)]
    return own_dir, profiled_dir


def spread_ms(run_dir) -> tuple[float, float]:
    """The steady step's per-step spread, as the report gives it: mean +- one standard deviation."""
    step = analyze_run_dir(run_dir).steps.step_time_ms
    return step.mean - step.stdev, step.mean + step.stdev


def same_record(own_dir, profiled_dir) -> tuple:
    own, profiled = read_record(own_dir), read_record(profiled_dir)
    assert json.loads((own_dir / "run.json").read_text())["status"] == "finished"
    for key in ("loop_adapters", "global_batch", "per_replica_batch", "batch_source"):
        assert own.training.get(key) == profiled.training.get(key), key
    epochs = [[m["epoch"] for m in r.marks if m["mark"] == "epoch_begin"] for r in (own, profiled)]
    assert epochs[0] == epochs[1]
    steps = [analyze_run_dir(d).steps for d in (own_dir, profiled_dir)]
    assert steps[0].recorded == steps[1].recorded
    (low_a, high_a), (low_b, high_b) = spread_ms(own_dir), spread_ms(profiled_dir)
    assert low_a <= high_b and low_b <= high_a, ((low_a, high_a), (low_b, high_b))
    return own, profiled, steps[0].recorded


def test_lightning_callback_on_its_own_gives_profiles_record(tmp_path):
    pytest.importorskip("lightning")
    own_dir, profiled_dir = both_runs(tmp_path, LIGHTNING_SCRIPT)
    own, profiled, recorded = same_record(own_dir, profiled_dir)
    assert recorded == 3 * 25  # one step per optimizer step
    assert own.training["loop_adapters"] == ["pytorch", "lightning"]
    for record in (own, profiled):
        assert len(intervals(record.marks, "sanity check")) == 1
        assert len(intervals(record.marks, "validation")) == 3


def test_hf_callback_on_its_own_gives_profiles_record(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    own_dir, profiled_dir = both_runs(tmp_path, HF_SCRIPT, HF_ENV)
    own, profiled, recorded = same_record(own_dir, profiled_dir)
    assert recorded == 2 * 24  # 24 optimizer steps an epoch (no gradient accumulation)
    assert own.training["loop_adapters"] == ["pytorch", "transformers"]
    for record in (own, profiled):
        assert record.training["user_clock"]["global_step"] == 2 * 24  # the Trainer's own clock
        assert len([m for m in record.marks if m["mark"] == "log"]) >= 4


def test_hf_callbacks_run_left_open_by_a_raising_train_is_closed_by_the_next_capture(tmp_path):
    """transformers calls no callback when ``train()`` raises: the callback's own run stays open
    (its adapters armed) until the next ``scaldiag.capture()`` closes it as failed."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    import torch
    from torch.utils.data import Dataset
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    import scaldiag
    from scaldiag.collect.env import RUN_DIR_ENV
    from scaldiag.hf import ScaldiagCallback

    class Tokens(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            ids = torch.arange(16) % 128
            return {"input_ids": ids, "labels": ids}

    class Fails(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                raise RuntimeError("the user's own failure")

    model = GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=128))
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=8,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    callback = ScaldiagCallback(out=tmp_path / "own")
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[callback, Fails()])
    train_before = torch.nn.Module.__dict__["train"]
    with pytest.raises(RuntimeError, match="the user's own failure"):
        trainer.train()
    own = callback.run_dir
    assert json.loads((own / "run.json").read_text())["status"] == "running"
    with scaldiag.capture(out=tmp_path / "runs") as cap:
        pass
    assert cap.run_dir.parent == tmp_path / "runs"  # its own run, not the one left open
    assert json.loads((own / "run.json").read_text())["status"] == "failed"
    assert torch.nn.Module.__dict__["train"] is train_before
    assert RUN_DIR_ENV not in os.environ
