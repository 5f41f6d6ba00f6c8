import glob
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
GPU_TRACE = FIXTURES / "gpu" / "h200x2_jax_dataparallel.xplane.pb"
sys.path.insert(0, str(Path(__file__).parent))


def profile_one_thread(tmp_path, script: Path, *args) -> Path:
    """``scaldiag profile -q`` of ``script ARGS`` as a subprocess, one intra-op thread (the 2-core
    machine's load stays the tests'), into ``tmp_path/runs``; its one run directory."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "runs"
    result = subprocess.run(
        [sys.executable, "-m", "scaldiag", "profile", "-q", "--out", str(out), str(script), "--"]
        + list(args),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = list(out.iterdir())
    return run_dir


def tf_cpu_trace(case: str) -> Path:
    files = glob.glob(str(FIXTURES / "tf_cpu" / case / "plugins" / "profile" / "*" / "*.xplane.pb"))
    assert len(files) == 1, files
    return Path(files[0])


@pytest.fixture
def raw_space():
    """Read a fixture straight from the proto, without scaldiag's reader (TensorFlow's xplane_pb2).
    """
    from rawproto import load_space

    return lambda path: load_space(Path(path).read_bytes())


os.environ.setdefault("COLUMNS", "100")

# SIGINT and SIGQUIT as a terminal or CI gives them to a command. A runner started in the background
# by a non-interactive shell (`make test > log &`) passes them on ignored, and a script started
# ignoring SIGINT ignores it, under `python SCRIPT` as under scaldiag: a Ctrl-C test would test how
# the suite was started (three of them failed so, issue 48).
TERMINAL_DEFAULTS = (signal.SIGINT, signal.SIGQUIT)


def as_a_terminal_starts_it(then=None):
    """A ``preexec_fn``: TERMINAL_DEFAULTS at their defaults in the child, then ``then()``."""

    def setup():
        for sig in TERMINAL_DEFAULTS:
            signal.signal(sig, signal.SIG_DFL)
        if then is not None:
            then()

    return setup


@pytest.fixture(autouse=True)
def _no_saved_calibration(tmp_path_factory, monkeypatch):
    """Tests never read a developer's saved all-reduce calibration (analyze/interconnect.py looks in
    $XDG_CACHE_HOME/scaldiag/interconnect and $SCALDIAG_CALIBRATION): an empty cache of their own.
    """
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.delenv("SCALDIAG_CALIBRATION", raising=False)


def lines_run(fn, *args, **kwargs) -> tuple[object, int]:
    """``fn(*args, **kwargs)`` and the number of Python lines it ran (its callees' included): a
    measure of
    work that does not depend on the machine's load, for tests that an algorithm is not quadratic.
    """
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    previous = sys.gettrace()
    sys.settrace(lambda frame, event, arg: local)
    try:
        result = fn(*args, **kwargs)
    finally:
        sys.settrace(previous)
    return result, count


# `make test-quick` leaves out the tests marked slow: this project's end-to-end modules mark
# themselves (``pytestmark = pytest.mark.slow``); these modules, the framework adapters' capture
# tests kept by their own authors (and any test_*_adapter*.py), each run a real training under
# `scaldiag profile`, and are marked here by name, as are single tests of theirs that wait out a
# timeout.
SLOW_MODULE_PREFIXES = (
    "test_adapter",
    "test_lightning",
    "test_hf",
    "test_jax_loop",
    "test_keras_repeated_fit",
    "test_torch_loader_workers",
)
SLOW_TESTS = {
    "test_an_unreachable_scheduler_is_one_line_within_its_timeout"
}  # a 10 s connect timeout


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.path.name
        if (
            name.startswith(SLOW_MODULE_PREFIXES)
            or "_adapter" in name
            or getattr(item, "originalname", item.name) in SLOW_TESTS
        ):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def emulated_sweep(tmp_path_factory):
    """`scaldiag profile --emulate --gpus 1,2` of the bundled example, run once for the sweep tests
    (test_capture_tf, test_forecast_sweep): strong scaling, global batch 64 at 1 and 2 replicas
    (per-replica 64 -> 32: SD201). (its JSON report, its --out directory, the finished process)."""
    import json
    import subprocess

    pytest.importorskip(
        "tensorflow", reason="capture tests need TensorFlow (make test installs it)"
    )
    tmp = tmp_path_factory.mktemp("emulated_sweep")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "KERAS_BACKEND": "tensorflow",
        "COLUMNS": "120",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "--emulate",
            "--gpus",
            "1,2",
            "--out",
            str(tmp / "sweep"),
            "--json",
            str(tmp / "s.json"),
            str(ROOT / "examples" / "train_cnn.py"),
            "--",
            "--steps",
            "32",
            "--batch",
            "64",
            "--distribute",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((tmp / "s.json").read_text()), tmp / "sweep", result
