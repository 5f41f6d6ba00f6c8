"""Input-bound: a Dataset that augments each sample in Python, loaded on the training thread
(num_workers=0).

    scaldiag profile bench/torch/input_bound.py -- [--fixed] [--steps 60]

--fixed: the SD101 fix, DataLoader(num_workers=W, pin_memory=True, persistent_workers=True,
prefetch_factor=4) and non_blocking copies; W is --workers, by default min(8, cores) (the advice
before it knew the machine; bench/accuracy's twin passes the count scaldiag advises for the
machine). Plain PyTorch, unmodified for scaldiag; one GPU (or the CPU).
"""

import argparse
import os
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Augmented(Dataset):
    def __init__(self, n: int):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.rand(3, 64, 64, generator=g)
        for _ in range(6):  # per-sample CPU work: flips, noise, clamping
            x = (x.flip(2) + 0.01 * torch.randn(x.shape, generator=g)).clamp_(0, 1)
        return x, i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fixed", action="store_true")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    a = p.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = Augmented(a.batch * a.steps)
    if a.fixed:
        loader = DataLoader(
            data,
            batch_size=a.batch,
            shuffle=True,
            num_workers=a.workers,
            pin_memory=dev.type == "cuda",
            persistent_workers=True,
            prefetch_factor=4,
        )
    else:
        loader = DataLoader(data, batch_size=a.batch, shuffle=True)
    start, done = time.perf_counter(), 0
    for x, y in loader:
        x, y = x.to(dev, non_blocking=a.fixed), y.to(dev, non_blocking=a.fixed)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        done += 1
    if dev.type == "cuda":
        torch.cuda.synchronize()
    print(
        f"{done} steps, {done * a.batch / (time.perf_counter() - start):.0f} samples/s (script's"
        " own stopwatch)"
    )


if __name__ == "__main__":
    main()
