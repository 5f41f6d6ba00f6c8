"""What fresh pages add per byte to building a batch array (analyze/transfers.py
FRESH_PAGE_NS_PER_BYTE).

Slices a shuffled batch from a large image array (what Keras' array adapter does every step), frees
it and slices the next, timing each slice: once as glibc does by default (a batch over 32 MiB is
mapped anew and each page faulted in and zeroed by the kernel), once with MALLOC_MMAP_THRESHOLD_
fixed above the batch (the freed memory is reused). The difference per byte is the fresh-page cost.
Paired runs, alternating, each in its own process (the variable is read at start-up).

    python bench/accuracy/fresh_pages.py [--pairs 5] [--dtype float32] [--batch 256]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def one(dtype: str, batch: int, batches: int) -> float:
    """ns per byte of slicing one batch (median over 2 passes after a warm one)."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (batch * batches, 128, 128, 3), dtype=np.uint8).astype(dtype)
    perm = rng.permutation(len(x))
    times, size = [], 0
    for rep in range(3):
        for i in range(batches):
            t = time.perf_counter_ns()
            b = x[perm[i * batch : (i + 1) * batch]]
            if rep:
                times.append(time.perf_counter_ns() - t)
            size = b.nbytes
            del b  # freed, as a loop over batches frees the one before
    return statistics.median(times) / size


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(one(a.dtype, a.batch, a.batches))
        return
    cmd = [
        sys.executable,
        __file__,
        "--one",
        "--dtype",
        a.dtype,
        "--batch",
        str(a.batch),
        "--batches",
        str(a.batches),
    ]
    fixed = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(4 * 2**30)}
    fresh, reused = [], []
    for _ in range(a.pairs):
        fresh.append(float(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout))
        reused.append(
            float(subprocess.run(cmd, capture_output=True, text=True, check=True, env=fixed).stdout)
        )
    diff = [f - r for f, r in zip(fresh, reused)]
    batch_mb = a.batch * 128 * 128 * 3 * (4 if a.dtype == "float32" else 1) / 1e6
    print(
        json.dumps(
            {
                "batch_mb": round(batch_mb, 1),
                "fresh_ns_per_byte": [round(v, 3) for v in fresh],
                "reused_ns_per_byte": [round(v, 3) for v in reused],
                "fresh_page_ns_per_byte": [round(v, 3) for v in diff],
                "median_fresh_page_ns_per_byte": round(statistics.median(diff), 3),
            }
        )
    )


if __name__ == "__main__":
    main()
