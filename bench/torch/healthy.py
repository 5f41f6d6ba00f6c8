"""Healthy, compute-bound: wide matmuls at batch 1024 under bf16 autocast, data already on the GPU.

    scaldiag profile bench/torch/healthy.py -- [--steps 60]

No fix is due: scaldiag should call it compute-bound and raise no finding above its thresholds.
"""

import argparse
import time

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--width", type=int, default=4096)
    a = p.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    w = a.width
    model = nn.Sequential(nn.Linear(w, w), nn.GELU(), nn.Linear(w, w), nn.GELU(), nn.Linear(w, w), nn.GELU(),
                          nn.Linear(w, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if dev.type == "cuda" else {}))
    x = torch.randn(a.batch, w, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    dtype = torch.bfloat16
    start = time.perf_counter()
    for _ in range(a.steps):
        with torch.autocast(dev.type, dtype=dtype):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    print(f"{a.steps} steps, {a.steps * a.batch / (time.perf_counter() - start):.0f} samples/s (script's own stopwatch)")


if __name__ == "__main__":
    main()
