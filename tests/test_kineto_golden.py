"""`scaldiag analyze --json` on every Kineto fixture gives the bytes it gave before the streaming reader.

tests/golden/kineto_reader/ holds the output of revision 088b4d0 (the whole-document
json.loads reader), written by `python -m scaldiag analyze PATH --json OUT` from the
repository root; ``{shared}`` stands for ../shared/ (the development set, outside the
repository: its cases are skipped where it is absent).
"""

from pathlib import Path

import pytest

from scaldiag.cli import main

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
GOLDEN = Path(__file__).resolve().parent / "golden" / "kineto_reader"
CASES = {
    "kineto_cpu_ddp_gloo": "fixtures/kineto/cpu_ddp_gloo",
    "kineto_h200_cuda": "fixtures/kineto/h200_cuda",
    "kineto_h200_ddp_gloo_1gpu": "fixtures/kineto/h200_ddp_gloo_1gpu",
    "kineto_h200_ddp_gloo_1gpu_rank1_pt_trace_json_gz": "fixtures/kineto/h200_ddp_gloo_1gpu/rank1.pt.trace.json.gz",
    "kineto_h200_healthy_run_trace": "fixtures/kineto/h200_healthy_run/trace",
    "kineto_synthetic_gpu": "fixtures/kineto/synthetic_gpu",
    "kineto_synthetic_gpu_rank0_pt_trace_json": "fixtures/kineto/synthetic_gpu/rank0.pt.trace.json",
    "x2_devset_torch_ddp_sync_1gpu_plain": "fixtures/x2_devset/torch_ddp_sync_1gpu_plain",
    "x2_devset_torch_ddp_sync_2gpu": "fixtures/x2_devset/torch_ddp_sync_2gpu",
    "shared_traces_2gpu": "{shared}/fixtures/x2_devset/torch_ddp_sync/traces_2gpu",
    "shared_traces_1gpu_plain": "{shared}/fixtures/x2_devset/torch_ddp_sync/traces_1gpu_plain",
    "shared_run_1gpu_trace": "{shared}/fixtures/x2_devset/torch_ddp_sync/run_1gpu/trace",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_analyze_json_is_what_it_was(name, tmp_path, monkeypatch, capsys):
    path = CASES[name].replace("{shared}", str(SHARED))
    if name.startswith("shared_") and not Path(path).exists():
        pytest.skip(f"the development set is not here ({path})")
    monkeypatch.chdir(ROOT)  # the report names its sources as given: relative to the repository
    out = tmp_path / "report.json"
    assert main(["analyze", path, "--json", str(out)]) == 0
    capsys.readouterr()
    expected = (GOLDEN / f"{name}.json").read_text().replace("{shared}", str(SHARED))
    assert out.read_text() == expected
