"""The JAX custom-loop adapter: a ``jax.jit`` function whose trace takes a gradient is the step.

JAX's and Flax's own examples train with a jitted train step called in a
Python loop; nothing in JAX says "a step began". The evidence here is what
the program's own transformations are: ``jax.jit`` (and so ``nnx.jit``,
which builds on it) is wrapped, and so are ``jax.grad``,
``jax.value_and_grad`` and ``jax.vjp`` (and what ``grad`` returns, which a
script may make outside the step and call inside it). A jitted function
during whose trace a gradient is taken is a *training step*; each top-level
call of it begins one step (the recorder's ``begin``: a step ends where the
next begins). Nothing is inferred from durations.

- **Evaluation.** Calls of other jitted functions between two steps are the
  loop's other work. A run of them (from the first such call after a step to
  the next step's call) is marked ``test_begin``/``test_end``, kind
  ``evaluation``, so the steady step leaves it out. A jitted function called
  in two consecutive gaps between steps (Flax's ``update_model`` after
  ``apply_model``, a per-step metrics function) is part of the loop's
  iteration instead: from then on it marks nothing (its first gap was marked);
  not where the step loops over its batches inside (below): each step is then
  an epoch, and a call after every one is the epoch's evaluation.
- **The device's catch-up.** JAX dispatches asynchronously: host-side step
  periods measure dispatch, and the device's backlog is paid where the
  program first waits. Where the loop leaves its steps (the first evaluation
  call after a step, and the script's end), ``jax.block_until_ready`` waits
  for the last step's outputs before anything is marked, so the backlog is
  counted in training, not in evaluation. It waits only for what the next
  call would have waited for anyway (evaluation reads the parameters the step
  wrote). The step ends there (``recorder.end``), and the steps after the
  evaluation are the next run of steps: their ``epoch`` number counts runs of
  steps that end at such a synchronisation (JAX has no epochs; the loop's
  evaluation is the only edge it shows), and no ``epoch_begin`` is marked.
- **Compiles**: JAX's compile events (``compile_marks``, as Keras on JAX),
  listened to from the moment JAX is imported, so the first step's compile,
  before the run began, is marked too.
- **The batch**: the leading dimension of the step's first positional array
  argument that is not state. State is an argument the step gives back (an
  array of the same shape and dtype is among its outputs for each of its
  arrays: parameters, optimizer state, a ``TrainState``, NNX's variable
  updates), which is how a functional step carries its parameters; a batch
  is not given back. A PRNG key is not a batch either. ``--global-batch``
  wins.
- **Replicas**: the devices that argument's ``jax.Array`` is sharded over
  (its ``sharding``); a host array says nothing, and 1 is written with a note.
- **An epoch inside one call**: a step whose gradient is taken inside a ``lax.fori_loop`` or
  ``lax.scan`` of its own trace (both wrapped too, in jax_step_loop.py: they do nothing but note
  themselves while a jitted function traces) runs that loop's batches in one call:
  ``training.json``'s ``step_loop`` names the loop and its trip count, known where the bounds
  are Python integers (a fori_loop's) or the scan's length is static, else null. A step is then
  one call, as seen from outside; the report gives the figure per batch where the count is known.
- **The profiler window**: the session's JAX trace window (``tracing``), over
  the recorder's usual steady steps; its step annotations cover dispatch.

While a Keras ``fit`` runs (``keras_hooks.FITS_RUNNING``), Keras 3 on JAX
jits and differentiates its own train step: that fit is the Keras adapter's,
and nothing is recorded here. The wrapper's hot path is one contextvar read
and one attribute test; nothing raises into the program (a failure turns
this capture off and says so once).

In a notebook (``scaldiag.capture``, ``%%scaldiag``: collect/inprocess.py)
the adapter is armed for the block: every patch is made through
``guard.replace`` and taken back at the block's end, ``finish`` closes the
run there (``adapters.finish``), and ``reset`` gives the next block a loop of
its own. Only what ``jax.jit`` makes while armed is followed: a function
jitted before the block is JAX's own (docs/capture.md).
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import importlib.metadata
import os
import sys
import time

from scaldiag.collect.env import GLOBAL_BATCH_ENV, RUN_DIR_ENV
from scaldiag.collect.frameworks import compile_marks, jax_step_loop, keras_hooks
from scaldiag.collect.frameworks.guard import attempt, on_import, reason, replace, say, undoable

SOURCE = "jax.jit (no gradient)"
STEP_SOURCE = "jax.jit function whose trace takes a gradient: one step per call"
GRADIENTS = ("grad", "value_and_grad", "vjp")
TRACING_METHODS = ("lower", "trace", "eval_shape")
HOW_TO_GIVE_BATCH = "give it with `scaldiag profile --global-batch N`"

# The jitted function whose trace is running (outermost), or None at the program's own level.
_TRACING: contextvars.ContextVar = contextvars.ContextVar("scaldiag_jax_tracing", default=None)
LOOPING_TRACE_STEPS = 1  # traced steps where a step loops over its batches inside one call


def patches() -> dict:
    return {"jax": _on_jax_import}


@on_import("jax")
def _on_jax_import(jax) -> None:
    if getattr(jax.jit, "_scaldiag", False):
        return
    real_jit = jax.jit

    @functools.wraps(real_jit)
    def jit(fun=None, *args, **kwargs):
        if fun is None:  # jax.jit(static_argnums=...) used as a decorator factory
            return lambda f: jit(f, *args, **kwargs)
        return Jitted(real_jit(fun, *args, **kwargs))

    jit._scaldiag = True
    # Each patch through guard.replace: ``scaldiag.capture`` takes them back at its block's end
    # (under ``profile`` they stay: the process ends with the script).
    for name in GRADIENTS:
        replace(jax, name, _noting(getattr(jax, name), returns_function=name != "vjp"))
    replace(jax, "jit", jit)
    for name in jax_step_loop.LOOPS:
        replace(jax.lax, name, jax_step_loop.looping(getattr(jax.lax, name), name, _TRACING))
    _follow_eager_ops()
    compile_marks.listen("jax")  # from now: the first step's compile precedes the run's start
    undoable(compile_marks.stop)  # (after a block: compile events no longer kept)
    if not _AT_EXIT:  # once a process: LOOP is the same object after each reset
        _AT_EXIT.append(LOOP.finish)
        atexit.register(LOOP.finish)


def _follow_eager_ops() -> None:
    """JAX ops run outside any jitted call (JAX's eager ``EvalTrace``: an un-jitted accuracy pass,
    as JAX's own MNIST examples evaluate) are the loop's other work too, as a jitted call without a
    gradient is: between two steps they are evaluation, unless they run in every gap (``EAGER``)."""
    from jax._src import core

    trace_class = core.EvalTrace
    original = trace_class.process_primitive

    @functools.wraps(original)
    def process_primitive(self, primitive, args, params, /):
        if LOOP.session is not None and _TRACING.get() is None and not LOOP.quiet:
            LOOP.eager_op()
        return original(self, primitive, args, params)

    replace(trace_class, "process_primitive", process_primitive)


def _noting(real, returns_function: bool):
    """``jax.grad`` & co.: called while a jitted function is traced, that function is a step."""

    def note() -> None:
        info = _TRACING.get()
        if info is not None:
            info.grad = True
            looping = jax_step_loop.LOOPING.get()
            if looping is not None:  # the gradient is taken in each trip of a loop: its batches
                info.loop = looping

    @functools.wraps(real)
    def transform(*args, **kwargs):
        note()
        made = real(*args, **kwargs)
        if not returns_function or not callable(made):
            return made

        @functools.wraps(made)
        def taking(*a, **k):  # a gradient function made outside the step, called inside it
            note()
            return made(*a, **k)

        return taking

    return transform


class _Info:
    """What one jitted function is: a step once a gradient was taken in its trace."""

    __slots__ = ("grad", "called", "last_gap", "per_step", "loop", "run")

    def __init__(self):
        self.grad = False
        self.loop = None  # (lax loop, trip count or None): the gradient is taken inside it
        self.run = 0  # the run (JaxLoop.run) the fields below are of
        self.new_run(0)

    def new_run(self, run: int) -> None:
        """A later run (``scaldiag.capture``'s next block) calls it: what it knew of its trace
        (``grad``, ``loop``: JAX keeps the trace and will not trace it again) stays; its calls
        are counted afresh."""
        self.run = run
        self.called = False
        self.last_gap = -2  # the gap between steps it was last called in
        self.per_step = False  # called in consecutive gaps: the loop's iteration, not evaluation


class Jitted:
    """``jax.jit(f)``'s result, followed; everything but the call is the real one's."""

    def __init__(self, jitted):
        functools.update_wrapper(self, jitted)
        self.__wrapped__ = getattr(jitted, "__wrapped__", jitted)  # the user's function, as jax's
        self._jitted = jitted
        self._info = _Info()

    def __call__(self, *args, **kwargs):
        # Inside another jitted function's trace, or inside a Keras fit: the real call alone.
        if _TRACING.get() is not None or keras_hooks.FITS_RUNNING:
            return self._jitted(*args, **kwargs)
        return LOOP.call(self._jitted, self._info, args, kwargs)

    def __getattr__(self, name):  # lower, trace, eval_shape, clear_cache, ...
        found = getattr(self.__dict__["_jitted"], name)
        if name in TRACING_METHODS and _TRACING.get() is None:
            # These trace too, and JAX keeps the trace for the calls: a gradient seen here counts.
            info = self.__dict__["_info"]
            return functools.wraps(found)(lambda *a, **k: _traced(found, info, a, k))
        return found

    def __get__(self, instance, owner=None):  # a jitted function as a method, as jax's binds
        return self if instance is None else functools.partial(self, instance)

    def __repr__(self):
        return repr(self._jitted)


class JaxLoop:
    """One process's capture of a JAX loop, driven by ``Jitted`` calls."""

    def __init__(self, run: int = 0):
        self.run = run  # which capture of this process (``reset`` counts them)
        self.session = None
        self.failed: str | None = None
        self.finished = False
        # The first jitted function seen to take a gradient; another one (a GAN's second step) is
        # the loop's other work, as torch_capture counts the first optimizer's steps only.
        self.step_info: _Info | None = None
        self.steps = 0  # step calls so far; gap g lies after the g-th
        self.last_out = None  # the last step's outputs, waited for where the loop leaves the steps
        self.in_step_run = False  # a step was called since the last synchronisation
        self.evaluating = False
        self._syncing = False  # in block_until_ready: the ops it may run are scaldiag's
        # The first call (jitted or eager) after the last step: when, and whether the step's
        # outputs were ready then. At the script's end, the last step ends there if they were.
        self.gap_seen = -1  # the gap (steps so far) it was noted in
        self.gap_first_ns = 0
        self.gap_ready: bool | None = None

    @property
    def quiet(self) -> bool:
        """Not following: done, failed, inside its own synchronisation, or inside a Keras fit."""
        return self.finished or bool(self.failed) or self._syncing or bool(keras_hooks.FITS_RUNNING)

    def eager_op(self) -> None:
        """An op dispatched eagerly, outside every jitted call (``_follow_eager_ops``)."""
        if self.evaluating or EAGER.last_gap == self.steps:  # this gap is already known
            return
        self._note_gap()
        attempt(lambda: self._other_call(EAGER), self._fail)

    def call(self, jitted, info: _Info, args, kwargs):
        if self.failed or self.finished:
            return jitted(*args, **kwargs)
        if info is self.step_info:
            attempt(self._step_begins, self._fail)
            out = _traced(jitted, info, args, kwargs)
            self.last_out = out
            return out
        if info.run != self.run:  # a function jitted in an earlier capture's block
            info.new_run(self.run)
        if self.session is not None:  # any other jitted call of the run: the loop's other work
            self._note_gap()
            attempt(lambda: self._other_call(info), self._fail)
            info.called = True
            return _traced(jitted, info, args, kwargs)
        begin_ns = time.time_ns()
        out = _traced(jitted, info, args, kwargs)
        if not info.called and info.grad:  # the first function seen to take a gradient: the step
            self.step_info = info
            attempt(lambda: self._first_step(args, out, begin_ns), self._fail)
            self.last_out = out
        info.called = True
        return out

    # --- steps ---------------------------------------------------------------
    def _step_begins(self) -> None:
        recorder = self.session.recorder
        if self.evaluating:
            self.evaluating = False
            recorder.mark("test_end", kind="evaluation", source=SOURCE)
        if compile_marks.LOG.pending:
            compile_marks.LOG.drain(recorder)
        self.steps += 1
        self.in_step_run = True
        recorder.begin()

    def _first_step(self, args, out, begin_ns: int) -> None:
        if self.session is None:
            self._start(args, out, begin_ns)
        self._step_begins()

    def _other_call(self, info: _Info) -> None:
        """A jitted call with no gradient, after the run began: evaluation, unless per step."""
        gap = self.steps
        # (A step that loops over its batches inside is an epoch: a call in every gap is then the
        # epoch's evaluation, not a per-step metric.)
        if info.last_gap == gap - 1 and self.steps > 0 and not self._step_loops():
            info.per_step = True
        info.last_gap = gap
        if self.evaluating or not self.in_step_run or info.per_step:
            return
        recorder = self.session.recorder
        self._synchronise()
        self.in_step_run = False
        recorder.end()
        recorder.epoch = recorder.epoch + 1  # the next steps are a new run of steps
        self.evaluating = True
        recorder.mark("test_begin", kind="evaluation", source=SOURCE)

    def _step_loops(self) -> bool:
        return self.step_info is not None and self.step_info.loop is not None

    def _note_gap(self) -> None:
        """The gap's first call: its time, and whether the last step's outputs were ready (one
        ``is_ready``, which never waits; once a gap)."""
        if self.gap_seen != self.steps:
            self.gap_seen = self.steps
            self.gap_first_ns = time.time_ns()
            self.gap_ready = jax_step_loop.ready(self.last_out)

    def _last_step_end_ns(self) -> int | None:
        """Where the last step ended, if before the script's end: at the first call after it, where
        its outputs were ready then (the script had waited for them: what it did after, its final
        evaluation, saving, printing, is its own work, not the step's)."""
        if self.gap_seen == self.steps and self.gap_ready and self.in_step_run:
            return self.gap_first_ns
        return None

    def _synchronise(self) -> None:
        """Wait for the last step's outputs: the device's backlog belongs to training."""
        out, self.last_out = self.last_out, None
        if out is not None:
            import jax

            self._syncing = True
            begin_ns = time.time_ns()
            try:  # (outputs donated since: nothing is left to wait for)
                attempt(lambda: jax.block_until_ready(out), lambda why: None)
            finally:
                self._syncing = False
            # The device's backlog, waited for here: a timer the script stops before any sync
            # reads the host's dispatch without it (analyze/clock.py, "host dispatch").
            self.session.recorder.mark(
                "device_wait",
                t_ns=begin_ns,
                end_ns=time.time_ns(),
                source="jax.block_until_ready on the last step's outputs",
            )

    # --- the run -------------------------------------------------------------
    def _start(self, args, out, begin_ns: int) -> None:
        from scaldiag.collect.frameworks import adapters
        from scaldiag.collect.session import Session

        launched = os.environ.get(RUN_DIR_ENV)
        # A step that loops over its batches inside is a whole epoch: one traced is thousands of
        # batches, and five took the profiler 15-20 s to stop on the 2-core CPU (1,875 each).
        window = {"trace_steps": LOOPING_TRACE_STEPS} if self._step_loops() else {}
        self.session = Session(backend="jax", sample=False if launched else None, **window)
        recorder = self.session.recorder
        recorder.on_error = self._fail
        compile_marks.LOG.drain(recorder)  # the compiles before the first step (its own among them)
        sources = compile_marks.listen("jax")
        recorder.mark("fit_begin", t_ns=begin_ns)
        self.session.describe(**adapters.evidence_facts(["jax"]))
        self.session.describe(
            framework={"name": "jax", "backend": _platform(), "versions": versions()},
            steps_per_execution=1,
            step_source=STEP_SOURCE,
            compile_evidence=sources,
            step_loop=jax_step_loop.facts(self.step_info and self.step_info.loop),
            **batch_facts(args, out),
        )

    def _fail(self, reason: str) -> None:
        if not self.failed:
            self.failed = reason
            from scaldiag.collect.session import capture_failed

            capture_failed(self.session, reason)

    def finish(self) -> None:
        """The script ended: the last step ends once the device has caught up; the run closes."""
        if self.finished or self.session is None:
            self.finished = True
            return
        self.finished = True
        session = self.session
        try:
            recorder = session.recorder
            if self.evaluating:
                recorder.mark("test_end", kind="evaluation", source=SOURCE)
            elif not self.failed:
                ended_ns = self._last_step_end_ns()
                self._synchronise()
                if ended_ns is not None:
                    recorder.mark(
                        "loop_end", t_ns=ended_ns, source="the first call after the last step"
                    )
                recorder.end(at_ns=ended_ns)
            compile_marks.LOG.drain(recorder)
            compile_marks.stop()
            recorder.mark("fit_end")
        except Exception as exc:
            say(f"could not finish the capture ({reason(exc)})")
        finally:
            try:
                session.close()
            except Exception as exc:
                say(f"could not close the run ({reason(exc)})")


def _traced(jitted, info: _Info, args, kwargs):
    """The real call, with ``info`` as the function being traced (if it traces now)."""
    token = _TRACING.set(info)
    try:
        return jitted(*args, **kwargs)
    finally:
        _TRACING.reset(token)


# --- facts for training.json ---------------------------------------------------
def versions() -> dict[str, str]:
    found = {}
    for name in ("jax", "jaxlib", "flax", "optax"):
        if name in sys.modules or name == "jaxlib":
            try:
                found[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                pass
    return found


def _platform() -> str | None:
    try:
        import jax

        return jax.default_backend()
    except Exception:
        return None


def _kinds(tree) -> list[tuple]:
    """The (shape, dtype) of each array leaf of a tree."""
    import jax

    return [
        (tuple(leaf.shape), str(leaf.dtype))
        for leaf in jax.tree_util.tree_leaves(tree)
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype")
    ]


def _is_key(leaf) -> bool:
    import jax

    dtype = getattr(leaf, "dtype", None)
    try:
        if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            return True
    except Exception:
        pass
    return str(dtype) == "uint32" and tuple(leaf.shape) == (2,)  # a raw PRNGKey


def batch_leaf(args, out):
    """The first array leaf with a leading dimension of the first positional argument that is not
    state (every array of it comes back among the outputs: see the module's docstring), or None."""
    import jax

    given_back = set(_kinds(out))
    for arg in args:
        kinds = _kinds(arg)
        if not kinds or all(kind in given_back for kind in kinds):
            continue
        for leaf in jax.tree_util.tree_leaves(arg):
            shape = getattr(leaf, "shape", None)
            if shape and isinstance(shape[0], int) and shape[0] > 0 and not _is_key(leaf):
                return leaf
    return None


def batch_facts(args, out) -> dict:
    value = os.environ.get(GLOBAL_BATCH_ENV, "")
    leaf = batch_leaf(args, out)
    replicas, how = _replicas(leaf)
    facts = {"replicas": replicas, "replicas_source": how}
    if value.isdigit() and int(value) > 0:
        batch = int(value)
        return {
            **facts,
            "global_batch": batch,
            "per_replica_batch": batch // replicas,
            "batch_source": "scaldiag profile --global-batch",
        }
    if leaf is None:
        return {
            **facts,
            "global_batch": None,
            "per_replica_batch": None,
            "batch_source": (
                "unknown: no array argument of the step that it does not give "
                "back; "
                f"{HOW_TO_GIVE_BATCH}"
            ),
        }
    size = int(leaf.shape[0])
    return {
        **facts,
        "global_batch": size,
        "per_replica_batch": size // replicas,
        "batch_source": (
            "leading dimension of the step's first array argument that is not "
            "state (not among its outputs)"
        ),
    }


def _replicas(leaf) -> tuple[int, str]:
    devices = getattr(getattr(leaf, "sharding", None), "device_set", None)
    if devices:
        return len(devices), "devices the step's batch argument is sharded over"
    return 1, "assumed 1: the step's batch argument is not a jax.Array with a sharding"


LOOP = JaxLoop()
EAGER = _Info()  # every eagerly dispatched op: one kind of the loop's other work
_AT_EXIT: list = []  # LOOP.finish, once registered with atexit


def reset() -> None:
    """Before the adapter is armed again in this process (``adapters.arm``: the next
    ``scaldiag.capture``): a loop of its own again, the one before finished (the same object,
    which ``atexit`` and the ``Jitted`` functions of earlier blocks reach)."""
    LOOP.__init__(LOOP.run + 1)
    EAGER.new_run(LOOP.run)


def finish() -> None:
    """The script ended (adapters.finish, from bootstrap's ``finally``; atexit too, for the loop
    API)."""
    LOOP.finish()
