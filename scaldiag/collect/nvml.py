"""NVML samples for each visible GPU, on one background thread for all GPUs, plus the inventory.

One wake-up every 50 ms reads what is due on every GPU; a tick with nothing due writes no row. What
each read costs in CPU was measured on an H200, driver 580 (per GPU and call, in a tight loop:
bench/results/gpu_h200/nvml_sampling_probe.md, the probe now
``git show 227e679:bench/gpu/nvml_sampling_probe.py``), and what the whole sampler costs per GPU
and tick (bench/results/gpu_h200/sampler.md: about 70 us per GPU row beyond those loop costs); the
rates below follow from that and from how fast each value changes:

| every      | rate    | reads                                                              |
CPU/call |
|------------|---------|--------------------------------------------------------------------|----------|
| 2 ticks    | 10 Hz   | SM clock, clocks-event (throttle) reasons, instant power           | 1-2 us
| | 4 ticks    | 5 Hz    | memory used; utilisation (the driver updates it every 200 ms: its sample
buffer's spacing) | 1-5 us | | adaptive   | 1-20 Hz | PCIe TX/RX byte counters (one field-values
call for both)          | 0.33 ms  | | 20 ticks   | 1 Hz    | PCIe link generation and width now
(they drop when idle)           | <0.02 ms | | 100 ticks  | 0.2 Hz  | NVLink data TX/RX counters,
all links (64-bit: no wrap)            | ~1.5 ms (2x H200) | | 200 ticks  | 0.1 Hz  | cumulative
time held down per clocks-event reason (ns counters)    | 0.84 ms  |

The PCIe counters are 32-bit (they wrap every 4 GiB, 68 ms at PCIe Gen5 x16 line rate) and
cost 100-300 times the other reads, so they are read as rarely as the traffic allows: after
each read the next is scheduled so that, at the rate just seen in the busier direction, at
most a quarter of a wrap (1 GiB) passes between reads: once a second while the link is quiet,
up to every tick (50 ms, one wrap at 86 GB/s, beyond the link) under load. A wrap is missed
only if the traffic jumps more than 4x between two reads and moves over 4 GiB in one of them;
the record holds monotonic cumulative counts. Not ``nvmlDeviceGetPcieThroughput``: it samples
a 20 ms window per call. Not NVML's sample buffers (``nvmlDeviceGetSamples``): on the H200 the
SM-clock buffer stayed empty, utilisation has one sample per 200 ms at 2.4 ms a call, and
power samples (every 20 ms) cost 0.3 ms a call against 2-5 us for the instant value.

The clocks-event reasons are sampled at 10 Hz (an unbiased sample of the time each holds);
the cumulative counters (``throttle_*_ns``) count every nanosecond held down, between samples
too.

``nvml`` is the pynvml module (nvidia-ml-py) or, in unit tests, a fake with
the same functions. Nothing here raises into training: a failing read is
recorded once in ``missing`` and dropped from later ticks.
"""

from __future__ import annotations

import functools
import math
import time

from scaldiag.collect.periodic import PeriodicSampler
from scaldiag.record.rundir import JsonlWriter

# 20 Hz wake-ups for all GPUs, the PCIe counters' fastest rate (a no-op tick: 0.15% of a core)
PERIOD_S = 0.05
ALL_LINKS = 0xFFFFFFFF  # scopeId: NVLink counters summed over all links
_UINT32_TYPE = 1  # NVML_VALUE_TYPE_UNSIGNED_INT: a counter that wraps at 2**32
ROW_EVERY = 2  # ticks: a row per GPU at 10 Hz, plus the ticks that read the PCIe counters between
PCIE_KEYS = ("pcie_tx_bytes", "pcie_rx_bytes")
PCIE_CONSTS = {
    "pcie_tx_bytes": "NVML_FI_DEV_PCIE_COUNT_TX_BYTES",
    "pcie_rx_bytes": "NVML_FI_DEV_PCIE_COUNT_RX_BYTES",
}
PCIE_SLOWEST_EVERY = 20  # ticks: the PCIe counters are read at least once a second
WRAP_GUARD_BYTES = 1 << 30  # a quarter of the 32-bit wrap between two reads of a PCIe counter

