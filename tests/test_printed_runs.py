"""The script's clocks in real runs under ``scaldiag profile`` (issue 46's review), reconciled by
the report: the records in tests/printed_runs/ are those runs' files as written (no trace, no
samples), on the 2-core CPU machine:

- keras_one_epoch_verbose2: ``tests/keras_mlp.py`` (``fit(epochs=1, verbose=2)``: Keras 3 prints
  no ``Epoch 1/1`` line), bar ``600/600 - 6s - 11ms/step``;
- jax_epoch_call: ``tests/jax_epoch_call.py --epochs 5 --samples 6000`` (one jitted call runs an
  epoch's 187 batches in ``lax.fori_loop``), its ``epoch N: X ms`` timer; epoch 3's line was
  printed after scaldiag's profiler stop (0.32 s);
- demo_slow_read: ``examples/train_cnn.py --steps 60 --slow-read`` (``make demo``'s run), its
  own timer printed after scaldiag's input measurements (6.1 s after training).
"""

import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from scaldiag.analyze.clock import STEADY_STEP, WHOLE_EPOCH
from scaldiag.analyze.printed_account import PROFILER
from scaldiag.analyze.printed_clock import AGREE
from scaldiag.pipeline import diagnose
from scaldiag.render.terminal import run as terminal_run

RUNS = Path(__file__).parent / "printed_runs"


def report(name: str, tmp_path: Path):
    d = tmp_path / name
    shutil.copytree(RUNS / name, d)
    return diagnose(d)


def terminal(r) -> str:
    out = io.StringIO()
    terminal_run.render(r, Console(file=out, width=80, color_system=None))
    return out.getvalue()


def test_keras_one_epoch_bar_is_keras_s_bar_by_its_epoch_mark(tmp_path):
    """No ``Epoch 1/1`` line: the epoch's ``epoch_begin`` mark windows the bar (before: read as
    'your timer ('ms/step' ...)', not compared)."""
    r = report("keras_one_epoch_verbose2", tmp_path)
    (x,) = r.analysis.printed.comparisons
    assert x.what == "Keras's progress bar" and x.scope == WHOLE_EPOCH
    assert x.shown == "11ms/step" and x.agrees and abs(x.error) <= AGREE
    assert not r.analysis.printed.headline_contradicted


def test_a_one_epoch_bar_is_set_beside_its_window_in_parts(tmp_path):
    """The one epoch compiled: the bar holds the compile, and scaldiag's record of its window says
    so, scaldiag's own profiler named (before: "not compared (no reading on the steps scaldiag's
    figure covers)")."""
    r = report("keras_one_epoch_verbose2", tmp_path)
    (x,) = r.analysis.printed.comparisons
    parts = dict(x.parts)
    assert x.window and {"steady", "compile/warm-up", PROFILER} <= parts.keys()
    assert sum(parts.values()) == pytest.approx(x.scaldiag_ms)
    assert x.own_ms == pytest.approx(parts[PROFILER]) and x.headline and x.headline_agrees
    assert "compile/warm-up" in terminal(r)


def test_a_verbose2_bar_heads_the_report_with_the_whole_epoch(tmp_path):
    """verbose=2 times the epoch from its begin, first step in: the headline is that figure
    (before: the epoch after its first step, 3.86 ms against the bar's 11 ms)."""
    r = report("keras_one_epoch_verbose2", tmp_path)
    c = r.analysis.clock
    scope = c.scopes[WHOLE_EPOCH]
    assert scope.ms_after_first is None and scope.user_ms == scope.ms
    (x,) = r.analysis.printed.comparisons
    assert x.headline and x.headline_agrees


def test_a_jax_epoch_call_s_timer_is_compared_per_call_and_per_batch(tmp_path):
    """The step is the epoch: the epoch timer is the step's (before: not compared, and its
    reading printed after the profiler's stop was 'recorded none', contradicting the headline)."""
    r = report("jax_epoch_call", tmp_path)
    p = r.analysis.printed
    assert not p.disagreements and not p.headline_contradicted
    timer = next(x for x in p.comparisons if x.what.startswith("your epoch timer"))
    assert timer.scope == STEADY_STEP and timer.agrees and abs(timer.error) <= AGREE
    assert timer.batches_a_step == 187
    assert all(x.agrees is not None for x in p.comparisons)  # none left "not compared"
    assert "ms a batch" in terminal(r)


