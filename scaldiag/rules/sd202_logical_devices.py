"""SD202 several replicas on one physical GPU: no speedup is possible.

TensorFlow logical (virtual) GPUs, or a strategy given the same GPU twice,
put several replicas on one device: they take turns on the same silicon and
add all-reduce work. Seen when the run has more replicas than distinct
physical GPUs (NVML UUIDs) visible to it.
"""

from __future__ import annotations

from scaldiag.analyze.run import RunAnalysis
from scaldiag.rules.base import Evidence, Finding, RuleFacts

FIX = {
    "tensorflow": (
        "Remove tf.config.set_logical_device_configuration(...) for GPUs and give the strategy one"
        " replica per physical GPU: tf.distribute.MirroredStrategy() (all GPUs) or"
        " devices=['/gpu:0', ...]."
    ),
    "jax": (
        "Use one replica per physical device: keras.distribution.DataParallel() over jax.devices();"
        " do not split a GPU with --xla_force_host_platform_device_count (that flag is for CPUs)."
    ),
    "pytorch": (
        "Run one process per physical GPU: torchrun --nproc-per-node <GPU count>, and in each rank "
        "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])); two ranks on one device share it."
    ),
}


class _LogicalDevices(RuleFacts):
    id = "SD202"
    title = "Several replicas share one physical GPU"
    category = "devices"

    def check(self, run: RunAnalysis) -> Finding | None:
        replicas = run.training.get("replicas")
        uuids = {g.get("uuid") for g in run.inventory.get("gpus", []) if g.get("uuid")}
        if not replicas or not uuids or replicas <= len(uuids):
            return None
        return self.finding(
            severity="high",
            summary=(
                f"{replicas} replicas run on {len(uuids)} physical"
                f" GPU{'s' if len(uuids) > 1 else ''}"
            ),
            evidence=[
                Evidence("replicas", replicas, "count"),
                Evidence("distinct GPU UUIDs visible", len(uuids), "count"),
            ],
            fix=FIX,
            notes=["replicas on one GPU take turns: more of them cannot speed up a step"],
        )


RULE = _LogicalDevices()
