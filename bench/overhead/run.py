"""Capture costs a Keras training within 1% of its step after the trace window, measured inside one
process (docs/profile.md).

Capture overhead inside ONE training process: short blocks of steps, each piece of capture alone.

    python -m bench overhead --kind convnet --seconds 100 --block-steps 25 --out FILE.md

Between-process noise (a fresh process's placement, clocks, allocator, compilation) swamps a 1%
effect: 12 whole-process rounds on an H200 gave a 95% interval of [0.93, 1.07]. Within one process,
epochs of 100 steps (160-250 ms on the H200) still drifted: adjacent epochs correlate (0.7), so
50 on/off pairs of epochs left the interval 4.5% wide. Here the unit is a *block* of
``--block-steps`` steps inside an epoch, started and ended at a device synchronisation (JAX: the
training state's last arrays ready; TF: a variable read), so each block's time is device-true and a
block is short enough to sit inside the drift. ``--block-steps 0`` makes whole epochs the blocks
(Keras synchronises at each epoch's end; epoch-edge work, ours included, is then inside the block).

Arms (one configuration each): ``off`` is plain training (none of capture is there: no callback of
ours in Keras's callback list, no input annotation, the sampler process stopped), and each other arm
switches pieces on, as ``scaldiag profile`` installs them:

- ``callback``: ScaldiagCallback in the list (its step hook: StepRecorder.begin, rows on disk
  within 0.1 s);
- ``annotate``: the input annotation of Keras-on-JAX array batches (input_marks; JAX only);
- ``sampler``: the sampler process (NVML where there is a GPU, and psutil) running, as the launcher
  runs it (SIGSTOP in every other arm);
- ``full``: all three: what ``scaldiag profile`` runs in the epochs up to and with its trace window;
- ``steady``: the callback and the sampler: what it runs in the epochs after the window
  (Keras-on-JAX array batches are annotated only while a trace window is to come:
  input_marks.annotating);
- ``noop``: a callback with an empty ``on_train_batch_begin`` (what Keras's dispatch of any step
  hook costs: the floor under ``callback``);
- ``clock``: a callback whose ``on_train_batch_begin`` appends ``time.time_ns()`` to a list (the
  floor of recording anything per step);
- ``recorder``: a callback that calls a StepRecorder's ``begin`` (no ScaldiagCallback, no Session:
  which of the callback's cost is the recorder's), and ``recorder_noflush``: the same with the
  recorder's flushes held off until the run's end (which of it is the flushes).

Schedule: cycles; in each cycle every arm once, in a shuffled order (seeded), each arm block
preceded by an ``off`` block, and one ``off`` block after the last. Every arm block is compared with
the two ``off`` blocks around it: r = log t_arm - (log t_before + log t_after) / 2, which cancels a
linear drift. Reported per arm: the geometric mean ratio exp(mean r) with a Student-t 95% interval
and a bootstrap one, the median ratio with a bootstrap interval, and the extra time per step in
microseconds with its t interval. Every arm and every block is in the .json beside the .md.

What the benchmark itself adds to every arm alike: a callback first in the list that times blocks
and swaps the list's contents at block edges (one Python call per step), and a generator layer with
a flag check over the array batches (~0.1 us a batch; it routes a block's batches through the
annotation or around it). Not measured here (outside the steady steps by design, or elsewhere): the
profiler window (``trace_steps=0``; its inflation is reported per run), start-up and the end
(input-ceiling and input-free passes). With ``--block-steps`` > 0 the epoch-edge marks are outside
the blocks: ``python -m bench step_hook`` times a mark. The whole-process cross-check was ``git show
227e679:bench/bench_capture_overhead.py`` (results: ``git show
8678b07:bench/results/gpu_h200/capture_overhead.md``).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.common import record, show

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import keras  # noqa: E402
import numpy as np  # noqa: E402
from accounting.timed_train import model_for  # noqa: E402
from keras.src.callbacks.callback_list import CallbackList  # noqa: E402

from bench.overhead.stats import (  # noqa: E402
    against_clean_off,
    arm_stats,
    arm_tables,
    carry_over,
    comparisons,
    interval,
    schedule,
    start_sampler,
    stop_sampler,
    verdict,
)
from scaldiag.collect.frameworks import input_marks, tracing  # noqa: E402

# Not scaldiag.keras: importing it patches fit, which would annotate every arm's batches.
from scaldiag.collect.frameworks.keras_callback import ScaldiagCallback  # noqa: E402
from scaldiag.record.reader import read_steps  # noqa: E402

ALL_ARMS = (
    "callback",
    "annotate",
    "sampler",
    "full",
    "steady",
    "noop",
    "clock",
    "recorder",
    "recorder_noflush",
)
PARTS = {
    "off": set(),
    "callback": {"callback"},
    "annotate": {"annotate"},
    "sampler": {"sampler"},
    "full": {"callback", "annotate", "sampler"},
    "steady": {"callback", "sampler"},
    "noop": {"noop"},
    "clock": {"clock"},
    "recorder": {"recorder"},
    "recorder_noflush": {"recorder_noflush"},
}


class Noop(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        pass


class RecorderHook(keras.callbacks.Callback):
    """A StepRecorder's ``begin`` as the step hook, alone; ``flush=False``: its writes held off to
    the end."""

    def __init__(self, run_dir: Path, flush: bool = True):
        super().__init__()
        from scaldiag.collect.recorder import StepRecorder

        run_dir.mkdir()
        self.recorder = StepRecorder(run_dir, None, 3, 0)
        self.flush = flush
        if not flush:
            self.hold_flushes()

    def hold_flushes(self) -> None:
        # The recorder's flush test is "flushed <= now < due": a due time far ahead keeps the usual
        # step on its fast path without a write (a bench-only reach into the recorder's state).
        self.recorder._due_ns = 2**62

    def on_train_batch_begin(self, batch, logs=None):
        self.recorder.begin(batch)


class Clock(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.begins = []

    def on_train_batch_begin(self, batch, logs=None):
        self.begins.append(time.time_ns())


def device_sync(model, backend: str):
    """A function that returns once the device has finished every step dispatched so far."""
    if backend == "jax":
        import jax

        def sync():
            state = getattr(model, "_jax_state", None)
            if state:
                jax.block_until_ready(state)

        return sync
    if backend == "tensorflow":
        return lambda: model.optimizer.iterations.numpy()
    return lambda: None


class Blocks(keras.callbacks.Callback):
    """First in the callback list: times blocks and installs each block's arm.

    With ``block_steps`` K > 0 an edge is every K steps, after a device sync; the first and the last
    K steps of each epoch are untimed and plain (the epoch's start and its end-of-epoch work would
    make those blocks different from the rest), and an odd number of blocks is timed
    (``last_edge``). With K = 0 a block is an epoch, from this callback's epoch-begin hook (Keras
    synchronised at the last epoch's end) to ``EpochTail``'s epoch-end hook.
    """

    def __init__(self, block_steps, steps, callbacks: CallbackList, sync, sampler, switch):
        super().__init__()
        self.block_steps, self.steps = block_steps, steps
        self.list, self.sync, self.sampler, self.switch = callbacks, sync, sampler, switch
        self.plan: list[str] = []
        self.times: list[float] = []
        self.cpu_times: list[float] = []  # the training thread's CPU time in each block
        self.gc_runs: list[int] = []
        self.epoch_s: list[float] = []
        self.next_block = -1  # -1: warm-up, everything on, nothing timed
        self._start = None
        self._sampling = True
        self.annotate = True
        self._gc = self._gc_at_start = 0
        gc.callbacks.append(self._count_gc)

    def _count_gc(self, phase, info):
        if phase == "start":
            self._gc += 1

    @property
    def timing(self) -> bool:
        return 0 <= self.next_block < len(self.plan)

    def close(self, sync: bool) -> None:
        if self._start is None:
            return
        if sync:
            self.sync()
        self.times.append(time.perf_counter() - self._start)
        self.cpu_times.append(time.thread_time() - self._cpu_start)
        self.gc_runs.append(self._gc - self._gc_at_start)
        self._start = None
        self.switch(set(), self)

    def open(self) -> None:
        if not self.timing:
            if self.next_block >= 0:
                self.model.stop_training = True
            return
        self.switch(PARTS[self.plan[self.next_block]], self)
        self.next_block += 1
        self._gc_at_start = self._gc
        self._cpu_start = time.thread_time()
        self._start = time.perf_counter()

    def set_sampler(self, running: bool) -> None:
        if self.sampler is not None and running != self._sampling:
            os.kill(self.sampler.pid, signal.SIGCONT if running else signal.SIGSTOP)
            self._sampling = running

    @property
    def last_edge(self) -> int:
        """The step that closes an epoch's last timed block: after an odd number of blocks, so that
        ``off`` and arm blocks swap places in the epoch from one epoch to the next (the first blocks
        of an epoch ran 3-4% faster on the H200)."""
        k = self.block_steps
        blocks = self.steps // k - 2
        return (self.steps - k) if blocks % 2 else (self.steps - 2 * k)

    def on_train_batch_begin(self, batch, logs=None):
        k = self.block_steps
        if k and batch % k == 0 and k <= batch <= self.last_edge and self.next_block >= 0:
            self.close(sync=True)
            if batch < self.last_edge:
                self.open()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_t = time.perf_counter()
        if not self.block_steps:
            self.open()

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_s.append(time.perf_counter() - self._epoch_t)


class EpochTail(keras.callbacks.Callback):
    """Last in the list: with whole-epoch blocks, the block ends after every other epoch-end hook.
    """

    def __init__(self, blocks: Blocks):
        super().__init__()
        self.blocks = blocks

    def on_epoch_end(self, epoch, logs=None):
        if not self.blocks.block_steps:
            self.blocks.close(sync=False)  # Keras synchronised before its epoch-end hooks


def annotated_arrays(blocks: Blocks, backend: str) -> None:
    """Keras-on-JAX array batches routed per block through input_marks' annotation, or around it."""
    if backend != "jax":
        return
    from keras.src.trainers.data_adapters import array_data_adapter

    adapter = array_data_adapter.ArrayDataAdapter
    original = adapter._get_iterator
    annotation = input_marks._annotation(backend)
    # The annotation is on while a trace window of scaldiag's is to come (input_marks._Fetch): as in
    # the epochs up to the window's end, a window that never finishes holds it on for this run.
    blocks.window_held = tracing.TraceWindow(Path(tempfile.gettempdir()))

    def _get_iterator(self, *args, **kwargs):
        inner = original(self, *args, **kwargs)
        # the library's array path (input_marks.annotating): an iterator over a callable, no
        # generator
        marked = input_marks._annotated_iterator(inner, annotation, input_marks._FirstBatch(None))
        while True:
            try:
                item = next(marked) if blocks.annotate else next(inner)
            except StopIteration:
                return
            yield item

    adapter._get_iterator = _get_iterator


