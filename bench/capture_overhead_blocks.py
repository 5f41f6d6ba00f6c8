"""Capture overhead inside ONE training process: epochs with capture on and off, alternating, paired.

    python bench/capture_overhead_blocks.py --kind convnet --blocks 80 --steps 100 --batch 256 --out FILE.md

Between-process noise (a fresh process's placement, clocks, allocator, compilation) swamps a 1%
effect: 12 whole-process rounds on an H200 gave a 95% interval of [0.93, 1.07]. Here one process
trains ``--warmup + --blocks`` epochs of ``--steps`` steps, and each epoch after the warm-up is a
block with capture's always-on parts either active or inactive, in the order on-off, off-on,
on-off, ... (ABBA, so a slow drift cancels within each pair of pairs). Each block is timed with
a stopwatch that starts before every other callback's epoch-begin hook and stops after every
other's epoch-end hook; Keras has synchronised with the device by the epoch's end (it reads the
metrics), so the time is device-true. Each pair gives a time ratio on/off; reported: their
geometric mean with a Student-t 95% interval on the log ratios and a bootstrap percentile interval.

Active in an "on" block, as under ``scaldiag profile``:
- ScaldiagCallback's hooks (``on_train_batch_begin`` records each step: two clock reads and a
  steps.jsonl row written and flushed; epoch marks into marks.jsonl), forwarded by a gate
  callback;
- the samplers (NVML where there is a GPU, and psutil), in a separate process as the launcher
  runs them, started once and held with SIGSTOP during "off" blocks, SIGCONT for "on" blocks.

Not measured here (each is outside the steady steps by design, or measured elsewhere): the profiler
window (``trace_steps=0``; its inflation is reported per run), start-up (the launcher, the import
hook, Session creation), the end (input-ceiling pass, finalising run.json), the fit() hook's
argument inspection. In "off" blocks the gate callback still runs: one Python call per step that
returns at once. bench_capture_overhead.py is the whole-process cross-check.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import keras  # noqa: E402
import numpy as np  # noqa: E402
from accounting.timed_train import model_for  # noqa: E402

from scaldiag.keras import ScaldiagCallback  # noqa: E402

TARGET_RATIO = 1.01
SAMPLER_CHILD = """
import os, sys, time
sys.path.insert(0, sys.argv[3])
from scaldiag.collect.samplers import Samplers
samplers = Samplers(sys.argv[1], int(sys.argv[2]))
samplers.start()
print("sampling", samplers.missing, flush=True)
sys.stdin.read()
print(samplers.stop(), flush=True)
"""


def schedule(blocks: int) -> list[bool]:
    """on/off per block: (on, off), (off, on), (on, off), ... so pairs alternate which runs first."""
    order = []
    for pair in range(blocks // 2):
        order += [True, False] if pair % 2 == 0 else [False, True]
    return order


class Stopwatch:
    def __init__(self):
        self.begin = 0.0
        self.epochs: list[float] = []


class WatchBegin(keras.callbacks.Callback):
    def __init__(self, watch: Stopwatch):
        super().__init__()
        self.watch = watch

    def on_epoch_begin(self, epoch, logs=None):
        self.watch.begin = time.perf_counter()


class WatchEnd(keras.callbacks.Callback):
    def __init__(self, watch: Stopwatch):
        super().__init__()
        self.watch = watch

    def on_epoch_end(self, epoch, logs=None):
        self.watch.epochs.append(time.perf_counter() - self.watch.begin)


class Gate(keras.callbacks.Callback):
    """Before the stopwatch: turns capture on or off for the coming epoch (the sampler process too)."""

    def __init__(self, plan: list[bool], sampler: subprocess.Popen | None):
        super().__init__()
        self.plan = plan
        self.sampler = sampler
        self.active = True
        self._running = True

    def on_epoch_begin(self, epoch, logs=None):
        self.active = self.plan[epoch]
        if self.sampler is not None and self.active != self._running:
            os.kill(self.sampler.pid, signal.SIGCONT if self.active else signal.SIGSTOP)
            self._running = self.active


class Forward(keras.callbacks.Callback):
    """ScaldiagCallback's hooks while the gate is open; train begin and end always (its session)."""

    def __init__(self, inner: ScaldiagCallback, gate: Gate, hooks: bool = True):
        super().__init__()
        self.inner, self.gate, self.hooks = inner, gate, hooks

    def set_model(self, model):
        super().set_model(model)
        self.inner.set_model(model)

    def set_params(self, params):
        super().set_params(params)
        self.inner.set_params(params)

    def on_train_begin(self, logs=None):
        self.inner.on_train_begin(logs)

    def on_train_end(self, logs=None):
        self.inner.on_train_end(logs)

    def on_epoch_begin(self, epoch, logs=None):
        if self.gate.active and self.hooks:
            self.inner.on_epoch_begin(epoch, logs)

    def on_train_batch_begin(self, batch, logs=None):
        if self.gate.active and self.hooks:
            self.inner.on_train_batch_begin(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if self.gate.active and self.hooks:
            self.inner.on_epoch_end(epoch, logs)


def start_sampler(run_dir: Path) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", SAMPLER_CHILD, str(run_dir), str(os.getpid()), str(ROOT)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    print(child.stdout.readline().strip(), flush=True)
    return child


def stop_sampler(child: subprocess.Popen) -> str:
    os.kill(child.pid, signal.SIGCONT)
    out, _ = child.communicate("", timeout=30)
    return out.strip()


def t95(df: int) -> float:
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
             10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}
    keys = sorted(k for k in table if k <= df)
    return table[keys[-1]] if keys else 12.706


