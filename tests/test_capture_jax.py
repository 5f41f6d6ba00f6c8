"""``scaldiag.capture()`` of a plain JAX loop in this very process, as in a notebook's kernel: the
JAX loop adapter armed for the block (its step a ``jax.jit`` function that takes a gradient), its
run finished at the block's end, ``jax.jit`` and the rest JAX's own again after it; twice in one
process, the second block calling the step jitted in the first (a training cell run again); a step
jitted before any block is JAX's own, not followed, and the report says why."""

import json
import os

import pytest

pytestmark = pytest.mark.slow
os.environ.setdefault("JAX_PLATFORMS", "cpu")

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
from jax._src import core  # noqa: E402

import scaldiag  # noqa: E402
from scaldiag.collect.env import RUN_DIR_ENV  # noqa: E402
from scaldiag.collect.inprocess import IN_PROCESS_UNKNOWN, JAX_JITTED_BEFORE  # noqa: E402
from scaldiag.record.reader import read_record  # noqa: E402

STEPS, BATCH = 30, 24


def jax_patch_points() -> dict:
    """What the JAX loop adapter patches, as it is now."""
    return {
        "jit": jax.jit,
        "grad": jax.grad,
        "value_and_grad": jax.value_and_grad,
        "vjp": jax.vjp,
        "fori_loop": jax.lax.fori_loop,
        "scan": jax.lax.scan,
        "process_primitive": vars(core.EvalTrace)["process_primitive"],
    }


def loss_fn(params, x, y):
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def jit_step():
    """JAX's own way: a jitted step that takes its gradient with value_and_grad."""

    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads), loss

    return step


def data():
    key = jax.random.PRNGKey(0)
    params = {"w": jax.random.normal(key, (8, 4)) * 0.1, "b": jnp.zeros(4)}
    return params, jax.random.normal(key, (BATCH, 8)), jnp.zeros((BATCH, 4))


def train(step, params, x, y, steps: int = STEPS):
    for _ in range(steps):
        params, loss = step(params, x, y)
    float(loss)  # the cell reads its loss: the device caught up
    return params


def test_a_jax_loop_captured_twice_in_one_process(tmp_path):
    out = tmp_path / "runs"
    before = jax_patch_points()
    params, x, y = data()
    caps, step = [], None
    for block in range(2):
        with scaldiag.capture(out=out) as cap:
            if block == 0:  # jitted inside the block; the second block calls it again
                step = jit_step()
            assert jax.jit is not before["jit"]  # armed for the block
            params = train(step, params, x, y)
        assert jax_patch_points() == before
        run = json.loads((cap.run_dir / "run.json").read_text())
        assert run["status"] == "finished"
        assert cap.report is not None, cap.report_error
        assert cap.report.steps["recorded"] == STEPS
        assert cap.report.steps["samples_per_step"] == BATCH
        for unknown in IN_PROCESS_UNKNOWN:
            assert unknown in cap.report.raw.analysis.missing
        assert JAX_JITTED_BEFORE not in run["missing"]
        training = read_record(cap.run_dir).training
        assert training["framework"]["name"] == "jax"
        assert training["loop_adapters"] == ["jax"]
        marks = [m["mark"] for m in read_record(cap.run_dir).marks]
        assert marks.count("fit_begin") == marks.count("fit_end") == 1  # finished at the end
        caps.append(cap)
    assert caps[0].run_dir != caps[1].run_dir
    assert RUN_DIR_ENV not in os.environ
    # Training after the blocks, with the step jitted inside one: recorded nowhere.
    train(step, params, x, y, 5)
    train(jit_step(), params, x, y, 5)
    assert sorted(out.iterdir()) == sorted(c.run_dir for c in caps)


def test_a_step_jitted_before_the_block_is_not_followed_and_the_report_says_why(tmp_path):
    step = jit_step()  # an earlier cell's: JAX's own jit, not scaldiag's
    params, x, y = data()
    with scaldiag.capture(out=tmp_path / "runs") as cap:
        train(step, params, x, y, 10)
    assert cap.report is not None, cap.report_error
    assert cap.report.steps is None  # no step recorded
    assert not (cap.run_dir / "steps.jsonl").exists()
    assert JAX_JITTED_BEFORE in cap.report.raw.analysis.missing
