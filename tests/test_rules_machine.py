"""Advice fitted to the machine (rules/machine.py) and SD211, CPU oversubscription.

The unit tests give the rules plain data (a run's host summary, an SD101 finding); the last test
runs a real PyTorch job whose DataLoader has more worker processes than this machine has cores, as a
user who copied ``num_workers=8`` from a bigger machine would, and reads what `scaldiag profile`
says of it.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scaldiag.analyze.run import HostSummary, RunAnalysis
from scaldiag.record.run_json import RunJson
from scaldiag.rules import sd101_input_bound, sd211_cpu_oversubscribed
from scaldiag.rules.base import Finding, Speedup
from scaldiag.rules.machine import Handover, budget, fit_to_machine

ROOT = Path(__file__).resolve().parent.parent


def _run(cores, core_pct, process_pct, processes=1, framework="pytorch", ranks=1, ci=1.0):
    host = HostSummary(
        samples=40,
        cores=cores,
        core_pct_mean=core_pct,
        busiest_core_pct=core_pct,
        process_cpu_pct=process_pct,
        rss_max_bytes=1 << 30,
        core_pct_mean_ci95=ci,
        processes_max=processes,
    )
    return RunAnalysis(
        run=RunJson(),
        training={"framework": {"name": framework}},
        inventory={},
        steps=None,
        gpus=[],
        host=host,
        trace=None,
        ranks={r: None for r in range(ranks)} if ranks > 1 else {},
    )


CEILING = Speedup(4.21, 3.20, 6.15, "1 / (1 - 0.76)")


def _input_finding(ceiling=CEILING):
    return Finding(
        id="SD101",
        title="Input-bound",
        severity="high",
        category="input",
        summary="",
        evidence=[],
        fix=dict(sd101_input_bound.FIX),
        predicted_speedup=ceiling,
    )


def test_the_worker_count_is_the_ranks_share_of_the_cores_less_the_training_loop():
    assert budget(_run(2, 60, 100)).workers == 1
    assert budget(_run(16, 20, 180)).workers == 15
    assert budget(_run(16, 20, 180, ranks=4)).workers == 3
    (fitted,) = fit_to_machine([_input_finding()], _run(16, 20, 180, ranks=4), [])
    assert (
        "num_workers=3," in fitted.fix["pytorch"] and "num_workers=8" not in fitted.fix["pytorch"]
    )


def test_on_two_busy_cores_parallel_workers_are_forecast_by_the_cores_not_the_share():
    # the training processes use 1.8 of 2 cores, nothing else runs: spreading them gives at most 2 /
    # 1.8
    (fitted,) = fit_to_machine([_input_finding()], _run(2, 90, 180), [])
    assert fitted.predicted_speedup.value == 4.21  # the ceiling (removing the input) stands
    assert fitted.forecast.kind == "forecast"
    assert fitted.forecast.value == pytest.approx(2 / 1.8)
    assert fitted.forecast.high == pytest.approx(2 / 1.8)
    # on 16 mostly idle cores the cores do not bind: the forecast is the ceiling
    (roomy,) = fit_to_machine([_input_finding()], _run(16, 12, 180), [])
    assert (roomy.forecast.value, roomy.forecast.high) == (4.21, 6.15)
    # its low end: the ceiling's, widened by the forecasts' own error (analyze/model_error.py)
    assert roomy.forecast.low < 3.20
    assert "the cores do not bind" in roomy.forecast.arithmetic


def test_python_under_the_gil_is_named_and_its_parallel_calls_forecast_at_1x():
    (fitted,) = fit_to_machine(
        [_input_finding()], _run(16, 12, 180, framework="keras"), ["EagerPyFunc", "Iterator"]
    )
    assert fitted.forecast.value == 1.0
    assert any("GIL" in n and "EagerPyFunc" in n for n in fitted.notes)


def test_findings_of_other_causes_and_runs_without_host_samples_are_left_as_they_are():
    other = _input_finding()
    other = Finding(**{**other.__dict__, "category": "host_overhead"})
    assert fit_to_machine([other], _run(2, 90, 180), []) == [other]
    bare = RunAnalysis(
        run=RunJson(), training={}, inventory={}, steps=None, gpus=[], host=None, trace=None
    )
    assert fit_to_machine([_input_finding()], bare, []) == [_input_finding()]


def test_sd211_needs_every_core_busy_beyond_the_noise_and_more_processes_than_cores():
    rule = sd211_cpu_oversubscribed.RULE
    assert rule.check(_run(2, 98, 190, processes=9)).id == "SD211"
    assert rule.check(_run(2, 98, 190, processes=2)) is None  # as many processes as cores
    assert rule.check(_run(2, 85, 160, processes=9)) is None  # a core left idle
    assert rule.check(_run(2, 92, 160, processes=9, ci=5.0)) is None  # busy only within the noise


OVERSUBSCRIBED = textwrap.dedent("""
    import torch, torch.nn as nn
    from torch.utils.data import DataLoader, Dataset

    class Augmented(Dataset):  # per-sample CPU work, as bench/torch/input_bound.py does
        def __len__(self):  # a steady window long enough for SD211's interval: 3 host samples left
            return 64 * 120  # its low end under the threshold at a 97% mean, 1 run in 2
        def __getitem__(self, i):
            x = torch.rand(3, 48, 48)
            for _ in range(8):
                x = (x.flip(2) + 0.01 * torch.randn(x.shape)).clamp_(0, 1)
            return x, i % 10

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 48 * 48, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in DataLoader(Augmented(), batch_size=64, num_workers=8, persistent_workers=True):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
""")


@pytest.mark.skipif(
    os.cpu_count() > 4,
    reason="needs a machine with fewer cores than the job's 9 processes can fill",
)
@pytest.mark.slow
def test_a_copied_worker_count_on_two_cores_is_a_finding_with_this_machines_count(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(OVERSUBSCRIBED)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "--out",
            str(tmp_path / "runs"),
            "--json",
            str(tmp_path / "r.json"),
            str(script),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    found = {f["id"]: f for f in report["findings"]}
    assert "SD211" in found, (report["findings"], report.get("host"))
    assert f"num_workers={os.cpu_count() - 1})" in found["SD211"]["fix"]["pytorch"]


def test_workers_leave_the_training_loop_its_part_and_every_batch_s_hand_over():
    # The H200 twin's planted run (bench/results/accuracy/README.md, round 1): 103.5 ms a step, 97.0
    # of them input, 6.29 MB a batch; the hand-over at 0.37 + 0.127 ns a byte. 15 workers: the loop
    # binds, not them.
    h = Handover(step_ms=103.5, input_ms=97.0, batch_bytes=6.29e6, ns_per_byte=0.497)
    assert h.step_with(15) == pytest.approx(
        103.5 - 97.0 + 6.29e6 * 0.497 / 1e6
    )  # 9.6 ms: 10.8x, twin 9.3x
    assert h.step_with(2) == pytest.approx(97.0 / 2)  # two workers: they bind


def test_a_recorded_pytorch_run_s_input_forecast_names_workers_loop_and_cores():
    from scaldiag.pipeline import diagnose

    report = diagnose(ROOT / "tests" / "golden" / "runs" / "torch_cpu_input_bound")
    (sd101,) = [f for f in report.trace_report.findings if f.id == "SD101"]
    assert (
        sd101.forecast.kind == "forecast" and sd101.forecast.value <= sd101.predicted_speedup.value
    )
    assert (
        "worker(s) share the input's" in sd101.forecast.arithmetic
        and "cores" in sd101.forecast.arithmetic
    )
