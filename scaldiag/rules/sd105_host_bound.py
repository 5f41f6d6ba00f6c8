"""SD105 host/launch-bound: the devices wait while the host runs framework code.

Device idle while host threads are busy with something other than input:
Python, op dispatch and kernel launches, the executor between ops. Typical of
small per-replica batches, eager loops, or per-step Python work.

Only instants where no kernel or copy runs count (the exclusive share), so
host work that overlaps device work already queued by CUDA's asynchronous
launches is not host overhead. Checked against twins on an H200
(bench/results/gpu_h200/torch/torch.md#sd105_twinsmd): on bench/torch/healthy.py at
batch 1024 (large kernels, device busy 57% of the step) SD105 fired high and
the step replayed as one CUDA graph, the same kernels, was 1.31x faster than
eager; torch.compile(model, mode="reduce-overhead") was 1.03x (within the
noise), since it leaves the loss, the optimizer and the Python around them
eager. On bench/torch/launch_bound.py (hundreds of tiny kernels, device busy
8%) torch.compile was 2.83x. So the PyTorch fix leads with the whole-step
graph where the device is busy a large share of the step, and with
torch.compile where it is not. torch.compile's cost is paid at the start:
over launch_bound.py's 200 steps, compilation included, the compiled twin was
0.18x (bench/results/gpu_h200/accuracy run 6: about 9 s of compilation
against 2 s of eager training); its steady steps after 10 warm-up steps
were 2.43x the eager ones (run 7, warm-up 15.7 s against 0.6 s), so the
advice says what compilation costs and the benchmark compares steady steps.
"""

from dataclasses import replace

from scaldiag.analyze import batch_memory
from scaldiag.analyze.forecast import host_op_us, host_ops_are_fixed_cost, larger_batch
from scaldiag.analyze.inflation import HOST_SIDE
from scaldiag.analyze.profile import ProfileAnalysis, UnitAnalysis
from scaldiag.rules.base import Finding, Speedup, with_forecast_error, worst_unit
from scaldiag.rules.share_rule import ShareRule

# xprof's overview page: kernel launch time is MODERATE from 3% and HIGH from
# 15% of step time (kModeratelyKernelLaunchBoundThresholdInPercent,
# kHighlyKernelLaunchBoundThresholdInPercent). We use 10% / 20%: our
# host_overhead also covers Python and runtime time that xprof files elsewhere.
MODERATE_PCT = 10.0
HIGH_PCT = 20.0

FIX = {
    "tensorflow": (
        "Run several steps per host call and compile the step:\n"
        "  model.compile(..., steps_per_execution=32, jit_compile=True)\n"
        "For custom loops, wrap the step in @tf.function(jit_compile=True) and loop inside it; "
        "raise the per-replica batch if kernels are tiny."
    ),
    "jax": (
        "Compile more per call: model.compile(..., steps_per_execution=32, jit_compile=True) in"
        " Keras; in plain JAX jit the whole train step (and jax.lax.scan over several steps), keep"
        " Python work and host syncs (float(loss), .block_until_ready()) out of the step loop."
    ),
    "pytorch": (
        "Launch fewer, larger kernels per step: compile the model\n  model = torch.compile(model)  "
        "                    # fuses elementwise ops\n  model = torch.compile(model,"
        " mode='reduce-overhead')   # and replays the step as CUDA graphs\nor capture the step with"
        " torch.cuda.graphs; use fused optimizers (torch.optim.AdamW(..., fused=True)); keep host"
        " syncs (loss.item(), print(tensor), .cpu()) out of the step loop; raise the batch if"
        " kernels are tiny. Compilation is paid once, at the start (9-16 s for a 24-layer MLP on an"
        " H200, the time of 900-1,400 of its eager steps): it pays in a long run, not in a short"
        " one; compare the steady steps after it."
    ),
}

# Where the device is busy at least this share of the step, its kernels are not tiny and what the
# host adds is per-step work between them (autograd, optimizer, Python): a whole-step CUDA graph
# removes it, torch.compile of the model alone did not (H200: busy 57%, 1.31x against 1.03x). At 8%
# busy (tiny kernels) torch.compile gave 2.83x. Two measured cases; 40% lies between them, nearer
# the busy one. The trace's busy share is a lower bound of the untraced step's (tracing slows only
# the host), so a trace alone can only under-state it.
BUSY_DEVICE_PCT = 40.0

_TORCH_BUSY = (
    "The device is busy {busy:.0f}% of the step, so its kernels are not tiny: the gaps are per-step"
    " host work between them (autograd, optimizer, Python). Capture the whole step once as a CUDA"
    " graph and replay it (static shapes; the same kernels, no launches from Python):\n  opt ="
    " torch.optim.AdamW(model.parameters(), fused=True, capturable=True)\n  # x, y: static input"
    " tensors; run 3 warm-up steps on a side stream first\n  opt.zero_grad(set_to_none=True)\n "
    " graph = torch.cuda.CUDAGraph()\n  with torch.cuda.graph(graph):\n      with"
    " torch.autocast('cuda', dtype=torch.bfloat16, cache_enabled=False):\n          loss ="
    " loss_fn(model(x), y)\n      loss.backward(); opt.step()\n  for xb, yb in loader: x.copy_(xb);"
    " y.copy_(yb); graph.replay()\ntorch.compile(model, mode='reduce-overhead') graphs only the"
    " model's forward and backward (the loss, optimizer and loop stay eager). Or raise the"
    " per-replica batch if the optimisation allows it; keep host syncs (loss.item(), .cpu()) out of"
    " the step loop."
)

