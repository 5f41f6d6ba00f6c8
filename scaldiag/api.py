"""The Python API: the commands' pipeline, for a notebook or a script.

``scaldiag.analyze(path)`` is ``scaldiag analyze PATH``, ``scaldiag.load(run_dir)`` is ``scaldiag
report RUN_OR_SWEEP`` (a run, a sweep, a job's node directories), ``scaldiag.compare(a, b)`` is
``scaldiag compare A B``: each calls the function of pipeline.py the command calls, and wraps what
it returns. Nothing is computed here: the plain data is the JSON report's (render/json.py, the
public schema), the page is the HTML report's (render/html.py), ``save`` is ``report -o``'s
``emit``. pandas is used only where asked for (``to_dataframes``) and never required.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

from scaldiag.commands.output import emit
from scaldiag.commands.report import refuse_inputs_as_outputs, report_views
from scaldiag.errors import ScaldiagError
from scaldiag.pipeline import diagnose, diagnose_trace
from scaldiag.render import VIEW_FORMATS, html
from scaldiag.render import compare as compare_render
from scaldiag.render import json as json_render
from scaldiag.rules.compare import Comparison
from scaldiag.rules.compare import compare as compare_reports
from scaldiag.rules.report import JobReport, Report, RunReport, SweepReport

__all__ = ["analyze", "load", "compare", "ScaldiagReport", "FindingView", "ComparisonView"]

# save(): a file's suffix -> the render format `report --format` writes.
SUFFIX_FORMATS = {".html": "html", ".htm": "html", ".json": "json", ".txt": "terminal"}
# save(format=...): the command line's names, and the render table's.
FORMAT_NAMES = {"term": "terminal", "terminal": "terminal", "txt": "terminal", "json": "json"}
FORMAT_NAMES |= {"html": "html", "perfetto": "perfetto"}

_KIND = {Report: "trace", RunReport: "run", SweepReport: "sweep", JobReport: "job"}


def analyze(path: str | os.PathLike, run: str | None = None) -> ScaldiagReport:
    """A trace file or a logdir (XPlane, Kineto), as ``scaldiag analyze PATH [--run RUN]``."""
    return ScaldiagReport(diagnose_trace(path, run), [str(path)])


def load(
    path: str | os.PathLike | list[str | os.PathLike], interconnect: str | None = None
) -> ScaldiagReport:
    """A run directory, a sweep directory, or a job's node directories (a list, or the directory
    holding them), as ``scaldiag report``; ``interconnect``: its ``--interconnect``."""
    paths = [str(p) for p in path] if isinstance(path, (list, tuple)) else [str(path)]
    _exists(paths)
    return ScaldiagReport(diagnose(paths if len(paths) > 1 else paths[0], interconnect), paths)


def compare(before, after) -> ComparisonView:
    """Two runs or two sweeps, before and after a fix, as ``scaldiag compare A B``: each a path
    or a report ``load`` returned (it is not read again)."""
    a, b = (x if isinstance(x, ScaldiagReport) else load(x) for x in (before, after))
    return ComparisonView(compare_reports(a.raw, b.raw))


def _exists(paths: list[str]) -> None:
    for p in paths:
        if not Path(p).exists():
            raise ScaldiagError(f"{p}: no such run directory")


class ScaldiagReport:
    """A report: findings, the clock, the accounting and the steps as plain data (the JSON report's
    dicts and lists), as pandas DataFrames where pandas is installed, shown inline in Jupyter (the
    HTML report), saved as ``scaldiag report -o`` writes it. ``raw`` is the pipeline's own object
    (rules/report.py), ``paths`` what it was read from."""

    def __init__(self, raw: Report | RunReport | SweepReport | JobReport, paths: list[str]):
        self.raw = raw
        self.paths = list(paths)

    def __repr__(self) -> str:
        said = self.verdict[:100] or f"{len(self.findings)} finding(s)"
        return f"<scaldiag {self.kind} report of {', '.join(self.paths)}: {said}>"

    @property
    def kind(self) -> str:
        """``trace``, ``run``, ``sweep`` or ``job``."""
        return _KIND[type(self.raw)]

    @cached_property
    def data(self) -> dict:
        """The whole report as the JSON report holds it (render/json.py: the public schema)."""
        return json_render.clean(json_render.to_dict(self.raw))

    @property
    def verdict(self) -> str:
        return getattr(self.raw, "verdict", "") or ""

    @property
    def framework(self) -> str:
        raw = self.raw
        return raw.analysis.framework if isinstance(raw, Report) else raw.framework

    @cached_property
    def findings(self) -> list[FindingView]:
        """Every finding, in the report's order (a run's firm ones first, its trace's with them):
        each a dict of the JSON report's keys (id, title, severity, category, summary, evidence,
        fix, predicted_speedup and forecast: each a ``kind``, ceiling or forecast, with its range
        and arithmetic; notes)."""
        raw = self.raw
        found = raw.findings_shown if isinstance(raw, RunReport) else raw.findings
        return [FindingView(f, self.framework) for f in found]

    def finding(self, finding_id: str) -> FindingView:
        """The finding with this id (``SD105``)."""
        for f in self.findings:
            if f["id"] == finding_id:
                return f
        have = ", ".join(f["id"] for f in self.findings) or "none"
        raise KeyError(f"no finding {finding_id} in this report (findings: {have})")

    @property
    def clock(self) -> dict | None:
        """A run's step at each scope, the user's own first, with the clocks the script printed
        set beside scaldiag's (``printed``); None for a trace, a sweep or a job."""
        return self.data.get("clock") if self.kind == "run" else None

    @property
    def accounting(self) -> dict | None:
        """A run's wall time, every second in one part, and its goodput; None where not a run."""
        return self.data.get("accounting") if self.kind == "run" else None

    @property
    def steps(self) -> dict | None:
        """A run's steady steps (step time with its spread, samples/s, what was left out and why);
        a trace's steps as found in it."""
        return self.data.get("steps") if self.kind in ("run", "trace") else None

    @property
    def scaling(self) -> list[dict] | None:
        """A sweep's points: speedup and efficiency at each device count."""
        return self.data.get("scaling") if self.kind == "sweep" else None

    # -- pandas, where it is installed -------------------------------------------------------

    def to_dataframes(self) -> dict:
        """Every table of the report as a pandas DataFrame, by name (an empty one where the report
        has none): findings, evidence, clock, accounting, breakdown, scaling."""
        return {name: getattr(self, f"{name}_df") for name in _TABLES}

    @property
    def findings_df(self):
        cols = ["id", "severity", "category", "title", "summary", "speedup_kind", "speedup"]
        cols += ["speedup_low", "speedup_high"]
        rows = []
        for f in self.findings:
            s = f["predicted_speedup"] or {}
            rows.append(
                [f[k] for k in cols[:5]] + [s.get(k) for k in ("kind", "value", "low", "high")]
            )
        return _frame(rows, cols)

    @property
    def evidence_df(self):
        cols = ["finding", "metric", "value", "spread", "unit", "threshold", "device"]
        rows = [[f["id"], *(e[k] for k in cols[1:])] for f in self.findings for e in f["evidence"]]
        return _frame(rows, cols)

    @property
    def clock_df(self):
        cols = ["scope", "ms", "ms_ci95", "steps", "user_ms", "samples_per_s", "what"]
        scopes = (self.clock or {}).get("scopes", {})
        return _frame([[name, *(s.get(k) for k in cols[1:])] for name, s in scopes.items()], cols)

    @property
    def accounting_df(self):
        acc = self.accounting or {}
        wall = acc.get("wall_s")
        rows = [
            [p["part"], p["seconds"], 100 * p["seconds"] / wall if wall else None]
            for p in acc.get("parts", [])
        ]
        return _frame(rows, ["part", "seconds", "pct_of_wall"])

    @property
    def breakdown_df(self):
        """Each device's per-step time by category (exclusive and busy), from the trace."""
        cols = ["device", "category", "exclusive_ms", "exclusive_pct", "exclusive_pct_ci95"]
        cols.append("busy_ms")
        rows = [
            [d["name"], c, *(v[k] for k in cols[2:])]
            for d in self._trace_data().get("devices", [])
            for c, v in d["categories"].items()
        ]
        return _frame(rows, cols)

    @property
    def scaling_df(self):
        points = self.scaling or []
        return _frame([list(p.values()) for p in points], list(points[0]) if points else [])

    def _trace_data(self) -> dict:
        if self.kind == "trace":
            return self.data
        return (self.data.get("trace_report") or {}) if self.kind == "run" else {}

    # -- as the commands write it --------------------------------------------------------------

    def save(self, path: str | os.PathLike, format: str | None = None, verbose: bool = False):
        """Write the report as ``scaldiag report RUN -o PATH --format FORMAT`` writes it (the same
        ``emit``): ``format`` html, json, term (the terminal's text) or perfetto; by default from
        the suffix (.html, .json, .txt). The file is replaced only once written whole; a file the
        report reads is refused. Returns the path."""
        fmt = _format_of(Path(path), format)
        if self.kind == "trace" and fmt == "perfetto":
            raise ScaldiagError("a trace's report has no Perfetto export: save a run's report")
        refuse_inputs_as_outputs(self.paths, [str(path)])
        emit(self.raw, None, verbose, fmt, str(path), **self._views(fmt))
        return Path(path)

    def _views(self, fmt: str) -> dict:
        if fmt not in VIEW_FORMATS or self.kind == "trace":
            return {}
        return report_views(Path(self.paths[0]), self.raw, fmt)

    def _repr_html_(self) -> str:
        """The HTML report's content, its styles scoped to it (render/html.py ``fragment``)."""
        views = self._views("html")
        return html.fragment(self.raw, views.get("timelines") or [], views.get("runs") or [])


