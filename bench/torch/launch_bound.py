"""Launch-bound: a deep MLP of small layers at batch 32, so each step is hundreds of tiny kernels.

    scaldiag profile bench/torch/launch_bound.py -- [--fixed] [--steps 300]

--fixed: the SD105 fix, torch.compile(model, mode="reduce-overhead") (fused kernels replayed as CUDA
graphs) and a fused optimizer. Plain PyTorch, unmodified for scaldiag.

The script's own stopwatch: the whole run (compilation included) and the steady steps after --warmup
steps (compilation, CUDA-graph recording and scaldiag's profiler window in steps 3-7), synchronized
with the device at both ends; the benchmark compares the steady figure, as the Keras zoo compares
the epochs after the first. Until run 6 the twin was timed over all 200 steps with its compilation:
0.18x on an H200 (about 9 s of compilation against 2 s of eager training), which measured the
compiler, not the fix.
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
    p.add_argument("--warmup", type=int, default=10)
    a = p.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    layers = []
    for _ in range(a.layers):
        layers += [nn.Linear(256, 256), nn.LayerNorm(256), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(256, 10)).to(dev)
    opt = torch.optim.AdamW(
        model.parameters(), lr=1e-3, **({"fused": True} if a.fixed and dev.type == "cuda" else {})
    )
    step = model
    if a.fixed:
        try:
            step = torch.compile(model, mode="reduce-overhead" if dev.type == "cuda" else "default")
        except Exception as exc:  # the twin still runs, eager
            print(f"torch.compile unavailable ({exc}); running eager")
    x = torch.randn(a.batch, 256, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    warmup = min(a.warmup, a.steps)
    start = steady_start = time.perf_counter()
    for i in range(a.steps):
        if i == warmup:  # compilation and graph recording happen in the first steps
            sync()
            steady_start = time.perf_counter()
        if a.fixed and hasattr(torch.compiler, "cudagraph_mark_step_begin"):
            torch.compiler.cudagraph_mark_step_begin()
        try:
            out = step(x)
        except (
            Exception
        ) as exc:  # compilation failed on this machine: the twin runs eager, and says so
            print(f"torch.compile failed ({type(exc).__name__}: {exc}); running eager")
            step = model
            out = step(x)
        loss = nn.functional.cross_entropy(out, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    sync()
    end = time.perf_counter()
    steady = (a.steps - warmup) * a.batch / (end - steady_start) if a.steps > warmup else 0.0
    print(
        f"{a.steps} steps, {a.steps * a.batch / (end - start):.0f} samples/s (script's own"
        f" stopwatch, compilation included); steady {steady:.0f} samples/s over {a.steps - warmup}"
        f" synchronized steps after {warmup} warm-up steps ({steady_start - start:.2f} s:"
        f" compilation and warm-up); fixed: {a.fixed}"
    )


if __name__ == "__main__":
    main()
