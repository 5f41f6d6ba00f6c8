"""``scaldiag try``'s rounds: each one the run's own script, contained, stoppable, put back.

A side of a round (baseline or fixed) is one ``launch`` of the script as it was profiled: its
absolute path, in the run's working directory, with the capture of ``profile`` and the write
journal (collect/write_journal.py) that keeps every path before the script's first write to it.
After the side, however it ended, every journaled path is put back and checked
(collect/write_restore.py), and a before/after look at the script's folders
(collect/write_snapshot.py) finds the writes no journal covers.

Stopping: Ctrl-C, SIGTERM and SIGHUP end the side in progress (the launcher forwards them to the
script, and tells the stopper) and the try; where one reaches try outside the launcher's wait, the
watchdog stops the script. The budget is a hard wall: at its end the script gets SIGTERM. Either
way a script still running ``GRACE_S`` later (it ignores or catches the signal) gets SIGKILL, and
what the round left running once its script ended (a forked child) is SIGKILLed before the
restore.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from scaldiag.collect import write_restore, write_snapshot
from scaldiag.collect.env import TRY_JOURNAL_ENV, TRY_KEY_ENV, TRY_OWN_ENV
from scaldiag.errors import ScaldiagError
from scaldiag.record import run_json

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_S = 10.0  # between SIGTERM and SIGKILL: a script's own finally: (a checkpoint) may take it
BOOTSTRAP = b"scaldiag.collect.bootstrap"


def _children_of(tid: int) -> list[int]:
    """The processes thread ``tid`` of this process started (the launcher's child is one: Linux).
    The thread is the one that runs the rounds, named when the Stopper starts: not
    ``threading.main_thread()``, whose native_id is the parent's in a forked process."""
    try:
        text = Path(f"/proc/self/task/{tid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _script_pids(tid: int) -> list[int]:
    out = []
    for pid in _children_of(tid):
        try:
            if BOOTSTRAP in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            continue
    return out


def _signal_script(sig: int, tid: int) -> None:
    """``sig`` to the running script, and to its process group where it leads one (its
    DataLoader workers with it)."""
    for pid in _script_pids(tid):
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except OSError:
            pass


def _round_processes(journal: Path) -> list[int]:
    """The live processes of a round: each carries the round's journal in its environment
    (``TRY_JOURNAL_ENV``, given to the script and inherited by what it starts), whichever group or
    session it moved to. Zombies are dead already."""
    marker = f"{TRY_JOURNAL_ENV}={journal}\0".encode()
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry.name}/environ").read_bytes()
            if not (env.startswith(marker) or b"\0" + marker in env):
                continue
            state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # gone meanwhile, or another user's
        if state not in ("Z", "X"):
            out.append(int(entry.name))
    return out


LEFTOVER_ROUNDS = 100  # a process that forks as fast as it is killed is still ended: 100 passes


PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37  # linux/prctl.h


def _subreaper(on: bool | None = None) -> bool | None:
    """Make this process the child subreaper (``on``), or read whether it is (None): the
    script's orphans (a subprocess it started, a child it forked, whatever group or session they
    moved to) become try's children when the script dies, so that the round's end finds them
    without reading their environment, which a process in ``execve`` shows empty for an instant.
    None where Linux's prctl is not there."""
    import ctypes

    from scaldiag.collect.launcher import linux_libc

    libc = linux_libc()
    try:
        if libc is None:
            return None
        if on is None:
            flag = ctypes.c_int(0)
            if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) != 0:
                return None
            return bool(flag.value)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except AttributeError:  # a libc without prctl
        return None


def own_children() -> set[int]:
    """This process's children, every thread's, zombies included."""
    out = set()
    for task in os.scandir("/proc/self/task"):
        out.update(_children_of(int(task.name)))
    return out


def _new_children(had: set[int]) -> list[int]:
    """The live children this process did not have before the side (``had``): once the side's
    script has been waited for, each is the round's, reparented here; the dead are reaped."""
    out = []
    for pid in own_children() - had:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                out.append(pid)
        except ChildProcessError:
            continue  # gone meanwhile
    return out


def stop_leftovers(journal: Path, had_children: set[int] | None = None) -> int:
    """SIGKILL each process of the round still alive once its script ended (a child it forked
    and left behind: it would write after the round was put back), until none is left; how many.
    The round is over: their writes are the round's, and the restore that follows undoes them.
    Found two ways: the processes whose environment names the round's journal (one that outlived
    an earlier try too), and, given ``had_children`` (try's children before the side), try's new
    children (orphans reparented to try, the subreaper)."""
    killed: set[int] = set()
    empty = 0
    for _ in range(LEFTOVER_ROUNDS):
        pids = set(_round_processes(journal))
        if had_children is not None:
            pids.update(_new_children(had_children))
        # Two empty looks in a row: a process caught in execve or fork reads an empty environ
        # for an instant, and one look could miss it (a subprocess that wrote after the restore).
        empty = 0 if pids else empty + 1
        if empty == 2:
            break
        for pid in sorted(pids):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
            killed.add(pid)
        time.sleep(0.01)  # SIGKILL is delivered at once; the process leaves /proc's list shortly
    return len(killed)


