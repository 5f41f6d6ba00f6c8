"""The write journal (collect/write_journal.py) in a real child process, and its restore
(collect/write_restore.py): every path the child wrote is put back byte for byte, mode and inode,
whatever the child did to it and however it ended."""

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

from scaldiag.collect import write_restore, write_snapshot
from scaldiag.collect.env import RUN_DIR_ENV, TRY_JOURNAL_ENV, TRY_KEY_ENV, TRY_OWN_ENV
from scaldiag.collect.write_journal import JOURNAL, RESTORED, absolute, signed, targets

ROOT = Path(__file__).resolve().parents[1]
KEY = os.urandom(32)  # the key try gives each round's child: its entries are signed with it

CHILD = r"""
import os, shutil, sys, multiprocessing
from scaldiag.collect import write_journal
assert write_journal.install_from_env() is not None
user, other = sys.argv[1], sys.argv[2]
os.chdir(user)
open("model.pt", "wb").write(b"new weights")            # in place, in the cwd
with open("train.log", "a") as f:                         # appended
    f.write("another line\n")
open(os.path.join(other, "out.txt"), "w").write("x")     # an absolute path elsewhere
open("ckpt.tmp", "wb").write(b"new ckpt")                 # atomic save
os.replace("ckpt.tmp", "ckpt.pt")
os.rename("keep.txt", "moved.txt")                        # a user's file moved away
os.makedirs("runs/exp1")                                  # new directories
open("runs/exp1/m.txt", "w").write("1")
shutil.rmtree("olddir")                                   # a user's tree removed
os.remove("gone.txt")
os.chmod("script.py", 0o700)
os.symlink("model.pt", "latest")
os.truncate("big.bin", 3)
ctx = multiprocessing.get_context("fork")
p = ctx.Process(target=lambda: open("model.pt", "ab").write(b"+worker"))  # a forked worker
p.start(); p.join()
open(os.environ["READY"], "w").write("1")
if os.environ.get("HANG"):
    import time
    while True:
        time.sleep(0.1)
"""


def _user_tree(base: Path) -> tuple[Path, Path]:
    user, other = base / "user", base / "other"
    (user / "olddir" / "sub").mkdir(parents=True)
    other.mkdir()
    (user / "model.pt").write_bytes(b"the user's weights")
    (user / "train.log").write_text("first line\n")
    (user / "ckpt.pt").write_bytes(b"old ckpt")
    (user / "keep.txt").write_text("keep me")
    (user / "gone.txt").write_text("do not lose me")
    (user / "script.py").write_text("print(1)")
    (user / "big.bin").write_bytes(os.urandom(4096))
    (user / "olddir" / "a.txt").write_text("a")
    (user / "olddir" / "sub" / "b.txt").write_text("b")
    (other / "out.txt").write_text("the user's other file")
    return user, other


def _state(*dirs: Path) -> dict:
    out = {}
    for d in dirs:
        for p in sorted([d, *d.rglob("*")]):
            st = p.lstat()
            body = (
                os.readlink(p)
                if p.is_symlink()
                else hashlib.sha256(p.read_bytes()).hexdigest()
                if p.is_file()
                else "dir"
            )
            out[str(p)] = (body, st.st_mode, st.st_mtime_ns if p.is_file() else 0)
    return out


def _run_child(tmp_path: Path, user: Path, other: Path, hang: bool = False):
    own = tmp_path / "own"
    journal = own / "j"
    journal.mkdir(parents=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        TRY_JOURNAL_ENV: str(journal),
        TRY_OWN_ENV: str(own),
        TRY_KEY_ENV: KEY.hex(),
        RUN_DIR_ENV: str(own / "run"),
        "READY": str(own / "ready"),
        "HANG": "1" if hang else "",
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(user), str(other)], env=env, stderr=subprocess.PIPE
    )
    return proc, journal


def test_every_write_of_a_child_is_put_back(tmp_path):
    user, other = _user_tree(tmp_path)
    before = _state(user, other)
    proc, journal = _run_child(tmp_path, user, other)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    assert (user / "model.pt").read_bytes() == b"new weights+worker"  # it did write
    assert not (user / "olddir").exists() and (user / "moved.txt").exists()
    inode = (user / "ckpt.pt").stat().st_ino
    assert write_restore.restore(journal, KEY) == []
    assert _state(user, other) == before
    assert (user / "ckpt.pt").stat().st_ino != inode  # the user's own file, not a copy of it
    assert (journal / RESTORED).exists() and not (journal / "backups").exists()
    assert write_restore.unfinished(tmp_path / "nothing") == []


