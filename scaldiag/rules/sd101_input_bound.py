"""SD101 input-bound: the step waits for its next batch.

The training step spends time waiting on the input pipeline (tf.data's
IteratorGetNext, a Python generator, the host converting and handing arrays
to the devices) while no device work runs. Adding GPUs does not help: each
one waits on the same host. When the input only moves a heavy batch (8 MiB or
more a step at 2 ns per byte or less), the cause is the copy: SD102 names it.
"""

from dataclasses import replace

from scaldiag.analyze.forecast import unit_handover
from scaldiag.analyze.profile import ProfileAnalysis, UnitAnalysis
from scaldiag.analyze.transfers import HEAVY_BATCH_BYTES
from scaldiag.rules.base import Finding
from scaldiag.rules.share_rule import ShareRule

# xprof's input-pipeline analyzer calls a run MODERATELY input-bound at >= 5%
# of step time and HIGHLY at >= 20% (op_stats_to_input_pipeline_analysis.cc,
# kModeratelyInfeedBoundThresholdInPercent / kHighlyInfeedBoundThresholdInPercent).
MODERATE_PCT = 5.0
HIGH_PCT = 20.0

FIX = {
    "tensorflow": (
        "Let tf.data work in parallel and ahead of the step:\n  ds = ds.map(decode,"
        " num_parallel_calls=tf.data.AUTOTUNE)\n  ds = ds.cache()   # after decoding, before random"
        " augmentation (after it, it would freeze it)\n  ds = ds.map(augment,"
        " num_parallel_calls=tf.data.AUTOTUNE)\n  ds ="
        " ds.batch(global_batch).prefetch(tf.data.AUTOTUNE)\nReplace Python generators"
        " (from_generator, PyDataset without workers) with tf.data ops, or give"
        " keras.utils.PyDataset workers=N (worker threads; measure use_multiprocessing=True before"
        " keeping it: it pickles every batch back). Move augmentation into the model"
        " (keras.layers.RandomFlip ...) so it runs on the GPU."
    ),
    "jax": (
        "Keras 3 on JAX iterates the data on the host, on the training thread. Move per-batch"
        " augmentation into the model (keras.layers.RandomFlip, RandomCrop ..., or a layer of"
        " keras.ops), where it runs on the device inside the compiled step; feed what must stay on"
        " the host as a tf.data pipeline with num_parallel_calls=tf.data.AUTOTUNE and"
        " .prefetch(tf.data.AUTOTUNE). keras.utils.PyDataset(workers=N) threads help only where the"
        " batch's NumPy work releases the GIL for long (a NumPy blur of small batches: 0.87-1.29x"
        " with 8 threads on an H200), and use_multiprocessing=True pickles every batch back (2-2.5x"
        " slower there). For a plain JAX loop, do the augmentation in the jitted step, and prefetch"
        " batches to the devices ahead of it (flax.jax_utils.prefetch_to_device, or a background"
        " thread calling jax.device_put)."
    ),
    "pytorch": (
        "Load batches in parallel worker processes, ahead of the step:\n"
        "  loader = DataLoader(ds, batch_size=b, num_workers=8,       # about cores / ranks per"
        " node\n"
        "                      pin_memory=True, persistent_workers=True, prefetch_factor=4)\n"
        # (no "num_workers=0" here: rules/knobs.py reads every "num_workers=" as advice, one value a
        # report)
        "Without workers (the default) the DataLoader loads and augments every batch on the"
        " training thread. "
        "Decode once "
        "and cache what does not change; move random augmentation onto the GPU"
        " (torchvision.transforms.v2 "
        "on the batched tensor after .to(device))."
    ),
}

# When the trace shows a Prefetch stage, prefetching is there already: it hides a producer only
# as fast as the step, so the advice is to make the producer faster.
_ALREADY_PREFETCHING_TF = (
    "The pipeline already prefetches (a Prefetch stage is in the trace): the producer itself is"
    " slower than the step. Make it faster: map(..., num_parallel_calls=tf.data.AUTOTUNE) for every"
    " map, ds.cache() after decoding and before random augmentation, tf.data ops instead of Python"
    " (from_generator, py_function), augmentation inside the model (keras.layers.RandomFlip ...),"
    " or read fewer bytes (smaller images, uint8 instead of float32)."
)


