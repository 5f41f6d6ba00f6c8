"""The link between a machine's GPUs, and the all-reduce time it gives.

Where it comes from, in order (``Interconnect.source`` says which):

- ``given``: the user named it (``parse("nvlink4x18")``, ``parse("pcie5x16")``);
- ``read``: NVML's active NVLink count in the run's inventory, when above zero;
- ``looked up``: the GPU's product name in ``PRODUCTS`` (NVML reports no active
  NVLink on a machine with one GPU visible: the links to absent peers are down,
  so zero links there is no evidence of a PCIe-only card);
- ``assumed``: the PCIe link NVML reports (generation and width), for cards the
  table does not know, or where NVML reads zero active NVLinks with two or
  more GPUs visible.

All-reduce time (NCCL ring), for a message of ``m`` bytes over ``n`` GPUs:

    t(m) = latency + 2 (n - 1) / n x m / bus bandwidth

``bus bandwidth`` is what NCCL achieves on the link (nccl-tests' ``busbw``),
not the line rate: docs/scaling.md cites each default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NVLINK_BYTES_PER_S_PER_LINK = 25e9  # NVLink 2-4: 25 GB/s per link and direction (NVIDIA's NVLink pages)
PCIE_BYTES_PER_S_PER_LANE = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}
# NCCL reaches ~370 GB/s of NVLink 4's 450 GB/s line rate (ring, ~20% protocol overhead): NCCL's maintainer in
# NVIDIA/nccl-tests#212. The same fraction is assumed for the other links (stated as assumed in the output).
NCCL_BUS_FRACTION = 370 / 450
# Time of a small all-reduce inside one node (nccl-tests' rows for 8 B-64 KiB are 10-30 us on NVLink and PCIe
# machines, e.g. NVIDIA/nccl-tests#68): one latency per all-reduce call.
NCCL_LATENCY_S = 20e-6


@dataclass(frozen=True)
class Product:
    pattern: str  # regular expression over NVML's product name
    generation: int
    links: int
    source: str


# NVLink per GPU by product (NVML names: "NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"...).
# PCIe and NVL cards are left out on purpose: they use their PCIe link (or the links NVML reads).
PRODUCTS = (
    Product(r"^NVIDIA H200$|H200 SXM|^NVIDIA H100 80GB HBM3$|H100 SXM|^NVIDIA H800$", 4, 18,
            "NVIDIA H100/H200 SXM datasheets: NVLink 4, 18 links, 900 GB/s both ways"),
    Product(r"A100-SXM|A100 SXM|A800-SXM", 3, 12,
            "NVIDIA A100 datasheet: SXM4, NVLink 3, 12 links, 600 GB/s both ways"),
    Product(r"V100-SXM2|V100 SXM2", 2, 6,
            "NVIDIA V100 datasheet: SXM2, NVLink 2, 6 links, 300 GB/s both ways"),
)


@dataclass(frozen=True)
class Interconnect:
    kind: str  # "nvlink" or "pcie"
    generation: int
    lanes: int  # NVLink links, or PCIe lanes
    line_bytes_per_s: float  # per direction, per GPU
    bus_bytes_per_s: float  # NCCL all-reduce bus bandwidth on it
    latency_s: float
    source: str  # "given", "read", "looked up" or "assumed"
    why: str = ""

    def describe(self) -> str:
        link = (f"NVLink {self.generation} x{self.lanes}" if self.kind == "nvlink"
                else f"PCIe Gen{self.generation} x{self.lanes}")
        why = f" ({self.why})" if self.why else ""
        return (f"interconnect {link}, {self.source}{why}: {self.line_bytes_per_s / 1e9:.0f} GB/s each way, "
                f"all-reduce bus bandwidth {self.bus_bytes_per_s / 1e9:.0f} GB/s + {self.latency_s * 1e6:.0f} us "
                "per call (NCCL ring defaults, docs/scaling.md)")

    def allreduce_s(self, message_bytes: float, n: int) -> float:
        """Seconds for one all-reduce of ``message_bytes`` over ``n`` GPUs (0 for one GPU)."""
        if n < 2 or message_bytes <= 0:
            return 0.0
        return self.latency_s + 2 * (n - 1) / n * message_bytes / self.bus_bytes_per_s


def nvlink(generation: int, links: int, source: str, why: str = "") -> Interconnect:
    line = links * NVLINK_BYTES_PER_S_PER_LINK
    return Interconnect("nvlink", generation, links, line, line * NCCL_BUS_FRACTION, NCCL_LATENCY_S, source, why)


def pcie(generation: int, width: int, source: str, why: str = "") -> Interconnect | None:
    rate = PCIE_BYTES_PER_S_PER_LANE.get(generation)
    if not rate or not width:
        return None
    line = rate * width
    return Interconnect("pcie", generation, width, line, line * NCCL_BUS_FRACTION, NCCL_LATENCY_S, source, why)


def parse(spec: str) -> Interconnect:
    """``nvlink4x18``, ``nvlink3x12`` or ``pcie5x16`` (case and spaces ignored): the user's machine."""
    m = re.fullmatch(r"(nvlink|pcie(?:gen)?)(\d)x(\d+)", re.sub(r"[\s_-]", "", spec.lower()))
    if not m:
        raise ValueError(f"interconnect {spec!r}: write it as nvlink<gen>x<links> or pcie<gen>x<width>, "
                         "e.g. nvlink4x18, pcie5x16")
    generation, lanes = int(m.group(2)), int(m.group(3))
    if m.group(1) == "nvlink":
        return nvlink(generation, lanes, "given")
    found = pcie(generation, lanes, "given")
    if found is None:
        raise ValueError(f"interconnect {spec!r}: unknown PCIe generation {generation}")
    return found


def lookup(name: str | None) -> Product | None:
    return next((p for p in PRODUCTS if name and re.search(p.pattern, name)), None)


def from_inventory(inventory: dict, override: Interconnect | None = None) -> Interconnect | None:
    """The run's interconnect (module docstring), or None where the inventory says nothing usable."""
    if override is not None:
        return override
    gpus = inventory.get("gpus") or []
    if not gpus:
        return None
    links = min(g.get("nvlink_active_links") or 0 for g in gpus)
    name = gpus[0].get("name")
    product = lookup(name)
    if links:
        return nvlink(product.generation if product else 4, links, "read",
                      "NVML's active links" + ("" if product else "; generation assumed 4"))
    if len(gpus) > 1 and all(g.get("nvlink_active_links") == 0 for g in gpus):
        product = None  # NVML read no NVLink between GPUs it can see: their PCIe link is the path
    if product:
        return nvlink(product.generation, product.links, "looked up",
                      f"{name}: {product.source}; NVML reads no active link with one GPU visible")
    gen, width = gpus[0].get("pcie_gen_current"), gpus[0].get("pcie_width_current")
    return pcie(gen, width, "assumed", f"{name or 'GPU'} not in the product table: its PCIe link from NVML") \
        if gen and width else None
