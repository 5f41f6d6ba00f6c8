"""SD103 collective-bound: weight synchronisation is on the critical path.

All-reduce (NCCL kernels, XLA all-reduce, TF CollectiveReduceV2) time not
hidden behind computation: "exposed communication" in the vocabulary of
Holistic Trace Analysis. It grows with the number of GPUs while each GPU's
compute shrinks.
"""

from scaldiag.rules.share_rule import ShareRule

# Our thresholds: xprof has none for GPU collectives. 10% of the step is
# where overlap or gradient compression starts to pay in published
# data-parallel tuning guides; 25% means communication rivals compute.
MODERATE_PCT = 10.0
HIGH_PCT = 25.0

FIX = {
    "tensorflow": (
        "Make each all-reduce worth more compute: a larger per-replica batch "
        "(global_batch = per_replica_batch * strategy.num_replicas_in_sync), or accumulate "
        "gradients over several micro-batches. Pack gradients into one NCCL all-reduce:\n"
        "  strategy = tf.distribute.MirroredStrategy(\n"
        "      cross_device_ops=tf.distribute.NcclAllReduce(num_packs=1))\n"
        "and shrink large Dense layers (global pooling instead of Flatten before them)."
    ),
    "jax": (
        "Larger per-device batch or gradient accumulation (optax.MultiSteps); all-reduce bf16 "
        "gradients; let XLA overlap the all-reduce with the backward pass "
        "(XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true); shrink large Dense layers."
    ),
    "pytorch": (
        "Make each all-reduce worth more compute and let it overlap the backward pass: a larger"
        " per-rank batch, or gradient accumulation that all-reduces once:\n  with model.no_sync(): "
        "     # DDP: the micro-batches before the last\n      loss_fn(model(x), y).backward()\nTune"
        " DDP's buckets: DistributedDataParallel(model, bucket_cap_mb=100,"
        " gradient_as_bucket_view=True, static_graph=True); all-reduce bf16 gradients"
        " (model.register_comm_hook(None,"
        " torch.distributed.algorithms.ddp_comm_hooks.default_hooks.bf16_compress_hook)) or train"
        " under torch.autocast('cuda', dtype=torch.bfloat16); shrink large nn.Linear layers."
    ),
}


class _CollectiveBound(ShareRule):
    id = "SD103"
    title = "Collective-bound: gradient all-reduce is exposed"
    category = "collective"
    what = "all-reduce not hidden by compute takes"
    moderate_pct = MODERATE_PCT
    high_pct = HIGH_PCT
    fix = FIX


RULE = _CollectiveBound()