def test_a_window_holding_scaldiag_s_profiler_names_it(tmp_path):
    """The lines' arrival spans the profiler's stop: scaldiag's figure of that window holds it as
    a part of its own, never as a contradiction."""
    r = report("jax_epoch_call", tmp_path)
    arrival = next(x for x in r.analysis.printed.comparisons if x.what.startswith("the arrival"))
    parts = dict(arrival.parts)
    assert arrival.window and arrival.agrees
    assert parts[PROFILER] > 0 and arrival.own_ms == pytest.approx(parts[PROFILER])
    assert sum(parts.values()) == pytest.approx(arrival.scaldiag_ms)


def test_the_demo_s_own_timer_is_compared(tmp_path):
    """Printed after scaldiag's measurements: its window, placed back from the print, skips them
    (before: 'counted 120 steps where scaldiag recorded only 48', two false disagreements)."""
    r = report("demo_slow_read", tmp_path)
    p = r.analysis.printed
    assert not p.disagreements and not p.headline_contradicted
    names = sorted(x.what.rsplit(" ", 1)[-1] for x in p.comparisons)
    assert names[:2] == ["'mean'", "'median'"]  # two figures of one line, two clocks
    assert all(x.agrees and abs(x.error) <= AGREE for x in p.comparisons)
    median, mean = (
        next(x for x in p.comparisons if x.what.endswith(w)) for w in ("'median'", "'mean'")
    )
    # the median beside the steps' median (scaldiag's few profiled steps move no median); the mean
    # beside its window's mean, scaldiag's profiler in it named
    assert median.own_ms == 0 and mean.own_ms > 0


def test_a_bar_of_micro_batches_under_known_accumulation_is_a_step_of_k(tmp_path):
    """Lightning, ``accumulate_grad_batches=4`` (script.py beside the record): its rich bar, kept
    in its final line alone, counts 200 batches an epoch at 440.94 it/s; the record knows the
    accumulation (training.json ``gradient_accumulation``) and recorded 50 optimizer steps there
    (before: not compared, its window a moment)."""
    r = report("lightning_accumulate", tmp_path)
    assert r.analysis.training["gradient_accumulation"] == 4
    (x,) = r.analysis.printed.comparisons
    assert x.what.endswith("(micro-batches, 4 a step)") and not x.unrecorded
    assert x.ms == pytest.approx(4 * 1e3 / 440.94) and x.agrees


def test_each_keras_model_s_bar_is_a_clock_of_its_own_and_evaluate_s_bars_none(tmp_path):
    """Two models, each fit(epochs=3) (verbose=1 in a pipe) then evaluate() (script.py beside the
    record): each model's bar beside its own epochs; evaluate()'s bar no "timer" (before: one
    'Keras's progress bar' over both models, the student's readings dropped, and evaluate()'s
    bars 'your timer (...)': not compared)."""
    r = report("keras_two_fits_evaluate", tmp_path)
    p = r.analysis.printed
    assert sorted(x.what for x in p.comparisons) == [
        "Keras's progress bar (student)",
        "Keras's progress bar (teacher)",
    ]
    assert all(x.agrees for x in p.comparisons) and not p.headline_contradicted
    student = next(x for x in p.comparisons if "student" in x.what)
    assert student.window and not student.headline  # the headline is the teacher's


def test_two_models_timers_and_bars_each_beside_their_own_steps(tmp_path):
    """tests/keras_two_models.py (verbose=2, an epoch timer each model): the wider model's timer
    and bar, before not compared or merged with the baseline's (headline contradicted), each
    beside their own epochs."""
    r = report("keras_two_models", tmp_path)
    p = r.analysis.printed
    assert not p.headline_contradicted and not p.disagreements
    wider = [x for x in p.comparisons if "wider" in x.what]
    assert len(wider) == 2 and all(x.agrees for x in wider)


