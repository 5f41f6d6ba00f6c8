"""SD104 layout conversions: time spent only permuting data (NCHW <-> NHWC).

Transpose ops and kernels, Grappler layout-optimizer nodes, XLA transpose or
copy fusions and cuDNN's own nchwToNhwc kernels. Convolution kernels whose
names mention a layout are compute, not conversions.
"""

from scaldiag.rules.share_rule import ShareRule

# Our thresholds, after xprof's smallest "moderate" bound (3% for kernel
# launch and all-other time); 10% is a third of what input-bound calls high.
MODERATE_PCT = 3.0
HIGH_PCT = 10.0

FIX = {
    "tensorflow": (
        "Keep tensors in the layout the backend wants: channels_last (NHWC) on TF CPU and for "
        "fp16/bf16 tensor cores:\n"
        "  keras.config.set_image_data_format('channels_last')\n"
        "and remove explicit Permute/tf.transpose pairs around layers that can take an axis "
        "argument (Dense acts on the last axis; use EinsumDense or Conv1D over the right axis)."
    ),
    "jax": (
        "Use channels_last (keras.config.set_image_data_format('channels_last'); flax convs are"
        " NHWC) and avoid jnp.transpose around matmuls: write the contraction with jnp.einsum so"
        " XLA picks the layout."
    ),
    "pytorch": (
        "Use channels_last for convolutions, model and input both, so cuDNN does not convert each"
        " call:\n  model = model.to(memory_format=torch.channels_last)\n  x = x.to(device,"
        " memory_format=torch.channels_last, non_blocking=True)\nand with torch.autocast('cuda',"
        " dtype=torch.bfloat16) for tensor cores; replace .permute(...).contiguous() around matmuls"
        " with torch.einsum."
    ),
}


class _Layout(ShareRule):
    id = "SD104"
    title = "Layout conversions (transposes) take step time"
    category = "layout"
    what = "layout conversions (transposes) take"
    moderate_pct = MODERATE_PCT
    high_pct = HIGH_PCT
    fix = FIX


RULE = _Layout()
