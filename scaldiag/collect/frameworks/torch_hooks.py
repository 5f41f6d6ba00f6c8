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
  first call, reads the batch of a loop without a DataLoader;
- ``torch.cuda.graphs``: ``CUDAGraph.capture_begin``/``capture_end`` tell the
  capture that a stream is being captured (torch.cuda.graph, make_graphed_callables,
  torch.compile's CUDA graph trees): an ``optimizer.step()`` then records its
  kernels into a graph and runs nothing, so it is no step boundary.

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

from scaldiag.collect.env import RUN_DIR_ENV, RUN_ROOT_ENV, TORCHRUN_ENV
from scaldiag.collect.frameworks.guard import on_import, replace, undoable
from scaldiag.collect.frameworks.torch_trace import rank
from scaldiag.collect.torchrun import arguments as torchrun_arguments

OPTIMIZER_MODULE = "torch.optim.optimizer"
DATALOADER_MODULE = "torch.utils.data.dataloader"
MODULE_MODULE = "torch.nn.modules.module"
DYNAMO_CALLBACK_MODULE = "torch._dynamo.callback"
GRAPHS_MODULE = "torch.cuda.graphs"


def patches() -> dict:
    """Module name -> function(module), applied right after the module executes (adapters.py)."""
    return {
        OPTIMIZER_MODULE: _on_optimizer_import,
        DATALOADER_MODULE: _on_dataloader_import,
        MODULE_MODULE: _on_module_import,
        DYNAMO_CALLBACK_MODULE: _on_dynamo_callback_import,
        GRAPHS_MODULE: _on_graphs_import,
    }


def _capture_module():
    from scaldiag.collect.frameworks import torch_capture

    return torch_capture


def _capture():
    return _capture_module().CAPTURE


_safely = on_import("torch")


@_safely
def _on_optimizer_import(module) -> None:
    capture = _capture()
    if (
        capture.compile_sources is None
    ):  # torch._dynamo's import is watched (DYNAMO_CALLBACK_MODULE)
        capture.compile_sources = [_capture_module().COMPILE_SOURCE]
    capture.pre_hook = module.register_optimizer_step_pre_hook(capture.pre_step)
    undoable(capture.pre_hook.remove)  # (removed at the first step too: removing twice is nothing)
    undoable(module.register_optimizer_step_post_hook(capture.post_step).remove)
    # Validation under no_grad alone: torch.autograd.grad_mode is imported by now (not yet when
    # torch.nn's module is), and the mode marks are made.
    grad_mode = sys.modules.get("torch.autograd.grad_mode")
    modes = getattr(capture, "mode_marks", None)
    if grad_mode is not None and modes is not None:
        from scaldiag.collect.frameworks.torch_modes import NoGradMarks

        NoGradMarks(capture, modes).wrap(grad_mode)


@_safely
def _on_dataloader_import(module) -> None:
    from scaldiag.collect.frameworks.try_fixes import patch_dataloader

    patch_dataloader(module)  # scaldiag try's fix, where it set one
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
        if self.__dict__.pop("_scaldiag_fresh", False):
            capture.first_batch_of_pass(
                _loader_of(self),
                getattr(self, "_num_workers", 0),
                getattr(self, "_prefetch_factor", None),
            )
        return batch

    __next__._scaldiag = True
    replace(iterator, "__next__", __next__)
    _wrap_iter(module.DataLoader, capture)


def _loader_of(iterator):
    return getattr(iterator, "_scaldiag_loader", None)


def _wrap_iter(loader_class, capture) -> None:
    """Remember which DataLoader an iterator came from (to measure its input ceiling after
    training); a new pass over the loader the capture follows is a new epoch."""
    original = loader_class.__iter__

    @functools.wraps(original)
    def __iter__(self):
        iterator = original(self)
        try:
            capture.link(iterator, self)
            iterator._scaldiag_fresh = True  # its first batch waits for the pipeline to (re)start
        except Exception:
            pass
        capture.new_iter(self)
        return iterator

    replace(loader_class, "__iter__", __iter__)


@_safely
def _on_dynamo_callback_import(module) -> None:
    _capture().listen_to_compiles(module.callback_handler)


@_safely
def _on_graphs_import(module) -> None:
    capture = _capture()
    graph = module.CUDAGraph
    begin, end = graph.capture_begin, graph.capture_end

    @functools.wraps(begin)
    def capture_begin(self, *args, **kwargs):
        capture.before_graph_capture()  # the profiler must not be on while CUDA captures
        result = begin(self, *args, **kwargs)
        capture.graph_capture_began()  # after: a capture that failed to begin is none
        return result

    @functools.wraps(end)
    def capture_end(self, *args, **kwargs):
        capture.graph_capture_ended()  # before: a capture that fails to end has ended too
        return end(self, *args, **kwargs)

    replace(graph, "capture_begin", capture_begin)
    replace(graph, "capture_end", capture_end)


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
    undoable(handle.remove)
    from scaldiag.collect.frameworks.torch_modes import ModeMarks

    capture.mode_marks = ModeMarks(capture)  # (no_grad blocks: ``_on_optimizer_import``)
    capture.mode_marks.wrap(module.Module)


def finish() -> None:
    """The script ended (bootstrap's ``finally``): close the run if training was captured."""
    if "scaldiag.collect.frameworks.torch_capture" in sys.modules:
        _capture().finish()


def reset() -> None:
    """Before the adapter is armed again in this process (``adapters.arm``): a fresh capture."""
    if "scaldiag.collect.frameworks.torch_capture" in sys.modules:
        _capture().reset()


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
    """Under ``profile --nproc-per-node N``: become ``torchrun --standalone`` running the bootstrap
    per rank.

    torchrun runs in this process (``torch.distributed.run.main``), as ``python -m
    torch.distributed.run`` would, so that its end is told as a script's would be (torchrun itself
    exits 1 whatever happened): a rank's exit code N (the first rank to fail) is this process' exit
    code; a signal that ended torchrun (SIGINT, SIGTERM: it sends the same to every rank) ends this
    process with that signal; a rank killed by signal N ends it with N. A rank that could not say
    how it ended (killed: its ``finally:`` never ran) has its ``rank<R>/run.json`` finalised here,
    from the exit code torchrun saw. Never returns.
    """
    nproc = os.environ.pop(TORCHRUN_ENV, "")
    if not nproc or "RANK" in os.environ:
        return
    if importlib.util.find_spec("torch") is None:
        raise SystemExit(
            "scaldiag: --nproc-per-node needs PyTorch (torchrun), which this Python cannot import"
        )
    sys.stdout.flush()
    sys.stderr.flush()
    argv = torchrun_arguments(script, args, int(nproc))
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    exits: dict[
        int, int
    ] = {}  # local rank (= rank: one node) -> its exit code, as torchrun reaped it
    _watch_rank_exits(exits)
    sys.argv = [torchrun.__file__, *argv]  # as `python -m torch.distributed.run` sees it
    try:
        torchrun.main(argv)
        code, sig = 0, None
    except ChildFailedError as exc:
        import traceback

        # torchrun's own report of the failed ranks, as it prints it (from its frames on)
        traceback.print_exception(
            type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None
        )
        for r, failure in exc.failures.items():
            exits.setdefault(r, failure.exitcode)
        code, sig = exc.get_first_failure()[1].exitcode, None
    except SignalException as exc:
        code, sig = -int(exc.sigval), int(exc.sigval)
    _finalise_ranks(exits, int(nproc), sig)
    sys.stdout.flush()
    sys.stderr.flush()
    if code < 0:
        _die_by(-code)
    # torchrun's threads (its store, its watchdog) are not waited for
    os._exit(code if 0 <= code < 256 else 1)


def _die_by(sig: int) -> None:
    """End this process with signal ``sig``, as a script killed by it ends (the launcher reports 128
    + sig)."""
    import signal

    try:
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
    except (OSError, ValueError):
        pass
    os._exit(128 + sig)


def _watch_rank_exits(exits: dict[int, int]) -> None:
    """Keep each rank's exit code when torchrun closes its workers (after their end, or its
    SIGKILL)."""
    try:
        from torch.distributed.elastic.multiprocessing import api
    except Exception:
        return
    for context in (
        getattr(api, "SubprocessContext", None),
        getattr(api, "MultiprocessContext", None),
    ):
        close = getattr(context, "_close", None)
        if close is None or getattr(close, "_scaldiag", False):
            continue

        def _close(self, *a, _original=close, **k):
            try:
                return _original(self, *a, **k)
            finally:
                try:
                    for local_rank, handler in (
                        getattr(self, "subprocess_handlers", None) or {}
                    ).items():
                        if handler.proc.returncode is not None:
                            exits[int(local_rank)] = handler.proc.returncode
                except Exception:
                    pass  # an unknown torch version: the ranks' own records stand

        _close._scaldiag = True
        context._close = _close


def _finalise_ranks(exits: dict[int, int], nproc: int, sig: int | None) -> None:
    """``rank<R>/run.json`` still 'running' (the rank was killed): its end, from what torchrun
    saw."""
    import time

    from scaldiag.record import run_json
    from scaldiag.record.run_json import FAILED, FINISHED, INTERRUPTED, RUNNING
    from scaldiag.record.rundir import RUN_JSON

    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        return
    for r in range(1, nproc):
        rank_dir = Path(run_dir) / f"rank{r}"
        try:
            code = exits.get(r)
            if code is None:
                status = INTERRUPTED if sig else FAILED
            elif code < 0:
                status = INTERRUPTED if sig else f"killed by signal {-code}"
            else:
                status = FINISHED if code == 0 else FAILED
            fields = dict(
                ended_ns=time.time_ns(),
                exit_code=code,
                status=status,
                signal=_signal_name(-code) if code is not None and code < 0 else None,
                # torchrun's, sent on to every rank
                signals_received=[_signal_name(sig)] if sig else None,
            )
            # the rank that said how it ended (bootstrap.py) is left as it said
            run_json.update(
                rank_dir,
                lambda run, fields=fields: run.replace(**fields) if run.status == RUNNING else None,
            )
        except Exception as exc:  # the record only: never the job's exit code
            print(
                f"scaldiag: rank {r}: cannot finalise its {RUN_JSON} ({type(exc).__name__}: {exc})",
                file=sys.stderr,
            )


def _signal_name(sig: int) -> str:
    import signal

    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def rank_outcome(exc: BaseException | None) -> dict:
    """How the script ended in this process, as the launcher words it: run.json's status,
    exit_code, signal and error, as RunJson's fields."""
    from scaldiag.record.run_json import FAILED, FINISHED, INTERRUPTED

    if exc is None:
        return dict(status=FINISHED, exit_code=0)
    if isinstance(exc, SystemExit):
        code = exc.code
        code = (
            0
            if code is None
            else (
                code % 256
                if isinstance(code, int) and not isinstance(code, bool)
                else int(code)
                if isinstance(code, bool)
                else 1
            )
        )
        return dict(status=FINISHED if code == 0 else FAILED, exit_code=code)
    if isinstance(exc, KeyboardInterrupt):  # Python ends by SIGINT on an uncaught KeyboardInterrupt
        return dict(status=INTERRUPTED, exit_code=-2, signal="SIGINT")
    return dict(status=FAILED, exit_code=1, error=type(exc).__name__)


def record_rank_outcome(outcome: dict) -> None:
    """In a torchrun rank R > 0, after the capture closed its run: how the script really ended (the
    capture closes a run as 'finished'; the launcher finalises rank 0's, the job's)."""
    import time

    from scaldiag.record import run_json

    root, run_dir = os.environ.get(RUN_ROOT_ENV), os.environ.get(RUN_DIR_ENV)
    if not root or not run_dir or Path(run_dir) == Path(root):
        return
    try:
        # a rank whose capture never began has no record to correct
        run_json.update(
            Path(run_dir),
            lambda run: None if run.is_empty() else run.replace(ended_ns=time.time_ns(), **outcome),
        )
    except Exception as exc:
        print(
            f"scaldiag: cannot write how rank {rank()} ended ({type(exc).__name__}: {exc})",
            file=sys.stderr,
        )