def test_a_counted_line_s_time_of_the_call_and_its_evaluation(tmp_path):
    """JAX's mnist_vae prints '  3 -105.2 (0.775 sec)': its epoch, a metric, time.time() around the
    epoch's one call and the evaluation after it (script.py beside the record, that print over
    tests/jax_epoch_call.py's loop). Recognised (before: no clock), compared with the call and the
    evaluation the record holds in its window; the headline follows it (before: the host's
    dispatch, 2.09 ms, "not this" beside it)."""
    r = report("jax_vae_like", tmp_path)
    p = r.analysis.printed
    (x,) = p.comparisons
    assert x.what.startswith("your epoch timer ('(sec)'") and x.what.endswith("follows it)")
    assert x.agrees and abs(x.error) <= AGREE and x.batches_a_step == 187
    assert dict(x.parts).keys() == {"steady", "evaluation"}
    c = r.analysis.clock
    assert (c.user_scope, c.user_clock) == (x.scope, x.what) and x.headline_off_ms is None
    assert "not this" not in terminal(r)


def test_jax_mnist_vae_s_timer_is_the_call_and_its_evaluation(tmp_path):
    """JAX's examples/mnist_vae.py unmodified (bench/clock/issue46.py's run, 100 epochs of 100
    batches): before, its '(X sec)' clock was not recognised (the table: +11.1% against the
    step); after, the call and the evaluation the record holds in each reading's window."""
    r = report("jax_mnist_vae", tmp_path)
    (x,) = r.analysis.printed.comparisons
    assert x.what.endswith("(the call and what follows it)") and x.batches_a_step == 100
    assert x.agrees and abs(x.error) <= AGREE and x.readings > 90


def test_keras_s_final_line_after_validation_is_the_bar_read(tmp_path):
    """keras-io's autoencoder (validation_data, two fits of one model; steps of 79 ms, so the last
    batch's update prints '5/5 ... 79ms/step' before validation and finalize prints '5/5 ... 3s
    143ms/step - loss - val_loss' after it): the user's terminal shows the second. Before: the
    first was read, against scaldiag's epoch with its validation: -26.6%, the headline
    CONTRADICTED; after: the final line, agreeing."""
    r = report("keras_autoencoder_validation", tmp_path)
    p = r.analysis.printed
    (x,) = p.comparisons
    assert x.what == "Keras's progress bar" and x.agrees and abs(x.error) <= AGREE
    assert not p.headline_contradicted and x.headline_agrees


def test_a_timer_of_one_iteration_a_print_is_set_beside_that_iteration(tmp_path):
    """minGPT's chargpt.py (karpathy/minGPT @ 37baab71b9, unmodified, gpt-nano on the loaded CPU:
    bench/clock/issue46.py's run of 2026-12-07) prints ``iter_dt`` every 10 iterations: the time of
    the one iteration before the print. Its iterations varied from 50 ms to 7 s; beside the mean of
    the 10 between two prints it read -14.5% and the report called the headline contradicted. Each
    printed value is scaldiag's record of one iteration (the second-last before the print): set
    beside those, it agrees, and the headline (every iteration) is said to be of other steps."""
    r = report("mingpt_chargpt_cpu", tmp_path)
    p = r.analysis.printed
    (x,) = [y for y in p.comparisons if y.sampled_every]
    assert x.sampled_every == 10 and "the second-last before each print" in x.what
    assert x.agrees and abs(x.error) <= AGREE and x.readings >= 40
    headline = r.analysis.clock.scopes[r.analysis.clock.user_scope].user_ms
    assert abs(headline / x.ms - 1) > AGREE and x.headline_off_ms == pytest.approx(headline)
    assert not p.headline_contradicted and "of other steps" in terminal(r)
    # the headline names the clock that times every iteration: the lines' arrival
    assert "arrival" in r.analysis.clock.user_clock
