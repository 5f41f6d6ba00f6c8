"""The Hugging Face transformers adapter: the ``Trainer``'s own callbacks and methods say what each
part of its loop is.

The Trainer steps a torch.optim optimizer (accelerate's ``AcceleratedOptimizer`` around it), so the
PyTorch adapter's step hooks record its steps: one per ``optimizer.step()``, which with gradient
accumulation is one step of ``gradient_accumulation_steps`` micro-batches (the Trainer fetches them
all, then runs their forward and backward, then steps once). What those hooks cannot see, this
adapter tells, from a ``TrainerCallback`` added to every ``Trainer`` at its construction and from
two of the Trainer's methods wrapped at import:

- the run begins at ``on_train_begin`` (so ``eval_on_start`` is marked too);
- epochs are the Trainer's (``on_epoch_begin``/``on_epoch_end``), numbered from 0 by this adapter
  (``state.epoch`` is a fraction of the schedule, not an epoch's number);
- ``Trainer.evaluate``, begin to end (also when it raises), is evaluation (``test_begin``/
  ``test_end``, kind ``evaluation``): its DataLoader's batches are not the training input;
  ``Trainer.predict`` likewise (kind ``prediction``);
- ``Trainer._save_checkpoint``, begin to end, is a checkpoint (kind ``checkpoint``);
- each ``on_log`` is a ``log`` mark;
- the batch is the TrainingArguments' (``train_batch_size`` x ``gradient_accumulation_steps`` x the
  data-parallel world, the Trainer's ``get_total_train_batch_size``), not the first DataLoader batch
  (one micro-batch); ``scaldiag profile --global-batch`` still wins;
- the user's clock: at ``on_train_end``, what ``train()`` itself reports (``speed_metrics``):
  ``train_runtime`` is wall time from just before ``on_train_begin`` (the model, optimizer and
  DataLoader already prepared) to the end of the last epoch, so it holds in-training evaluation,
  checkpoints, logging and each epoch's DataLoader start, but not what comes after (loading the best
  model, ``on_train_end``); ``train_steps_per_second`` is this call's optimizer steps over it;
  ``train_samples_per_second`` is the schedule's samples (max_steps x total batch, or examples x
  epochs) times the share of steps run, over it: a nominal count, not the samples seen.

This module is imported once ``transformers.trainer`` has executed; it imports transformers only
inside the patched functions. Nothing here raises into training (``guard``).
"""

from __future__ import annotations

import functools
import os

from scaldiag.collect.frameworks.guard import after_init, attempt, on_import, replace, say
from scaldiag.collect.frameworks.own_run import OwnRun

TRAINER = "transformers.trainer"
SOURCE = "TrainerCallback"
CLOCK_KEYS = ("train_runtime", "train_steps_per_second", "train_samples_per_second")
# Trainer methods that are not training, and the part each is; a subclass's override that calls
# super() nests: only the outermost call is marked (``_depth``).
PARTS = (("evaluate", "evaluation"), ("predict", "prediction"), ("_save_checkpoint", "checkpoint"))
_depth: dict[str, int] = {}


def patches() -> dict:
    return {TRAINER: _on_trainer_import}


def _capture():
    from scaldiag.collect.frameworks import torch_capture

    return torch_capture.CAPTURE


def _quiet(what: str):
    return lambda why: say(f"transformers adapter: {what} not followed ({why})")


@on_import("transformers")
def _on_trainer_import(module) -> None:
    trainer_class = module.Trainer
    if not after_init(trainer_class, _attach, _quiet("this Trainer")):
        return
    for method, kind in PARTS:
        if hasattr(trainer_class, method):
            replace(trainer_class, method, _part(getattr(trainer_class, method), kind))
        else:  # a transformers version that renamed it: that part is not marked
            say(f"transformers adapter: no Trainer.{method}, {kind} not marked")


def _part(method, kind: str):
    source = f"Trainer.{method.__name__}"

    @functools.wraps(method)
    def wrapped(self, *args, **kwargs):
        outermost = _depth.get(kind, 0) == 0
        _depth[kind] = _depth.get(kind, 0) + 1
        if outermost:
            attempt(lambda: _capture().adapter_part(kind, True, source), _quiet(kind))
        try:
            return method(self, *args, **kwargs)
        finally:
            _depth[kind] -= 1
            if outermost:
                attempt(lambda: _capture().adapter_part(kind, False, source), _quiet(kind))

    wrapped._scaldiag = True
    return wrapped


def _attach(trainer) -> None:
    from transformers import TrainerCallback

    handler = getattr(trainer, "callback_handler", None)
    ours = [c for c in getattr(handler, "callbacks", ()) if getattr(c, "_scaldiag", False)]
    if ours:  # the user's (scaldiag.hf): it learns its Trainer here
        for callback in ours:
            callback.set_trainer(trainer)
    else:
        trainer.add_callback(callback_class(TrainerCallback)(trainer))
    _capture().owned_by("transformers")


