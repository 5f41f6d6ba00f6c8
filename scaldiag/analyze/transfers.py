"""Bytes moved by memory copies, from CUPTI's ``memcpy_details`` stat.

CUPTI writes e.g. ``kind_src:pinned kind_dst:device size:2097152 dest:0 async:1``.
Pageable host memory forces a staged, synchronous copy; pinned memory can be
copied by DMA while the GPU computes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

_SIZE = re.compile(r"\bsize:(\d+)")
_KIND = re.compile(r"\bkind_(src|dst):(\w+)")


@dataclass(frozen=True)
class Copy:
    bytes: int
    host_kind: str  # "pinned", "pageable", "unknown": the host side of the copy


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
