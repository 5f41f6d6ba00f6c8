"""A captured run's report for a terminal: the run, its steady-state steps, samples, then the trace report."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from scaldiag.analyze.accounting import OWN
from scaldiag.analyze.input_cost import describe
from scaldiag.analyze.run import RunAnalysis, slow_rank
from scaldiag.render.terminal import trace
from scaldiag.render.terminal.common import add_row, bytes_text, columns, exit_text, finding_panel, text
from scaldiag.rules.report import RunReport


def render(report: RunReport, console: Console, framework: str | None = None) -> None:
    a = report.analysis
    run, training = a.run, a.training
    console.print(text(f"scaldiag run: {report.run_dir}", style="bold"))
    command = " ".join(run.get("command", [])[1:]) or "?"
    exit_code = run.get("exit_code")
    console.print(text(f"{command}  status: {run.get('status', '?')}"
                       + (f", {exit_text(exit_code, run.get('signal'))}" if exit_code is not None else "")))
    fw = training.get("framework", {})
    versions = ", ".join(f"{k} {v}" for k, v in fw.get("versions", {}).items())
    console.print(text(f"framework: {fw.get('name', '?')} on {fw.get('backend', '?')}" + (f" ({versions})" if versions else "")
                  + f"; replicas: {training.get('replicas', '?')}; global batch: {training.get('global_batch', '?')}"
                  f" ({training.get('batch_source', '?')}); per-replica batch: {training.get('per_replica_batch', '?')}"))
    console.print()
    if a.accounting:
        acc = a.accounting
        if acc.goodput is not None:
            own = f", less scaldiag's own measurements ({acc.own_s:.1f} s)" if acc.own_s >= 0.05 else ""
            console.print(text(f"goodput {acc.goodput:.0%}: steady training time over the run's wall time "
                               f"({acc.wall_s:.1f} s{own})", style="bold"))
        console.print(_accounting_table(a))
    if a.steps:
        console.print(_steps_table(a))
        if a.steps.epoch_end_steps:
            console.print(text(f"{a.steps.epoch_end_steps} steady step(s) end an epoch and hold the device's catch-up "
                               "(asynchronous dispatch): the mean is a stopwatch around the steady steps",
                               style="dim"))
        if a.epochs is not None:
            console.print(text(_epochs_line(a), style="dim"))
        if a.steps.clock == "device":
            console.print(text("step times from the device's clock (CUDA events at each step's boundary): "
                               "the host queues work ahead of the device", style="dim"))
        if a.steps.compiling_steady:
            console.print(text(f"{a.steps.compiling_steady} steady step(s) compiled: the framework compiles in "
                               "most steps (a shape that changes, a retrace), so compiling is this run's "
                               "steady state and counts", style="yellow"))
        if a.steps.outliers:
            shown = ", ".join(map(str, a.steps.outliers[:8])) + (" ..." if len(a.steps.outliers) > 8 else "")
            console.print(text(f"{len(a.steps.outliers)} steady step(s) took over 3x the median (step {shown}); "
                               "no framework evidence says what they were, so they count: your stopwatch paid "
                               "for them", style="dim"))
        if a.steps.inflation_note:
            console.print(text(a.steps.inflation_note, style="dim"))
        elif a.steps.traced_step_ms and a.steps.profiler_inflation:
            console.print(text(f"profiler inflation {a.steps.profiler_inflation:.2f}x: steps inside the profiler window "
                               f"took {a.steps.traced_step_ms:.3f} ms on average; the trace breakdown below is "
                               "corrected to the untraced step (docs/profile.md)", style="dim"))
    if a.ranks:
        console.print(_ranks_table(a))
    ceiling = training.get("input_ceiling")
    if ceiling and ceiling.get("samples_per_s"):
        consumed = a.steps.samples_per_s if a.steps else None
        console.print(text(f"input ceiling: the input alone delivers {ceiling['samples_per_s']:,.0f} samples/s"
                           + (f" ({ceiling['samples_per_s'] / consumed:.1f}x what training consumed)" if consumed else "")
                           + f"; {ceiling.get('source', '')}"))
    if a.input_cost is not None:
        console.print(text(describe(a.input_cost)))
    elif training.get("input_free_skipped"):
        console.print(text(f"input cost not measured: {training['input_free_skipped']}", style="dim"))
    if a.gpus:
        for table in _gpu_tables(a):
            console.print(table)
    if a.host:
        h = a.host
        console.print(text(f"host ({h.samples} samples): {h.cores} cores at {h.core_pct_mean:.0f}% mean, busiest core "
                      f"{h.busiest_core_pct:.0f}%; training processes {h.process_cpu_pct:.0f}% of one core; "
                      f"peak RSS {bytes_text(h.rss_max_bytes)}"))
    for gap in a.missing:
        console.print(text(f"missing evidence: {gap}", style="yellow"))
    for finding in report.findings:
        console.print(finding_panel(finding, framework or report.framework))
    console.print()
    if report.trace_report is not None:
        trace.render(report.trace_report, console, framework or report.framework)
        _open_the_trace(report, console)


def _open_the_trace(report: RunReport, console: Console) -> None:
    """Where to look at the trace itself: TensorBoard reads XPlane logdirs; Perfetto reads our export."""
    sources = report.trace_report.analysis.sources
    lines = [f"timeline: scaldiag report {report.run_dir} --format perfetto, then open it in ui.perfetto.dev"]
    if any(str(s).endswith(".xplane.pb") for s in sources):
        # Checked with xprof 2.24.2's server: --logdir RUN_DIR lists the run "trace/<session>".
        lines.insert(0, f"trace in TensorBoard or xprof: tensorboard --logdir {report.run_dir} (Profile tab), "
                        f"or xprof --logdir {report.run_dir}")
    for line in lines:
        console.print(text(line, style="dim"))


def _ranks_table(a: RunAnalysis) -> Table:
    slow = slow_rank(a.ranks)
    caption = (f"rank {slow[0]} is {100 * slow[1]:.0f}% slower than the fastest: every collective waits for it"
               if slow else "no rank slower than another beyond the noise")
    table = Table(title=f"Ranks ({len(a.ranks)} processes)", title_justify="left", caption=text(caption),
                  caption_justify="left")
    columns(table, ("rank", "steady of recorded", "step ms ±95%", "samples/s"), left=("rank",))
    for rank, s in sorted(a.ranks.items()):
        if s is None:
            add_row(table, rank, "no steady steps", "-", "-")
            continue
        rate = "-" if s.samples_per_s is None else f"{s.samples_per_s:,.0f}"
        add_row(table, rank, f"{s.steady} of {s.recorded}", f"{s.step_time_ms.mean:.3f} ±{s.step_time_ms.ci95:.3f}",
                rate)
    return table


def _accounting_table(a: RunAnalysis) -> Table:
    acc = a.accounting
    table = Table(title=f"Where the run's {acc.wall_s:.1f} s went", title_justify="left")
    for col in ("part", "seconds", "% of wall"):
        table.add_column(col, justify="left" if col == "part" else "right")
    for part in acc.parts:
        if part.seconds >= 0.005:  # parts that print as 0.00 s are in the JSON only
            label = f"{part.part} (scaldiag's)" if part.part in OWN else part.part
            add_row(table, label, f"{part.seconds:.2f}", f"{100 * part.seconds / acc.wall_s:.1f}")
    return table


def _steps_table(a: RunAnalysis) -> Table:
    s = a.steps
    t = s.step_time_ms
    table = Table(title=f"Steps: {s.steady} steady of {s.recorded} recorded", title_justify="left")
    for col in ("step time ms (mean ±95%)", "p50", "p90", "stdev", "samples/s", "excluded"):
        table.add_column(col, justify="left" if col == "excluded" else "right")
    rate = "unknown: global batch unknown (--global-batch N)" if s.samples_per_s is None else (
        f"{s.samples_per_s:,.0f}" + _rate_interval(s))
    excluded = "; ".join(f"{reason}: {len(steps)}" for reason, steps in s.excluded.items()) or "none"
    add_row(table, f"{t.mean:.3f} ±{t.ci95:.3f}", f"{t.p50:.3f}", f"{t.p90:.3f}", f"{t.stdev:.3f}", text(rate, lines=True), excluded)
    return table


def _epochs_line(a: RunAnalysis) -> str:
    """The whole-epoch clock beside the steady one: how Keras's ms/step differs, and by what."""
    e = a.epochs
    which = f"epoch {e.compared[0] + 1}" if len(e.compared) == 1 else f"epochs {e.compared[0] + 1}-{e.compared[-1] + 1}"
    line = (f"whole epochs ({which}): {e.ms_per_step:.3f} ms a step from each epoch's begin to its end, "
            f"as Keras's ms/step counts with verbose=2")
    if e.ms_per_step_after_first is not None:
        line += f" ({e.ms_per_step_after_first:.3f} ms after each epoch's first step, as verbose=1 counts)"
    line += "; the steady step leaves out the epoch's edges"
    if e.validation_s_per_epoch >= 0.0005:
        line += f" and validation ({e.validation_s_per_epoch:.2f} s an epoch)"
    return line


