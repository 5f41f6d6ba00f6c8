"""Bytes moved by memory copies, from CUPTI's ``memcpy_details`` stat.

CUPTI writes e.g. ``kind_src:pinned kind_dst:device size:2097152 dest:0 async:1``.
Pageable host memory forces a staged, synchronous copy; pinned memory can be
copied by DMA while the GPU computes.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

_SIZE = re.compile(r"\bsize:(\d+)")
_KIND = re.compile(r"\bkind_(src|dst):(\w+)")


@dataclass(frozen=True)
class Copy:
    bytes: int
    host_kind: str  # "pinned", "pageable", "unknown": the host side of the copy


@functools.lru_cache(maxsize=1 << 12)  # a trace repeats a few distinct details in every step
def parse_memcpy_details(details: str | None, direction: str) -> Copy:
    """``direction``: "h2d" (host side is the source) or "d2h" (destination)."""
    if not details:
        return Copy(0, "unknown")
    size = _SIZE.search(details)
    kinds = dict(_KIND.findall(details))
    host = kinds.get("src" if direction == "h2d" else "dst", "unknown")
    n = int(size.group(1)) if size else 0
    return Copy(n if n < 1 << 62 else 0, host)  # no copy moves 4 EiB: a damaged field, not a size


@dataclass(frozen=True)
class CopyTotals:
    """Bytes per step window, by the host memory kind."""

    bytes_per_step: np.ndarray            # [step]
    bytes_by_kind: dict[str, np.ndarray]  # kind -> [step]
    count_per_step: np.ndarray


def copies_per_step(starts: np.ndarray, details: list[str | None], direction: str,
                    ws: np.ndarray, we: np.ndarray) -> CopyTotals:
    """Sum copies by the step window they start in (copies outside any step are left out)."""
    n = len(ws)
    parsed = [parse_memcpy_details(d, direction) for d in details]
    step = np.searchsorted(ws, starts, side="right") - 1
    inside = (step >= 0) & (starts < we[np.maximum(step, 0)])
    sizes = np.array([c.bytes for c in parsed], np.int64)
    kinds = np.array([c.host_kind for c in parsed], dtype=object)
    total = np.bincount(step[inside], weights=sizes[inside], minlength=n)
    by_kind = {str(k): np.bincount(step[inside & (kinds == k)], weights=sizes[inside & (kinds == k)], minlength=n)
               for k in set(kinds[inside].tolist())}
    return CopyTotals(total, by_kind, np.bincount(step[inside], minlength=n))


# --- the host side of a heavy batch ------------------------------------------------------------
# From this many bytes copied to the device per step, the batch is heavy: preparing it is a cost of
# its own (SD101 and SD102's bound; a 256 x 224 x 224 x 3 uint8 batch is 38 MB).
HEAVY_BATCH_BYTES = 8 * 2**20
# Input that costs at most this much host time per byte it delivers (0.5 GB/s or faster) is the host
# *moving* the batch (slicing, converting, staging: one to a few passes over memory), not computing it.
# Measured on the 2-core development machine: NumPy slicing a shuffled 50 MB float32 batch 0.19 ns/byte,
# the same pixels as uint8 0.38 ns/byte; the zoo's Python blur (input_python) 16 ns/byte. On an H200
# (Keras on JAX) 50 MB float32 batches cost 18.6 ms of input per step: 0.37 ns/byte.
HANDOVER_MAX_NS_PER_BYTE = 2.0


@dataclass(frozen=True)
class Handover:
    """A heavy batch whose input time is what moving its bytes costs: the host side of the copy."""

    bytes_per_step: float
    input_ms: float        # exclusive input time per step: slicing, converting, handing over
    copy_ms: float         # exclusive host-to-device copy time per step
    ns_per_byte: float     # input time per byte copied

    @property
    def ms(self) -> float:
        return self.input_ms + self.copy_ms


def handover(bytes_per_step: float, input_ms: float, copy_ms: float) -> Handover | None:
    """The step's input read as the host side of a heavy copy, or None (light batch, or costly per byte)."""
    if bytes_per_step < HEAVY_BATCH_BYTES:
        return None
    ns_per_byte = input_ms * 1e6 / bytes_per_step
    if ns_per_byte > HANDOVER_MAX_NS_PER_BYTE:
        return None  # the input does work beyond moving bytes (augmentation, decoding): SD101's
    return Handover(bytes_per_step, input_ms, copy_ms, ns_per_byte)
