"""The trace window is planned in steps and bounded in time (collect/trace_budget.py, issue 50): a
window planned for five steps ends at the first step boundary past its bound, and the report says
how few steps it traced and which bound ended it. Real runs on the CPU: a plain JAX loop, a PyTorch
loop. The bounds are set to 0 so that the window ends after its first step whatever the machine's
load (a window ends only at a step's end, and its first step runs whole): no timing is compared."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scaldiag.analyze.capture_cost import capture_cost
from scaldiag.analyze.trace_window import TraceWindow
from scaldiag.collect import trace_budget
from scaldiag.render.words import capture_cost_words, trace_window_words

ROOT = Path(__file__).resolve().parent.parent

JAX_LOOP = textwrap.dedent("""
    import jax, jax.numpy as jnp
    x, y = jnp.ones((16, 8)), jnp.zeros((16, 4))
    w = jnp.zeros((8, 4))

    @jax.jit
    def train_step(w, x, y):
        loss, g = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
        return w - 0.1 * g, loss

    for step in range(20):
        w, loss = train_step(w, x, y)
    print("loss", float(loss))
""")

TORCH_LOOP = textwrap.dedent("""
    import torch
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.ones(16, 8), torch.zeros(16, 4)
    for step in range(20):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
""")


def _profile(tmp_path: Path, source: str, env: dict, *flags: str) -> tuple[dict, str]:
    script = tmp_path / "train.py"
    script.write_text(source)
    out, report = tmp_path / "runs", tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "scaldiag", "profile", "--out", str(out), "--json", str(report)]
        + [*flags, str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(report.read_text()), result.stdout


def _one_step_window(report: dict, ended_by: str) -> None:
    window = report["trace_window"]
    assert window["planned_steps"] == 5 and window["traced_steps"] == 1
    assert window["ended_by"] == ended_by
    assert window["note"].startswith(f"traced 1 step of a planned 5: the window's {ended_by}")
    assert report["training"]["trace"]["last_step"] == report["training"]["trace"]["first_step"]
    assert report["trace_report"] is not None  # the one step was traced and analysed


def test_a_jax_window_planned_for_five_steps_ends_at_its_time_limit(tmp_path):
    pytest.importorskip("jax")
    report, stdout = _profile(tmp_path, JAX_LOOP, {}, "--trace-limit-s", "0")
    _one_step_window(report, "time limit")
    # the capture's own cost as this run measured it: the samplers' CPU, the window's wall
    cost = report["capture_cost"]
    assert cost["window_s"] == report["trace_window"]["seconds"] is not None
    assert cost["sampler_cpu_s"] > 0 and "not measured in a run: the step hook" in cost["note"]
    assert "traced 1 step of a planned 5: the window's time limit (0 s) ended it" in " ".join(
        stdout.split()
    )


def test_a_torch_window_ends_at_its_share_of_the_run(tmp_path):
    pytest.importorskip("torch")
    report, stdout = _profile(tmp_path, TORCH_LOOP, {"SCALDIAG_TRACE_SHARE": "0"})
    _one_step_window(report, "share of the run")
    assert "at most 0% of its wall so far) ended it" in " ".join(stdout.split())


def test_the_bounds_in_words():
    budget = trace_budget.TraceBudget(limit_s=30.0, share=0.1, run_began_ns=0)
    s = 10**9
    # 5 s traced, the next step 1 s: under 30 s, under 10% of a 100 s run
    assert budget.over(5 * s, 1 * s, 99 * s) is None
    assert budget.over(29 * s, 2 * s, 1000 * s) == trace_budget.TIME_LIMIT
    assert budget.over(5 * s, 1 * s, 50 * s) == trace_budget.RUN_SHARE  # 6 s > 10% of 51 s
    full = TraceWindow(5, 5, "plan", 30.0, 0.1, 0.4, 10.0, traced_s=0.05)
    assert trace_window_words(full) is None  # a window that ran its plan adds no line
    # one step of a whole epoch, planned as one: it ran whole, past the bound, and it is said
    epoch = TraceWindow(1, 1, "plan", 30.0, 0.1, 13.1, 31.5, traced_s=12.6)
    assert trace_window_words(epoch) == (
        "the trace window's 1 step took 12.6 s (40% of the run), past its bounds (30 s, 10% of"
        " the run's wall so far): a window ends only at a step's end, and a step runs whole"
    )
    long = TraceWindow(5, 1, "time limit", 30.0, 0.1, 33.0, 300.0)
    assert trace_window_words(long) == (
        "traced 1 step of a planned 5: the window's time limit (30 s) ended it; the window took"
        " 33.0 s (11% of the run), the profiler's start and stop included (a window ends only at a"
        " step's end, and its first step runs whole)"
    )


def test_capture_cost_from_the_record():
    samplers = {"nvml": {"cpu_s": 0.5, "hz": 10}, "host": {"cpu_s": 1.5}, "bad": {"cpu_s": True}}
    cost = capture_cost(samplers, wall_s=400.0, window_s=2.0)
    assert cost.sampler_cpu_s == 2.0 and cost.sampler_core_pct == 0.5
    assert capture_cost_words(cost).startswith(
        "capture's cost measured in this run: the samplers used 2.00 s of CPU in scaldiag's"
        " process (0.50% of one core over the run); the trace window took 2.00 s (0.5% of the run)"
    )
    assert capture_cost(None, 10.0, None) is None


def test_bounds_from_the_environment_and_bad_values():
    env = {"SCALDIAG_TRACE_LIMIT_S": "2.5", "SCALDIAG_TRACE_SHARE": "0.05"}
    assert trace_budget.from_env(env, 0).facts() == {"limit_s": 2.5, "share": 0.05}
    bad = {"SCALDIAG_TRACE_LIMIT_S": "soon", "SCALDIAG_TRACE_SHARE": "-1"}
    assert trace_budget.from_env(bad, 0).facts() == {"limit_s": 30.0, "share": 0.1}


def test_an_epoch_in_one_call_is_one_step_and_past_its_bound_is_said(tmp_path):
    """The issue's shape (tests/jax_epoch_call.py: one jitted call over a whole epoch): the window
    is one step, which runs whole; past its bound (the share set to 0 here), the report says so."""
    pytest.importorskip("jax")
    source = (ROOT / "tests" / "jax_epoch_call.py").read_text()
    script = tmp_path / "epoch.py"
    script.write_text(source)
    out, report_path = tmp_path / "runs", tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "scaldiag", "profile", "-q", "--out", str(out), "--json"]
        + [str(report_path), str(script), "--", "--epochs", "5", "--samples", "3200"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        | {"SCALDIAG_TRACE_SHARE": "0"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    window = json.loads(report_path.read_text())["trace_window"]
    assert window["planned_steps"] == window["traced_steps"] == 1 and window["ended_by"] == "plan"
    assert window["note"].startswith("the trace window's 1 step took")
    assert "past its bounds (30 s, 0% of the run's wall so far)" in window["note"]


def test_the_default_share_binds_only_past_a_few_seconds_of_traced_steps():
    """A 5-s two-node job's window (steps of 0.4 s) was cut to one step by a tenth of its wall, and
    SD209 had no spread to judge its throttled link by: the default share waits for 3 s of traced
    steps; a share set by the user binds from the first step."""
    s = 10**9
    default = trace_budget.from_env({}, 0)
    assert default.over(int(1.2 * s), int(0.4 * s), 5 * s) is None  # 1.6 s: under the floor
    assert default.over(int(3.2 * s), int(0.4 * s), 20 * s) == trace_budget.RUN_SHARE
    assert default.over(29 * s, 2 * s, 10**4 * s) == trace_budget.TIME_LIMIT
    chosen = trace_budget.from_env({"SCALDIAG_TRACE_SHARE": "0.1"}, 0)
    assert chosen.over(int(1.2 * s), int(0.4 * s), 5 * s) == trace_budget.RUN_SHARE
