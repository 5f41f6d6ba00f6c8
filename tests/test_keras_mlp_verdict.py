"""Issue 35's Keras MLP on the CPU (tests/keras_mlp.py: tiny Dense model, batch 16, 600 steps,
steps_per_execution=1), profiled five times (about 13 s each): each report names SD105
(host-bound), plainly or as borderline, never "Compute-bound" with no finding, and all five say it
in the same words (the verdict leads with it on a quiet machine; under load an established input
wait may lead). The issue's two runs of this script read "Compute-bound, 0 findings" and "SD105
high".

Firm or borderline is the load's to decide, not asserted: the share is the mean of the trace
window's five steps, and with two busy processes on the two cores a step the scheduler took the
process off for reads mostly idle (run 2 of five: steps 2.4, 1.7, 1.2, 19.7 and 8.0 ms, host
overhead 67, 47, 57, 6 and 19% of each), so the five-step range honestly reached below the 10%
threshold (17.5% in 3.2-31.7%) in two runs of five, firm in three; quiet, all five firm. What is
asserted of the severity is that it says what its own range says, and the words per severity."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNS = 5
ROUNDING = 0.02  # value and spread are each rounded to 0.01 in the report's evidence


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
    said = {}
    for report in reports:
        trace = report["trace_report"]
        sd105 = [f for f in trace["findings"] if f["id"] == "SD105"]
        assert sd105, trace["verdict"]
        assert not trace["verdict"].startswith("Compute-bound")
        # The verdict names SD105 where it is the cause established first; with another process
        # keeping one of the two cores busy the input's wait grew to an established 22.5% (SD101),
        # which then leads, SD105 after it (issue 33's runs under a busy core): not asserted.
        finding = sd105[0]
        assert finding["category"] == "host_overhead"
        borderline = finding["severity"] == "borderline"
        assert _agrees(borderline, finding["evidence"][0]), finding
        said.setdefault(borderline, set()).add(
            (_words(finding["title"]), _words(finding["summary"]))
        )
    # One title in every run, and one wording of the summary per severity (a borderline one adds
    # its fixed words, borderline_words in rules/base.py).
    assert len({title for words in said.values() for title, _ in words}) == 1, said
    assert all(len(words) == 1 for words in said.values()), said


def _agrees(borderline: bool, evidence: dict) -> bool:
    """Whether the severity says what the share's 95% range says of its threshold: borderline where
    its low end is below it (the high end, over 20% in every run measured, is above), firm where it
    reaches it. The report rounds value and spread to 0.01, so a low end within ROUNDING of the
    threshold agrees with either."""
    low = evidence["value"] - evidence["spread"]
    if abs(low - evidence["threshold"]) <= ROUNDING:
        return True
    return borderline == (low < evidence["threshold"])
