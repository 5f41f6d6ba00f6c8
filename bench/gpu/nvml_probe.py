"""On the GPU machine: what NVML calls cost, which fields read, and the sampler's rate.

    python bench/gpu/nvml_probe.py OUT_DIR

Writes OUT_DIR/nvml_probe.json and prints a summary. Real NVML only (no fake).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import pynvml

from scaldiag.collect.nvml import ALL_LINKS, NvmlSampler
from scaldiag.record.rundir import JsonlWriter, read_jsonl


def per_call_ms(fn, n=50) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e3


def main() -> None:
    out = Path(sys.argv[1])
    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    fields = [
        (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0),
        (pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0),
        (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS),
        (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS),
        (pynvml.NVML_FI_DEV_POWER_INSTANT, 0),
    ]
    result = {
        "gpus": count,
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "call_ms": {
            "field_values_5": per_call_ms(lambda: pynvml.nvmlDeviceGetFieldValues(h, fields)),
            "utilization_rates": per_call_ms(lambda: pynvml.nvmlDeviceGetUtilizationRates(h), 20),
            "memory_info": per_call_ms(lambda: pynvml.nvmlDeviceGetMemoryInfo(h)),
            "clock_sm": per_call_ms(lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
            "clocks_event_reasons": per_call_ms(
                lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
            ),
        },
    }
    # Which NVLink scopes answer: all links at once, or per link.
    scopes = {}
    for label, scope in [("all_links", ALL_LINKS), *[(f"link{i}", i) for i in range(0, 18, 6)]]:
        v = pynvml.nvmlDeviceGetFieldValues(
            h, [(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, scope)]
        )[0]
        scopes[label] = {
            "return": v.nvmlReturn,
            "value_kib": v.value.ullVal if v.nvmlReturn == 0 else None,
        }
    result["nvlink_tx_scopes"] = scopes
    # The sampler itself, idle GPUs, 4 s, on 1 GPU and on all.
    rates = {}
    for label, indices in [("1 gpu", [0]), (f"{count} gpus", list(range(count)))]:
        with tempfile.TemporaryDirectory() as tmp:
            writer = JsonlWriter(Path(tmp) / "s.jsonl", 200)
            sampler = NvmlSampler(pynvml, writer, indices)
            sampler.sampler.start()
            time.sleep(4.0)
            sampler.sampler.stop()
            writer.close()
            rows = read_jsonl(Path(tmp) / "s.jsonl")
            rates[label] = {
                "per_gpu_hz": round(len(rows) / len(indices) / sampler.sampler.wall_s, 1),
                "cpu_pct_of_one_core": round(
                    100 * sampler.sampler.cpu_s / sampler.sampler.wall_s, 2
                ),
                "missing": sampler.missing,
                "example_row": rows[len(rows) // 2] if rows else None,
            }
    result["sampler"] = rates
    everything = NvmlSampler(
        pynvml, JsonlWriter(Path(tempfile.mkdtemp()) / "s.jsonl"), list(range(count))
    )
    result["inventory"] = everything.inventory()
    result["topology"] = everything.topology()
    result["inventory_missing"] = everything.missing
    (out / "nvml_probe.json").write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    main()
