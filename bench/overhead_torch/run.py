"""Capture costs a PyTorch training within 1% of its step after the trace window, measured inside
one process (docs/pytorch.md).

PyTorch capture overhead inside ONE training process: short blocks of steps, each piece of capture
alone.

    python -m bench overhead_torch --seconds 150 --block-steps 25 [--width 1024 --batch 1024] [--out FILE.md]

The PyTorch twin of bench/overhead/run.py (Keras), with the same statistics
(bench/overhead/stats.py): whole-process rounds (bench/torch/capture_overhead.py, removed) varied 6% from
window to window and gave [0.88, 1.28] in 4 rounds, which cannot tell 1% apart. Here the loop is
bench/torch/healthy.py's eager step (wide matmuls under bf16 autocast, fused AdamW, one optimizer)
fed by a DataLoader of ready GPU batches (``batch_size=None``: no collation), and a block is
``--block-steps`` steps started and ended at ``torch.cuda.synchronize()``.

Capture is installed as ``scaldiag profile`` installs it, by the same functions (torch_hooks'
patches of torch.optim.optimizer, the DataLoader iterator and nn.Module), into a run directory whose
run.json exists (so the session does not sample in-process: the launcher's sampler process does).
The first steps, untimed, run everything, the profiler window (steps 3-7) included. Arms:

- ``hooks``: the global optimizer post-step hook in torch's hook table (the pre-step hook removes
  itself after the first step): StepRecorder.begin per step;
- ``loader``: DataLoader ``__next__`` patched (a test per batch, the batch size learnt once);
- ``sampler``: the sampler process (NVML and psutil), SIGSTOP in the other arms;
- ``steady``: all three: what `scaldiag profile` runs after its trace window.

``off``: the hook table without ours, the iterator's own ``__next__``, the sampler stopped. Not
measured here: the profiler window and what outlasts it process-wide (the CUPTI teardown:
bench/results/gpu_h200/torch/torch.md#profiler_aftermathmd), start-up and the input ceiling after
training.
"""  # noqa: E501

from __future__ import annotations

import argparse
import gc
import json
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

DEVICE = "gpu"  # a CUDA device: blocks end at torch.cuda.synchronize()

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "bench" / "torch")]

import torch  # noqa: E402
from healthy import build, eager_step  # noqa: E402
from torch.optim import optimizer as optim_module  # noqa: E402
from torch.utils.data import dataloader as dataloader_module  # noqa: E402

from bench.overhead.stats import (  # noqa: E402
    arm_stats,
    arm_tables,
    schedule,
    start_sampler,
    stop_sampler,
)  # noqa: E402
from scaldiag.collect.env import RUN_DIR_ENV  # noqa: E402
from scaldiag.collect.frameworks import torch_hooks  # noqa: E402
from scaldiag.collect.frameworks.torch_capture import CAPTURE  # noqa: E402
from scaldiag.collect.session import start_run_json  # noqa: E402
from scaldiag.record.reader import read_steps  # noqa: E402

PARTS = {
    "off": set(),
    "hooks": {"hooks"},
    "loader": {"loader"},
    "sampler": {"sampler"},
    "steady": {"hooks", "loader", "sampler"},
}


class Batches(torch.utils.data.Dataset):
    """The same ready GPU batch ``n`` times (a DataLoader with ``batch_size=None`` hands each item
    on)."""

    def __init__(self, x, y, n: int):
        self.x, self.y, self.n = x, y, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.x, self.y


class Switch:
    """Puts each piece of capture in place, or takes it out, between blocks."""

    def __init__(self, sampler):
        self.sampler, self._sampling = sampler, True
        self.post_hooks = {
            k: h
            for k, h in optim_module._global_optimizer_post_hooks.items()
            if getattr(h, "__self__", None) is CAPTURE
        }
        iterator = dataloader_module._BaseDataLoaderIter
        self.patched_next = iterator.__next__
        self.plain_next = self.patched_next.__wrapped__  # functools.wraps in torch_hooks
        self.recorder_off_since: int | None = None

    def __call__(self, parts: set) -> None:
        table = optim_module._global_optimizer_post_hooks
        if "hooks" in parts:
            table.update(self.post_hooks)
        else:
            for key in self.post_hooks:
                table.pop(key, None)
        recorder = CAPTURE.session.recorder if CAPTURE.session is not None else None
        if recorder is not None and ("hooks" in parts) == (self.recorder_off_since is not None):
            # The recorder writes 0.1 s after its last write, counting only time it is on (as the
            # Keras benchmark does: otherwise nearly every block it is on would start with a write).
            now = time.time_ns()
            if "hooks" in parts:
                recorder.delay_flush(now - self.recorder_off_since)
                self.recorder_off_since = None
            else:
                self.recorder_off_since = now
        dataloader_module._BaseDataLoaderIter.__next__ = (
            self.patched_next if "loader" in parts else self.plain_next
        )
        running = "sampler" in parts
        if self.sampler is not None and running != self._sampling:
            os.kill(self.sampler.pid, signal.SIGCONT if running else signal.SIGSTOP)
            self._sampling = running


