"""Every write the script makes outside scaldiag's own directories, seen from inside its process.

An audit hook (``sys.addaudithook``) sees the writes Python code makes: ``open`` for writing
(builtins, ``os.open``, ``io``, ``pathlib``, ``shutil.copyfile``), ``os.rename``/``os.replace``,
``os.remove``, ``os.rmdir``, ``os.mkdir``, ``os.truncate``, ``shutil.rmtree``, ``os.symlink``,
``os.link``, ``os.chmod``, ``os.utime``. Two modes, chosen by the bootstrap from the environment:

- **contain** (``scaldiag try``: ``SCALDIAG_TRY_JOURNAL`` names the round's journal directory):
  before the first write to a path outside ``SCALDIAG_TRY_OWN`` (the try's own directory), the
  path's current state is kept in the journal directory (its bytes, or its inode by a hard link
  where the write replaces or removes it, or "it did not exist"), and the entry is appended to
  ``journal.jsonl`` and fsync'd, all BEFORE the operation runs. Where that fails, the operation
  is refused (an OSError in the script): a round that fails is better than a file lost.
  ``collect/write_restore.py`` puts every entry back after the round.
- **record** (``profile``): the paths written are appended to ``writes.jsonl`` in the run
  directory, nothing kept; ``finish`` sums them up with a before/after snapshot of the working
  directory (writes the hook cannot see: C/C++ writers, subprocesses) into run.json's ``writes``.

Forked processes (DataLoader workers) inherit the hook; a backup is made once whatever the process
(its name is the path's digest, created by a hard link that fails where one exists). Writes made
by code that is not Python (a C++ checkpoint writer, ``numpy.memmap``'s pages, a subprocess) are
not seen: the snapshots find them (write_restore.py). The hook filters on the event's name first
and does nothing else for any other event (the cost of profile's record mode).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import stat
import sys
import threading

from scaldiag.collect.env import (
    RUN_DIR_ENV,
    TRY_JOURNAL_ENV,
    TRY_KEY_ENV,
    TRY_OWN_ENV,
    WRITES_RECORD_ENV,
)

JOURNAL = "journal.jsonl"  # in the round's journal directory, one entry a line
RESTORED = "restored.json"  # written by the parent once every entry is back and verified
WRITES = "writes.jsonl"  # record mode: the paths written, in the run directory
BACKUPS = "backups"  # the journal directory's kept states, named by the path's digest
# Record mode notes this many paths a process, then one last row saying there were more: a script
# that writes a million files (a preprocessing pass, a log a step) must not pay a million appends
# nor hold their names. try's own check needs only to know that the script writes (and the
# snapshots, write_snapshot.py, see the folders whatever the count); contain mode keeps every path.
MAX_NOTED = 10_000

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# What an event does to its path(s): "bytes" (written in place: its bytes kept), "gone" (replaced
# or removed: its inode kept by a hard link), "meta" (mode or times: those kept).
EVENTS = frozenset(
    (
        "open",
        "os.rename",
        "os.remove",
        "os.rmdir",
        "os.mkdir",
        "os.truncate",
        "shutil.rmtree",
        "os.symlink",
        "os.link",
        "os.chmod",
        "os.utime",
    )
)
# Paths that are not files anyone keeps: devices, the kernel's views.
NOT_FILES = ("/dev/", "/proc/", "/sys/")
LEVEL = {"meta": 1, "bytes": 2, "gone": 2}


def targets(event: str, args: tuple) -> list[tuple[str, str]]:
    """(path, what happens to it) for an audit event's arguments: the paths it writes, relative
    ones as given (``absolute`` makes them whole), none for an fd or a ``dir_fd`` path (rmtree's
    own removals, seen as the ``shutil.rmtree`` before them)."""
    if event == "open":
        path, _mode, flags = args
        if isinstance(flags, int) and flags & WRITE_FLAGS:
            return [(path, "bytes")]
        return []
    if event == "os.rename":
        src, dst, src_fd, dst_fd = args
        return (
            []
            if src_fd not in (-1, None) or dst_fd not in (-1, None)
            else [
                (src, "gone"),
                (dst, "gone"),
            ]
        )
    if event in ("os.remove", "os.rmdir"):
        path, dir_fd = args
        return [(path, "gone")] if dir_fd in (-1, None) else []
    if event == "shutil.rmtree":
        path, dir_fd = args
        return [(path, "tree")] if dir_fd in (-1, None) else []
    if event == "os.mkdir":
        path, _mode, dir_fd = args
        return [(path, "gone")] if dir_fd in (-1, None) else []
    if event == "os.truncate":
        return [(args[0], "bytes")]
    if event in ("os.symlink", "os.link"):
        dir_fd = args[2]
        return [(args[1], "gone")] if dir_fd in (-1, None) else []
    if event in ("os.chmod", "os.utime"):
        dir_fd = args[-1]
        return [(args[0], "meta")] if dir_fd in (-1, None) else []
    return []


def absolute(path, follow: bool) -> str | None:
    """The path made whole from the process's cwd; its last part resolved where the write goes
    through a symbolic link (``open``) and kept where the link itself is replaced (``rename``)."""
    if isinstance(path, int) or path is None:
        return None
    try:
        path = os.fsdecode(path)
    except (TypeError, ValueError):
        return None
    whole = os.path.abspath(path)
    if follow:
        return os.path.realpath(whole)
    head, tail = os.path.split(whole)
    return os.path.join(os.path.realpath(head), tail) if tail else os.path.realpath(whole)


def inside(path: str, dirs: tuple[str, ...]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def signed(entry: dict, key: bytes) -> dict:
    """The entry with its ``mac``: the restore applies only entries signed with this machine's key
    (a run directory anyone could have written must not direct what is removed or replaced)."""
    body = json.dumps(entry, sort_keys=True).encode("utf-8", "surrogateescape")
    return {**entry, "mac": hmac.new(key, body, hashlib.sha256).hexdigest()}


def verified(entry: dict, key: bytes) -> bool:
    mac = entry.get("mac")
    if not isinstance(mac, str):
        return False
    return hmac.compare_digest(
        signed({k: v for k, v in entry.items() if k != "mac"}, key)["mac"], mac
    )


def backup_name(path: str) -> str:
    return hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:40]


class Journal:
    """The hook's state in one process: the paths already kept, the journal's file."""

    def __init__(
        self,
        journal_dir: str | None,
        own: tuple[str, ...],
        record: str | None = None,
        key: bytes = b"",
    ):
        self.journal_dir = journal_dir  # contain mode
        self.key = key
        self.record = record  # record mode: the writes.jsonl path
        self.own = tuple(os.path.realpath(d) for d in own if d)
        self.kept: dict[str, int] = {}  # path -> the level kept (LEVEL)
        self.local = threading.local()
        self.lock = threading.Lock()
        self.fd: int | None = None
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self.lock = threading.Lock()  # a lock held by another thread at fork is never released

    def hook(self, event: str, args: tuple) -> None:
        if event not in EVENTS:  # every other event costs this one test
            return
        if getattr(self.local, "busy", False):  # the hook's own file operations
            return
        self.local.busy = True
        try:
            for path, what in targets(event, args):
                self._one(path, what, follow=(event in ("open", "os.truncate", "os.chmod")))
        finally:
            self.local.busy = False

    def _one(self, raw, what: str, follow: bool) -> None:
        try:
            path = absolute(raw, follow)
        except OSError:
            path = None
        if path is None or inside(path, self.own) or path.startswith(NOT_FILES):
            return
        if self.kept.get(path, 0) >= LEVEL.get(what, 2):
            return
        with self.lock:
            if self.kept.get(path, 0) >= LEVEL.get(what, 2):
                return
            if self.journal_dir is None:
                if len(self.kept) > MAX_NOTED:  # the "more" row is written: nothing held beyond
                    return
                self._note(path, what)
            else:
                self._keep(path, what)
            self.kept[path] = LEVEL.get(what, 2)

    def _note(self, path: str, what: str) -> None:
        """Record mode: the path, once a process, the first MAX_NOTED paths; never raises into the
        script."""
        try:
            row = {"path": path, "what": what} if len(self.kept) < MAX_NOTED else {"more": True}
            line = json.dumps(row) + "\n"
            fd = os.open(self.record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode("utf-8", "surrogateescape"))
            finally:
                os.close(fd)
        except Exception:
            pass

    def _keep(self, path: str, what: str) -> None:
        """Contain mode: the path's state kept and journaled, durably, before the write runs."""
        try:
            entries = keep(path, what, os.path.join(self.journal_dir, BACKUPS))
            self._append(entries)
        except OSError as exc:
            raise PermissionError(
                f"scaldiag try could not keep {path} before this write ({exc}); the write is"
                " refused so that your file stays as it was"
            ) from None

    def _append(self, entries: list[dict]) -> None:
        if self.fd is None:
            self.fd = os.open(
                os.path.join(self.journal_dir, JOURNAL), os.O_WRONLY | os.O_APPEND | os.O_CREAT
            )
        data = "".join(json.dumps(signed(e, self.key), sort_keys=True) + "\n" for e in entries)
        os.write(self.fd, data.encode("utf-8", "surrogateescape"))
        os.fsync(self.fd)


