"""``scaldiag.capture()`` imports no framework the code in its block does not (the adapters arm only
what the process imported), nor IPython; ``import scaldiag`` imports neither the capture nor the
extension until their names are used."""

import os
import subprocess
import sys

from conftest import ROOT

SOURCE = """
import sys
import scaldiag
assert "scaldiag.capturing" not in sys.modules and "scaldiag.ipython" not in sys.modules
with scaldiag.capture(out=sys.argv[1]) as cap:
    total = sum(range(1000))
print("SEEN", ",".join(m for m in {names!r} if m in sys.modules) or "-")
print("RUN", cap.run_dir)
print("EXTENSION", callable(scaldiag.load_ipython_extension))
"""
NAMES = ("tensorflow", "torch", "jax", "keras", "lightning", "transformers", "IPython")


def test_capture_imports_no_framework_and_the_extension_is_a_lazy_name(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", SOURCE.format(names=NAMES), str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert lines["SEEN"] == "-"
    assert lines["RUN"].startswith(str(tmp_path / "runs"))
    assert lines["EXTENSION"] == "True"  # (loading scaldiag.ipython imports IPython, then)