# TensorFlow on the CPU (no device planes): XLA's CPU backend made a small Keras CNN 4-6x slower
# on this project's development machine (issue 11), so jit_compile is not advised there.
_TF_CPU = (
    "Run several steps per host call:\n  model.compile(..., steps_per_execution=32)\nFor custom"
    " loops, wrap the step in @tf.function and loop inside it. Leave jit_compile off on"
    " TensorFlow's CPU path unless you measure it faster: XLA on the CPU can be several times"
    " slower."
)


def device_busy_pct(unit: UnitAnalysis) -> float:
    """The device-side exclusive share of the step: kernels and copies, whatever the host does."""
    return sum(t.exclusive_pct for c, t in unit.categories.items() if c not in HOST_SIDE)


# PyTorch on the CPU: no CUDA graphs; torch.compile fuses the CPU kernels too (its inductor
# backend).
_TORCH_CPU = (
    "Do more per Python call: compile the model\n  model = torch.compile(model)                    "
    "  # fuses elementwise ops into fewer kernels\nuse fused or foreach optimizers"
    " (torch.optim.AdamW(..., foreach=True)); keep host syncs (loss.item(), print(tensor)) out of"
    " the step loop; raise the batch if ops are tiny. Compilation is paid once, at the start:"
    " compare the steady steps after it."
)


def _advise(analysis: ProfileAnalysis, unit: UnitAnalysis) -> tuple[dict[str, str], list[str]]:
    if unit.kind == "host":  # no GPU: every framework's fix without CUDA graphs or XLA on the CPU
        return {**FIX, "tensorflow": _TF_CPU, "pytorch": _TORCH_CPU}, []
    busy = device_busy_pct(unit)
    if unit.kind == "gpu" and busy >= BUSY_DEVICE_PCT:
        return {**FIX, "pytorch": _TORCH_BUSY.format(busy=busy)}, []
    return FIX, []


# The batch forecast's factor: 4x the per-replica batch, a step users take (64 -> 256).
BATCH_FACTOR = 4


def _host_ops_words(unit: UnitAnalysis) -> str:
    """Why a host unit's compute stays per step, where it does."""
    if not host_ops_are_fixed_cost(unit):
        return ""
    return (
        f" (its compute per step: host ops of {host_op_us(unit):.1f} us on average, mostly their"
        " fixed cost)"
    )


def _forecast(analysis: ProfileAnalysis, unit: UnitAnalysis) -> Speedup | None:
    """A larger per-replica batch amortises the per-step host work (analyze/forecast.py)."""
    f = larger_batch(unit, BATCH_FACTOR)
    if f is None or f.speedup <= 1.0:
        return None
    memory = analysis.device_memory
    room = batch_memory.room(memory, BATCH_FACTOR) if memory is not None else None
    fits = (
        "; " + batch_memory.describe(memory, room, analysis.per_replica_batch)
        if memory is not None
        else ""
    )
    return with_forecast_error(
        Speedup(
            f.speedup,
            f.speedup,
            f.speedup,
            f"per-replica batch x{BATCH_FACTOR}: per-sample parts ({', '.join(f.per_sample_parts)})"
            f" {f.per_sample_ms:.3f} ms grow x{BATCH_FACTOR}, per-step parts {f.per_step_ms:.3f} ms"
            f" stay: {BATCH_FACTOR} x {f.per_sample_ms + f.per_step_ms:.3f} / ({BATCH_FACTOR} x"
            f" {f.per_sample_ms:.3f} + {f.per_step_ms:.3f}) = {f.speedup:.2f}x samples/s"
            f"{_host_ops_words(unit)}{fits}",
            kind="forecast",
            fits=batch_memory.brief(memory, room) if memory is not None else "",
        )
    )


def correction_noise_pct(analysis: ProfileAnalysis) -> float:
    """The share of the step the inflation correction put into host-side time from noise alone.

    Tracing only slows a step. A profiler inflation below 1 (traced steps faster than untraced ones)
    says the two windows differ by something the trace did not see (a loaded machine, other
    processes on the cores), and the correction (analyze/inflation.py) puts the whole difference, 1
    - inflation of the untraced step, into host-side time. Measured on the 2-core development
    machine (bench/results/accuracy, torch_healthy round 1): 0.6% host overhead in the trace became
    50.8% at inflation 0.43, and SD105 fired high on a healthy script; the next round, at 1.12, read
    0.6%.
    """
    inflation = analysis.profiler_inflation
    if inflation is None or not 0 < inflation < 1:
        return 0.0
    return 100 * (1 - inflation)


