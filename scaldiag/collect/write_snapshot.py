"""Writes the audit hook cannot see, found by a before/after look at the folders the script writes.

A C or C++ writer (h5py, TensorFlow's own checkpoint code, ``numpy.memmap``'s pages, a subprocess
the script starts) changes files without a Python ``open``. A snapshot (size, mtime_ns, inode of
every file; directories by their presence) of the script's working directory, its own directory
and the folders of every path the profiled run wrote, taken before and after, finds them: a change
that no journal entry covers is *uncontained*. The look is bounded (``MAX_ENTRIES`` files and
directories, breadth first, so the folders' own files come before deep trees), skips what is no
user's output (a virtual environment, ``.git``, byte-code caches) and scaldiag's own directories.

``profile`` records what it found (run.json ``writes``: the paths Python wrote, and those it could
not see) so that ``try`` can say before its first round that a script writes through code it
cannot contain.
"""

from __future__ import annotations

import os
import stat

from scaldiag.collect.env import RUN_DIR_ENV, RUN_ROOT_ENV, TRY_JOURNAL_ENV, WRITES_RECORD_ENV

MAX_ENTRIES = 20_000  # ~50 ms to list on the development VM; a home directory would take minutes
SKIP_DIRS = frozenset(
    (".git", ".hg", ".venv", "venv", "node_modules", "site-packages", "__pycache__")
)
MAX_LISTED = 200  # paths named in run.json's ``writes`` (the counts are whole)


def snapshot(
    roots: list[str],
    exclude: tuple[str, ...],
    max_entries: int = MAX_ENTRIES,
    shallow: tuple[str, ...] = (),
):
    """({path: (kind, size, mtime_ns, ino)}, capped): files by their size, time and inode,
    directories by their presence, under each root, breadth first, within ``max_entries``; the
    ``shallow`` folders by their own entries only."""
    seen: dict[str, tuple] = {}
    queue = [(os.path.realpath(r), True) for r in roots if r]
    queue += [(os.path.realpath(r), False) for r in shallow if r]
    done: set[str] = set()
    excluded = tuple(os.path.realpath(e) for e in exclude if e)
    while queue:
        top, deep = queue.pop(0)
        if top in done or _under(top, excluded):
            continue
        done.add(top)
        try:
            it = list(os.scandir(top))
        except OSError:
            continue
        for e in it:
            if len(seen) >= max_entries:
                return seen, True
            if _under(e.path, excluded):
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                seen[e.path] = ("d", 0, 0, 0)
                if deep and not _skipped(e.name):
                    queue.append((e.path, True))
            else:
                kind = "f" if stat.S_ISREG(st.st_mode) else "o"
                seen[e.path] = (kind, st.st_size, st.st_mtime_ns, st.st_ino)
    return seen, False


def _skipped(name: str) -> bool:
    """A folder no script's output is in: a virtual environment, a tool's hidden state or cache
    (other programs write there while the script runs: an editor, a test runner, a linter)."""
    return name in SKIP_DIRS or name.startswith(".") or name.endswith("_cache")


def _under(path: str, dirs: tuple[str, ...]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def changed(before: dict, after: dict) -> list[str]:
    """Paths created, removed or changed between two snapshots (a directory's own time is not
    compared: a file written in it changes it)."""
    paths = set(before) | set(after)
    return sorted(p for p in paths if before.get(p) != after.get(p))


def uncovered(paths: list[str], journaled: set[str]) -> list[str]:
    """The changes no journal entry covers: the path itself, or a folder above it that the round
    created or removed as a whole (the journal puts those back with what is in them)."""
    out = []
    for p in paths:
        q = p
        while q not in journaled:
            parent = os.path.dirname(q)
            if parent == q:
                out.append(p)
                break
            q = parent
    return out


def scratch_dirs() -> tuple[str, ...]:
    """Folders every process writes scratch into: the script's writes there are journaled, but a
    look at them would see every other process's files too."""
    import tempfile

    return tuple(
        os.path.realpath(d) for d in {tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"}
    )


def roots_for(cwd: str, script: str, written: list[str]) -> tuple[list[str], tuple[str, ...]]:
    """The folders to look at: the working directory, whole; the folder of each path the profiled
    run wrote, its own entries only (not a scratch folder). Not the script's own folder: a
    project's sources change while it runs (an editor, another test run), and a script's native
    writes go where its paths are relative to, the working directory."""
    roots = [cwd]
    scratch = scratch_dirs()
    shallow: list[str] = []
    for p in written:
        d = os.path.dirname(p)
        if d not in roots and d not in shallow and not _under(os.path.realpath(d), scratch):
            shallow.append(d)
    return roots, tuple(shallow)


class ProfileWatch:
    """Profile's record of the script's writes: a snapshot now, the summary at the end."""

    def __init__(self, run_dir: str, script: str):
        self.run_dir = run_dir
        self.roots, self.shallow = roots_for(os.getcwd(), script, [])
        self.exclude = (run_dir, os.environ.get(RUN_ROOT_ENV) or run_dir)
        self.before, self.capped = snapshot(self.roots, self.exclude, shallow=self.shallow)

    def summary(self) -> dict:
        from scaldiag.collect.write_journal import WRITES, written_paths

        after, capped = snapshot(self.roots, self.exclude, shallow=self.shallow)
        python = written_paths(os.path.join(self.run_dir, WRITES))
        unseen = uncovered(changed(self.before, after), set(python))
        return {
            "python_paths": sorted(python)[:MAX_LISTED],
            "python_count": len(python),
            "uncontained_paths": unseen[:MAX_LISTED],
            "uncontained_count": len(unseen),
            "snapshot_roots": self.roots + list(self.shallow),
            "snapshot_capped": self.capped or capped,
        }


def start(script: str) -> ProfileWatch | None:
    """The bootstrap's call under ``profile`` (not under ``try``, whose parent looks itself)."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir or os.environ.get(TRY_JOURNAL_ENV) or os.environ.get(WRITES_RECORD_ENV) == "0":
        return None
    try:
        return ProfileWatch(run_dir, script)
    except Exception:  # a gap in the record, never a reason to stop the script
        return None


def finish(watch: ProfileWatch | None) -> None:
    """run.json's ``writes``, once the script has ended; never raises."""
    if watch is None:
        return
    try:
        from scaldiag.record import run_json

        run_json.update(watch.run_dir, writes=watch.summary())
    except Exception:
        pass
