"""64 ranks (grown from the real 2-GPU DDP rank traces of the fixtures) give the same report one
rank at
a time in this process, in local worker processes and on a Dask cluster the test starts (issue 26).

Dask is a test dependency (the Makefile installs the ``dask`` extra): this test runs, it is not
skipped.
"""

import importlib.util
import json
from pathlib import Path

import pytest

from scaldiag.cli import main
from scaldiag.pipeline import _analyze, analyze_trace_at, read_trace

ROOT = Path(__file__).resolve().parent.parent
RANKS = 64


def _grower():
    spec = importlib.util.spec_from_file_location(
        "make_trace", ROOT / "bench" / "kineto" / "make_trace.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """64 rank files, rank r grown from the fixture's rank r % 2 with distributedInfo saying r of 64
    (one copy
    of the real trace each: 0.66 MB, 3,147 events)."""
    out = tmp_path_factory.mktemp("job64")
    make = _grower()
    for rank in range(RANKS):
        make(out / f"rank{rank}.pt.trace.json", 0.1, rank=rank, world=RANKS)
    return out


def _report(job: Path, engine: str, out: Path) -> dict:
    assert main(["analyze", str(job), "--json", str(out), "--engine", engine]) == 0
    return json.loads(out.read_text())


@pytest.mark.slow
def test_every_engine_gives_the_same_report(job, tmp_path, capsys):
    reports = {
        engine: _report(job, engine, tmp_path / f"{engine.replace(':', '_')}.json")
        for engine in ("local:1", "local:2", "dask:2")
    }
    capsys.readouterr()
    first = reports["local:1"]
    assert len(first["devices"]) == RANKS
    assert all(report == first for report in reports.values())


def test_one_rank_at_a_time_is_the_whole_job_in_memory(job):
    name, trace = read_trace(job)
    assert analyze_trace_at(job) == _analyze(trace, name)