def keep(path: str, what: str, backups: str) -> list[dict]:
    """The path's state before a write (``what``: bytes, gone, meta, tree), the files it needs kept
    under ``backups``; the journal entries to append (a tree: one for each file and directory)."""
    os.makedirs(backups, exist_ok=True)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return [{"path": path, "existed": False}]
    entry = {
        "path": path,
        "existed": True,
        "mode": stat.S_IMODE(st.st_mode),
        "mtime_ns": st.st_mtime_ns,
        "atime_ns": st.st_atime_ns,
        "size_bytes": st.st_size,
        "ino": st.st_ino,
    }
    if stat.S_ISLNK(st.st_mode):
        return [{**entry, "kind": "symlink", "target": os.readlink(path)}]
    if stat.S_ISDIR(st.st_mode):
        if what != "tree":
            return [{**entry, "kind": "dir"}]
        return [{**entry, "kind": "dir"}, *_keep_tree(path, backups)]
    if not stat.S_ISREG(st.st_mode):
        return []  # a socket, a FIFO, a device: no bytes to keep, nothing to put back
    entry["kind"] = "file"
    name = os.path.join(backups, backup_name(path))
    if os.path.lexists(name):  # kept before (this process or another): that state is the older
        return []
    if what == "meta":
        return [{**entry, "how": "meta"}]
    if what != "bytes":
        linked = _link(path, name)
        if linked is None:
            return []
        if linked:
            return [{**entry, "how": "link", "backup": os.path.basename(name)}]
    if not _copy(path, name):
        return []
    return [{**entry, "how": "copy", "backup": os.path.basename(name)}]


