"""``scaldiag try`` on real CPU runs: the fix applied from outside the script, the file unchanged.

No timing is asserted: the speed-up is measured and kept, never compared with a number here.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "slow_getitem.py"
HERE = Path(tempfile.mkdtemp(prefix="scaldiag-test-try-"))  # the runs' working directory


def _scaldiag(*args: str) -> subprocess.CompletedProcess:
    """In a folder of its own: the run's working directory is looked at for writes, and the
    project's own folder is written by others meanwhile (an editor, another test run)."""
    return subprocess.run(
        [sys.executable, "-m", "scaldiag", *args],
        capture_output=True,
        text=True,
        cwd=HERE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _profile(out: Path, script: Path, *args: str) -> tuple[Path, dict]:
    done = _scaldiag(
        "profile", "-q", "--out", str(out), "--json", str(out / "r.json"), str(script), *args
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir, json.loads((out / "r.json").read_text())


def _ids(report: dict) -> set[str]:
    found = list(report.get("findings") or [])
    found += (report.get("trace_report") or {}).get("findings") or []
    return {f["id"] for f in found}


def _try(run_dir: Path, finding: str, script: Path = SCRIPT) -> tuple[dict, str]:
    """One pair of `scaldiag try` on ``script``'s run: what it kept, and its stderr (the script's
    output)."""
    before = _digest(script)
    done = _scaldiag("try", str(run_dir), finding, "--rounds", "1", "--max-rounds", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert _digest(script) == before  # the user's file is never written
    kept = json.loads((run_dir / "try.json").read_text())
    assert kept["finding"] == finding and len(kept["rounds"]) == 1
    pair = kept["rounds"][0]
    assert pair["baseline"]["exit"] == 0 and pair["fixed"]["exit"] == 0
    assert kept["speedup"]["pairs"] == 1
    assert kept["speedup"]["median"] == pytest.approx(
        pair["baseline"]["step_ms"] / pair["fixed"]["step_ms"]
    )
    assert done.stdout.startswith(f"{finding}: ")
    return kept, done.stderr


def test_try_applies_workers_and_threads(tmp_path):
    run_dir, report = _profile(tmp_path / "runs", SCRIPT, "--steps", "24")
    ids = _ids(report)
    assert "SD101" in ids, ids  # workers=0 and ~2 ms of Python a sample: the step waits for input
    kept, _ = _try(run_dir, "SD101")
    assert kept["sets"]["num_workers"] >= 1 and kept["sets"]["persistent_workers"] is True
    fixed = json.loads((Path(kept["rounds"][0]["fixed"]["dir"]) / "training.json").read_text())
    base = json.loads((Path(kept["rounds"][0]["baseline"]["dir"]) / "training.json").read_text())
    # the DataLoader the script built got the fix; the baseline's is the script's own
    assert fixed["knobs"]["dataloader"]["num_workers"] == kept["sets"]["num_workers"]
    assert fixed["knobs"]["dataloader"]["persistent_workers"] is True
    assert base["knobs"]["dataloader"]["num_workers"] == 0
    if "SD211" not in ids:
        pytest.skip(f"SD211 did not fire on this machine (findings {sorted(ids)})")
    kept, _ = _try(run_dir, "SD211")
    fixed = json.loads((Path(kept["rounds"][0]["fixed"]["dir"]) / "training.json").read_text())
    assert fixed["knobs"]["intra_op_threads"] == kept["sets"]["intra_op_threads"]


def test_try_applies_keras_steps_per_execution(tmp_path):
    script = ROOT / "tests" / "keras_mlp.py"
    run_dir, report = _profile(tmp_path / "runs", script)
    assert "SD105" in _ids(report)
    kept, _ = _try(run_dir, "SD105", script)
    n = kept["sets"]["steps_per_execution"]
    assert kept["forecast"] is None and "per-replica batch x4" in kept["no_forecast"]
    assert n > 1
    pair = kept["rounds"][0]
    fixed = json.loads((Path(pair["fixed"]["dir"]) / "training.json").read_text())
    base = json.loads((Path(pair["baseline"]["dir"]) / "training.json").read_text())
    # the model the script compiled ran n steps a call; the baseline, the script's own 1
    assert fixed["steps_per_execution"] == n and base["steps_per_execution"] == 1


def test_try_names_the_run_findings_for_an_unknown_id(tmp_path):
    run_dir = tmp_path / "empty"
    run_dir.mkdir()
    done = _scaldiag("try", str(run_dir), "SD211")
    assert done.returncode == 2 and "run.json" in done.stderr


def test_profile_try_refuses_a_sweep_and_keeps_the_script_s_status_when_the_finding_is_absent(
    tmp_path,
):
    done = _scaldiag("profile", "--emulate", "--try", "SD101", str(SCRIPT))
    assert done.returncode == 2 and "--try measures a fix on one run" in done.stderr
    out = tmp_path / "runs"
    done = _scaldiag(
        "profile", "-q", "--out", str(out), "--try", "SD999", str(SCRIPT), "--steps", "8"
    )
    assert done.returncode == 0, done.stderr[-2000:]  # the script's status, not try's refusal
    assert "scaldiag: try: SD999: not a finding of" in done.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    assert not (run_dir / "try.json").exists()


def test_try_allow_semantic_runs_the_batch_the_forecast_is_of(tmp_path):
    """SD105's forecast on the Keras MLP is a per-replica batch x4: with --allow-semantic, try
    runs that batch (the fit's batch_size multiplied from outside), says what it changes, and
    measures samples/s, so the measurement stands beside the forecast."""
    script = ROOT / "tests" / "keras_mlp.py"
    run_dir, report = _profile(tmp_path / "runs", script, "--steps", "300")
    sd105 = [f for f in report["trace_report"]["findings"] if f["id"] == "SD105"]
    assert sd105 and sd105[0]["forecast"]["arithmetic"].startswith("per-replica batch x4")
    before = _digest(script)
    done = _scaldiag(
        "try", str(run_dir), "SD105", "--rounds", "1", "--max-rounds", "1", "--allow-semantic"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert _digest(script) == before  # the user's file is never written
    assert "changes what is trained: per-replica batch x4" in done.stderr
    # one pair resolves nothing: the figure is given inside the words that say so
    assert done.stdout.startswith(
        "SD105: per-replica batch x4: not resolvable at this load (measured "
    )
    kept_forecast = json.loads((run_dir / "try.json").read_text())["forecast"]
    # the batch's forecast is this fix's own: set beside it
    assert kept_forecast and f"; forecast {kept_forecast:.2f}x" in done.stdout
    kept = json.loads((run_dir / "try.json").read_text())
    assert kept["sets"] == {"per_replica_batch_factor": 4}
    pair = kept["rounds"][0]
    fixed = json.loads((Path(pair["fixed"]["dir"]) / "training.json").read_text())
    base = json.loads((Path(pair["baseline"]["dir"]) / "training.json").read_text())
    assert fixed["per_replica_batch"] == 4 * base["per_replica_batch"]
    assert pair["fixed"]["samples_per_step"] == 4 * pair["baseline"]["samples_per_step"]
    per_sample = [pair[s]["step_ms"] / pair[s]["samples_per_step"] for s in ("baseline", "fixed")]
    assert kept["speedup"]["median"] == pytest.approx(per_sample[0] / per_sample[1])


def test_try_gives_a_tf_data_map_its_parallel_calls(tmp_path):
    """SD101 on a Keras/TensorFlow script whose tf.data map is sequential: `try` gives every map the
    script builds num_parallel_calls=tf.data.AUTOTUNE from outside (a hook on tf.data's module).
    The script prints its map stage's class: the baseline's is the sequential map, the fix's the
    parallel one."""
    pytest.importorskip("tensorflow")
    script = ROOT / "tests" / "tfdata_slow_map.py"
    run_dir, report = _profile(tmp_path / "runs", script, "--steps", "40")
    assert "SD101" in _ids(report)
    kept, stderr = _try(run_dir, "SD101", script)
    assert kept["sets"] == {"num_parallel_calls": "tf.data.AUTOTUNE"}
    stages = [line.split()[-1] for line in stderr.splitlines() if line.startswith("map stage")]
    assert stages == ["_MapDataset", "_ParallelMapDataset"]  # baseline, then fixed
