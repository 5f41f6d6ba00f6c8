"""The framework allocator's peak memory on each accelerator, read once after training.

NVML's used memory holds the framework's reserved pool (JAX and TensorFlow reserve most of the card
at start), so a larger-batch forecast asks the allocator itself (analyze/batch_memory.py):
``torch.cuda.max_memory_allocated`` against the device's memory, JAX's ``memory_stats()``
``peak_bytes_in_use`` against its ``bytes_limit``, TensorFlow's ``get_memory_info`` peak against the
device's memory (``limit_bytes`` 0: the analysis takes NVML's total of that device). Rows
``{"device", "peak_bytes", "limit_bytes", "source"}``; none on a machine without accelerators (CPU
devices have no such peak) or where the framework cannot say. Each reader is called under the
adapters' guard: a failure is missing evidence.
"""

from __future__ import annotations

import sys


def torch_peaks() -> list[dict]:
    torch = sys.modules.get("torch")  # never imported here: only what the script already runs
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return []
    return [
        {
            "device": d,
            "peak_bytes": int(torch.cuda.max_memory_allocated(d)),
            "limit_bytes": int(torch.cuda.get_device_properties(d).total_memory),
            "source": "torch.cuda.max_memory_allocated",
        }
        for d in range(torch.cuda.device_count())
        if torch.cuda.max_memory_allocated(d) > 0
    ]


def jax_peaks() -> list[dict]:
    jax = sys.modules.get("jax")
    if jax is None:
        return []
    rows = []
    for k, device in enumerate(jax.local_devices()):
        if device.platform == "cpu":
            continue
        stats = device.memory_stats() or {}
        if stats.get("peak_bytes_in_use") and stats.get("bytes_limit"):
            rows.append(
                {
                    "device": k,
                    "peak_bytes": int(stats["peak_bytes_in_use"]),
                    "limit_bytes": int(stats["bytes_limit"]),
                    "source": "JAX memory_stats peak_bytes_in_use (of its bytes_limit)",
                }
            )
    return rows


def tensorflow_peaks() -> list[dict]:
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return []
    rows = []
    for k, device in enumerate(tf.config.list_logical_devices("GPU")):
        peak = tf.config.experimental.get_memory_info(device.name).get("peak")
        if peak:
            rows.append(
                {
                    "device": k,
                    "peak_bytes": int(peak),
                    "limit_bytes": 0,  # TF states none: the device's memory (NVML's inventory)
                    "source": "tf.config.experimental.get_memory_info peak",
                }
            )
    return rows


def keras_peaks(backend: str) -> list[dict]:
    """The peaks of Keras's backend."""
    if backend == "jax":
        return jax_peaks()
    if backend == "tensorflow":
        return tensorflow_peaks()
    if backend == "torch":
        return torch_peaks()
    return []
