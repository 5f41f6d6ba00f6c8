"""Two runs (or two sweeps) side by side: before and after a fix.

Pure arithmetic over two reports: throughput, step time with its noise, the
whole-run accounting when both have it, each category's per-step time, the
scaling per device count for sweeps; what changed most; and, for each
forecast the first run's findings made, the speedup the second run measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scaldiag.analyze.categories import CATEGORIES
from scaldiag.errors import ScaldiagError
from scaldiag.record.run_json import FINISHED
from scaldiag.rules.report import RunReport, SweepReport


@dataclass(frozen=True)
class Change:
    metric: str
    unit: str
    before: float | None
    after: float | None
    lower_is_better: bool = True
    noise: float | None = None  # 95% half-width of the difference, when known
    # 95% half-width of log(after / before), when known: the one noise model of a ratio
    # (ratio_noise), the same for a step time and the throughput it gives, so that they never
    # disagree.
    log_noise: float | None = None

    @property
    def delta(self) -> float | None:
        return None if self.before is None or self.after is None else self.after - self.before

    @property
    def delta_pct(self) -> float | None:
        d = self.delta
        return None if d is None or not self.before else 100.0 * d / abs(self.before)

    @property
    def noise_pct(self) -> float | None:
        """The noise of the change in % of ``before`` (about; from log_noise or noise)."""
        if self.log_noise is not None:
            return 100.0 * math.expm1(self.log_noise)
        return (
            None if self.noise is None or not self.before else 100.0 * self.noise / abs(self.before)
        )

    @property
    def within_noise(self) -> bool:
        if self.log_noise is not None:
            return bool(
                self.before
                and self.after
                and self.before > 0
                and self.after > 0
                and abs(math.log(self.after / self.before)) <= self.log_noise
            )
        return self.noise is not None and self.delta is not None and abs(self.delta) <= self.noise

    @property
    def verdict(self) -> str:
        d = self.delta
        if d is None:
            return "?"
        if self.within_noise or d == 0:
            return "same (within noise)" if self.within_noise else "same"
        return "better" if (d < 0) == self.lower_is_better else "worse"


@dataclass(frozen=True)
class Forecast:
    """A forecast (or a ceiling) the first run's report made, and what the second run measured."""

    finding: str
    title: str
    predicted: float
    low: float
    high: float
    measured: float | None  # speedup of B over A (samples/s, or inverse step time)
    kind: str = "ceiling"  # rules/base.py Speedup.kind
    # `scaldiag try` of this finding on run A (its try.json's "speedup": median, low, high, pairs
    # and "sets"), where one was run: the fix measured on A's own script, beside B's measurement.
    tried: dict | None = None

    @property
    def held(self) -> bool | None:
        """A forecast holds inside its range; a ceiling holds when the measured speed-up does not
        pass it."""
        if self.measured is None:
            return None
        return (
            self.measured <= self.high
            if self.kind == "ceiling"
            else self.low <= self.measured <= self.high
        )


@dataclass(frozen=True)
class Comparison:
    before: str
    after: str
    kind: str  # "run" or "sweep"
    changes: list[Change]
    categories: list[Change] = field(default_factory=list)  # per-step ms by category
    forecasts: list[Forecast] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def most_changed(self) -> Change | None:
        """The category whose per-step time moved most (in ms), beyond the noise."""
        moved = [c for c in self.categories if c.delta is not None and not c.within_noise]
        return max(moved, key=lambda c: abs(c.delta), default=None)


def compare(a: RunReport | SweepReport, b: RunReport | SweepReport) -> Comparison:
    if type(a) is not type(b):
        raise ScaldiagError("compare needs two runs or two sweeps, not one of each")
    return _sweeps(a, b) if isinstance(a, SweepReport) else _runs(a, b)


