"""A captured run's report for a terminal.

The default is one screen: the run, its headline, where its time went, its
steady-state steps, and the findings (the first ones with their fix). The
rest (GPU and host samples, the trace's own tables, every finding's evidence
and fix) is under ``verbose``.
"""

from __future__ import annotations

from rich.console import Console

from scaldiag.analyze.accounting import OWN, STEADY, part_name
from scaldiag.analyze.clock import HOST_DISPATCH, LOOP_ITERATION, STEADY_STEP, WHOLE_EPOCH, WORDS
from scaldiag.analyze.input_cost import describe
from scaldiag.analyze.recorded_steps import COMPILE
from scaldiag.analyze.run import RunAnalysis
from scaldiag.render import ranges
from scaldiag.render.terminal import phases, printed, trace
from scaldiag.render.terminal.common import (
    Keep,
    add_row,
    bytes_text,
    columns,
    exit_text,
    framework_words,
    inert,
    labelled,
    own,
    print_findings,
    say,
    speedup_line,
    table,
    text,
)
from scaldiag.render.words import (
    TENSORBOARD_PIP,
    capture_cost_words,
    trace_window_words,
    tried_words,
)
from scaldiag.rules.report import RunReport

# How to read a trace where it was suggested: neither viewer comes with scaldiag.
XPROF_PIP = "pip install xprof"
# The accounting's parts under this share of the wall time are one row in the default report.
SMALL_PART = 0.01


def render(
    report: RunReport, console: Console, framework: str | None = None, verbose: bool = False
) -> None:
    a = report.analysis
    for line in printed.first_lines(a.printed, a.run.started_ns):  # before all else
        say(console, inert(line), style="bold red")
    _header(report, console)
    if a.clock is not None:
        contradicted = a.printed is not None and a.printed.headline_contradicted
        say(
            console,
            ("CONTRADICTED by your clock (above): " if contradicted else "")
            + inert(_user_clock_line(a.clock)),  # (its name may be the script's own words)
            style="red" if contradicted else "",
        )
    for line in printed.clock_lines(a.printed, verbose):
        say(console, inert(line), style="dim")
    for line in phases.lines(a.phases, verbose):
        say(console, line)
    if a.epochs is not None and a.epochs.models:
        say(console, _models_line(a.epochs))
    if a.clock is not None and a.clock.inner_loop:
        say(console, _inner_loop_line(a.clock, a.training.get("global_batch")))
    if report.trace_report is not None:
        console.print()
        _headline(console, report)
    console.print()
    if a.accounting:
        _accounting(a, console, verbose)
    if a.steps:
        _steps(a, console, verbose)
    if a.ranks:
        console.print(_ranks_table(a))
    _input(a, console, verbose)
    if verbose:
        _samples(a, console)
    # A GPU counter the driver does not offer (or no GPU at all) is a detail; every other gap (no
    # steps, a damaged record, a sampler that stopped, a trace not read) changes what the report
    # means.
    for gap in a.missing if verbose else [g for g in a.missing if not g.startswith("nvml")]:
        say(console, f"missing evidence: {gap}", style="yellow")
    fw = framework or report.framework
    findings = report.findings_shown  # every firm finding before every borderline one
    if verbose and report.trace_report is not None:
        console.print()
        trace.render(report.trace_report, console, fw, verbose=True, findings=False)
    console.print()
    print_findings(console, findings, fw, verbose, headlined=report.headlined)
    if report.analysis.tried:
        console.print()
        # try.json is a file anyone could have written: its words are shown inert
        t = report.analysis.tried
        stopped = " (interrupted)" if t.get("interrupted") else ""
        say(console, inert(f"Tried (scaldiag try): {tried_words(t)}{stopped}"), style="bold")
    if report.trace_report is not None:
        console.print()
        _open_the_trace(report, console, verbose)
    if not verbose:
        say(
            console,
            "more with --verbose: samples, the trace's tables, evidence, every fix",
            style="dim",
        )


