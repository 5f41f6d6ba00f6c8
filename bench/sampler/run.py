"""The NVML sampler costs a small fraction of one core: a fixed part and a part per GPU
(docs/profile.md).

On the GPU machine, with the real NVML (only numpy, psutil and nvidia-ml-py needed, PYTHONPATH at
the checkout):

    python3 -m bench sampler --seconds 5 --rounds 3 --gpus 1,2,4,8

With fewer real GPUs than asked for, the extra GPUs are the real GPU 0 read again under another
index (``RepeatedGpu``): every read is a real NVML call with its real cost, but 8 real GPUs were not
there, so driver contention between GPUs is not in the number. Anywhere, with the fake NVML of the
tests (it costs next to nothing per call, so what is left is the sampler's own Python and wake-ups):

    python3 -m bench sampler --fake 8 --seconds 5 --rounds 3

The sampler measured is scaldiag.collect.nvml.NvmlSampler with scaldiag.record.rundir.JsonlWriter.
(The 100 Hz sampler and per-row writer before issue 12 ran beside it until the frozen copy was
removed: ``git show 227e679:bench/sampler_previous.py``; its results, current against previous, are
bench/results/gpu_h200/sampler.md and, on the fake NVML, ``git show
8678b07:bench/results/sampler_fake_nvml.md``.) Reported per GPU count: the sampler thread's CPU time
over its wall time (thread_time: user and system time of that thread alone), ticks and rows per
second, the thread's context switches per second (its wake-ups; Linux /proc); then a least-squares
line CPU % = fixed + per GPU x GPUs through the medians, and per-call CPU costs of each read (real
NVML).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.common import record, show

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scaldiag.collect.nvml import NvmlSampler  # noqa: E402
from scaldiag.collect.samplers import FLUSH_EVERY_ROWS, FLUSH_MAX_DELAY_S  # noqa: E402
from scaldiag.record.rundir import JsonlWriter  # noqa: E402

VARIANTS = {"current": (NvmlSampler, JsonlWriter)}


class RepeatedGpu:
    """The real NVML module, showing ``gpus`` GPUs that are all GPU 0 (real calls, real costs)."""

    def __init__(self, nvml, gpus: int):
        for name in dir(nvml):
            if name.startswith(("nvml", "NVML")):
                setattr(self, name, getattr(nvml, name))
        self._gpus = gpus
        self._handle = nvml.nvmlDeviceGetHandleByIndex(0)
        self.nvmlDeviceGetCount = lambda: self._gpus
        self.nvmlDeviceGetHandleByIndex = lambda i: self._handle


def _switches(tid: int | None) -> int | None:
    """Voluntary + involuntary context switches of one thread (Linux), else None."""
    try:
        text = Path(f"/proc/self/task/{tid}/status").read_text()
    except (OSError, TypeError):
        return None
    return sum(int(line.split()[1]) for line in text.splitlines() if "ctxt_switches:" in line)


def measure(nvml, variant: str, gpus: int, seconds: float) -> dict:
    sampler_cls, writer_cls = VARIANTS[variant]
    with tempfile.TemporaryDirectory() as tmp:
        writer = writer_cls(Path(tmp) / "gpu.jsonl", FLUSH_EVERY_ROWS, FLUSH_MAX_DELAY_S)
        sampler = sampler_cls(nvml, writer, list(range(gpus)))
        periodic = sampler.sampler
        periodic.start()
        time.sleep(0.05)
        tid = periodic._thread.native_id
        before = _switches(tid)
        t0, ticks0 = time.perf_counter(), periodic.ticks
        time.sleep(seconds)
        after = _switches(tid)
        elapsed, ticks = time.perf_counter() - t0, periodic.ticks - ticks0
        periodic.stop()
        writer.close()
        rows = sum(1 for _ in open(Path(tmp) / "gpu.jsonl"))
    return {
        "variant": variant,
        "gpus": gpus,
        "cpu_pct": 100 * periodic.cpu_s / max(periodic.wall_s, 1e-9),
        "ticks_per_s": ticks / elapsed,
        "rows_per_s": rows / periodic.wall_s,
        "switches_per_s": (
            (after - before) / elapsed if before is not None and after is not None else None
        ),
        "missing": sampler.missing,
    }


def call_costs(nvml) -> dict[str, float]:
    """CPU ms per call of each read the samplers make, on GPU 0 (thread_time over 100 calls)."""
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    pcie = [(nvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0), (nvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0)]
    power = [(nvml.NVML_FI_DEV_POWER_INSTANT, 0)]
    throttle = [
        (getattr(nvml, n), 0)
        for n in (
            "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP",
            "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN",
            "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN",
            "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN",
        )
        if hasattr(nvml, n)
    ]
    reads = {
        "SM clock": lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
        "memory info": lambda: nvml.nvmlDeviceGetMemoryInfo(h),
        "clocks-event reasons": lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(h),
        "utilisation": lambda: nvml.nvmlDeviceGetUtilizationRates(h),
        "field values: power": lambda: nvml.nvmlDeviceGetFieldValues(h, power),
        "field values: PCIe TX+RX": lambda: nvml.nvmlDeviceGetFieldValues(h, pcie),
        "field values: PCIe TX+RX + power": lambda: nvml.nvmlDeviceGetFieldValues(h, pcie + power),
        "field values: 4 throttle counters": lambda: nvml.nvmlDeviceGetFieldValues(h, throttle),
    }
    out = {}
    for name, fn in reads.items():
        fn()
        c = time.thread_time()
        for _ in range(100):
            fn()
        out[name] = (time.thread_time() - c) / 100 * 1e3
    return out


def line_fit(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """Least squares y = a + b x: (fixed, per GPU)."""
    if len({x for x, _ in points}) < 2:
        return None
    mx, my = statistics.mean(x for x, _ in points), statistics.mean(y for _, y in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - b * mx, b


def _main(argv: list[str]) -> int | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--fake", type=int, metavar="N", help="the tests' fake NVML with N GPUs (no GPU needed)"
    )
    parser.add_argument(
        "--pcie-bytes-per-s",
        type=float,
        default=None,
        help="with --fake: the fake's PCIe traffic (default the fake's 1 GB/s)",
    )
    parser.add_argument("--gpus", default="1,2,4,8", help="GPU counts to measure")
    parser.add_argument(
        "--out", help="also write the table here (it always goes to bench/results/sampler.md)"
    )
    args = parser.parse_args(argv)
    counts = sorted({int(c) for c in args.gpus.split(",")})
    costs = None
    if not args.fake and not _nvml_here():
        # On a machine without NVML (make bench on the CPU), the fake: what is left is the sampler's
        # own cost.
        print("no NVML on this machine: the tests' fake NVML instead (--fake)")
        args.fake = max(counts)
    if args.fake:
        sys.path.insert(0, str(ROOT / "tests"))
        from fake_nvml import FakeNvml

        extra = (
            {"pcie_bytes_per_s": args.pcie_bytes_per_s} if args.pcie_bytes_per_s is not None else {}
        )
        nvml = FakeNvml(gpus=max(counts), **extra)
        source = f"fake NVML (tests/fake_nvml.py), {max(counts)} GPUs" + (
            f", PCIe traffic {args.pcie_bytes_per_s / 1e9:g} GB/s"
            if extra
            else ", PCIe traffic 1 GB/s"
        )
    else:
        import pynvml

        pynvml.nvmlInit()
        real = pynvml.nvmlDeviceGetCount()
        name = _text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)))
        source = (
            f"real NVML: {real} x {name}, driver {_text(pynvml.nvmlSystemGetDriverVersion())}, "
            f"nvidia-ml-py {_version('nvidia-ml-py')}"
        )
        if max(counts) > real:
            source += (
                f"; {real} real GPU{'s' if real > 1 else ''}: the counts above {real} read GPU 0"
                " again under other indices (real calls and costs; 8 real GPUs were not available)"
            )
            nvml = RepeatedGpu(pynvml, max(counts))
        else:
            nvml = pynvml
        costs = call_costs(pynvml)
    results = []
    for r in range(args.rounds):
        for n in counts:
            order = list(VARIANTS) if (r + n) % 2 == 0 else list(VARIANTS)[::-1]
            for variant in order:
                row = measure(nvml, variant, n, args.seconds)
                results.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "missing"}), flush=True)
    write(args, source, counts, results, costs)


def write(args, source: str, counts: list[int], results: list[dict], costs: dict | None) -> None:
    def med(rows, key):
        values = [r[key] for r in rows if r[key] is not None]
        return statistics.median(values) if values else float("nan")

    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# NVML sampler CPU use ({stamp})",
        "",
        (
            f"Machine: {platform.node()}, {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}; {source}."
        ),
        (
            f"{args.rounds} rounds of {args.seconds:g} s per variant and GPU count, variants"
            " alternating."
        ),
        "",
        (
            "| GPUs | variant | CPU % of one core (median, min-max) | ticks/s | rows/s | thread"
            " switches/s |"
        ),
        "|---|---|---|---|---|---|",
    ]
    medians = {}
    for n in counts:
        for variant in VARIANTS:
            rows = [r for r in results if r["gpus"] == n and r["variant"] == variant]
            if not rows:
                continue
            cpu = [r["cpu_pct"] for r in rows]
            medians[(variant, n)] = statistics.median(cpu)
            lines.append(
                f"| {n} | {variant} | {med(rows, 'cpu_pct'):.2f} ({min(cpu):.2f}-{max(cpu):.2f}) | "
                f"{med(rows, 'ticks_per_s'):.1f} | {med(rows, 'rows_per_s'):.0f} | "
                f"{med(rows, 'switches_per_s'):.0f} |"
            )
    ratios = [
        f"{n} GPU{'s' if n > 1 else ''}: {medians[('current', n)] / medians[('previous', n)]:.2f}"
        for n in counts
        if ("current", n) in medians and ("previous", n) in medians
    ]
    if ratios:
        lines += ["", f"CPU ratio current/previous (medians): {', '.join(ratios)}."]
    for variant in VARIANTS:
        fit = line_fit([(n, medians[(variant, n)]) for n in counts if (variant, n) in medians])
        if fit:
            lines.append(
                f"Line through the medians, {variant}: {fit[0]:.2f}% fixed + {fit[1]:.3f}% per GPU "
                f"(at 8 GPUs: {fit[0] + 8 * fit[1]:.2f}%)."
            )
    missing = sorted({m for r in results for m in r["missing"]})
    lines += [f"Reads dropped as unsupported: {', '.join(missing) if missing else 'none'}.", ""]
    if costs:
        lines += [
            "CPU ms per call on GPU 0 (thread_time over 100 calls):",
            "",
            "| read | CPU ms per call |",
            "|---|---|",
            *[f"| {k} | {v:.4f} |" for k, v in costs.items()],
            "",
        ]
    show(lines, args.out)


def _version(dist: str) -> str:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return "?"


def _nvml_here() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        return True
    except Exception:  # no module, no library, no driver: all mean "no NVML here"
        return False


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def main(argv: list[str]) -> int:
    """``python -m bench sampler [ARGS]``: the run, its output kept as bench/results/sampler.md."""
    threading.current_thread().name = "bench"
    return record("sampler", __doc__, argv, lambda: _main(argv))
