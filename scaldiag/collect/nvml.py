"""NVML samples for each visible GPU, on a background thread, plus the inventory.

Fast tick (100 Hz): one ``nvmlDeviceGetFieldValues`` call per GPU for the
cumulative PCIe TX/RX byte counters, NVLink data throughput counters and
instantaneous power. Not ``nvmlDeviceGetPcieThroughput``: it samples a 20 ms
window per call (measured ~21 ms on H200), which caps a loop at ~45 Hz.
Slow tick (every 10th): utilisation, memory used, SM clock and clocks-event
(throttle) reasons, whose calls cost 0.5-2 ms each.

``nvml`` is the pynvml module (nvidia-ml-py) or, in unit tests, a fake with
the same functions. Nothing here raises into training: a failing read is
recorded once in ``missing`` and that read is dropped from later ticks.
"""

from __future__ import annotations

import time

from scaldiag.collect.sampling import PeriodicSampler
from scaldiag.record.rundir import JsonlWriter

FAST_PERIOD_S = 0.01  # 100 Hz
SLOW_EVERY = 10       # utilisation, memory, clocks at 10 Hz
ALL_LINKS = 0xFFFFFFFF  # scopeId for counters summed over all NVLinks


def load_nvml():
    """The real pynvml module, initialised, or raise with the reason."""
    import pynvml  # nvidia-ml-py: a dependency, but libnvidia-ml may be absent

    pynvml.nvmlInit()
    return pynvml


class NvmlSampler:
    def __init__(self, nvml, writer: JsonlWriter, indices: list[int] | None = None):
        self.nvml = nvml
        self._writer = writer
        self.missing: list[str] = []
        count = nvml.nvmlDeviceGetCount()
        self.indices = [i for i in (indices if indices is not None else range(count)) if 0 <= i < count]
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]
        self._fields = self._field_ids()
        self._slow_reads = {"util_pct": self._util, "mem_used_bytes": self._mem,
                            "sm_clock_mhz": self._clock, "clocks_event_reasons": self._reasons}
        self._tick_count = 0
        self.sampler = PeriodicSampler("nvml", FAST_PERIOD_S, self._tick)

    def _field_ids(self) -> dict[str, tuple[int, int]]:
        n = self.nvml
        wanted = {"pcie_tx_bytes": "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", "pcie_rx_bytes": "NVML_FI_DEV_PCIE_COUNT_RX_BYTES",
                  "nvlink_tx_kib": "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
                  "nvlink_rx_kib": "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX",
                  "power_mw": "NVML_FI_DEV_POWER_INSTANT"}
        found = {}
        for key, const in wanted.items():
            if hasattr(n, const):
                scope = ALL_LINKS if key.startswith("nvlink") else 0
                found[key] = (getattr(n, const), scope)
            else:
                self.missing.append(f"{key}: this nvidia-ml-py has no {const}")
        return found

    def _tick(self) -> None:
        t_ns = time.time_ns()
        slow = self._tick_count % SLOW_EVERY == 0
        self._tick_count += 1
        for index, handle in zip(self.indices, self._handles):
            row = {"t_ns": t_ns, "gpu": index}
            row.update(self._read_fields(handle))
            if slow:
                for key, read in list(self._slow_reads.items()):
                    try:
                        row[key] = read(handle)
                    except Exception as exc:  # unsupported on this GPU/driver: drop it, say so
                        self.missing.append(f"{key}: {type(exc).__name__}: {exc}")
                        del self._slow_reads[key]
            self._writer.write(row)

    def _read_fields(self, handle) -> dict:
        if not self._fields:
            return {}
        keys = list(self._fields)
        try:
            values = self.nvml.nvmlDeviceGetFieldValues(handle, [self._fields[k] for k in keys])
        except Exception as exc:
            self.missing.append(f"field values: {type(exc).__name__}: {exc}")
            self._fields = {}
            return {}
        row = {}
        for key, value in zip(keys, values):
            if value.nvmlReturn != 0:  # NVML_SUCCESS
                self.missing.append(f"{key}: not supported here (NVML return {value.nvmlReturn})")
                del self._fields[key]
                continue
            row[key] = _field_value(value)
        return row

    def _util(self, handle) -> int:
        return int(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu)

    def _mem(self, handle) -> int:
        return int(self.nvml.nvmlDeviceGetMemoryInfo(handle).used)

    def _clock(self, handle) -> int:
        return int(self.nvml.nvmlDeviceGetClockInfo(handle, self.nvml.NVML_CLOCK_SM))

    def _reasons(self, handle) -> int:
        n = self.nvml
        read = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(read(handle))

    def inventory(self) -> list[dict]:
        return [self._describe(i, h) for i, h in zip(self.indices, self._handles)]

    def _describe(self, index: int, handle) -> dict:
        n = self.nvml
        info: dict = {"index": index}
        reads = {
            "name": lambda: _text(n.nvmlDeviceGetName(handle)),
            "uuid": lambda: _text(n.nvmlDeviceGetUUID(handle)),
            "pci_bus_id": lambda: _text(n.nvmlDeviceGetPciInfo(handle).busId),
            "memory_total_bytes": lambda: int(n.nvmlDeviceGetMemoryInfo(handle).total),
            "pcie_gen_current": lambda: int(n.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
            "pcie_gen_max": lambda: int(n.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
            "pcie_width_current": lambda: int(n.nvmlDeviceGetCurrPcieLinkWidth(handle)),
            "pcie_width_max": lambda: int(n.nvmlDeviceGetMaxPcieLinkWidth(handle)),
            "nvlink_active_links": lambda: self._active_links(handle),
            "power_limit_mw": lambda: int(n.nvmlDeviceGetEnforcedPowerLimit(handle)),
        }
        for key, read in reads.items():
            try:
                info[key] = read()
            except Exception as exc:
                info[key] = None
                self.missing.append(f"inventory {key} of GPU {index}: {type(exc).__name__}")
        return info

    def _active_links(self, handle) -> int:
        n = self.nvml
        active = 0
        for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                active += int(n.nvmlDeviceGetNvLinkState(handle, link) == 1)
            except Exception:  # no such link (or no NVLink at all)
                break
        return active


def _field_value(value):
    """The number in an nvmlFieldValue_t, by its valueType (nvmlValueType_t)."""
    kind = value.valueType
    v = value.value
    return {0: lambda: v.dVal, 1: lambda: v.uiVal, 2: lambda: v.ulVal, 3: lambda: v.ullVal,
            4: lambda: v.sllVal, 5: lambda: v.siVal, 6: lambda: v.usVal}.get(kind, lambda: v.ullVal)()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
