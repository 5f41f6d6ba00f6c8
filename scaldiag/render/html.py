"""The report as one self-contained HTML file: tables, inline SVG charts, no script, no network.

Opens offline in any browser; nothing is fetched (no CDN, no font, no
image). Every string that comes from a run, a trace or a script goes
through ``esc`` (html.escape). Charts are drawn by render/svg.py.
"""

from __future__ import annotations

import math
import re
import sys
from typing import TextIO

import numpy as np

from scaldiag.analyze.categories import CATEGORIES
from scaldiag.analyze.input_cost import describe
from scaldiag.analyze.profile import UnitAnalysis
from scaldiag.analyze.run import StepStats
from scaldiag.analyze.scaling import UNEXPLAINED, ScalingAnalysis
from scaldiag.analyze.timeline import RunTimeline
from scaldiag.render import ranges, svg
from scaldiag.render.svg import esc
from scaldiag.render.terminal import printed
from scaldiag.render.words import TENSORBOARD_PIP, framework_words, speedup_words
from scaldiag.rules import Finding
from scaldiag.rules.report import JobReport, Report, RunReport, SweepReport, top_cause
from scaldiag.sanitize import line

FRAMEWORK_LABEL = {"tensorflow": "TensorFlow / Keras", "jax": "JAX / Keras on JAX"}
MAX_STEP_MARKS = 200  # more step boundaries than this are not drawn (they would be a solid bar)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:980px;padding:16px 24px;
color:#222}
h1{font-size:20px;margin:8px 0}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:14px 0 4px}.meta{color:#555}.verdict{font-weight:600;background:#f4f7fb;padding:8px 12px;
border-left:4px solid #4c78a8}table{border-collapse:collapse;margin:6px 0 12px}td,th{padding:3px 8px;
border-bottom:1px solid #eee;text-align:right;vertical-align:top}th{background:#fafafa}td:first-child,
th:first-child{text-align:left}svg.chart{width:100%;height:auto;display:block;margin:4px 0 12px}
.finding{border:1px solid #ddd;border-radius:6px;padding:8px 14px;margin:10px 0}.sev-high{border-left:5px solid
#d62728}.sev-medium{border-left:5px solid #eeca3b}.sev-info{border-left:5px solid #17becf}pre{background:#f6f6f6;
padding:8px;white-space:pre-wrap;overflow-wrap:anywhere;font-size:12.5px}.missing{color:#a15c00}.dim{color:#777}code{font-size:12.5px}
"""  # noqa: E501


def write(
    report,
    stream: TextIO | None = None,
    width: int | None = None,
    timelines: list[RunTimeline] | None = None,
    runs: list | None = None,
    **_views,
) -> None:
    (stream or sys.stdout).write(render(report, timelines or [], runs or []))


def render(
    report: Report | RunReport | SweepReport | JobReport,
    timelines: list[RunTimeline] = (),
    runs: list = (),
) -> str:
    title, body = _page(report, timelines, runs)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        '<meta name="viewport" content="width=device-width,'
        f' initial-scale=1"><style>{CSS}</style></head>'
        f"<body><h1>{esc(title)}</h1>{''.join(body)}</body></html>\n"
    )


def _page(report, timelines, runs) -> tuple[str, list[str]]:
    """The page's title and its body's pieces: the file's and the notebook's (``fragment``)."""
    if isinstance(report, JobReport):
        title, body = f"scaldiag job: {len(report.node_dirs)} nodes", _job(report)
    elif isinstance(report, SweepReport):
        title, body = f"scaldiag sweep: {report.sweep_dir}", _sweep(report, list(runs))
    elif isinstance(report, RunReport):
        title, body = (
            f"scaldiag run: {report.run_dir}",
            _run(report, timelines[0] if timelines else None),
        )
    else:
        title, body = (
            f"scaldiag analyze: {report.analysis.run}",
            _trace(report, report.analysis.framework),
        )
    # a run's name with bidi overrides (U+202E) reordered the heading: shown as escapes
    return line(title), body


# --- inside a page that is not ours (a notebook's output) ----------------------------------------

# The class every rule of a fragment's stylesheet is scoped to: one no notebook styles.
SCOPE = "scaldiag-report"


def fragment(
    report: Report | RunReport | SweepReport | JobReport,
    timelines: list[RunTimeline] = (),
    runs: list = (),
) -> str:
    """The page's content as one ``<div>`` whose stylesheet applies inside it only (``scoped_css``):
    for a page that is not ours, a notebook's output (scaldiag/api.py ``_repr_html_``). No script,
    no iframe: it shows where a notebook runs no script (an untrusted notebook, nbconvert's HTML)
    and takes the height of its content."""
    title, body = _page(report, timelines, runs)
    return _scoped(f"<h1>{esc(title)}</h1>{''.join(body)}")


def finding_fragment(f: Finding, framework: str) -> str:
    """One finding as the report shows it, scoped as ``fragment``."""
    return _scoped(_finding(f, framework))


def _scoped(content: str) -> str:
    return f'<div class="{SCOPE}"><style>{scoped_css(CSS)}</style>{content}</div>'


def scoped_css(css: str, scope: str = SCOPE) -> str:
    """``css`` with every selector inside ``.scope`` (``body`` is the scope itself): the report's
    rules (``table``, ``h2``, ``pre``) would otherwise restyle the whole notebook. Plain rules only:
    an at-rule (``@media``) is refused here rather than leaked unscoped."""
    if "@" in css:
        raise ValueError("an at-rule in the report's CSS: scoped_css scopes plain rules only")
    out = []
    for selectors, declarations in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        scoped = []
        for sel in selectors.split(","):
            sel = sel.strip()
            scoped.append(f".{scope}" if sel == "body" else f".{scope} {sel}")
        out.append(f"{','.join(scoped)}{{{declarations.strip()}}}")
    return "".join(out)


# --- pieces ------------------------------------------------------------------


def _table(header: list[str], rows: list[list[object]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _p(text: object, cls: str = "") -> str:
    return f'<p class="{cls}">{esc(text)}</p>' if cls else f"<p>{esc(text)}</p>"


def _num(x, fmt: str = "{:.3f}", none: str = "-") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return none
    return fmt.format(x)


def _finding(f: Finding, framework: str) -> str:
    out = [
        (
            f'<div class="finding sev-{esc(f.severity)}"><h3>{esc(f.id)} · {esc(f.severity)} ·'
            f" {esc(f.title)}</h3>"
        ),
        _p(f.summary),
    ]
    if f.evidence:
        out.append(
            _table(
                ["evidence", "value", "±95%", "unit", "threshold", "device"],
                [
                    [
                        e.metric,
                        _num(e.value, "{:g}"),
                        _num(e.spread, "{:g}"),
                        e.unit,
                        _num(e.threshold, "{:g}"),
                        e.device or "",
                    ]
                    for e in f.evidence
                ],
            )
        )
    if f.predicted_speedup:
        s = f.predicted_speedup
        out.append(
            f"<p><b>{esc(s.kind.capitalize())}:</b> {esc(ranges.speedup_of(s))}:"
            f" {esc(s.arithmetic)}</p>"
        )
    if f.forecast:
        what, number = speedup_words(f.forecast, f.predicted_speedup)
        out.append(
            f"<p><b>{esc(what.capitalize())}</b> {esc(number)}: {esc(f.forecast.arithmetic)}</p>"
        )
    out += [_p(f"note: {n}", "dim") for n in f.notes]
    first = [framework] if framework in f.fix else list(f.fix)[:1]
    for fw in first:
        out.append(
            "<p><b>Fix"
            f" ({esc(FRAMEWORK_LABEL.get(fw, fw))}):</b></p><pre><code>{esc(f.fix[fw])}</code></pre>"  # noqa: E501
        )
    for fw in [k for k in f.fix if k not in first]:
        out.append(
            f"<details><summary>fix for {esc(FRAMEWORK_LABEL.get(fw, fw))}</summary>"
            f"<pre><code>{esc(f.fix[fw])}</code></pre></details>"
        )
    return "".join(out) + "</div>"


def _findings(findings: list[Finding], framework: str, heading: str = "Findings") -> list[str]:
    out = [f"<h2>{esc(heading)} ({len(findings)})</h2>"]
    if not findings:
        out.append(_p("none: no rule's threshold is cleared beyond the step-to-step noise"))
    return out + [_finding(f, framework) for f in findings]


def _breakdown_rows(label: str, u: UnitAnalysis) -> tuple[str, dict[str, float]]:
    return label, {c: u.categories[c].exclusive_ms for c in CATEGORIES}


def _breakdown(units: list[UnitAnalysis]) -> list[str]:
    out = [
        "<h2>Step-time breakdown</h2>",
        svg.stacked_bars(
            [_breakdown_rows(u.name, u) for u in units],
            title="Per-step time by category (exclusive)",
            x_label="ms per step (exclusive)",
        ),
    ]
    rows = []
    for c in CATEGORIES:
        if any(u.categories[c].busy_ms > 0 for u in units):
            rows.append(
                [c]
                + [
                    f"{u.categories[c].exclusive_pct:.1f}%"
                    f" ±{_num(u.categories[c].exclusive_pct_ci95, '{:.1f}', '?')}"
                    f" ({u.categories[c].exclusive_ms:.3f} / {u.categories[c].busy_ms:.3f} ms)"
                    for u in units
                ]
            )
    out.append(_table(["category"] + [u.name for u in units], rows))
    out.append(
        _p(
            "exclusive % of step time ±95% (exclusive ms / busy ms): each instant counts once, for"
            " the first category active (docs/categories.md); busy counts overlaps in every"
            " category",
            "dim",
        )
    )
    return out


def _verdict(report: Report | RunReport) -> str:
    """The verdict, and what fixing its cause gives, as the terminal's headline says it: a run's
    its own (rules/report.py ``run_headline``: a firm run finding over the trace's borderline
    cause), a trace's its cause's."""
    top = report.headlined if isinstance(report, RunReport) else top_cause(report.findings)
    gain = (
        f"<br>{esc(' '.join(speedup_words(top.predicted_speedup)))}"
        if top is not None and top.predicted_speedup is not None
        else ""
    )
    return f'<p class="verdict">{esc(report.verdict)}{gain}</p>'


def _trace(report: Report, framework: str) -> list[str]:
    a = report.analysis
    out = [
        _p(f"{', '.join(a.sources)} ({a.event_count:,} events, framework: {a.framework})", "meta"),
        _p(f"steps: {a.steps_description}", "meta"),
    ]
    out += [_p(f"note: {n}", "dim") for n in a.notes]
    out.append(_verdict(report))
    if a.units:
        out += _breakdown(a.units)
        out.append(
            _table(
                ["device", "steps", "mean ms", "±95%", "p50", "p90", "busy %"],
                [
                    [
                        u.name,
                        u.steps,
                        _num(u.step_time_ms.mean),
                        _num(u.step_time_ms.ci95, "{:.1f}", "?"),
                        _num(u.step_time_ms.p50),
                        _num(u.step_time_ms.p90),
                        f"{u.busy_pct:.1f}",
                    ]
                    for u in a.units
                ],
            )
        )
    return out + _findings(report.findings, framework, "Trace findings")


# --- a job over several nodes ----------------------------------------------------


def _summary_ms(s) -> str:
    if s is None or s.n == 0 or not math.isfinite(s.mean):
        return "-"
    return f"{s.mean:.1f} ±{s.ci95:.1f}" if math.isfinite(s.ci95) else f"{s.mean:.1f} (one step)"


def _job(report: JobReport) -> list[str]:
    a = report.analysis
    out = [
        _p(
            f"{len(a.nodes)} nodes, {a.ranks_per_node} rank(s) a node, {a.matched_collectives}"
            " collectives matched on every rank",
            "meta",
        )
    ]
    out += [_p(d, "meta") for d in report.node_dirs]
    out.append(f"<h2>Clocks (against {esc(line(a.offsets[0].name))})</h2>")
    out.append(
        _table(
            ["node", "offset ms", "spread µs", "collective ends"],
            [
                [
                    o.name,
                    _num(
                        o.offset_ns / 1e6 if o.offset_ns is not None else None,
                        "{:+.3f}",
                        "not estimated",
                    ),
                    _num(o.spread_ns / 1e3 if o.spread_ns is not None else None, "{:.1f}"),
                    o.collectives,
                ]
                for o in a.offsets[1:]
            ],
        )
    )
    out += [_p(f"note: {n}", "dim") for n in a.notes]
    out.append("<h2>Per node, ms per step, mean ±95% (traced steps)</h2>")
    out.append(
        _table(
            [
                "node",
                "steady step",
                "traced step",
                "input",
                "all-reduce",
                "link",
                "exposed",
                "in-node",
                "late",
                "last at",
            ],
            [
                [
                    n.node,
                    _summary_ms(n.steady_step_ms),
                    _summary_ms(n.step_ms),
                    _summary_ms(n.input_ms),
                    _summary_ms(n.collective_ms),
                    _summary_ms(n.link_ms),
                    _summary_ms(n.exposed_ms),
                    _summary_ms(n.intra_node_ms),
                    _summary_ms(n.lateness_ms),
                    _num(n.last_pct, "{:.0f}%"),
                ]
                for n in a.nodes
            ],
        )
    )
    out.append(_p("ranks: " + ", ".join(r for n in a.nodes for r in n.ranks), "meta"))
    return out + _findings(report.findings, report.framework, "Job findings")


# --- a run -------------------------------------------------------------------


def _run(report: RunReport, timeline: RunTimeline | None) -> list[str]:
    a = report.analysis
    run, training = a.run, a.training
    fw = training.get("framework", {})
    status = f"status: {run.status or '?'}"
    if run.exit_code is not None:
        status += f", exit code {run.exit_code}"
    # The script's own clocks against scaldiag's: a disagreement first (analyze/printed_clock.py)
    out = [
        *(_p(line(x), "verdict") for x in printed.first_lines(a.printed, run.started_ns)),
        _p(" ".join((run.command or [])[1:]) or "?", "meta"),
        _p(status, "meta"),
        _p(
            f"framework: {framework_words(fw)}"
            + f"; replicas: {training.get('replicas', '?')}; global batch:"
            f" {training.get('global_batch', '?')}; per-replica batch:"
            f" {training.get('per_replica_batch', '?')}",
            "meta",
        ),
    ]
    out += [_p(line(x), "dim") for x in printed.clock_lines(a.printed, verbose=True)]
    if report.trace_report:
        out.append(_verdict(report))
    out += _accounting(getattr(a, "accounting", None))
    out += _steps(a.steps) if a.steps else []
    if a.input_cost is not None:
        out.append(_p(describe(a.input_cost), "meta"))
    elif training.get("input_free_skipped"):
        out.append(_p(f"input cost not measured: {training['input_free_skipped']}", "dim"))
    if report.trace_report and report.trace_report.analysis.units:
        out += _breakdown(report.trace_report.analysis.units)
    out += _timelines(timeline) if timeline else []
    out += _gpu_table(a)
    out += [_p(f"missing evidence: {m}", "missing") for m in a.missing]
    findings = list(report.findings) + (
        list(report.trace_report.findings) if report.trace_report else []
    )
    out += _findings(findings, report.framework)
    return out + _more(report)


def _steps(s: StepStats) -> list[str]:
    """The steady steps' table, and the profiler's inflation the breakdown is corrected by."""
    t = s.step_time_ms
    rate = _num(s.samples_per_s, "{:,.0f}", "unknown")
    if s.samples_per_s_low:
        rate += f" (95%: {ranges.interval(s.samples_per_s_low, s.samples_per_s_high)})"
    out = [
        f"<h2>Steps: {s.steady} steady of {s.recorded} recorded</h2>",
        _table(
            ["step ms (mean ±95%)", "p50", "p90", "stdev", "samples/s", "excluded"],
            [
                [
                    ranges.spread(t.mean, t.ci95),
                    f"{t.p50:.3f}",
                    f"{t.p90:.3f}",
                    f"{t.stdev:.3f}",
                    rate,
                    "; ".join(f"{k}: {len(v)}" for k, v in s.excluded.items()) or "none",
                ]
            ],
        ),
    ]
    if s.inflation_note:
        out.append(_p(s.inflation_note, "dim"))
    elif s.traced_step_ms and s.profiler_inflation:
        out.append(
            _p(
                f"profiler inflation {s.profiler_inflation:.2f}x: steps inside the profiler"
                f" window took {s.traced_step_ms:.3f} ms on average; the breakdown below is"
                " corrected to the untraced step (device-side times as traced, host-side"
                " scaled)",
                "dim",
            )
        )
    return out


def _more(report: RunReport) -> list[str]:
    """Where to look at the trace itself, as the terminal report says it: Perfetto reads our export;
    TensorBoard reads XPlane logdirs and does not come with scaldiag, so its pip line comes first.
    """
    out = [
        "<h2>More</h2>",
        (
            f"<p>The trace's timeline: <code>scaldiag report {esc(report.run_dir)} --format "
            "perfetto</code>, then open scaldiag_trace.json in ui.perfetto.dev.</p>"
        ),
    ]
    sources = report.trace_report.analysis.sources if report.trace_report else []
    if any(str(s).endswith(".xplane.pb") for s in sources):
        out.append(
            "<p>Or in TensorBoard's Profile tab (not installed with scaldiag):"
            f" <code>{esc(TENSORBOARD_PIP)}</code>, then <code>tensorboard --logdir"
            f" {esc(report.run_dir)}</code>.</p>"
        )
    return out


def _accounting(acc) -> list[str]:
    """Whole-run accounting, when the analysis has it: wall time split into parts."""
    if acc is None:
        return []
    wall = acc.get("wall_s") if isinstance(acc, dict) else getattr(acc, "wall_s", None)
    parts = acc.get("parts") if isinstance(acc, dict) else getattr(acc, "parts", None)
    if isinstance(parts, dict):
        items = [
            (k, v if isinstance(v, (int, float)) else _field(v, "seconds", "s", "wall_s"))
            for k, v in parts.items()
        ]
    else:
        items = [
            (_field(p, "name", "part", "label"), _field(p, "seconds", "s", "wall_s"))
            for p in parts or []
        ]
    items = [(str(k), float(v)) for k, v in items if isinstance(v, (int, float))]
    rows = [[k, f"{v:.3f}", f"{100 * v / wall:.1f}%" if wall else "-"] for k, v in items]
    return [
        "<h2>Where the run's time went</h2>",
        _p(f"wall time {_num(wall, '{:.3f}', '?')} s, from launch to exit", "meta"),
        _table(["part", "seconds", "of wall time"], rows),
    ]


def _field(obj, *names):
    for n in names:
        v = obj.get(n) if isinstance(obj, dict) else getattr(obj, n, None)
        if v is not None:
            return v
    return None


# The GPU charts: (title, unit, series names); every GPU's series in one chart.
_CHARTS = (
    ("GPU utilisation", "%", ("util",)),
    ("PCIe / NVLink throughput", "B/s", None),
    ("SM clock", "MHz", ("SM clock",)),
    ("GPU power", "W", ("power",)),
    ("GPU memory used", "B", ("memory used",)),
)


def _timelines(t: RunTimeline) -> list[str]:
    times = [x for x in [t.step_begin_ns] + [s.t_ns for s in t.series] if len(x)]
    if not times:
        return []
    t0 = int(min(x.min() for x in times))

    def sec(ns):
        return ((np.asarray(ns, np.int64) - t0) / 1e9).tolist()

    marks = sec(t.step_begin_ns) if len(t.step_begin_ns) <= MAX_STEP_MARKS else []
    bands = []
    if t.steady_window_ns:
        bands.append((*sec(t.steady_window_ns), "steady-state steps", "#54a24b"))
    if t.traced.any():
        bands.append(
            (
                sec(t.step_begin_ns[t.traced].min()),
                sec(t.step_end_ns[t.traced].max()),
                "profiler window (traced steps)",
                "#f58518",
            )
        )
    out = [
        "<h2>Timelines</h2>",
        _p(
            "from the samples, seconds since the first sample"
            + ("; ticks along the top: step boundaries" if marks else "")
            + "; shaded: steady-state steps (green), the profiler window (orange)",
            "dim",
        ),
    ]
    gpu = [s for s in t.series if s.group != "host"]
    several = len({s.group for s in gpu}) > 1
    for title, unit, names in _CHARTS:
        chosen = [s for s in gpu if s.unit == unit and (names is None or s.name in names)]
        out += _chart(title, chosen, unit, sec, marks, bands, several)
    if not gpu:
        out.append(
            _p(
                "no GPU samples in this run (no NVML): GPU utilisation, PCIe, NVLink and clock"
                " timelines need a GPU",
                "missing",
            )
        )
    out += _host_charts([s for s in t.series if s.group == "host"], sec, marks, bands)
    return out


# The host's samples in two charts, one unit each: the machine's cores (% busy: their mean, and the
# busiest one) and the training processes' CPU time (cores' worth: 1.5 = one core and a half), which
# grows past 100% of one core and would squash the first chart's scale.
_CORES = ("CPU, all cores", "CPU, busiest core")
_PROCESSES = "training processes (100 = one core)"


def _host_charts(series, sec, marks, bands) -> list[str]:
    def chart(heading: str, title: str, lines, y_label: str, y_max: float, **style) -> list[str]:
        return [
            f"<h3>{esc(heading)}</h3>",
            svg.line_chart(
                lines,
                title=title,
                x_label="seconds",
                y_label=y_label,
                y_max=y_max,
                marks=marks,
                bands=bands,
                **style,
            ),
        ]

    cores = sorted(
        (s for s in series if s.name in _CORES), key=lambda s: _CORES.index(s.name), reverse=True
    )
    out = []
    if cores:
        # The mean is drawn last, dashed, over the busiest core: where every core is busy the two
        # lines coincide, and the dashes leave both visible.
        lines = [(_HOST_NAMES[s.name], sec(s.t_ns), s.values.tolist()) for s in cores]
        dashes = {_HOST_NAMES["CPU, all cores"]: "6 4"}
        title = "host CPU: the machine's cores"
        out += chart("host CPU: the machine", title, lines, "% busy", 100.0, dashes=dashes)
    procs = [s for s in series if s.name == _PROCESSES]
    if procs:
        lines = [("training processes", sec(s.t_ns), (s.values / 100.0).tolist()) for s in procs]
        title = "host CPU: the training processes"
        out += chart(title, title, lines, "cores used", 1.0)
    return [x for x in out if x]


_HOST_NAMES = {"CPU, all cores": "all cores (mean)", "CPU, busiest core": "busiest core"}


def _chart(title, series, unit, sec, marks, bands, name_group: bool) -> list[str]:
    if not series:
        return []
    lines = [
        (f"{s.group} {s.name}" if name_group else s.name, sec(s.t_ns), s.values.tolist())
        for s in series
    ]
    chart = svg.line_chart(
        lines,
        title=title,
        x_label="seconds",
        y_label=unit,
        y_max=100.0 if unit == "%" else None,
        marks=marks,
        bands=bands,
    )
    return [f"<h3>{esc(title)}</h3>", chart] if chart else []


def _gpu_table(a) -> list[str]:
    if not a.gpus and not a.host:
        return []
    out = []
    if a.gpus:
        out.append(
            _table(
                [
                    "gpu",
                    "samples (Hz)",
                    "util %",
                    "PCIe TX/s",
                    "PCIe RX/s",
                    "NVLink TX/s",
                    "SM MHz",
                    "power W",
                    "clock events",
                ],
                [
                    [
                        f"{g.index} {g.name or ''}",
                        f"{g.samples} ({g.sample_hz:.0f})",
                        _num(g.util_pct, "{:.0f}"),
                        _num(g.pcie_tx_bytes_per_s, "{:,.0f}"),
                        _num(g.pcie_rx_bytes_per_s, "{:,.0f}"),
                        _num(g.nvlink_tx_bytes_per_s, "{:,.0f}"),
                        (
                            "-"
                            if g.sm_clock_mhz_min is None
                            else f"{g.sm_clock_mhz_min}-{g.sm_clock_mhz_max}"
                        ),
                        _num(g.power_w, "{:.0f}"),
                        ", ".join(g.clock_event_reasons) or "none",
                    ]
                    for g in a.gpus
                ],
            )
        )
    if a.host:
        h = a.host
        out.append(
            _p(
                f"host ({h.samples} samples in the steady window): {h.cores} cores at"
                f" {h.core_pct_mean:.0f}% mean, busiest core {h.busiest_core_pct:.0f}%; training"
                f" processes {h.process_cpu_pct:.0f}% of one core; peak RSS"
                f" {h.rss_max_bytes / 2**20:.0f} MiB",
                "meta",
            )
        )
    return ["<h2>Samples, steady-state window</h2>"] + out


# --- a sweep -----------------------------------------------------------------


def _sweep(report: SweepReport, runs: list) -> list[str]:
    s = report.analysis
    kind = "emulated devices" if s.emulated else "GPUs"
    out = [
        _p(
            f"{s.mode} scaling over {kind}"
            + {"weak": " (per-replica batch fixed)", "strong": " (global batch fixed)"}.get(
                s.mode, ""
            ),
            "meta",
        )
    ]
    out += [_p(f"note: {n}", "dim") for n in s.notes]
    out += _sweep_points(s)
    out += _sweep_attribution(s)
    out += _sweep_breakdown(runs)
    out += _sweep_forecasts(s)
    return out + _findings(report.findings, report.framework)


def _sweep_points(s: ScalingAnalysis) -> list[str]:
    """The scaling chart and the table of each device count's runs."""
    out = ["<h2>Scaling</h2>"]
    out.append(
        svg.scaling_chart(
            [
                (p.gpus, p.speedup, p.speedup_ci95 or 0.0, p.ideal_speedup)
                for p in s.points
                if p.speedup is not None
            ],
            title="speedup against ideal",
        )
    )
    out.append(
        _table(
            [
                "devices",
                "runs",
                "per-replica batch",
                "global batch",
                "step ms ±95%",
                "samples/s",
                "speedup ±95%",
                "efficiency",
            ],
            [
                [
                    p.gpus,
                    p.runs,
                    _num(p.per_replica_batch, "{:g}"),
                    _num(p.global_batch, "{}"),
                    f"{p.step_time_ms:.3f} ±{p.step_time_ci95_ms:.3f}",
                    _num(p.samples_per_s, "{:,.0f}"),
                    (
                        "-"
                        if p.speedup is None
                        else f"{p.speedup:.2f}x ±{_num(p.speedup_ci95, '{:.2f}', '?')}"
                    ),
                    _num(p.efficiency, "{:.0%}"),
                ]
                for p in s.points
            ],
        )
    )
    return out


def _sweep_attribution(s: ScalingAnalysis) -> list[str]:
    """Where the speedup went at each device count: the waterfall and its table."""
    out = []
    for a in s.attribution:
        out.append(f"<h2>Where the speedup went: {a.gpus} devices</h2>")
        causes = [
            (
                "unexplained" if c.category == UNEXPLAINED else c.category,
                c.lost_speedup,
                c.within_noise,
            )
            for c in a.causes
        ]
        out.append(
            svg.waterfall(a.ideal, causes, a.measured, title=f"{a.gpus} devices: ideal to measured")
        )
        out.append(
            _table(
                ["cause", "lost speedup", "±", ""],
                [
                    [
                        name,
                        f"{lost:+.2f}x",
                        f"{c.spread:.2f}",
                        "within noise" if c.within_noise else "",
                    ]
                    for (name, lost, _), c in zip(causes, a.causes)
                    if abs(lost) >= 0.005
                ],
            )
        )
    return out


def _sweep_breakdown(runs: list) -> list[str]:
    """Each run's per-step time by category, one bar a unit (none without traces)."""
    out = []
    rows = [
        (f"{gpus} dev: {u.name}", {c: u.categories[c].exclusive_ms for c in CATEGORIES})
        for gpus, r in runs
        if r.trace_report
        for u in r.trace_report.analysis.units
    ]
    if rows:
        out += [
            "<h2>Per-step breakdown per device count</h2>",
            svg.stacked_bars(
                rows,
                title="Per-step time by category, each run",
                x_label="ms per step (exclusive, corrected to the untraced step)",
            ),
        ]
    return out


def _sweep_forecasts(s: ScalingAnalysis) -> list[str]:
    """The smallest run's prediction of the others against their measurement, and its forecast."""
    out = []
    if s.validation:
        out += [
            (
                f"<h2>Predicted from the {s.validation[0].from_gpus}-device run alone, against"
                " measured</h2>"
            ),
            _table(
                ["devices", "predicted samples/s", "measured samples/s", "error"],
                [
                    [
                        p.gpus,
                        f"{p.samples_per_s:,.0f}",
                        _num(p.measured_samples_per_s, "{:,.0f}", "?"),
                        _num(p.error_pct, "{:+.1f}%", "?"),
                    ]
                    for p in s.validation
                ],
            ),
        ]
    if s.predictions:
        assumptions = list(dict.fromkeys(x for p in s.predictions for x in p.assumptions))
        out += [
            f"<h2>Forecast from the {s.predictions[0].from_gpus}-device run</h2>",
            _table(
                ["devices", "step ms", "samples/s"],
                [
                    [p.gpus, f"{p.step_time_ms:.3f}", f"{p.samples_per_s:,.0f}"]
                    for p in s.predictions
                ],
            ),
            _p("assumptions: " + "; ".join(assumptions) + " (model: docs/scaling.md)", "dim"),
        ]
    return out
