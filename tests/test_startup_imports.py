"""`profile` imports no framework the script does not import (issue 50): at a plain script's first
line none of TensorFlow, PyTorch, JAX or Keras is in ``sys.modules``; a Keras script on the torch
backend ends with the same frameworks imported under `profile` as under plain `python` (TensorFlow
was imported by capture there once: 7 s -> 14 s). Not timed: bench/startup/run.py measures the
start-up."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FRAMEWORKS = ("tensorflow", "torch", "jax", "keras", "lightning", "transformers", "flax")
SEEN = f"""
import sys
print("SEEN", ",".join(m for m in {FRAMEWORKS!r} if m in sys.modules) or "-", flush=True)
"""


def _seen(tmp_path: Path, source: str, profiled: bool, env: dict | None = None) -> list[str]:
    """The frameworks each SEEN line of the script found imported, in order."""
    script = tmp_path / "script.py"
    script.write_text(source)
    command = (
        [sys.executable, "-m", "scaldiag", "profile", "-q", "--out", str(tmp_path / "runs")]
        if profiled
        else [sys.executable]
    )
    result = subprocess.run(
        [*command, str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [line.split()[1] for line in result.stdout.splitlines() if line.startswith("SEEN ")]


def test_no_framework_is_imported_before_a_plain_scripts_first_line(tmp_path):
    assert _seen(tmp_path, SEEN, profiled=True) == ["-"]


def test_keras_on_torch_imports_the_same_frameworks_under_profile(tmp_path):
    pytest.importorskip("keras")
    pytest.importorskip("torch")
    source = (
        SEEN
        + textwrap.dedent("""
        import numpy as np
        import keras
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(np.zeros((64, 4)), np.zeros((64, 2)), epochs=1, batch_size=8, verbose=0)
    """)
        + SEEN
    )
    env = {"KERAS_BACKEND": "torch"}
    plain = _seen(tmp_path, source, profiled=False, env=env)
    profiled = _seen(tmp_path, source, profiled=True, env=env)
    assert profiled[0] == "-" and profiled == plain
    assert "tensorflow" not in profiled[1].split(",")