def _batch(trainer, args) -> tuple[int, int, str]:
    """(global, per-replica, source): one optimizer step's samples, from the Trainer's arguments."""
    micro = int(getattr(trainer, "_train_batch_size", None) or args.train_batch_size)
    accumulation = int(args.gradient_accumulation_steps)
    world = int(args.world_size)
    total = getattr(trainer, "get_total_train_batch_size", None)  # (no Trainer: the arguments')
    global_batch = int(total(args)) if callable(total) else micro * accumulation * world
    source = (
        f"TrainingArguments: per-device batch {micro} x gradient_accumulation_steps "
        f"{accumulation} x world size {world} (the Trainer's total train batch size)"
    )
    return global_batch, micro * accumulation, source


def _give_batch(trainer, args) -> None:
    from scaldiag.collect.env import GLOBAL_BATCH_ENV

    capture = _capture()
    global_batch, per_replica, source = _batch(trainer, args)
    # Known now: the first DataLoader batch (one micro-batch) must not be learned as the batch
    # (torch_capture learns one only while ``batch`` is None).
    capture.batch = (per_replica, source)
    capture.adapter_facts(gradient_accumulation=int(args.gradient_accumulation_steps))
    given = os.environ.get(GLOBAL_BATCH_ENV, "")
    if not (given.isdigit() and int(given) > 0):  # `scaldiag profile --global-batch` wins
        capture.adapter_facts(
            global_batch=global_batch, per_replica_batch=per_replica, batch_source=source
        )


def _user_clock(state) -> dict | None:
    """The metrics of the train() call that just ended: its last log holding train_runtime."""
    last = next(
        (
            logs
            for logs in reversed(getattr(state, "log_history", None) or [])
            if isinstance(logs, dict) and "train_runtime" in logs
        ),
        None,
    )
    if last is None:
        return None
    clock = {key: last[key] for key in CLOCK_KEYS if key in last}
    clock.update(
        global_step=int(state.global_step),
        source=(
            "transformers Trainer.train() metrics "
            "(speed_metrics): from before on_train_begin to the last epoch's end, evaluation "
            "and checkpoints inside training included"
        ),
    )
    return clock


@functools.cache
def callback_class(base):
    """A subclass of transformers' own ``TrainerCallback`` (the handler calls every event on it):
    the one ``profile``'s hook adds to every Trainer, and the one the user adds (``scaldiag.hf``).
    Outside ``profile`` and ``scaldiag.capture`` nobody armed the PyTorch adapter: the user's
    callback then records ``train()`` itself, from ``on_train_begin`` to ``on_train_end``, as
    ``scaldiag.capture`` around it would (collect/inprocess.py). transformers calls no callback
    when ``train()`` raises: that run is closed as failed at the next ``train()``, by
    ``close()``, by the next ``scaldiag.capture()`` or at exit."""

    class ScaldiagTrainerCallback(base):
        """Record ``Trainer.train`` as a scaldiag run (``out``: where run directories go, default
        ``scaldiag_runs``; ``global_batch``: samples per step). Under ``scaldiag profile`` or
        inside ``scaldiag.capture()`` it records into their run."""

        _scaldiag = True

        def __init__(self, trainer=None, out=None, global_batch: int | None = None):
            self._trainer = lambda: None
            if trainer is not None:
                self.set_trainer(trainer)
            self._epoch = 0  # epochs begun in this process, across train() calls
            self._own = OwnRun(out, global_batch, "transformers", "scaldiag.hf.ScaldiagCallback")

        def set_trainer(self, trainer) -> None:
            import weakref

            self._trainer = weakref.ref(trainer)  # the Trainer holds us: no cycle kept alive

        @property
        def run_dir(self):
            """The run this callback recorded itself (None under profile or capture: theirs)."""
            return self._own.run_dir

        def close(self, error: BaseException | None = None) -> None:
            """The run this callback opened, closed (after a ``train()`` that raised)."""
            self._own.finish(error)

        def on_train_begin(self, args, state, control, **kwargs):
            if self._own.start():
                _capture().owned_by("transformers")
            attempt(lambda: self._train_begins(args), _quiet("the training start"))

        def _train_begins(self, args) -> None:
            _capture().adapter_start()
            _give_batch(self._trainer(), args)

        def on_epoch_begin(self, args, state, control, **kwargs):
            attempt(lambda: _capture().adapter_epoch(self._epoch, True), _quiet("the epoch"))

        def on_epoch_end(self, args, state, control, **kwargs):
            attempt(lambda: _capture().adapter_epoch(self._epoch, False), _quiet("the epoch"))
            self._epoch += 1

        def on_log(self, args, state, control, logs=None, **kwargs):
            attempt(
                lambda: _capture().adapter_mark("log", source="TrainerCallback.on_log"),
                _quiet("the log"),
            )

        def on_train_end(self, args, state, control, **kwargs):
            clock = attempt(lambda: _user_clock(state), _quiet("the Trainer's clock"))
            if clock:
                attempt(lambda: _capture().adapter_facts(user_clock=clock), _quiet("the clock"))
            self._own.finish(None)

    return ScaldiagTrainerCallback