def _runs(a: RunReport, b: RunReport) -> Comparison:
    sa, sb = a.analysis.steps, b.analysis.steps
    notes = _unlike(a, b)
    changes = []
    if sa and sb:
        noise = ratio_noise(
            sa.step_time_ms.mean, sa.step_time_ms.ci95, sb.step_time_ms.mean, sb.step_time_ms.ci95
        )
        changes.append(
            Change(
                "step time (steady, mean)",
                "ms",
                sa.step_time_ms.mean,
                sb.step_time_ms.mean,
                noise=_hypot(sa.step_time_ms.ci95, sb.step_time_ms.ci95),
                log_noise=noise,
            )
        )
        changes.append(
            Change(
                "throughput",
                "samples/s",
                sa.samples_per_s,
                sb.samples_per_s,
                lower_is_better=False,
                log_noise=noise,
            )
        )
    else:
        notes.append(
            "no steady-state steps in "
            + " and ".join(r.run_dir for r, s in ((a, sa), (b, sb)) if not s)
        )
    ga, gb = _goodput(a), _goodput(b)
    if ga is not None or gb is not None:
        changes.append(Change("goodput", "%", ga, gb, lower_is_better=False))
    ta = a.analysis.accounting.wall_s if getattr(a.analysis, "accounting", None) else None
    tb = b.analysis.accounting.wall_s if getattr(b.analysis, "accounting", None) else None
    if ta is not None or tb is not None:
        changes.append(Change("wall time", "s", ta, tb))
    categories = _categories(a, b)
    if not categories:
        notes.append("no per-category comparison: it needs both runs' traces")
    measured = _speedup(
        sa.samples_per_s if sa else None,
        sb.samples_per_s if sb else None,
        sa.step_time_ms.mean if sa else None,
        sb.step_time_ms.mean if sb else None,
    )
    findings = list(a.findings) + (list(a.trace_report.findings) if a.trace_report else [])
    forecasts = _forecasts(findings, measured, a.analysis.tried)
    return Comparison(a.run_dir, b.run_dir, "run", changes, categories, forecasts, notes)


def _unlike(a: RunReport, b: RunReport) -> list[str]:
    """What makes the two runs more than one script before and after a change: other frameworks,
    other batches, a run that did not finish (its figures cover the part that ran)."""
    notes = []
    fa, fb = (_framework(r) for r in (a, b))
    if fa and fb and fa != fb:
        notes.append(
            f"the runs are of different frameworks ({fa} and {fb}): the figures compare two "
            "programs, not a change to one"
        )
    ba, bb = (r.analysis.training.get("global_batch") for r in (a, b))
    if isinstance(ba, int) and isinstance(bb, int) and ba != bb:
        notes.append(f"the global batch differs ({ba} and {bb}): compare samples/s, not step times")
    for r in (a, b):
        status = r.analysis.run.status
        if status and status != FINISHED:
            notes.append(
                f"{r.run_dir} did not finish ({status}): its figures cover the part that ran"
            )
    return notes


def _framework(r: RunReport) -> str | None:
    framework = (r.analysis.training or {}).get("framework") or {}
    name, backend = framework.get("name"), framework.get("backend")
    return f"{name} on {backend}" if name and backend and name == "keras" else name


def _goodput(r: RunReport) -> float | None:
    acc = getattr(r.analysis, "accounting", None)
    g = acc.goodput if acc is not None else None
    return None if g is None else 100.0 * g


def _categories(a: RunReport, b: RunReport) -> list[Change]:
    if (
        not a.trace_report
        or not b.trace_report
        or not a.trace_report.analysis.units
        or not b.trace_report.analysis.units
    ):
        return []
    ua, ub = a.trace_report.analysis.units[0], b.trace_report.analysis.units[0]
    # A traced step is one call of the train function: steps_per_execution batches. Per batch, so
    # that a run with steps_per_execution=32 is not read as 32 times the compute of one without.
    ka, kb = _batches_per_call(a), _batches_per_call(b)
    out = []
    for c in CATEGORIES:
        ca, cb = ua.categories[c], ub.categories[c]
        if ca.busy_ms or cb.busy_ms:
            # The share's spread, as ms of each run's step.
            noise = _hypot(
                ca.exclusive_pct_ci95 * ua.step_time_ms.mean / 100 / ka,
                cb.exclusive_pct_ci95 * ub.step_time_ms.mean / 100 / kb,
            )
            out.append(
                Change(c, "ms/step", ca.exclusive_ms / ka, cb.exclusive_ms / kb, noise=noise)
            )
    return out


