"""The terminal reports, rendered in-process at 80 and 120 columns, against committed text.

Golden files live in tests/golden/; after an intended change to a report,
rewrite them with ``SCALDIAG_UPDATE_GOLDEN=1 pytest tests/test_golden_terminal.py``
and read the diff. Besides the exact text: no line wider than the console,
no number cut with an ellipsis, no Python ``None`` shown.
"""

import io
import os
import re
from pathlib import Path

import pytest
from conftest import ROOT
from rich.console import Console

from scaldiag.pipeline import diagnose, diagnose_trace
from scaldiag.render import terminal

GOLDEN = Path(__file__).parent / "golden"
# Relative paths, read from the project root: the reports name them, and a clone lives anywhere.
CASES = {"sweep": lambda: diagnose(Path("fixtures/runs/sweep")),
         "trace_gpu2": lambda: diagnose_trace(Path("fixtures/gpu/h200x2_jax_dataparallel.xplane.pb")),
         # A real run: Keras on JAX on an H200, real NVML samples and device trace (bench/results/gpu_h200/accounting).
         "run_gpu1": lambda: diagnose(Path("fixtures/runs/h200_keras_jax_tiny"))}


def rendered(report, width: int, **console) -> str:
    out = io.StringIO()
    terminal.render(report, Console(file=out, width=width, **console))
    return out.getvalue()


@pytest.fixture(scope="module")
def reports():
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return {name: make() for name, make in CASES.items()}
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("case", sorted(CASES))
def test_terminal_report_matches_golden(reports, case, width):
    text = rendered(reports[case], width)
    path = GOLDEN / f"{case}_{width}.txt"
    if os.environ.get("SCALDIAG_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text()


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fits_the_width_and_cuts_no_number(reports, case, width):
    text = rendered(reports[case], width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert not re.search(r"\d…|…\d", text)  # no number cut short
    assert "None" not in text
    assert "Findings (" in text


def colours(text: str) -> set[str]:
    """The SGR colour parameters used (30-38, 90-97): not bold, dim or italic."""
    params = {p for codes in re.findall(r"\x1b\[([0-9;]*)m", text) for p in codes.split(";")}
    return {p for p in params if re.fullmatch(r"3[0-8]|9[0-7]", p)}


def test_no_colour_when_no_color_is_set(reports, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    assert colours(rendered(reports["sweep"], 80, force_terminal=True)) == set()
    monkeypatch.delenv("NO_COLOR")
    assert colours(rendered(reports["sweep"], 80, force_terminal=True))
