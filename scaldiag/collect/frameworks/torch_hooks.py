"""The PyTorch adapter of ``scaldiag profile``: patches applied once torch's modules are imported.

- ``torch.optim.optimizer``: global step pre/post hooks drive the capture
  (``torch_capture.CAPTURE``): one step per ``optimizer.step()``;
- ``torch.utils.data.dataloader``: ``_BaseDataLoaderIter.__next__`` tells the
  capture about each fetch (and the end of an epoch's data: StopIteration)
  and, while the profiler window is open, runs inside
  ``record_function("scaldiag_input")``; ``DataLoader.__iter__`` tells it of
  each new pass (an epoch);
- ``torch._dynamo.callback``: compile start/end callbacks (``compile`` marks).
  Only when the program imports torch._dynamo (eager PyTorch does at its
  first ``optimizer.step()``): we never import it;
- ``torch.nn.modules.module``: a global forward pre-hook, removed at its
  first call, reads the batch of a loop without a DataLoader.

Under ``scaldiag profile --nproc-per-node N`` (or ``--torchrun``) the child
process re-executes itself under ``torchrun --standalone`` (``exec_torchrun``);
each rank then runs the bootstrap, rank 0 recording into the run directory
and rank R > 0 into ``RUN_DIR/rank<R>`` (``enter_rank_dir``). torch is never
imported here before the program imports it.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path

from scaldiag.collect.env import RUN_DIR_ENV
from scaldiag.collect.frameworks.torch_trace import RUN_ROOT_ENV, rank

TORCHRUN_ENV = "SCALDIAG_TORCHRUN"  # nproc-per-node: the child re-runs the bootstrap under torchrun
OPTIMIZER_MODULE = "torch.optim.optimizer"
DATALOADER_MODULE = "torch.utils.data.dataloader"
MODULE_MODULE = "torch.nn.modules.module"
DYNAMO_CALLBACK_MODULE = "torch._dynamo.callback"


def import_patches() -> dict:
    """Module name -> function(module), applied right after the module executes."""
    return {OPTIMIZER_MODULE: _on_optimizer_import, DATALOADER_MODULE: _on_dataloader_import,
            MODULE_MODULE: _on_module_import, DYNAMO_CALLBACK_MODULE: _on_dynamo_callback_import}


def _capture_module():
    from scaldiag.collect.frameworks import torch_capture

    return torch_capture


def _capture():
    return _capture_module().CAPTURE


def _safely(patch):
    @functools.wraps(patch)
    def guarded(module) -> None:
        try:
            patch(module)
        except Exception as exc:  # an unknown torch version: no capture, the script runs as it would
            print(f"scaldiag: cannot hook {module.__name__} ({type(exc).__name__}: {exc})", file=sys.stderr)
    return guarded


@_safely
def _on_optimizer_import(module) -> None:
    capture = _capture()
    if capture.compile_sources is None:  # torch._dynamo's import is watched (DYNAMO_CALLBACK_MODULE)
        capture.compile_sources = [_capture_module().COMPILE_SOURCE]
    capture.pre_hook = module.register_optimizer_step_pre_hook(capture.pre_step)
    module.register_optimizer_step_post_hook(capture.post_step)


@_safely
def _on_dataloader_import(module) -> None:
    iterator = module._BaseDataLoaderIter
    original = iterator.__next__
    if getattr(original, "_scaldiag", False):
        return
    capture = _capture()

    @functools.wraps(original)
    def __next__(self):
        capture.before_fetch(_loader_of(self))
        try:
            if capture.tracing:
                from torch.profiler import record_function

                from scaldiag.collect.frameworks.input_marks import INPUT_MARKER

                with record_function(INPUT_MARKER):
                    batch = original(self)
            else:
                batch = original(self)
        except StopIteration:
            capture.exhausted(_loader_of(self))
            raise
        capture.after_fetch(batch)
        return batch

    __next__._scaldiag = True
    iterator.__next__ = __next__
    _wrap_iter(module.DataLoader, capture)


def _loader_of(iterator):
    return getattr(iterator, "_scaldiag_loader", None)


def _wrap_iter(loader_class, capture) -> None:
    """Remember which DataLoader an iterator came from (to measure its input ceiling after training); a
    new pass over the loader the capture follows is a new epoch."""
    original = loader_class.__iter__

    @functools.wraps(original)
    def __iter__(self):
        iterator = original(self)
        try:
            iterator._scaldiag_loader = self
        except Exception:
            pass
        capture.new_iter(self)
        return iterator

    loader_class.__iter__ = __iter__


@_safely
def _on_dynamo_callback_import(module) -> None:
    _capture().listen_to_compiles(module.callback_handler)


@_safely
def _on_module_import(module) -> None:
    capture = _capture()
    handle = None

    def first_forward(mod, inputs):
        # Never raises into the user's forward; removed once the batch is known, or on a failure.
        try:
            known = capture.first_forward(inputs)
        except Exception:
            known = True
        if known:
            handle.remove()

    handle = module.register_module_forward_pre_hook(first_forward)
    from scaldiag.collect.frameworks.torch_modes import ModeMarks

    ModeMarks(capture).wrap(module.Module)


def finish() -> None:
    """The script ended (bootstrap's ``finally``): close the run if training was captured."""
    if "scaldiag.collect.frameworks.torch_capture" in sys.modules:
        _capture().finish()


def enter_rank_dir() -> None:
    """In a torchrun worker: rank R > 0 records into RUN_DIR/rank<R>; the job's root is RUN_ROOT."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir or "RANK" not in os.environ or os.environ.get(RUN_ROOT_ENV):
        return
    os.environ[RUN_ROOT_ENV] = run_dir
    r = rank()
    if r > 0:
        rank_dir = Path(run_dir) / f"rank{r}"
        try:
            rank_dir.mkdir(exist_ok=True)
            os.environ[RUN_DIR_ENV] = str(rank_dir)
        except OSError as exc:
            print(f"scaldiag: rank {r} records nothing ({exc.strerror or exc})", file=sys.stderr)
            os.environ.pop(RUN_DIR_ENV, None)


def exec_torchrun(script: str, args: list[str]) -> None:
    """Under ``profile --nproc-per-node N``: become ``torchrun --standalone`` running the bootstrap per rank."""
    nproc = os.environ.pop(TORCHRUN_ENV, "")
    if not nproc or "RANK" in os.environ:
        return
    if importlib.util.find_spec("torch") is None:
        raise SystemExit("scaldiag: --nproc-per-node needs PyTorch (torchrun), which this Python cannot import")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", "--standalone",
                              f"--nproc-per-node={nproc}", "-m", "scaldiag.collect.bootstrap", script, *args])
