"""The ranks' files on one clock: a 50 ms offset between a healthy 2-rank trace's ranks is estimated from
the ends of their collectives, corrected, and said; it no longer flips the verdict (issue 22, item 7)."""

import gzip
import json

import pytest
from conftest import FIXTURES

from scaldiag.analyze.profile import analyze_trace
from scaldiag.errors import TraceError
from scaldiag.readers import read_trace
from scaldiag.rules.report import build_report

DDP = FIXTURES / "x2_devset" / "torch_ddp_sync_2gpu"
PLAIN = FIXTURES / "x2_devset" / "torch_ddp_sync_1gpu_plain" / "rank0.pt.trace.json.gz"


def shifted_copy(source, target, us: float) -> None:
    """A Kineto file with every event moved by ``us`` microseconds (its rank's clock set off)."""
    data = json.load(gzip.open(source))
    for event in data["traceEvents"]:
        if isinstance(event.get("ts"), (int, float)):
            event["ts"] += us
    with gzip.open(target, "wt") as out:
        json.dump(data, out)


def verdict(path):
    analysis = analyze_trace(read_trace(path)[1])
    return analysis, [(f.id, f.severity) for f in build_report(analysis).findings]


def test_a_50_ms_offset_is_estimated_corrected_and_the_verdict_kept(tmp_path):
    (tmp_path / "rank0.pt.trace.json.gz").write_bytes((DDP / "rank0.pt.trace.json.gz").read_bytes())
    shifted_copy(DDP / "rank1.pt.trace.json.gz", tmp_path / "rank1.pt.trace.json.gz", 50_000.0)
    recorded, expected = verdict(DDP)
    skewed, found = verdict(tmp_path)
    (natural,) = [n for n in recorded.notes if n.startswith("rank1: clock offset")] or [None]
    (note,) = [n for n in skewed.notes if n.startswith("rank1: clock offset")]
    offset_ms = float(note.split("offset ")[1].split(" ms")[0])
    assert offset_ms == pytest.approx(50.0, abs=1.0)  # (the recorded files differ by tens of microseconds)
    assert natural is None  # under 20 us: left as recorded
    assert found == expected
    assert [u.step_time_ms.mean for u in skewed.units] == pytest.approx([u.step_time_ms.mean for u in recorded.units],
                                                                         rel=0.02)


def test_ranks_without_collectives_far_apart_are_refused(tmp_path):
    """No collective to align on, and the second file starts a second away (over a step): refused."""
    (tmp_path / "rank0.pt.trace.json.gz").write_bytes(PLAIN.read_bytes())
    shifted_copy(PLAIN, tmp_path / "rank1.pt.trace.json.gz", 1_000_000.0)
    with pytest.raises(TraceError, match="cannot be aligned"):
        analyze_trace(read_trace(tmp_path)[1])


def test_ranks_without_collectives_close_together_are_merged_and_said(tmp_path):
    (tmp_path / "rank0.pt.trace.json.gz").write_bytes(PLAIN.read_bytes())
    shifted_copy(PLAIN, tmp_path / "rank1.pt.trace.json.gz", 100.0)
    analysis = analyze_trace(read_trace(tmp_path)[1])
    assert any("offset not estimated" in n for n in analysis.notes)
