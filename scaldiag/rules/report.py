"""The reports: an analysis, the findings the rules raise on it, and a verdict.

Four kinds, one per thing scaldiag diagnoses: a trace (``Report``), a
captured run (``RunReport``: its steps and samples, and its trace's
report), a sweep (``SweepReport``: the scaling analysis), a job over
several nodes (``JobReport``: its nodes merged on one clock). Which rules see
what, and which findings a sweep shows, is decided here and nowhere else.
Renderers take these objects and only format them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from scaldiag.analyze.nodes import JobAnalysis
from scaldiag.analyze.profile import ProfileAnalysis
from scaldiag.analyze.run import RunAnalysis
from scaldiag.analyze.scaling import ScalingAnalysis
from scaldiag.rules import JOB_RULES, RUN_RULES, SWEEP_RULES, Finding, check_all, rank, run_rules
from scaldiag.rules.base import BORDERLINE, SEVERITIES
from scaldiag.rules.knobs import agree
from scaldiag.rules.machine import fit_trace_report
from scaldiag.rules.sd106_low_utilisation import LOW_BUSY_PCT, busy_text

# The severities of a firm finding (its range clear of its threshold): one of them may head a run.
FIRM = ("high", "medium", "low")


@dataclass(frozen=True)
class Report:
    analysis: ProfileAnalysis
    findings: list[Finding]
    verdict: str


@dataclass(frozen=True)
class RunReport:
    run_dir: str
    analysis: RunAnalysis
    findings: list[Finding]  # run rules: samples, inventory, input ceiling
    trace_report: Report | None  # the trace window's own report
    # The run's headline: the trace's verdict, unless its cause is borderline and a run finding is
    # firm (``run_headline``); the finding it names.
    verdict: str = ""
    headlined: Finding | None = None

    @property
    def framework(self) -> str:
        return self.analysis.training.get("framework", {}).get("backend", "unknown")

    @property
    def findings_shown(self) -> list[Finding]:
        """The run's findings and the trace's, as the report lists them: every firm one first."""
        traced = self.trace_report.findings if self.trace_report else []
        return firm_first(self.findings + traced)


@dataclass(frozen=True)
class SweepReport:
    sweep_dir: str
    analysis: ScalingAnalysis
    findings: list[Finding]  # sweep rules, then the largest run's findings
    framework: str = "unknown"  # the runs' backend: the fix shown is that framework's
    # Every run of the sweep, as found (failed ones included), with its device count: the views
    # (HTML, Perfetto) show them without analysing them again.
    runs: list[tuple[int, RunReport]] = field(default_factory=list)


@dataclass(frozen=True)
class JobReport:
    node_dirs: list[str]
    analysis: JobAnalysis
    findings: list[Finding]  # job rules (SD209, SD210)
    rank_files: list[
        tuple[str, str, str]
    ] = ()  # (node, rank, trace file): the merged trace's sources
    framework: str = "pytorch"  # whose fix is shown: pytorch, tensorflow or jax (node 0's record)


def build_report(analysis: ProfileAnalysis) -> Report:
    findings = run_rules(analysis)
    return Report(analysis=analysis, findings=findings, verdict=verdict(analysis, findings))


def build_run_report(run_dir: str, analysis: RunAnalysis) -> RunReport:
    # the trace's findings with the run's machine: its worker count, its cores' bound
    # (rules/machine.py)
    trace_report = fit_trace_report(
        build_report(analysis.trace) if analysis.trace else None, analysis
    )
    # one value per knob over the run's and the trace's findings, fitted to the machine
    # (rules/knobs.py)
    found = check_all(RUN_RULES, analysis)
    traced = trace_report.findings if trace_report else []
    agreed = agree(found + traced, analysis)
    if trace_report is not None:
        trace_report = replace(trace_report, findings=agreed[len(found) :])
    findings = agreed[: len(found)]
    verdict_words, headlined = run_headline(findings, trace_report)
    return RunReport(run_dir, analysis, findings, trace_report, verdict_words, headlined)


def firm_first(findings: list[Finding]) -> list[Finding]:
    """Every firm finding (its range clear of its threshold) before every borderline one, whatever
    their sizes; the order within each kept (issue 48: the demo headlined a borderline input share,
    at most 1.04x, above the input ceiling's firm 1.47x)."""
    return sorted(findings, key=lambda f: f.severity == BORDERLINE)


def run_headline(
    findings: list[Finding], trace_report: Report | None
) -> tuple[str, Finding | None]:
    """A run's headline and the finding it names: the trace's verdict, unless one of the run's own
    findings is a firm cause at least as severe as the trace's (or the trace's is borderline): that
    one then heads, as the report lists it first. A run finding is measured over the whole run (the
    input ceiling: the input alone), the trace's cause over the window's few steps, whose share
    moves with the machine's load: the demo's input share read borderline (3.7%), medium (44%) and
    high on one script as the load changed, its input ceiling high each time (issue 48). No trace,
    no headline (as before)."""
    if trace_report is None:
        return "", None
    top = top_cause(trace_report.findings)
    if top is None:
        return trace_report.verdict, top
    firm = [f for f in findings if f.severity in FIRM and f.category != "idle"]
    run_top = min(firm, key=lambda f: SEVERITIES.index(f.severity), default=None)
    if run_top is None or (
        top.severity != BORDERLINE
        and SEVERITIES.index(run_top.severity) > SEVERITIES.index(top.severity)
    ):
        return trace_report.verdict, top
    summary = run_top.summary[:1].upper() + run_top.summary[1:]  # a sentence of its own here
    return f"{run_top.title}. {summary} ({run_top.id}).", run_top


def build_sweep_report(
    sweep_dir: str,
    analysis: ScalingAnalysis,
    runs: dict[int, list[RunAnalysis]],
    reports: list[tuple[int, RunReport]] | None = None,
) -> SweepReport:
    backends = {r.training.get("framework", {}).get("backend") for rs in runs.values() for r in rs}
    framework = backends.pop() if len(backends) == 1 and None not in backends else "unknown"
    reports = list(reports or [])
    return SweepReport(
        sweep_dir,
        analysis,
        firm_first(check_all(SWEEP_RULES, analysis) + _largest_run_findings(runs, reports)),
        framework,
        reports,
    )


def build_job_report(
    node_dirs: list[str],
    analysis: JobAnalysis,
    rank_files: list[tuple[str, str, str]],
    framework: str,
) -> JobReport:
    return JobReport(
        node_dirs, analysis, rank(check_all(JOB_RULES, analysis)), rank_files, framework
    )


def _largest_run_findings(
    runs: dict[int, list[RunAnalysis]], reports: list[tuple[int, RunReport]]
) -> list[Finding]:
    """The run and trace findings at the largest device count: the configuration being scaled
    (from its report when the sweep's run reports are given, so the rules run once)."""
    if not runs:
        return []
    n = max(runs)
    run = runs[n][0]
    report = next((r for _, r in reports if r.analysis is run), None) or build_run_report("", run)
    found = report.findings + (report.trace_report.findings if report.trace_report else [])
    return [replace(f, summary=f"[{n} devices] {f.summary}") for f in found]


def top_cause(findings: list[Finding]) -> Finding | None:
    """The finding the headline names: the first (ranked) that is a cause, not idleness; a
    borderline one (ranked after every established finding) only where no cause is established."""
    return next((f for f in findings if f.category != "idle"), None)


def verdict(analysis: ProfileAnalysis, findings: list[Finding]) -> str:
    """What bounds this run (the views add by how much: the top cause's speed-up line)."""
    top = top_cause(findings)
    if top is not None:
        # What fixing it gives is the finding's speed-up line, in each view's words for a range
        # (render/ranges.py): the headline names the cause and its numbers.
        if top.severity == BORDERLINE:
            # The same words every run where the range straddles the threshold (issue 35: two
            # identical runs read "Compute-bound" and "SD105 high").
            return f"Borderline. {top.title}. {top.summary} ({top.id})."
        return f"{top.title}. {top.summary} ({top.id})."
    if not analysis.units:
        return "Nothing to analyse: the trace has no host or device activity."
    unit = max(analysis.units, key=lambda u: u.categories["compute"].exclusive_pct)
    compute = unit.categories["compute"]
    if not compute.exclusive_pct > 0:  # no compute at all (or NaN shares): no bound can be named
        return (
            "No verdict: the trace shows no compute in its steps, so nothing can be said to bound"
            " them."
        )
    where = "device" if unit.kind == "gpu" else "host"
    idle = next((f for f in findings if f.id == "SD106"), None)
    if not unit.busy_pct >= LOW_BUSY_PCT:
        # Busy under half the step, it waits more than it computes: "Compute-bound" beside SD106
        # ("computes 0.5% (device busy 0.7%)") named the one thing the step was not bound by.
        return (
            f"Waiting, not computing: {unit.name} is busy {busy_text(unit.busy_pct)}% of each step"
            f" (computing {busy_text(compute.exclusive_pct)}%); no input, copy, collective, layout"
            " or host cause clears its threshold beyond the noise, so what it waits for is not"
            " named" + (" (SD106 below)." if idle else ".")
        )
    line = (
        f"Compute-bound: {unit.name} computes {compute.exclusive_pct:.1f}% of step time "
        f"({where} busy {unit.busy_pct:.1f}%); no input, copy, collective, layout or host "
        "bottleneck clears its threshold beyond the noise."
    )
    return line + (f" Another device waits: {idle.summary} (SD106)." if idle else "")
