"""The JAX loop adapter (jax_loop): a jitted function whose trace takes a gradient is the step."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("jax")

from scaldiag.analyze import recorded_steps  # noqa: E402
from scaldiag.record.reader import read_record  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "jax.jit (no gradient)"

# JAX's own way: a jitted optax step in a Python loop, a jitted evaluation after each epoch (its
# static argument through functools.partial), a jitted per-step metric called between every two
# steps (the loop's iteration, not evaluation) and a PRNG key given before the batch.
OPTAX_LOOP = textwrap.dedent("""
    import functools, time
    import jax, jax.numpy as jnp, optax
    key = jax.random.PRNGKey(0)
    params = {"w": jax.random.normal(key, (8, 4)) * 0.1, "b": jnp.zeros(4)}
    opt = optax.sgd(0.1)
    opt_state = opt.init(params)
    x, y = jax.random.normal(key, (24, 8)), jnp.zeros((24, 4))

    def loss_fn(p, x, y):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    grad_fn = jax.value_and_grad(loss_fn)  # made outside the step, called inside it

    @jax.jit
    def train_step(params, opt_state, rng, x, y):
        loss, grads = grad_fn(params, x, y)
        updates, opt_state = opt.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, loss

    @functools.partial(jax.jit, static_argnums=(2,))
    def evaluate(params, x, scale):
        return loss_fn(params, x, y) * scale

    metric = jax.jit(lambda loss: loss * 2.0)
    assert train_step.__wrapped__.__name__ == "train_step"
    assert train_step.lower(params, opt_state, key, x, y) is not None
    for epoch in range(3):
        for step in range(20):
            params, opt_state, loss = train_step(params, opt_state, key, x, y)
            metric(loss)
        print("eval", float(evaluate(params, x, 1)))
        time.sleep(0.05)
""")

NNX_LOOP = textwrap.dedent("""
    import jax, jax.numpy as jnp, optax
    from flax import nnx
    model = nnx.Linear(8, 4, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    x, y = jnp.ones((16, 8)), jnp.zeros((16, 4))

    @nnx.jit
    def train_step(model, optimizer, x, y):
        loss_fn = lambda m: jnp.mean((m(x) - y) ** 2)
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    @nnx.jit
    def eval_step(model, x, y):
        return jnp.mean((model(x) - y) ** 2)

    for epoch in range(2):
        for step in range(15):
            train_step(model, optimizer, x, y)
        print("eval", float(eval_step(model, x, y)))
""")

KERAS_FIT = textwrap.dedent("""
    import numpy as np, keras
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((160, 8), "float32"), np.zeros((160, 4), "float32")
    model.fit(x, y, batch_size=16, epochs=2, verbose=0)
""")


def _profile(tmp_path, source: str, *extra: str, **env_extra) -> Path:
    script = tmp_path / "loop.py"
    script.write_text(source)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "JAX_PLATFORMS": "cpu",
        "OMP_NUM_THREADS": "1",
        **env_extra,
    }
    command = [
        sys.executable,
        "-m",
        "scaldiag",
        "profile",
        "--out",
        str(tmp_path / "runs"),
        *extra,
        str(script),
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "capture disabled" not in result.stderr, result.stderr[-3000:]
    (run_dir,) = list((tmp_path / "runs").iterdir())
    return run_dir


def _evaluations(marks) -> list[tuple[int, int]]:
    ours = [m for m in marks if m.get("source") == SOURCE]
    return recorded_steps.mark_pairs(ours, "test_begin", "test_end")


def test_an_optax_loop_records_its_steps_and_marks_its_evaluation(tmp_path):
    run_dir = _profile(tmp_path, OPTAX_LOOP)
    record = read_record(run_dir)
    training = json.loads((run_dir / "training.json").read_text())
    assert training["framework"]["name"] == "jax"
    assert training["loop_adapters"] == ["jax"]
    assert training["steps_per_execution"] == 1
    # The batch is x's 24, not the parameters' 8 (given back) nor the PRNG key's 2.
    batch = (training["global_batch"], training["per_replica_batch"], training["replicas"])
    assert batch == (24, 24, 1)
    found = recorded_steps.periods(record.steps, training, record.marks)
    assert len(found) == 60
    evaluations = _evaluations(record.marks)
    # The per-step metric's first call (after step 0, a warm-up step) is marked: only its second gap
    # says it runs in every gap; from then on only the three evaluations are.
    assert found[0].end_ns <= evaluations[0][0] and evaluations[0][1] <= found[1].begin_ns
    evaluations = evaluations[1:]
    assert len(evaluations) == 3
    steady = [p for p in found if p.kind == recorded_steps.STEADY]
    assert steady
    for p in steady:
        assert not any(b < p.end_ns and p.begin_ns < e for b, e in evaluations), p
    # The step before each evaluation ends at the synchronisation, before evaluation begins.
    enders = [p for p in found if p.ends_epoch]
    assert [p.step for p in enders] == [0, 19, 39, 59]
    assert all(any(p.end_ns <= b for b, _ in evaluations) for p in enders[1:])
    assert any(m["mark"] == "compile" for m in record.marks)


def test_global_batch_given_wins(tmp_path):
    run_dir = _profile(tmp_path, OPTAX_LOOP.replace("range(3)", "range(1)"), "--global-batch", "96")
    training = json.loads((run_dir / "training.json").read_text())
    assert training["global_batch"] == 96
    assert training["batch_source"] == "scaldiag profile --global-batch"


def test_a_flax_nnx_loop_is_followed(tmp_path):
    pytest.importorskip("flax.nnx")
    run_dir = _profile(tmp_path, NNX_LOOP)
    record = read_record(run_dir)
    training = json.loads((run_dir / "training.json").read_text())
    assert training["framework"]["name"] == "jax"
    assert len(recorded_steps.periods(record.steps, training, record.marks)) == 30
    assert len(_evaluations(record.marks)) == 2
    assert training["global_batch"] == 16


def test_keras_on_jax_fit_records_its_own_steps_once(tmp_path):
    pytest.importorskip("keras")
    run_dir = _profile(tmp_path, KERAS_FIT, KERAS_BACKEND="jax")
    record = read_record(run_dir)
    training = json.loads((run_dir / "training.json").read_text())
    assert training["framework"]["name"] == "keras"
    # 2 epochs x 10 batches, as the Keras adapter alone records them
    assert len(recorded_steps.periods(record.steps, training, record.marks)) == 20
    assert not [m for m in record.marks if m.get("source") == SOURCE]
