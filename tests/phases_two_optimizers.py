"""Fine-tuning in two phases, each with its own optimizer, as scripts write it (issue 46).

Phase 1 trains the head alone (the backbone frozen) with one Adam; phase 2 unfreezes everything and
makes a new Adam. Then, with ``--gan``, a third part where two optimizers step in turn inside each
iteration (a GAN's discriminator, then its generator). Each part prints its own clock, as scripts
do: ``phase 1: 40 steps, 3.1 ms/step``.

    python tests/phases_two_optimizers.py [--steps 40] [--gan]
"""

import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40, help="steps of each phase")
parser.add_argument("--gan", action="store_true", help="then a GAN part: D and G step in turn")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
data = TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,)))
loader = DataLoader(data, batch_size=64, shuffle=True)

backbone = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU())
head = nn.Linear(512, 10)
model = nn.Sequential(backbone, head)
loss_fn = nn.CrossEntropyLoss()


def train_phase(name, optimizer, steps):
    model.train()
    done, begin = 0, time.perf_counter()
    while done < steps:
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            done += 1
            if done == steps:
                break
    ms = (time.perf_counter() - begin) * 1e3 / steps
    print(f"{name}: {steps} steps, {ms:.2f} ms/step, loss {loss.item():.3f}", flush=True)


# Phase 1: the head alone.
for p in backbone.parameters():
    p.requires_grad = False
train_phase("phase 1 (head)", torch.optim.Adam(head.parameters(), lr=1e-3), args.steps)

# Phase 2: everything, with a new optimizer.
for p in backbone.parameters():
    p.requires_grad = True
train_phase("phase 2 (all)", torch.optim.Adam(model.parameters(), lr=1e-4), args.steps)

if args.gan:
    # A GAN's iteration: the discriminator's optimizer steps, then the generator's.
    gen = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 64))
    disc = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4)
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4)
    bce = nn.BCEWithLogitsLoss()
    done, begin = 0, time.perf_counter()
    while done < args.steps:
        for real, _ in loader:
            fake = gen(torch.randn(real.shape[0], 16))
            ones, zeros = torch.ones(real.shape[0], 1), torch.zeros(real.shape[0], 1)
            d_loss = bce(disc(real), ones) + bce(disc(fake.detach()), zeros)
            opt_d.zero_grad()
            d_loss.backward()
            opt_d.step()
            g_loss = bce(disc(fake), ones)
            opt_g.zero_grad()
            g_loss.backward()
            opt_g.step()
            done += 1
            if done == args.steps:
                break
    ms = (time.perf_counter() - begin) * 1e3 / args.steps
    print(f"gan: {args.steps} iterations, {ms:.2f} ms/iteration", flush=True)
