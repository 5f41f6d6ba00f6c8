"""The terminal reports, rendered in-process at 80 and 120 columns, against committed text.

Golden files live in tests/golden/; after an intended change to a report,
rewrite them with ``SCALDIAG_UPDATE_GOLDEN=1 pytest tests/test_golden_terminal.py``
and read the diff. Besides the exact text, every report (Keras on JAX and
PyTorch runs, a sweep, a trace; the default and ``--verbose``): no line wider
than the console but a path or a command alone on its line, no token broken
("replicas: 1", a number and its unit, a path, a command, a code line of a
fix), no box around code, no number cut with an ellipsis, no Python ``None``.
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
from scaldiag.rules.report import RunReport

GOLDEN = Path(__file__).parent / "golden"
# Relative paths, read from the project root: the reports name them, and a clone lives anywhere.
CASES = {
    "sweep": lambda: diagnose(Path("fixtures/runs/sweep")),
    "trace_gpu2": lambda: diagnose_trace(Path("fixtures/gpu/h200x2_jax_dataparallel.xplane.pb")),
    # A real run: Keras on JAX on an H200, real NVML samples and device trace
    # (bench/results/gpu_h200/accounting).
    "run_gpu1": lambda: diagnose(Path("fixtures/runs/h200_keras_jax_tiny")),
    # A real run: PyTorch on an H200, its Kineto trace (fixtures/README.md).
    "run_torch_gpu1": lambda: diagnose(Path("fixtures/kineto/h200_healthy_run")),
    # A real run: PyTorch on this machine's CPU (tests/test_vocabulary_pytorch.py says how it was
    # made).
    "run_torch_cpu": lambda: diagnose(Path("tests/golden/runs/torch_cpu_input_bound")),
}
VERBOSE = ("run_gpu1", "run_torch_gpu1", "run_torch_cpu")
WIDTHS = (80, 120)
RENDERS = [(case, width, False) for case in sorted(CASES) for width in WIDTHS] + [
    (case, width, True) for case in VERBOSE for width in WIDTHS
]


def rendered(report, width: int, verbose: bool = False, **console) -> str:
    out = io.StringIO()
    terminal.render(report, Console(file=out, width=width, **console), all_fixes=verbose)
    return out.getvalue()


@pytest.fixture(scope="module")
def reports():
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return {name: make() for name, make in CASES.items()}
    finally:
        os.chdir(cwd)


def golden_name(case: str, width: int, verbose: bool) -> str:
    return f"{case}{'_verbose' if verbose else ''}_{width}.txt"


@pytest.mark.parametrize(("case", "width", "verbose"), RENDERS)
def test_terminal_report_matches_golden(reports, case, width, verbose):
    text = rendered(reports[case], width, verbose)
    path = GOLDEN / golden_name(case, width, verbose)
    if os.environ.get("SCALDIAG_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text()


def own_lines(report) -> list[str]:
    """What a run report prints alone on its line, whole: its directory, its command, the commands
    to run."""
    if not isinstance(report, RunReport):
        return []
    command = " ".join((report.analysis.run.command or [])[1:])
    return [report.run_dir, command, f"scaldiag report {report.run_dir} --format perfetto"] + (
        [
            f"tensorboard --logdir {report.run_dir}",
            "pip install tensorboard tensorboard-plugin-profile",
        ]
        if report.trace_report
        and any(str(s).endswith(".xplane.pb") for s in report.trace_report.analysis.sources)
        else []
    )


def code_lines(report) -> list[str]:
    """Every code line of every finding's fix (without its comment): a fix's lines that start
    indented."""
    findings = list(report.findings) + (
        list(report.trace_report.findings) if getattr(report, "trace_report", None) else []
    )
    out = []
    for f in findings:
        for fix in f.fix.values():
            for line in fix.split("\n"):
                if line[:1].isspace():
                    out.append(re.split(r"\s{2,}#", line.strip())[0])
    return out


@pytest.mark.parametrize(("case", "width", "verbose"), RENDERS)
def test_no_token_is_broken_and_no_code_is_boxed(reports, case, width, verbose):
    text = rendered(reports[case], width, verbose)
    lines = text.splitlines()
    for (
        line
    ) in lines:  # wider than the console only as a path or a command alone on its line, indented
        assert len(line) <= width or (line.startswith("    ") and "  " not in line.strip()), line
    assert not re.search(r"\d…|…\d", text)  # no number cut short
    assert "None" not in text
    assert "Findings (" in text
    assert not set("│┃╭╰║") & set(text), "a box border: code in a box cannot be copied"
    assert not re.search(r":\n *\d", text), "a 'name: value' broken after its colon"
    assert not re.search(r"\d *\n[ │]*(ms|s|%|x|samples/s|B|KiB|MiB|GiB|copies)\b", text), (
        "a number broken from its unit"
    )
    stripped = {line.strip() for line in lines}
    for whole in own_lines(reports[case]):
        assert whole in stripped, f"not whole on its own line: {whole}"
    for code in code_lines(reports[case]):
        if code[:24] in text:  # a fix shown: its code lines are whole, each on one line
            assert any(code in line for line in lines), f"a code line broken: {code}"


def test_the_default_run_report_is_one_screen(reports):
    """At 80 columns a single run's default report is one screen (issue 24; the clock line of issue
    32 made it 61 lines, issue 35's batch forecast against its ceiling and device memory 63);
    --verbose has the rest."""
    for case in VERBOSE:
        short, long = rendered(reports[case], 80), rendered(reports[case], 80, verbose=True)
        assert len(short.splitlines()) <= 63, case
        assert len(long.splitlines()) > len(short.splitlines())


def colours(text: str) -> set[str]:
    """The SGR colour parameters used (30-38, 90-97): not bold, dim or italic."""
    params = {p for codes in re.findall(r"\x1b\[([0-9;]*)m", text) for p in codes.split(";")}
    return {p for p in params if re.fullmatch(r"3[0-8]|9[0-7]", p)}


def test_no_colour_when_no_color_is_set(reports, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    assert colours(rendered(reports["sweep"], 80, force_terminal=True)) == set()
    monkeypatch.delenv("NO_COLOR")
    assert colours(rendered(reports["sweep"], 80, force_terminal=True))
