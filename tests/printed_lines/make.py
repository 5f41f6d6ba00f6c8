"""How the fixtures beside this file were made: real training scripts' real output, cut into
segments as scaldiag's capture keeps them (printed.jsonl: one JSON object a segment, ended by a
newline or a carriage return, only segments with a digit).

    .venv/bin/python tests/printed_lines/make.py NAME [--tty]   # one fixture, NAME.jsonl
    .venv/bin/python tests/printed_lines/make.py all            # every one

Each case runs in its own process: the script's sys.stdout and sys.stderr are wrapped by
``Segments`` (which passes every byte through and says ``isatty()`` as asked: Keras's and rich's
bars redraw with ``\\r`` only on a terminal), then the segments are written out. Tiny models on
the CPU; the figures in the fixtures are whatever this machine gave, and the tests read them as
data, never as timings.

``*_under_profile.jsonl`` are printed.jsonl files as scaldiag's own capture wrote them
(collect/printed.py), copied from the run directories of ``scaldiag profile
tests/phases_two_optimizers.py``, ``scaldiag profile tests/cv_folds.py -- --outer-epochs 2``
and (keras_verbose1_under_profile) a Keras MLP's ``fit(epochs=5, verbose="auto")`` on a
loaded machine (its first redraw's time left reads ``4:10``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAX_TEXT = 2000


class Segments:
    """A text stream that passes everything through and keeps each segment with a digit."""

    def __init__(self, stream, name: str, kept: list, tty: bool):
        self._stream, self._name, self._kept, self._tty = stream, name, kept, tty
        self._pending = ""

    def write(self, text: str) -> int:
        self._stream.write(text)
        self._pending += text
        while True:
            cut = [i for i in (self._pending.find("\n"), self._pending.find("\r")) if i >= 0]
            if not cut:
                break
            i = min(cut)
            segment, end, self._pending = (
                self._pending[:i],
                self._pending[i],
                self._pending[i + 1 :],
            )
            if any(c.isdigit() for c in segment):
                self._kept.append(
                    {
                        "t_ns": time.time_ns(),
                        "stream": self._name,
                        "text": segment[:MAX_TEXT],
                        "end": end,
                    }
                )
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._tty

    def fileno(self) -> int:
        return self._stream.fileno()

    def __getattr__(self, name):
        return getattr(self._stream, name)


KERAS = """
import numpy as np, keras
x = np.random.rand(640, 32).astype("float32"); y = np.random.randint(0, 10, 640)
m = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                      keras.layers.Dense(10)])
m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
m.fit(x, y, batch_size=32, epochs=3, verbose=VERBOSE, validation_split=0.0)
"""

TQDM_TORCH = """
import torch
from tqdm import tqdm
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(1280, 32),
    torch.randint(0, 10, (1280,))), batch_size=32)
model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in tqdm(data, desc=f"epoch {epoch}", mininterval=0.05):
        opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()
for x, y in tqdm(data, unit="batch", desc="custom unit", mininterval=0.05):
    opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()
"""

TQDM_SLOW = """
import torch
from tqdm import tqdm
a = torch.randn(1500, 1500)
for i in tqdm(range(4), desc="slow"):
    for _ in range(40):
        a = torch.tanh(a @ a)
"""

HAND = """
import time, torch
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(2560, 32),
    torch.randint(0, 10, (2560,))), batch_size=64)
model = torch.nn.Sequential(torch.nn.Linear(32, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = 0
for epoch in range(3):
    start = time.perf_counter(); last = start
    for x, y in data:
        opt.zero_grad(); loss = torch.nn.functional.cross_entropy(model(x), y); loss.backward()
        opt.step(); step += 1
        if step % 10 == 0:
            now = time.perf_counter()
            ms = (now - last) / 10 * 1e3; last = now
            print(f"step {step} loss {loss.item():.4f} {ms:.1f} ms/step "
                  f"{64 / (ms / 1e3):.0f} samples/s {64 * 16 / (ms / 1e3):.0f} tok/s")
    took = time.perf_counter() - start
    print(f"Epoch {epoch + 1}: {took:.2f}s, {len(data) / took:.1f} it/s, "
          f"{len(data) * 64 / took:.0f} img/s")
"""

HF = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=128, n_positions=32))
class Data(torch.utils.data.Dataset):
    def __len__(self): return 256
    def __getitem__(self, i):
        ids = torch.randint(0, 128, (16,)); return {"input_ids": ids, "labels": ids}
args = TrainingArguments(output_dir=OUT, per_device_train_batch_size=8, num_train_epochs=2,
    logging_steps=10, report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=False)
Trainer(model=model, args=args, train_dataset=Data()).train()
"""

LIGHTNING = """
import torch, lightning as L
class M(L.LightningModule):
    def __init__(self):
        super().__init__(); self.net = torch.nn.Linear(32, 10)
    def training_step(self, batch, i):
        x, y = batch; loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss, prog_bar=True); return loss
    def configure_optimizers(self): return torch.optim.SGD(self.parameters(), lr=0.1)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(1280, 32),
    torch.randint(0, 10, (1280,))), batch_size=32)
bar = BAR
L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
    callbacks=[bar], enable_model_summary=False).fit(M(), data)
"""

CASES = {
    "keras_verbose1_tty": (KERAS.replace("VERBOSE", "1"), True),
    "keras_verbose1_pipe": (KERAS.replace("VERBOSE", "1"), False),
    "keras_verbose2": (KERAS.replace("VERBOSE", "2"), False),
    "tqdm_torch": (TQDM_TORCH, True),
    "tqdm_slow": (TQDM_SLOW, True),
    "hand_timer": (HAND, False),
    "hf_trainer": (HF, True),
    "lightning_tqdm": (
        LIGHTNING.replace(
            "BAR", "__import__('lightning').pytorch.callbacks.TQDMProgressBar(refresh_rate=5)"
        ),
        True,
    ),
    "lightning_rich": (
        LIGHTNING.replace(
            "BAR", "__import__('lightning').pytorch.callbacks.RichProgressBar(refresh_rate=5)"
        ),
        True,
    ),
}


def run_case(name: str, out_dir: str) -> None:
    code, tty = CASES[name]
    kept: list = []
    sys.stdout = Segments(sys.__stdout__, "stdout", kept, tty)
    sys.stderr = Segments(sys.__stderr__, "stderr", kept, tty)
    try:
        exec(compile(code, name, "exec"), {"__name__": "__main__", "OUT": out_dir})
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        with open(HERE / f"{name}.jsonl", "w") as f:
            for row in kept:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "all":
        for case in CASES:
            subprocess.run([sys.executable, __file__, case], check=True)
    elif sys.argv[1] == "--one":
        run_case(sys.argv[2], sys.argv[3])
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            run_case(sys.argv[1], tmp)
