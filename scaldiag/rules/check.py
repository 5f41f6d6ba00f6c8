"""``scaldiag check``: pass or fail a run or a sweep against limits, for CI.

Each limit gives one result: what was measured, the limit, pass or fail, in
words. A limit on one run's figure compares its mean. A regression against a
baseline is a difference of two noisy means: it fails only where the drop
passes the limit beyond the noise (the low end of its 95% interval, from the
one noise model ``compare`` uses, rules/compare.py ``ratio_noise``), so a CI
gate does not fail on a pair that ``compare`` calls the same, and does not
flip from run to run on noise.

Before any limit, the record itself: a gate must not pass what it cannot
vouch for. Every run checked (each run of a sweep, and the baseline's) must
have finished with exit code 0 and its record must read clean; a run killed,
interrupted, still marked running, failed, or whose files are damaged fails
the check with the reason, whatever its numbers say.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from scaldiag import __version__
from scaldiag.errors import ScaldiagError
from scaldiag.record.reader import RECORD_NOTE, rank_dirs, unrecorded_rank_dirs
from scaldiag.record.run_json import FINISHED, RunJson
from scaldiag.record.rundir import RECORD_SCHEMA_VERSION
from scaldiag.rules.compare import ratio_noise
from scaldiag.rules.report import RunReport, SweepReport


@dataclass(frozen=True)
class Limits:
    min_efficiency: float | None = None  # 0.8 = 80% of ideal, each device count of a sweep
    max_step_ms: float | None = None  # steady mean step time
    max_regression_pct: float | None = None  # throughput drop against the baseline, in %
    clock_agrees: bool = False  # every clock the script printed agrees with scaldiag's figure


@dataclass(frozen=True)
class Result:
    check: str
    passed: bool
    reason: str


@dataclass(frozen=True)
class CheckReport:
    """``scaldiag check``'s report: each limit's result, in order; the verdict (exit 1) is whether
    any failed."""

    results: tuple[Result, ...]

    @property
    def failed(self) -> list[Result]:
        return [r for r in self.results if not r.passed]


def parse_percent(text: str) -> float:
    """``"5%"``, ``"5"`` or ``"0.05"``? The first two are 5 %; a bare number is percent too."""
    value = text.strip().removesuffix("%").strip()
    try:
        number = float(value)
    except ValueError:
        raise ScaldiagError(f"not a percentage: {text!r} (write e.g. 5%)") from None
    if number < 0:
        raise ScaldiagError(f"a regression limit must not be negative: {text!r}")
    return number


def check(
    report: RunReport | SweepReport, limits: Limits, baseline: RunReport | SweepReport | None = None
) -> list[Result]:
    if limits == Limits():
        raise ScaldiagError(
            "nothing to check: give --min-efficiency, --max-step-ms, --clock-agrees or --baseline "
            "with --max-regression"
        )
    if (baseline is None) != (limits.max_regression_pct is None):
        raise ScaldiagError("--baseline and --max-regression go together")
    if baseline is not None and type(baseline) is not type(report):
        raise ScaldiagError(
            "the baseline must be of the same kind: a run for a run, a sweep for a sweep"
        )
    results = vouch(report) + (vouch(baseline, "baseline") if baseline is not None else [])
    if limits.min_efficiency is not None:
        if not isinstance(report, SweepReport):
            raise ScaldiagError(
                "--min-efficiency needs a sweep (scaldiag profile --gpus 1,2,...): one run "
                "has no scaling efficiency"
            )
        results += _efficiency(report, limits.min_efficiency)
    if limits.max_step_ms is not None:
        results += _step_time(report, limits.max_step_ms)
    if baseline is not None:
        results += _regression(report, baseline, limits.max_regression_pct)
    if limits.clock_agrees:
        results += _clock_agrees(report)
    return results


def vouch(report: RunReport | SweepReport, label: str = "") -> list[Result]:
    """One result on whether every run behind the report finished cleanly, or one per run that did
    not."""
    runs = (
        [
            (f"{gpus} device{'s' if gpus > 1 else ''} ({Path(r.run_dir).name})", r)
            for gpus, r in report.runs
        ]
        if isinstance(report, SweepReport)
        else [("run", report)]
    )
    prefix = f"{label} " if label else ""
    if not runs:
        return [Result("record", False, f"{prefix}sweep: no run was found in it")]
    failed = [
        Result("record", False, f"{prefix}{name}: {why}")
        for name, r in runs
        for why in [report_problem(r)]
        if why
    ]
    if failed:
        return failed
    what = "run" if len(runs) == 1 else f"all {len(runs)} runs"
    return [
        Result("record", True, f"{prefix}{what} finished with exit code 0, the record reads clean")
    ]


# A steady step this far outside the run's started..ended is no step of this run (the recorder and
# the launcher read the same clock; a second covers the launcher's own start and finalising).
RUN_EDGE_SLACK_NS = 10**9


def report_problem(report: RunReport) -> str | None:
    """Why the run behind ``report`` cannot be vouched for: its run.json (``run_problem``), then a
    record that is not one clean run's (``one_run_problem``), then a rank that did not finish."""
    a = report.analysis
    return (
        run_problem(a.run)
        or one_run_problem(a.run, a.training, a.steps.window_ns if a.steps else None)
        or rank_problem(Path(report.run_dir))
    )