def _batches_per_call(r: RunReport) -> int:
    value = (r.analysis.training or {}).get("steps_per_execution") if r.analysis else None
    return value if isinstance(value, int) and value > 0 else 1


def _sweeps(a: SweepReport, b: SweepReport) -> Comparison:
    pa = {p.gpus: p for p in a.analysis.points}
    pb = {p.gpus: p for p in b.analysis.points}
    changes = []
    for n in sorted(set(pa) & set(pb)):
        x, y = pa[n], pb[n]
        noise = ratio_noise(
            x.step_time_ms, x.step_time_ci95_ms, y.step_time_ms, y.step_time_ci95_ms
        )
        changes.append(
            Change(
                f"{n} devices: throughput",
                "samples/s",
                x.samples_per_s,
                y.samples_per_s,
                lower_is_better=False,
                log_noise=noise,
            )
        )
        changes.append(
            Change(
                f"{n} devices: step time",
                "ms",
                x.step_time_ms,
                y.step_time_ms,
                noise=_hypot(x.step_time_ci95_ms, y.step_time_ci95_ms),
                log_noise=noise,
            )
        )
        if n != min(pa):
            # Efficiency is the speedup over N: one ratio, one noise.
            scaled = ratio_noise(x.speedup, x.speedup_ci95, y.speedup, y.speedup_ci95)
            changes.append(
                Change(
                    f"{n} devices: speedup",
                    "x",
                    x.speedup,
                    y.speedup,
                    lower_is_better=False,
                    noise=_hypot(x.speedup_ci95, y.speedup_ci95),
                    log_noise=scaled,
                )
            )
            changes.append(
                Change(
                    f"{n} devices: efficiency",
                    "%",
                    _pct(x.efficiency),
                    _pct(y.efficiency),
                    lower_is_better=False,
                    log_noise=scaled,
                )
            )
    only = sorted(set(pa) ^ set(pb))
    notes = [f"device counts in one sweep only: {', '.join(map(str, only))}"] if only else []
    top = max(set(pa) & set(pb), default=None)
    measured = (
        _speedup(
            pa[top].samples_per_s, pb[top].samples_per_s, pa[top].step_time_ms, pb[top].step_time_ms
        )
        if top
        else None
    )
    return Comparison(
        a.sweep_dir, b.sweep_dir, "sweep", changes, [], _forecasts(a.findings, measured), notes
    )


def _forecasts(findings, measured: float | None, tried: dict | None = None) -> list[Forecast]:
    """Each finding's speed-up against B's measurement (``tried``: run A's try.json, set beside
    the finding it tried)."""
    tried = tried or {}
    return [
        Forecast(
            f.id,
            f.title,
            f.predicted_speedup.value,
            f.predicted_speedup.low,
            f.predicted_speedup.high,
            measured,
            f.predicted_speedup.kind,
            tried if tried.get("finding") == f.id else None,
        )
        for f in findings
        if f.predicted_speedup
    ]


def _speedup(rate_a, rate_b, step_a, step_b) -> float | None:
    if rate_a and rate_b:
        return rate_b / rate_a
    if step_a and step_b:
        return step_a / step_b
    return None


def ratio_noise(
    a: float | None, a_ci95: float | None, b: float | None, b_ci95: float | None
) -> float | None:
    """The 95% half-width of log(b / a) from each mean's half-width (first order: the relative
    half-widths add in quadrature). One model for every change of a run: a step time and the
    throughput it gives (samples per step over it) move by the same log ratio, so they are both
    within the noise or both beyond it; ``check --max-regression`` uses the same (rules/check.py).
    """
    if not a or not b or a <= 0 or b <= 0:
        return None
    return _hypot(None if a_ci95 is None else a_ci95 / a, None if b_ci95 is None else b_ci95 / b)


def _hypot(x: float | None, y: float | None) -> float | None:
    if x is None or y is None or not math.isfinite(x) or not math.isfinite(y):
        return None
    return math.hypot(x, y)


def _pct(x: float | None) -> float | None:
    return None if x is None else 100.0 * x
