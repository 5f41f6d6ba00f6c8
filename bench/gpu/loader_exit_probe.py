"""Probe: where a persistent, pinned DataLoader's exit spends ~5 s a worker (GPU machine).

    python bench/gpu/loader_exit_probe.py [--midpass] [--hold] [--profiler] [--workers 15]

bench/torch/input_bound.py's fixed twin spent 41 s (8 workers) and 76 s (15) in teardown under
`scaldiag profile` on an H100, not on the CPU. This runs the same loader and model plainly, then
optionally does what the capture does after a script: --midpass iterates the loader again for a few
batches and leaves it mid-pass (the input ceiling), --hold keeps the loader referenced from another
module (the capture's ``self.loader``), --profiler runs torch.profiler over 5 steps. Prints the time
of each phase; a teardown longer than 6 s dumps every thread's stack (faulthandler).
"""

import argparse
import atexit
import faulthandler
import sys
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

T0 = time.perf_counter()


def say(what: str) -> None:
    print(f"[{time.perf_counter() - T0:7.2f} s] {what}", flush=True)


class Augmented(Dataset):
    def __len__(self):
        return 128 * 200

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.rand(3, 64, 64, generator=g)
        for _ in range(6):
            x = (x.flip(2) + 0.01 * torch.randn(x.shape, generator=g)).clamp_(0, 1)
        return x, i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--midpass", action="store_true")
    p.add_argument("--hold", action="store_true")
    p.add_argument("--profiler", action="store_true")
    p.add_argument("--workers", type=int, default=15)
    a = p.parse_args()
    dev = torch.device("cuda")
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(32, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Augmented(), batch_size=128, shuffle=True, num_workers=a.workers,
                        pin_memory=True, persistent_workers=True, prefetch_factor=4)
    prof = None
    for step, (x, y) in enumerate(loader):
        if a.profiler and step == 20:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                      torch.profiler.ProfilerActivity.CUDA])
            prof.__enter__()
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if prof is not None and step == 25:
            torch.cuda.synchronize()
            prof.__exit__(None, None, None)
            say(f"profiler stopped, {len(prof.events())} events")
            prof = None
    torch.cuda.synchronize()
    say("training done")
    if a.midpass:
        it = iter(loader)
        for _ in range(a.workers + 10):
            next(it)
        say("loader iterated again, left mid-pass")
    if a.hold:
        sys.modules["probe_holder"] = type(sys)("probe_holder")
        sys.modules["probe_holder"].loader = loader


if __name__ == "__main__":
    main()
    say("script done")
    atexit.register(lambda: say("atexit begins (the last registered runs first)"))
    faulthandler.dump_traceback_later(6, repeat=True)
