"""Capture of an unmodified PyTorch training loop: steps from the optimizer, input from the
DataLoader.

A step is one pass of the loop, whichever optimizers it steps: one ``optimizer.step()`` of the
*lead* optimizer (the first that steps, until another takes over: a new phase's or a new fold's,
``torch_optimizers``); a second optimizer stepping in turn in the same pass (a GAN's) adds no step.
A step ends when the lead's call returns (``torch.optim`` global post-hook) and the next begins
there, so a step spans the next batch's fetch, forward, backward and update, and the step time is
the period the user's throughput sees. The first step begins at the first DataLoader fetch or the
first ``optimizer.step()``, whichever comes first. The step still open when the script ends is no
step (no update ended it) and is not recorded.

DataLoader fetches (``_BaseDataLoaderIter.__next__``) are annotated
``scaldiag_input`` while the profiler window is open; the first batch's
leading dimension is the per-replica batch, times the world size the global
batch. Nothing here raises into the training: a failure disables capture
and says so once.

Evidence of what a step was, for the analysis (docs/pytorch.md):

- on CUDA, the device's own step times (``torch_device_clock``: an event on
  the stream at each step boundary, read without waiting);
- ``compile`` marks from torch._dynamo's compile callbacks (begin and end of
  each outermost compile), listened to from the moment the program imports
  ``torch._dynamo``;
- epochs: each new ``iter()`` of the followed DataLoader begins an epoch
  (``epoch_begin``), its exhaustion ends one (``epoch_end``); where a new
  optimizer takes the lead over batches of another DataLoader (a new fold's),
  that loader is followed from its pass's ``iter()``;
- ``optimizer`` marks: each optimizer's first step, whether it leads or
  steps in turn, and the lead's changes (phases, folds).
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
import time
import weakref
from pathlib import Path

from scaldiag.collect.env import GLOBAL_BATCH_ENV, RUN_DIR_ENV
from scaldiag.collect.frameworks import (
    device_memory,
    input_ceiling,
    knob_facts,
    torch_device_clock,
    torch_optimizers,
    torch_trace,
)
from scaldiag.collect.frameworks.guard import attempt, replace, undoable
from scaldiag.collect.frameworks.torch_trace import BACKEND, rank
from scaldiag.record.rundir import TRAINING_JSON, update_json

PROCESS_DIR_PREFIX = "process"  # RUN_DIR/process<PID>: a forked process's own record
HOW_TO_GIVE_BATCH = "give it with `scaldiag profile --global-batch N`"
COMPILE_SOURCE = "torch._dynamo"  # compile marks' source, and training.json's compile_evidence


def world_size() -> int:
    value = os.environ.get("WORLD_SIZE", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size())
    except Exception:
        pass
    return 1


def versions() -> dict[str, str]:
    found = {}
    try:
        import torch

        found["torch"] = torch.__version__
        if torch.version.cuda:
            found["cuda"] = torch.version.cuda
    except Exception:
        pass
    try:
        found.setdefault("torch", importlib.metadata.version("torch"))
    except importlib.metadata.PackageNotFoundError:
        pass
    return found


def parameter_bytes(optimizer) -> int | None:
    """Bytes of the parameters the optimizer updates: what a data-parallel step all-reduces (as
    gradients)."""
    try:
        return int(
            sum(
                p.numel() * p.element_size()
                for group in optimizer.param_groups
                for p in group["params"]
                if getattr(p, "requires_grad", True)
            )
        )
    except Exception:
        return None


class TorchCapture:
    """One process's capture, driven by the hooks of ``torch_hooks``."""

    def __init__(self):
        self.session = None
        self.failed: str | None = None
        self.optimizer = None
        self.loader = None
        self._linked: weakref.WeakSet = weakref.WeakSet()  # iterators ``link`` told their loader
        self.batch: tuple[int, str] | None = None
        self.forward_batch: int | None = None
        self.finished = False
        # the optimizer pre-step hook's handle (torch_hooks), removed once it has done its work
        self.pre_hook = None
        self._settled = False  # the first step's end has been seen (see post_step)
        # the step hook: the recorder's ``begin``, or ``_begin_timed`` with the device clock
        self._begin = None
        self._recorder_begin = None
        self.clock: torch_device_clock.DeviceClock | None = (
            None  # on CUDA, from the first step's end
        )
        self._clock_writer = None
        self.epoch = (
            0  # epochs of the followed DataLoader (``self.loader``): one per iter() after the first
        )
        self._epochs_open = (
            True  # False once training is over (the input ceiling iterates the loader again)
        )
        # Compiles (torch._dynamo): None where nobody listens (the scaldiag.torch API); torch_hooks
        # arms it.
        self.compile_sources: list[str] | None = None
        self.compile_error: str | None = None
        self._compile_begin_ns: int | None = None
        self._early_compiles: list[tuple[int, int]] = []  # compiles before the session started
        # A loop adapter (Lightning, transformers) that says itself where epochs and evaluation are:
        # the DataLoader passes and mode switches are then not read as such (``owned_by``).
        self.loop_owner: str | None = None
        self.aside = (
            0  # depth of the adapter's loops that are not training (validation, sanity check)
        )
        # CUDA graph captures under way (torch_hooks): a step inside one runs nothing
        self.graph_captures = 0
        self.graph_steps = 0  # optimizer steps recorded into CUDA graphs
        # In a process forked from the script's (a multiprocessing pool's worker): the parent's
        # pid. Its training records into RUN_DIR/process<PID> (``forked``).
        self.forked_from: int | None = None
        # Every optimizer that stepped, and which one's steps end steps (the lead: ``optimizer``).
        self.optimizers = torch_optimizers.Optimizers(parameter_bytes)
        self._fetched = False  # a batch was fetched since the last step's end
        self._fetched_from = None  # the loader of the last fetch
        self.fetches = 0  # batches fetched so far
        self._passes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loader -> its
        # latest pass's iter() (ns): where a loader followed from a lead's change began its epoch

    def reset(self) -> None:
        """A capture of its own again (``scaldiag.capture``'s next block, a callback's next fit):
        the one before finished; its hooks were taken back (``guard.undo_since``)."""
        self.__init__()
        self.__dict__.pop("mode_marks", None)  # (made again when torch.nn's module is patched)

    @property
    def tracing(self) -> bool:
        window = self.session.window if self.session is not None else None
        return bool(window is not None and window.active)

    def _guard(self, action):
        if self.failed or self.finished:
            return None
        return attempt(action, self._step_failed)

    # --- hooks --------------------------------------------------------------- Every batch and
    # every step pays for these: past the first ones, each is a test or two and, at a step's end,
    # the recorder's ``begin`` (whose failures go to ``_step_failed``, not into the loop).
    def before_fetch(self, loader) -> None:
        self._fetched, self._fetched_from = True, loader
        self.fetches += 1  # (torch_modes.NoGradMarks: batches fetched inside a no_grad block)
        if (self.session is None or self.loader is None) and not self.aside:
            self._guard(lambda: self._start(loader=loader))

    def after_fetch(self, batch) -> None:
        if self.batch is None and not self.failed and not self.aside:
            self._guard(
                lambda: self._learn_batch(
                    input_ceiling.batch_size(batch), "the first batch the DataLoader gave"
                )
            )

    def pre_step(self, optimizer, args=None, kwargs=None) -> None:
        """torch.optim's global pre-step hook: the first optimizer to step is the one whose steps
        count."""
        if self.session is None or self.optimizer is None:
            self._guard(lambda: self._start(optimizer=optimizer))

    def post_step(self, optimizer, args=None, kwargs=None) -> None:
        """torch.optim's global post-step hook: the lead's step ends a step, the next begins."""
        if optimizer is not self.optimizer:
            if self._settled and not self.graph_captures:
                self._guard(lambda: self._other_step(optimizer))
            return
        if self.failed or self.finished:
            return
        if self.graph_captures:
            # The step was recorded into a CUDA graph, not run: no boundary (and no device event
            # on a stream while another captures, which CUDA may fold into the capture).
            self.graph_steps += 1
            return
        if not self._settled:
            self._guard(self._first_step_ended)
            if self.failed:
                return
        self._fetched = False
        self._begin()

    def _other_step(self, optimizer) -> None:
        """Another optimizer stepped: in turn with the lead (no step), or the lead from here."""
        recorder = self.session.recorder
        leads, facts = self.optimizers.other_step(
            optimizer,
            recorder.step,
            self._fetched,
            lambda o: torch_optimizers.inside_another_step(o, sys._getframe()),
        )
        if facts is not None:
            recorder.mark("optimizer", **facts)
        if leads:
            self.optimizer = optimizer  # (the one before is the script's to free)
            self._follow_loader()
            self._fetched = False
            self._begin()

    def _follow_loader(self) -> None:
        """The new lead's batches come from another DataLoader (a new fold's): follow it, its
        current pass an epoch from its ``iter()`` (the step open since the last lead's step ends
        in it, and the time before that ``iter()`` is the epochs' edge)."""
        loader = self._fetched_from
        if loader is None or loader is self.loader or self.loop_owner is not None:
            return
        if not self._epochs_open or self.loader is None:
            return
        same_data = getattr(loader, "dataset", None) is getattr(self.loader, "dataset", self)
        self.loader = loader
        if not same_data:  # (a loader over the same data: its iter() already began an epoch)
            self._epoch_begins(self.epoch + 1, self._passes.get(loader))

    def _first_step_ended(self) -> None:
        self._settled = True
        self.session.recorder.mark(
            "optimizer", **self.optimizers.first_lead(self.optimizer, self.session.recorder.step)
        )
        if (
            self.batch is None and self.forward_batch
        ):  # the forward hook has run by now, if it ever will
            self._learn_batch(self.forward_batch, "the first forward call's input")
        if (
            self.pre_hook is not None
        ):  # its work is done (removed here: torch iterates the pre hooks live)
            self.pre_hook.remove()
            self.pre_hook = None
        self._start_clock()

    def before_graph_capture(self) -> None:
        """A CUDA graph capture is about to begin: an open trace window closes first, for good.
        With the profiler on through a capture and the graph's replays, the script never exited
        after its training (an H100 and an H200, torch 2.11, CUDA 13.0, 2026-12-06: 58 s and more,
        with or without CUPTI's teardown, pytorch/pytorch#135003). With the window closed here
        the same script exits (an H100; the check: ``git show
        6a74f68:bench/gpu/check_graph_twin.sh``). A window closed before the capture is a shorter
        trace, not a hung script. A capture before the window opens leaves it be."""
        if self.tracing:
            attempt(self.session.recorder.stop_trace, self._step_failed)

    def graph_capture_began(self) -> None:
        self.graph_captures += 1
        torch_trace.graph_captured()  # the window's stop then leaves CUPTI set up

    def graph_capture_ended(self) -> None:
        self.graph_captures = max(0, self.graph_captures - 1)

    # --- the device clock (CUDA) ---------------------------------------------
    def _start_clock(self) -> None:
        """On CUDA, from the step after the first: an event at each boundary
        (``torch_device_clock``)."""
        try:
            made = torch_device_clock.cuda_clock(
                self.session.run_dir, self.optimizer, self.session.recorder.step + 1
            )
        except Exception as exc:
            self.session.describe(device_clock_error=f"{type(exc).__name__}: {exc}")
            return
        if made is not None:
            self.clock, self._clock_writer = made
            self._begin = self._begin_timed
            self.session.describe(device_clock=torch_device_clock.DEVICE_CLOCK)

    def _begin_timed(self) -> None:
        """The step hook with the device clock: the host's begin, then the boundary's event."""
        self._recorder_begin()
        try:
            self.clock.tick()
        except Exception as exc:
            self._clock_failed(exc)

    def _clock_failed(self, exc: Exception) -> None:
        """The device clock stops (what it read stays); the host's steps go on."""
        self._begin = self._recorder_begin
        self.clock = None
        reason = f"{type(exc).__name__}: {exc}"
        print(
            f"scaldiag: device step times stopped, training continues ({reason})", file=sys.stderr
        )
        try:
            self.session.describe(device_clock_error=reason)
        except Exception:
            pass

    def _finish_clock(self) -> None:
        """Training is over: the clock waits once for the last boundary and writes what is left."""
        clock, writer, self.clock = self.clock, self._clock_writer, None
        try:
            if clock is not None:
                clock.finish()
        except Exception as exc:
            self.session.describe(device_clock_error=f"at the end: {type(exc).__name__}: {exc}")
        finally:
            if writer is not None:
                writer.close()

    # --- epochs: the followed DataLoader's iterators -------------------------
    def new_iter(self, loader) -> None:
        """``DataLoader.__iter__`` returned: another pass over the followed loader begins an epoch
        (a loader made again over the same dataset counts as the same one)."""
        followed = self.loader
        if followed is None or self.session is None or self.failed or not self._epochs_open:
            return
        if loader is not followed:
            try:  # a fold's loader, maybe: ``_follow_loader`` (never raises into the iter())
                self._passes[loader] = time.time_ns()
            except Exception:
                pass
        if self.loop_owner is not None:  # the adapter marks epochs (``adapter_epoch``)
            return
        if loader is not followed and getattr(loader, "dataset", None) is not getattr(
            followed, "dataset", followed
        ):
            return
        self.loader = loader
        self._guard(lambda: self._epoch_begins(self.epoch + 1))

    def first_batch_of_pass(self, loader, workers: int, prefetch_factor: int | None = None) -> None:
        """A new pass's first batch from worker processes: until it arrived the workers were
        starting (or, persistent, restarting the pass's prefetch). That wait is the epoch's edge,
        as the iterator starting is: ``input_ready`` (recorded_steps), the step begins there.

        ``in_flight``: the batches the iterator keeps asked of its workers (torch primes
        ``prefetch_factor x num_workers`` indices when a pass begins, and asks one more per batch
        taken): while the loop is slow (warm-up, the profiler window) the workers fill that
        buffer, and the steps that drain it do not run at the pipeline's rate (recorded_steps
        ``PREFETCHED``)."""
        if (
            workers > 0
            and loader is self.loader
            and self.session is not None
            and not self.failed
            and not self.finished
            and self._epochs_open
            and not self.aside
        ):
            self._guard(
                lambda: self.session.recorder.mark(
                    "input_ready",
                    workers=int(workers),
                    source="DataLoader: a new iterator's first batch",
                    **({"in_flight": workers * int(prefetch_factor)} if prefetch_factor else {}),
                )
            )

    def exhausted(self, loader) -> None:
        """The followed loader's iterator raised StopIteration: its epoch's data has run out."""
        if (
            loader is self.loader
            and self.session is not None
            and not self.failed
            and self._epochs_open
            and self.loop_owner is None
        ):
            self._guard(lambda: self.session.recorder.mark("epoch_end", epoch=self.epoch))

    # --- a loop adapter's evidence (lightning_adapter, hf_adapter) ----------
    def owned_by(self, adapter: str) -> None:
        """From here a loop adapter says where epochs and evaluation are (its framework's
        callbacks)."""
        self.loop_owner = adapter
        if self.session is not None:
            from scaldiag.collect.frameworks import adapters

            self.adapter_facts(**adapters.evidence_facts(["pytorch", adapter]))

    def adapter_start(self) -> None:
        """The adapter's loop begins (Lightning's on_fit_start): the run starts here, before its
        first step, so that what comes before the first step (a sanity check) is marked too."""
        if self.session is None:
            self._guard(self._start)

    def adapter_epoch(self, epoch: int, begins: bool) -> None:
        if self.session is not None and not self.failed and not self.finished and self._epochs_open:
            if begins:
                self._guard(lambda: self._epoch_begins(epoch))
            else:
                self._guard(lambda: self.session.recorder.mark("epoch_end", epoch=epoch))

    def adapter_part(self, kind: str, begins: bool, source: str) -> None:
        """A part of the loop that is not a training step (``kind``: validation, sanity check,
        evaluation), written as the marks Keras's validation writes: ``test_begin``/``test_end``."""
        self.aside = self.aside + 1 if begins else max(0, self.aside - 1)
        if self.session is not None and not self.failed and not self.finished:
            mark = "test_begin" if begins else "test_end"
            self._guard(lambda: self.session.recorder.mark(mark, kind=kind, source=source))

    def adapter_mark(self, mark: str, **fields) -> None:
        if self.session is not None and not self.failed and not self.finished:
            self._guard(lambda: self.session.recorder.mark(mark, **fields))

    def adapter_facts(self, **facts) -> None:
        if self.session is not None and not self.failed:
            self._guard(lambda: self.session.describe(**facts))

    def _epoch_begins(self, epoch: int, t_ns: int | None = None) -> None:
        recorder = self.session.recorder
        self.epoch = recorder.epoch = (
            epoch  # the open step ends in this epoch: the edge is its first step
        )
        recorder.mark("epoch_begin", epoch=epoch, **({"t_ns": t_ns} if t_ns else {}))

    # --- compiles: torch._dynamo's callbacks ---------------------------------
    def listen_to_compiles(self, handler) -> None:
        """Called once torch._dynamo.callback is imported (``torch_hooks``): its start and end
        callbacks time each outermost compile. ``torch._dynamo.reset()`` clears the callbacks: we
        register again after it.
        """
        try:

            def listen():
                handler.register_start_callback(self.compile_started)
                handler.register_end_callback(self.compile_ended)

            clear = handler.clear

            def clear_and_listen(*args, **kwargs):
                clear(*args, **kwargs)
                listen()

            listen()
            replace(handler, "clear", clear_and_listen)
            undoable(lambda: _stop_listening(handler, self))
            self.compile_sources = [COMPILE_SOURCE]
        except Exception as exc:
            self.compile_sources, self.compile_error = [], f"{type(exc).__name__}: {exc}"
        if self.session is not None:
            self._guard(lambda: self.session.describe(**self._compile_facts()))

    def compile_started(self, *args) -> None:
        """torch._dynamo: an outermost compile begins (torch >= 2.7 passes CallbackArgs, earlier
        ones nothing)."""
        self._compile_begin_ns = time.time_ns()

    def compile_ended(self, *args) -> None:
        end, begin, self._compile_begin_ns = time.time_ns(), self._compile_begin_ns, None
        if begin is None or self.failed or self.finished:
            return
        if (
            self.session is None
        ):  # compiled before the first step began: written when the session starts
            self._early_compiles.append((begin, end))
        else:
            self._guard(
                lambda: self.session.recorder.mark(
                    "compile", t_ns=begin, end_ns=end, source=COMPILE_SOURCE
                )
            )

    def _compile_facts(self) -> dict:
        if self.compile_sources is None:
            return {}
        facts = {"compile_evidence": self.compile_sources}
        if self.compile_error:
            facts["compile_evidence_error"] = self.compile_error
        return facts

    def _step_failed(self, reason: str) -> None:
        """Capture is off from here on (a hook's failure, or the recorder's: ``on_error``)."""
        if not self.failed:
            self.failed = reason
            from scaldiag.collect.session import capture_failed

            capture_failed(self.session, reason)

    def first_forward(self, inputs) -> bool:
        """A module call's first tensor argument: its leading dimension is the batch. True once
        known (a symbolic call, as Keras on torch makes to build a model, has a batch of None: not
        yet).
        """
        tensor = (
            next((a for a in inputs if len(getattr(a, "shape", ()) or ()) > 0), None)
            if inputs
            else None
        )
        first = tensor.shape[0] if tensor is not None else None
        if self.forward_batch is None and isinstance(first, int) and first > 0:
            self.forward_batch = int(first)
        return self.forward_batch is not None

    # --- what they do --------------------------------------------------------
    def _start(self, loader=None, optimizer=None) -> None:
        if optimizer is not None and self.optimizer is None:
            self.optimizer = optimizer
            if self.session is not None:
                self.session.describe(parameter_bytes=parameter_bytes(optimizer))
        follow = loader is not None and self.loader is None
        mark_epoch = follow and self.loop_owner is None  # else the loop's adapter marks epochs
        if follow:
            self.loader = loader
        if self.session is not None:
            if (
                follow
            ):  # the DataLoader's own arguments: what the advice may call in place (knob_facts)
                self.session.describe(**knob_facts.torch_facts(loader))
            if mark_epoch:  # a loop that stepped before its first fetch: epoch 0's data begins here
                self.session.recorder.mark("epoch_begin", epoch=self.epoch)
            return
        from scaldiag.collect.session import Session

        launched = os.environ.get(RUN_DIR_ENV)
        # Ranks > 0 of a torchrun job record into RUN_ROOT/rank<R>; only the launcher samples.
        if self.forked_from is not None:
            self.session = self._child_session(Session, launched)
        else:
            self.session = Session(backend=BACKEND, sample=False if launched else None)
        recorder = self.session.recorder
        recorder.on_error = self._step_failed
        self._begin = self._recorder_begin = recorder.begin
        for begin, end in self._early_compiles:  # before fit_begin, in the order they ran
            recorder.mark("compile", t_ns=begin, end_ns=end, source=COMPILE_SOURCE)
        self._early_compiles = []
        recorder.mark("fit_begin")
        if mark_epoch:
            recorder.mark("epoch_begin", epoch=self.epoch)
        from scaldiag.collect.frameworks import adapters

        self.session.describe(
            **adapters.evidence_facts(["pytorch", *filter(None, [self.loop_owner])])
        )
        self.session.describe(
            framework={"name": "pytorch", "backend": BACKEND, "versions": versions()},
            replicas=world_size(),
            steps_per_execution=1,
            rank=rank(),
            step_source="torch.optim global step hooks: a step ends at optimizer.step()",
            parameter_bytes=parameter_bytes(optimizer) if optimizer is not None else None,
            **self._batch_facts(),
            **self._compile_facts(),
            **knob_facts.torch_facts(self.loader),
        )
        recorder.begin()

    def _learn_batch(self, size: int, source: str) -> None:
        if self.batch is not None or not size:
            return
        self.batch = (size, source)
        if self.session is not None:
            self.session.describe(**self._batch_facts())

    def _batch_facts(self) -> dict:
        replicas = world_size()
        value = os.environ.get(GLOBAL_BATCH_ENV, "")
        if value.isdigit() and int(value) > 0:
            batch = int(value)
            return {
                "global_batch": batch,
                "batch_source": "scaldiag profile --global-batch",
                "per_replica_batch": batch // replicas,
            }
        if self.batch is None:
            return {
                "global_batch": None,
                "per_replica_batch": None,
                "batch_source": (
                    f"unknown: no DataLoader batch or forward call seen yet; {HOW_TO_GIVE_BATCH}"
                ),
            }
        size, source = self.batch
        return {
            "global_batch": size * replicas,
            "per_replica_batch": size,
            "batch_source": (
                f"{source} (per replica) x {replicas} replica{'s' if replicas > 1 else ''}"
            ),
        }

    # --- several processes training (multiprocessing, fork) ------------------
    def forked(self) -> None:
        """``os.register_at_fork``'s child hook: the parent's session (its open files, its
        recorder) is not this process's. Training here (a pool's worker training a model of its
        own) records into RUN_DIR/process<PID>, untraced (the launcher samples the process
        tree); a DataLoader worker never steps and records nothing. Where the parent had stepped
        already (its pre-step hook removed), this process cannot start a capture: not recorded."""
        try:
            # The parent's objects stay referenced: freed here, its open files would flush the
            # parent's buffered lines a second time into its record (at os._exit nothing is).
            _INHERITED.append(dict(self.__dict__))
            parent, sources = os.getppid(), self.compile_sources
            self.__init__()
            self.forked_from, self.compile_sources = parent, sources
        except Exception:
            pass

    def _child_session(self, session_class, root: str | None):
        run_dir = Path(root) / f"{PROCESS_DIR_PREFIX}{os.getpid()}" if root else None
        session = session_class(run_dir=run_dir, backend=BACKEND, sample=False, trace_steps=0)
        session.describe(process={"pid": os.getpid(), "forked_from": self.forked_from})
        try:  # a process that ends through multiprocessing's exit closes its capture
            from multiprocessing import util

            util.Finalize(None, self.finish, exitpriority=10)
        except Exception:
            pass
        return session

    def _note_processes(self) -> None:
        """The script's process: the processes forked from it that trained, named in its
        training.json (``other_training_processes``), trained here or not."""
        root = os.environ.get(RUN_DIR_ENV)
        if self.forked_from is not None or not root:
            return
        try:
            names = sorted(p.name for p in Path(root).glob(f"{PROCESS_DIR_PREFIX}*") if p.is_dir())
            if names:
                update_json(Path(root), TRAINING_JSON, other_training_processes=names)
        except Exception as exc:
            print(f"scaldiag: cannot list the training processes ({exc})", file=sys.stderr)

    def finish(self) -> None:
        """The script ended: drop the open step, measure the input ceiling, close the run."""
        self._note_processes()
        if self.finished or self.session is None:
            self._let_go()  # a script that iterated loaders and never trained holds links too
            return
        session = self.session
        self._epochs_open = False
        try:
            recorder = session.recorder
            recorder.drop_open()  # the step the last optimizer.step() opened: no update ends it
            self._finish_clock()
            if self.graph_steps:
                session.describe(cuda_graph_steps=self.graph_steps)
            self._memory_peaks()
            recorder.mark("fit_end")
            if (
                not self.failed
                and self.loader is not None
                and rank() == 0
                and self.forked_from is None
            ):
                self._ceiling(recorder)
        except Exception as exc:
            print(
                f"scaldiag: could not finish the capture ({type(exc).__name__}: {exc})",
                file=sys.stderr,
            )
        finally:
            self.finished = True
            self._let_go()
            try:
                session.close()
            except Exception as exc:
                print(
                    f"scaldiag: could not close the run ({type(exc).__name__}: {exc})",
                    file=sys.stderr,
                )

    def link(self, iterator, loader) -> None:
        """``DataLoader.__iter__`` (torch_hooks): the iterator knows its loader while the script
        runs (``for b in DataLoader(...)`` holds only the iterator), until ``_let_go``."""
        iterator._scaldiag_loader = loader
        self._linked.add(iterator)

    def _let_go(self) -> None:
        """The user's DataLoaders are theirs again. A persistent loader holds its iterator
        (``_iterator``): the link back made a cycle that kept both alive past the script's end,
        where refcounting alone frees them in a plain run, and alive at exit a persistent, pinned
        loader's workers are joined by torch's atexit hooks, 5 s a worker (15 workers: 76 s on an
        H100; ``git show 6a74f68:bench/gpu/loader_exit_probe.py``)."""
        self.loader = self._fetched_from = None
        for iterator in list(self._linked):
            iterator.__dict__.pop("_scaldiag_loader", None)
        self._linked = weakref.WeakSet()

    def _memory_peaks(self) -> None:
        """The CUDA allocator's peak of training, before the input ceiling's loader runs."""
        peaks = attempt(
            device_memory.torch_peaks,
            lambda why: self.session.describe(device_memory_error=why),
        )
        if peaks:
            self.session.describe(device_memory=peaks)

    def _ceiling(self, recorder) -> None:
        """The DataLoader iterated alone, after training, for a bounded time (``input_ceiling``)."""
        recorder.mark("ceiling_begin")
        try:
            ceiling = measure_loader(self.loader, input_ceiling.CEILING_SECONDS)
        except Exception as exc:
            self.session.describe(input_ceiling_error=f"{type(exc).__name__}: {exc}")
            ceiling = None
        recorder.mark("ceiling_end")
        if ceiling:
            self.session.describe(input_ceiling=ceiling)


def _stop_listening(handler, capture) -> None:
    """``scaldiag.capture``'s block is over: torch._dynamo's callbacks no longer call us."""
    for callbacks, listener in (
        (handler.start_callbacks, capture.compile_started),
        (handler.end_callbacks, capture.compile_ended),
    ):
        while listener in callbacks:
            callbacks.remove(listener)


def measure_loader(loader, seconds: float) -> dict | None:
    """Samples per second a DataLoader delivers alone (a fresh iterator, whose workers start
    again, or a persistent loader's own, which restarts its pass: either way their first batches,
    one a worker, are start-up), scaled to the job's ranks."""
    workers = int(getattr(loader, "num_workers", 0) or 0)
    found = input_ceiling.count_batches(
        iter(loader), "DataLoader iterated alone", max(1, workers), seconds
    )
    if found is None or world_size() == 1:
        return found
    return {
        **found,
        "samples_per_s": found["samples_per_s"] * world_size(),
        "source": f"{found['source']} (rank 0, x {world_size()} ranks)",
    }


_INHERITED: list = []  # in a forked process: the parent's capture state, never freed (``forked``)
CAPTURE = TorchCapture()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=CAPTURE.forked)
