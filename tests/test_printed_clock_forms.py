"""Each clock form scaldiag reads in a script's output (analyze/printed_forms.py), on real lines.

The fixtures in tests/printed_lines/ are real scripts' real output cut into printed.jsonl's
segments (tests/printed_lines/make.py says how: tiny Keras fits at verbose=1 on a terminal and
in a pipe and at verbose=2, a tqdm torch loop, a slow tqdm loop, a hand-written timer, a
Hugging Face Trainer, Lightning with its tqdm and its rich bar). Each test reads the figure the
line prints and checks scaldiag read that figure, at the scope of what it counts.
"""

import json
import re
from pathlib import Path

import pytest

from scaldiag.analyze.clock import LOOP_ITERATION, WHOLE_EPOCH, WHOLE_TRAINING
from scaldiag.analyze.printed_forms import (
    ARRIVAL,
    EPOCH_TIME,
    HF_METRICS,
    KERAS_BAR,
    RATE,
    RICH,
    TIMER,
    TQDM,
    clean,
    recognise,
)

LINES = Path(__file__).parent / "printed_lines"


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (LINES / f"{name}.jsonl").read_text().splitlines()]


def of(readings, form):
    return [r for r in readings if r.form == form]


def final_lines(name: str, pattern: str) -> list[str]:
    """The segments ended by a newline that match: the lines left on the user's screen."""
    return [
        clean(r["text"]) for r in rows(name) if r["end"] == "\n" and re.search(pattern, r["text"])
    ]


@pytest.mark.parametrize(
    "name",
    ["keras_verbose1_tty", "keras_verbose1_pipe", "keras_verbose2", "keras_verbose1_under_profile"],
)
def test_keras_bar_each_epochs_final_line_in_ms_a_step_of_whole_epochs(name):
    readings = recognise(rows(name), "keras")
    bars = of(readings, KERAS_BAR)
    finals = final_lines(name, r"\d+/\d+.*ms/step")
    epochs = sum(bool(re.match(r"Epoch \d+/\d+$", clean(r["text"]))) for r in rows(name))
    assert len(bars) == len(finals) == epochs  # one an epoch: the \r redraws before it passed over
    for r, line in zip(bars, finals):
        assert r.text == line and r.scope == WHOLE_EPOCH and r.what == "Keras's progress bar"
        assert r.ms == float(re.search(r"(\d+)ms/step", line)[1])
        assert r.count == int(re.match(r"\s*(\d+)/", line)[1])
        assert r.resolution_ms == 0.5  # an integer of ms
        assert r.begin_ns < r.end_ns  # from its "Epoch k/N" line
    assert {r.style for r in bars} == {"verbose2" if name == "keras_verbose2" else "verbose1"}
    assert not of(readings, ARRIVAL)  # Keras's "Epoch k/N" lines are its bar's, not a counter
    assert readings == bars  # every redraw is the bar's ("1/64 ━━━ 4:10 4s/step" too), no timer


@pytest.mark.parametrize(
    "line, ms",
    [  # the forms keras/src/utils/progbar.py writes, and Keras 2's
        ("20/20 ━━━━━━━━━━━━━━━━━━━━ 0s 850us/step - loss: 2.3", 0.85),
        ("20/20 - 25s - 1s/step - loss: 2.3", 1000.0),
        ("20/20 [==============================] - 0s 3ms/step - loss: 2.3", 3.0),
        ("20/20 ━━━━━━━━━━━━━━━━━━━━ 1:02 3s/step - loss: 2.3", 3000.0),  # over a minute
    ],
)
def test_keras_bar_units(line, ms):
    t = 1_796_000_000_000_000_000
    segments = [
        {"t_ns": t, "stream": "stdout", "text": "Epoch 1/1", "end": "\n"},
        {"t_ns": t + 10**9, "stream": "stdout", "text": line, "end": "\n"},
    ]
    (r,) = recognise(segments)
    assert r.form == KERAS_BAR and r.ms == pytest.approx(ms) and r.count == 20


def test_keras_2_epoch_time_without_a_counter():
    t = 1_796_000_000_000_000_000
    segments = [
        {"t_ns": t, "stream": "stdout", "text": "Epoch 1/2", "end": "\n"},
        {"t_ns": t + 3 * 10**9, "stream": "stdout", "text": " - 3s - loss: 0.2315", "end": "\n"},
    ]
    (r,) = recognise(segments)
    assert (r.form, r.scope, r.total_ms, r.ms) == (EPOCH_TIME, WHOLE_EPOCH, 3000.0, None)


