"""A JAX step that loops over its batches inside one call: ``lax.fori_loop`` or ``lax.scan``.

Some scripts keep the dataset on the device and run a whole epoch in one jitted function, the
gradient taken in each trip of a loop. ``jax.lax.fori_loop`` and ``jax.lax.scan`` are wrapped (by
jax_loop, when JAX is imported): while a jitted function traces, the outermost loop sets
``LOOPING`` to its name and trip count, and a gradient taken inside it gives the step its loop
(jax_loop's ``_noting``). Nothing runs per call: the evidence is the trace JAX makes anyway. The
trip count is known where a fori_loop's bounds are Python integers, or a scan's ``length`` or its
inputs' leading dimension (static shapes); else None.

``ready``: whether a step's outputs are computed, asked without waiting (jax_loop ends the run's
last step at the first call after it where they were).
"""

from __future__ import annotations

import contextvars
import functools
import numbers

LOOPS = ("fori_loop", "scan")
# The outermost lax loop being traced inside a jitted function: (its name, its trip count or None).
LOOPING: contextvars.ContextVar = contextvars.ContextVar("scaldiag_jax_looping", default=None)


def looping(real, name: str, tracing: contextvars.ContextVar):
    """``jax.lax.fori_loop``/``scan``: traced inside a jitted function, the loop is noted (the
    outermost one) while its body traces; elsewhere, and always, the real loop runs unchanged."""

    @functools.wraps(real)
    def loop(*args, **kwargs):
        if tracing.get() is None or LOOPING.get() is not None:
            return real(*args, **kwargs)
        token = LOOPING.set((f"lax.{name}", trips(name, args, kwargs)))
        try:
            return real(*args, **kwargs)
        finally:
            LOOPING.reset(token)

    return loop


def trips(name: str, args, kwargs) -> int | None:
    """The loop's trip count where the trace knows it: a fori_loop's integer bounds, a scan's
    ``length`` or its inputs' leading dimension; None otherwise (never raises)."""
    try:
        if name == "fori_loop":
            lower = args[0] if args else kwargs.get("lower")
            upper = args[1] if len(args) > 1 else kwargs.get("upper")
            return int(upper) - int(lower) if concrete(lower) and concrete(upper) else None
        length = kwargs.get("length", args[3] if len(args) > 3 else None)
        if length is not None:
            return int(length)
        xs = kwargs.get("xs", args[2] if len(args) > 2 else None)
        import jax

        leaves = [leaf for leaf in jax.tree_util.tree_leaves(xs) if getattr(leaf, "shape", ())]
        return int(leaves[0].shape[0]) if leaves else None
    except Exception:
        return None


def concrete(value) -> bool:
    """A Python or numpy integer, not a tracer: known when the loop is traced."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def ready(out) -> bool | None:
    """Whether a step's outputs are computed, without waiting: its first and its last array asked
    (the outputs of one call are computed together; two, in case one is an input handed straight
    back, which is ready at once), each reached through the tree's first or last elements; None
    where either is not an array."""
    found = [_ready_at(out, 0), _ready_at(out, -1)]
    return None if None in found else all(found)


def _ready_at(out, end: int) -> bool | None:
    x = out
    for _ in range(8):
        if isinstance(x, (tuple, list)) and x:
            x = x[end]
        elif isinstance(x, dict) and x:
            x = list(x.values())[end]
        else:
            break
    is_ready = getattr(x, "is_ready", None)
    try:
        return bool(is_ready()) if callable(is_ready) else None
    except Exception:
        return None


def facts(loop: tuple[str, int | None] | None) -> dict | None:
    """The lax loop the step's gradient is taken in, for training.json ``step_loop``, or None."""
    if loop is None:
        return None
    name, batches = loop
    return {"loop": name, "batches": batches}
