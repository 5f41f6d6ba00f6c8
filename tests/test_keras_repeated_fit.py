"""Keras's fit called in a loop (keras-io's addition_rnn trains so): epochs numbered over the run,
one
trace window (the first fit's), and each whole epoch ends at its own on_epoch_end, not at the next
fit.
"""

import textwrap

import pytest
from loops import profile

pytest.importorskip("tensorflow")

from scaldiag.pipeline import analyze_run_dir  # noqa: E402
from scaldiag.record.reader import read_record  # noqa: E402

SCRIPT = textwrap.dedent("""
    import time
    import numpy as np, keras
    x = np.random.rand(1024, 16).astype("float32"); y = np.random.randint(0, 4, 1024)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(4)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    for i in range(4):
        model.fit(x, y, batch_size=64, epochs=1, verbose=2)
        time.sleep(0.2)  # the script's own work between fits: not any epoch's
""")


def test_repeated_fit(tmp_path):
    script = tmp_path / "fits.py"
    script.write_text(SCRIPT)
    run_dir, _ = profile(script, env={"SCALDIAG_INPUT_FREE": "0"})
    record = read_record(run_dir)
    begins = [m for m in record.marks if m["mark"] == "epoch_begin"]
    assert [m["epoch"] for m in begins] == [0, 1, 2, 3]
    assert [m["fit"] for m in begins] == [0, 1, 2, 3]
    assert sum(m["mark"] == "trace_start" for m in record.marks) == 1
    analysis = analyze_run_dir(run_dir)
    ends = {m["epoch"]: m["t_ns"] for m in record.marks if m["mark"] == "epoch_end"}
    assert [e.end_ns for e in analysis.epochs.epochs] == [
        ends[e.epoch] for e in analysis.epochs.epochs
    ]
    assert analysis.epochs.compared == [2, 3]  # the third fit on: the first fits compile
    assert analysis.clock.user_scope == "whole_epoch"
    assert record.training["loop_adapters"] == ["keras"]
    assert "sanity check" in record.training["loop_evidence_lacking"]
