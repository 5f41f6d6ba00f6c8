"""Several processes of one script training (issue 46): a multiprocessing pool whose workers each
train a model of their own on the same device. Each forked process that trains records into
RUN_DIR/process<PID>, and the script's record names them; a DataLoader's worker processes (forked
too) never step and record nothing."""

import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from conftest import profile_one_thread  # noqa: E402

from scaldiag.pipeline import analyze_run_dir  # noqa: E402
from scaldiag.record.reader import read_record  # noqa: E402

pytestmark = pytest.mark.slow  # real PyTorch trainings under `scaldiag profile`

ROOT = Path(__file__).resolve().parent.parent

POOL = textwrap.dedent("""
    import multiprocessing as mp
    import torch, torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    def train(seed):
        torch.manual_seed(seed)
        torch.set_num_threads(1)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = TensorDataset(torch.randn(24 * 12, 16), torch.randint(0, 4, (24 * 12,)))
        steps = 0
        for x, y in DataLoader(data, batch_size=24):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
            steps += 1
        return steps

    if __name__ == "__main__":
        with mp.get_context("fork").Pool(2) as pool:
            print("steps", pool.map(train, [0, 1]))
""")

LOADER_WORKERS = textwrap.dedent("""
    import torch, torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(24 * 10, 16), torch.randint(0, 4, (24 * 10,)))
    for epoch in range(2):  # workers forked again each epoch
        for x, y in DataLoader(data, batch_size=24, num_workers=2):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
""")


def profile(tmp_path, text: str) -> Path:
    script = tmp_path / "train.py"
    script.write_text(text)
    return profile_one_thread(tmp_path, script)


def test_each_forked_process_that_trains_has_its_own_record_and_is_named(tmp_path):
    run_dir = profile(tmp_path, POOL)
    record = read_record(run_dir)
    names = record.training.get("other_training_processes")
    assert names is not None and len(names) == 2
    # the script's own process never trained: none of the workers' steps or marks are in it
    assert not record.steps
    assert not [m for m in record.marks if m["mark"] == "fit_begin"]
    for name in names:
        child = read_record(run_dir / name)
        assert child.training["process"]["forked_from"] > 0
        assert [m["mark"] for m in child.marks].count("fit_begin") == 1
        assert child.steps  # its own steps (the last ones may be lost: the pool kills its workers)
        assert "trace" not in child.training  # untraced: the profiler is the script's process's
    missing = " ".join(analyze_run_dir(run_dir).missing)
    assert "2 other process(es) of the script trained" in missing


def test_dataloader_workers_record_nothing_of_their_own(tmp_path):
    run_dir = profile(tmp_path, LOADER_WORKERS)
    record = read_record(run_dir)
    assert not list(run_dir.glob("process*"))
    assert "other_training_processes" not in record.training
    assert len(record.steps) == 20  # from the first fetch, one a step(); the open one dropped
    # the workers forked from a process with a capture under way wrote none of its lines again
    assert [m["mark"] for m in record.marks].count("fit_begin") == 1
    assert [row["step"] for row in record.steps] == list(range(20))