class Stopper:
    """The signals try received, the budget's deadline, and the watchdog that enforces both on
    the script in progress."""

    def __init__(self, budget_s: float):
        self.deadline = time.monotonic() + budget_s
        self.signal: int | None = None  # the first stop signal received
        self.budget_spent = False
        self.forwarded = False  # the launcher gave the stop signal to the script itself
        self.running = threading.Event()  # set while a side runs
        self._done = threading.Event()
        self._old = {}

    def __enter__(self) -> Stopper:
        self.tid = threading.get_native_id()  # the thread that launches the sides
        self._was_subreaper = _subreaper()
        if self._was_subreaper is False:
            _subreaper(True)
        for sig in STOP_SIGNALS:
            self._old[sig] = signal.signal(sig, self._received)
        threading.Thread(target=self._watch, name="scaldiag-try-watchdog", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._was_subreaper is False:
            _subreaper(False)
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def _received(self, sig, _frame) -> None:
        if self.signal is None:
            self.signal = sig

    def heard(self, sig: int) -> None:
        """A stop signal the launcher took for the script (its run.json says so)."""
        if self.signal is None:
            self.signal = sig

    def forwarded_to_script(self, sig: int) -> None:
        """A stop signal the launcher took while a side ran, and forwarded to the script: the
        script has it; where it runs on (it ignores or catches it), the watchdog SIGKILLs it
        GRACE_S later, without a SIGTERM that would cut its ``finally:`` short."""
        if sig in STOP_SIGNALS:
            self.forwarded = True
            self.heard(sig)

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def stopping(self) -> bool:
        if self.left_s() <= 0:
            self.budget_spent = True
        return self.signal is not None or self.budget_spent

    def _watch(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())  # signals go elsewhere
        termed_at = None
        while not self._done.wait(0.2):
            if not self.running.is_set():
                termed_at = None
                continue
            if termed_at is None and self.stopping():
                if not self.forwarded:
                    _signal_script(signal.SIGTERM, self.tid)
                termed_at = time.monotonic()
            elif termed_at is not None and time.monotonic() - termed_at > GRACE_S:
                _signal_script(signal.SIGKILL, self.tid)
                termed_at = float("inf")


class Rounds:
    """The sides of a try: where they run, what they look at, how they are put back."""

    def __init__(
        self,
        try_dir: Path,
        run_dir: Path,
        script: str,
        args: list[str],
        cwd: str,
        written: list[str],
        stopper: Stopper,
        key: bytes,
    ):
        self.try_dir, self.script, self.args, self.cwd = try_dir, script, args, cwd
        self.stopper = stopper
        self.key = key
        self.roots, self.shallow = write_snapshot.roots_for(cwd, script, written)
        self.exclude = (str(run_dir),)

    def side(self, name: str, env: dict) -> dict:
        """One side's run: its exit, what it wrote that no journal covers, what could not be put
        back."""
        from scaldiag.collect.launcher import launch

        run = self.try_dir / name
        journal = self.try_dir / f"{name}{write_restore.JOURNAL_SUFFIX}"
        run.mkdir()
        journal.mkdir()
        env = {
            **env,
            TRY_JOURNAL_ENV: str(journal),
            TRY_OWN_ENV: str(self.try_dir),
            TRY_KEY_ENV: self.key.hex(),
        }
        before, _ = write_snapshot.snapshot(self.roots, self.exclude, shallow=self.shallow)
        had_children = own_children()
        here = os.getcwd()
        os.chdir(self.cwd)
        self.stopper.running.set()
        try:
            code = launch(
                run,
                self.script,
                self.args,
                env=env,
                stdout=sys.stderr.fileno(),
                on_signal=self.stopper.forwarded_to_script,  # the launcher takes them meanwhile
            )
        finally:
            self.stopper.running.clear()
            os.chdir(here)
            leftovers = stop_leftovers(journal, had_children)  # before the look and the restore
        after, _ = write_snapshot.snapshot(self.roots, self.exclude, shallow=self.shallow)
        journaled = set(write_restore.journaled_paths(journal, self.key))
        unseen = write_snapshot.uncovered(write_snapshot.changed(before, after), journaled)
        problems = write_restore.restore(journal, self.key)
        for sig in run_json.read(run).signals_received or []:
            if sig in {s.name for s in STOP_SIGNALS}:
                self.stopper.heard(signal.Signals[sig])
        return {
            "dir": str(run),
            "exit": code,
            "journaled_paths": len(journaled),
            "uncontained": unseen[: write_snapshot.MAX_LISTED],
            "not_restored": problems,
            "leftover_processes_killed": leftovers,
        }


def restore_unfinished(run_dir: Path, key: bytes) -> list[str]:
    """An earlier try's rounds that were never put back (it died mid-round), put back now: the
    lines to say; ScaldiagError where one cannot be (its copies stay in its journal). Entries not
    signed with this machine's key (a run directory from elsewhere, or crafted) are never applied.
    """
    said = []
    for journal in write_restore.unfinished(Path(run_dir) / "try"):
        stop_leftovers(journal)  # a script that outlived its try (it ignored the death signal)
        problems = write_restore.restore(journal, key)
        foreign = write_restore.foreign_entries(journal, key)
        if problems[1 if foreign else 0 :]:
            raise ScaldiagError(
                f"an earlier try's round could not be put back whole ({journal}): "
                + "; ".join(problems)
            )
        n = len(write_restore.journaled_paths(journal, key))
        said.append(
            f"an earlier try of this run ended mid-round: its {n} written paths put back"
            f" ({journal})"
            + (
                f"; {foreign} entries there were not written by this machine's try: not applied"
                if foreign
                else ""
            )
        )
    return said
