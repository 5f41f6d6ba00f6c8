"""The script's clocks beside scaldiag's figures (analyze/printed_clock.py), in the report, its
JSON and ``check --clock-agrees``.

Runs are built by hand (steps of a known length, the lines a loop prints at known times), so
what each clock should read is known exactly; the recognition of the real forms is
test_printed_clock_forms.py's."""

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from scaldiag.analyze import recorded_steps
from scaldiag.analyze.clock import LOOP_ITERATION, WHOLE_EPOCH, clock
from scaldiag.analyze.epochs import epoch_stats
from scaldiag.analyze.printed_clock import AGREE, printed_clock
from scaldiag.cli import main
from scaldiag.pipeline import diagnose
from scaldiag.record.reader import read_record
from scaldiag.render import json as json_render
from scaldiag.render.terminal import run as terminal_run
from scaldiag.rules.check import Limits, check

MS = 1_000_000
T0 = 1_796_000_000_000_000_000
START = T0 + 500 * MS  # the loop's first step


def bar(t_ns: int, n: int, total: int, rate: float, desc: str = "epoch 0", took_s: int = 0) -> dict:
    """tqdm's line as it draws it (tqdm.format_meter); its first, at 0, has no rate yet."""
    meter = "[00:00<?, ?it/s]" if n == 0 else f"[00:{took_s:02d}<00:00, {rate:.2f}it/s]"
    return {
        "t_ns": t_ns,
        "stream": "stderr",
        "text": f"{desc}: {100 * n // total:3d}%|##########| {n}/{total} {meter}",
        "end": "\n" if n == total else "\r",
    }


def loop(epochs: int = 3, steps: int = 50, step_ms: float = 10.0):
    """A PyTorch-shaped loop's steps and epoch marks: ``steps`` of ``step_ms`` an epoch."""
    t, rows, marks, s = START, [], [{"mark": "fit_begin", "t_ns": START}], 0
    for e in range(epochs):
        marks.append({"mark": "epoch_begin", "t_ns": t, "epoch": e})
        for _ in range(steps):
            rows.append({"step": s, "epoch": e, "begin_ns": t, "end_ns": t + int(step_ms * MS)})
            t, s = t + int(step_ms * MS), s + 1
        marks.append({"mark": "epoch_end", "t_ns": t, "epoch": e})
    return rows, marks, t


