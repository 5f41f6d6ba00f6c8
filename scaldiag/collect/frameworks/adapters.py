"""The training loops scaldiag follows: one adapter per loop family, armed by import hook.

An adapter says, from its framework's own signals, where each part of the
loop begins and ends. Its module is imported only when the program itself
imports one of the adapter's trigger modules (``bootstrap`` installs the hook;
nothing here imports a framework), and then patches that module once it has
executed: a Keras callback added to ``fit``, torch.optim's global step hooks,
a Lightning ``Callback`` or transformers ``TrainerCallback`` added to the
trainer, ``jax.jit`` followed. Where a loop family has no adapter, the one
below it (Lightning and Hugging Face both train with torch.optim) still
records steps, and the run says which evidence it lacked (``EVIDENCE``).

Each adapter module has ``patches() -> {module name: patch(module)}``; every
patch is wrapped in ``guard.on_import`` (an unknown framework version leaves
the module unpatched and says so).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

# What an adapter can know, in the order a report states it.
EVIDENCE = (
    "step",
    "epoch",
    "evaluation",
    "sanity check",
    "checkpoint",
    "logging",
    "compile",
    "batch",
    "clock",
)


@dataclass(frozen=True)
class Adapter:
    name: str
    module: str  # scaldiag's module with ``patches()``
    triggers: tuple[str, ...]  # framework modules whose import arms it
    evidence: dict[str, str] = field(default_factory=dict)  # EVIDENCE key -> its signal


_FW = "scaldiag.collect.frameworks."
KERAS = Adapter(
    "keras",
    _FW + "keras_hooks",
    (
        "keras.src.models.model",
        "tensorflow",
        # `scaldiag try`'s fixes only (keras_hooks.patches gives these in its fixed runs alone)
        "keras.src.trainers.data_adapters.py_dataset_adapter",
        "tensorflow.python.data.ops.dataset_ops",
    ),
    {
        "step": (
            "Keras callbacks: on_train_batch_begin (one execution of steps_per_execution batches)"
        ),
        "epoch": "on_epoch_begin / on_epoch_end, numbered across repeated fit calls",
        "evaluation": "on_test_begin / on_test_end inside fit (validation)",
        "compile": "tf.function traces; JAX compile events (jax.monitoring)",
        "batch": "fit's batch_size or the data's first batch",
        "clock": "Keras's progress bar: ms/step of whole epochs",
    },
)
PYTORCH = Adapter(
    "pytorch",
    _FW + "torch_hooks",
    (
        "torch.optim.optimizer",
        "torch.utils.data.dataloader",
        "torch.nn.modules.module",
        "torch._dynamo.callback",
        "torch.cuda.graphs",  # imported by `import torch` itself, often before the others
    ),
    {
        "step": "torch.optim global step hooks: a step ends at optimizer.step()",
        "epoch": "each new pass over the followed DataLoader",
        "evaluation": "model.eval() to model.train() of the optimized model",
        "compile": "torch._dynamo compile callbacks",
        "batch": "the first DataLoader batch, or the first forward call's input",
    },
)
LIGHTNING = Adapter(
    "lightning",
    _FW + "lightning_adapter",
    ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer"),
    {
        "step": "torch.optim step hooks: Lightning's optimizer steps",
        "epoch": "Callback on_train_epoch_start / on_train_epoch_end",
        "evaluation": "Callback on_validation_start / on_validation_end",
        "sanity check": "Callback on_sanity_check_start / on_sanity_check_end",
        "checkpoint": "Callback on_save_checkpoint (a point, before the file is written)",
        "compile": "torch._dynamo compile callbacks",
        "batch": "the first batch the training DataLoader gives",
        "clock": "Lightning's progress bar: batches per second of an epoch's training batches",
    },
)
TRANSFORMERS = Adapter(
    "transformers",
    _FW + "hf_adapter",
    ("transformers.trainer",),
    {
        "step": (
            "torch.optim step hooks: the Trainer's optimizer steps (gradient_accumulation_steps "
            "micro-batches each)"
        ),
        "epoch": "TrainerCallback on_epoch_begin / on_epoch_end",
        "evaluation": "Trainer.evaluate (and Trainer.predict), begin to end",
        "checkpoint": "Trainer._save_checkpoint, begin to end",
        "logging": "TrainerCallback on_log",
        "compile": "torch._dynamo compile callbacks",
        "batch": "TrainingArguments: per-device batch x gradient accumulation x world size",
        "clock": (
            "the Trainer's train_runtime and train_steps_per_second (optimizer steps over "
            "train_runtime, in-training evaluation and checkpoints included)"
        ),
    },
)
JAX = Adapter(
    "jax",
    _FW + "jax_loop",
    ("jax",),
    {
        "step": (
            "a jax.jit function whose trace takes a gradient (jax.grad, value_and_grad, vjp): "
            "one step per call"
        ),
        "evaluation": (
            "other jitted functions called between training steps (after a sync with the "
            "last step's outputs)"
        ),
        "compile": "JAX compile events (jax.monitoring)",
        "batch": "the leading dimension of the step's first array argument it does not give back",
    },
)
ADAPTERS = (KERAS, PYTORCH, LIGHTNING, TRANSFORMERS, JAX)


def by_name(name: str) -> Adapter | None:
    return next((a for a in ADAPTERS if a.name == name), None)


def import_patches(adapters=ADAPTERS) -> dict:
    """Trigger module name -> patch(module): the adapter's module is imported at that moment."""
    patches: dict = {}
    for adapter in adapters:
        for trigger in adapter.triggers:
            patches[trigger] = _lazy(adapter, trigger)
    return patches


