"""Check, on real GPUs, that a profiled run's NVML samples rise during training.

    python bench/gpu/check_nvml_real.py RUN_DIR [RUN_DIR ...]

Baseline: samples taken before the first training step (imports, model
building). Training: the steady-state window. For every sampled GPU that
trained, utilisation, memory used and PCIe bytes received must be higher in
training. Exit code 1 if any check fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from scaldiag.analyze.run import counter_rate, step_stats, within
from scaldiag.record.reader import read_steps
from scaldiag.record.rundir import read_json, read_jsonl


def check(run_dir: Path) -> bool:
    steps = read_steps(run_dir / "steps.jsonl")
    stats = step_stats(steps, read_json(run_dir, "training.json"))
    samples = read_jsonl(run_dir / "gpu_samples.jsonl")
    first = steps[0]["begin_ns"]
    lo, hi = stats.window_ns
    ok = True
    print(
        f"{run_dir.name}: {len(samples)} samples, {stats.steady} steady steps, "
        f"{stats.samples_per_s:,.0f} samples/s"
    )
    for gpu in sorted({r["gpu"] for r in samples}):
        rows = [r for r in samples if r["gpu"] == gpu]
        before = [r for r in rows if r["t_ns"] < first]
        during = within(rows, (lo, hi))
        util_b = np.mean([r["util_pct"] for r in before if "util_pct" in r] or [np.nan])
        util_d = np.mean([r["util_pct"] for r in during if "util_pct" in r] or [np.nan])
        mem_b = min([r["mem_used_bytes"] for r in before if "mem_used_bytes" in r] or [np.nan])
        mem_d = max([r["mem_used_bytes"] for r in during if "mem_used_bytes" in r] or [np.nan])
        rx_b, rx_d = counter_rate(before, "pcie_rx_bytes"), counter_rate(during, "pcie_rx_bytes")
        checks = {
            "utilisation rises": util_d > util_b,
            "memory used rises": mem_d > mem_b,
            "PCIe RX bytes/s rises": (rx_d or 0) > (rx_b or 0),
        }
        print(
            f"  GPU {gpu}: {len(before)} samples before training, {len(during)} during; util"
            f" {util_b:.1f}% -> {util_d:.1f}%, memory {mem_b / 2**30:.2f} -> {mem_d / 2**30:.2f}"
            f" GiB, PCIe RX {(rx_b or 0) / 1e6:.1f} -> {(rx_d or 0) / 1e6:.1f} MB/s, NVLink TX"
            f" during {(counter_rate(during, 'nvlink_tx_kib', 1024) or 0) / 1e6:.1f} MB/s"
        )
        for name, passed in checks.items():
            print(f"    {'PASS' if passed else 'FAIL'} {name}")
            ok &= bool(passed)
    return ok


if __name__ == "__main__":
    results = [check(Path(p)) for p in sys.argv[1:]]
    sys.exit(0 if results and all(results) else 1)
