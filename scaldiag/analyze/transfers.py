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


# glibc's malloc serves a block larger than its mmap threshold with fresh pages from the kernel and
# unmaps it on free; the threshold rises to the size of each such block freed, up to
# DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB on 64-bit systems (mallopt(3), M_MMAP_THRESHOLD). So a batch
# array of more than 32 MiB, allocated anew every step (slicing, collating, converting), is written
# into pages the kernel must fault in and zero every step; a smaller one reuses freed heap memory.
# NumPy, PyTorch's CPU tensors and TensorFlow's CPU buffers all allocate through it.
MMAP_THRESHOLD_MAX_BYTES = 32 * 2**20
# What fresh pages add per byte to building a batch array (the kernel faulting in and zeroing them),
# measured by bench/accuracy/fresh_pages.py: a shuffled 50 MB float32 batch sliced from a 1.5 GB
# array (Keras' array adapter), into fresh pages (glibc's default) against reused heap memory
# (MALLOC_MMAP_THRESHOLD_ fixed above the batch). 2-core AMD EPYC development machine: 0.05-0.11
# ns/byte over 11 pairs (the first 5, which set this value: median 0.078; all 11: 0.09); the H200
# host: 0.054-0.079, median 0.066 (`git show 0759376:bench/results/gpu_h200/accuracy/accuracy.json`,
# run6_fresh_pages.json); at 12.6 MB (under the ceiling) 0.006. A machine property: the forecast
# that uses it says so.
FRESH_PAGE_NS_PER_BYTE = 0.08


@dataclass(frozen=True)
class CopyTotals:
    """Bytes per step window, by the host memory kind."""

    bytes_per_step: np.ndarray  # [step]
    bytes_by_kind: dict[str, np.ndarray]  # kind -> [step]
    count_per_step: np.ndarray
    large_bytes_per_step: np.ndarray  # [step]: in copies of more than MMAP_THRESHOLD_MAX_BYTES each
    largest_bytes: int = 0  # the largest copy inside the steps


def copies_per_step(
    starts: np.ndarray, details: list[str | None], direction: str, ws: np.ndarray, we: np.ndarray
) -> CopyTotals:
    """Sum copies by the step window they start in (copies outside any step are left out)."""
    n = len(ws)
    parsed = [parse_memcpy_details(d, direction) for d in details]
    step = np.searchsorted(ws, starts, side="right") - 1
    inside = (step >= 0) & (starts < we[np.maximum(step, 0)])
    sizes = np.array([c.bytes for c in parsed], np.int64)
    kinds = np.array([c.host_kind for c in parsed], dtype=object)
    total = np.bincount(step[inside], weights=sizes[inside], minlength=n)
    by_kind = {
        str(k): np.bincount(
            step[inside & (kinds == k)], weights=sizes[inside & (kinds == k)], minlength=n
        )
        for k in set(kinds[inside].tolist())
    }
    large = inside & (sizes > MMAP_THRESHOLD_MAX_BYTES)
    return CopyTotals(
        total,
        by_kind,
        np.bincount(step[inside], minlength=n),
        np.bincount(step[large], weights=sizes[large], minlength=n),
        int(sizes[inside].max()) if inside.any() else 0,
    )


def per_step(values: np.ndarray) -> float:
    """The mean per step of a per-window column, the trace's first window left out when there are
    more.

    Loaders that copy ahead (Keras on JAX keeps batches on the device before the step that needs
    them; DataLoader's pin-memory thread; tf.data's prefetch to device) copy the first traced step's
    batch before the profiler starts, so the first window can lack it: measured on an H200, 5 traced
    steps held 4 batches (0, 50.3, 50.3, 50.3, 50.3 MB). Each later window holds one batch.
    """
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return 0.0
    return float(values[1:].mean() if len(values) > 1 else values.mean())


# --- the host side of a heavy batch ------------------------------------------------------------
# From this many bytes copied to the device per step, the batch is heavy: preparing it is a cost of
# its own (SD101 and SD102's bound; a 256 x 224 x 224 x 3 uint8 batch is 38 MB).
HEAVY_BATCH_BYTES = 8 * 2**20
# Input that costs at most this much host time per byte it delivers (0.5 GB/s or faster) is the host
# *moving* the batch (slicing, converting, staging: one to a few passes over memory), not computing
# it. Measured on the 2-core development machine: NumPy slicing a shuffled 50 MB float32 batch 0.19
# ns/byte, the same pixels as uint8 0.38 ns/byte; the zoo's Python blur (input_python) 16 ns/byte.
# On an H200 (Keras on JAX) 50 MB float32 batches cost 18.6 ms of input per step: 0.37 ns/byte.
HANDOVER_MAX_NS_PER_BYTE = 2.0


@dataclass(frozen=True)
class Handover:
    """A heavy batch whose input time is what moving its bytes costs: the host side of the copy."""

    bytes_per_step: float
    input_ms: float  # exclusive input time per step: slicing, converting, handing over
    copy_ms: float  # exclusive host-to-device copy time per step
    ns_per_byte: float  # input time per byte copied

    @property
    def ms(self) -> float:
        return self.input_ms + self.copy_ms


def handover(bytes_per_step: float, input_ms: float, copy_ms: float) -> Handover | None:
    """The step's input read as the host side of a heavy copy, or None (light batch, or costly per
    byte)."""
    if bytes_per_step < HEAVY_BATCH_BYTES:
        return None
    ns_per_byte = input_ms * 1e6 / bytes_per_step
    if ns_per_byte > HANDOVER_MAX_NS_PER_BYTE:
        return None  # the input does work beyond moving bytes (augmentation, decoding): SD101's
    return Handover(bytes_per_step, input_ms, copy_ms, ns_per_byte)
