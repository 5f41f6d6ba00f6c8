"""Verdicts decided from the share's 95% range, severity from the gain it allows (issue 35)."""

import re

from test_rules import analysis, unit

from scaldiag.rules.base import BORDERLINE, Finding, Speedup, graded, presence
from scaldiag.rules.report import build_report


def test_a_range_fully_above_straddling_or_fully_below_the_threshold():
    assert presence(14.0, 3.0, 10.0) == "clear"  # 11-17% against 10%
    assert presence(11.0, 3.0, 10.0) == BORDERLINE  # 8-14%
    assert presence(8.0, 3.0, 10.0) == BORDERLINE  # 5-11%
    assert presence(6.0, 3.0, 10.0) is None  # 3-9%
    assert presence(12.0, float("inf"), 10.0) == "clear"  # one window: the share itself
    assert presence(8.0, float("nan"), 10.0) is None


def _words(text):
    return re.sub(r"\d+(\.\d+)?", "#", text)


def test_a_borderline_host_share_reads_the_same_words_every_run():
    # Five runs of one borderline case: host overhead 9-13% of the step, spreads 3-5 points.
    reports = [
        build_report(analysis(unit({"host_overhead": pct}, spread=spread)))
        for pct, spread in [(9.0, 3.0), (11.5, 4.0), (13.0, 5.0), (10.2, 3.5), (12.1, 4.2)]
    ]
    for r in reports:
        (f,) = [f for f in r.findings if f.id == "SD105"]
        assert f.severity == BORDERLINE
        assert r.verdict.startswith("Borderline. Host-bound")
        assert "straddles the 10% threshold" in r.verdict
    assert len({_words(r.verdict) for r in reports}) == 1
    assert len({_words(r.findings[0].summary) for r in reports}) == 1


def test_an_established_cause_ranks_before_a_borderline_one_and_heads_the_verdict():
    r = build_report(analysis(unit({"input": 30.0, "host_overhead": 11.0}, spread=2.0)))
    assert [(f.id, f.severity) for f in r.findings][:2] == [
        ("SD101", "high"),
        ("SD105", BORDERLINE),
    ]
    assert r.verdict.startswith("Input-bound")


def test_a_share_clearly_below_gives_no_finding_and_a_compute_verdict():
    r = build_report(analysis(unit({"host_overhead": 5.0}, spread=2.0)))
    assert not [f for f in r.findings if f.id == "SD105"]


def _finding(severity, low, high):
    return Finding(
        id="SD204",
        title="t",
        severity=severity,
        category="clocks",
        summary="",
        evidence=[],
        fix={},
        predicted_speedup=Speedup(high, low, high, ""),
    )


def test_severity_follows_the_gain_the_range_allows():
    assert graded(_finding("medium", 1.0, 1.02)).severity == "low"  # SD204 "at most 1.02x"
    assert graded(_finding("high", 1.05, 1.09)).severity == "low"
    assert graded(_finding("medium", 1.0, 1.2)).severity == "medium"
    assert graded(_finding("high", 1.3, 1.5)).severity == "high"
    assert graded(_finding(BORDERLINE, 1.0, 1.05)).severity == BORDERLINE
