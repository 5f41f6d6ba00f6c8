"""device_events numbers each distinct (name, tf_op, hlo_op, hlo_category) once: the same categories
as one at a time."""

from pathlib import Path

import numpy as np

from scaldiag.analyze import device
from scaldiag.readers import read_trace
from scaldiag.trace import Line, Plane

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _one_at_a_time(plane):
    cache = {}
    return np.concatenate(
        [device._categories_by_event(plane, line, cache) for line in plane.lines if len(line)]
    )


def test_categories_match_event_by_event_on_the_gpu_fixtures():
    for path in (
        FIXTURES / "gpu" / "h200x2_jax_dataparallel.xplane.pb",
        FIXTURES / "gpu" / "keras_jax_1gpu",
    ):
        _, trace = read_trace(path)
        assert trace.device_planes
        for plane in trace.device_planes:
            assert device.device_events(plane).category.tolist() == _one_at_a_time(plane).tolist()


def test_text_none_and_absent_columns():
    names = ["MemcpyH2D", "ncclDevKernel_AllReduce", "transpose_kernel", "gemm"]
    n = 40
    rng = np.random.default_rng(2)
    pool = [None, "a:Transpose", "b:MatMul", "", "copy", "data formatting", "fusion.3"]
    lines = [
        Line(
            name="Stream #1",
            start_ns=np.arange(n),
            end_ns=np.arange(n) + 1,
            name_id=rng.integers(0, len(names), n).astype(np.int32),
            stats={
                k: np.array([pool[i] for i in rng.integers(0, len(pool), n)], dtype=object)
                for k in ("tf_op", "hlo_op", "hlo_category")[:s]
            },
        )
        for s in range(4)
    ]
    plane = Plane(name="/device:GPU:0", event_names=names, lines=lines)
    assert device.device_events(plane).category.tolist() == _one_at_a_time(plane).tolist()
