"""What this host's kernel charges for fresh memory pages, measured where the run is recorded.

A batch array of more than glibc's mmap ceiling (32 MiB), built anew every step, lands in pages the
kernel must fault in and zero every step (analyze/transfers.py); SD102's uint8 forecast counts that
part as gone once the batch fits under the ceiling. The cost per byte is a property of the machine
(its kernel, hypervisor, page size, transparent huge pages), so it is measured on the user's host:
time a copy into a fresh anonymous mapping (the kernel faults each page in and zeroes it) against
the same copy into it again (no faults), per byte. The mapping asks for huge pages, as NumPy does
for every array of 4 MiB or more (its hugepage madvise, on by default on Linux): without that, one 4
KiB fault per page cost 1.1-1.2 ns/byte here, 13x what NumPy batches pay. It runs outside the
training, after the script or the fit ends (0.14-0.24 s here). bench/accuracy/fresh_pages.py
measures the same cost the slow way (a shuffled batch slice, glibc's default against
MALLOC_MMAP_THRESHOLD_ fixed); both are compared in bench/results/host_costs.md.
"""

from __future__ import annotations

import mmap
import statistics
import time

PROBE_BYTES = 48 << 20  # over glibc's 32 MiB ceiling, like the batches the forecast is about
PROBE_ROUNDS = 7


def fresh_page_ns_per_byte(size: int = PROBE_BYTES, rounds: int = PROBE_ROUNDS) -> float | None:
    """Median over ``rounds`` of (a copy into fresh pages - the same copy into them again) / bytes;
    None where anonymous mappings cannot be made. A copy, not a write per page, because that is what
    a batch costs: the kernel's zeroing leaves the page in cache for the copy that follows (a write
    per page read 0.11-0.16 ns/byte here against 0.03-0.12 for fresh_pages.py's batch slices)."""
    import numpy as np  # here, not at import: the capture's modules load in the user's process

    costs = []
    try:
        source = np.ones(size, np.uint8)
        for _ in range(rounds):
            # Private, as malloc maps a large block (a shared mapping is shmem, which gets no huge
            # pages).
            area = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            if hasattr(area, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
                area.madvise(mmap.MADV_HUGEPAGE)  # as NumPy does for arrays of 4 MiB or more
            try:
                target = np.frombuffer(area, np.uint8)
                t0 = time.perf_counter_ns()
                target[:] = (
                    source  # into fresh pages: each faulted in and zeroed by the kernel first
                )
                t1 = time.perf_counter_ns()
                target[:] = source  # the same pages, present now
                t2 = time.perf_counter_ns()
                del target
            finally:
                area.close()
            costs.append(((t1 - t0) - (t2 - t1)) / size)
    except (
        OSError,
        ValueError,
        BufferError,
        MemoryError,
        AttributeError,
        TypeError,
    ):  # (no MAP_PRIVATE: Windows)
        return None
    return max(statistics.median(costs), 0.0)


def measured_or_none() -> float | None:
    """run.json's ``fresh_page_ns_per_byte`` for this host, or None where it could not be measured
    (it is evidence for one forecast, never a reason to fail the run's record)."""
    try:
        value = fresh_page_ns_per_byte()
    except Exception:
        return None
    return None if value is None else round(value, 4)
