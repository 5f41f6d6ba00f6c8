"""SD105 on real H200 PyTorch traces: host overhead is only time with no device work, and the fix
follows it.

fixtures/kineto/h200_healthy_run is the run directory of `scaldiag profile bench/torch/healthy.py --
--steps 60` on an H200 (batch 1024, large bf16 matmuls); its twins
(bench/results/gpu_h200/torch/torch.md#sd105_twinsmd) showed the finding true: the same step
replayed as one CUDA graph ran 1.31x faster. fixtures/kineto/h200_cuda is a tiny loop whose device
is busy a few % of each step.
"""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from scaldiag.analyze import intervals as iv
from scaldiag.pipeline import diagnose_run, diagnose_trace
from scaldiag.rules import sd105_host_bound

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kineto"
HEALTHY_RUN = FIXTURES / "h200_healthy_run"
HEALTHY_TRACE = HEALTHY_RUN / "trace" / "plugins" / "profile" / "torch" / "rank0.pt.trace.json.gz"


def _ns(events, key):
    return np.array([round(float(e[key]) * 1000) for e in events], np.int64)


def _device_union_and_steps():
    """From the JSON itself: per ProfilerStep (host span), the time some kernel or copy runs."""
    events = [
        e
        for e in json.loads(gzip.decompress(HEALTHY_TRACE.read_bytes()))["traceEvents"]
        if e.get("ph") == "X"
    ]
    device = [e for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
    dev_s = _ns(device, "ts")
    dev_e = dev_s + _ns(device, "dur")
    steps = sorted(
        (
            e
            for e in events
            if e["name"].startswith("ProfilerStep#") and e["cat"] == "user_annotation"
        ),
        key=lambda e: e["ts"],
    )
    ws, ends = _ns(steps, "ts"), _ns(steps, "ts") + _ns(steps, "dur")
    # a step spans to the next step's start; the last until the device work that starts inside it
    # ends
    last = (dev_s >= ws[-1]) & (dev_s < ends[-1])
    we = np.append(ws[1:], max(ends[-1], dev_e[last].max()))
    return iv.measure_in_windows(iv.union(dev_s, dev_e), ws, we) / 1e6, (we - ws) / 1e6


def test_host_overhead_is_only_time_the_device_idles():
    device_ms, step_ms = _device_union_and_steps()
    report = diagnose_trace(HEALTHY_TRACE.parent)
    (unit,) = report.analysis.units
    device_side = sum(
        t.exclusive_ms
        for c, t in unit.categories.items()
        if c not in ("input", "host_overhead", "idle")
    )
    host_side = sum(unit.categories[c].exclusive_ms for c in ("input", "host_overhead", "idle"))
    # every instant a kernel or copy runs is device work, never host overhead, whatever the host
    # does then
    assert abs(device_side - device_ms.mean()) < 1e-3
    assert abs(host_side - (step_ms - device_ms).mean()) < 1e-3
    assert unit.categories["host_overhead"].exclusive_ms <= (step_ms - device_ms).mean() + 1e-6
    # and the host's own busy time is larger: much of it overlaps kernels already queued
    assert unit.categories["host_overhead"].busy_ms > unit.categories["host_overhead"].exclusive_ms


def test_healthy_run_is_host_bound_and_the_fix_leads_with_the_whole_step_graph():
    report = diagnose_run(HEALTHY_RUN)
    trace = report.analysis.trace
    assert trace.profiler_inflation and trace.profiler_inflation > 1
    (finding,) = [f for f in report.trace_report.findings if f.id == "SD105"]
    assert finding.severity == "high"
    (unit,) = trace.units
    busy = sd105_host_bound.device_busy_pct(unit)
    assert busy >= sd105_host_bound.BUSY_DEVICE_PCT
    fix = finding.fix["pytorch"]
    assert fix.startswith(f"The device is busy {busy:.0f}% of the step")
    assert "torch.cuda.CUDAGraph()" in fix and "capturable=True" in fix
    assert fix.index("CUDAGraph") < fix.index("torch.compile")


def test_tiny_kernels_lead_with_torch_compile():
    report = diagnose_trace(FIXTURES / "h200_cuda")
    (finding,) = [f for f in report.findings if f.id == "SD105"]
    (unit,) = report.analysis.units
    assert sd105_host_bound.device_busy_pct(unit) < sd105_host_bound.BUSY_DEVICE_PCT
    assert finding.fix["pytorch"] == sd105_host_bound.FIX["pytorch"]
    assert finding.fix["pytorch"].startswith(
        "Launch fewer, larger kernels per step: compile the model"
    )


# --- noise is no finding: the CPU accuracy run's torch_healthy (bench/results/accuracy, run 1)
# -------------
CPU_RUNS = (
    Path(__file__).resolve().parent.parent
    / "fixtures"
    / "runs"
    / "cpu_accuracy_run1_torch_healthy_runs.tgz"
)


def _cpu_run(tmp_path, name):
    import tarfile

    with tarfile.open(CPU_RUNS) as tar:
        tar.extractall(tmp_path, filter="data")
    (run_dir,) = (tmp_path / "runs" / name).iterdir()
    return run_dir


def test_host_overhead_that_only_the_inflation_correction_saw_raises_nothing(tmp_path):
    """Round 1 on a loaded 2-core machine: the untraced steps ran 2.3x slower than the traced ones.
    """
    from scaldiag.analyze.profile import analyze_trace
    from scaldiag.pipeline import read_trace

    run_dir = _cpu_run(tmp_path, "torch_healthy_planted_r0")
    (traced,) = analyze_trace(read_trace(run_dir / "trace")[1]).units
    report = diagnose_run(run_dir)
    (shown,) = report.analysis.trace.units
    # The trace itself: almost no host overhead. The correction once put the whole difference to the
    # slower untraced step into host-side time (50.8% host overhead). Tracing cannot make steps
    # faster: the inflation under 1 is not measurable, and nothing is corrected with it.
    assert traced.categories["host_overhead"].exclusive_pct < sd105_host_bound.MODERATE_PCT
    assert (
        report.analysis.trace.profiler_inflation is None
        and report.analysis.steps.profiler_inflation is None
    )
    assert "not measurable" in report.analysis.steps.inflation_note
    assert shown.categories["host_overhead"].exclusive_pct == pytest.approx(
        traced.categories["host_overhead"].exclusive_pct, rel=1e-6
    )
    assert "SD105" not in [f.id for f in report.trace_report.findings]


def test_the_same_script_in_a_quiet_round_reads_the_same(tmp_path):
    run_dir = _cpu_run(tmp_path, "torch_healthy_planted_r1")
    report = diagnose_run(run_dir)
    assert report.analysis.trace.profiler_inflation > 1
    assert sd105_host_bound.correction_noise_pct(report.analysis.trace) == 0
    (unit,) = report.analysis.trace.units
    assert unit.categories["host_overhead"].exclusive_pct < sd105_host_bound.MODERATE_PCT
    assert "SD105" not in [f.id for f in report.trace_report.findings]


def test_a_sweep_run_at_inflation_below_one_is_shown_as_traced():
    """fixtures/runs/sweep/gpus2 (2 x H200, Keras on JAX; synthetic steps around a real trace): the
    recorded
    traced steps read 0.69x the untraced ones. Not measurable: the trace's shares are shown as
    traced, and the tracer's own cost (a trace uncorrected) is in SD105's spread."""
    from conftest import FIXTURES

    from scaldiag.analyze.profile import analyze_trace
    from scaldiag.pipeline import read_trace

    run_dir = FIXTURES / "runs" / "sweep" / "gpus2"
    report = diagnose_run(run_dir)
    trace = report.analysis.trace
    assert trace.profiler_inflation is None and any("not measurable" in n for n in trace.notes)
    raw = analyze_trace(read_trace(run_dir / "trace")[1])
    for shown, traced in zip(trace.units, raw.units):
        assert (
            shown.categories["host_overhead"].exclusive_pct
            == traced.categories["host_overhead"].exclusive_pct
        )
    assert trace.tracer_ms_per_step and trace.tracer_ms_per_step > 0


def test_inflation_below_one_widens_a_real_host_bound_share_but_keeps_it(tmp_path):
    """The H200 run (inflation above 1) with its inflation set below 1: the finding stays, its
    spread wider."""
    from dataclasses import replace

    trace = diagnose_run(HEALTHY_RUN).analysis.trace
    (unit,) = trace.units
    before = sd105_host_bound.RULE.check(trace)
    noisy = replace(trace, profiler_inflation=0.95)
    after = sd105_host_bound.RULE.check(noisy)
    assert before is not None and after is not None
    spread = {e.metric: e.spread for e in after.evidence}[
        "exclusive host_overhead share of step time"
    ]
    host_side = sum(
        t.exclusive_pct
        for c, t in unit.categories.items()
        if c in ("input", "host_overhead", "idle", "other")
    )
    added = (
        5.0 * unit.categories["host_overhead"].exclusive_pct / host_side
    )  # its part of the 5% the correction added
    assert spread == round(unit.categories["host_overhead"].exclusive_pct_ci95 + added, 2)
    assert any("inflation 0.95x" in n for n in after.notes)
