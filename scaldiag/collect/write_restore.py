"""Put back every path a ``try`` round's journal kept (collect/write_journal.py), and check it.

Run by the parent (``scaldiag try``) after each round however the round ended (an exit, a crash,
a signal, a kill at the budget), and before a new try where an earlier one died mid-round (a
journal without ``restored.json``). The entries are applied newest first, so that the oldest
state of each path, the one before the round, is the one left; then each path is checked against
that oldest state (bytes or inode, mode; gone where it did not exist). Only once every path checks
are the kept copies deleted and the journal marked restored; a path that does not check is named,
and its copy stays where it is.
"""

from __future__ import annotations

import errno
import filecmp
import json
import os
import shutil
import stat
from pathlib import Path

from scaldiag.collect.write_journal import BACKUPS, JOURNAL, RESTORED, verified

JOURNAL_SUFFIX = ".journal"  # a round's journal directory: RUN_DIR/try/<n>/<round>.journal


KEY_FILE = "try.key"  # under $XDG_CACHE_HOME/scaldiag: the key journal entries are signed with


def journal_key(env=os.environ) -> bytes:
    """This machine's (user's) key for signing journal entries, made once (0600); a fresh one for
    this process where it cannot be kept (then an unfinished journal of this try cannot be put
    back by a later one, and the later one says so)."""
    cache = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or "~", ".cache")
    path = Path(os.path.expanduser(cache)) / "scaldiag" / KEY_FILE
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        pass
    key = os.urandom(32)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key.hex())
    except FileExistsError:
        return journal_key(env)  # another try made it first
    except OSError:
        pass
    return key


def _well_formed(entry) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        return False
    if not os.path.isabs(entry["path"]) or not isinstance(entry.get("existed"), bool):
        return False
    backup = entry.get("backup")
    return backup is None or (isinstance(backup, str) and backup.isalnum() and len(backup) <= 64)


def read_entries(journal_dir: Path, key: bytes | None = None) -> list[dict]:
    """The journal's entries in the order written, each signed with ``key`` where one is given;
    a line torn by a kill is skipped, and so is any entry this machine's try did not write."""
    return _entries(journal_dir, key)[0]


def foreign_entries(journal_dir: Path, key: bytes | None) -> int:
    """How many of the journal's lines this machine's try did not write."""
    return _entries(journal_dir, key)[1]


def _entries(journal_dir: Path, key: bytes | None) -> tuple[list[dict], int]:
    """(the entries to apply, how many lines were not this machine's try's)."""
    out, foreign = [], 0
    try:
        text = (Path(journal_dir) / JOURNAL).read_text(encoding="utf-8", errors="surrogateescape")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return [], 0
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not _well_formed(entry) or (key is not None and not verified(entry, key)):
            foreign += 1
            continue
        out.append(entry)
    return out, foreign


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _remove_created(path: str) -> None:
    """A path the round created, removed; a folder only where it is empty: the round's own files
    in it have entries of their own, put back before it (newest first), and what else is there
    (another program's, written meanwhile) is not the round's to remove."""
    if os.path.isdir(path) and not os.path.islink(path):
        try:
            os.rmdir(path)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        return
    if os.path.lexists(path):
        os.unlink(path)


def _put_back(entry: dict, backups: Path) -> None:
    """One entry's state back at its path."""
    path = entry["path"]
    if not entry.get("existed"):
        _remove_created(path)
        return
    kind = entry.get("kind")
    if kind == "dir":
        if not (os.path.isdir(path) and not os.path.islink(path)):
            if os.path.lexists(path):
                os.unlink(path)
            os.makedirs(path, exist_ok=True)
        os.chmod(path, entry["mode"])
    elif kind == "symlink":
        if os.path.islink(path) and os.readlink(path) == entry["target"]:
            return
        _remove(path)
        os.symlink(entry["target"], path)
    elif kind == "file":
        _put_back_file(entry, backups, path)