def analyse(path: str, carrying: set[str]) -> None:
    """``--analyse FILE.json``: the carry-over check and the arms against clean ``off`` blocks."""
    r = json.loads(Path(path).read_text())
    for key in ("times_s", "thread_cpu_s"):
        times, plan = r[key], r["plan"][: len(r[key])]
        print(f"{path} ({key})")
        for arm in dict.fromkeys(r["arms"]):
            s = interval(*comparisons(times, plan, arm), r["block_steps"])
            print(
                f"  {arm:10s} {s['blocks']:5d} blocks: {s['ratio']:.4f} t [{s['t_low']:.4f},"
                f" {s['t_high']:.4f}], batch means [{s['bm_low']:.4f}, {s['bm_high']:.4f}]:"
                f" {verdict(s)}"
            )
        for arm, s in carry_over(times, plan).items():
            print(
                f"  off after {arm:10s} {s['blocks']:5d} blocks: {s['ratio']:.4f}"
                f" [{s['t_low']:.4f}, {s['t_high']:.4f}]"
            )
        if carrying:
            for arm, s in against_clean_off(times, plan, carrying).items():
                print(
                    f"  {arm:22s} vs clean off, {s['blocks']:5d} blocks: {s['ratio']:.4f} "
                    f"[{s['t_low']:.4f}, {s['t_high']:.4f}]"
                )


