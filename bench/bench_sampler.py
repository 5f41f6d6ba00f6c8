"""Benchmark: the NVML sampler's CPU use, in % of one core, for 1..N GPUs.

On the GPU machine, with the real NVML (only numpy, psutil and nvidia-ml-py
needed, PYTHONPATH at the checkout):

    python3 bench/bench_sampler.py --seconds 10 --out bench/results/gpu_h200x2/sampler_cpu.md

Anywhere, with the fake NVML of the tests (it costs nothing per call, so
what is left is the sampler's own Python and its wake-ups):

    python3 bench/bench_sampler.py --fake 8 --seconds 5 --out /tmp/sampler.md

Two variants run side by side, alternating within each round so machine
noise hits both: ``current`` (scaldiag.collect.nvml.NvmlSampler, which
works out once what each tick of the cycle reads) and ``previous`` (the same
sampler with the tick as it was before issue 12: the due reads worked out
per GPU and tick). Reported per variant and GPU count: the sampler thread's
CPU time over wall time (thread_time), ticks per second, rows per second,
and the thread's context switches per second (its wake-ups; Linux /proc).
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
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scaldiag.collect.nvml import _UINT32_TYPE, NvmlSampler, _field_value  # noqa: E402
from scaldiag.collect.samplers import FLUSH_EVERY_ROWS, FLUSH_MAX_DELAY_S  # noqa: E402
from scaldiag.record.rundir import JsonlWriter  # noqa: E402


class PreviousNvmlSampler(NvmlSampler):
    """The tick as it was before issue 12, for the side-by-side comparison."""

    def _tick(self) -> None:
        t_ns = time.time_ns()
        tick = self._tick_count
        self._tick_count += 1
        for index, handle in zip(self.indices, self._handles):
            row = {"t_ns": t_ns, "gpu": index}
            row.update(self._previous_fields(index, handle, tick))
            for key, (read, every) in list(self._calls.items()):
                if tick % every:
                    continue
                try:
                    row[key] = read(handle)
                except Exception as exc:
                    self.missing.append(f"{key}: {type(exc).__name__}: {exc}")
                    del self._calls[key]
            self._writer.write(row)

    def _previous_fields(self, index: int, handle, tick: int) -> dict:
        due = [key for key, (_, every) in self._fields.items() if tick % every == 0]
        if not due:
            return {}
        try:
            values = self.nvml.nvmlDeviceGetFieldValues(handle, [self._fields[k][0] for k in due])
        except Exception as exc:
            self.missing.append(f"field values: {type(exc).__name__}: {exc}")
            self._fields = {}
            return {}
        row = {}
        for key, value in zip(due, values):
            if value.nvmlReturn != 0:
                self.missing.append(f"{key}: not supported here (NVML return {value.nvmlReturn})")
                self._fields.pop(key, None)
                continue
            number = _field_value(value)
            if value.valueType == _UINT32_TYPE and key.endswith("_bytes"):
                number = self._unwrap(index, key, number)
            row[key] = number
        return row


VARIANTS = {"current": NvmlSampler, "previous": PreviousNvmlSampler}


def _switches(tid: int | None) -> int | None:
    """Voluntary + involuntary context switches of one thread (Linux), else None."""
    try:
        text = Path(f"/proc/self/task/{tid}/status").read_text()
    except (OSError, TypeError):
        return None
    return sum(int(line.split()[1]) for line in text.splitlines() if "ctxt_switches:" in line)


def measure(nvml, variant: str, indices: list[int], seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        writer = JsonlWriter(Path(tmp) / "gpu.jsonl", FLUSH_EVERY_ROWS, FLUSH_MAX_DELAY_S)
        sampler = VARIANTS[variant](nvml, writer, indices)
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
    return {"variant": variant, "gpus": len(indices), "cpu_pct": 100 * periodic.cpu_s / max(periodic.wall_s, 1e-9),
            "ticks_per_s": ticks / elapsed, "rows_per_s": rows / periodic.wall_s,
            "switches_per_s": (after - before) / elapsed if before is not None and after is not None else None,
            "missing": sampler.missing}


def gpu_counts(total: int) -> list[int]:
    counts, n = [], 1
    while n < total:
        counts.append(n)
        n *= 2
    return counts + [total]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fake", type=int, metavar="N", help="the tests' fake NVML with N GPUs (no GPU needed)")
    parser.add_argument("--gpus", help="GPU counts to measure, e.g. 1,2,8 (default: 1, 2, 4, ... all)")
    parser.add_argument("--out", required=True, help="markdown result file")
    args = parser.parse_args()
    if args.fake:
        sys.path.insert(0, str(ROOT / "tests"))
        from fake_nvml import FakeNvml

        nvml, source = FakeNvml(gpus=args.fake), f"fake NVML (tests/fake_nvml.py), {args.fake} GPUs"
    else:
        import pynvml

        pynvml.nvmlInit()
        nvml = pynvml
        source = (f"real NVML: {pynvml.nvmlDeviceGetCount()} x {_text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)))}, "
                  f"driver {_text(pynvml.nvmlSystemGetDriverVersion())}")
    total = nvml.nvmlDeviceGetCount()
    counts = sorted({min(int(c), total) for c in args.gpus.split(",")}) if args.gpus else gpu_counts(total)
    results = []
    for r in range(args.rounds):
        for n in counts:
            order = list(VARIANTS) if r % 2 == 0 else list(VARIANTS)[::-1]
            for variant in order:
                row = measure(nvml, variant, list(range(n)), args.seconds)
                results.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "missing"}), flush=True)
    write(args, source, counts, results)


def write(args, source: str, counts: list[int], results: list[dict]) -> None:
    def med(rows, key):
        values = [r[key] for r in rows if r[key] is not None]
        return statistics.median(values) if values else float("nan")

    lines = [f"# NVML sampler CPU use ({date.today().isoformat()})", "",
             f"Machine: {platform.node()}, {platform.machine()}, {os.cpu_count()} cores, "
             f"Python {platform.python_version()}; {source}.",
             f"Command: `python3 bench/bench_sampler.py {' '.join(sys.argv[1:])}`. "
             f"{args.rounds} rounds of {args.seconds:g} s per variant and GPU count, variants alternating.", "",
             "| GPUs | variant | CPU % of one core (median, min-max) | ticks/s | rows/s | thread switches/s |",
             "|---|---|---|---|---|---|"]
    for n in counts:
        for variant in VARIANTS:
            rows = [r for r in results if r["gpus"] == n and r["variant"] == variant]
            if not rows:
                continue
            cpu = [r["cpu_pct"] for r in rows]
            lines.append(f"| {n} | {variant} | {med(rows, 'cpu_pct'):.2f} ({min(cpu):.2f}-{max(cpu):.2f}) | "
                         f"{med(rows, 'ticks_per_s'):.1f} | {med(rows, 'rows_per_s'):.0f} | "
                         f"{med(rows, 'switches_per_s'):.0f} |")
    ratios = []
    for n in counts:
        cur = [r["cpu_pct"] for r in results if r["gpus"] == n and r["variant"] == "current"]
        prev = [r["cpu_pct"] for r in results if r["gpus"] == n and r["variant"] == "previous"]
        if cur and prev:
            ratios.append(f"{n} GPU{'s' if n > 1 else ''}: {statistics.median(cur) / statistics.median(prev):.2f}")
    missing = sorted({m for r in results for m in r["missing"]})
    lines += ["", f"CPU ratio current/previous (medians): {', '.join(ratios)}.",
              f"Reads dropped as unsupported: {', '.join(missing) if missing else 'none'}.", ""]
    text = "\n".join(lines)
    Path(args.out).write_text(text)
    print(text)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