def _headline(console: Console, report: RunReport) -> None:
    """The run's verdict (rules/report.py ``run_headline``), and what fixing its cause gives."""
    say(console, report.verdict, style="bold")
    top = report.headlined
    if top is not None and top.predicted_speedup is not None:
        say(console, *speedup_line(top.predicted_speedup), style="bold")


def _header(report: RunReport, console: Console) -> None:
    a = report.analysis
    run, training = a.run, a.training
    exit_code = run.exit_code
    status = f"{run.status or '?'}" + (
        f", {exit_text(exit_code, run.signal)}" if exit_code is not None else ""
    )
    labelled(console, "scaldiag run:", report.run_dir, style="bold")
    command = " ".join((run.command or [])[1:]) or "?"
    labelled(console, "command:", command)
    say(
        console,
        Keep(f"status: {status};"),
        Keep(f"framework: {framework_words(training.get('framework', {}))};"),
        Keep(f"replicas: {training.get('replicas', '?')};"),
        Keep(f"global batch: {training.get('global_batch', '?')};"),
        Keep(f"per-replica batch: {training.get('per_replica_batch', '?')}"),
    )


def _inner_loop_line(c, samples: int | None) -> str:
    """A step that is one jitted call looping over batches inside it (JAX: analyze/clock.py)."""
    if c.inner_batches is None:
        return (
            f"One step is one call of your jitted function, which loops over batches inside"
            f" ({c.inner_loop}); how many is not known where the loop's bounds are traced values,"
            " so no figure per batch is given."
        )
    per_batch = f" of {samples // c.inner_batches:,} samples" if samples else ""
    return (
        f"One step is one call of your jitted function, which loops over {c.inner_batches:,}"
        f" batches{per_batch} inside ({c.inner_loop}): the training step's"
        f" {c.scopes[STEADY_STEP].ms:.3g} ms is {c.inner_batch_ms:.3g} ms a batch."
    )


def _models_line(e) -> str:
    """Several models trained: each one's whole epochs, and whose figures the report gives."""

    def name(m) -> str:
        return m.name or f"model {m.model}"

    def figure(m) -> str:
        after = m.ms_per_step_after_first
        return f"{m.ms_per_step:.3g} ms a step" + (
            f" ({after:.3g} after each epoch's first step)" if after is not None else ""
        )

    each = "; ".join(f"{name(m)}, {len(m.epochs)} epochs, {figure(m)}" for m in e.models)
    shown = next(m for m in e.models if m.model == e.model)
    return (
        f"{len(e.models)} models trained, each in its own fits: {each} (whole epochs from each"
        f" model's third on, compiles left out). The figures here are {name(shown)}'s:"
        f" {e.model_why}."
    )


def _user_clock_line(c) -> str:
    """The figure the user already reads, at its scope, as the steady step plus named parts."""
    scope = c.scopes[c.user_scope]
    ms = scope.user_ms
    where = f"{c.user_clock[:1].upper()}{c.user_clock[1:]}"
    if (
        scope.reads_last_epoch and scope.ms_last_epoch is not None
    ):  # Lightning's bar: the last epoch's
        where, ms = (
            f"{where} ({scope.ms_last_epoch:.3g} ms a step in the last epoch); every epoch",
            scope.ms,
        )
    a_step = "a call" if c.inner_loop else "a step"  # (one call of a jitted epoch is a step)
    line = f"{where} ({WORDS[c.user_scope]}): {ms:.3g} ms {a_step}"
    steady = c.scopes[STEADY_STEP]
    step = steady.ms
    parts = printed.parts_words(c.parts_ms, ms, steady.ms_ci95)
    if c.user_scope == HOST_DISPATCH:
        return (
            f"{line}; the training step takes {step:.3g} ms with the device's backlog a sync waits "
            f"for ({c.parts_ms[0][1]:.3g} ms a step)."
        )
    line = (
        f"{line}, the training step alone."
        if not parts
        else f"{line} = training step {step:.3g} ms{parts}."
    )
    epoch = c.scopes.get(WHOLE_EPOCH)
    if c.user_scope == LOOP_ITERATION and epoch is not None and abs(epoch.ms / ms - 1) > 0.05:
        # Which clock a plain loop prints is the script's: a timer around its epochs reads this.
        line += f" Whole epochs: {epoch.ms:.3g} ms a step (their edges in)."
    return line


