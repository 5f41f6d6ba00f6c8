"""A job's ranks analysed one at a time (analyze/ranks.py, pipeline.analyze_trace_at).

- read file by file (each rank's evidence, then each rank reduced) the analysis is the one of the
  merged trace in memory, in this process and in worker processes;
- each device is measured against its own rank's host threads: on the real 2-GPU DDP traces of
  the development set, a rank's unit in the job is the unit of that rank's file analysed alone.
"""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from scaldiag.analyze import ranks
from scaldiag.analyze.trace_steps import find_steps, step_evidence
from scaldiag.engines import open_engine
from scaldiag.errors import TraceError
from scaldiag.pipeline import _analyze, analyze_trace_at, read_trace

ROOT = Path(__file__).resolve().parent.parent
JOBS = [
    "fixtures/x2_devset/torch_ddp_sync_2gpu",
    "fixtures/kineto/cpu_ddp_gloo",
    "fixtures/kineto/synthetic_gpu",
    "fixtures/kineto/h200_ddp_gloo_1gpu",
]


@pytest.mark.parametrize("job", JOBS)
def test_file_by_file_is_the_merged_trace_s_analysis(job):
    name, trace = read_trace(ROOT / job)
    merged = _analyze(trace, name)
    assert analyze_trace_at(ROOT / job) == merged
    with open_engine("local:2") as engine:
        assert analyze_trace_at(ROOT / job, None, engine) == merged


def test_each_device_against_its_own_rank_s_host_only():
    job = ROOT / "fixtures/x2_devset/torch_ddp_sync_2gpu"
    units = {u.name: u for u in analyze_trace_at(job).units}
    for rank in (0, 1):
        (alone,) = analyze_trace_at(job / f"rank{rank}.pt.trace.json.gz").units
        in_job = units[f"rank{rank}:{alone.name}"]
        assert replace(in_job, name=alone.name) == alone


def test_step_evidence_finds_the_steps_of_the_whole_trace():
    for job in JOBS:
        _, trace = read_trace(ROOT / job)
        for _, rank in ranks.split(trace):
            whole, cut = (
                find_steps(rank),
                find_steps(replace(rank, planes=step_evidence(rank.planes))),
            )
            assert (whole.method, whole.description, whole.marker) == (
                cut.method,
                cut.description,
                cut.marker,
            )
            assert np.array_equal(whole.start_ns, cut.start_ns) and np.array_equal(
                whole.end_ns, cut.end_ns
            )


def test_a_trace_without_steps_keeps_its_window():
    _, trace = read_trace(ROOT / "fixtures/x2_devset/torch_ddp_sync_2gpu/rank0.pt.trace.json.gz")
    devices = replace(
        trace, planes=trace.device_planes
    )  # no host: no step marker, no train function
    whole, cut = (
        find_steps(devices),
        find_steps(replace(devices, planes=step_evidence(devices.planes))),
    )
    assert whole.method == cut.method == "none"
    assert (whole.start_ns.tolist(), whole.end_ns.tolist()) == (
        cut.start_ns.tolist(),
        cut.end_ns.tolist(),
    )


def test_a_rank_file_that_cannot_be_read_is_left_out_and_named(tmp_path):
    job = ROOT / "fixtures/x2_devset/torch_ddp_sync_2gpu"
    (tmp_path / "rank0.pt.trace.json.gz").write_bytes((job / "rank0.pt.trace.json.gz").read_bytes())
    (tmp_path / "rank1.pt.trace.json.gz").write_bytes(
        (job / "rank1.pt.trace.json.gz").read_bytes()[:20000]
    )
    alone = analyze_trace_at(job / "rank0.pt.trace.json.gz")
    with open_engine("local:2") as engine:
        found = analyze_trace_at(tmp_path, None, engine)
    assert [u.name for u in found.units] == ["rank0:/device:GPU:0"]
    assert found.units[0].categories == alone.units[0].categories
    assert any(
        "rank1.pt.trace.json.gz" in n and "truncated" in n and "left out" in n for n in found.notes
    )


def test_a_job_none_of_whose_files_can_be_read_is_refused(tmp_path):
    for rank in (0, 1):
        (tmp_path / f"rank{rank}.pt.trace.json").write_text('{"traceEvents": [')
    with pytest.raises(TraceError, match="rank0.pt.trace.json.*none can be read"):
        analyze_trace_at(tmp_path)