def _link(path: str, name: str) -> bool | None:
    """The file's inode kept under ``name`` (a hard link): True; False where links cannot be made
    (another file system); None where another process of the round linked it first."""
    try:
        os.link(path, name, follow_symlinks=False)
        return True
    except FileExistsError:
        return None
    except OSError:
        return False


def _copy(path: str, name: str) -> bool:
    """The file's bytes kept under ``name``, durably; False where another process kept it first."""
    tmp = f"{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    shutil.copy2(path, tmp, follow_symlinks=False)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    try:
        os.link(tmp, name)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def _keep_tree(top: str, backups: str) -> list[dict]:
    """Every file and directory under ``top`` (before ``shutil.rmtree``), files by their inode."""
    entries = []
    for root, dirs, files in os.walk(top):
        for d in dirs:
            entries += keep(os.path.join(root, d), "gone", backups)
        for f in files:
            entries += keep(os.path.join(root, f), "gone", backups)
    return entries


_installed: Journal | None = None


def install_from_env() -> Journal | None:
    """The bootstrap's call: contain under ``try``, record under ``profile`` (unless
    ``SCALDIAG_RECORD_WRITES=0``), nothing without a run directory."""
    global _installed
    run_dir = os.environ.get(RUN_DIR_ENV)
    journal_dir = os.environ.get(TRY_JOURNAL_ENV)
    if journal_dir:
        own = (os.environ.get(TRY_OWN_ENV) or journal_dir, run_dir or journal_dir)
        try:
            key = bytes.fromhex(os.environ.get(TRY_KEY_ENV) or "")
        except ValueError:
            key = b""
        _installed = Journal(journal_dir, own, key=key)
    elif run_dir and os.environ.get(WRITES_RECORD_ENV) != "0":
        _installed = Journal(None, (run_dir,), record=os.path.join(run_dir, WRITES))
    else:
        return None
    sys.addaudithook(_installed.hook)
    return _installed


def note_write(path) -> None:
    """A write native code is about to make (collect/frameworks/native_writes.py): kept or noted as
    a Python ``open`` for writing would be. Under try, a path that cannot be kept raises."""
    journal = _installed
    if journal is None or getattr(journal.local, "busy", False):
        return
    journal.local.busy = True
    try:
        journal._one(path, "bytes", follow=True)
    finally:
        journal.local.busy = False


def written_paths(record: str) -> dict[str, str]:
    """Record mode's file read back: path -> what was done (first seen)."""
    out: dict[str, str] = {}
    try:
        with open(record, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                try:
                    row = json.loads(line)
                    out.setdefault(str(row["path"]), str(row["what"]))
                except (ValueError, KeyError, TypeError):
                    continue
    except OSError:
        pass
    return out