def one_run_problem(run: RunJson, training: dict, steps_ns: tuple[int, int] | None) -> str | None:
    """A record of another scaldiag, times that are not one run's, or a capture that stopped
    mid-run."""
    schema = run.schema_version
    if schema is not None and schema > RECORD_SCHEMA_VERSION:
        return (
            f"run.json is of record schema {schema}, this scaldiag ({__version__}) reads "
            f"{RECORD_SCHEMA_VERSION}: read it with the scaldiag that wrote it"
        )
    if _major(run.scaldiag_version) > _major(__version__):
        return (
            f"run.json was written by scaldiag {run.scaldiag_version[:20]}, newer than this"
            f" {__version__}: read it with the scaldiag that wrote it"
        )
    started, ended = run.started_ns, run.ended_ns
    if started is not None and ended is not None and ended < started:
        return "run.json says the run ended before it started: the record is not one run's"
    if (
        steps_ns is not None
        and started is not None
        and ended is not None
        and (steps_ns[0] < started - RUN_EDGE_SLACK_NS or steps_ns[1] > ended + RUN_EDGE_SLACK_NS)
    ):
        return (
            "its steps lie outside the run's start and end (steps.jsonl of another run?): the"
            " record is not one run's"
        )
    error = training.get("capture_error")
    if error:
        return (
            f"the capture stopped during the run ({str(error)[:200]}): its steps are not all"
            " recorded"
        )
    return None


def _major(version) -> int:
    head = version.split(".")[0] if isinstance(version, str) else ""
    return int(head) if head.isascii() and head.isdigit() and len(head) < 6 else 0


def rank_problem(run_dir: Path) -> str | None:
    """The first rank (> 0) of a multi-process run whose own run.json says it did not finish
    cleanly, or that has no run.json to say it."""
    for rank, path in unrecorded_rank_dirs(run_dir).items():
        return (
            f"rank {rank}'s directory ({path.name}/) holds a record but no run.json: how that"
            " rank ended is unknown"
        )
    for rank, path in rank_dirs(run_dir).items():
        said, damage = RunJson.load(path)
        if damage:
            return f"rank {rank}'s record is damaged: {damage[0]}"
        status, code = (said.status, said.exit_code) if said else (None, None)
        if status is None and code is None:
            continue  # a rank that records no ending of its own: rank 0's record is the job's
        if status != FINISHED or code not in (None, 0):
            exited = f", exit code {code}" if code is not None else ""
            return f"rank {rank} did not finish cleanly (status {str(status)[:60]}{exited})"
    return None


def run_problem(run: RunJson) -> str | None:
    """Why a run's record cannot be vouched for (the first reason), or None.

    A run launched by ``scaldiag profile`` (``launcher_pid``) must say its exit
    code; a run of the callback or the loop API has none (its process goes on)."""
    status, code = run.status, run.exit_code
    damage = _record_damage(run)
    if status != FINISHED:
        exited = f", exit code {code}" if code is not None else ""
        return (
            f"the run did not finish (status {status or 'unknown'}{exited}):"
            f" {damage or 'its numbers are not a measurement'}"
        )
    if code not in (None, 0):
        return f"the script exited with code {code}: its numbers measure a failure"
    if code is None and run.launcher_pid is not None:
        return "the run has no exit code in run.json: it cannot be vouched for"
    return f"the record is damaged: {damage}" if damage else None


def _record_damage(run: RunJson) -> str:
    """The first of the reader's notes on what it could not read cleanly, and how many more; "" for
    none."""
    notes = [m.removeprefix(RECORD_NOTE) for m in run.missing if m.startswith(RECORD_NOTE)]
    if not notes:
        return ""
    return notes[0] + (f" (and {len(notes) - 1} more)" if len(notes) > 1 else "")


def _points(
    report: RunReport | SweepReport,
) -> list[tuple[str, float | None, float | None, float | None]]:
    """(label, mean step ms, its 95% half-width, samples/s) per configuration."""
    if isinstance(report, SweepReport):
        return [
            (f"{p.gpus} devices", p.step_time_ms, p.step_time_ci95_ms, p.samples_per_s)
            for p in report.analysis.points
        ]
    s = report.analysis.steps
    return [
        (
            "run",
            s.step_time_ms.mean if s else None,
            s.step_time_ms.ci95 if s else None,
            s.samples_per_s if s else None,
        )
    ]