def _main(argv: list[str]) -> int | None:
    if "--analyse" in argv:
        q = argparse.ArgumentParser()
        q.add_argument("--analyse", required=True, help="a .json this benchmark wrote")
        q.add_argument(
            "--carrying",
            default="",
            help="arms whose effect outlasts their blocks (comma-separated)",
        )
        b = q.parse_args(argv)
        analyse(b.analyse, {arm for arm in b.carrying.split(",") if arm})
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", default="convnet", choices=["convnet", "tiny", "dense"])
    p.add_argument(
        "--arms",
        default="steady,steady,full,callback,annotate,sampler",
        help=f"comma-separated, of {', '.join(ALL_ARMS)}; one named twice gets twice the blocks",
    )
    p.add_argument("--block-steps", type=int, default=25, help="steps per block (0: whole epochs)")
    p.add_argument("--steps", type=int, default=500, help="steps per epoch")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument(
        "--warmup", type=int, default=2, help="untimed first epochs (compilation, warm-up), all on"
    )
    p.add_argument(
        "--seconds", type=float, default=60.0, help="time for the timed blocks (sets the cycles)"
    )
    p.add_argument("--max-cycles", type=int, default=100000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--out",
        help="also write the table here, and every block in a .json beside it (for --analyse)",
    )
    p.add_argument("--label", default="")
    a = p.parse_args(argv)
    if a.block_steps and (a.steps % a.block_steps or a.steps < 4 * a.block_steps):
        p.error("--steps must be a multiple of --block-steps, at least 4 blocks")
    backend = keras.backend.backend()
    arms = [
        arm for arm in a.arms.split(",") if arm and not (arm == "annotate" and backend != "jax")
    ]
    shape = (8, 8, 1) if a.kind == "tiny" else (32, 32, 3)
    rng = np.random.default_rng(0)
    x = rng.random((a.steps * a.batch, *shape), dtype=np.float32)
    y = rng.integers(0, 10, a.steps * a.batch)
    model = model_for(a.kind, shape)
    model.compile(
        optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        sampler = start_sampler(run_dir) if any("sampler" in PARTS[arm] for arm in arms) else None
        ours = ScaldiagCallback(
            run_dir=run_dir,
            trace_steps=0,
            sample=False,
            quiet=True,
            input_ceiling_s=0,
            input_free=False,
        )
        ours.set_fit_arguments(x, a.batch)  # what `scaldiag profile`'s fit hook hands it
        noop, clock = Noop(), Clock()
        bare, held = (
            RecorderHook(Path(tmp) / "recorder"),
            RecorderHook(Path(tmp) / "recorder_noflush", flush=False),
        )
        callbacks = CallbackList(
            [ours, noop, clock, bare, held],
            add_history=True,
            model=model,
            verbose=0,
            epochs=1,
            steps=a.steps,
        )
        history = callbacks.callbacks[-1]

        recorder_off = {"callback": None, "recorder": None}

        def switch(parts: set, blocks: Blocks) -> None:
            middle = [
                c
                for c, part in (
                    (ours, "callback"),
                    (noop, "noop"),
                    (clock, "clock"),
                    (bare, "recorder"),
                    (held, "recorder_noflush"),
                )
                if part in parts
            ]
            # A recorder writes its rows 0.1 s after the last write; here it is on one block in
            # several, so without this it would write at the start of nearly every block it is on
            # (~25 rows a write, against 60-90 in a real fit). Its write clock counts its own time
            # only.
            for part, recorder in (
                ("callback", ours.session.recorder if ours.session is not None else None),
                ("recorder", bare.recorder),
            ):
                if recorder is not None and (part in parts) != (recorder_off[part] is None):
                    now = time.time_ns()
                    if part in parts:
                        recorder.delay_flush(now - recorder_off[part])
                        recorder_off[part] = None
                    else:
                        recorder_off[part] = now
            callbacks.callbacks[1:-2] = middle  # [blocks, *middle, history, tail]
            blocks.annotate = "annotate" in parts
            blocks.set_sampler("sampler" in parts)

        blocks = Blocks(
            a.block_steps, a.steps, callbacks, device_sync(model, backend), sampler, switch
        )
        tail = EpochTail(blocks)
        callbacks.callbacks[:] = [blocks, ours, noop, clock, bare, held, history, tail]
        for c in (blocks, tail):
            c.set_model(model)
        annotated_arrays(blocks, backend)
        t0 = time.perf_counter()
        model.fit(x, y, batch_size=a.batch, epochs=a.warmup, verbose=0, callbacks=callbacks)
        warm_s = time.perf_counter() - t0
        # As many cycles as fit in --seconds at the last warm-up epoch's pace (the first one
        # compiled).
        per_epoch = (blocks.last_edge // a.block_steps - 1) if a.block_steps else 1
        block_s = blocks.epoch_s[-1] / a.steps * (a.block_steps or a.steps)
        cycles = max(2, min(a.max_cycles, int(a.seconds / (block_s * 2 * len(arms)))))
        blocks.plan = schedule(arms, cycles, a.seed)
        blocks.next_block = 0
        epochs = math.ceil(len(blocks.plan) / per_epoch) + 1
        t1 = time.perf_counter()
        model.fit(x, y, batch_size=a.batch, epochs=epochs, verbose=0, callbacks=callbacks)
        wall_s = time.perf_counter() - t1
        switch(set(), blocks)
        ours.on_train_end()
        bare.recorder.close()
        held.recorder.close()
        sampler_stats = stop_sampler(sampler) if sampler else "none"
        recorded = len(read_steps(run_dir / "steps.jsonl"))
    plan, times = blocks.plan[: len(blocks.times)], blocks.times
    result = {
        "kind": a.kind,
        "backend": backend,
        "steps_per_epoch": a.steps,
        "batch": a.batch,
        "block_steps": a.block_steps,
        "arms": arms,
        "cycles": cycles,
        "warmup_s": warm_s,
        "wall_s": wall_s,
        "plan": plan,
        "times_s": times,
        "thread_cpu_s": blocks.cpu_times,
        "gc_runs": blocks.gc_runs,
        "steps_recorded": recorded,
        "sampler_stats": sampler_stats,
    }
    result.update(arm_stats(times, blocks.cpu_times, plan, arms, a.block_steps))
    if a.out:
        Path(a.out).with_suffix(".json").write_text(json.dumps(result, indent=1))
    write(a, result)


def write(a, r: dict) -> None:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    unit = f"blocks of {r['block_steps']} steps" if r["block_steps"] else "whole epochs as blocks"
    off = [t for t, name in zip(r["times_s"], r["plan"]) if name == "off"]
    off_gc = [g for g, name in zip(r["gc_runs"], r["plan"]) if name == "off"]
    lines = [
        f"# Capture overhead in one process, piece by piece {a.label} ({stamp})",
        "",
        f"Machine: {platform.node()}, {platform.machine()}, {os.cpu_count()} cores, Python"
        f" {platform.python_version()}; Keras {keras.__version__} on {r['backend']}"
        + _backend_version(r["backend"])
        + ".",
        (
            f"Model `{a.kind}`, batch {a.batch}, epochs of {a.steps} steps; {unit}, each started"
            f" and ended at a device sync; {r['cycles']} cycles of {len(r['arms'])} arms, each arm"
            f" block between two `off` blocks ({len(r['times_s'])} timed blocks in"
            f" {r['wall_s']:.0f} s after a {r['warmup_s']:.0f} s warm-up). `off` blocks: median"
            f" {statistics.median(off) * 1e3:.2f} ms ({min(off) * 1e3:.1f}-{max(off) * 1e3:.1f});"
            f" garbage collections in them: {sum(off_gc)}."
        ),
        (
            f"Steps recorded by ScaldiagCallback: {r['steps_recorded']}; sampler:"
            f" {r['sampler_stats']}."
        ),
        "",
        *arm_tables(r),
    ]
    show(lines, a.out)


def _backend_version(backend: str) -> str:
    try:
        module = __import__("jax" if backend == "jax" else backend)
        return f" {module.__version__}"
    except Exception:
        return ""


def main(argv: list[str]) -> int:
    """``python -m bench overhead [ARGS]``: the run, its output kept as bench/results/overhead.md.
    """
    return record("overhead", __doc__, argv, lambda: _main(argv))
