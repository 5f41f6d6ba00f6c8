"""The headline follows the clock the script prints (issue 46): real JAX runs whose epoch is one
jitted call looping over its batches (lax.fori_loop), each with an epoch timer the report
recognises (tests/printed_runs/: jax_mnist_vae is JAX's own examples/mnist_vae.py, jax_vae_like a
script of its shape, jax_epoch_call tests/jax_epoch_call.py). Before, the headline was the JAX
family's guess (the host's dispatch: "2.74 ms a step") beside an epoch timer reading 712 ms, and a
batch was that dispatch over the trip count."""

import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from scaldiag.analyze import recorded_steps
from scaldiag.analyze.clock import HOST_DISPATCH, STEADY_STEP
from scaldiag.pipeline import diagnose
from scaldiag.record.reader import read_record
from scaldiag.render.terminal import run as terminal_run

RUNS = Path(__file__).parent / "printed_runs"
FORI_RUNS = ("jax_mnist_vae", "jax_vae_like", "jax_epoch_call")


def report(name: str, tmp_path: Path):
    d = tmp_path / name
    shutil.copytree(RUNS / name, d)
    return diagnose(d), d


def terminal(r) -> str:
    out = io.StringIO()
    terminal_run.render(r, Console(file=out, width=400, color_system=None))
    return out.getvalue()


def _headline_clock(p):
    """The agreeing printed clock the headline is of (the report's own mark on it)."""
    (x,) = [x for x in p.comparisons if x.headline and x.agrees]
    return x


@pytest.mark.parametrize("name", FORI_RUNS)
def test_the_headline_is_the_agreeing_printed_clock_s_scope_and_name(name, tmp_path):
    r, _ = report(name, tmp_path)
    c, p = r.analysis.clock, r.analysis.printed
    x = _headline_clock(p)
    assert c.user_scope == x.scope and c.user_clock == x.what
    assert c.user_scope != HOST_DISPATCH
    assert c.scopes[c.user_scope].user_ms == pytest.approx(x.scaldiag_ms)
    assert not p.headline_contradicted
    # no line says the headline times something else than the clock it follows
    assert x.headline_off_ms is None
    text = terminal(r)
    first = next(line for line in text.splitlines() if line.startswith("Your "))
    assert x.what[1:] in first and "the host's dispatch" not in first


@pytest.mark.parametrize("name", FORI_RUNS)
def test_the_headline_s_parts_add_up_to_its_figure(name, tmp_path):
    r, _ = report(name, tmp_path)
    c = r.analysis.clock
    total = c.scopes[STEADY_STEP].ms + sum(ms for _, ms in c.parts_ms)
    assert total == pytest.approx(c.scopes[c.user_scope].user_ms)


@pytest.mark.parametrize("name", FORI_RUNS)
def test_a_batch_is_the_training_step_over_the_call_s_trip_count(name, tmp_path):
    """A batch runs on the device: the training step (the call with its device work) over the
    batches the call loops over, from the record's own steps, never the host's dispatch."""
    r, d = report(name, tmp_path)
    record = read_record(d)
    steady = [
        p
        for p in recorded_steps.periods(
            record.steps,
            record.training,
            record.marks,
            recorded_steps.device_times(record.device_steps),
        )
        if p.kind == recorded_steps.STEADY
    ]
    step_ms = sum(p.duration_ns for p in steady) / sum(p.batches for p in steady) / 1e6
    trips = record.training["step_loop"]["batches"]
    c = r.analysis.clock
    assert c.inner_batches == trips
    assert c.inner_batch_ms == pytest.approx(step_ms / trips, rel=1e-6)
    assert f"{step_ms / trips:.3g} ms a batch." in terminal(r)