def test_tqdm_bar_its_last_line_each_epoch_and_a_custom_unit():
    readings = recognise(rows("tqdm_torch"))
    bars = of(readings, TQDM)
    finals = final_lines("tqdm_torch", r"it/s|batch/s")
    assert [r.text for r in bars] == finals  # tqdm's closing line of each bar
    for r in bars:
        rate, unit = re.search(r"([\d.]+)(it|batch)/s\]", r.text).groups()
        assert r.ms == pytest.approx(1e3 / float(rate)) and r.scope == LOOP_ITERATION
        assert r.count == 40 and r.shown == f"{rate} {unit}/s"
    assert [r.what for r in bars] == ["your tqdm bar 'epoch'"] * 2 + ["your tqdm bar 'custom unit'"]


def test_tqdm_seconds_an_iteration():
    (r,) = of(recognise(rows("tqdm_slow")), TQDM)
    seconds = float(re.search(r"([\d.]+)s/it", r.text)[1])
    assert r.ms == pytest.approx(seconds * 1e3) and r.shown == f"{seconds:.2f} s/it"
    # its window reaches back over the bar's own elapsed time (a redraw is stamped at the next)
    elapsed = re.search(r"\[(\d+):(\d+)<", r.text).groups()
    assert r.end_ns - r.begin_ns >= (int(elapsed[0]) * 60 + int(elapsed[1])) * 10**9


def test_lightning_tqdm_bar_one_reading_an_epoch():
    bars = of(recognise(rows("lightning_tqdm"), "lightning"), TQDM)
    assert [r.what for r in bars] == ["Lightning's progress bar"] * 2
    assert all(r.count == 40 and r.scope == LOOP_ITERATION for r in bars)
    last = final_lines("lightning_tqdm", r"it/s")[-1]
    assert bars[-1].ms == pytest.approx(1e3 / float(re.search(r"([\d.]+)it/s", last)[1]))


def test_lightning_rich_bar():
    bars = of(recognise(rows("lightning_rich"), "lightning"), RICH)
    assert [r.what for r in bars] == ["Lightning's rich progress bar"] * 2  # two epochs
    last = final_lines("lightning_rich", r"it/s")[-1]
    assert bars[-1].count == 40
    assert bars[-1].ms == pytest.approx(1e3 / float(re.search(r"([\d.]+)it/s", last)[1]))


def test_hf_trainer_metrics_and_its_bar():
    readings = recognise(rows("hf_trainer"), "transformers", samples_per_step=8)
    (metrics,) = of(readings, HF_METRICS)
    line = next(clean(r["text"]) for r in rows("hf_trainer") if "train_runtime" in r["text"])
    samples = float(re.search(r"train_samples_per_second': '([\d.]+)", line)[1])
    runtime = float(re.search(r"train_runtime': '([\d.]+)", line)[1])
    assert metrics.what == "the Trainer's train_samples_per_second"
    assert metrics.scope == WHOLE_TRAINING and metrics.ms == pytest.approx(8e3 / samples)
    assert metrics.end_ns - metrics.begin_ns == pytest.approx(runtime * 1e9, abs=1)
    (bar,) = of(readings, TQDM)
    assert bar.what == "the Trainer's progress bar" and bar.count == 64
    assert bar.scope == WHOLE_TRAINING  # its closing line: the average over the whole training
    # without the batch size, its steps a second
    (steps,) = of(recognise(rows("hf_trainer"), "transformers"), HF_METRICS)
    per_s = float(re.search(r"train_steps_per_second': '([\d.]+)", line)[1])
    assert steps.ms == pytest.approx(1e3 / per_s) and "steps_per_second" in steps.what


def test_hand_written_timers_rates_and_arrivals():
    readings = recognise(rows("hand_timer"), samples_per_step=64)
    lines = [clean(r["text"]) for r in rows("hand_timer")]
    steps = [line for line in lines if line.startswith("step")]
    timers = of(readings, TIMER)
    assert [r.ms for r in timers] == [float(re.search(r"([\d.]+) ms/step", s)[1]) for s in steps]
    assert (
        timers[0].what == "your timer ('ms/step' in 'step N loss N N ms/step N samples/s N tok/s')"
    )
    assert timers[1].count == 10  # the counter's increase since the timer's line before
    rates = {r.what.split("'")[1]: r for r in of(readings, RATE)}
    samples = float(re.search(r"([\d.]+) samples/s", steps[-1])[1])
    per_line = [r for r in of(readings, RATE) if r.shown.endswith("samples/s")]
    assert per_line[-1].ms == pytest.approx(64e3 / samples)
    assert rates["tok/s"].ms is None and "tokens a step unknown" in rates["tok/s"].note
    assert rates["it/s"].scope == WHOLE_EPOCH  # a rate on an epoch's line is the epoch's
    assert rates["img/s"].scope == WHOLE_EPOCH
    epoch_times = of(readings, EPOCH_TIME)
    epoch_lines = [line for line in lines if line.startswith("Epoch")]
    assert [r.total_ms for r in epoch_times] == [
        float(re.search(r": ([\d.]+)s", line)[1]) * 1e3 for line in epoch_lines
    ]
    arrivals = of(readings, ARRIVAL)
    step_arrivals = [r for r in arrivals if r.scope == LOOP_ITERATION]
    assert len(step_arrivals) == len(steps) - 1
    assert all(
        r.ms == pytest.approx((r.end_ns - r.begin_ns) / 1e6 / r.count) for r in step_arrivals
    )
    epoch_arrivals = [r for r in arrivals if r.scope == WHOLE_EPOCH]
    assert len(epoch_arrivals) == len(epoch_lines) - 1 and epoch_arrivals[0].count is None


