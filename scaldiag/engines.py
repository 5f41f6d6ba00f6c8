"""Run one function over many items: in worker processes here, or on a Dask cluster.

``open_engine(spec)`` gives an :class:`Engine`; ``engine.map(fn, items)`` returns ``fn(item)`` for
every item, in the items' order. The per-rank reduction of a job's traces runs through it, so that
memory is bounded per rank (a worker holds one rank at a time), not per job, and a job whose traces
outgrow one machine runs the same reduction on a cluster. What was chosen and why, with the
measurements: docs/engines.md.

Specs: ``None``/``"local"`` (a worker process per core), ``"local:N"``, ``"local:1"`` (in this
process, one item at a time), ``"dask"``/``"dask:N"`` (a Dask LocalCluster started here and closed
on exit), ``"dask://HOST:PORT"``/``"tcp://HOST:PORT"`` (an existing scheduler). Ray was measured
against Dask and is not supported (docs/engines.md): ``"ray..."`` says so.

Imports nothing of scaldiag but ``scaldiag.errors``; Dask is imported only when asked for (the
optional extra ``scaldiag[dask]``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

from scaldiag.errors import ScaldiagError

# How local workers start, chosen by measurement (docs/engines.md):
# "spawn" gives a worker a fresh interpreter that inherits nothing of the caller's state (threads
# such as `profile`'s samplers, locks held by them, open files); "fork" copies the caller
# mid-flight and is unsafe with threads. forkserver would leave its server process running until
# the caller exits.
START_METHOD = "spawn"
# Workers are reused for every item of one map call (CPython's max_tasks_per_child=None), chosen by
# measurement on 8 ranks of 100 MB: a worker's peak is about one rank's either way (105 MiB reused,
# 94 MiB fresh), and what a reused worker keeps of its heap between ranks is at most that peak, so
# memory stays bounded by workers x the largest rank's peak; a fresh process per item (1) paid a
# start-up per rank: +83% wall time (5.09 s against 2.78 s) for 12% less peak memory of the tree.
# (CPython 3.11-3.13 can also deadlock with max_tasks_per_child > 1: CPython issue 115634.)
# The pool lasts the engine's life (open_engine closes it): no worker outlives the engine.
ITEMS_PER_WORKER: int | None = None
# Tasks a worker is given at most in one map: many items (a job's thousands of small rank files)
# go several to a task. Each task is a round trip (the item and its result pickled, the pool's
# queues; a Dask task's scheduling), which cost as much as reading a 34 KB rank; a few hundred tasks
# still balance the workers. Fewer items than this per worker: one item a task, as before.
TASKS_PER_WORKER = 16
BROKEN_POOL = (
    "a worker process of the local engine ended before its rank was reduced (killed, out of"
    " memory, or it could not start); --engine local:1 reduces one rank at a time in this"
    " process, with the least memory"
)
# Worker processes that do not stop within this after SIGTERM get SIGKILL.
STOP_TIMEOUT_S = 5.0

# How long a Dask scheduler named by its address may take to answer (Dask's default: 30 s, then exit
# 70).
SCHEDULER_TIMEOUT_S = 10.0
# The signals that end a command (a scheduler's, `timeout`'s, a closed terminal's): while an engine
# is open they stop its workers first; the command then exits 128 + N, as the signal's default
# would.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

SPECS_ACCEPTED = ("local", "local:N", "dask", "dask:N", "dask://HOST:PORT", "tcp://HOST:PORT")


class Engine(Protocol):
    name: str  # "local", "dask": shown in reports ("7 ranks reduced in 2 local worker processes")
    workers: int  # how many items run at once

    def map(self, fn: Callable[[Any], Any], items: list) -> list: ...

    def imap(self, fn: Callable[[Any], Any], items: list) -> Iterator: ...


def default_workers() -> int:
    """The cores this process may run on (an affinity mask or a container's cpuset can be fewer than
    the machine's)."""
    counted = getattr(os, "process_cpu_count", None)  # Python 3.13
    if counted is not None:
        return counted() or 1
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# --- local worker processes -----------------------------------------------------------------------


class LocalEngine:
    """Worker processes of this machine; ``workers == 1`` runs the items here, one at a time."""

    name = "local"

    def __init__(
        self,
        workers: int,
        start_method: str = START_METHOD,
        items_per_worker: int | None = ITEMS_PER_WORKER,
    ):
        self.workers = workers
        self.start_method = start_method
        self.items_per_worker = items_per_worker
        # One pool for every map of the engine's life (open_engine closes it): a job is read in two
        # passes, and a spawned worker's start (its imports) cost ~1.8 s a pass on a 2-rank job (1.3
        # s in-process).
        self._executor: ProcessPoolExecutor | None = None
        self._size = 0

    def close(self) -> None:
        """Stop the pool's workers (each has finished its items)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def map(self, fn: Callable[[Any], Any], items: list) -> list:
        items = list(items)
        processes = min(self.workers, len(items))
        if processes <= 1:  # no pool: a pool for one item costs a start-up and gives nothing
            return [fn(item) for item in items]
        return self._pool_map(fn, items, processes)

    def imap(self, fn: Callable[[Any], Any], items: list) -> Iterator:
        """``map``'s results one at a time, in the items' order, each task's let go of once given:
        a caller that keeps less of a result than the result itself (a job's thousands of ranks'
        evidence, gathered into columns) does not hold them all as a list."""
        items = list(items)
        processes = min(self.workers, len(items))
        if processes <= 1:
            return map(fn, items)
        return self._pool_imap(fn, items, processes)

    def _pool_imap(self, fn, items: list, processes: int) -> Iterator:
        executor = self._pool(processes)
        futures = _submitted(executor, functools.partial(_each, fn), tasks(items, processes))
        try:
            for i, future in enumerate(futures):
                task, futures[i] = future.result(), None
                yield from task
        except BrokenProcessPool:  # a worker killed (the OOM killer) or unable to start
            self._executor = None
            _stop_workers(executor)
            raise ScaldiagError(BROKEN_POOL) from None
        except BaseException:  # an item's error, KeyboardInterrupt, the caller's own: stop now
            self._executor = None
            _stop_workers(executor)
            raise

    def _pool_map(self, fn, items: list, processes: int) -> list:
        executor = self._pool(processes)
        try:
            futures = _submitted(executor, functools.partial(_each, fn), tasks(items, processes))
            wait(futures, return_when=FIRST_EXCEPTION)
            failed = _first_failed(futures)
            if failed is not None:
                raise failed
            return [result for f in futures for result in f.result()]
        except BrokenProcessPool:  # a worker killed (the OOM killer) or unable to start
            self._executor = None
            _stop_workers(executor)
            raise ScaldiagError(BROKEN_POOL) from None
        except (
            BaseException
        ):  # an item's error, KeyboardInterrupt: the other items stop now, not when done
            self._executor = None
            _stop_workers(executor)
            raise

    def _pool(self, processes: int) -> ProcessPoolExecutor:
        """The engine's pool, started on first use (or again, larger, where a map has more items to
        spread)."""
        if self._executor is None or processes > self._size:
            self.close()
            self._executor, self._size = self._new_executor(processes), processes
        return self._executor

    def _new_executor(self, processes: int) -> ProcessPoolExecutor:
        context = multiprocessing.get_context(self.start_method)
        # Passed only when set: Python 3.10 has no max_tasks_per_child, and CPython refuses it with
        # fork.
        per_worker = (
            {} if self.items_per_worker is None else {"max_tasks_per_child": self.items_per_worker}
        )
        return ProcessPoolExecutor(
            processes, mp_context=context, initializer=_ignore_sigint, **per_worker
        )


def tasks(items: list, workers: int) -> list[list]:
    """The items in order, cut into tasks of equal size: one item each unless there are more than
    TASKS_PER_WORKER a worker."""
    size = max(1, -(-len(items) // (max(1, workers) * TASKS_PER_WORKER)))
    return [items[i : i + size] for i in range(0, len(items), size)]


def _each(fn: Callable[[Any], Any], task: list) -> list:
    """``fn`` of each item of a task, in order, in the worker (an item's error ends the task)."""
    return [fn(item) for item in task]


def _submitted(executor: ProcessPoolExecutor, fn, items: list) -> list:
    """The items submitted with the stop signals held in this thread: the first submits spawn the
    workers, and a SIGTERM handled inside a spawn (its preparation data half written) left that
    worker to print multiprocessing's EOFError traceback. A signal held is handled once they are
    started.
    """
    held = threading.current_thread() is threading.main_thread()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS) if held else None
    try:
        return [executor.submit(fn, item) for item in items]
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _ignore_sigint() -> None:
    """Ctrl-C reaches every process of the terminal's group: the caller stops the workers itself, so
    they do not each print a KeyboardInterrupt traceback. The stop signals, held while the caller
    spawned this worker (``_submitted``), are its own again: SIGTERM ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _first_failed(futures: list[Future]) -> BaseException | None:
    """The exception of the first item (in the items' order) that raised one, if any did."""
    for f in futures:
        if f.done() and not f.cancelled() and f.exception() is not None:
            return f.exception()
    return None


def _stop_workers(executor: ProcessPoolExecutor) -> None:
    """Cancel the items not started and end the running ones: SIGTERM, then SIGKILL after
    STOP_TIMEOUT_S."""
    processes = list((getattr(executor, "_processes", None) or {}).values())
    executor.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        with contextlib.suppress(Exception):
            p.terminate()
    for p in processes:
        with contextlib.suppress(Exception):
            p.join(STOP_TIMEOUT_S)
            if p.is_alive():
                p.kill()
                p.join(STOP_TIMEOUT_S)


# --- Dask
# ------------------------------------------------------------------------------------------


class DaskEngine:
    """A Dask client; its workers must import scaldiag and see the items' paths (a shared file
    system)."""

    name = "dask"

    def __init__(self, client):
        self.client = client
        self.workers = max(1, sum(client.nthreads().values()))

    def map(self, fn: Callable[[Any], Any], items: list) -> list:
        import distributed

        items = list(items)
        if not items:
            return []
        # pure=False: the same path given twice is two tasks, as it is locally (no cached result
        # from an earlier call).
        futures = self.client.map(
            functools.partial(_each, fn), tasks(items, self.workers), pure=False
        )
        try:
            # loop=: this client's, not a default one (the engine never installs itself as the
            # default client).
            for done in distributed.as_completed(futures, loop=self.client.loop):
                if done.status == "error":
                    # raises the item's exception, its own type and message (Dask ships it with
                    # tblib)
                    done.result()
            return [result for task in self.client.gather(futures) for result in task]
        except BaseException:
            self.client.cancel(futures)
            raise

    def imap(self, fn: Callable[[Any], Any], items: list) -> Iterator:
        """``map``'s results one at a time, in the items' order, each task's let go of once given
        (LocalEngine.imap)."""
        items = list(items)
        if not items:
            return
        futures = self.client.map(
            functools.partial(_each, fn), tasks(items, self.workers), pure=False
        )
        try:
            for i, future in enumerate(futures):
                # raises the item's exception, its own type and message (as ``map``)
                task = future.result()
                future.release()
                futures[i] = None
                yield from task
        except BaseException:
            self.client.cancel([f for f in futures if f is not None])
            raise


@contextlib.contextmanager
def _dask(distributed, workers: int | None, address: str | None) -> Iterator[DaskEngine]:
    if address is not None:
        with _client(distributed, address) as client:
            yield DaskEngine(client)
        return
    # One thread per worker process: the reduction holds the GIL, so threads would not run at once.
    # memory_limit=0: no per-worker cap, as local workers have none; Dask's default (the machine's
    # memory / N) would restart a worker reducing one large rank while the others sit idle.
    with (
        distributed.LocalCluster(
            n_workers=workers or default_workers(),
            threads_per_worker=1,
            processes=True,
            memory_limit=0,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        distributed.Client(cluster, set_as_default=False) as client,
    ):
        yield DaskEngine(client)


def _client(distributed, address: str):
    try:
        return distributed.Client(address, set_as_default=False, timeout=SCHEDULER_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        raise ScaldiagError(
            f"no Dask scheduler answered at {address} within {SCHEDULER_TIMEOUT_S:g} s "
            f"({type(exc).__name__}); start one (dask scheduler) or use --engine local"
        ) from None


class Stopped(ScaldiagError):
    """The command was sent SIGTERM or SIGHUP while an engine was open: its workers were stopped."""

    def __init__(self, signum: int):
        super().__init__(
            f"stopped by {signal.Signals(signum).name}: the engine's workers were stopped first"
        )
        self.exit_code = 128 + signum


@contextlib.contextmanager
def _workers_stop_with_the_command() -> Iterator[None]:
    """While the engine is open, SIGTERM and SIGHUP raise ``Stopped`` in the main thread, so that
    the engine closes (its workers terminated) before the command ends: the signals' default ended
    the command at once and left every spawned worker and the resource tracker running under
    PID 1."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread; a caller elsewhere keeps its own
        return

    def stop(signum, frame):
        raise Stopped(signum)

    before = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def _closing_on_signals(engine_cm) -> Iterator[Engine]:
    with _workers_stop_with_the_command(), engine_cm as engine:
        yield engine


# --- the spec
# --------------------------------------------------------------------------------------


def _import_optional(module: str, extra: str):
    try:
        return __import__(module)
    except ImportError as e:
        raise ScaldiagError(
            f"the {extra} engine needs the optional extra: pip install 'scaldiag[{extra}]'"
            f" ({module} cannot be imported:"
            f" {str(e).splitlines()[0] if str(e) else type(e).__name__})"
        ) from None


_WITH_COUNT = re.compile(r"^(?P<kind>local|dask)(?::(?P<n>[0-9]+))?$")
_ADDRESS = re.compile(r"^(?:dask|tcp)://(?P<where>[^/\s]+)$")
_RAY = re.compile(r"^ray(:[0-9]+|://.*)?$")


def parse_spec(spec: str | None) -> tuple[str, int | None, str | None]:
    """``(kind, workers or None for the default, address or None to start a cluster here)``."""
    text = "local" if spec is None else spec.strip()
    if m := _WITH_COUNT.match(text):
        workers = int(m["n"]) if m["n"] is not None else None
        if workers == 0:
            raise _bad_spec(text, "no workers")
        return m["kind"], workers, None
    if m := _ADDRESS.match(text):
        return "dask", None, f"tcp://{m['where']}"  # Dask's own form is tcp://; dask:// is ours
    if _RAY.match(text):
        raise _bad_spec(
            text,
            "Ray is not supported (measured against Dask: docs/engines.md); a Ray cluster's "
            "machines can run a Dask scheduler and workers instead",
        )
    raise _bad_spec(text)


def _bad_spec(spec: str, why: str = "") -> ScaldiagError:
    return ScaldiagError(
        f"engine {spec!r}{': ' + why if why else ''}; accepted: {', '.join(SPECS_ACCEPTED)} "
        "(N workers, N >= 1)"
    )


def open_engine(spec: str | None = None) -> contextlib.AbstractContextManager[Engine]:
    """The engine ``spec`` names; a cluster it starts here is closed on exit. A bad spec or a
    missing optional package raises ScaldiagError now, before anything starts."""
    kind, workers, address = parse_spec(spec)
    if kind == "local":
        return _closing_on_signals(contextlib.closing(LocalEngine(workers or default_workers())))
    return _closing_on_signals(_dask(_import_optional("distributed", "dask"), workers, address))