def test_a_restore_ended_as_it_deletes_its_copies_is_not_applied_again(tmp_path, monkeypatch):
    """try killed once every path is back and checked, as it deletes the copies: the journal is
    marked restored first, so the next try deletes what copies are left and applies nothing (it
    used to apply the entries again, find their copies gone, and call the round not put back)."""
    user, other = _user_tree(tmp_path)
    before = _state(user, other)
    proc, journal = _run_child(tmp_path, user, other)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()

    def killed_here(path, ignore_errors=False):
        raise SystemExit("killed while the copies were deleted")

    monkeypatch.setattr(write_restore.shutil, "rmtree", killed_here)
    with pytest.raises(SystemExit):
        write_restore.restore(journal, KEY)
    monkeypatch.undo()
    assert (journal / RESTORED).exists() and (journal / "backups").exists()
    assert write_restore.restore(journal, KEY) == []
    assert not (journal / "backups").exists()
    assert _state(user, other) == before


def test_a_folder_the_round_made_keeps_what_another_program_wrote_there(tmp_path):
    """The round made runs/exp1 and its m.txt; meanwhile another program saved a file in it. The
    restore removes the round's file and keeps that one, and its folders, and says so."""
    user, other = _user_tree(tmp_path)
    before = _state(user, other)
    proc, journal = _run_child(tmp_path, user, other)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    theirs = user / "runs" / "exp1" / "theirs.txt"
    theirs.write_text("another program's")
    problems = write_restore.restore(journal, KEY)
    assert theirs.read_text() == "another program's"
    assert not (user / "runs" / "exp1" / "m.txt").exists()
    assert sorted(p.split(" ", 1)[0] for p in problems) == [
        str(user / "runs"),
        str(user / "runs" / "exp1"),
    ]
    assert all("a folder the round created, kept" in p for p in problems)
    theirs.unlink()
    (user / "runs" / "exp1").rmdir()
    (user / "runs").rmdir()
    assert _state(user, other) == before


def test_a_child_killed_mid_round_is_put_back_from_its_journal(tmp_path):
    user, other = _user_tree(tmp_path)
    before = _state(user, other)
    proc, journal = _run_child(tmp_path, user, other, hang=True)
    ready = tmp_path / "own" / "ready"
    while not ready.exists():  # the child wrote it: every write before it is journaled
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert write_restore.read_entries(journal, KEY)
    assert write_restore.restore(journal, KEY) == []
    assert _state(user, other) == before
    assert write_restore.restore(journal, KEY) == []  # again: nothing left to do, nothing broken


def test_an_unfinished_journal_is_found_and_a_torn_line_skipped(tmp_path):
    journal = tmp_path / "try" / "1" / f"0-baseline{write_restore.JOURNAL_SUFFIX}"
    journal.mkdir(parents=True)
    created = tmp_path / "created.txt"
    created.write_text("made by the round")
    line = json.dumps(signed({"path": str(created), "existed": False}, KEY))
    (journal / JOURNAL).write_text(line + "\n" + '{"path": "/x", "exis')  # killed mid-line
    assert write_restore.unfinished(tmp_path / "try") == [journal]
    assert write_restore.restore(journal, KEY) == []
    assert not created.exists()
    assert write_restore.unfinished(tmp_path / "try") == []


def test_a_path_that_cannot_be_put_back_is_named_and_its_copy_kept(tmp_path):
    journal = tmp_path / "j"
    (journal / "backups").mkdir(parents=True)
    entry = {"path": str(tmp_path / "f"), "existed": True, "kind": "file", "how": "copy",
             "backup": "missing", "mode": 0o644, "size_bytes": 1, "ino": 1,
             "mtime_ns": 0, "atime_ns": 0}  # fmt: skip
    (journal / JOURNAL).write_text(json.dumps(signed(entry, KEY)) + "\n")
    problems = write_restore.restore(journal, KEY)
    assert len(problems) >= 1 and str(tmp_path / "f") in problems[0]
    assert not (journal / RESTORED).exists()


def test_which_events_write_and_where():
    assert targets("open", ("a", "r", os.O_RDONLY)) == []
    assert targets("open", ("a", "w", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)) == [("a", "bytes")]
    assert targets("open", ("a", None, os.O_RDWR)) == [("a", "bytes")]
    assert targets("os.rename", ("s", "d", -1, -1)) == [("s", "gone"), ("d", "gone")]
    assert targets("os.remove", ("x", 3)) == []  # rmtree's own, relative to a dir fd
    assert targets("shutil.rmtree", ("t", None)) == [("t", "tree")]
    assert targets("os.truncate", (5, 0)) == [(5, "bytes")]
    assert absolute(5, True) is None  # a file descriptor: its open was seen
    assert targets("import", ("x",)) == []