def _accounting(a: RunAnalysis, console: Console, verbose: bool) -> None:
    acc = a.accounting
    if acc.goodput is not None:
        own_s = (
            f", less scaldiag's own measurements ({acc.own_s:.1f} s)" if acc.own_s >= 0.05 else ""
        )
        say(
            console,
            Keep(f"goodput {acc.goodput:.0%}:"),
            f"steady training time over the run's wall time ({acc.wall_s:.1f} s{own_s})",
            style="bold",
        )
    compiled = bool(a.steps and (COMPILE in a.steps.excluded or a.steps.compiling_steady))
    fw = a.training.get("framework", {}).get("name", "")
    t = table(f"Where the run's {acc.wall_s:.1f} s went")
    for col in ("part", "seconds", "% of wall"):
        t.add_column(col, justify="left" if col == "part" else "right")
    small = 0.0
    for part in acc.parts:
        if part.seconds >= 0.005 and (
            verbose or part.seconds >= SMALL_PART * acc.wall_s or part.part == STEADY
        ):
            name = part_name(part.part, fw, compiled)
            add_row(
                t,
                f"{name} (scaldiag's)" if part.part in OWN else name,
                f"{part.seconds:.2f}",
                f"{100 * part.seconds / acc.wall_s:.1f}",
            )
        elif part.seconds >= 0.005:  # parts that print as 0.00 s are in the JSON only
            small += part.seconds
    if small:
        add_row(
            t,
            f"parts under {SMALL_PART:.0%} each (--verbose)",
            f"{small:.2f}",
            f"{100 * small / acc.wall_s:.1f}",
        )
    console.print(t)


def _steps(a: RunAnalysis, console: Console, verbose: bool) -> None:
    s = a.steps
    console.print(_steps_table(a))
    if s.excluded:
        say(
            console,
            "not steady, left out: "
            + ", ".join(f"{reason} {len(steps)}" for reason, steps in s.excluded.items()),
            style="dim",
        )
    if s.compiling_steady:
        say(
            console,
            f"{s.compiling_steady} steady step(s) compiled: the framework compiles in most steps (a"
            " shape that changes, a retrace), so compiling is this run's steady state and counts",
            style="yellow",
        )
    if s.outliers:
        shown = ", ".join(map(str, s.outliers[:8])) + (" ..." if len(s.outliers) > 8 else "")
        say(
            console,
            f"{len(s.outliers)} steady step(s) took over 3x the median (step {shown}); no framework"
            " evidence says what they were, so they count: your stopwatch paid for them",
            style="dim",
        )
    # The observer effect, in the default report too: the breakdown's shares depend on it.
    if s.inflation_note:
        say(console, s.inflation_note, style="dim")
    elif s.traced_step_ms and s.profiler_inflation:
        say(
            console,
            f"profiler inflation {s.profiler_inflation:.2f}x (traced {s.traced_step_ms:.3f} ms a"
            " step): breakdown corrected for it",
            style="dim",
        )
    window = trace_window_words(a.trace_window)
    if window:  # the trace's figures rest on fewer steps than planned: said in the default report
        say(console, window, style="yellow")
    if not verbose:
        return
    if a.capture_cost is not None:  # what scaldiag cost this run, as far as the run measures it
        say(console, capture_cost_words(a.capture_cost), style="dim")
    if a.training.get("step_source"):  # where a step begins and ends, in the framework's words
        say(console, f"step boundaries: {a.training['step_source']}", style="dim")
    if s.epoch_end_steps:
        say(console, _epoch_end_line(a), style="dim")
    if a.epochs is not None:
        say(console, _epochs_line(a), style="dim")
    if s.clock == "device":
        say(
            console,
            "step times from the device's clock (CUDA events at each step's boundary): the host "
            "queues work ahead of the device",
            style="dim",
        )


