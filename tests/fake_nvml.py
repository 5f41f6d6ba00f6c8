"""A FAKE NVML for unit tests on machines without a GPU.

It imitates the pynvml functions scaldiag calls, with counters that advance
like a busy GPU's. It proves the sampler's bookkeeping only; the real NVML
path is exercised on the GPU machine (bench/gpu/, results committed).
"""

from __future__ import annotations

import time
from types import SimpleNamespace

NVML_FI_DEV_PCIE_COUNT_TX_BYTES = 197
NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 198
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_FI_DEV_POWER_INSTANT = 186
NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP = 74  # cumulative ns held down, per reason
NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN = 269
NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN = 270
NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN = 271
NVML_CLOCK_SM = 1
NVML_NVLINK_MAX_LINKS = 18

PCIE_BYTES_PER_S = 1e9  # what the fake's counters advance by
NEAR_WRAP = 2**32 - 200_000_000  # with pcie_wraps, the 32-bit counters start here and wrap in 0.2 s


class FakeNvml:
    def __init__(
        self,
        gpus: int = 2,
        unsupported: tuple[int, ...] = (),
        util_raises: bool = False,
        pcie_wraps: bool = False,
        pcie_bytes_per_s: float = PCIE_BYTES_PER_S,
    ):
        self.gpus = gpus
        self.unsupported = set(unsupported)
        self.util_raises = util_raises
        self.pcie_wraps = pcie_wraps  # real H200 PCIe counters are 32-bit and wrap
        self.pcie_bytes_per_s = pcie_bytes_per_s
        self.field_reads: list[
            tuple[int, list[int]]
        ] = []  # (handle, field ids) of each field-values call
        self.t0 = time.perf_counter()
        self.calls = 0
        for name, value in globals().items():
            if name.startswith("NVML_"):
                setattr(self, name, value)

    def nvmlDeviceGetCount(self):
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def elapsed_s(self) -> float:
        """Seconds since the fake GPU started: what its counters have counted."""
        return time.perf_counter() - self.t0

    def nvmlDeviceGetFieldValues(self, handle, fields):
        self.calls += 1
        self.field_reads.append((handle, [f for f, _ in fields]))
        elapsed = self.elapsed_s()
        rate = self.pcie_bytes_per_s
        out = []
        for field_id, _scope in fields:
            ret = 3 if field_id in self.unsupported else 0  # 3: NVML_ERROR_NOT_SUPPORTED
            value = int(
                {
                    197: rate * elapsed,
                    198: rate * elapsed / 2,
                    138: 1e6 * elapsed,
                    139: 1e6 * elapsed,
                    186: 300_000,
                    74: 0.5e9 * elapsed,
                }.get(field_id, 0)
            )
            pcie = field_id in (197, 198)
            if pcie and self.pcie_wraps:
                value = (value + NEAR_WRAP) % 2**32
            kind = 1 if pcie else 3  # uint32 counters, like the real ones; the rest 64-bit
            out.append(
                SimpleNamespace(
                    nvmlReturn=ret, valueType=kind, value=SimpleNamespace(uiVal=value, ullVal=value)
                )
            )
        return out

    def nvmlDeviceGetUtilizationRates(self, h):
        if self.util_raises:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return SimpleNamespace(gpu=87)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=(h + 1) * 2**30, total=80 * 2**30)

    def nvmlDeviceGetClockInfo(self, h, clock):
        return 1980

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x4  # sw_power_cap

    def nvmlDeviceGetName(self, h):
        return "Fake GPU"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-fake-{h}"

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=f"00000000:{h:02x}:00.0")

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 4

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= 2:
            raise RuntimeError("no such link")
        return 1

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 40  # same NUMA node
