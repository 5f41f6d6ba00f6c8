"""SD105 host/launch-bound: the devices wait while the host runs framework code.

Device idle while host threads are busy with something other than input:
Python, op dispatch and kernel launches, the executor between ops. Typical of
small per-replica batches, eager loops, or per-step Python work.
"""

from scaldiag.analyze.forecast import larger_batch
from scaldiag.analyze.profile import ProfileAnalysis, UnitAnalysis
from scaldiag.rules.base import Speedup
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
        "raise the per-replica batch if kernels are tiny."),
    "jax": (
        "Compile more per call: model.compile(..., steps_per_execution=32, jit_compile=True) in Keras; "
        "in plain JAX jit the whole train step (and jax.lax.scan over several steps), keep Python "
        "work and host syncs (float(loss), .block_until_ready()) out of the step loop."),
    "pytorch": (
        "Launch fewer, larger kernels per step: compile the model\n"
        "  model = torch.compile(model)                      # fuses elementwise ops\n"
        "  model = torch.compile(model, mode='reduce-overhead')   # and replays the step as CUDA graphs\n"
        "or capture the step with torch.cuda.graphs; use fused optimizers (torch.optim.AdamW(..., fused=True)); "
        "keep host syncs (loss.item(), print(tensor), .cpu()) out of the step loop; raise the batch if "
        "kernels are tiny."),
}

# TensorFlow on the CPU (no device planes): XLA's CPU backend made a small Keras CNN 4-6x slower
# on this project's development machine (issue 11), so jit_compile is not advised there.
_TF_CPU = (
    "Run several steps per host call:\n"
    "  model.compile(..., steps_per_execution=32)\n"
    "For custom loops, wrap the step in @tf.function and loop inside it. Leave jit_compile off on "
    "TensorFlow's CPU path unless you measure it faster: XLA on the CPU can be several times slower.")


def _advise(analysis: ProfileAnalysis, unit: UnitAnalysis) -> tuple[dict[str, str], list[str]]:
    if unit.kind == "host" and analysis.framework in ("tensorflow", "unknown"):
        return {**FIX, "tensorflow": _TF_CPU}, []
    return FIX, []


# The batch forecast's factor: 4x the per-replica batch, a step users take (64 -> 256).
BATCH_FACTOR = 4


def _forecast(analysis: ProfileAnalysis, unit: UnitAnalysis) -> Speedup | None:
    """A larger per-replica batch amortises the per-step host work (analyze/forecast.py)."""
    f = larger_batch(unit, BATCH_FACTOR)
    if f is None or f.speedup <= 1.0:
        return None
    return Speedup(f.speedup, f.speedup, f.speedup,
                   f"per-replica batch x{BATCH_FACTOR}: per-sample parts ({', '.join(f.per_sample_parts)}) "
                   f"{f.per_sample_ms:.3f} ms grow x{BATCH_FACTOR}, "
                   f"per-step parts {f.per_step_ms:.3f} ms stay: {BATCH_FACTOR} x {f.per_sample_ms + f.per_step_ms:.3f} / "
                   f"({BATCH_FACTOR} x {f.per_sample_ms:.3f} + {f.per_step_ms:.3f}) = {f.speedup:.2f}x samples/s",
                   kind="forecast")


RULE = ShareRule(id="SD105", title="Host-bound: devices wait on framework and Python work", category="host_overhead",
                 what="no device work runs while the host does framework work (dispatch, Python, runtime) for", moderate_pct=MODERATE_PCT,
                 high_pct=HIGH_PCT, fix=FIX, advise=_advise, forecast=_forecast)
