"""Short epochs whose DataLoader workers start every epoch: the wait for a new pass's first batch is
the epoch's edge (``input_ready``, from the iterator being new), not the first step's time."""

import subprocess
import sys
import textwrap

import pytest
from loops import profile

pytest.importorskip("torch")

from scaldiag.analyze import recorded_steps  # noqa: E402
from scaldiag.record.reader import read_record  # noqa: E402

SCRIPT = textwrap.dedent("""
    import time, torch
    from torch.utils.data import DataLoader, Dataset

    class Data(Dataset):
        def __len__(self): return 4 * 16
        def __getitem__(self, i):
            return torch.randn(8), torch.randint(0, 2, ()).item()

    if __name__ == "__main__":
        torch.set_num_threads(1)
        model = torch.nn.Linear(8, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(Data(), batch_size=16, num_workers=1)  # workers start at each iter()
        for epoch in range(4):
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad(); loss.backward(); opt.step()
""")


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    script = tmp_path_factory.mktemp("loader") / "loop.py"
    script.write_text(SCRIPT)
    run_dir, _ = profile(script)
    return read_record(run_dir)


def test_the_workers_start_is_the_epochs_edge(record):
    ready = [m for m in record.marks if m["mark"] == "input_ready"]
    # Every pass of the training loop, and not the input-ceiling's own pass after training.
    begins = [m["t_ns"] for m in record.marks if m["mark"] == "epoch_begin"]
    assert len(ready) == len(begins) == 4
    waits = list(zip(begins, [m["t_ns"] for m in ready]))
    for period in recorded_steps.periods(record.steps, record.training, record.marks):
        for begin, arrived in waits:
            assert period.end_ns <= begin or period.begin_ns >= arrived, (period, begin, arrived)


def test_the_batches_the_workers_make_ahead_are_the_input_prefetch(record):
    """Each pass's ``input_ready`` says how many batches torch asked its workers for before the loop
    took any (prefetch_factor x num_workers: 2 x 1 here); the steady steps after the warm-up that
    consume them are ``input prefetch``, not steady."""
    ready = [m for m in record.marks if m["mark"] == "input_ready"]
    assert [m.get("in_flight") for m in ready] == [2, 2, 2, 2]
    kinds = [p.kind for p in recorded_steps.periods(record.steps, record.training, record.marks)]
    assert recorded_steps.PREFETCHED in kinds and recorded_steps.STEADY in kinds, kinds


PERSISTENT = textwrap.dedent("""
    import atexit, gc, weakref, torch
    import torch._dynamo  # else the first optimizer imports it; torch.fx keeps that frame's callers
    from torch.utils.data import DataLoader, Dataset

    class Data(Dataset):
        def __len__(self): return 4 * 16
        def __getitem__(self, i):
            return torch.randn(8), i % 2

    def main():
        torch.set_num_threads(1)
        model = torch.nn.Linear(8, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(Data(), batch_size=16, num_workers=1, persistent_workers=True)
        for epoch in range(2):
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad(); loss.backward(); opt.step()
        return weakref.ref(loader)

    if __name__ == "__main__":
        gc.disable()  # what refcounting alone frees, as in a plain run's end
        ref = main()
        atexit.register(lambda: print("loader alive at exit:", ref() is not None, flush=True))
""")


def test_the_users_loader_is_freed_when_the_script_ends_as_in_a_plain_run(tmp_path):
    """The capture holds no DataLoader past the script's end, and no cycle through its iterator:
    a persistent, pinned loader alive at exit has each worker joined by torch's atexit hooks for
    5 s (15 workers: 76 s of teardown on an H100, ``git show
    6a74f68:bench/gpu/loader_exit_probe.py``). Here the loader's last reference goes with main(),
    the capture's input ceiling having iterated it."""
    script = tmp_path / "persistent.py"
    script.write_text(PERSISTENT)
    plain = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert "loader alive at exit: False" in plain.stdout, plain.stdout + plain.stderr[-2000:]
    run_dir, out = profile(script)
    assert "loader alive at exit: False" in out, out[-2000:]
    training = (run_dir / "training.json").read_text()
    assert "input_ceiling" in training  # the ceiling did iterate the persistent loader
