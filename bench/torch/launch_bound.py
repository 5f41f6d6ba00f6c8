"""Launch-bound: a deep MLP of small layers at batch 32, so each step is hundreds of tiny kernels.

    scaldiag profile bench/torch/launch_bound.py -- [--fixed] [--steps 300]

--fixed: the SD105 fix, torch.compile(model, mode="reduce-overhead") (fused kernels replayed as CUDA
graphs) and a fused optimizer. Plain PyTorch, unmodified for scaldiag.
"""

import argparse
import time

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fixed", action="store_true")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--layers", type=int, default=24)
    a = p.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    layers = []
    for _ in range(a.layers):
        layers += [nn.Linear(256, 256), nn.LayerNorm(256), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(256, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **({"fused": True} if a.fixed and dev.type == "cuda" else {}))
    step = model
    if a.fixed:
        try:
            step = torch.compile(model, mode="reduce-overhead" if dev.type == "cuda" else "default")
        except Exception as exc:  # the twin still runs, eager
            print(f"torch.compile unavailable ({exc}); running eager")
    x = torch.randn(a.batch, 256, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    start = time.perf_counter()
    for _ in range(a.steps):
        if a.fixed and hasattr(torch.compiler, "cudagraph_mark_step_begin"):
            torch.compiler.cudagraph_mark_step_begin()
        try:
            out = step(x)
        except Exception as exc:  # compilation failed on this machine: the twin runs eager, and says so
            print(f"torch.compile failed ({type(exc).__name__}: {exc}); running eager")
            step = model
            out = step(x)
        loss = nn.functional.cross_entropy(out, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    print(f"{a.steps} steps, {a.steps * a.batch / (time.perf_counter() - start):.0f} samples/s (script's own stopwatch, "
          "compilation included)")


if __name__ == "__main__":
    main()