def test_a_look_at_the_folders_finds_a_write_no_hook_saw(tmp_path):
    (tmp_path / "a.txt").write_text("1")
    before, capped = write_snapshot.snapshot([str(tmp_path)], ())
    assert not capped
    subprocess.run(["sh", "-c", "echo 2 > a.txt; mkdir d; echo 3 > d/b.txt"], cwd=tmp_path)
    after, _ = write_snapshot.snapshot([str(tmp_path)], ())
    changed = write_snapshot.changed(before, after)
    assert changed == [str(tmp_path / p) for p in ("a.txt", "d", "d/b.txt")]
    # a journaled folder covers what is in it; a file alone is not covered by its neighbour
    assert write_snapshot.uncovered(changed, {str(tmp_path / "d")}) == [str(tmp_path / "a.txt")]
    _, capped = write_snapshot.snapshot([str(tmp_path)], (), max_entries=1)
    assert capped


def test_a_journal_this_machine_s_try_did_not_write_is_never_applied(tmp_path):
    """A run directory anyone could have written: its 'unfinished journal' must not remove or
    replace the user's files."""
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's")
    journal = tmp_path / "try" / "1" / f"0-baseline{write_restore.JOURNAL_SUFFIX}"
    (journal / "backups").mkdir(parents=True)
    (journal / "backups" / "ab").write_text("an attacker's")
    crafted = [
        {"path": str(precious), "existed": False},  # "remove it"
        {"path": str(precious), "existed": True, "kind": "file", "how": "link", "backup": "ab"},
        signed({"path": str(precious), "existed": False}, os.urandom(32)),  # another key
    ]
    (journal / JOURNAL).write_text("".join(json.dumps(e) + "\n" for e in crafted))
    problems = write_restore.restore(journal, KEY)
    assert problems and "not written by this machine's try" in problems[0]
    assert precious.read_text() == "the user's"
    assert write_restore.read_entries(journal, KEY) == []


H5_CHILD = r"""
import os, sys
from scaldiag.collect import write_journal
from scaldiag.collect.bootstrap import _PatchAfterImport
from scaldiag.collect.frameworks import native_writes
write_journal.install_from_env()
sys.meta_path.insert(0, _PatchAfterImport(native_writes.import_patches()))  # as the bootstrap does
import h5py, torch
with h5py.File(sys.argv[1], "w") as f:      # HDF5 opens the path in C
    f["w"] = [1.0, 2.0]
torch.save({"w": 1}, sys.argv[2])           # PyTorch's zip writer opens it in C++
"""


def test_native_writers_are_named_to_the_journal_and_put_back(tmp_path):
    import pytest

    pytest.importorskip("h5py")
    user = tmp_path / "user"
    user.mkdir()
    weights, model = user / "weights.h5", user / "model.pt"
    weights.write_bytes(b"the user's h5")
    model.write_bytes(b"the user's model")
    before = _state(user)
    own = tmp_path / "own"
    journal = own / "j"
    journal.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), TRY_JOURNAL_ENV: str(journal),
           TRY_OWN_ENV: str(own), TRY_KEY_ENV: KEY.hex()}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", H5_CHILD, str(weights), str(model)], env=env, capture_output=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert weights.read_bytes() != b"the user's h5" and model.read_bytes() != b"the user's model"
    assert {e["path"] for e in write_restore.read_entries(journal, KEY)} == {
        str(weights),
        str(model),
    }
    assert write_restore.restore(journal, KEY) == []
    assert _state(user) == before


def test_profile_s_record_notes_a_bounded_number_of_paths(tmp_path, monkeypatch):
    """A script that writes many files (a preprocessing pass) costs the record MAX_NOTED rows and
    one row saying there were more, not a row and a held name a file."""
    from scaldiag.collect import write_journal

    monkeypatch.setattr(write_journal, "MAX_NOTED", 5)
    record = tmp_path / "run" / write_journal.WRITES
    record.parent.mkdir()
    journal = write_journal.Journal(None, (str(record.parent),), record=str(record))
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    paths = [str(tmp_path / f"out{i}.bin") for i in range(40)]
    for path in paths:
        journal.hook("open", (path, "w", flags))
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    assert [r["path"] for r in rows if "path" in r] == paths[:5]
    assert rows[-1] == {"more": True} and len(rows) == 6
    assert len(journal.kept) == 6  # nothing held past the row that says there were more
    assert list(write_journal.written_paths(str(record))) == paths[:5]
