"""Evaluation inside a PyTorch training loop, from the model's own mode switches.

PyTorch steps run back to back (a step ends at ``optimizer.step()``, the
next begins there), so a validation pass between two steps lands inside a
step's period and read as a slow step. The framework says what it was: the
script puts the model it trains in evaluation mode (``model.eval()``, i.e.
``model.train(False)``) for it and back (``model.train()``) after. Those
switches of a module that holds parameters of an optimizer that has stepped
(any of them: a new fold's model is trained too, torch_optimizers) are
written as the same marks Keras's validation writes, ``test_begin`` and
``test_end``: the accounting counts the time as validation, and the step
that holds it begins at ``test_end`` (analyze/recorded_steps.py).

A validation loop that never switches the model's mode, only turns gradients off (``with
torch.no_grad():`` or ``torch.inference_mode()`` around a pass over a validation DataLoader), is
marked the same way (``NoGradMarks``): an outermost such block in which at least
``EVAL_FETCHES`` batches were fetched and no optimizer stepped. Fewer fetches (a teacher's batch
inside a training step) or none (gradient clipping, an EMA update) are the step's.

Cost: ``Module.train`` is wrapped once; a call that does not change the
root module's mode (scripts that call ``model.train()`` every step) costs a
dict lookup; a change costs one walk over the module's parameters (again
only once another optimizer has stepped since). Modules are known by id and
a weak reference: a freed model's id can be a new model's.
"""

from __future__ import annotations

import functools
import threading
import time
import weakref

from scaldiag.collect.frameworks.guard import replace

# Batches fetched inside one no_grad block for it to be evaluation: a validation loop iterates its
# loader; a training step that fetches a batch under no_grad (a teacher's, a reference's) once.
EVAL_FETCHES = 2


class ModeMarks:
    """Follows root ``Module.train(mode)`` calls and marks the followed model's switches."""

    def __init__(self, capture):
        self._capture = capture
        self._depth = (
            0  # train() recurses into the children: only the outermost call is the script's
        )
        # id(module) -> [a weak reference to it, its last mode seen, optimizers seen when it was
        # last asked whether it is trained (None: never), whether it is]
        self._modules: dict[int, list] = {}
        self.in_eval = False
        self.marked = 0  # marks written (NoGradMarks leaves a block with a mode switch to these)

    def wrap(self, module_class) -> None:
        original = module_class.train
        if getattr(original, "_scaldiag", False):
            return
        marks = self

        @functools.wraps(original)
        def train(module, mode: bool = True):
            if marks._depth:
                return original(module, mode)
            marks._depth += 1
            try:
                return original(module, mode)
            finally:
                marks._depth -= 1
                marks.switched(module, bool(mode))

        train._scaldiag = True
        replace(module_class, "train", train)

    def switched(self, module, training: bool) -> None:
        """A root ``train(mode)`` call returned (never raises: the script's call must not fail)."""
        try:
            entry = self._entry(module)
            if entry[1] == training:
                return
            entry[1] = training
            capture = self._capture
            if capture.loop_owner is not None:  # the loop's adapter marks evaluation itself
                return
            if (
                capture.session is None
                or capture.failed
                or capture.finished
                or not self._holds_optimized(module, entry)
            ):
                return
            recorder = capture.session.recorder
            if not training and not self.in_eval:
                self.in_eval = True
                self.marked += 1
                recorder.mark("test_begin", source="model.eval()")
            elif training and self.in_eval:
                self.in_eval = False
                self.marked += 1
                recorder.mark("test_end", source="model.train()")
        except Exception:
            pass

    def _entry(self, module) -> list:
        entry = self._modules.get(id(module))
        if entry is None or entry[0]() is not module:
            entry = self._modules[id(module)] = [weakref.ref(module), None, None, False]
        return entry

    def _holds_optimized(self, module, entry: list) -> bool:
        optimizers = self._capture.optimizers
        if entry[2] != optimizers.count:  # asked again once another optimizer has stepped
            if not optimizers.count:
                return False  # no optimizer has stepped yet: decide at a later switch
            optimized = optimizers.parameter_ids()
            entry[2] = optimizers.count
            entry[3] = any(id(p) in optimized for p in module.parameters())
        return entry[3]


class NoGradMarks:
    """Follows outermost ``torch.no_grad()``/``torch.inference_mode()`` blocks; one that fetched
    ``EVAL_FETCHES`` batches or more and stepped no optimizer is marked as evaluation, from its
    entry to its exit (``test_begin``/``test_end``, source ``torch.no_grad()``)."""

    def __init__(self, capture, modes: ModeMarks):
        self._capture = capture
        self._modes = modes
        # Per thread, as torch's grad mode is: the depth of blocks, and (t_ns, fetches, open step,
        # mode marks) at the outermost one's entry
        self._local = threading.local()

    def wrap(self, grad_mode) -> None:
        for name in ("no_grad", "inference_mode"):
            context = getattr(grad_mode, name, None)
            if context is not None:
                self._wrap(context)

    def _wrap(self, context) -> None:
        enter, leave = context.__enter__, context.__exit__
        if getattr(enter, "_scaldiag", False):
            return
        marks = self

        @functools.wraps(enter)
        def __enter__(ctx):
            marks.entered()
            return enter(ctx)

        @functools.wraps(leave)
        def __exit__(ctx, *exc):
            try:
                return leave(ctx, *exc)
            finally:
                marks.left()

        __enter__._scaldiag = True
        replace(context, "__enter__", __enter__)
        replace(context, "__exit__", __exit__)

    def entered(self) -> None:
        local = self._local
        local.depth = depth = getattr(local, "depth", 0) + 1
        if depth > 1:
            return
        try:
            capture = self._capture
            session = capture.session
            local.entered = (
                (time.time_ns(), capture.fetches, session.recorder.step, self._modes.marked)
                if session is not None and capture.loop_owner is None
                else None
            )
        except Exception:
            local.entered = None

    def left(self) -> None:
        """Never raises: the script's block must end as it would have."""
        local = self._local
        local.depth = depth = max(0, getattr(local, "depth", 1) - 1)
        if depth:
            return
        entered, local.entered = getattr(local, "entered", None), None
        try:
            capture = self._capture
            if entered is None or capture.session is None or capture.failed or capture.finished:
                return
            begin_ns, fetches, step, marked = entered
            recorder = capture.session.recorder
            if (
                capture.fetches - fetches >= EVAL_FETCHES
                and recorder.step == step  # no optimizer step inside: not training
                and self._modes.marked == marked  # no model.eval()/train() marked inside
                and not self._modes.in_eval
            ):
                recorder.mark("test_begin", t_ns=begin_ns, source="torch.no_grad()")
                recorder.mark("test_end", source="torch.no_grad()")
        except Exception:
            pass
