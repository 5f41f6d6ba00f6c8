"""A PyTorch run's report in PyTorch's own words (issue 24): no Keras or TensorFlow vocabulary.

Every sentence a PyTorch run prints, in the default report and under
``--verbose``, at 80 and 120 columns, is checked against the words of the
other frameworks ("fit", "Keras", "XLA", "tf.data" ...) and against what is
false of the run: "compilation" where nothing compiled (eager), a device's
catch-up where there is no device (a CPU run). Real runs: PyTorch on an H200
(fixtures/kineto/h200_healthy_run) and on this machine's CPU
(tests/golden/runs/torch_cpu_input_bound: ``scaldiag profile
bench/torch/input_bound.py -- --steps 16 --batch 8`` with the CPU wheel of
torch 2.13.0, its trace gzipped), and a trace of two CPU ranks (analyze).
"""

import io
import os
import re
from pathlib import Path

import pytest
from conftest import ROOT
from rich.console import Console

from scaldiag.pipeline import diagnose, diagnose_trace
from scaldiag.render import terminal

RUNS = {
    "gpu": Path("fixtures/kineto/h200_healthy_run"),
    "cpu": Path("tests/golden/runs/torch_cpu_input_bound"),
}
TRACE = Path("fixtures/kineto/cpu_ddp_gloo")

# Words of the other frameworks' vocabulary.
FOREIGN = [
    r"\bfit\b",
    r"\bKeras\b",
    r"\bkeras\.",
    r"TensorFlow",
    r"\btf\.",
    r"\bXLA\b",
    r"jit_compile",
    r"steps_per_execution",
    r"tf\.data",
    r"\bJAX\b",
    r"pytorch on pytorch",
]
# False of an eager run (nothing compiled), and of a CPU run (no device, no catch-up).
# (A fix may still advise torch.compile: that is PyTorch's word for a change to make.)
EAGER = [r"compilation and warm-up", r"compile or retrace", r"steady step\(s\) compiled"]
CPU = [
    r"catch-up",
    r"asynchronous dispatch",
    r"CUDA stream",
    r"CUDA graph",
    r"onto the GPU",
    r"ahead of the device",
]


def render(report, width: int, verbose: bool) -> str:
    out = io.StringIO()
    terminal.render(report, Console(file=out, width=width), all_fixes=verbose)
    return " ".join(
        out.getvalue().split()
    )  # one line: a phrase broken over two lines is still found


@pytest.fixture(scope="module")
def outputs():
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        reports = {name: diagnose(path) for name, path in RUNS.items()}
        reports["trace"] = diagnose_trace(TRACE)
        return {
            (name, width, verbose): render(r, width, verbose)
            for name, r in reports.items()
            for width in (80, 120)
            for verbose in (False, True)
        }
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("verbose", [False, True])
@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("run", ["gpu", "cpu", "trace"])
def test_a_pytorch_report_speaks_pytorch(outputs, run, width, verbose):
    text = outputs[(run, width, verbose)]
    for word in FOREIGN + EAGER + (CPU if run != "gpu" else []):
        found = re.search(word, text)
        assert not found, (
            f"{word!r} in: ...{text[max(0, found.start() - 120) : found.end() + 120]}..."
        )


def test_the_runs_are_described_in_pytorchs_words(outputs):
    for run in RUNS:
        short, long = outputs[(run, 80, False)], outputs[(run, 80, True)]
        assert "framework: PyTorch 2." in short
        assert "script before the training loop" in short
        assert "warm-up steps" in long  # eager: its first steps are warm-up, not compilation
        assert "a step ends at optimizer.step()" in long
    cpu = outputs[("cpu", 80, True)]
    assert "(CPU)" in cpu and "DataLoader(ds, batch_size=b, num_workers=1," in cpu
    assert "end an epoch: they count" in cpu  # a CPU run's epoch end, without a device's catch-up
    assert "(CUDA 13.0)" in outputs[("gpu", 80, False)]
    assert "torch.cuda.graph" in outputs[("gpu", 80, False)]
