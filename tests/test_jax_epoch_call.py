"""An epoch inside one compiled call (issue 46): a jitted step whose gradient is taken inside a
``lax.fori_loop`` or ``lax.scan`` loops over that many batches a call; the report says so and gives
the figure per batch, and the evaluation after every call is the epoch's, not the step's."""

import numpy as np
import pytest
from loops import ROOT, profile

pytest.importorskip("jax")

from scaldiag.collect.frameworks.jax_step_loop import ready, trips  # noqa: E402
from scaldiag.pipeline import analyze_run_dir  # noqa: E402
from scaldiag.record.reader import read_record  # noqa: E402


def test_the_trip_count_is_read_where_the_trace_knows_it():
    import jax.numpy as jnp

    assert trips("fori_loop", (0, 128, None, None), {}) == 128
    assert trips("fori_loop", (np.int64(2), 10, None, None), {}) == 8
    assert trips("fori_loop", (0, jnp.int32(5), None, None), {}) is None  # a traced value's kind
    assert trips("fori_loop", (), {"lower": 1, "upper": 4}) == 3
    assert trips("scan", (None, None, jnp.zeros((7, 3))), {}) == 7
    assert trips("scan", (None, None, None), {"length": 9}) == 9
    assert trips("scan", (None, None, None), {}) is None


def test_readiness_is_asked_of_the_outputs_first_and_last_arrays_only():
    import jax.numpy as jnp

    a = jnp.ones(3)
    a.block_until_ready()
    assert ready((a, {"w": a}, a)) is True
    assert ready((a, 1.0)) is None  # not an array: unknown, the step then ends at the script's end
    assert ready(None) is None


@pytest.mark.parametrize("loop", ["fori_loop", "scan"])
def test_an_epoch_in_one_jitted_call(tmp_path, loop):
    script = tmp_path / "jax_epoch_call.py"
    text = (ROOT / "tests" / "jax_epoch_call.py").read_text()
    text = text.replace("default=5)", "default=8)").replace("default=60000", "default=4096")
    if loop == "scan":
        text = text.replace('"--scan", action="store_true"', '"--scan", default=True')
    script.write_text(text)
    run_dir, _ = profile(script)
    record = read_record(run_dir)
    # 4,096 samples in batches of 32: the gradient is taken in each of 128 trips of the loop.
    assert record.training["step_loop"] == {"loop": f"lax.{loop}", "batches": 128}
    assert record.training["global_batch"] == 4096  # a step is one call, as seen from outside
    # The jitted accuracy after every call is the epoch's evaluation: each step ends where it
    # begins (the step's outputs waited for first), never a per-step part of the loop.
    begins = [m["t_ns"] for m in record.marks if m["mark"] == "test_begin"]
    assert len(begins) == 8  # after every call, the last one too
    ends = {s["step"]: s["end_ns"] for s in record.steps}
    assert all(ends[i] <= begins[i] for i in range(8))
    a = analyze_run_dir(run_dir)
    c = a.clock
    assert (c.inner_loop, c.inner_batches) == (f"lax.{loop}", 128)
    # a batch: the training step (the call with its device work) over the trips
    assert c.inner_batch_ms == pytest.approx(c.scopes["steady_step"].ms / 128)
    assert record.training["trace_steps"] == 1  # one traced call is a whole epoch