def bars_of(rows: list[dict], steps: int, clock_ms: float) -> list[dict]:
    """One tqdm bar an epoch over the recorded steps, reading ``clock_ms`` an iteration."""
    printed = []
    for e in range(len(rows) // steps):
        epoch = rows[e * steps : (e + 1) * steps]
        printed.append(bar(epoch[0]["begin_ns"], 0, steps, 0.0, f"epoch {e}"))
        printed.append(bar(epoch[-1]["end_ns"], steps, steps, 1e3 / clock_ms, f"epoch {e}"))
    return printed


def write_run(d: Path, rows, marks, end_ns, printed, family="pytorch") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    run = {
        "status": "finished",
        "exit_code": 0,
        "started_ns": T0,
        "ended_ns": end_ns + 500 * MS,
        "command": ["python", "train.py"],
    }
    training = {
        "framework": {"name": family},
        "loop_adapters": [family],
        "global_batch": 32,
        "per_replica_batch": 32,
        "replicas": 1,
    }
    (d / "run.json").write_text(json.dumps(run))
    (d / "training.json").write_text(json.dumps(training))
    (d / "inventory.json").write_text(json.dumps({"gpus": []}))
    for name, lines in (("steps.jsonl", rows), ("marks.jsonl", marks), ("printed.jsonl", printed)):
        if lines is not None:
            (d / name).write_text("".join(json.dumps(x) + "\n" for x in lines))
    return d


def reconciled(rows, marks, printed, family="pytorch"):
    """printed_clock on plain data, as analyze/run.py calls it."""
    training = {"framework": {"name": family}, "loop_adapters": [family], "global_batch": 32}
    found = recorded_steps.periods(rows, training, marks, None)
    steady = [p.duration_ns / p.batches / 1e6 for p in found if p.kind == recorded_steps.STEADY]
    epochs = epoch_stats(found, marks)
    c = clock(found, marks, training, epochs, sum(steady) / len(steady), 0.0)
    return c, printed_clock(printed, c, found, marks, epochs, training)


def test_a_bar_within_5_percent_agrees():
    rows, marks, _ = loop()
    c, p = reconciled(rows, marks, bars_of(rows, 50, 10.3))
    (x,) = p.comparisons
    assert x.what == "your tqdm bar 'epoch'" and x.scope == LOOP_ITERATION
    assert x.scaldiag_ms == pytest.approx(c.scopes[LOOP_ITERATION].ms)
    assert x.error == pytest.approx(x.ms / x.scaldiag_ms - 1) and abs(x.error) <= AGREE
    assert x.agrees and x.by == "within 5%" and not p.headline_contradicted
    assert x.readings == 3  # each epoch's bar lies on its steady steps


def test_a_bar_off_by_a_third_disagrees_and_contradicts_the_headline():
    rows, marks, _ = loop()
    c, p = reconciled(rows, marks, bars_of(rows, 50, 13.4))
    (x,) = p.disagreements
    assert x.agrees is False and x.error == pytest.approx(13.4 / x.scaldiag_ms - 1, rel=1e-3)
    assert "cannot account for 3.4 ms" in x.note
    assert x.scope == c.user_scope and p.headline_contradicted


def test_within_the_spread_of_a_coarse_clock():
    """A Keras bar prints whole ms: 2ms/step is anything from 1.5 to 2.5."""
    rows, marks, _ = loop(epochs=4, steps=20, step_ms=1.7)
    printed = []
    for e in range(4):
        t = rows[e * 20]["begin_ns"]
        printed.append({"t_ns": t, "stream": "stdout", "text": f"Epoch {e + 1}/4", "end": "\n"})
        end = rows[e * 20 + 19]["end_ns"]
        printed.append(
            {
                "t_ns": end,
                "stream": "stdout",
                "text": "20/20 - 0s - 2ms/step - loss: 2.3",
                "end": "\n",
            }
        )
    c, p = reconciled(rows, marks, printed, family="keras")
    (x,) = p.comparisons
    assert x.what == "Keras's progress bar" and x.scope == WHOLE_EPOCH
    assert abs(x.error) > AGREE and x.agrees and x.by.startswith("within the spread")


def test_a_bar_over_steps_scaldiag_did_not_record_disagrees_on_its_own():
    """A second phase (another optimizer, a fold) no adapter saw: its bar counts its steps."""
    rows, marks, end = loop()
    printed = bars_of(rows, 50, 10.0)
    unseen = end + 100 * MS  # 1,000 iterations after the last recorded step
    printed += [
        bar(unseen, 0, 1000, 0.0, "phase 2"),
        bar(unseen + 5 * MS, 1, 1000, 100.0, "phase 2"),
        bar(unseen + 10_000 * MS, 1000, 1000, 100.0, "phase 2", took_s=10),
    ]
    _, p = reconciled(rows, marks, printed)
    (x,) = p.disagreements
    assert x.unrecorded and x.counted == 1000 and x.recorded == 0
    assert x.what == "your tqdm bar 'phase'" and p.headline_contradicted
    assert [y.agrees for y in p.comparisons if y is not x] == [True]  # the phase scaldiag saw


def test_readings_off_the_compared_steps_are_not_compared():
    """A Keras bar's first epochs compile: their 58ms/step is not set beside the third epoch's."""
    rows, marks, _ = loop(epochs=3, steps=20, step_ms=3.0)
    printed = []
    for e, per in enumerate(("58ms", "5ms", "3ms")):
        t, end = rows[e * 20]["begin_ns"], rows[e * 20 + 19]["end_ns"]
        printed += [
            {"t_ns": t, "stream": "stdout", "text": f"Epoch {e + 1}/3", "end": "\n"},
            {"t_ns": end, "stream": "stdout", "text": f"20/20 - 1s - {per}/step", "end": "\n"},
        ]
    _, p = reconciled(rows, marks, printed, family="keras")
    (x,) = p.comparisons
    assert x.readings == 1 and x.shown == "3ms/step" and x.agrees


def test_tokens_a_second_are_read_and_not_compared():
    rows, marks, _ = loop()
    printed = [
        {
            "t_ns": r["end_ns"],
            "stream": "stdout",
            "text": f"step {r['step']} 31000 tok/s",
            "end": "\n",
        }
        for r in rows[::10]
    ]
    _, p = reconciled(rows, marks, printed)
    tokens = next(x for x in p.comparisons if "tok/s" in x.what)
    assert tokens.agrees is None and "tokens a step unknown" in tokens.note
    arrival = next(x for x in p.comparisons if x.what == "the arrival of your 'step N' lines")
    assert arrival.agrees and arrival.ms == pytest.approx(10.0)


def test_a_run_without_printed_jsonl_reads_as_before(tmp_path):
    rows, marks, end = loop()
    d = write_run(tmp_path / "old", rows, marks, end, None)
    assert read_record(d).printed is None
    report = diagnose(d)
    assert report.analysis.printed is None
    assert "printed" not in json_render.run_dict(report)["clock"]


def test_a_damaged_printed_line_is_noted_and_the_rest_read(tmp_path):
    rows, marks, end = loop()
    d = write_run(tmp_path / "r", rows, marks, end, bars_of(rows, 50, 10.0))
    with open(d / "printed.jsonl", "a") as f:
        f.write('{"t_ns": "soon", "text": 3}\n{"dropped": 7}\n')
    record = read_record(d)
    assert len(record.printed) == 7 and record.printed[-1] == {"dropped": 7}
    assert any("printed.jsonl: 1 damaged line" in m for m in record.run.missing)


def test_json_clock_printed(tmp_path):
    rows, marks, end = loop()
    d = write_run(tmp_path / "r", rows, marks, end, bars_of(rows, 50, 13.4))
    data = json.loads(json.dumps(json_render.run_dict(diagnose(d))))
    (x,) = data["clock"]["printed"]
    assert {"what", "scope", "ms", "scaldiag_ms", "error", "agrees"} <= set(x)
    assert x["agrees"] is False and x["scope"] == "loop_iteration"
    assert x["error"] == pytest.approx(x["ms"] / x["scaldiag_ms"] - 1)
    assert data["clock"]["printed_headline_contradicted"] is True


def test_terminal_says_the_disagreement_first(tmp_path):
    rows, marks, end = loop()
    d = write_run(tmp_path / "r", rows, marks, end, bars_of(rows, 50, 13.4))
    out = io.StringIO()
    terminal_run.render(diagnose(d), Console(file=out, width=100, color_system=None))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Your clock disagrees: your tqdm bar 'epoch': 74.63 it/s")
    headline = next(i for i, line in enumerate(lines) if "Your loop's timer" in line)
    assert lines[headline].startswith("CONTRADICTED by your clock (above): ")


def test_terminal_agreement_beside_the_headline(tmp_path):
    rows, marks, end = loop()
    d = write_run(tmp_path / "r", rows, marks, end, bars_of(rows, 50, 10.1))
    out = io.StringIO()
    terminal_run.render(diagnose(d), Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert text.startswith("scaldiag run:") and "CONTRADICTED" not in text
    assert (
        "your tqdm bar 'epoch': 99.01 it/s (3 readings) = 10.1 ms a step (a loop iteration); "
        "scaldiag: 10 ms" in text
    )


def test_check_clock_agrees(tmp_path, capsys):
    rows, marks, end = loop()
    good = write_run(tmp_path / "good", rows, marks, end, bars_of(rows, 50, 10.1))
    bad = write_run(tmp_path / "bad", rows, marks, end, bars_of(rows, 50, 13.4))
    old = write_run(tmp_path / "old", rows, marks, end, None)
    assert [
        r.passed for r in check(diagnose(good), Limits(clock_agrees=True)) if r.check == "clock"
    ] == [True]
    assert main(["check", "--clock-agrees", str(good)]) == 0
    assert main(["check", "--clock-agrees", str(bad)]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("check failed: run: your tqdm bar 'epoch' disagrees: 13.4 ms a step")
    assert main(["check", "--clock-agrees", str(old)]) == 1
    assert "no printed.jsonl" in capsys.readouterr().out


def keras_epochs(rows, steps: int, per: str) -> list[dict]:
    """Keras's verbose=2 lines over the recorded epochs, each reading ``per`` (e.g. "1ms")."""
    printed, epochs = [], len(rows) // steps
    for e in range(epochs):
        t, end = rows[e * steps]["begin_ns"], rows[(e + 1) * steps - 1]["end_ns"]
        printed += [
            {"t_ns": t, "stream": "stdout", "text": f"Epoch {e + 1}/{epochs}", "end": "\n"},
            {
                "t_ns": end,
                "stream": "stdout",
                "text": f"{steps}/{steps} - 0s - {per}/step",
                "end": "\n",
            },
        ]
    return printed


def test_a_clock_too_coarse_to_judge_neither_agrees_nor_disagrees():
    """1ms/step is anything from 0.5 to 1.5 ms: beside 0.7 ms steps it settles nothing."""
    rows, marks, _ = loop(epochs=3, steps=20, step_ms=0.7)
    _, p = reconciled(rows, marks, keras_epochs(rows, 20, "1ms"), family="keras")
    (x,) = p.comparisons
    assert x.agrees is None and "too coarse" in x.note and p.disagreements == []


def two_phases():
    """40 steps of 10 ms, then 40 of 20 ms (a second optimizer's phase), each phase timed by the
    script as scripts do ("N steps, X ms/step")."""
    rows, marks, end = loop(epochs=1, steps=40, step_ms=10.0)
    t = end
    for i in range(40):
        rows.append({"step": 40 + i, "epoch": 1, "begin_ns": t, "end_ns": t + 20 * MS})
        t += 20 * MS
    marks += [
        {"mark": "epoch_begin", "t_ns": end, "epoch": 1},
        {"mark": "epoch_end", "t_ns": t, "epoch": 1},
    ]
    printed = [
        {"t_ns": end, "stream": "stdout", "text": "head: 40 steps, 10.0 ms/step", "end": "\n"},
        {"t_ns": t, "stream": "stdout", "text": "all: 40 steps, 20.1 ms/step", "end": "\n"},
    ]
    return rows, marks, t, printed


def test_a_phase_s_timer_is_set_beside_that_phase_s_steps():
    """Each phase's timer beside scaldiag's steps of its own phase, not the run's mean; the
    headline (their mean) is set beside the second phase's clock, which times most of the run."""
    rows, marks, _, printed = two_phases()
    c, p = reconciled(rows, marks, printed)
    head, whole = sorted(p.comparisons, key=lambda x: x.ms)
    assert c.scopes[LOOP_ITERATION].ms == pytest.approx(15.0, rel=0.05)  # the run's mean
    assert head.agrees and head.scaldiag_ms == pytest.approx(10.0)  # its own phase's steps
    assert whole.agrees and whole.scaldiag_ms == pytest.approx(20.0)
    assert whole.headline and whole.headline_agrees is False and p.headline_contradicted
    assert not head.headline


def test_check_fails_a_headline_a_clock_contradicts(tmp_path, capsys):
    rows, marks, end, printed = two_phases()
    d = write_run(tmp_path / "r", rows, marks, end, printed)
    assert main(["check", "--clock-agrees", str(d)]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "all: N steps, N ms/step') contradicts the headline: 20.1 ms a step against its" in last


TQDM_LOOP = """
import torch
from tqdm import tqdm
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(1024, 32),
    torch.randint(0, 10, (1024,))), batch_size=32)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    for x, y in tqdm(data, desc=f"epoch {epoch}"):
        opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()
"""


@pytest.mark.slow
def test_a_tqdm_loop_under_profile_has_its_bar_reconciled_in_the_first_lines(tmp_path):
    """End to end: the bar is read from what the script printed and set beside scaldiag's loop
    iteration; whether it agrees is this machine's (a busy one may not), so the test asserts the
    bar was compared and where the report says so."""
    import os
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(TQDM_LOOP)
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [
        sys.executable,
        "-m",
        "scaldiag",
        "profile",
        "-q",
        "--out",
        str(tmp_path / "runs"),
        "--json",
        str(tmp_path / "r.json"),
        str(script),
    ]
    proc = subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=400
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (x,) = json.loads((tmp_path / "r.json").read_text())["clock"]["printed"]
    assert x["what"] == "your tqdm bar 'epoch'" and x["scope"] == "loop_iteration"
    # agrees, disagrees, or (on a machine busy enough to spread the readings) too coarse to judge
    assert x["readings"] >= 1 and (x["agrees"] is not None or "too coarse" in x["note"])
    report = proc.stdout.splitlines()
    header = report.index("scaldiag run:")
    said = [
        i
        for i, line in enumerate(report)
        if line.startswith(("your tqdm bar 'epoch'", "Your clock disagrees: your tqdm bar 'epoch'"))
    ]
    # a disagreement before the header; otherwise beside the headline, under the header's lines
    assert said and (said[0] < header if x["agrees"] is False else header < said[0] < header + 10)


def test_reading_a_long_log_is_linear_in_its_lines():
    """A log of 100,000 lines is as many readings: each is placed on the record by binary search,
    never by a pass over every step (counted in Python lines run, not in time)."""
    from conftest import lines_run

    def work(steps: int) -> int:
        rows, marks, _ = loop(epochs=2, steps=steps, step_ms=10.0)
        training = {"framework": {"name": "pytorch"}, "loop_adapters": ["pytorch"]}
        found = recorded_steps.periods(rows, training, marks, None)
        epochs = epoch_stats(found, marks)
        c = clock(found, marks, training, epochs, 10.0, 0.0)
        printed = [
            {"t_ns": r["end_ns"], "stream": "stdout", "text": f"step {r['step']} 10.0 ms/step"}
            for r in rows
        ]
        p, lines = lines_run(printed_clock, printed, c, found, marks, epochs, training)
        assert [x.agrees for x in p.comparisons] == [True, True]  # the timer and the arrivals
        return lines

    assert work(800) < 2.2 * work(400)


def test_a_clock_counting_a_whole_multiple_of_the_steps_says_so():
    """A bar over a loader under gradient accumulation (4 batches a step) counts 4 a step: the
    counts cannot tell it from steps scaldiag missed, and the report says both."""
    rows, marks, _ = loop()
    printed = []
    for e in range(3):
        epoch = rows[e * 50 : (e + 1) * 50]
        printed += [
            bar(epoch[0]["begin_ns"], 0, 200, 0.0, f"epoch {e}"),
            bar(epoch[-1]["end_ns"], 200, 200, 400.0, f"epoch {e}"),
        ]
    _, p = reconciled(rows, marks, printed)
    (x,) = p.disagreements
    assert (x.counted, x.recorded) == (600, 150)
    assert x.note.startswith("4 of your clock's counts a recorded step: micro-batches")
