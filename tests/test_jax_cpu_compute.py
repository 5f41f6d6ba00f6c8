"""JAX on the CPU backend (fixtures/jax_cpu): XLA's CPU executable is the model's compute.

The fixture is a real trace of tests/jax_epoch_call.py under `scaldiag profile` (fixtures/README.md
says how it was made): the compiled epoch runs as thunks inside ``ThunkExecutor::Execute`` on the
PjRt CPU client's thread and its Eigen workers, while the client's caller waits in
``ThunkExecutor::Execute (wait for completion)``. Before these events were named, the whole step
read as host overhead and SD105 claimed "at most 100.00x".
"""

import glob
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES
from rawproto import events, union_length_in

from scaldiag.analyze.profile import analyze_trace
from scaldiag.readers.xplane.read import read_trace
from scaldiag.rules import sd105_host_bound
from scaldiag.rules.report import build_report

EXECUTE = "ThunkExecutor::Execute"


def fixture_path() -> Path:
    run = FIXTURES / "jax_cpu" / "epoch_call" / "plugins" / "profile"
    files = glob.glob(str(run / "*" / "*.xplane.pb"))
    assert len(files) == 1, files
    return Path(files[0])


def raw_host_events(raw_space):
    return events(raw_space(fixture_path()), "/host:CPU")


def test_the_executable_is_compute(raw_space):
    trace = read_trace([fixture_path()])
    analysis = analyze_trace(trace, "jax_cpu")
    raw = raw_host_events(raw_space)
    steps = [(e["start_ns"], e["end_ns"]) for e in raw if e["name"] == "train"]
    executes = [(e["start_ns"], e["end_ns"]) for e in raw if e["name"] == EXECUTE]
    # the trace's evidence the rule rests on: thunks ran on the client's thread and its workers
    assert {e["line"].split("/")[0] for e in raw if e["name"] == EXECUTE} == {
        "tf_XLAPjRtCpuClient",
        "tf_XLAEigen",
    }
    assert any(e["name"] == f"{EXECUTE} (wait for completion)" for e in raw)
    unit = analysis.units[0]
    assert analysis.framework == "jax" and unit.kind == "host" and unit.steps == len(steps)
    compute_ms = np.mean([union_length_in(executes, a, b) for a, b in steps]) / 1e6
    step_ms = np.mean([b - a for a, b in steps]) / 1e6
    # Compute is the executor's events and nothing else: not the caller's wait for completion,
    # which spans the workers' thunks and would make it larger.
    assert unit.categories["compute"].exclusive_ms == pytest.approx(compute_ms, rel=1e-6)
    shares = sum(t.exclusive_ms for t in unit.categories.values())
    assert shares == pytest.approx(step_ms, rel=1e-6)
    overhead = unit.categories["host_overhead"]
    assert overhead.exclusive_ms <= step_ms - compute_ms + 1e-9


def test_sd105_reads_the_host_work_left(raw_space):
    analysis = analyze_trace(read_trace([fixture_path()]), "jax_cpu")
    unit = analysis.units[0]
    overhead_pct = unit.categories["host_overhead"].exclusive_pct
    finding = sd105_host_bound.RULE.check(analysis)
    if overhead_pct < sd105_host_bound.MODERATE_PCT:
        assert finding is None
    else:  # a finding on what the executor left: its ceiling from that share, not 100x
        assert finding.predicted_speedup is not None
        assert finding.predicted_speedup.value == pytest.approx(100 / (100 - overhead_pct))
    if finding is None:
        assert build_report(analysis).verdict.startswith("Compute-bound")


def without_executable(trace):
    """The same real trace as a runtime that names none of its compute would write it: the
    executor's events dropped (its thunks, named after the program's instructions, stay)."""
    planes = []
    for plane in trace.planes:
        executor = np.array([n.startswith(EXECUTE) for n in plane.event_names] + [False])
        lines = []
        for line in plane.lines:
            keep = ~executor[line.name_id]
            if not keep.all():
                line = replace(
                    line,
                    start_ns=line.start_ns[keep],
                    end_ns=line.end_ns[keep],
                    name_id=line.name_id[keep],
                    stats={k: line.stat(k)[keep] for k in line.stats},
                )
            lines.append(line)
        planes.append(replace(plane, lines=lines))
    return replace(trace, planes=planes)


def test_no_named_compute_claims_no_ceiling():
    trace = without_executable(read_trace([fixture_path()]))
    analysis = analyze_trace(trace, "jax_cpu")
    unit = analysis.units[0]
    assert unit.busy_pct == 0  # nothing on the host is compute the trace names
    assert unit.categories["host_overhead"].exclusive_pct > sd105_host_bound.HIGH_PCT
    finding = sd105_host_bound.RULE.check(analysis)
    assert finding.title == sd105_host_bound.UNNAMED_TITLE
    assert finding.severity == "info"
    assert finding.predicted_speedup is None and finding.forecast is None
    assert "cannot tell the model's compute from framework work" in finding.summary
    assert "no ceiling" in finding.summary
