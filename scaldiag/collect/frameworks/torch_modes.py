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

Cost: ``Module.train`` is wrapped once; a call that does not change the
root module's mode (scripts that call ``model.train()`` every step) costs a
dict lookup; a change costs one walk over the module's parameters (again
only once another optimizer has stepped since). Modules are known by id and
a weak reference: a freed model's id can be a new model's.
"""

from __future__ import annotations

import functools
import weakref


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
        self._in_eval = False

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
        module_class.train = train

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
            if not training and not self._in_eval:
                self._in_eval = True
                recorder.mark("test_begin", source="model.eval()")
            elif training and self._in_eval:
                self._in_eval = False
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
