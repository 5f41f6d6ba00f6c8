"""``scaldiag try`` and the user's files: never changed, whatever the round does or how it ends.

A real PyTorch CPU training (tests/slow_getitem.py's Dataset, a few steps) that also does what
training scripts do to their folders: saves ``model.pt`` (torch.save) in its working directory,
appends to ``train.log``, writes an absolute path in another folder, saves a checkpoint by a
temporary file and ``os.replace``, creates a directory. It is profiled once (``profile`` runs the
script as the user would: its writes are the user's own), then ``try`` runs it: every file is
byte-identical afterwards, and every round saw the bytes from before the try (the script prints the
digest of what it found). Signals and the budget are synchronised on a file the round's script
writes, never on sleeps.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRY_TIMEOUT_S = 600  # a hang fails the test; a busy machine does not

SCRIPT = """
import hashlib, os, signal, sys, time
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

OTHER = sys.argv[1]  # a folder elsewhere, written through its absolute path


class SlowItems(Dataset):
    def __len__(self):
        return 8 * 24

    def __getitem__(self, i):
        x = torch.rand(3, 16, 16)
        label = sum(j * j for j in range(i % 7, 20000)) % 10  # plain Python work: input-bound
        return x, label


def digest(path):
    try:
        return hashlib.sha256(open(path, "rb").read()).hexdigest()[:16]
    except FileNotFoundError:
        return "absent"


saw = {p: digest(p) for p in ("model.pt", "train.log", "ckpt.pt", os.path.join(OTHER, "out.txt"))}
print("SAW", sorted(saw.items()), flush=True)
MODE = os.environ.get("TRY_TEST_MODE")
if MODE in ("block", "block-ignoring-sigterm", "block-after-sh"):  # waits to be stopped
    if MODE == "block-ignoring-sigterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if MODE == "block-after-sh":  # a write no hook sees: try finds it and says so, not undone
        import subprocess
        subprocess.run(["sh", "-c", "echo sub > sub.txt"], check=True)
    open("model.pt", "wb").write(b"half-written by a round")
    open(os.environ["TRY_TEST_READY"], "w").write(str(os.getpid()))
    while True:
        time.sleep(0.1)
if MODE == "orphan":  # a program started with an empty environment, left behind in a session
    import subprocess
    pids = os.environ["TRY_TEST_READY"]
    subprocess.Popen(["sh", "-c", f"echo $$ >> {pids}; sleep 600"], env={}, start_new_session=True)
    while not os.path.exists(pids) or not open(pids).read().endswith("\\n"):
        time.sleep(0.01)
    sys.exit(0)
if MODE == "linger":  # a child that outlives the script, ignores SIGTERM, writes after it ended
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while os.getppid() == parent:
            time.sleep(0.05)
        open("model.pt", "wb").write(b"written after the round")
        while True:
            time.sleep(0.1)
    print("LINGER", pid, flush=True)
    sys.exit(0)
if os.environ.get("TRY_TEST_MODE") == "fail-fixed" and os.environ.get("SCALDIAG_TRY_DATALOADER"):
    sys.exit(3)
