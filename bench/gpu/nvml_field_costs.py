"""On the GPU machine: the cost of each NVML field value read, alone and together.

    python bench/gpu/nvml_field_costs.py
"""

import time

import pynvml

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
FIELDS = {"pcie_tx": (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0), "pcie_rx": (pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0),
          "nvlink_tx_all": (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0xFFFFFFFF),
          "nvlink_rx_all": (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0xFFFFFFFF),
          "power_instant": (pynvml.NVML_FI_DEV_POWER_INSTANT, 0)}


def cost_ms(fields, n=100):
    t = time.perf_counter()
    for _ in range(n):
        values = pynvml.nvmlDeviceGetFieldValues(h, fields)
    return (time.perf_counter() - t) / n * 1e3, [(v.valueType, v.nvmlReturn) for v in values]


for name, field in FIELDS.items():
    print(f"{name:>14}: {cost_ms([field])}")
print(f"{'pcie both':>14}: {cost_ms([FIELDS['pcie_tx'], FIELDS['pcie_rx']])}")
print(f"{'all five':>14}: {cost_ms(list(FIELDS.values()))}")
t = time.perf_counter()
for _ in range(100):
    pynvml.nvmlDeviceGetPowerUsage(h)
print(f"{'power usage':>14}: {(time.perf_counter() - t) * 10:.4f} ms")
