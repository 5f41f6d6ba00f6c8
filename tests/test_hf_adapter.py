"""Hugging Face's Trainer, followed by its own TrainerCallback and methods: evaluation and
checkpoints inside training are parts of the loop, not slow training steps; epochs are the
Trainer's; the batch is one optimizer step's (micro-batch x gradient accumulation), not the first
DataLoader batch; the Trainer's own speed metrics are kept as the user's clock."""

import textwrap

import pytest
from loops import intervals, profile

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from scaldiag.analyze import recorded_steps  # noqa: E402
from scaldiag.collect.env import GLOBAL_BATCH_ENV  # noqa: E402
from scaldiag.collect.frameworks import hf_adapter  # noqa: E402
from scaldiag.pipeline import analyze_run_dir  # noqa: E402
from scaldiag.record.reader import read_record  # noqa: E402

STEPS_PER_EPOCH = 8  # 128 samples, micro-batches of 8, 2 of them a step

# A 2-layer GPT-2 built from its config (nothing downloaded). Evaluation every 5 optimizer steps (5,
# 10, 15, and the Trainer's own at the last step, 16) sleeps in its dataset so that, inside a step,
# it would be a slow step; checkpoints at 10 and at the last step.
SCRIPT = textwrap.dedent("""
    import time
    import torch
    from torch.utils.data import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    class Tokens(Dataset):
        def __init__(self, n, delay_s):
            self.ids, self.delay_s = torch.randint(0, 128, (n, 16)), delay_s
        def __len__(self): return len(self.ids)
        def __getitem__(self, i):
            time.sleep(self.delay_s)
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=128, n_positions=32)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(output_dir=OUTPUT, num_train_epochs=2, per_device_train_batch_size=8,
                             per_device_eval_batch_size=8, gradient_accumulation_steps=2,
                             eval_strategy="steps", eval_steps=5, save_strategy="steps",
                             save_steps=10, logging_steps=4, report_to=[], use_cpu=True,
                             dataloader_num_workers=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(128, 0.0),
                      eval_dataset=Tokens(16, 0.02))
    trainer.train()
    print("global_step", trainer.state.global_step)
""")


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hf")
    script = tmp / "train.py"
    script.write_text(f"OUTPUT = {str(tmp / 'out')!r}\n" + SCRIPT)
    return profile(
        script,
        env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
    )


def test_evaluation_checkpoints_epochs_and_logs_are_the_trainers(hf_run):
    run_dir, _ = hf_run
    record = read_record(run_dir)
    assert record.training["loop_adapters"] == ["pytorch", "transformers"]
    evaluations = intervals(record.marks, "evaluation")
    assert len(evaluations) == 4  # steps 5, 10, 15 and 16 (the last)
    assert {m.get("source") for m in record.marks if m.get("kind") == "evaluation"} == {
        "Trainer.evaluate"
    }
    assert len(intervals(record.marks, "checkpoint")) == 2  # steps 10 and 16
    assert [m["epoch"] for m in record.marks if m["mark"] == "epoch_begin"] == [0, 1]
    assert [m["epoch"] for m in record.marks if m["mark"] == "epoch_end"] == [0, 1]
    # logging_steps=4 (4, 8, 12, 16), each evaluation's metrics, and train()'s own metrics
    assert len([m for m in record.marks if m["mark"] == "log"]) == 4 + 4 + 1


def test_steps_are_optimizer_steps_and_none_holds_an_evaluation(hf_run):
    run_dir, stdout = hf_run
    record = read_record(run_dir)
    found = recorded_steps.periods(record.steps, record.training, record.marks)
    assert f"global_step {2 * STEPS_PER_EPOCH}" in stdout
    assert len(found) == 2 * STEPS_PER_EPOCH  # one per optimizer step, not per micro-batch
    assert any(p.kind == recorded_steps.STEADY for p in found)
    for period in found:
        for begin, end in intervals(record.marks, "evaluation"):
            assert period.end_ns <= begin or period.begin_ns >= end, (period, begin, end)
    parts = {p.part: p.seconds for p in analyze_run_dir(run_dir).accounting.parts}
    # 16 samples x 20 ms an evaluation: 3 inside training, the 4th after the last step
    assert parts.get("validation", 0) > 3 * 0.3


def test_batch_is_one_optimizer_steps_and_the_trainers_clock_is_kept(hf_run):
    run_dir, _ = hf_run
    training = read_record(run_dir).training
    assert training["global_batch"] == 8 * 2  # not the first DataLoader batch (a micro-batch)
    assert training["per_replica_batch"] == 8 * 2
    assert training["batch_source"].startswith("TrainingArguments")
    clock = training["user_clock"]
    assert clock["global_step"] == 2 * STEPS_PER_EPOCH
    assert clock["train_runtime"] > 0 and clock["train_steps_per_second"] > 0
    assert "train_samples_per_second" in clock


class _Capture:
    def __init__(self):
        self.batch, self.facts = None, {}

    def adapter_facts(self, **facts):
        self.facts.update(facts)


class _Args:
    train_batch_size, gradient_accumulation_steps, world_size = 8, 4, 2


def test_global_batch_flag_still_wins(monkeypatch):
    capture = _Capture()
    monkeypatch.setattr(hf_adapter, "_capture", lambda: capture)
    monkeypatch.setenv(GLOBAL_BATCH_ENV, "512")
    hf_adapter._give_batch(object(), _Args())
    # torch_capture's own batch facts give the flag's value; the accumulation is the Trainer's
    assert capture.facts == {"gradient_accumulation": 4}
    assert capture.batch[0] == 8 * 4  # and the DataLoader's micro-batch is not learned
    monkeypatch.delenv(GLOBAL_BATCH_ENV)
    hf_adapter._give_batch(object(), _Args())
    assert capture.facts["global_batch"] == 8 * 4 * 2
    assert capture.facts["per_replica_batch"] == 8 * 4
