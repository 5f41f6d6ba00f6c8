"""Does NCCL accept two ranks on one GPU? Two processes, both on cuda:0, one all_reduce each.

    python3 bench/torch/nccl_same_gpu.py        # prints what NCCL said, exits 0 either way

Run under `timeout`: a refusal may also show as a hang.
"""

import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank: int, world: int, store: str, queue) -> None:
    try:
        torch.cuda.set_device(0)
        dist.init_process_group(
            "nccl",
            init_method=f"file://{store}",
            rank=rank,
            world_size=world,
            device_id=torch.device("cuda", 0),
        )
        t = torch.ones(4, device="cuda") * (rank + 1)
        dist.all_reduce(t)
        torch.cuda.synchronize()
        queue.put((rank, f"ok: all_reduce gave {t.tolist()}"))
        dist.destroy_process_group()
    except Exception as exc:
        queue.put((rank, f"{type(exc).__name__}: {str(exc)[:600]}"))


def main() -> None:
    os.environ.setdefault("NCCL_DEBUG", "WARN")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    store = tempfile.mktemp()
    procs = [ctx.Process(target=worker, args=(r, 2, store, queue)) for r in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    results = []
    while not queue.empty():
        results.append(queue.get())
    print(f"torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
    for rank, text in sorted(results):
        print(f"rank {rank}: {text}")
    print("exit codes:", [proc.exitcode for proc in procs])
    sys.exit(0)


if __name__ == "__main__":
    main()