model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(8, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in DataLoader(SlowItems(), batch_size=8, num_workers=0):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.save(model.state_dict(), "model.pt")
with open("train.log", "a") as f:
    f.write(f"trained, loss {loss.item():.3f}\\n")
with open(os.path.join(OTHER, "out.txt"), "w") as f:
    f.write(f"loss {loss.item()}\\n")
with open("ckpt.pt.tmp", "wb") as f:
    torch.save({"loss": loss.item()}, f)
os.replace("ckpt.pt.tmp", "ckpt.pt")
os.makedirs("runs/exp1", exist_ok=True)
open("runs/exp1/metrics.txt", "w").write(str(loss.item()))
"""


def _scaldiag(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scaldiag", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=TRY_TIMEOUT_S,
    )


def _tree(*dirs: Path) -> dict[str, str]:
    """Every file under ``dirs`` (scaldiag's run directories left out) by its sha256 and mode."""
    out = {}
    for d in dirs:
        for p in sorted(d.rglob("*")):
            if "runs-scaldiag" in p.parts or not p.is_file():
                continue
            out[str(p)] = f"{hashlib.sha256(p.read_bytes()).hexdigest()} {p.stat().st_mode:o}"
    return out


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """The script profiled once in its own folder: (work dir, other folder, run directory)."""
    base = tmp_path_factory.mktemp("trysafety")
    work, other = base / "work", base / "elsewhere"
    work.mkdir()
    other.mkdir()
    (work / "train.py").write_text(SCRIPT)
    (work / "train.log").write_text("a line the user wrote\n")
    out = work / "runs-scaldiag"
    done = _scaldiag("profile", "-q", "--out", str(out), "train.py", "--", str(other), cwd=work)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    run = json.loads((run_dir / "run.json").read_text())
    assert run["script"]["path"] == str(work / "train.py")
    assert run["script"]["sha256"] == hashlib.sha256((work / "train.py").read_bytes()).hexdigest()
    # profile saw the script's Python writes, and none it could not see
    assert str(work / "model.pt") in run["writes"]["python_paths"]
    assert str(other / "out.txt") in run["writes"]["python_paths"]
    assert run["writes"]["uncontained_paths"] == []
    return work, other, run_dir


@pytest.mark.slow
def test_try_leaves_every_user_file_as_it_was_and_each_round_saw_them(profiled, tmp_path):
    work, other, run_dir = profiled
    before = _tree(work, other)
    # try runs from another folder: the script is the one profiled, in the run's own folder
    done = _scaldiag(
        "try", str(run_dir), "SD101", "--rounds", "1", "--max-rounds", "1", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert _tree(work, other) == before
    assert not (work / "ckpt.pt.tmp").exists()
    assert list(tmp_path.iterdir()) == []  # nothing landed in try's own folder
    saw = [line for line in done.stderr.splitlines() if line.startswith("SAW ")]
    assert len(saw) == 2 and saw[0] == saw[1]  # baseline and fixed found the same bytes
    for path, digest in (("model.pt", saw[0]), ("train.log", saw[0])):
        expected = hashlib.sha256((work / path).read_bytes()).hexdigest()[:16]
        assert f"'{path}', '{expected}'" in digest
    kept = json.loads((run_dir / "try.json").read_text())
    assert Path(kept["try_dir"]).parent == run_dir / "try"
    pair = kept["rounds"][0]
    assert pair["baseline"]["exit"] == 0 and pair["fixed"]["exit"] == 0
    assert pair["baseline"]["journaled_paths"] >= 5  # model.pt, train.log, out.txt, ckpt, runs
    assert pair["baseline"]["not_restored"] == [] and pair["baseline"]["uncontained"] == []
    # a second try: a directory of its own, the first one's rounds untouched
    first = sorted(p.name for p in Path(kept["try_dir"]).iterdir())
    done = _scaldiag(
        "try", str(run_dir), "SD101", "--rounds", "1", "--max-rounds", "1", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    again = json.loads((run_dir / "try.json").read_text())
    assert again["try_dir"] != kept["try_dir"]
    assert sorted(p.name for p in Path(kept["try_dir"]).iterdir()) == first
    assert _tree(work, other) == before


def _start_blocking_try(
    run_dir: Path, tmp_path: Path, *extra: str, wait: bool = True, mode: str = "block", forked=False
):
    ready = tmp_path / "ready"
    # forked: try in a process forked from a Python one (a fork server, a multiprocessing worker)
    start = ["-c", FORKED] if forked else ["-m", "scaldiag"]
    proc = subprocess.Popen(
        [sys.executable, *start, "try", str(run_dir), "SD101", "--rounds", "2", *extra],
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TRY_TEST_MODE": mode,
            "TRY_TEST_READY": str(ready),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + TRY_TIMEOUT_S
    while wait and not ready.exists():  # the round's script wrote it: the round is under way
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the round never started"
        time.sleep(0.05)
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_the_round_and_try_keeping_what_was_measured(profiled, tmp_path, sig):
    work, other, run_dir = profiled
    before = _tree(work, other)
    proc = _start_blocking_try(run_dir, tmp_path)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=TRY_TIMEOUT_S)
    assert proc.returncode == 128 + sig, err[-3000:]
    kept = json.loads((run_dir / "try.json").read_text())
    assert kept["interrupted"] is True and kept["stopped"] == f"signal {sig.name}"
    assert len(kept["rounds"]) == 1  # the round in progress, not the next
    assert _tree(work, other) == before  # the round's half-written model.pt put back


@pytest.mark.slow
def test_an_uncontained_write_is_said_however_many_signals_end_try(profiled, tmp_path):
    """A subprocess of the round writes the user's folder, then signals keep coming until try
    ends (the fuzz's SIGINT then SIGTERM): the path is named on stderr whatever the second
    signal interrupts, and try ends by the signals (128+N), not by a crash."""
    work, _, run_dir = profiled
    proc = _start_blocking_try(run_dir, tmp_path, mode="block-after-sh")
    try:
        proc.send_signal(signal.SIGINT)
        while proc.poll() is None:  # a late signal lands wherever try is: the look, try.json, words
            time.sleep(0.02)
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=TRY_TIMEOUT_S)
        assert f"{work / 'sub.txt'} changed while the round ran" in err, err[-3000:]
        # the stopper's end (128+N) or, past its handlers, the default SIGTERM (-15) after the words
        assert proc.returncode in (128 + signal.SIGINT, 128 + signal.SIGTERM, -signal.SIGTERM)
    finally:
        (work / "sub.txt").unlink(missing_ok=True)


@pytest.mark.slow
def test_a_round_s_orphan_with_no_trace_of_the_round_ends_with_it(profiled, tmp_path):
    """A program the script started with an empty environment, in its own session: nothing in it
    names the round, yet it is the round's (try is the subreaper: the orphan became try's child),
    and it is ended before the round is put back, not left to write after try."""
    _, _, run_dir = profiled
    pids = tmp_path / "orphans"
    done = _scaldiag(
        "try",
        str(run_dir),
        "SD101",
        "--rounds",
        "1",
        "--max-rounds",
        "1",
        cwd=tmp_path,
        env={"TRY_TEST_MODE": "orphan", "TRY_TEST_READY": str(pids)},
    )
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2, done.stderr[-3000:]  # one a side
    for pid in started:  # gone, or a zombie whose parent has not reaped it yet
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        assert state in ("Z", "X"), f"the round's orphan {pid} still runs: {done.stderr[-2000:]}"


@pytest.mark.slow
def test_the_budget_stops_a_round_that_never_ends(profiled, tmp_path):
    work, other, run_dir = profiled
    before = _tree(work, other)
    # the script never ends: without the wall, try would not either (the timeout would fail it)
    proc = _start_blocking_try(run_dir, tmp_path, "--budget-s", "1", wait=False)
    _, err = proc.communicate(timeout=TRY_TIMEOUT_S)
    assert proc.returncode == 0, err[-3000:]
    kept = json.loads((run_dir / "try.json").read_text())
    assert kept["stopped"] == "budget" and kept["speedup"] is None
    assert kept["rounds"][0]["baseline"]["exit"] < 0  # stopped by a signal
    assert "round 0: baseline killed by signal" in err
    assert _tree(work, other) == before


FORKED = """
import os, sys
pid = os.fork()
if pid == 0:
    from scaldiag.cli import main
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.slow
def test_the_budget_stops_a_round_when_try_runs_in_a_forked_process(profiled, tmp_path):
    """In a forked process ``threading.main_thread().native_id`` is the parent's: the watchdog
    looked for the script among that thread's children, found none, and the budget never
    stopped the round (the fuzz's try mode found it)."""
    work, other, run_dir = profiled
    before = _tree(work, other)
    proc = _start_blocking_try(run_dir, tmp_path, "--budget-s", "1", wait=False, forked=True)
    _, err = proc.communicate(timeout=TRY_TIMEOUT_S)
    assert proc.returncode == 0, err[-3000:]
    kept = json.loads((run_dir / "try.json").read_text())
    assert kept["stopped"] == "budget"
    assert kept["rounds"][0]["baseline"]["exit"] == -signal.SIGTERM
    assert _tree(work, other) == before


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.slow
def test_a_script_that_ignores_sigterm_is_sigkilled_after_the_grace(profiled, tmp_path):
    """SIGTERM to try reaches the script (forwarded, then the watchdog's), which ignores it:
    GRACE_S later it gets SIGKILL, and try ends. The script says it is ready once it ignores
    SIGTERM, so the stop comes after that, whatever the machine's load (the budget, a time, could
    come before)."""
    work, other, run_dir = profiled
    before = _tree(work, other)
    proc = _start_blocking_try(run_dir, tmp_path, mode="block-ignoring-sigterm")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=TRY_TIMEOUT_S)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    kept = json.loads((run_dir / "try.json").read_text())
    assert kept["stopped"] == "signal SIGTERM"
    assert kept["rounds"][0]["baseline"]["exit"] == -signal.SIGKILL  # after GRACE_S
    assert _tree(work, other) == before


@pytest.mark.slow
def test_a_round_s_leftover_processes_end_before_it_is_put_back(profiled, tmp_path):
    """A child the script forked and left behind (it ignores SIGTERM and writes once the script
    has ended) is ended with the round: nothing of the round runs on after try."""
    work, other, run_dir = profiled
    before = _tree(work, other)
    pids = []
    try:
        done = _scaldiag(
            "try", str(run_dir), "SD101", "--rounds", "1", "--max-rounds", "1",
            cwd=tmp_path, env={"TRY_TEST_MODE": "linger"},
        )  # fmt: skip
        pids = [int(line.split()[1]) for line in done.stderr.splitlines() if line[:7] == "LINGER "]
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(pids) == 2  # baseline's and fixed's
        assert [pid for pid in pids if _alive(pid)] == []
        kept = json.loads((run_dir / "try.json").read_text())
        assert kept["rounds"][0]["baseline"]["leftover_processes_killed"] == 1
        assert _tree(work, other) == before
    finally:
        for pid in pids:  # where the test fails: none left behind by it either
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_script_that_outlived_its_killed_try_is_ended_before_the_next_puts_it_back(
    profiled, tmp_path
):
    """try SIGKILLed: its script gets SIGTERM (the launcher's death signal), which this one
    ignores; the next try ends it before putting the round back, or it would write on."""
    work, other, run_dir = profiled
    before = _tree(work, other)
    proc = _start_blocking_try(run_dir, tmp_path, mode="block-ignoring-sigterm")
    script_pid = int((tmp_path / "ready").read_text())
    try:
        proc.kill()
        proc.wait(timeout=TRY_TIMEOUT_S)  # not communicate: the script holds try's pipes open
        proc.stdout.close()
        proc.stderr.close()
        assert _alive(script_pid)  # SIGTERM ignored: the round's script runs on
        done = _scaldiag("try", str(run_dir), "SD999", cwd=tmp_path)
        assert done.returncode == 2, done.stderr[-3000:]
        assert "an earlier try of this run ended mid-round" in done.stderr
        assert not _alive(script_pid)
        assert _tree(work, other) == before
    finally:
        if _alive(script_pid):
            os.kill(script_pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_try_killed_mid_round_is_put_back_by_the_next(profiled, tmp_path):
    work, other, run_dir = profiled
    before = _tree(work, other)
    proc = _start_blocking_try(run_dir, tmp_path)
    proc.kill()  # try itself dies: nothing of its own runs; its script dies with it
    proc.communicate(timeout=TRY_TIMEOUT_S)
    deadline = time.monotonic() + TRY_TIMEOUT_S
    while (work / "model.pt").read_bytes() != b"half-written by a round":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    done = _scaldiag("try", str(run_dir), "SD999", cwd=tmp_path)
    assert done.returncode == 2
    assert "an earlier try of this run ended mid-round" in done.stderr
    assert _tree(work, other) == before


@pytest.mark.slow
def test_failed_pairs_are_left_out_and_named(profiled, tmp_path):
    work, other, run_dir = profiled
    before = _tree(work, other)
    done = _scaldiag(
        "try", str(run_dir), "SD101", "--rounds", "1", "--max-rounds", "1",
        cwd=tmp_path, env={"TRY_TEST_MODE": "fail-fixed"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "left out: round 0: fixed exited 3" in done.stderr
    assert "not measured" in done.stdout and "measured 1" not in done.stdout
    kept = json.loads((run_dir / "try.json").read_text())
    assert kept["speedup"] is None and kept["left_out"] == ["round 0: fixed exited 3"]
    assert _tree(work, other) == before


def test_try_refuses_a_script_changed_since_it_was_profiled(profiled, tmp_path):
    work, _, run_dir = profiled
    script = work / "train.py"
    text = script.read_text()
    try:
        script.write_text(text + "\n# edited\n")
        done = _scaldiag("try", str(run_dir), "SD101", cwd=tmp_path)
    finally:
        script.write_text(text)
    assert done.returncode == 2
    assert "train.py changed since it was profiled: profile it again" in done.stderr
    assert "Traceback" not in done.stderr


def _fake_run(tmp_path: Path, command: list, **fields) -> Path:
    """A run directory whose run.json holds ``command`` (crafted: try reads it as a record anyone
    could have written)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(parents=True)
    run = {"command": command, "cwd": str(tmp_path), **fields}
    (run_dir / "run.json").write_text(json.dumps(run))
    return run_dir


def _refused(done: subprocess.CompletedProcess, words: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert words in done.stderr, done.stderr


def test_try_refuses_a_script_that_is_no_script(tmp_path):
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    (tmp_path / "adir").mkdir()
    cases = {
        str(fifo): "not a regular file",
        "/dev/zero": "not a regular file",
        str(tmp_path / "adir"): "is a directory",
        str(tmp_path / "missing.py"): "no such script",
    }
    for i, (script, words) in enumerate(cases.items()):
        run_dir = _fake_run(tmp_path / f"case{i}", [sys.executable, script])
        _refused(_scaldiag("try", str(run_dir), "SD101", cwd=tmp_path), words)
    run_dir = _fake_run(tmp_path / "items", [sys.executable, "train.py", 3, None])
    _refused(_scaldiag("try", str(run_dir), "SD101", cwd=tmp_path), "field 'command' ignored")


def test_try_finds_an_old_run_s_script_in_the_run_s_folder_or_refuses(tmp_path):
    there = tmp_path / "there"
    there.mkdir()
    (there / "train.py").write_text("print('the profiled one')\n")
    run_dir = _fake_run(there, [sys.executable, "train.py"])  # no "script": an old run.json
    (tmp_path / "train.py").write_text("print('another folder s')\n")
    done = _scaldiag("try", str(run_dir), "SD101", cwd=tmp_path)
    assert f"try runs {there / 'train.py'}" in done.stderr, done.stderr
    run = json.loads((run_dir / "run.json").read_text())
    del run["cwd"]
    (run_dir / "run.json").write_text(json.dumps(run))
    _refused(_scaldiag("try", str(run_dir), "SD101", cwd=tmp_path), "records no working directory")


def test_try_refuses_bad_numbers_and_outputs_on_its_inputs(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    from scaldiag.collect.script_file import identity

    run_dir = _fake_run(tmp_path, [sys.executable, str(script)], script=identity(str(script)))
    run_json = (run_dir / "run.json").read_bytes()
    for flags, words in (
        (("--budget-s", "nan"), "--budget-s must be a positive number"),
        (("--budget-s", "inf"), "--budget-s must be a positive number"),
        (("--budget-s", "-1"), "--budget-s must be a positive number"),
        (("--budget-s", "0"), "--budget-s must be a positive number"),
        (("--rounds", "0"), "--rounds must be a whole number from 1"),
        (("--rounds", "100000"), "--rounds must be a whole number from 1"),
        (("--max-rounds", "0"), "--max-rounds must be a whole number from 1"),
        (("--json", str(run_dir / "run.json")), "inside the run directory"),
        (("--json", str(run_dir / "try" / "x.json")), "inside the run directory"),
        (("--json", str(script)), "is the script itself"),
        (("--json", ""), "--json needs a file name"),
        (("--json", str(tmp_path / "no" / "x.json")), "no folder"),
    ):
        _refused(_scaldiag("try", str(run_dir), "SD101", *flags, cwd=tmp_path), words)
    assert (run_dir / "run.json").read_bytes() == run_json
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run_dir / "try").symlink_to(elsewhere)
    _refused(_scaldiag("try", str(run_dir), "SD101", cwd=tmp_path), "not a directory of the run")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.slow
def test_try_refuses_before_round_0_a_script_whose_writes_it_cannot_contain(tmp_path):
    """A file written by a subprocess (no Python open in the script's process): profile records
    it, and try says so before its first round, and runs nothing."""
    (tmp_path / "train.py").write_text(
        "import subprocess\nsubprocess.run(['sh', '-c', 'echo made > made_by_sh.txt'])\n"
    )
    done = _scaldiag("profile", "-q", "--out", str(tmp_path / "runs"), "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = list((tmp_path / "runs").iterdir())
    run = json.loads((run_dir / "run.json").read_text())
    assert run["writes"]["uncontained_paths"] == [str(tmp_path / "made_by_sh.txt")]
    (tmp_path / "made_by_sh.txt").write_text("the user's")
    done = _scaldiag("try", str(run_dir), "SD101", cwd=tmp_path)
    _refused(done, f"this script writes {tmp_path / 'made_by_sh.txt'} through code try cannot")
    assert "--allow-uncontained-writes" in done.stderr
    assert (tmp_path / "made_by_sh.txt").read_text() == "the user's"
    assert not (run_dir / "try" / "1").exists()
