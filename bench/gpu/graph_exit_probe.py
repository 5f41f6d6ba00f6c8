"""Does torch alone hang at exit after a CUDA graph, with no scaldiag? (check_graph_twin.sh)

    python3 bench/gpu/graph_exit_probe.py [--trace]

A small MLP's training step, three eager steps, with --trace two more under torch.profiler (CPU and
CUDA, as scaldiag's window), then the step captured as a CUDA graph and replayed 20 times. Prints
"trained" when done; the caller times how long the process takes to exit after that line.
"""

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

model = torch.nn.Sequential(
    torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(1024, 1024, device="cuda")


def step() -> None:
    opt.zero_grad(set_to_none=False)
    model(x).square().mean().backward()
    opt.step()


for _ in range(3):
    step()
if "--trace" in sys.argv:
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        for _ in range(2):
            step()
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graph asks
    for _ in range(3):
        step()
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    step()
for _ in range(20):
    graph.replay()
torch.cuda.synchronize()
print(f"trained {time.time():.3f}", flush=True)
