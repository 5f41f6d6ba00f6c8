"""The input ceiling measures the pipeline as ``fit`` runs it: a PyDataset with workers through
Keras's own enqueuer (issue 35: ``__getitem__`` one call at a time read a 4-worker pipeline at a
quarter of its speed and raised SD207 where the workers were the fix). Behaviour only: which
threads made the batches and that the pool is gone afterwards, no rate compared."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from scaldiag.collect.frameworks import input_ceiling  # noqa: E402


class Slow(keras.utils.PyDataset):
    """Batches of 8 rows that take 5 ms each to make; records the thread that made each."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.made_on: set[int] = set()

    def __len__(self):
        return 1000

    def __getitem__(self, i):
        self.made_on.add(threading.get_ident())
        time.sleep(0.005)
        return np.zeros((8, 4), "float32"), np.zeros((8, 1), "float32")


def _pool_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("Worker_")]


def test_a_pydataset_with_workers_is_measured_through_its_pool_and_the_pool_stops():
    data = Slow(workers=3)
    got = input_ceiling.measure(data, seconds=0.3)
    assert got is not None and got["batches"] > 0 and got["first_batch_size"] == 8
    assert "enqueuer (3 worker threads" in got["source"]
    assert threading.get_ident() not in data.made_on  # made by the pool, not by this thread
    assert _pool_threads() == []  # the enqueuer's thread stopped with the measurement


def test_a_pydataset_without_workers_is_called_as_fit_calls_it():
    data = Slow()  # workers=1: fit calls __getitem__ itself, so does the measurement
    got = input_ceiling.measure(data, seconds=0.2)
    assert got is not None and got["source"] == "Slow.__getitem__ called alone"
    assert data.made_on == {threading.get_ident()}


def test_a_dataloader_s_workers_first_batches_are_start_up_not_throughput():
    torch = pytest.importorskip("torch")
    from scaldiag.collect.frameworks.torch_capture import measure_loader

    rows = torch.utils.data.TensorDataset(torch.zeros(7 * 4, 3))
    loader = torch.utils.data.DataLoader(rows, batch_size=4, num_workers=2)
    got = measure_loader(loader, seconds=30)
    # 7 batches: the first (the workers' start) and the second worker's first are left out
    assert got is not None and got["batches"] == 5 and got["first_batch_size"] == 4
    plain = measure_loader(torch.utils.data.DataLoader(rows, batch_size=4), seconds=30)
    assert plain is not None and plain["batches"] == 6
