"""Issue 35's Keras MLP on the CPU (tests/keras_mlp.py: tiny Dense model, batch 16, 600 steps,
steps_per_execution=1), profiled five times (about 13 s each): each report names SD105
(host-bound), plainly or as borderline, never "Compute-bound" with no finding, and all five say it
in the same words (the verdict leads with it on a quiet machine; under load an established input
wait may lead). The issue's two runs of this script read "Compute-bound, 0 findings" and "SD105
high"."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNS = 5


def _profile(out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "scaldiag", "profile", "-q", "--out", str(out / "runs"),
         "--json", str(out / "r.json"), str(ROOT / "tests" / "keras_mlp.py")],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((out / "r.json").read_text())


def _words(text: str) -> str:
    return re.sub(r"\d[\d,]*(\.\d+)?", "#", text)


@pytest.mark.slow
def test_a_keras_mlp_on_the_cpu_is_host_bound_in_the_same_words_five_times(tmp_path):
    pytest.importorskip("tensorflow")
    reports = [_profile(tmp_path / str(i)) for i in range(RUNS)]
    said = []
    for report in reports:
        trace = report["trace_report"]
        sd105 = [f for f in trace["findings"] if f["id"] == "SD105"]
        assert sd105, trace["verdict"]
        assert not trace["verdict"].startswith("Compute-bound")
        # The verdict names SD105 where it is the cause established first; with another process
        # keeping one of the two cores busy the input's wait grew to an established 22.5% (SD101),
        # which then leads, SD105 after it (issue 33's runs under a busy core): not asserted.
        assert sd105[0]["category"] == "host_overhead"
        said.append((sd105[0]["severity"] == "borderline", _words(sd105[0]["title"])))
    assert said == [said[0]] * RUNS, said
