"""The readers own reading: the tree is searched once for a trace, and the stats come typed from
them."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

import scaldiag.pipeline as pipeline
import scaldiag.readers as readers

GLOO = FIXTURES / "kineto" / "cpu_ddp_gloo" / "plugins" / "profile" / "torch"


@pytest.mark.parametrize("path", [GLOO / "rank0.pt.trace.json.gz", GLOO])
def test_analysing_a_trace_searches_the_tree_once(monkeypatch, path):
    calls = []
    found = readers.find_trace

    def counted(*args, **kwargs):
        calls.append(args)
        return found(*args, **kwargs)

    monkeypatch.setattr(readers, "find_trace", counted)
    monkeypatch.setattr(pipeline, "find_trace", counted)
    analysis = pipeline.analyze_trace_at(path)
    assert len(calls) == 1 and analysis.units


def test_a_readers_trace_has_its_stats_typed():
    _, trace = readers.read_trace(GLOO / "rank0.pt.trace.json.gz")
    assert all(line.stats_typed for plane in trace.planes for line in plane.lines if line.stats)