def unproven_pct(unit: UnitAnalysis, noise_pct: float) -> float:
    """host_overhead's part of ``noise_pct``: the correction scales every host-side category by one
    factor, so what it added lands on each in proportion to its (corrected) time."""
    host_side = sum(unit.categories[c].exclusive_pct for c in HOST_SIDE if c in unit.categories)
    share = unit.categories.get("host_overhead")
    if share is None or host_side <= 0:
        return 0.0
    return noise_pct * share.exclusive_pct / host_side


class _HostBound(ShareRule):
    """SD105: the host-overhead share, its spread widened by what the inflation correction added
    from noise."""

    id = "SD105"
    title = "Host-bound: devices wait on framework and Python work"
    category = "host_overhead"
    what = "no device work runs while the host does framework work (dispatch, Python, runtime) for"
    moderate_pct = MODERATE_PCT
    high_pct = HIGH_PCT
    fix = FIX
    advise = staticmethod(_advise)
    forecast = staticmethod(_forecast)

    def check(self, analysis: ProfileAnalysis) -> Finding | None:
        finding = self._check(analysis)
        return finding and _unnamed_compute(analysis, finding)

    def _check(self, analysis: ProfileAnalysis) -> Finding | None:
        noise = correction_noise_pct(analysis)
        if noise > 0:
            finding = super().check(
                replace(analysis, units=[_widened(u, noise) for u in analysis.units])
            )
            return finding and replace(
                finding,
                notes=[
                    *finding.notes,
                    (
                        f"profiler inflation {analysis.profiler_inflation:.2f}x: the untraced steps"
                        " were slower than the traced ones, which tracing cannot cause; the"
                        f" correction to the untraced step put that {noise:.0f}% of the step into"
                        " host-side time, host overhead's part of it is in the share's spread"
                    ),
                ],
            )
        tracer_ms = analysis.tracer_ms_per_step if analysis.profiler_inflation is None else None
        if not tracer_ms:
            return super().check(analysis)
        # A trace alone: its host overhead holds the tracer's own cost, which no untraced step
        # measured.
        finding = super().check(
            replace(
                analysis, units=[_widened(u, _tracer_pct(u, tracer_ms)) for u in analysis.units]
            )
        )
        return finding and replace(
            finding,
            notes=[
                *finding.notes,
                (
                    f"a trace alone: the tracer's own cost could be up to {tracer_ms:.2f} ms a step"
                    " (host events a step x the most a host event was measured to cost,"
                    " analyze/tracer_cost.py); it is in the share's spread, and `scaldiag profile`"
                    " measures it instead"
                ),
            ],
        )


UNNAMED_TITLE = "Host work the trace cannot tell apart from compute"
_UNNAMED_FIX = (
    "Nothing to change on this evidence: the host time may be the model's own compute. scaldiag"
    " reads a CPU backend's compute from the framework's events (TensorFlow ops, ATen ops, XLA's"
    " CPU executable: docs/categories.md) and this trace has none of them. Time the step's"
    " compiled work alone (its call in a loop, the result waited on) against the whole step: the"
    " difference is the framework and Python work."
)


def _unnamed_compute(analysis: ProfileAnalysis, finding: Finding) -> Finding:
    """The finding without a ceiling where the host ran the model and the trace names no compute.

    With no device planes the host's threads compute; scaldiag knows that compute only by the
    framework's event names (analyze/categories.py). A host unit whose steps hold none of them
    (busy 0%) reads as all host overhead whatever it did: JAX on the CPU before XLA's CPU
    executable was named read "100.0% of step time", "at most 100.00x" on a model computing
    (examples/mnist_vae.py, issue 46's rerun). Such a share is not framework work, and no ceiling
    follows from it.
    """
    unit = worst_unit(analysis, "host_overhead")
    if unit is None or unit.kind != "host" or unit.busy_pct > 0:
        return finding
    share = unit.categories["host_overhead"]
    return replace(
        finding,
        title=UNNAMED_TITLE,
        severity="info",
        summary=(
            f"{unit.name}: the host ran the model (no device planes), and the trace names no"
            " compute on it (no op or executable events scaldiag knows), so it cannot tell the"
            " model's compute from framework work: host work of either kind fills"
            f" {share.exclusive_pct:.1f}% of step time ({share.exclusive_ms:.2f} ms of"
            f" {unit.step_time_ms.mean:.2f} ms per step); no ceiling is claimed"
        ),
        fix={framework: _UNNAMED_FIX for framework in finding.fix},
        predicted_speedup=None,
        forecast=None,
        seen_speedup=None,
    )


def _tracer_pct(unit: UnitAnalysis, tracer_ms: float) -> float:
    """The most the tracer could have cost as a share of the unit's traced step, in %."""
    step_ms = unit.step_time_ms.mean
    return min(100.0, 100 * tracer_ms / step_ms) if step_ms > 0 else 0.0


def _widened(unit: UnitAnalysis, noise_pct: float) -> UnitAnalysis:
    share = unit.categories.get("host_overhead")
    if share is None:
        return unit
    wider = replace(
        share, exclusive_pct_ci95=share.exclusive_pct_ci95 + unproven_pct(unit, noise_pct)
    )
    return replace(unit, categories={**unit.categories, "host_overhead": wider})


RULE = _HostBound()