def _epoch_end_line(a: RunAnalysis) -> str:
    """An epoch's last step: on a device, it holds the wait for the device's queued work; on a CPU
    run the host does the work as it goes and there is no catch-up to name."""
    n = a.steps.epoch_end_steps
    if not a.gpus and a.steps.clock != "device":
        return (
            f"{n} steady step(s) end an epoch: they count, as the stopwatch around the steady steps"
            " does"
        )
    if a.training.get("framework", {}).get("name") == "pytorch":
        return (
            f"{n} steady step(s) end an epoch and hold the wait for the CUDA stream's queued"
            " kernels: the mean is a stopwatch around the steady steps"
        )
    return (
        f"{n} steady step(s) end an epoch and hold the device's catch-up (asynchronous dispatch):"
        " the mean is a stopwatch around the steady steps"
    )


def _input(a: RunAnalysis, console: Console, verbose: bool) -> None:
    ceiling = a.training.get("input_ceiling")
    if ceiling and ceiling.get("samples_per_s"):
        consumed = a.steps.samples_per_s if a.steps else None
        line = f"input ceiling: the input alone delivers {ceiling['samples_per_s']:,.0f} samples/s"
        if consumed:
            line += (
                f" against {consumed:,.0f} consumed; throughput more devices can reach: "
                f"{ranges.speedup(ceiling['samples_per_s'] / consumed)}"
            )
        say(
            console,
            line + (f" ({ceiling.get('source', '')})" if verbose and ceiling.get("source") else ""),
        )
    if a.input_cost is not None and (
        verbose or a.input_cost.significant
    ):  # the evidence of an input finding
        say(console, describe(a.input_cost))
    if verbose and a.input_cost is None and a.training.get("input_free_skipped"):
        say(console, f"input cost not measured: {a.training['input_free_skipped']}", style="dim")


def _samples(a: RunAnalysis, console: Console) -> None:
    if a.gpus:
        for t in _gpu_tables(a):
            console.print(t)
    if a.host:
        h = a.host
        say(
            console,
            f"host ({h.samples} samples): {h.cores} cores at {h.core_pct_mean:.0f}% mean, busiest"
            f" core {h.busiest_core_pct:.0f}%; training processes {h.process_cpu_pct:.0f}% of one"
            f" core; peak RSS {bytes_text(h.rss_max_bytes)}",
        )


def _open_the_trace(report: RunReport, console: Console, verbose: bool) -> None:
    """Where to look at the trace itself: TensorBoard and xprof read XPlane logdirs (neither comes
    with scaldiag: the pip line says what to install); Perfetto reads our export."""
    sources = report.trace_report.analysis.sources
    say(
        console,
        "the trace's timeline: write it, then open scaldiag_trace.json in ui.perfetto.dev",
        style="dim",
    )
    own(console, f"scaldiag report {report.run_dir} --format perfetto", style="dim")
    if any(str(s).endswith(".xplane.pb") for s in sources):
        # Checked with xprof 2.24.2's server: --logdir RUN_DIR lists the run "trace/<session>".
        say(console, "or in TensorBoard's Profile tab (installed by the pip line):", style="dim")
        own(console, TENSORBOARD_PIP, style="dim")
        own(console, f"tensorboard --logdir {report.run_dir}", style="dim")
        if verbose:
            say(console, "or in xprof:", style="dim")
            own(console, XPROF_PIP, style="dim")
            own(console, f"xprof --logdir {report.run_dir}", style="dim")


def _ranks_table(a: RunAnalysis):
    slow = a.slow_rank
    caption = (
        f"rank {slow[0]} is {100 * slow[1]:.0f}% slower than the fastest: every collective waits"
        " for it"
        if slow
        else "no rank slower than another beyond the noise"
    )
    t = table(f"Ranks ({len(a.ranks)} processes)", caption=text(caption))
    columns(t, ("rank", "steady of recorded", "step ms ±95%", "samples/s"), left=("rank",))
    for rank, s in sorted(a.ranks.items()):
        if s is None:
            add_row(t, rank, "no steady steps", "-", "-")
            continue
        rate = "-" if s.samples_per_s is None else f"{s.samples_per_s:,.0f}"
        add_row(
            t,
            rank,
            f"{s.steady} of {s.recorded}",
            ranges.spread(s.step_time_ms.mean, s.step_time_ms.ci95),
            rate,
        )
    return t


