"""The statistics and the sampler process of the in-process capture-overhead benchmarks,
framework-free.

Used by bench/overhead/run.py (Keras) and bench/overhead_torch/run.py (PyTorch): a run is a plan of
blocks, ``off`` between every two arm blocks (``schedule``); each arm block is compared with the two
``off`` blocks around it, r = log t_arm - (log t_before + log t_after) / 2, which cancels a linear
drift (``comparisons``); ``interval`` gives the geometric mean ratio with a Student-t and a
batch-means 95% interval (the wider decides the target: ``verdict``), a bootstrap and the median.
"""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


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


def schedule(arms: list[str], cycles: int, seed: int = 0) -> list[str]:
    """off, X, off, Y, ... off: each cycle every arm (as often as named), shuffled so that no two
    blocks of an arm are next to one another (they would share an ``off`` neighbour)."""
    rng = random.Random(seed)
    plan, last = [], None
    for _ in range(cycles):
        order = list(arms)
        for _ in range(1000):  # an arm named twice (more blocks for it) never twice in a row
            rng.shuffle(order)
            if all(a != b for a, b in zip([last, *order], order)):
                break
        for arm in order:
            plan += ["off", arm]
        last = order[-1]
    return plan + ["off"]


def start_sampler(run_dir: Path) -> subprocess.Popen:
    child = subprocess.Popen(
        [sys.executable, "-c", SAMPLER_CHILD, str(run_dir), str(os.getpid()), str(ROOT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    print(child.stdout.readline().strip(), flush=True)
    return child


def stop_sampler(child: subprocess.Popen) -> str:
    os.kill(child.pid, signal.SIGCONT)
    out, _ = child.communicate("", timeout=30)
    return out.strip()


def t95(df: int) -> float:
    table = {
        1: 12.706,
        2: 4.303,
        3: 3.182,
        4: 2.776,
        5: 2.571,
        6: 2.447,
        7: 2.365,
        8: 2.306,
        9: 2.262,
        10: 2.228,
        12: 2.179,
        15: 2.131,
        20: 2.086,
        25: 2.060,
        30: 2.042,
        40: 2.021,
        60: 2.000,
        120: 1.980,
    }
    keys = sorted(k for k in table if k <= df)
    return table[keys[-1]] if keys else 12.706


def comparisons(times: list[float], plan: list[str], arm: str) -> tuple[np.ndarray, np.ndarray]:
    """Per block of ``arm``: log(t / the off neighbours' geometric mean), and t minus their mean
    (s)."""
    logs, diffs = [], []
    for i, name in enumerate(plan[: len(times)]):
        if name == arm and i + 1 < len(times):
            before, after = times[i - 1], times[i + 1]
            logs.append(math.log(times[i]) - (math.log(before) + math.log(after)) / 2)
            diffs.append(times[i] - (before + after) / 2)
    return np.asarray(logs), np.asarray(diffs)


def carry_over(times: list[float], plan: list[str]) -> dict:
    """Per arm: the ``off`` blocks right after it, each against the ``off`` blocks two places away.
    """
    out = {}
    for arm in dict.fromkeys(name for name in plan if name != "off"):
        logs = [
            math.log(times[i]) - (math.log(times[i - 2]) + math.log(times[i + 2])) / 2
            for i in range(2, len(times) - 2)
            if plan[i] == "off" and plan[i - 1] == arm
        ]
        if len(logs) > 2:
            out[arm] = interval(np.asarray(logs), np.zeros(len(logs)), 0)
    return out


def against_clean_off(times: list[float], plan: list[str], carrying: set[str]) -> dict:
    """Per arm: each block against the nearest ``off`` blocks before and after it that follow no arm
    in
    ``carrying`` (the arms a carry-over check flagged). A second look at a run, not its design."""
    logt = np.log(np.asarray(times))
    clean = np.asarray(
        [i for i in range(1, len(times)) if plan[i] == "off" and plan[i - 1] not in carrying]
    )
    out = {}
    for arm in [*dict.fromkeys(name for name in plan if name != "off"), "off"]:
        logs = []
        for i in range(1, len(times)):
            if plan[i] != arm or (arm == "off" and plan[i - 1] not in carrying):
                continue
            before, after = clean[clean < i], clean[clean > i]
            if len(before) and len(after):
                logs.append(logt[i] - (logt[before[-1]] + logt[after[0]]) / 2)
        if len(logs) > 2:
            out[arm if arm != "off" else "off after " + "/".join(sorted(carrying))] = interval(
                np.asarray(logs), np.zeros(len(logs)), 0
            )
    return out


def interval(
    logs: np.ndarray, diffs: np.ndarray, block_steps: int, resamples: int = 10000, seed: int = 0
) -> dict:
    n = len(logs)
    mean, sd = float(logs.mean()), float(logs.std(ddof=1))
    half = t95(n - 1) * sd / math.sqrt(n)
    rng = np.random.default_rng(seed)
    draws = logs[rng.integers(0, n, (resamples, n))]
    boot, boot_median = draws.mean(axis=1), np.median(draws, axis=1)
    d_mean, d_half = float(diffs.mean()), t95(n - 1) * float(diffs.std(ddof=1)) / math.sqrt(n)
    per_step = 1e6 / block_steps if block_steps else float("nan")
    bm_low, bm_high = batch_means(logs)
    return {
        "blocks": n,
        "ratio": math.exp(mean),
        "t_low": math.exp(mean - half),
        "t_high": math.exp(mean + half),
        "bm_low": bm_low,
        "bm_high": bm_high,
        "boot_low": float(np.exp(np.percentile(boot, 2.5))),
        "boot_high": float(np.exp(np.percentile(boot, 97.5))),
        "median_ratio": float(np.exp(np.median(logs))),
        "median_low": float(np.exp(np.percentile(boot_median, 2.5))),
        "median_high": float(np.exp(np.percentile(boot_median, 97.5))),
        "log_sd": sd,
        "extra_us_per_step": d_mean * per_step,
        "extra_us_low": (d_mean - d_half) * per_step,
        "extra_us_high": (d_mean + d_half) * per_step,
        "above_off": int((logs > 0).sum()),
    }


BATCHES = 10


def batch_means(logs: np.ndarray, batches: int = BATCHES) -> tuple[float, float]:
    """The 95% interval of the ratio from the means of ``batches`` runs of consecutive comparisons.

    Comparisons next to each other share drift (and an ``off`` block), which the per-comparison t
    interval takes as independent: on the H200 two runs of the same arm gave t intervals that did
    not overlap ([0.9894, 1.0025] and [1.0012, 1.0135]; batch means [0.9869, 1.0051] and [0.9993,
    1.0154]: bench/results/gpu_h200/overhead_pieces/overhead.md#capture_overhead_attributionmd).
    Batch means hold that correlation.
    """
    if len(logs) < 2 * batches:
        return float("nan"), float("nan")
    means = np.array([part.mean() for part in np.array_split(logs, batches)])
    half = t95(batches - 1) * float(means.std(ddof=1)) / math.sqrt(batches)
    return math.exp(float(means.mean()) - half), math.exp(float(means.mean()) + half)


def verdict(stats: dict) -> str:
    """Against the target, on the wider of the t and batch-means intervals."""
    bm_high, bm_low = stats.get("bm_high", math.nan), stats.get("bm_low", math.nan)
    # (batch means need 2 x BATCHES comparisons; without them, NaN: the t interval alone)
    high = stats["t_high"] if math.isnan(bm_high) else max(stats["t_high"], bm_high)
    low = stats["t_low"] if math.isnan(bm_low) else min(stats["t_low"], bm_low)
    if high <= TARGET_RATIO:
        return "met"
    if low > TARGET_RATIO:
        return "not met"
    return "undecided"


def arm_stats(
    times: list[float], cpu_times: list[float], plan: list[str], arms: list[str], block_steps: int
) -> dict:
    """``stats`` (wall time) and ``cpu_stats`` (the training thread's CPU time): ``interval`` per
    arm."""
    out = {"stats": {}, "cpu_stats": {}}
    for arm in dict.fromkeys(arms):
        out["stats"][arm] = interval(*comparisons(times, plan, arm), block_steps)
        out["cpu_stats"][arm] = interval(*comparisons(cpu_times, plan, arm), block_steps)
    return out


def arm_tables(r: dict) -> list[str]:
    """Markdown: the arms against ``off`` (wall and CPU time) and the carry-over check, of a result
    with
    ``arms``, ``plan``, ``times_s``, ``gc_runs``, ``stats`` and ``cpu_stats``."""
    lines = [
        (
            "| arm (on in it) | blocks | time ratio to off, geometric mean [95% t] | batch means"
            f" 95% ({BATCHES} batches) | bootstrap 95% | median [bootstrap 95%] | extra per step,"
            " us [95% t] | blocks above off | GC runs | 1% target (wider interval) |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in dict.fromkeys(r["arms"]):
        s = r["stats"][arm]
        gc_runs = sum(g for g, name in zip(r["gc_runs"], r["plan"]) if name == arm)
        lines.append(
            f"| {arm} | {s['blocks']} | **{s['ratio']:.4f}** [{s['t_low']:.4f}, {s['t_high']:.4f}]"
            f" | [{s['bm_low']:.4f}, {s['bm_high']:.4f}] | [{s['boot_low']:.4f},"
            f" {s['boot_high']:.4f}] | {s['median_ratio']:.4f} [{s['median_low']:.4f},"
            f" {s['median_high']:.4f}] | {s['extra_us_per_step']:.2f} [{s['extra_us_low']:.2f},"
            f" {s['extra_us_high']:.2f}] | {s['above_off']} of {s['blocks']} | {gc_runs} |"
            f" {verdict(s)} |"
        )
    lines += [
        "",
        "Per-comparison spread (sd of the log ratios): "
        + ", ".join(f"{arm} {r['stats'][arm]['log_sd']:.4f}" for arm in dict.fromkeys(r["arms"]))
        + ".",
        "",
        (
            "The training thread's CPU time in the same blocks (time.thread_time; what capture adds"
            " to the thread that drives the steps, not wall time):"
        ),
        "",
        "| arm | CPU time ratio to off [95% t] | extra CPU per step, us [95% t] |",
        "|---|---|---|",
    ]
    for arm in dict.fromkeys(r["arms"]):
        c = r["cpu_stats"][arm]
        lines.append(
            f"| {arm} | {c['ratio']:.4f} [{c['t_low']:.4f}, {c['t_high']:.4f}] |"
            f" {c['extra_us_per_step']:.2f} [{c['extra_us_low']:.2f}, {c['extra_us_high']:.2f}] |"
        )
    lines += [
        "",
        (
            "Carry-over check: each `off` block against the `off` blocks around it, by the arm that"
            " ran just before it (an arm whose effect outlasts its block shows here, and biases the"
            " ratios above):"
        ),
        "",
        "| off after | blocks | time ratio to its off neighbours [95% t] |",
        "|---|---|---|",
    ]
    for arm, s in carry_over(r["times_s"], r["plan"]).items():
        lines.append(
            f"| {arm} | {s['blocks']} | {s['ratio']:.4f} [{s['t_low']:.4f}, {s['t_high']:.4f}] |"
        )
    lines.append("")
    return lines
