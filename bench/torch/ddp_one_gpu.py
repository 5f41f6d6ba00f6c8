"""DDP mechanics on ONE GPU: every torchrun rank on the same device, gloo all-reducing CUDA tensors.

    scaldiag profile --nproc-per-node 2 bench/torch/ddp_one_gpu.py -- [--steps 20] [--slow-rank 1]

Not a scaling measurement: the ranks share one GPU (NCCL refuses two ranks on one device:
bench/results/gpu_h200/torch/torch.md, nccl_same_gpu.txt), so this checks that every rank is
captured with its CUDA kernels, that the ranks merge and that the Ranks table names the rank the
others wait for (--slow-rank does extra matmuls each step). With more GPUs than ranks each rank
takes GPU LOCAL_RANK. Plain PyTorch, unmodified for
scaldiag.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--slow-rank", type=int, default=1)
    p.add_argument("--backend", default="gloo")
    a = p.parse_args()
    dist.init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda", local % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    torch.manual_seed(0)
    w = a.width
    model = nn.Sequential(
        nn.Linear(w, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 10)
    ).to(dev)
    ddp = DistributedDataParallel(model, device_ids=[dev.index] if cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    n = a.batch * a.steps * world
    data = TensorDataset(torch.randn(n, w), torch.randint(0, 10, (n,)))
    loader = DataLoader(data, batch_size=a.batch, sampler=DistributedSampler(data), pin_memory=cuda)
    extra = torch.randn(2048, 2048, device=dev)
    start, done = time.perf_counter(), 0
    for x, y in loader:
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        if rank == a.slow_rank:
            for _ in range(8):  # the straggler: more device work each step
                extra = torch.tanh(extra @ extra)
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        done += 1
    if cuda:
        torch.cuda.synchronize()
    print(
        f"rank {rank}/{world} on {dev} ({a.backend}): {done} steps, "
        f"{done * a.batch / (time.perf_counter() - start):.0f} samples/s (this rank's stopwatch)"
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
