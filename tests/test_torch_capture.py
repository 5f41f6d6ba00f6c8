"""``scaldiag profile`` on plain PyTorch scripts (torch for the CPU), as a subprocess; the
scaldiag.torch API.

Skipped where torch is not installed (``make test`` installs the CPU build: pyproject's ``torch``
extra).
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from scaldiag.pipeline import diagnose_run  # noqa: E402
from scaldiag.record.reader import read_record  # noqa: E402

pytestmark = pytest.mark.slow  # real PyTorch trainings under `scaldiag profile`

ROOT = Path(__file__).resolve().parent.parent

TRAIN = textwrap.dedent("""
    import sys
    import torch, torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset
    steps = int(sys.argv[1])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(24 * steps, 16), torch.randint(0, 4, (24 * steps,)))
    done = 0
    for x, y in DataLoader(data, batch_size=24):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        done += 1
    print("optimizer steps", done)
""")


def profile(tmp_path, script_text, *args, extra=()):
    script = tmp_path / "train.py"
    script.write_text(script_text)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "runs"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "--out",
            str(out),
            *extra,
            "--json",
            str(tmp_path / "report.json"),
            str(script),
            "--",
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = list(out.iterdir())
    return run_dir, result


def test_profile_plain_pytorch_script(tmp_path):
    run_dir, result = profile(tmp_path, TRAIN, "14")
    assert "optimizer steps 14" in result.stdout
    record = read_record(run_dir)
    assert [s["step"] for s in record.steps] == list(
        range(14)
    )  # one per optimizer.step(); the open one dropped
    assert [s["traced"] for s in record.steps] == [False] * 3 + [True] * 5 + [False] * 6
    training = record.training
    assert training["framework"]["name"] == training["framework"]["backend"] == "pytorch"
    assert training["framework"]["versions"]["torch"] == torch.__version__
    assert (training["global_batch"], training["per_replica_batch"], training["replicas"]) == (
        24,
        24,
        1,
    )
    assert training["parameter_bytes"] == 4 * (16 * 32 + 32 + 32 * 4 + 4)
    marks = [m["mark"] for m in record.marks]
    assert (
        marks[:2] == ["script_begin", "fit_begin"]
        and marks[-1] == "script_end"
        and "fit_end" in marks
    )
    trace = run_dir / "trace" / "plugins" / "profile" / "torch" / "rank0.pt.trace.json"
    events = json.loads(trace.read_text())["traceEvents"]
    markers = sorted(
        int(e["name"].split("#")[1])
        for e in events
        if e.get("name", "").startswith("ProfilerStep#")
    )
    assert markers == [3, 4, 5, 6, 7]
    assert any(e.get("name") == "scaldiag_input" for e in events)
    report = diagnose_run(run_dir)
    assert report.analysis.trace is not None and report.analysis.trace.framework == "pytorch"
    assert report.analysis.trace.steps_method == "markers"
    assert report.analysis.trace.units[0].categories["input"].busy_ms > 0
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["training"]["framework"]["backend"] == "pytorch"
    assert saved["trace_report"]["framework"] == "pytorch"


def test_loop_without_dataloader_takes_the_batch_from_the_first_forward(tmp_path):
    script = textwrap.dedent("""
        import torch, torch.nn as nn
        model = nn.Linear(8, 2)
        opt = torch.optim.Adam(model.parameters())
        x = torch.randn(40, 8)
        for _ in range(10):
            opt.zero_grad(); model(x).sum().backward(); opt.step()
    """)
    run_dir, _ = profile(tmp_path, script)
    record = read_record(run_dir)
    assert len(record.steps) == 10
    assert record.training["global_batch"] == 40
    assert record.training["batch_source"].startswith("the first forward call's input")


def test_torchrun_two_gloo_ranks_record_and_merge(tmp_path):
    script = (ROOT / "fixtures" / "kineto" / "train_ddp_cpu.py").read_text()
    run_dir, result = profile(tmp_path, script, "--steps", "12", extra=("--nproc-per-node", "2"))
    rank0, rank1 = read_record(run_dir), read_record(run_dir / "rank1")
    assert len(rank0.steps) == len(rank1.steps) == 12
    assert rank0.training["replicas"] == 2 and rank0.training["global_batch"] == 64
    assert rank1.training["rank"] == 1 and rank1.run.status == "finished"
    traces = sorted(p.name for p in (run_dir / "trace" / "plugins" / "profile" / "torch").iterdir())
    assert traces == ["rank0.pt.trace.json", "rank1.pt.trace.json"]
    profile_analysis = diagnose_run(run_dir).analysis.trace
    assert profile_analysis.hosts == ["rank0", "rank1"]
    assert profile_analysis.units[0].categories["collective"].busy_ms > 0


def test_torch_api_for_custom_loops(tmp_path):
    from scaldiag.torch import capture

    model = torch.nn.Linear(4, 1)
    with capture(
        run_dir=tmp_path / "run", per_replica_batch=8, warmup_steps=1, trace_steps=2, sample=False
    ) as run:
        for _ in range(5):
            with run.step():
                model(torch.randn(8, 4)).sum().backward()
    record = read_record(tmp_path / "run")
    assert len(record.steps) == 5 and record.run.status == "finished"
    assert (
        record.training["framework"]["backend"] == "pytorch"
        and record.training["global_batch"] == 8
    )
    assert (
        tmp_path / "run" / "trace" / "plugins" / "profile" / "torch" / "rank0.pt.trace.json"
    ).exists()


def test_the_window_asks_kineto_to_tear_cupti_down_where_that_is_safe():
    """Kineto keeps CUPTI after a trace unless TEARDOWN_CUPTI=1, and the steps after it run ~17%
    slower
    (bench/results/gpu_h200/torch/torch.md#profiler_aftermathmd); the user's setting and old CUDA
    are left alone.
    """
    from scaldiag.collect.frameworks.torch_trace import TEARDOWN_ENV, teardown_cupti_at_stop

    for cuda, before, after in (
        ("13.0", {}, "1"),
        ("12.6", {}, "1"),
        ("12.4", {}, None),
        (None, {}, None),
        ("12.8", {TEARDOWN_ENV: "0"}, "0"),
        ("weird", {}, None),
    ):
        environ = dict(before)
        assert teardown_cupti_at_stop(cuda, environ) is (after == "1" and not before)
        assert environ.get(TEARDOWN_ENV) == after, (cuda, before)
    # once the process has captured a CUDA graph, teardown is unsafe (torch turns it off itself)
    environ = {}
    assert teardown_cupti_at_stop("13.0", environ, graphs=1) is False and environ == {}


HOOKS_AND_A_FULL_DISK = textwrap.dedent("""
    import errno
    import torch, torch.nn as nn
    from torch.optim import optimizer as optim_module
    from scaldiag.collect.frameworks.torch_capture import CAPTURE
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ours = lambda: [h for h in optim_module._global_optimizer_pre_hooks.values() if getattr(h, "__self__", None) is CAPTURE]
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    print("pre hooks before", len(ours()))
    for step in range(12):
        if step == 6:  # the disk fills: the step file stops taking writes, and a write is due
            def write(text):
                raise OSError(errno.ENOSPC, "No space left on device")
            CAPTURE.session.recorder._steps.write = write
            CAPTURE.session.recorder._due_ns = 0
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        if step == 1:
            print("pre hooks after", len(ours()))
    print("trained", step + 1, "failed", CAPTURE.failed)
""")  # noqa: E501


def test_the_step_hooks_cost_one_call_a_step_and_a_failing_write_stops_capture_not_training(
    tmp_path,
):
    # The optimizer pre-step hook starts the capture and leaves after the first step; the post-step
    # hook calls the recorder, whose failures disable capture and reach the user as one line.
    run_dir, result = profile(tmp_path, HOOKS_AND_A_FULL_DISK)
    assert "pre hooks before 1" in result.stdout and "pre hooks after 0" in result.stdout
    assert "trained 12 failed step begin: OSError" in result.stdout
    assert (
        "capture disabled, training continues" in result.stderr and "No space left" in result.stderr
    )
    assert "No space left" in json.loads((run_dir / "training.json").read_text())["capture_error"]


def test_a_symbolic_first_call_leaves_the_batch_unknown_and_raises_nothing():
    """Keras on torch builds a model by calling its layers on a symbolic input of batch None (the
    demo
    custom torch workflow crashed at `keras.Sequential` under scaldiag profile): the batch comes
    from the first real call instead."""
    import torch as real_torch

    from scaldiag.collect.frameworks.torch_capture import TorchCapture

    class Symbolic:
        shape = (None, 28, 28, 1)

    capture = TorchCapture()
    assert capture.first_forward((Symbolic(),)) is False and capture.forward_batch is None
    assert capture.first_forward((real_torch.zeros(32, 4),)) is True and capture.forward_batch == 32


def test_a_step_recorded_into_a_cuda_graph_is_no_step_boundary():
    """Inside torch.cuda.graph, optimizer.step() records kernels and runs none: the capture counts
    it as a graph step and opens no step (nor a device event, which CUDA may fold into the
    capture: a run whose graph twin hung at exit on an H100, 2026-12-06). CUDA graphs need a GPU,
    so the class below stands in for torch.cuda.graphs.CUDAGraph's two methods, which the hook
    wraps; the real capture is run on the GPU by bench/torch/healthy.py --fixed graphs."""
    from scaldiag.collect.frameworks import torch_hooks
    from scaldiag.collect.frameworks.torch_capture import CAPTURE

    class CUDAGraph:
        def capture_begin(self, pool=None):
            self.began = True

        def capture_end(self):
            self.ended = True

    class GraphsModule:
        pass

    GraphsModule.CUDAGraph = CUDAGraph
    torch_hooks._on_graphs_import(GraphsModule)
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    boundaries = []
    saved = CAPTURE.optimizer, CAPTURE._settled, CAPTURE._begin
    try:
        CAPTURE.optimizer, CAPTURE._settled = opt, True
        CAPTURE._begin = lambda: boundaries.append("step")
        CAPTURE.post_step(opt)
        graph = CUDAGraph()
        graph.capture_begin()
        CAPTURE.post_step(opt)  # the step recorded into the graph
        graph.capture_end()
        CAPTURE.post_step(opt)
        graphed, capturing = CAPTURE.graph_steps, CAPTURE.graph_captures
    finally:
        CAPTURE.optimizer, CAPTURE._settled, CAPTURE._begin = saved
        CAPTURE.graph_steps = CAPTURE.graph_captures = 0
    assert graph.began and graph.ended  # the wrapped methods still do their work
    assert boundaries == ["step", "step"]
    assert graphed == 1 and capturing == 0