def _main(argv: list[str]) -> int | None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arms", default="steady,steady,hooks,loader,sampler")
    p.add_argument("--block-steps", type=int, default=25)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument(
        "--warmup",
        type=int,
        default=60,
        help="untimed first steps, all of capture on (window: 3-7)",
    )
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="also write the table here, and every block in a .json beside it")
    p.add_argument("--label", default="")
    a = p.parse_args(argv)
    a.fixed = None  # healthy.build's option: the eager step
    arms = [arm for arm in a.arms.split(",") if arm]
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        start_run_json(
            run_dir, [sys.executable, *sys.argv]
        )  # a launcher's run: the session does not sample
        os.environ[RUN_DIR_ENV] = str(run_dir)
        torch_hooks._on_optimizer_import(optim_module)
        torch_hooks._on_dataloader_import(dataloader_module)
        torch_hooks._on_module_import(torch.nn.modules.module)
        sampler = start_sampler(run_dir) if any("sampler" in PARTS[arm] for arm in arms) else None
        model, opt, x, y = build(a, dev)
        step = eager_step(model, opt, x, y, dev)

        def run(steps: int):
            for _ in torch.utils.data.DataLoader(Batches(x, y, steps), batch_size=None):
                step()

        t0 = time.perf_counter()
        run(a.warmup)
        sync()
        warm_s = time.perf_counter() - t0
        switch = Switch(sampler)
        t0 = time.perf_counter()
        run(4 * a.block_steps)
        sync()
        block_s = (time.perf_counter() - t0) / 4
        cycles = max(2, int(a.seconds / (block_s * 2 * len(arms))))
        plan = schedule(arms, cycles, a.seed)
        times, cpu_times, gc_runs = [], [], []
        gc_count = [0]
        gc.callbacks.append(
            lambda phase, info: gc_count.__setitem__(0, gc_count[0] + (phase == "start"))
        )
        t1 = time.perf_counter()
        for name in plan:
            switch(PARTS[name])
            gc_before, cpu0, w0 = gc_count[0], time.thread_time(), time.perf_counter()
            run(a.block_steps)
            sync()
            times.append(time.perf_counter() - w0)
            cpu_times.append(time.thread_time() - cpu0)
            gc_runs.append(gc_count[0] - gc_before)
        wall_s = time.perf_counter() - t1
        switch(PARTS["steady"])
        CAPTURE.finish()
        sampler_stats = stop_sampler(sampler) if sampler else "none"
        recorded = len(read_steps(run_dir / "steps.jsonl"))
    result = {
        "batch": a.batch,
        "width": a.width,
        "block_steps": a.block_steps,
        "arms": arms,
        "cycles": cycles,
        "warmup_s": warm_s,
        "wall_s": wall_s,
        "plan": plan,
        "times_s": times,
        "thread_cpu_s": cpu_times,
        "gc_runs": gc_runs,
        "steps_recorded": recorded,
        "sampler_stats": sampler_stats,
        "capture_failed": CAPTURE.failed,
    }
    result.update(arm_stats(times, cpu_times, plan, arms, a.block_steps))
    if a.out:
        Path(a.out).with_suffix(".json").write_text(json.dumps(result, indent=1))
    write(a, result, dev)


def write(a, r: dict, dev) -> None:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    off = [t for t, name in zip(r["times_s"], r["plan"]) if name == "off"]
    device = torch.cuda.get_device_name(0) if dev.type == "cuda" else "CPU"
    lines = [
        f"# PyTorch capture overhead in one process, piece by piece {a.label} ({stamp})",
        "",
        (
            f"Machine: {platform.node()}, {platform.machine()}, {os.cpu_count()} cores, Python"
            f" {platform.python_version()}; torch {torch.__version__}, {device}."
        ),
        (
            f"healthy.py's eager step, width {a.width}, batch {a.batch}, from a DataLoader of ready"
            f" batches; blocks of {r['block_steps']} steps, each ended by a device sync;"
            f" {r['cycles']} cycles of {len(r['arms'])} arms ({len(r['times_s'])} timed blocks in"
            f" {r['wall_s']:.0f} s after {r['warmup_s']:.1f} s of warm-up with the profiler"
            f" window). `off` blocks: median {statistics.median(off) * 1e3:.2f} ms"
            f" ({min(off) * 1e3:.1f}-{max(off) * 1e3:.1f}),"
            f" {statistics.median(off) / r['block_steps'] * 1e3:.3f} ms a step."
        ),
        (
            f"Steps recorded: {r['steps_recorded']}; capture failed: {r['capture_failed'] or 'no'};"
            f" sampler: {r['sampler_stats']}."
        ),
        "",
        *arm_tables(r),
    ]
    show(lines, a.out)


def main(argv: list[str]) -> int:
    """``python -m bench overhead_torch [ARGS]``: the run, its output kept as
    bench/results/overhead_torch.md."""
    return record("overhead_torch", __doc__, argv, lambda: _main(argv))
