"""Check, on a real GPU, the framework allocator's peak that a profiled run recorded.

    python bench/gpu/check_device_memory.py RUN_DIR [RUN_DIR ...]

For each run: training.json's ``device_memory`` (collect/frameworks/device_memory.py: torch's
max_memory_allocated, JAX's memory_stats, TF's get_memory_info), NVML's largest used memory beside
it, and what analyze/batch_memory.py makes of them for a batch x4. Exit code 1 where a run on a GPU
has no allocator peak, or one above NVML's used memory (the pool holds what is allocated).
"""

from __future__ import annotations

import sys
from pathlib import Path

from scaldiag.analyze.batch_memory import GIB, describe, device_memory, room
from scaldiag.record.rundir import read_json, read_jsonl


def check(run_dir: Path) -> bool:
    training = read_json(run_dir, "training.json")
    samples = read_jsonl(run_dir / "gpu_samples.jsonl")
    inventory = read_json(run_dir, "inventory.json")
    rows = training.get("device_memory") or []
    nvml = max((s.get("mem_used_bytes") or 0 for s in samples), default=0)
    print(f"{run_dir.name}: framework {training.get('framework')}")
    print(f"  device_memory: {rows or training.get('device_memory_error') or 'none recorded'}")
    print(f"  NVML largest used: {nvml / GIB:.2f} GiB")
    mem = device_memory(training, samples, inventory)
    if mem is not None:
        print(f"  x4: {describe(mem, room(mem, 4), training.get('per_replica_batch'))}")
    ok = bool(rows) and all(r["peak_bytes"] <= nvml for r in rows)
    print(f"  {'ok' if ok else 'FAILED'}")
    return ok


if __name__ == "__main__":
    results = [check(Path(p)) for p in sys.argv[1:]]
    sys.exit(0 if results and all(results) else 1)
