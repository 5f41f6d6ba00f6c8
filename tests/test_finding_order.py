"""A borderline finding never heads a report above a firm one (issue 46, issue 48's demo): findings
built by hand, a run's and its trace's."""

from dataclasses import replace

from test_rules import analysis, unit

from scaldiag.rules.base import BORDERLINE, Finding, Speedup
from scaldiag.rules.report import RunReport, build_report, firm_first, run_headline


def _finding(id_, severity, value, low, high, category="input"):
    return Finding(
        id=id_,
        title=f"title {id_}",
        severity=severity,
        category=category,
        summary=f"summary {id_}",
        evidence=[],
        fix={},
        predicted_speedup=Speedup(value, low, high, ""),
    )


# The demo's run under load (issue 48): the trace's input share borderline (3.7%, at most 1.04x)
# and the input ceiling firm (the input caps the speed-up at 1.47x).
BORDERLINE_INPUT = _finding("SD101", BORDERLINE, 1.04, 1.0, 1.04)
FIRM_CEILING = _finding("SD207", "high", 1.47, 1.47, 1.47)


def test_firm_findings_come_first_whatever_their_sizes():
    big_borderline = _finding("SD105", BORDERLINE, 9.0, 1.0, 20.0, "host_overhead")
    small_firm = _finding("SD204", "low", 1.02, 1.01, 1.03, "clocks")
    order = firm_first([big_borderline, BORDERLINE_INPUT, small_firm, FIRM_CEILING])
    assert [f.id for f in order] == ["SD204", "SD207", "SD105", "SD101"]


def test_a_firm_run_finding_heads_over_the_traces_borderline_cause():
    trace = build_report(analysis(unit({"input": 3.7}, spread=2.0)))
    trace = replace(trace, findings=[BORDERLINE_INPUT], verdict="Borderline. title SD101.")
    words, top = run_headline([FIRM_CEILING], trace)
    assert top is FIRM_CEILING
    assert words == "title SD207. Summary SD207 (SD207)."
    report = RunReport("run", None, [FIRM_CEILING], trace, words, top)
    assert [f.id for f in report.findings_shown] == ["SD207", "SD101"]


def test_a_firm_trace_cause_keeps_the_headline_and_a_borderline_run_finding_follows():
    firm_trace = _finding("SD101", "high", 5.6, 3.96, 9.58)
    borderline_run = _finding("SD211", BORDERLINE, 1.3, 1.0, 1.6, "host_overhead")
    trace = build_report(analysis(unit({"input": 80.0}, spread=2.0)))
    trace = replace(trace, findings=[firm_trace], verdict="title SD101.")
    assert run_headline([borderline_run], trace) == ("title SD101.", firm_trace)
    report = RunReport("run", None, [borderline_run], trace, "title SD101.", firm_trace)
    assert [f.id for f in report.findings_shown] == ["SD101", "SD211"]


def test_with_nothing_firm_the_borderline_cause_heads_in_its_own_words():
    trace = build_report(analysis(unit({"host_overhead": 11.0}, spread=3.0)))
    words, top = run_headline([], trace)
    assert top.id == "SD105" and top.severity == BORDERLINE
    assert words == trace.verdict and words.startswith("Borderline.")


def test_the_run_finding_heads_over_a_less_or_as_severe_trace_cause_so_load_does_not_move_it():
    """The demo on a busy machine: its trace's input share medium (44%), its input ceiling high. The
    headline is the ceiling's, as at 3.7% borderline, and as the list puts it first."""
    trace = build_report(analysis(unit({"input": 44.0}, spread=2.0)))
    for severity in ("medium", "high"):
        medium_input = _finding("SD101", severity, 1.78, 1.22, 3.32)
        traced = replace(trace, findings=[medium_input], verdict="title SD101.")
        assert run_headline([FIRM_CEILING], traced)[1] is FIRM_CEILING
    low_run = _finding("SD211", "low", 1.05, 1.02, 1.08, "host_overhead")
    high_input = _finding("SD101", "high", 5.6, 3.96, 9.58)
    traced = replace(trace, findings=[high_input], verdict="title SD101.")
    assert run_headline([low_run], traced) == ("title SD101.", high_input)
