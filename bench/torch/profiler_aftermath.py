"""Host step times before, inside and after a torch.profiler window, in one process: does the profiler
slow the steps after it stops?

    python3 bench/torch/profiler_aftermath.py [--rounds 3] [--steps 400] [--width 64]

A small MLP with AdamW at batch 16 (host-bound: on a GPU each step is dozens of launches, on the CPU it is
tiny ops). Each round runs one process plain and one with the profiler (CPU activity, and CUDA where there
is a GPU) over steps 20-25, exported as scaldiag's window does; prints the median step time (us) of each
span of steps. On a GPU every step ends with torch.cuda.synchronize(), so a step times its work.
"""

import argparse
import statistics
import subprocess
import sys
import time

SPANS = [(5, 20), (20, 26), (26, 40), (40, 80), (80, 160), (160, 400)]


def child(mode: str, steps: int, width: int) -> None:
    import torch
    import torch.nn as nn
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.set_num_threads(1)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(width, width), nn.GELU())]).to(dev)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(16, width, device=dev)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    times, prof = [], None
    for i in range(steps):
        t = time.perf_counter()
        if mode == "prof" and i == 20:
            prof = profile(activities=activities)
            prof.start()
        marker = record_function(f"ProfilerStep#{i}") if prof is not None else None
        if marker is not None:
            marker.__enter__()
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sync()
        if marker is not None:
            marker.__exit__(None, None, None)
        if mode == "prof" and i == 25:
            prof.stop()
            prof.export_chrome_trace("/tmp/profiler_aftermath.pt.trace.json")
            prof = None
        times.append(time.perf_counter() - t)
    spans = " ".join(f"{a}-{b}:{1e6 * statistics.median(times[a:b]):.0f}" for a, b in SPANS if b <= steps)
    print(f"{mode:5s} {dev.type} {spans}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--child")
    a = p.parse_args()
    if a.child:
        return child(a.child, a.steps, a.width)
    print(f"median step time (us) per span of steps; profiler over steps 20-25; {a.rounds} rounds")
    for _ in range(a.rounds):
        for mode in ("plain", "prof"):
            done = subprocess.run([sys.executable, __file__, "--child", mode, "--steps", str(a.steps),
                                   "--width", str(a.width)], capture_output=True, text=True)
            print(done.stdout.strip() or done.stderr[-500:])


if __name__ == "__main__":
    main()