def _efficiency(report: SweepReport, minimum: float) -> list[Result]:
    points = [
        p for p in report.analysis.points if p.gpus != min(q.gpus for q in report.analysis.points)
    ]
    if not points and not report.analysis.left_out:
        return [
            Result(
                "efficiency",
                False,
                "the sweep has no scaled point to check (one device count only)",
            )
        ]
    out = [Result("efficiency", False, p.unused_devices) for p in report.analysis.left_out]
    for p in points:
        if p.efficiency is None:
            out.append(
                Result(
                    "efficiency",
                    False,
                    f"{p.gpus} devices: efficiency unknown (global batch unknown)",
                )
            )
            continue
        spread = f" ±{p.speedup_ci95 / p.ideal_speedup:.0%}" if p.speedup_ci95 is not None else ""
        ok = p.efficiency >= minimum
        out.append(
            Result(
                "efficiency",
                ok,
                f"{p.gpus} devices: efficiency {p.efficiency:.0%}{spread} "
                f"{'>=' if ok else '<'} {minimum:.0%} (speedup {p.speedup:.2f}x of "
                f"ideal {p.ideal_speedup:.2f}x)",
            )
        )
    return out


def _step_time(report, maximum: float) -> list[Result]:
    out = []
    for label, step_ms, _, _ in _points(report):
        if step_ms is None:
            out.append(Result("step time", False, f"{label}: no steady-state steps to measure"))
        else:
            ok = step_ms <= maximum
            out.append(
                Result(
                    "step time",
                    ok,
                    f"{label}: mean step {step_ms:.3f} ms {'<=' if ok else '>'} {maximum:g} ms",
                )
            )
    return out


def _regression(report, baseline, max_pct: float) -> list[Result]:
    base = {label: (step, ci, rate) for label, step, ci, rate in _points(baseline)}
    out = []
    for label, step, ci, rate in _points(report):
        if label not in base:
            continue
        b_step, b_ci, b_rate = base[label]
        if rate and b_rate:
            log_drop, what = (
                math.log(b_rate / rate),
                f"throughput {rate:,.0f} samples/s against {b_rate:,.0f}",
            )
        elif step and b_step:
            log_drop, what = math.log(step / b_step), f"step {step:.3f} ms against {b_step:.3f} ms"
        else:
            out.append(
                Result("regression", False, f"{label}: no throughput to compare with the baseline")
            )
            continue
        noise = ratio_noise(b_step, b_ci, step, ci)
        drop = 100.0 * -math.expm1(-log_drop)  # % of the baseline's throughput lost
        low = drop if noise is None else 100.0 * -math.expm1(-(log_drop - noise))  # its 95% low end
        ok = low <= max_pct
        change = f"{drop:.1f}% slower" if drop > 0 else f"{-drop:.1f}% faster"
        spread = "" if noise is None else f" ±{100.0 * math.expm1(noise):.1f}%"
        if ok and drop > max_pct:
            verdict = (
                f"over the {max_pct:g}% allowed, but within the noise: the drop's 95% low end is "
                f"{max(low, 0.0):.1f}%"
            )
        elif ok:
            verdict = f"within the {max_pct:g}% allowed"
        else:
            verdict = f"beyond the {max_pct:g}% allowed" + (
                f": at least {low:.1f}% at 95%" if noise is not None else ""
            )
        out.append(Result("regression", ok, f"{label}: {what}: {change}{spread} ({verdict})"))
    if not out:
        out.append(Result("regression", False, "no configuration in common with the baseline"))
    return out


def _clock_agrees(report) -> list[Result]:
    """Each run's printed clocks (analyze/printed_clock.py): it fails on the first that disagrees
    beyond 5% and the spread, or that counted steps scaldiag did not record."""
    runs = (
        [(f"{gpus} device{'s' if gpus > 1 else ''}", r) for gpus, r in report.runs]
        if isinstance(report, SweepReport)
        else [("run", report)]
    )
    out = []
    for label, r in runs:
        p = r.analysis.printed
        if p is None:
            out.append(
                Result(
                    "clock",
                    False,
                    f"{label}: no printed.jsonl: the script's output was"
                    " not kept (a run from before scaldiag read it)",
                )
            )
            continue
        bad = p.disagreements
        compared = [x for x in p.comparisons if x.agrees is not None]
        if bad:
            x = bad[0]
            if x.unrecorded:
                why = (
                    f"disagrees: counted {x.counted:,} steps where scaldiag recorded {x.recorded:,}"
                )
            elif x.agrees is False:
                why = (
                    f"disagrees: {x.ms:.3g} ms a step against scaldiag's {x.scaldiag_ms:.3g} ms "
                    f"({x.scaldiag_ms / x.ms - 1:+.1%}, beyond 5% and ±{x.spread_ms:.2g} ms)"
                )
            else:  # agrees with scaldiag's figure of its steps, not with the headline's
                why = (
                    f"contradicts the headline: {x.ms:.3g} ms a step against its "
                    f"{x.headline_ms:.3g} ms ({x.headline_ms / x.ms - 1:+.1%})"
                )
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            out.append(Result("clock", False, f"{label}: {x.what} {why}{more}"))
        elif compared:
            out.append(
                Result(
                    "clock",
                    True,
                    f"{label}: {len(compared)} clock"
                    f"{'s' if len(compared) > 1 else ''} the script printed agree",
                )
            )
        else:
            out.append(
                Result("clock", True, f"{label}: no clock in the script's output to compare with")
            )
    return out