def _put_back_file(entry: dict, backups: Path, path: str) -> None:
    how = entry.get("how")
    kept = backups / str(entry.get("backup"))
    if how == "link":
        if kept.exists():
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.replace(kept, path)  # the same inode as before the round
        return
    if how == "copy":
        if os.path.islink(path) or (os.path.isdir(path)):
            _remove(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(kept, "rb") as src, open(path, "wb") as dst:  # in place: the inode kept
            shutil.copyfileobj(src, dst, 1 << 20)
    if os.path.exists(path):
        os.chmod(path, entry["mode"])
        os.utime(path, ns=(entry["atime_ns"], entry["mtime_ns"]))


def check(entry: dict, backups: Path) -> str | None:
    """Whether the path is as the entry (its oldest) says; None, or what differs."""
    path = entry["path"]
    if not entry.get("existed"):
        if not os.path.lexists(path):
            return None
        if os.path.isdir(path) and not os.path.islink(path):
            return (
                "is a folder the round created, kept: it holds files no entry of the round's"
                " made (another program's, or written where try cannot see)"
            )
        return "was created by the round and is still there"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "is missing"
    kind = entry.get("kind")
    if kind == "dir":
        ok = stat.S_ISDIR(st.st_mode)
        return None if ok else "is no longer a directory"
    if kind == "symlink":
        ok = stat.S_ISLNK(st.st_mode) and os.readlink(path) == entry.get("target")
        return None if ok else "is no longer the same symbolic link"
    if kind != "file":
        return None
    if stat.S_IMODE(st.st_mode) != entry.get("mode"):
        return f"has mode {stat.S_IMODE(st.st_mode):o}, not {entry.get('mode'):o}"
    if entry.get("how") == "copy":
        kept = backups / str(entry.get("backup"))
        same = kept.exists() and filecmp.cmp(kept, path, shallow=False)
        return None if same else "does not hold the bytes it held before the round"
    if entry.get("how") == "link":
        ok = st.st_ino == entry.get("ino") and st.st_size == entry.get("size_bytes")
        return None if ok else "is not the file it was before the round"
    ok = st.st_size == entry.get("size_bytes") and st.st_mtime_ns == entry.get("mtime_ns")
    return None if ok else "changed size or time"


def restore(journal_dir: Path, key: bytes | None) -> list[str]:
    """Every journaled path put back and checked; the problems, one line each (empty: all back,
    the copies deleted, the journal marked restored). Only entries signed with ``key`` are applied
    (None: every well-formed one, for tests of the mechanism alone); the others are a problem."""
    journal_dir = Path(journal_dir)
    if (journal_dir / RESTORED).exists():  # put back before: at most its copies are left
        shutil.rmtree(journal_dir / BACKUPS, ignore_errors=True)
        return []
    entries, foreign = _entries(journal_dir, key)
    backups = journal_dir / BACKUPS
    problems = []
    if foreign:
        problems.append(
            f"{foreign} entries of {journal_dir / JOURNAL} were not written by this machine's"
            " try (not signed with its key): not applied"
        )
    for entry in reversed(entries):
        try:
            _put_back(entry, backups)
        except OSError as exc:
            problems.append(f"{entry['path']}: cannot be put back ({exc.strerror or exc})")
    oldest: dict[str, dict] = {}
    for entry in entries:
        oldest.setdefault(entry["path"], entry)
    for path, entry in oldest.items():
        try:
            wrong = check(entry, backups)
        except OSError as exc:
            wrong = f"cannot be read ({exc.strerror or exc})"
        if wrong:
            problems.append(f"{path} {wrong} (its copy is kept in {backups})")
    if not problems:
        # Marked before the copies go: a try killed between the two leaves copies to delete, not
        # a journal the next try would apply again without them ("cannot be put back").
        (journal_dir / RESTORED).write_text(json.dumps({"paths": len(oldest)}))
        shutil.rmtree(backups, ignore_errors=True)
    return problems


def unfinished(try_root: Path) -> list[Path]:
    """Journal directories under ``RUN_DIR/try`` that were never restored (a try that died)."""
    root = Path(try_root)
    if not root.is_dir() or root.is_symlink():
        return []
    found = [
        d
        for d in root.glob(f"*/*{JOURNAL_SUFFIX}")
        if d.is_dir() and not d.is_symlink() and not (d / RESTORED).exists()
    ]
    return sorted(found)


def journaled_paths(journal_dir: Path, key: bytes | None = None) -> dict[str, bool]:
    """path -> whether it existed before the round (its oldest entry)."""
    out: dict[str, bool] = {}
    for entry in read_entries(journal_dir, key):
        out.setdefault(entry["path"], bool(entry.get("existed")))
    return out