def test_lines_without_a_clock_give_nothing():
    t = 1_796_000_000_000_000_000
    texts = ["TPU available: False, using: 0 TPU cores", "loss 2.31 accuracy 0.12", "  | 0/? "]
    segments = [
        {"t_ns": t + i, "stream": "stderr", "text": x, "end": "\n"} for i, x in enumerate(texts)
    ]
    assert recognise(segments) == []


@pytest.mark.parametrize("name", ["phases_under_profile", "cv_folds_under_profile"])
def test_a_timer_of_n_steps_covers_those_steps(name):
    """``phase 2 (all): 40 steps, 17.59 ms/step``: the figure is of the 40 steps before the line.
    (printed.jsonl of `scaldiag profile` on tests/phases_two_optimizers.py and on
    tests/cv_folds.py --outer-epochs 2, as H2a's capture wrote them.)"""
    readings = of(recognise(rows(name)), TIMER)
    lines = [clean(r["text"]) for r in rows(name) if "ms/step" in r["text"]]
    assert len(readings) == len(lines)
    for r, line in zip(readings, lines):
        steps, ms = re.search(r"(\d+) steps, ([\d.]+) ms/step", line).groups()
        assert r.count == int(steps) and r.ms == float(ms) and r.scope == LOOP_ITERATION
        assert r.end_ns - r.begin_ns == pytest.approx(int(steps) * float(ms) * 1e6, abs=1)


def test_figures_no_clock_prints_are_passed_over():
    """Zero, huge and absurd figures: never a reading that times nothing or reaches before 1970,
    never an error."""
    t = 1_796_000_000_000_000_000
    texts = [
        "Epoch 1/1",
        "20/20 - 0s - 0ms/step - loss: 2.3",
        "epoch 3: " + "9" * 40 + " s",
        "epoch 4: 99999999999999999999 s",
        "step 10 0.0 ms/step",
        "step 20 1" + "0" * 29 + " it/s",
    ]
    segments = [
        {"t_ns": t + i, "stream": "stdout", "text": x, "end": "\n"} for i, x in enumerate(texts)
    ]
    readings = recognise(segments, samples_per_step=32)
    assert all(r.begin_ns >= 0 and r.begin_ns <= r.end_ns for r in readings)
    assert all(r.ms is None or r.ms > 0 for r in readings)
    assert not [r for r in readings if r.form == KERAS_BAR]  # "0ms/step"


def test_a_time_before_its_counter_and_a_time_in_parentheses_after_a_leading_counter():
    """Real lines of two public scripts (bench/clock/issue46.py's runs): minGPT's callback prints
    one iteration's time before the counter; JAX's mnist_vae its epoch, its ELBO and the epoch's
    time, the counter leading the line and no word naming it."""
    mingpt = [
        "iter_dt 143.64ms; iter 10: train loss 2.11316",
        "iter_dt 180.20ms; iter 20: train loss 1.98139",
    ]
    vae = ["  1 -543.6818237304688 (0.547 sec)", "  2 -543.6253051757812 (0.669 sec)"]
    at = [{"t_ns": (k + 1) * 10**9, "stream": "stdout", "text": t} for k, t in enumerate(mingpt)]
    timers = of(recognise(at), TIMER)
    assert [(r.ms, r.scope) for r in timers] == [(143.64, LOOP_ITERATION), (180.2, LOOP_ITERATION)]
    at = [{"t_ns": (k + 1) * 10**9, "stream": "stdout", "text": t} for k, t in enumerate(vae)]
    (r,) = of(recognise(at), EPOCH_TIME)  # (from the second line: a counter that went up by one)
    assert r.total_ms == pytest.approx(669.0) and r.scope == WHOLE_EPOCH and r.span_ms == r.total_ms
