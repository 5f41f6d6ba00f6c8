"""A trace that `scaldiag profile` captured on an H200: Keras 3 on JAX, examples/train_cnn.py,
batch 256, with our step markers (steps 3-7)."""

import json
import subprocess
import sys

from conftest import FIXTURES, ROOT

TRACE = FIXTURES / "gpu" / "keras_jax_1gpu"


def test_captured_trace_has_our_markers_and_the_batch_as_h2d_bytes():
    out = subprocess.run(
        [sys.executable, "-m", "scaldiag", "analyze", str(TRACE), "--json", "-"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["steps"] == {
        "method": "markers",
        "count": 5,
        "description": "step markers: host events 'train' with a step_num stat",
    }
    (gpu,) = report["devices"]
    images = 256 * 32 * 32 * 3 * 4  # float32 batch
    labels = 256 * 4  # int32: JAX runs 32-bit by default
    assert gpu["h2d"]["bytes_per_step"] == images + labels
    assert gpu["h2d"]["bytes_by_host_kind"] == {"pinned": images + labels}
    assert report["framework"] == "jax"
    assert report["findings"][0]["id"] in ("SD105", "SD101")