# HEAVY_BATCH_BYTES: input that moves this many bytes per step to the device is dominated by
# preparing them (slicing, converting, copying): on an H200 a 40 MB float32 batch cost 18 ms of host
# time per step, and the same pixels as uint8 made the script 7.6x faster
# (bench/results/gpu_h200/accuracy).
_FEWER_BYTES = (
    "Each step moves {mb:.0f} MB to the device: send fewer bytes. Images as uint8 (a quarter of"
    " float32) cast and scaled on the device{where}; or a smaller dtype (bfloat16) for other"
    " features."
)
_SCALE_ON_DEVICE = {"pytorch": ": x = x.to(device, non_blocking=True).float().div_(255)"}
_SCALE_IN_MODEL = " by the model's first layer, keras.layers.Rescaling(1 / 255)"
# PyTorch on the CPU: there is no GPU to move augmentation onto.
_PYTORCH_ON_CPU = FIX["pytorch"].replace(
    "; move random augmentation onto the GPU (torchvision.transforms.v2 on the batched tensor after"
    " .to(device))",
    "; apply random augmentation to the whole batch at once (torchvision.transforms.v2 on the"
    " batched tensor)",
)


# PyDataset workers: threads, not processes. Measured on an H200 (Keras on JAX,
# bench/zoo/input_python.py, bench/results/gpu_h200/accuracy runs 1-7): use_multiprocessing=True
# 0.39-0.49x, 8 threads 0.87-1.29x (1.02x in run 7); on the 2-core development machine (TF)
# processes 0.41x. Augmentation in the model: run 8. A Generator stage is Python feeding tf.data
# (from_generator, or Keras' wrapper of a PyDataset).
_PYTHON_PRODUCER = (
    "\nThe producer is Python (a Generator stage: from_generator, or a keras.utils.PyDataset): give"
    " the PyDataset workers (PyDataset(workers=8), threads) so batches are made in parallel, ahead"
    " of the step."
)


def _advise(analysis: ProfileAnalysis, unit: UnitAnalysis) -> tuple[dict[str, str], list[str]]:
    fix, notes = dict(FIX), []
    stages = set(analysis.input_stages)
    if "Prefetch" in stages:
        fix["tensorflow"] = _ALREADY_PREFETCHING_TF + (
            _PYTHON_PRODUCER if "Generator" in stages else ""
        )
        notes.append(f"input pipeline stages in the trace: {', '.join(sorted(stages))}")
        if any(s.startswith("ParallelMap") for s in stages):
            notes.append("its map is already parallel: the per-element work itself is the cost")
    if unit.kind == "host":
        fix["pytorch"] = _PYTORCH_ON_CPU
    if unit.h2d is not None and unit.h2d.bytes_per_step >= HEAVY_BATCH_BYTES:
        mb = unit.h2d.bytes_per_step / 1e6
        fix = {
            fw: (
                _FEWER_BYTES.format(mb=mb, where=_SCALE_ON_DEVICE.get(fw, _SCALE_IN_MODEL))
                + f"\n{text}"
            )
            for fw, text in fix.items()
        }
        notes.append(
            f"{unit.h2d.bytes_per_step / 1e6:.1f} MB per step are copied to the device: the input's"
            " cost follows its bytes"
        )
    return fix, notes


class _InputBound(ShareRule):
    """SD101, except where the input is the host side of a heavy copy: then the cause is SD102's."""

    id = "SD101"
    title = "Input-bound: the step waits for data"
    category = "input"
    what = "the step waits for input"
    moderate_pct = MODERATE_PCT
    high_pct = HIGH_PCT
    fix = FIX
    advise = staticmethod(_advise)

    def check(self, analysis: ProfileAnalysis) -> Finding | None:
        finding = super().check(analysis)
        if finding is None:
            return None
        unit = next(u for u in analysis.units if u.name == finding.evidence[0].device)
        if unit_handover(unit) is not None:
            return None
        share = unit.categories["input"]
        if share.beyond_trace_pct > 0:
            seen = share.exclusive_pct - share.beyond_trace_pct
            finding = replace(
                finding,
                notes=[
                    *finding.notes,
                    (
                        f"{share.exclusive_pct:.1f}% is the input's measured cost (the step against"
                        f" the input-free step); the trace shows {seen:.1f}% as input and the rest"
                        " as other work of the step (on a host-bound step the input and the"
                        " dispatch share one thread); where this finding's range overlaps"
                        " another's, the trace's share orders them"
                    ),
                ],
            )
        return finding


RULE = _InputBound()
