"""A tiny DDP job over gloo for the multi-node tests: synthetic data, a model of a few MB of
gradients.

    torchrun ... multinode_job.py --steps 30 [--slow-input-node K --slow-input-ms MS]

One process per node (tests/test_multinode.py runs two "nodes" in two network
namespaces). ``--slow-input-node K``: the ranks of node K (torchrun's GROUP_RANK)
take MS longer for each batch of input, in the DataLoader, as a slow disk or
decoder on that machine would.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

WIDTH = 512  # eight 512x512 layers: 2.1 M parameters, 8.4 MB of float32 gradients a step
LAYERS = 8
BUCKET_MB = 1


class Synthetic(Dataset):
    def __init__(self, n: int, delay_s: float, batch: int):
        self.x = torch.randn(n, WIDTH, generator=torch.Generator().manual_seed(0))
        self.delay_s = delay_s / batch  # spread over the batch's samples

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.x[i], self.x[i].sum()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--slow-input-node", type=int, default=-1)
    p.add_argument("--slow-input-ms", type=float, default=0.0)
    args = p.parse_args()
    torch.set_num_threads(1)  # one core a node: the test machine has two
    dist.init_process_group("gloo")
    node = int(os.environ.get("GROUP_RANK", "0"))
    delay_s = args.slow_input_ms / 1e3 if node == args.slow_input_node else 0.0
    data = Synthetic(args.batch * args.steps * dist.get_world_size(), delay_s, args.batch)
    loader = DataLoader(
        data, batch_size=args.batch, sampler=DistributedSampler(data, shuffle=False), drop_last=True
    )
    # 1 MB buckets, a layer each: 8 all-reduces a step overlapping backward, as DDP does with larger
    # models, and for the merge of the nodes' clocks more collective ends to agree on (40 in 5
    # traced steps).
    layers = [m for _ in range(LAYERS) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())]
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(*layers), bucket_cap_mb=BUCKET_MB
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x).sum(1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