# (key, NVML field constant, scopeId, every n ticks)
FIELDS = [
    ("power_mw", "NVML_FI_DEV_POWER_INSTANT", 0, 2),
    ("nvlink_tx_kib", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", ALL_LINKS, 100),
    ("nvlink_rx_kib", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", ALL_LINKS, 100),
    ("throttle_sw_power_cap_ns", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP", 0, 200),
    ("throttle_sw_thermal_ns", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN", 0, 200),
    ("throttle_hw_thermal_ns", "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN", 0, 200),
    (
        "throttle_hw_power_brake_ns",
        "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN",
        0,
        200,
    ),
]
# nvmlGpuTopologyLevel_t: the closest common ancestor of two GPUs on the PCIe tree
# (NVLink is separate: see nvlink_active_links in the inventory).
TOPOLOGY_LEVELS = {
    0: "same board",
    10: "single PCIe switch",
    20: "multiple PCIe switches",
    30: "PCIe host bridge",
    40: "same NUMA node",
    50: "across NUMA nodes (SMP link)",
}

CALLS = [
    ("sm_clock_mhz", 2),
    ("clocks_event_reasons", 2),
    ("mem_used_bytes", 4),
    ("util_pct", 4),
    ("pcie_gen", 20),
    ("pcie_width", 20),
]


def load_nvml():
    """The real pynvml module, initialised, or raise with the reason."""
    import pynvml  # nvidia-ml-py: a dependency, but libnvidia-ml may be absent

    pynvml.nvmlInit()
    return pynvml


def pcie_every(bytes_per_s: float | None) -> int:
    """Ticks until the next PCIe counter read: a quarter wrap at the rate just seen, 1 s at most.

    Unknown rate (the first read): the next tick, so the rate is known at once.
    """
    if bytes_per_s is None:
        return 1
    if bytes_per_s <= 0:
        return PCIE_SLOWEST_EVERY
    return max(1, min(PCIE_SLOWEST_EVERY, int(WRAP_GUARD_BYTES / (bytes_per_s * PERIOD_S))))


class NvmlSampler:
    def __init__(self, nvml, writer: JsonlWriter, indices: list[int] | None = None):
        self.nvml = nvml
        self._writer = writer
        self.missing: list[str] = []
        count = nvml.nvmlDeviceGetCount()
        self.indices = [
            i for i in (indices if indices is not None else range(count)) if 0 <= i < count
        ]
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]
        self._fields = {}  # key -> ((field id, scope), every)
        for key, const, scope, every in FIELDS:
            if hasattr(nvml, const):
                self._fields[key] = ((getattr(nvml, const), scope), every)
            else:
                self.missing.append(f"{key}: this nvidia-ml-py has no {const}")
        self._pcie = {}  # key -> (field id, scope): read on each GPU's own schedule
        for key in PCIE_KEYS:
            if hasattr(nvml, PCIE_CONSTS[key]):
                self._pcie[key] = (getattr(nvml, PCIE_CONSTS[key]), 0)
            else:
                self.missing.append(f"{key}: this nvidia-ml-py has no {PCIE_CONSTS[key]}")
        reads = {
            "util_pct": self._util,
            "mem_used_bytes": self._mem,
            "sm_clock_mhz": self._clock,
            "clocks_event_reasons": self._reasons,
            "pcie_gen": lambda h: int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(h)),
            "pcie_width": lambda h: int(nvml.nvmlDeviceGetCurrPcieLinkWidth(h)),
        }
        self._calls = {key: (reads[key], every) for key, every in CALLS}
        self._wrap: dict[tuple[int, str], list[int]] = {}  # (gpu, key) -> [last raw, added]
        self._pcie_due = {i: 0 for i in self.indices}  # gpu -> tick of its next PCIe read
        self._pcie_last: dict[
            int, tuple[int, dict]
        ] = {}  # gpu -> (t_ns, unwrapped counts) at its last read
        self._tick_count = 0
        self.clock_ns = time.time_ns  # the record's clock (replaceable in tests)
        self._schedule()
        self.sampler = PeriodicSampler("nvml", PERIOD_S, self._tick)

    def _schedule(self) -> None:
        """What is due at each tick of the cycle, worked out once, not per GPU and tick.

        Called again whenever a read is dropped. The PCIe counters are not in the
        cycle: each GPU's next read depends on its traffic (``pcie_every``).
        """
        everies = [every for _, every in self._calls.values()] + [
            every for _, every in self._fields.values()
        ]
        self._cycle = math.lcm(*everies) if everies else 1
        self._due_calls = [
            [(key, read) for key, (read, every) in self._calls.items() if phase % every == 0]
            for phase in range(self._cycle)
        ]
        self._due_fields = [
            [key for key, (_, every) in self._fields.items() if phase % every == 0]
            for phase in range(self._cycle)
        ]
        self._field_ids = [[self._fields[key][0] for key in due] for due in self._due_fields]
        self._pcie_keys = list(self._pcie)
        self._pcie_ids = list(self._pcie.values())

    def _tick(self) -> None:
        t_ns = self.clock_ns()
        tick = self._tick_count
        phase = tick % self._cycle
        self._tick_count += 1
        rows = []
        for index, handle in zip(self.indices, self._handles):
            row = {"t_ns": t_ns, "gpu": index}
            keys, ids = self._due_fields[phase], self._field_ids[phase]
            pcie = bool(self._pcie_keys) and tick >= self._pcie_due[index]
            if pcie:
                keys, ids = keys + self._pcie_keys, ids + self._pcie_ids
            if keys:
                row.update(self._read_fields(index, handle, keys, ids))
            if pcie:
                self._next_pcie(index, tick, t_ns, row)
            for key, read in self._due_calls[phase]:
                try:
                    row[key] = read(handle)
                except Exception as exc:  # unsupported on this GPU/driver: drop it, say so
                    self.missing.append(f"{key}: {type(exc).__name__}: {exc}")
                    del self._calls[key]
                    self._schedule()
            if (
                len(row) > 2 or tick % ROW_EVERY == 0
            ):  # rows at 10 Hz (even if every read has failed),
                rows.append(row)  # and where the PCIe counters were read
        if rows:
            self._writer.write_many(rows)

    def _next_pcie(self, index: int, tick: int, t_ns: int, row: dict) -> None:
        """Schedule this GPU's next PCIe read from the traffic since its last one (the busier
        direction)."""
        counts = {key: row[key] for key in PCIE_KEYS if key in row}
        last = self._pcie_last.get(index)
        self._pcie_last[index] = (t_ns, counts)
        rate = None
        if last is not None and t_ns > last[0] and counts.keys() & last[1].keys():
            rate = max(counts[k] - last[1][k] for k in counts.keys() & last[1].keys()) / (
                (t_ns - last[0]) / 1e9
            )
        elif not counts:  # the counters were dropped
            rate = 0.0
        self._pcie_due[index] = tick + pcie_every(rate)

    def _read_fields(self, index: int, handle, keys: list[str], ids: list) -> dict:
        try:
            values = self.nvml.nvmlDeviceGetFieldValues(handle, ids)
        except Exception as exc:
            self.missing.append(f"field values: {type(exc).__name__}: {exc}")
            self._fields, self._pcie = {}, {}
            self._schedule()
            return {}
        row = {}
        dropped = False
        for key, value in zip(keys, values):
            if value.nvmlReturn != 0:  # NVML_SUCCESS
                if key in self._fields or key in self._pcie:
                    self.missing.append(
                        f"{key}: not supported here (NVML return {value.nvmlReturn})"
                    )
                self._fields.pop(key, None)
                self._pcie.pop(key, None)
                dropped = True
                continue
            number = _field_value(value)
            if value.valueType == _UINT32_TYPE and key.endswith("_bytes"):
                number = self._unwrap(index, key, number)
            row[key] = number
        if dropped:
            self._schedule()
        return row

    def _unwrap(self, index: int, key: str, raw: int) -> int:
        """A wrapping 32-bit counter as a monotonic count (read faster than it wraps)."""
        state = self._wrap.setdefault((index, key), [raw, 0])
        if raw < state[0]:
            state[1] += 1 << 32
        state[0] = raw
        return raw + state[1]

    def _util(self, handle) -> int:
        return int(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu)

    def _mem(self, handle) -> int:
        return int(self.nvml.nvmlDeviceGetMemoryInfo(handle).used)

    def _clock(self, handle) -> int:
        return int(self.nvml.nvmlDeviceGetClockInfo(handle, self.nvml.NVML_CLOCK_SM))

    def _reasons(self, handle) -> int:
        return int(self._read_reasons(handle))

    @functools.cached_property
    def _read_reasons(self):
        n = self.nvml
        return (
            getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or n.nvmlDeviceGetCurrentClocksThrottleReasons
        )

    def inventory(self) -> list[dict]:
        return [self._describe(i, h) for i, h in zip(self.indices, self._handles)]

    def topology(self) -> list[dict]:
        """How each pair of sampled GPUs is connected (nvmlGpuTopologyLevel_t, as nvidia-smi topo
        -m)."""
        pairs = []
        for a in range(len(self.indices)):
            for b in range(a + 1, len(self.indices)):
                try:
                    level = int(
                        self.nvml.nvmlDeviceGetTopologyCommonAncestor(
                            self._handles[a], self._handles[b]
                        )
                    )
                except Exception as exc:
                    self.missing.append(f"topology: {type(exc).__name__}")
                    return pairs
                pairs.append(
                    {
                        "gpus": [self.indices[a], self.indices[b]],
                        "common_ancestor": level,
                        "path": TOPOLOGY_LEVELS.get(level, str(level)),
                    }
                )
        return pairs

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


# nvmlValueType_t -> the nvmlValue_t member holding the number
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _field_value(value):
    """The number in an nvmlFieldValue_t, by its valueType (nvmlValueType_t)."""
    kind = value.valueType
    return getattr(
        value.value, _VALUE_MEMBERS[kind] if 0 <= kind < len(_VALUE_MEMBERS) else "ullVal"
    )


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
