"""A PyTorch CPU script whose Dataset does its per-sample work in Python (issue 35's first script).

    python tests/slow_getitem.py [--steps 24] [--batch 8] [--workers 0] [--work 30000] [--threads N]
        [--read-ms 0]

Plain PyTorch, unmodified for scaldiag: ``DataLoader(num_workers=0)`` by default, so every
``__getitem__`` runs on the training thread between the model's ops; the model's ops run on
PyTorch's intra-op threads (as many as the cores, unless OMP_NUM_THREADS or --threads says
otherwise). On the shared 2-core development machine OMP_NUM_THREADS=1 made it several times faster
(docs/rules.md, SD211).
"""

import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class SlowItems(Dataset):
    def __init__(self, n: int, work: int, read_s: float = 0.0):
        self.n, self.work, self.read_s = n, work, read_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.read_s:
            time.sleep(self.read_s)  # a read from a slow disk: takes as long whatever the load
        g = torch.Generator().manual_seed(i)
        x = torch.rand(3, 32, 32, generator=g)
        for _ in range(4):  # small tensor ops, one sample at a time
            x = (x.flip(2) + 0.01 * torch.randn(x.shape, generator=g)).clamp_(0, 1)
        label = sum(j * j for j in range(i % 7, self.work)) % 10  # plain Python work
        return x, label


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument(
        "--work", type=int, default=30000, help="Python loop iterations a sample (30,000: ~2 ms)"
    )
    p.add_argument(
        "--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)"
    )
    p.add_argument(
        "--read-ms", type=float, default=0.0, help="a sample's read, waited (a slow disk): 0 none"
    )
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = DataLoader(
        SlowItems(a.batch * a.steps, a.work, a.read_ms / 1e3),
        batch_size=a.batch,
        shuffle=True,
        num_workers=a.workers,
    )
    start, done = time.perf_counter(), 0
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        done += 1
    print(
        f"{done} steps, {done * a.batch / (time.perf_counter() - start):.1f} samples/s (script's"
        " own stopwatch)"
    )


if __name__ == "__main__":
    main()
