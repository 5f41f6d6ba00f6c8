"""Compile evidence from TensorFlow itself: a step is "compile or retrace" only where TF traced in
it."""

import numpy as np
import pytest

keras = pytest.importorskip("keras")
pytest.importorskip("tensorflow")

from scaldiag.analyze.run import step_stats  # noqa: E402
from scaldiag.keras import ScaldiagCallback  # noqa: E402
from scaldiag.record.reader import read_record  # noqa: E402

pytestmark = pytest.mark.slow  # real TensorFlow trainings under `scaldiag profile`


class Retrace(keras.callbacks.Callback):
    """Makes the train function anew at an epoch's end, as a script that changes what is trainable
    between epochs does: TensorFlow traces it again at the next epoch's first step."""

    def on_epoch_end(self, epoch, logs=None):
        if epoch == 1:
            self.model.make_train_function(force=True)


def test_a_retrace_marks_its_step_and_only_its_step(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.random((640, 8), np.float32), rng.random((640, 1), np.float32)
    model = keras.Sequential(
        [keras.layers.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)]
    )
    model.compile("sgd", "mse")
    run = tmp_path / "run"
    model.fit(
        x,
        y,
        batch_size=32,
        epochs=3,
        verbose=0,
        callbacks=[
            ScaldiagCallback(
                run_dir=run, trace_steps=0, input_free=False, sample=False, quiet=True
            ),
            Retrace(),
        ],
    )
    record = read_record(run)
    assert record.training["compile_evidence"] == ["tf.function traces"]
    compiles = [m for m in record.marks if m["mark"] == "compile"]
    assert compiles and all(m["end_ns"] >= m["t_ns"] for m in compiles)
    stats = step_stats(record.steps, {**record.training, "warmup_steps": 0}, record.marks)
    # The first step of the run and the first of epoch 2 (batch 40 of the run) traced; no other step
    # did.
    assert stats.excluded["compile or retrace"] == [0, 40]
    # The compiles happened while the fit was being recorded, and inside those two steps.
    first_epoch2 = next(r for r in record.steps if r["epoch"] == 2)
    assert any(first_epoch2["begin_ns"] <= m["t_ns"] <= first_epoch2["end_ns"] for m in compiles)