_TABLES = ("findings", "evidence", "clock", "accounting", "breakdown", "scaling")


class FindingView(dict):
    """One finding: a dict of the JSON report's keys, shown inline as the HTML report shows it."""

    def __init__(self, finding, framework: str):
        super().__init__(json_render.clean(json_render.finding(finding)))
        self._finding, self._framework = finding, framework

    def __repr__(self) -> str:
        return f"<{self['id']} {self['severity']}: {self['title']}>"

    def _repr_html_(self) -> str:
        return html.finding_fragment(self._finding, self._framework)


class ComparisonView:
    """``scaldiag compare``'s comparison: ``data`` as its JSON, shown inline as its terminal
    table; ``raw`` is rules/compare.py's object."""

    def __init__(self, raw: Comparison):
        self.raw = raw

    @cached_property
    def data(self) -> dict:
        import json

        return json.loads(compare_render.to_json(self.raw))

    def __repr__(self) -> str:
        return f"<scaldiag comparison of {self.raw.before} and {self.raw.after}>"

    def _repr_html_(self) -> str:
        return compare_render.to_html(self.raw)


def _format_of(path: Path, format: str | None) -> str:
    if format is not None:
        if format not in FORMAT_NAMES:
            raise ScaldiagError(f"format {format!r}: one of {', '.join(sorted(FORMAT_NAMES))}")
        return FORMAT_NAMES[format]
    fmt = SUFFIX_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ScaldiagError(
            f"{path}: cannot tell the format from its suffix (.html, .json, .txt): give format="
        )
    return fmt


def _frame(rows: list, columns: list):
    try:
        import pandas
    except ImportError:
        raise ScaldiagError(
            "pandas is not installed: the report's tables as DataFrames need it (pip install"
            " pandas); the same data is plain on the report (.findings, .clock, .accounting,"
            " .steps)"
        ) from None
    return pandas.DataFrame(rows, columns=columns)
