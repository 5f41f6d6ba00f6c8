"""`scaldiag analyze --json` on every Kineto fixture gives the same bytes through the streaming
reader
as through the reference (json.loads) reader.

tests/golden/kineto_reader/ holds the output of revision 088b4d0, the last with only the
json.loads reader, written by `python -m scaldiag analyze PATH --json OUT` from the
repository root (``{shared}`` stands for ../shared/). The streaming reader on 088b4d0's
analysis gave those bytes exactly (bench/results/kineto.md says how it was checked); as
the analysis moves on, its words change, so the test that lasts runs today's analysis
twice, on each reader, and asks for the same bytes. The development set (../shared/)
is outside the repository: its cases are skipped where it is absent.
"""

from pathlib import Path

import pytest

from scaldiag.cli import main
from scaldiag.readers.kineto import fast as kineto_fast

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
GOLDEN = Path(__file__).resolve().parent / "golden" / "kineto_reader"
CASES = {
    "kineto_cpu_ddp_gloo": "fixtures/kineto/cpu_ddp_gloo",
    "kineto_h200_cuda": "fixtures/kineto/h200_cuda",
    "kineto_h200_ddp_gloo_1gpu": "fixtures/kineto/h200_ddp_gloo_1gpu",
    "kineto_h200_ddp_gloo_1gpu_rank1_pt_trace_json_gz": (
        "fixtures/kineto/h200_ddp_gloo_1gpu/rank1.pt.trace.json.gz"
    ),
    "kineto_h200_healthy_run_trace": "fixtures/kineto/h200_healthy_run/trace",
    "kineto_synthetic_gpu": "fixtures/kineto/synthetic_gpu",
    "kineto_synthetic_gpu_rank0_pt_trace_json": "fixtures/kineto/synthetic_gpu/rank0.pt.trace.json",
    "x2_devset_torch_ddp_sync_1gpu_plain": "fixtures/x2_devset/torch_ddp_sync_1gpu_plain",
    "x2_devset_torch_ddp_sync_2gpu": "fixtures/x2_devset/torch_ddp_sync_2gpu",
    "shared_traces_2gpu": "{shared}/fixtures/x2_devset/torch_ddp_sync/traces_2gpu",
    "shared_traces_1gpu_plain": "{shared}/fixtures/x2_devset/torch_ddp_sync/traces_1gpu_plain",
    "shared_run_1gpu_trace": "{shared}/fixtures/x2_devset/torch_ddp_sync/run_1gpu/trace",
}


def report(path: str, out: Path) -> str:
    # In this process (local:1), where the readers are watched; worker processes run the same code.
    assert main(["analyze", path, "--json", str(out), "--engine", "local:1"]) == 0
    return out.read_text()


@pytest.mark.parametrize("name", sorted(CASES))
def test_analyze_json_is_the_reference_reader_s(name, tmp_path, monkeypatch, capsys):
    path = CASES[name].replace("{shared}", str(SHARED))
    if name.startswith("shared_") and not Path(path).exists():
        pytest.skip(f"the development set is not here ({path})")
    monkeypatch.chdir(ROOT)  # the report names its sources as given: relative to the repository
    read = []
    real = kineto_fast.read_file
    monkeypatch.setattr(kineto_fast, "read_file", lambda f: read.append(f) or real(f))
    fast = report(path, tmp_path / "fast.json")
    assert read and all(real(f) is not None for f in read), "the streaming reader read every file"
    monkeypatch.setattr(kineto_fast, "read_file", lambda f: None)  # as where the scanner gives up
    assert fast == report(path, tmp_path / "reference.json")
    capsys.readouterr()


def test_the_outputs_of_088b4d0_are_kept_for_every_case():
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(CASES)
