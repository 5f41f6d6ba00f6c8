"""K-fold cross-validation as scripts write it (issue 46): a new model, optimizer and DataLoaders
per fold, each fold's training followed by its validation (``model.eval()``, ``torch.no_grad()``,
``model.train()``). Each fold prints its own timer, as scripts do:
``fold 1: 2 epochs, 24 steps, 3.10 ms/step; validation 0.05 s``.

    python tests/cv_folds.py [--folds 3] [--epochs 2]
    python tests/cv_folds.py --outer-epochs 2   # each epoch loops over the folds (one model a fold)
    python tests/cv_folds.py --no-eval-mode     # validation under torch.no_grad() alone
"""

import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Subset, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--folds", type=int, default=3)
parser.add_argument("--epochs", type=int, default=2, help="epochs of each fold's training")
parser.add_argument(
    "--outer-epochs", type=int, default=0, help="each epoch loops over the folds, models kept"
)
parser.add_argument(
    "--no-eval-mode", action="store_true", help="validate under torch.no_grad() alone"
)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
data = TensorDataset(torch.randn(1152, 64), torch.randint(0, 10, (1152,)))
indices = torch.randperm(len(data)).tolist()
fold_size = len(data) // args.folds


def make_model():
    return nn.Sequential(
        nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    )


def loaders(fold):
    val_idx = indices[fold * fold_size : (fold + 1) * fold_size]
    train_idx = indices[: fold * fold_size] + indices[(fold + 1) * fold_size :]
    train = DataLoader(Subset(data, train_idx), batch_size=64, shuffle=True)
    val = DataLoader(Subset(data, val_idx), batch_size=16)
    return train, val


def train_epoch(model, optimizer, train):
    model.train()
    steps = 0
    for x, y in train:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
    return steps


def validate(model, val):
    if not args.no_eval_mode:
        model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in val:
            correct += int((model(x).argmax(1) == y).sum())
            for _ in range(3):  # test-time augmentation: three more passes
                model(x + 0.01 * torch.randn_like(x))
    if not args.no_eval_mode:
        model.train()
    return correct / len(val.dataset)


def fold_run(fold, model, optimizer, epochs):
    train, val = loaders(fold)
    begin, steps = time.perf_counter(), 0
    for _ in range(epochs):
        steps += train_epoch(model, optimizer, train)
    trained = time.perf_counter()
    acc = validate(model, val)
    val_s = time.perf_counter() - trained
    print(
        f"fold {fold + 1}: {epochs} epochs, {steps} steps, "
        f"{(trained - begin) * 1e3 / steps:.2f} ms/step; validation {val_s:.2f} s, acc {acc:.3f}",
        flush=True,
    )


if args.outer_epochs:
    models = [make_model() for _ in range(args.folds)]
    optimizers = [torch.optim.Adam(m.parameters(), lr=1e-3) for m in models]
    for epoch in range(args.outer_epochs):
        begin = time.perf_counter()
        for fold in range(args.folds):
            fold_run(fold, models[fold], optimizers[fold], 1)
        print(f"epoch {epoch + 1}: {time.perf_counter() - begin:.2f} s", flush=True)
else:
    for fold in range(args.folds):
        model = make_model()
        fold_run(fold, model, torch.optim.Adam(model.parameters(), lr=1e-3), args.epochs)