def _steps_table(a: RunAnalysis):
    s = a.steps
    tm = s.step_time_ms
    t = table(f"Steps: {s.steady} steady of {s.recorded} recorded")
    columns(t, ("step ms ±95%", "p50", "p90", "stdev", "samples/s", "95% range"))
    if s.samples_per_s is None:
        rate, span = "unknown", "(--global-batch N)"
    else:
        rate = f"{s.samples_per_s:,.0f}"
        span = (
            ranges.interval(s.samples_per_s_low, s.samples_per_s_high)
            if s.samples_per_s_low
            else "-"
        )
    add_row(
        t,
        ranges.spread(tm.mean, tm.ci95),
        f"{tm.p50:,.3f}",
        f"{tm.p90:,.3f}",
        f"{tm.stdev:,.3f}",
        rate,
        span,
    )
    return t


def _epochs_line(a: RunAnalysis) -> str:
    """The whole-epoch clock beside the steady one: how Keras's ms/step differs, and by what."""
    e = a.epochs
    which = (
        f"epoch {e.compared[0] + 1}"
        if len(e.compared) == 1
        else f"epochs {e.compared[0] + 1}-{e.compared[-1] + 1}"
    )
    line = (
        f"whole epochs ({which}): {e.ms_per_step:.3f} ms a step from each epoch's begin to its end"
    )
    if a.training.get("framework", {}).get("name") == "pytorch":
        return (
            line
            + "; the steady step leaves out the epoch's edges (the DataLoader's iterator starting, "
            "end-of-epoch code)"
        )
    line += ", as Keras's ms/step counts with verbose=2"
    if e.ms_per_step_after_first is not None:
        line += (
            f" ({e.ms_per_step_after_first:.3f} ms after each epoch's first step, as verbose=1"
            " counts)"
        )
    line += "; the steady step leaves out the epoch's edges"
    if e.validation_s_per_epoch >= 0.0005:
        line += f" and validation ({e.validation_s_per_epoch:.2f} s an epoch)"
    return line


def _gpu_tables(a: RunAnalysis):
    """Two narrow tables rather than one wide one: numbers are never folded or cut at 80 columns."""
    names = "; ".join(f"GPU {g.index}: {g.name}" for g in a.gpus if g.name)
    state = table("GPUs (NVML, steady-state window)", caption=text(names) if names else None)
    columns(
        state,
        ("gpu", "samples (Hz)", "util %", "mem peak", "SM MHz", "power W", "clock events"),
        left=("gpu", "clock events"),
    )
    links = table("GPU links (NVML, steady-state window)")
    columns(links, ("gpu", "PCIe TX/s", "PCIe RX/s", "NVLink TX/s", "NVLink RX/s"), left=("gpu",))

    def num(x, fmt="{:.0f}"):
        return "-" if x is None else fmt.format(x)

    def rate(x):
        return "-" if x is None else bytes_text(x)

    for g in a.gpus:
        clocks = "-" if g.sm_clock_mhz_min is None else f"{g.sm_clock_mhz_min}-{g.sm_clock_mhz_max}"
        add_row(
            state,
            str(g.index),
            f"{g.samples} ({g.sample_hz:.0f})",
            num(g.util_pct),
            rate(g.mem_used_max_bytes),
            clocks,
            num(g.power_w),
            ", ".join(g.clock_event_reasons) or "none",
        )
        add_row(
            links,
            str(g.index),
            rate(g.pcie_tx_bytes_per_s),
            rate(g.pcie_rx_bytes_per_s),
            rate(g.nvlink_tx_bytes_per_s),
            rate(g.nvlink_rx_bytes_per_s),
        )
    return [state, links]
