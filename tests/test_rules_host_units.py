"""Rules on a host-only trace (PyTorch on the CPU): the inflation correction scales the ops with the
gaps.

fixtures/runs/cpu_accuracy_run1_torch_launch_bound_runs.tgz: bench/torch/launch_bound.py (24 tiny
layers at batch 32) on the 2-core development machine, round 1 of the CPU accuracy run. The trace:
ops 26.5 ms and host overhead 10.5 ms of a 37.1 ms traced step; the untraced step 27.8 ms (inflation
1.34x). Keeping the ops as traced put all 9.3 ms of the inflation between them (host overhead 4.5%,
no finding); the tracer records every op at its entry and exit, in the ops' spans as much as between
them, and there is no untraced clock for either, so every category is scaled by one factor
(analyze/inflation.py).
"""

import tarfile
from pathlib import Path

import pytest

from scaldiag.analyze.profile import analyze_trace
from scaldiag.pipeline import diagnose_run, read_trace

RUNS = (
    Path(__file__).resolve().parent.parent
    / "fixtures"
    / "runs"
    / "cpu_accuracy_run1_torch_launch_bound_runs.tgz"
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cpu_launch_bound")
    with tarfile.open(RUNS) as tar:
        tar.extractall(tmp, filter="data")
    (found,) = (tmp / "runs" / "torch_launch_bound_planted_r0").iterdir()
    return found


def test_a_host_units_shares_stay_as_traced_and_sd105_names_the_planted_cause(run_dir):
    (traced,) = analyze_trace(read_trace(run_dir / "trace")[1]).units
    report = diagnose_run(run_dir)
    (corrected,) = report.analysis.trace.units
    assert traced.kind == "host" and report.analysis.trace.profiler_inflation > 1.2
    ops_ms, gaps_ms = (
        traced.categories["compute"].exclusive_ms,
        traced.categories["host_overhead"].exclusive_ms,
    )
    # The knife's edge the two-clock model stood on: the ops alone fit inside the untraced step,
    # barely.
    assert ops_ms < corrected.step_time_ms.mean < ops_ms + gaps_ms
    for name in ("compute", "host_overhead"):
        assert corrected.categories[name].exclusive_pct == pytest.approx(
            traced.categories[name].exclusive_pct, rel=0.05
        )
    top = report.trace_report.findings[0]
    assert top.id == "SD105" and top.category == "host_overhead"
    # TensorFlow's CPU advice is not PyTorch's: the PyTorch fix for a host trace is the
    # torch.compile one.
    assert "torch.compile" in top.fix["pytorch"]
