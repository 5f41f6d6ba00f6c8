"""On the GPU machine: what the sampler's NVML reads cost in CPU, and what NVML's own sample buffers hold.

    python3 bench/gpu/nvml_sampling_probe.py OUT_DIR

Writes OUT_DIR/nvml_sampling_probe.json. Measured, per read on GPU 0: wall and CPU (thread_time)
milliseconds per call; for nvmlDeviceGetSamples (power, utilisation, SM and memory clock buffers):
how many samples a 100 ms poll returns while the GPU is busy (a torch matmul loop in a child
process), the spacing of their timestamps and how those timestamps compare with time.time_ns();
the cumulative clocks-event (throttle) duration counters, before and after the load; and the
bare cost of the sampler's wake-ups (a no-op tick) at 100, 20 and 10 Hz. Real NVML only.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pynvml

from scaldiag.collect.sampling import PeriodicSampler

LOAD = ("import torch, time\n"
        "a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\n"
        "end = time.time() + float(__import__('sys').argv[1])\n"
        "while time.time() < end:\n"
        "    for _ in range(20): a @ a\n"
        "    torch.cuda.synchronize(); time.sleep(0.05)\n")  # busy with short idle gaps: clocks and util move


def cost(fn, n=200) -> dict:
    fn()
    w, c = time.perf_counter(), time.thread_time()
    for _ in range(n):
        fn()
    return {"wall_ms": (time.perf_counter() - w) / n * 1e3, "cpu_ms": (time.thread_time() - c) / n * 1e3}


def field_ids(n, names):
    return [(getattr(n, name), 0xFFFFFFFF if "NVLINK" in name else 0) for name in names if hasattr(n, name)]


THROTTLE = ["NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST",
            "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN", "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN",
            "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN"]
SAMPLE_TYPES = {"power": 0, "gpu_util": 1, "mem_util": 2, "sm_clock": 5, "mem_clock": 6}


def fields_now(n, h, names) -> dict:
    out = {}
    for name, v in zip(names, n.nvmlDeviceGetFieldValues(h, field_ids(n, names))):
        member = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")[v.valueType] if v.valueType < 7 else "ullVal"
        out[name] = {"return": v.nvmlReturn, "type": v.valueType,
                     "value": getattr(v.value, member) if v.nvmlReturn == 0 else None}
    return out


def sample_value(kind, s):
    member = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")[kind] if kind < 7 else "ullVal"
    return getattr(s.sampleValue, member)


def buffers_under_load(n, h, seconds=6.0) -> dict:
    load = subprocess.Popen([sys.executable, "-c", LOAD, str(seconds + 2)])
    time.sleep(2.0)  # CUDA start-up
    last = {k: 0 for k in SAMPLE_TYPES}
    seen = {k: [] for k in SAMPLE_TYPES}
    per_poll = {k: [] for k in SAMPLE_TYPES}
    poll_cpu = {k: [] for k in SAMPLE_TYPES}
    lag_us = {k: [] for k in SAMPLE_TYPES}
    errors = {}
    end = time.time() + seconds
    while time.time() < end:
        for key, kind in SAMPLE_TYPES.items():
            if key in errors:
                continue
            c = time.thread_time()
            try:
                vtype, samples = n.nvmlDeviceGetSamples(h, kind, last[key])
            except pynvml.NVMLError as exc:
                if isinstance(exc, pynvml.NVMLError_NotFound):  # nothing new since last: not an error
                    per_poll[key].append(0)
                    continue
                errors[key] = str(exc)
                continue
            poll_cpu[key].append((time.thread_time() - c) * 1e3)
            fresh = [s for s in samples if s.timeStamp > last[key]]
            per_poll[key].append(len(fresh))
            if fresh:
                last[key] = max(s.timeStamp for s in fresh)
                lag_us[key].append(time.time_ns() // 1000 - last[key])
                seen[key] += [(s.timeStamp, sample_value(vtype, s)) for s in fresh]
        time.sleep(0.1)
    load.wait()
    out = {}
    for key in SAMPLE_TYPES:
        ts = sorted(t for t, _ in seen[key])
        gaps = [b - a for a, b in zip(ts, ts[1:])]
        values = [v for _, v in seen[key]]
        out[key] = {"error": errors.get(key), "samples": len(ts),
                    "per_poll_median": statistics.median(per_poll[key]) if per_poll[key] else None,
                    "spacing_ms_median": statistics.median(gaps) / 1e3 if gaps else None,
                    "spacing_ms_min_max": [min(gaps) / 1e3, max(gaps) / 1e3] if gaps else None,
                    "newest_lag_ms_median": statistics.median(lag_us[key]) / 1e3 if lag_us[key] else None,
                    "poll_cpu_ms_median": statistics.median(poll_cpu[key]) if poll_cpu[key] else None,
                    "value_min_max": [min(values), max(values)] if values else None,
                    "first": seen[key][:5]}
    return out


def wakeups(hz: float, seconds=3.0) -> dict:
    sampler = PeriodicSampler("noop", 1 / hz, lambda: None)
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    return {"hz": hz, "ticks_per_s": sampler.ticks / sampler.wall_s, "cpu_pct": 100 * sampler.cpu_s / sampler.wall_s}


def main() -> None:
    out = Path(sys.argv[1])
    n = pynvml
    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(0)
    pcie = ["NVML_FI_DEV_PCIE_COUNT_TX_BYTES", "NVML_FI_DEV_PCIE_COUNT_RX_BYTES"]
    result = {"driver": n.nvmlSystemGetDriverVersion(), "gpus": n.nvmlDeviceGetCount(),
              "name": n.nvmlDeviceGetName(h), "nvidia_ml_py": getattr(n, "__version__", None)}
    calls = {
        "clock_sm": lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
        "memory_info": lambda: n.nvmlDeviceGetMemoryInfo(h),
        "clocks_event_reasons": lambda: n.nvmlDeviceGetCurrentClocksEventReasons(h),
        "utilization_rates": lambda: n.nvmlDeviceGetUtilizationRates(h),
        "fields_pcie2": lambda: n.nvmlDeviceGetFieldValues(h, field_ids(n, pcie)),
        "fields_power": lambda: n.nvmlDeviceGetFieldValues(h, field_ids(n, ["NVML_FI_DEV_POWER_INSTANT"])),
        "fields_pcie2_power": lambda: n.nvmlDeviceGetFieldValues(h, field_ids(n, pcie + ["NVML_FI_DEV_POWER_INSTANT"])),
        "fields_throttle5": lambda: n.nvmlDeviceGetFieldValues(h, field_ids(n, THROTTLE)),
        "fields_pcie2_throttle5": lambda: n.nvmlDeviceGetFieldValues(h, field_ids(n, pcie + THROTTLE)),
        "fields_energy": lambda: n.nvmlDeviceGetFieldValues(h, field_ids(n, ["NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION"])),
        "power_usage": lambda: n.nvmlDeviceGetPowerUsage(h),
        "total_energy": lambda: n.nvmlDeviceGetTotalEnergyConsumption(h),
    }
    for key, kind in SAMPLE_TYPES.items():
        calls[f"samples_{key}_recent"] = (lambda kind=kind: _samples_since(n, h, kind, 0.1))
    result["call_cost"] = {}
    for key, fn in calls.items():
        try:
            result["call_cost"][key] = cost(fn, 50 if "fields" in key or "samples" in key else 200)
        except Exception as exc:
            result["call_cost"][key] = {"error": f"{type(exc).__name__}: {exc}"}
        print(key, result["call_cost"][key], flush=True)
    result["throttle_fields_before"] = fields_now(n, h, THROTTLE + ["NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] + pcie)
    result["buffers_under_load"] = buffers_under_load(n, h)
    result["throttle_fields_after"] = fields_now(n, h, THROTTLE + ["NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] + pcie)
    result["wakeups"] = [wakeups(hz) for hz in (100, 20, 10)]
    (out / "nvml_sampling_probe.json").write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps({k: v for k, v in result.items() if k != "call_cost"}, indent=1, default=str))


def _samples_since(n, h, kind, seconds):
    try:
        return n.nvmlDeviceGetSamples(h, kind, time.time_ns() // 1000 - int(seconds * 1e6))
    except pynvml.NVMLError_NotFound:
        return None


if __name__ == "__main__":
    main()