def paired_ratios(times: list[float], plan: list[bool]) -> list[float]:
    """Per pair of blocks: time on / time off."""
    ratios = []
    for i in range(0, len(plan) - 1, 2):
        on, off = (times[i], times[i + 1]) if plan[i] else (times[i + 1], times[i])
        ratios.append(on / off)
    return ratios


def interval(ratios: list[float], resamples: int = 10000, seed: int = 0) -> dict:
    logs = np.log(np.asarray(ratios))
    mean, sd = float(logs.mean()), float(logs.std(ddof=1))
    half = t95(len(logs) - 1) * sd / math.sqrt(len(logs))
    rng = np.random.default_rng(seed)
    draws = logs[rng.integers(0, len(logs), (resamples, len(logs)))]
    boot, boot_median = draws.mean(axis=1), np.median(draws, axis=1)
    return {"pairs": len(ratios), "ratio": math.exp(mean), "t_low": math.exp(mean - half), "t_high": math.exp(mean + half),
            "boot_low": float(np.exp(np.percentile(boot, 2.5))), "boot_high": float(np.exp(np.percentile(boot, 97.5))),
            # Robust to a neighbour's burst that lands in one block of a pair (heavy tails on a shared machine):
            "median_ratio": float(np.exp(np.median(logs))),
            "median_low": float(np.exp(np.percentile(boot_median, 2.5))),
            "median_high": float(np.exp(np.percentile(boot_median, 97.5)))}


