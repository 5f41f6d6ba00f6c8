"""Record a small real Kineto trace of a tiny CUDA training loop: the GPU fixture for the Kineto
reader tests.

    python3 bench/torch/record_fixture.py --out DIR

torch.profiler with a schedule (wait 1, warmup 1, active 4) and tensorboard_trace_handler, so the
trace has ProfilerStep#N spans as torch writes them; pinned, non_blocking H2D copies, a memset,
compute kernels. Writes DIR/<worker>.<ms>.pt.trace.json.gz.
"""

import argparse

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args()
    dev = torch.device("cuda")
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x_host = torch.randn(64, 256).pin_memory()
    y_host = torch.randint(0, 10, (64,)).pin_memory()
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=1, warmup=1, active=4),
        on_trace_ready=tensorboard_trace_handler(a.out, worker_name="h200", use_gzip=True),
    ) as prof:
        for _ in range(7):
            x, y = x_host.to(dev, non_blocking=True), y_host.to(dev, non_blocking=True)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=False)  # zero_ with a memset
            loss.backward()
            opt.step()
            loss.item()  # a D2H copy and a sync, as many loops have
            prof.step()


if __name__ == "__main__":
    main()
