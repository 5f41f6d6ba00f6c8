"""The PyTorch Lightning adapter: ``Trainer.fit``'s own Callback hooks say what each part of its
loop is.

Lightning trains with torch.optim optimizers, so the PyTorch adapter's step
hooks record its steps (one per optimizer step). What they cannot see, this
adapter's Callback, added to every ``Trainer`` at its construction, tells:

- the sanity check (``on_sanity_check_start``/``_end``) and each validation
  loop (``on_validation_start``/``_end``) are not training: they are marked as
  the loop's evaluation (``test_begin``/``test_end``, kind ``sanity check`` or
  ``validation``), and their DataLoader's batches are not the training input
  (Lightning puts the model back in training mode by setting ``.training``
  directly, so ``model.train()`` never says that validation ended);
- epochs are Lightning's (``on_train_epoch_start``/``_end``), not passes over a
  DataLoader;
- a checkpoint save is a point (``on_save_checkpoint``, before its write);
- the run begins at ``on_fit_start``, so a sanity check before the first step
  is marked too.

Both packages are followed: ``lightning.pytorch`` and ``pytorch_lightning``.
"""

from __future__ import annotations

import functools
import importlib

from scaldiag.collect.frameworks.guard import after_init, on_import, say
from scaldiag.collect.frameworks.own_run import OwnRun

TRAINERS = ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer")
SOURCE = "Lightning Callback"


def patches() -> dict:
    return {name: _on_trainer_import for name in TRAINERS}


@on_import("lightning")
def _on_trainer_import(module) -> None:
    package = module.__name__.rsplit(".trainer.trainer", 1)[0]
    after_init(
        module.Trainer,
        lambda trainer: _attach(trainer, package),
        lambda why: say(f"not following this Trainer ({why})"),
    )


def _capture():
    from scaldiag.collect.frameworks import torch_capture

    return torch_capture.CAPTURE


def _attach(trainer, package: str) -> None:
    base = importlib.import_module(package + ".callbacks").Callback
    if not any(getattr(c, "_scaldiag", False) for c in trainer.callbacks):  # (the user's one, else)
        trainer.callbacks.append(callback_class(base)())
    _capture().owned_by("lightning")


@functools.cache
def callback_class(base):
    """A Callback subclass of the package's own ``Callback`` (Lightning checks the type): the one
    ``profile``'s hook adds to every Trainer, and the one the user adds (``scaldiag.lightning``).
    Outside ``profile`` and ``scaldiag.capture`` nobody armed the PyTorch adapter: the user's
    callback then records ``fit`` itself, from ``on_fit_start`` to ``on_fit_end`` (or
    ``on_exception``), as ``scaldiag.capture`` around it would (collect/inprocess.py)."""

    class ScaldiagLightningCallback(base):
        """Record this ``Trainer.fit`` as a scaldiag run (``out``: where run directories go,
        default ``scaldiag_runs``; ``global_batch``: samples per step, where the data cannot tell).
        Under ``scaldiag profile`` or inside ``scaldiag.capture()`` it records into their run."""

        _scaldiag = True

        def __init__(self, out=None, global_batch: int | None = None):
            super().__init__()
            self._own = OwnRun(
                out, global_batch, "lightning", "scaldiag.lightning.ScaldiagCallback"
            )

        @property
        def run_dir(self):
            """The run this callback recorded itself (None under profile or capture: theirs)."""
            return self._own.run_dir

        def on_fit_start(self, trainer, pl_module):
            if self._own.start():
                _capture().owned_by("lightning")
            _capture().adapter_start()
            # its bar counts batches: k of them an optimizer step (analyze/printed_clock.py)
            accumulation = getattr(trainer, "accumulate_grad_batches", None)
            if isinstance(accumulation, int) and not isinstance(accumulation, bool):
                _capture().adapter_facts(gradient_accumulation=accumulation)

        def on_sanity_check_start(self, trainer, pl_module):
            _capture().adapter_part("sanity check", True, SOURCE)

        def on_sanity_check_end(self, trainer, pl_module):
            _capture().adapter_part("sanity check", False, SOURCE)

        def on_validation_start(self, trainer, pl_module):
            if not getattr(trainer, "sanity_checking", False):
                _capture().adapter_part("validation", True, SOURCE)

        def on_validation_end(self, trainer, pl_module):
            if not getattr(trainer, "sanity_checking", False):
                _capture().adapter_part("validation", False, SOURCE)

        def on_train_epoch_start(self, trainer, pl_module):
            _capture().adapter_epoch(int(trainer.current_epoch), True)

        def on_train_epoch_end(self, trainer, pl_module):
            _capture().adapter_epoch(int(trainer.current_epoch), False)

        def on_save_checkpoint(self, trainer, pl_module, checkpoint):
            _capture().adapter_mark("checkpoint", source=SOURCE)

        def on_fit_end(self, trainer, pl_module):
            self._own.finish(None)

        def on_exception(self, trainer, pl_module, exception):
            self._own.finish(exception)

    return ScaldiagLightningCallback