def _rate_interval(s) -> str:
    if not s.samples_per_s_low:
        return ""
    if s.samples_per_s_high is None:
        return f"\n[{s.samples_per_s_low:,.0f} or more]"
    return f"\n[{s.samples_per_s_low:,.0f}-{s.samples_per_s_high:,.0f}]"


def _gpu_tables(a: RunAnalysis) -> list[Table]:
    """Two narrow tables rather than one wide one: numbers are never folded or cut at 80 columns."""
    names = "; ".join(f"GPU {g.index}: {g.name}" for g in a.gpus if g.name)
    state = Table(title="GPUs (NVML, steady-state window)", title_justify="left",
                  caption=text(names) if names else None, caption_justify="left")
    columns(state, ("gpu", "samples (Hz)", "util %", "mem peak", "SM MHz", "power W", "clock events"),
            left=("gpu", "clock events"))
    links = Table(title="GPU links (NVML, steady-state window)", title_justify="left")
    columns(links, ("gpu", "PCIe TX/s", "PCIe RX/s", "NVLink TX/s", "NVLink RX/s"), left=("gpu",))

    def num(x, fmt="{:.0f}"):
        return "-" if x is None else fmt.format(x)

    def rate(x):
        return "-" if x is None else bytes_text(x)

    for g in a.gpus:
        clocks = "-" if g.sm_clock_mhz_min is None else f"{g.sm_clock_mhz_min}-{g.sm_clock_mhz_max}"
        add_row(state, str(g.index), f"{g.samples} ({g.sample_hz:.0f})", num(g.util_pct), rate(g.mem_used_max_bytes),
                clocks, num(g.power_w), ", ".join(g.clock_event_reasons) or "none")
        add_row(links, str(g.index), rate(g.pcie_tx_bytes_per_s), rate(g.pcie_rx_bytes_per_s),
                rate(g.nvlink_tx_bytes_per_s), rate(g.nvlink_rx_bytes_per_s))
    return [state, links]
