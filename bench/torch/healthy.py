"""Wide matmuls under bf16 autocast, data already on the GPU: compute-heavy at a large enough batch.

Not healthy at its default batch (1024) on an H200: the step replayed as one CUDA graph (--fixed
graphs) was 1.31x [1.24, 1.39] faster with the same kernels
(bench/results/gpu_h200/torch/torch.md#sd105_twinsmd), so the eager step waits on the host about a
quarter of its time; the accuracy benchmark calls it torch_wide_mlp, planted host overhead on a GPU,
and runs it at batch 4096 as its healthy PyTorch script (torch_healthy).

    scaldiag profile bench/torch/healthy.py -- [--steps 60] [--batch 1024]
    python3 bench/torch/healthy.py --fixed graphs|compile [--json FILE]     # SD105's fix, as twins

--fixed graphs: the whole step (forward, backward, fused AdamW) captured once as a CUDA graph and
replayed, so the host launches one graph a step instead of each kernel; the kernels are the same.
--fixed compile: SD105's first PyTorch advice, torch.compile(model, mode="reduce-overhead") (fused
kernels replayed as CUDA graphs). Plain PyTorch, unmodified for scaldiag.

The script's own stopwatch: after --warmup steps (compilation, graph capture, scaldiag's profiler
window in steps 3-7) it synchronizes with the device and times --windows equal windows of the
remaining steps, each ended by torch.cuda.synchronize(), so every window times the device's work,
not the host's dispatch. It prints samples/s over all of them and per window; --json writes the
same.
"""

import argparse
import json
import time

import torch
import torch.nn as nn


def build(a, dev):
    w = a.width
    model = nn.Sequential(
        nn.Linear(w, w),
        nn.GELU(),
        nn.Linear(w, w),
        nn.GELU(),
        nn.Linear(w, w),
        nn.GELU(),
        nn.Linear(w, 10),
    ).to(dev)
    fused = {"fused": True} if dev.type == "cuda" else {}
    capturable = {"capturable": True} if a.fixed == "graphs" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **fused, **capturable)
    x = torch.randn(a.batch, w, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    return model, opt, x, y


def eager_step(model, opt, x, y, dev, mark_step=False):
    def step():
        if mark_step:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def graph_step(model, opt, x, y):
    """PyTorch's whole-network capture recipe: warm up on a side stream, capture one step, replay
    it."""

    def body():
        # cache_enabled=False: autocast's cast cache must not outlive the capture
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)  # the grads are then allocated from the graph's pool, and stay
    with torch.cuda.graph(graph):
        body()
    return graph.replay


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--fixed", choices=["graphs", "compile"])
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--windows", type=int, default=5)
    p.add_argument("--json")
    a = p.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model, opt, x, y = build(a, dev)
    if a.fixed == "graphs" and dev.type == "cuda":
        step = graph_step(model, opt, x, y)
    elif a.fixed == "compile":
        compiled = torch.compile(model, mode="reduce-overhead" if dev.type == "cuda" else "default")
        step = eager_step(compiled, opt, x, y, dev, mark_step=dev.type == "cuda")
    else:
        step = eager_step(model, opt, x, y, dev)
    start = time.perf_counter()
    for _ in range(min(a.warmup, a.steps)):
        step()
    sync()
    per_window = max(1, (a.steps - a.warmup) // a.windows)
    rates = []
    steady_start = time.perf_counter()
    for _ in range(a.windows if a.steps > a.warmup else 0):
        t0 = time.perf_counter()
        for _ in range(per_window):
            step()
        sync()
        rates.append(per_window * a.batch / (time.perf_counter() - t0))
    end = time.perf_counter()
    steady = len(rates) * per_window * a.batch / (end - steady_start) if rates else 0.0
    done = min(a.warmup, a.steps) + len(rates) * per_window
    print(
        f"{done} steps, {done * a.batch / (end - start):.0f} samples/s (script's own stopwatch,"
        f" warm-up included); steady {steady:.0f} samples/s over {len(rates)} x {per_window}"
        f" synchronized steps (windows: {', '.join(f'{r:.0f}' for r in rates)}); fixed:"
        f" {a.fixed or 'no'}"
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                {
                    "samples_per_s": steady,
                    "window_samples_per_s": rates,
                    "steps_per_window": per_window,
                    "batch": a.batch,
                    "fixed": a.fixed,
                    "warmup_steps": a.warmup,
                    "step_ms": 1000 * a.batch / steady if steady else None,
                },
                f,
            )


if __name__ == "__main__":
    main()