class PatchAfterImport(importlib.abc.MetaPathFinder):
    """Find a module normally, then patch it once it has executed."""

    def __init__(self, patches: dict):
        self.patches = patches  # module name -> function(module)

    def find_spec(self, name, path=None, target=None):
        patch = self.patches.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


_ARMED: list[str] = []  # adapters whose framework this process imported, in that order


def armed() -> list[str]:
    return list(_ARMED)


def _lazy(adapter: Adapter, trigger: str):
    def patch(module) -> None:
        from scaldiag.collect.frameworks.guard import attempt, say

        found = attempt(
            lambda: importlib.import_module(adapter.module).patches().get(trigger),
            lambda why: say(f"no {adapter.name} adapter ({why})"),
        )
        if found is not None:
            found(module)
            if adapter.name not in _ARMED:
                _ARMED.append(adapter.name)

    return patch


def arm(adapters=ADAPTERS) -> Callable[[], list[str]]:
    """Arm ``adapters`` in a process already running (``scaldiag.capture``, a callback the user
    made): the import hook for the frameworks still to come, and each patch applied at once to a
    trigger module the process imported already, in the order it imported them (as the hook would
    have met them). Each adapter module's ``reset()``, where it has one, first: a capture before
    this one left its state finished. Returns ``disarm()``: the hook removed, every patch taken
    back (``guard.undo_since``), the adapters armed before as they were; it gives what could not
    be taken back."""
    from scaldiag.collect.frameworks import guard

    for adapter in adapters:
        module = sys.modules.get(adapter.module)
        reset = getattr(module, "reset", None)
        if reset is not None:
            guard.attempt(reset, lambda why, n=adapter.name: guard.say(f"{n} adapter: {why}"))
    mark, before = guard.undo_mark(), list(_ARMED)
    _ARMED.clear()
    patches = import_patches(adapters)
    finder = PatchAfterImport(patches)
    sys.meta_path.insert(0, finder)
    for name in [n for n in list(sys.modules) if n in patches]:
        patches[name](sys.modules[name])

    def disarm() -> list[str]:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        failed = guard.undo_since(mark)
        _ARMED[:] = before
        return failed

    return disarm


def finish() -> None:
    """The script ended (bootstrap's ``finally``): each armed adapter whose module has a ``finish``
    closes its run (the torch capture, the JAX loop), in the order they were armed."""
    from scaldiag.collect.frameworks.guard import attempt, say

    for name in armed():
        module = importlib.import_module(by_name(name).module)
        end = getattr(module, "finish", None)
        if end is not None:
            attempt(end, lambda why, n=name: say(f"could not finish the {n} capture ({why})"))


def evidence_facts(names: list[str]) -> dict:
    """What training.json says of the loop: the adapters that followed it, their evidence, and
    what none of them knows (the generic fallback's gaps)."""
    armed = [a for a in (by_name(n) for n in names) if a is not None]
    known: dict[str, str] = {}
    for adapter in armed:  # a later, more specific adapter's word wins (Lightning over torch)
        known.update({k: v for k, v in adapter.evidence.items() if v})
    return {
        "loop_adapters": [a.name for a in armed],
        "loop_evidence": known,
        "loop_evidence_lacking": [what for what in EVIDENCE if what not in known],
    }
