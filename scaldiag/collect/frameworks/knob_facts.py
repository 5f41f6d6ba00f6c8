"""What the script itself set on the knobs scaldiag's advice turns (issue 35): training.json's
``knobs``.

Read once, when the capture starts (a DataLoader's arguments when the capture follows it, a
PyDataset's from fit's ``x``), from attributes the objects already hold: nothing is iterated,
nothing imported that the script did not import. Every reader returns what it could read and never
raises: a knob it cannot read is left out, and the advice then says the general value.

- ``cores_usable``: the cores this process may run on (``os.sched_getaffinity``: a cpuset or taskset
  can give fewer than the machine has);
- ``env``: the thread variables as the script's process saw them (OMP_NUM_THREADS, MKL_NUM_THREADS,
  ...);
- ``intra_op_threads`` and ``intra_op_source``: the framework's intra-op pool (PyTorch
  ``torch.get_num_threads()``; TensorFlow
  ``tf.config.threading.get_intra_op_parallelism_threads()``, 0 meaning one a usable core);
- ``dataloader``: ``num_workers``, ``pin_memory``, ``persistent_workers``, ``prefetch_factor``,
  ``batch_size``;
- ``pydataset``: a ``keras.utils.PyDataset``'s ``workers``, ``use_multiprocessing``,
  ``max_queue_size``.
"""

from __future__ import annotations

import os
import sys

THREAD_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
)


def _cores_usable() -> int | None:
    try:
        return len(os.sched_getaffinity(0)) or None
    except (AttributeError, OSError):
        return os.cpu_count()


def host() -> dict:
    """The facts every framework shares."""
    facts: dict = {
        "cores_usable": _cores_usable(),
        "env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ},
    }
    return facts


def torch_facts(loader=None) -> dict:
    """``{"knobs": {...}}`` for a PyTorch run: the intra-op pool and the followed DataLoader's
    arguments."""
    facts = host()
    try:
        torch = sys.modules.get("torch")
        if torch is not None:
            facts["intra_op_threads"] = int(torch.get_num_threads())
            facts["intra_op_source"] = "torch.get_num_threads()"
    except Exception:
        pass
    if loader is not None:
        found = {}
        for name in (
            "num_workers",
            "pin_memory",
            "persistent_workers",
            "prefetch_factor",
            "batch_size",
        ):
            value = getattr(loader, name, None)
            if isinstance(value, (bool, int)) or value is None:
                found[name] = value
        facts["dataloader"] = found
    return {"knobs": facts}


def keras_facts(x, backend: str) -> dict:
    """``{"knobs": {...}}`` for a Keras fit: TensorFlow's intra-op pool, and fit's PyDataset's
    workers."""
    facts = host()
    try:
        tf = sys.modules.get("tensorflow")
        if backend == "tensorflow" and tf is not None:
            value = int(tf.config.threading.get_intra_op_parallelism_threads())
            facts["intra_op_threads"] = value or facts["cores_usable"]
            facts["intra_op_source"] = "tf.config.threading.get_intra_op_parallelism_threads()" + (
                " (0: one a usable core)" if not value else ""
            )
    except Exception:
        pass
    try:
        keras = sys.modules.get("keras")
        if keras is not None and isinstance(x, keras.utils.PyDataset):
            facts["pydataset"] = {
                name: getattr(x, name, None)
                for name in ("workers", "use_multiprocessing", "max_queue_size")
            }
    except Exception:
        pass
    return {"knobs": facts}
