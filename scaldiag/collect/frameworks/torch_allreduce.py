"""What the same all-reduce takes inside one node: two gloo ranks over loopback.

The multi-node merge (analyze/nodes.py, SD209) compares the all-reduce across
nodes with what the same bytes cost without the network between them. On GPUs
the intra-node link is known (NVLink, PCIe: analyze/interconnect.py); a CPU
job's gloo all-reduce inside a node goes through the host's own TCP stack and
cores, which no table holds, so it is measured: after the script, on the
node, the recorded gradient bytes all-reduced by two gloo ranks over
127.0.0.1, a few times, as 1, 2, 4... 32 all-reduces back to back (the job's
buckets). The two ranks are two threads of one process (gloo's
work runs outside the GIL; each rank has its own pairs and sockets): one
import of torch, not two, on a machine where that import is most of the cost.

    python -m scaldiag.collect.frameworks.torch_allreduce BYTES REPEATS   ->  JSON on stdout
"""

from __future__ import annotations

import json
import sys
import threading
import time
from datetime import timedelta

WARMUP = 2  # gloo's first all-reduces set up its pairs and buffers
# The bytes sent as 1, 2, 4... all-reduces back to back, as DDP sends its buckets: a job's
# per-message cost is part of what it pays, and the merge picks the split nearest the job's
# collectives a step.
SPLITS = (1, 2, 4, 8, 16, 32)
TIMEOUT = timedelta(seconds=60)


def measure(nbytes: int, repeats: int) -> dict:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    store = dist.HashStore()
    groups: list = [None, None]
    together = threading.Barrier(2)

    times: dict[int, list[list[int]]] = {k: [[], []] for k in SPLITS}

    def rank(r: int) -> None:
        # loopback: GLOO_SOCKET_IFNAME=lo (main)
        groups[r] = dist.ProcessGroupGloo(store, r, 2, TIMEOUT)
        for split in SPLITS:
            parts = [
                torch.ones(max(1, nbytes // 4 // split), dtype=torch.float32) for _ in range(split)
            ]
            for i in range(WARMUP + repeats):
                together.wait()
                t0 = time.perf_counter_ns()
                for work in [groups[r].allreduce([x]) for x in parts]:
                    work.wait()
                if i >= WARMUP:
                    times[split][r].append(time.perf_counter_ns() - t0)

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # A rank's all-reduce ends when it has every other rank's data: the later of the two is the
    # collective's.
    return {
        "bytes": max(1, nbytes // 4) * 4,
        "ranks": 2,
        "backend": "gloo",
        "interface": "lo",
        "times_ns": {str(k): [max(a, b) for a, b in zip(*v)] for k, v in times.items()},
    }


def main() -> None:
    print(json.dumps(measure(int(sys.argv[1]), int(sys.argv[2]))))


if __name__ == "__main__":
    main()