def verdict(stats: dict) -> str:
    if stats["t_high"] <= TARGET_RATIO:
        return f"met: the whole 95% interval is at or below {TARGET_RATIO}"
    if stats["t_low"] > TARGET_RATIO:
        return f"not met: the whole 95% interval is above {TARGET_RATIO}"
    return f"undecided: the 95% interval straddles {TARGET_RATIO}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", default="convnet", choices=["convnet", "tiny", "dense"])
    p.add_argument("--blocks", type=int, default=80, help="timed epochs (pairs = blocks / 2)")
    p.add_argument("--warmup", type=int, default=4, help="untimed first epochs (compilation, warm-up), capture on")
    p.add_argument("--steps", type=int, default=100, help="steps per epoch")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--no-sampler", action="store_true", help="leave the sampler process out (hooks only)")
    p.add_argument("--no-hooks", action="store_true", help="leave ScaldiagCallback's hooks out (sampler only)")
    p.add_argument("--out", required=True, help="markdown result file (a .json beside it holds the raw times)")
    p.add_argument("--label", default="")
    a = p.parse_args()
    shape = (8, 8, 1) if a.kind == "tiny" else (32, 32, 3)
    rng = np.random.default_rng(0)
    x = rng.random((a.steps * a.batch, *shape), dtype=np.float32)
    y = rng.integers(0, 10, a.steps * a.batch)
    model = model_for(a.kind, shape)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    blocks = a.blocks - a.blocks % 2
    plan = [True] * a.warmup + schedule(blocks)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        sampler = None if a.no_sampler else start_sampler(run_dir)
        gate, watch = Gate(plan, sampler), Stopwatch()
        inner = ScaldiagCallback(run_dir=run_dir, trace_steps=0, sample=False, quiet=True, input_ceiling_s=0)
        inner.set_fit_arguments(x, a.batch)  # what `scaldiag profile`'s fit hook hands it
        callbacks = [gate, WatchBegin(watch), Forward(inner, gate, hooks=not a.no_hooks), WatchEnd(watch)]
        t0 = time.perf_counter()
        model.fit(x, y, batch_size=a.batch, epochs=len(plan), verbose=0, callbacks=callbacks)
        wall_s = time.perf_counter() - t0
        sampler_stats = stop_sampler(sampler) if sampler else "none"
        recorded = sum(1 for _ in open(run_dir / "steps.jsonl"))
        gpu_rows = sum(1 for _ in open(run_dir / "gpu_samples.jsonl")) if (run_dir / "gpu_samples.jsonl").exists() else 0
    times, timed_plan = watch.epochs[a.warmup:], plan[a.warmup:]
    ratios = paired_ratios(times, timed_plan)
    stats = interval(ratios)
    on = [t for t, active in zip(times, timed_plan) if active]
    off = [t for t, active in zip(times, timed_plan) if not active]
    result = {"kind": a.kind, "backend": keras.backend.backend(), "steps": a.steps, "batch": a.batch,
              "blocks": blocks, "warmup": a.warmup, "sampler": not a.no_sampler, "hooks": not a.no_hooks,
              "times_s": times, "plan": timed_plan,
              "ratios": ratios, **stats, "steps_recorded": recorded, "gpu_sample_rows": gpu_rows,
              "sampler_stats": sampler_stats, "wall_s": wall_s}
    Path(a.out).with_suffix(".json").write_text(json.dumps(result, indent=1))
    write(a, result, on, off)


def write(a, r: dict, on: list[float], off: list[float]) -> None:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    samples = a.steps * a.batch
    lines = [
        f"# Capture overhead in one process, alternating epochs {a.label} ({stamp})", "",
        f"Machine: {platform.node()}, {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"Keras {keras.__version__} on {r['backend']}.",
        f"Command: `python bench/capture_overhead_blocks.py {' '.join(sys.argv[1:])}`.",
        f"Model `{a.kind}`, {a.steps} steps of batch {a.batch} per epoch; {a.warmup} warm-up epochs untimed, then "
        f"{r['blocks']} timed epochs in {r['pairs']} on/off pairs (ABBA order). On: "
        + ("ScaldiagCallback's step and epoch hooks" if r["hooks"] else "no hooks (sampler only)")
        + (" and the sampler process (NVML + psutil) running" if r["sampler"] else " (no sampler process)")
        + "; off: gate closed" + (", sampler process stopped (SIGSTOP)." if r["sampler"] else "."),
        f"Steps recorded in on blocks (and warm-up): {r['steps_recorded']}; GPU sample rows written: {r['gpu_sample_rows']}; "
        f"sampler: {r['sampler_stats']}.", "",
        "| blocks | epoch time, median (min-max) | samples/s (median) |", "|---|---|---|",
        f"| capture on ({len(on)}) | {statistics.median(on) * 1e3:.1f} ms ({min(on) * 1e3:.1f}-{max(on) * 1e3:.1f}) | "
        f"{samples / statistics.median(on):,.0f} |",
        f"| capture off ({len(off)}) | {statistics.median(off) * 1e3:.1f} ms ({min(off) * 1e3:.1f}-{max(off) * 1e3:.1f}) | "
        f"{samples / statistics.median(off):,.0f} |", "",
        f"Time ratio on/off, geometric mean of {r['pairs']} paired ratios: **{r['ratio']:.4f}**, 95% interval "
        f"[{r['t_low']:.4f}, {r['t_high']:.4f}] (Student t on log ratios); bootstrap 95% [{r['boot_low']:.4f}, "
        f"{r['boot_high']:.4f}]. Median pair ratio {r['median_ratio']:.4f}, bootstrap 95% [{r['median_low']:.4f}, "
        f"{r['median_high']:.4f}] (robust to bursts from other work on the machine). "
        f"Pair ratios min-max {min(r['ratios']):.3f}-{max(r['ratios']):.3f}.",
        f"Target: capture overhead at most 1% (ratio <= {TARGET_RATIO}): {verdict(r)}.", ""]
    text = "\n".join(lines)
    Path(a.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
