"""The parent side of ``scaldiag profile``: start the script, sample, wait, finalise.

Sampling runs here, in the parent process, so it never competes with the
training for the child's GIL, and it outlives a crashing child. The child's
stdin, stdout and stderr are the user's terminal; its exit code is returned.

Signals (Linux): SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to
scaldiag are forwarded to the script, once, and scaldiag waits for it, however
long its ``finally:`` takes, then finalises ``run.json``. A signal the terminal
sends (Ctrl-C, Ctrl-\\, hang-up: ``si_code`` is ``SI_KERNEL``) already reached
the script, which is in the same foreground process group, and is not sent
again. Without a controlling terminal (batch jobs, schedulers, ``timeout``,
CI) the script gets a process group of its own, so a signal to scaldiag's
group reaches it once, forwarded, not twice (a second SIGINT would interrupt
its ``finally:``). A signal that reached another thread of scaldiag (an
embedding program's thread, which does not hold it) is forwarded too; SIGINT,
SIGQUIT and SIGHUP so only without a terminal (with one, the script likely has
it). The signals are held from the start of ``launch``: one that comes before
the script starts is forwarded once it has.
A signal scaldiag was started ignoring (``cmd &`` in a non-interactive shell
ignores SIGINT and SIGQUIT, ``nohup`` SIGHUP) is left ignored, as ``python
SCRIPT`` leaves it: neither forwarded nor recorded. The script dies with its
launcher: ``PR_SET_PDEATHSIG`` sends it SIGTERM if scaldiag itself is killed
(SIGKILL, the OOM killer). scaldiag's own failures (a full disk, an unwritable
run directory) are one line on stderr; they never change what the script does
or its exit code.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from scaldiag.collect import host_costs, script_file, torchrun
from scaldiag.collect.env import RUN_DIR_ENV
from scaldiag.collect.session import start_run_json
from scaldiag.record import run_json
from scaldiag.record.run_json import FAILED, FINISHED, INTERRUPTED
from scaldiag.record.rundir import RUN_JSON, STEPS
from scaldiag.sanitize import line as shown

if TYPE_CHECKING:
    from scaldiag.collect.samplers import Samplers

FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)  # a terminal sends these
SI_KERNEL = (
    0x80  # siginfo si_code of a signal the kernel sent: the terminal's, to its foreground group
)
PR_SET_PDEATHSIG = 1
DEATH_SIGNAL = signal.SIGTERM
# One sender often signals twice in a row (GNU timeout: scaldiag's pid, then its group): forwarded
# once.
FORWARD_COALESCE_S = 1.0


def uncaptured_command(
    script: str, script_args: list[str], nproc_per_node: int | None = None
) -> list[str]:
    """The launch ``profile`` would have made, without capture: ``python SCRIPT ARGS``, or under
    ``--nproc-per-node N`` the same ``torchrun --standalone`` (a DDP script needs RANK and its
    peers).
    """
    if nproc_per_node:
        return torchrun.command(script, script_args, nproc_per_node, capture=False)
    return [sys.executable, script, *script_args]


def launch(
    run_dir: Path,
    script: str,
    script_args: list[str],
    nvml=None,
    env: dict | None = None,
    stdout: int | None = None,
    progress_every_s: float | None = None,
    command: list[str] | None = None,
    run_fields: dict | None = None,
    on_signal=None,
) -> int:
    """Run ``python SCRIPT ARGS`` under capture; returns the script's exit code (negative: killed by
    signal).

    ``env``: variables to set for the script on top of ours (a sweep's GPU subset). ``stdout``:
    where the script's standard output goes (default: ours; ``profile --json -`` sends it to stderr,
    so that stdout holds the JSON alone). ``progress_every_s``: a line on stderr that often, with
    the steps recorded so far (None: none). ``command``: what to start instead of the bootstrap (a
    multi-node torchrun launch whose ranks run it: ``multinode.torchrun_command``); ``run_fields``:
    more of run.json (the node's place in the job). ``on_signal(sig)``: told of each signal received
    while the script runs (try's stopper: it escalates where the script ignores it). Call from the
    main thread: signals are handled there, and the child's death signal follows the thread that
    started it.
    """
    command = command or [sys.executable, "-m", "scaldiag.collect.bootstrap", script, *script_args]
    watch = _can_watch_signals()
    # Held before anything else: a signal while run.json is started waits for the script, which
    # gets it, and the run is finalised (it was left 'running', the script never started).
    forwarded = _forwarded() if watch else ()
    caught = _Caught(forwarded) if watch else None
    old_mask = (
        signal.pthread_sigmask(signal.SIG_BLOCK, (*forwarded, signal.SIGCHLD)) if watch else None
    )
    try:
        recording = _start_record(run_dir, script, script_args, run_fields)
        env = _script_env(run_dir, env, recording)
        own_group = watch and not _controlling_terminal()
        child = subprocess.Popen(
            command,
            env=env,
            stdout=stdout,
            preexec_fn=_child_setup(old_mask, os.getpid(), own_group),
        )
        samplers = _start_samplers(run_dir, child.pid, nvml, env) if recording else None
        try:
            progress = (
                _Progress(run_dir / STEPS, progress_every_s)
                if progress_every_s and recording
                else None
            )
            code, received = (
                _wait_forwarding(child, forwarded, caught, own_group, progress, on_signal)
                if watch
                else _wait_plain(child)
            )
        finally:
            if (
                child.poll() is None
            ):  # only if scaldiag itself failed: the script still decides when it ends
                code, received = child.wait(), []
    finally:
        if watch:
            _drain((*forwarded, signal.SIGCHLD))
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            caught.restore()  # after the mask: a late duplicate is caught, not scaldiag's end
    if recording:
        _finalise(run_dir, code, received, samplers)
    return code


def _start_record(
    run_dir: Path, script: str, script_args: list[str], run_fields: dict | None
) -> bool:
    """run.json started, with the script's identity (try's check) and ``run_fields``: whether the
    run is recorded at all."""
    recording = _try(
        lambda: start_run_json(run_dir, [sys.executable, script, *script_args]), RUN_JSON
    )
    if recording:
        fields = dict(script=script_file.identity(script), **(run_fields or {}))  # try's check
        _try(lambda: run_json.update(run_dir, launcher_pid=os.getpid(), **fields), RUN_JSON)
    return recording


def _script_env(run_dir: Path, env: dict | None, recording: bool) -> dict:
    """The script's environment: ours, ``env`` on top, and the run directory where it records (else
    a line saying it runs without capture)."""
    env = {**os.environ, **(env or {})}
    if recording:
        env[RUN_DIR_ENV] = str(run_dir)
    else:
        print(
            f"scaldiag: cannot record into {shown(run_dir)}: the script runs without capture",
            file=sys.stderr,
        )
    return env


def _try(write, what: str) -> bool:
    """Run one write of the record; on failure say once what is lost and go on."""
    try:
        write()
        return True
    except OSError as exc:
        print(
            f"scaldiag: cannot write {shown(what)} ({shown(exc.strerror or exc)}); the run goes on,"
            " its record is incomplete",
            file=sys.stderr,
        )
        return False


def _start_samplers(run_dir: Path, pid: int, nvml, env: dict) -> Samplers | None:
    try:
        # imported once the script has started (psutil, NVML): not in its start-up
        from scaldiag.collect.samplers import Samplers

        samplers = Samplers(run_dir, pid, nvml=nvml, env=env)
        samplers.start()
        return samplers
    except (
        Exception
    ) as exc:  # no samples is a gap in the evidence, never a reason to stop the script
        print(f"scaldiag: no host or GPU samples ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None


def _finalise(run_dir: Path, code: int, received: list[int], samplers: Samplers | None) -> None:
    stats, missing = {}, []
    if samplers is not None:
        try:
            stats = samplers.stop()
            missing = samplers.missing
        except Exception as exc:
            missing = [f"samplers: could not be stopped cleanly ({type(exc).__name__}: {exc})"]
    else:
        missing = ["samplers: did not start; no host or GPU samples"]
    fields = dict(
        status=_status(code, received),
        exit_code=code,
        ended_ns=time.time_ns(),
        samplers=stats,
        fresh_page_ns_per_byte=host_costs.measured_or_none(),  # after the script: it competes
        signal=_signal_name(-code) if code < 0 else None,
        signals_received=[_signal_name(s) for s in received] or None,
    )

    def write():
        run_json.update(run_dir, lambda run: run.replace(missing=run.missing + missing, **fields))

    _try(write, f"run.json (the run stays marked 'running'; exit code {code})")


def _forwarded() -> tuple:
    """FORWARDED less the signals this process was started ignoring: blocked, an ignored signal is
    queued, not discarded, and was taken, forwarded to a script that ignores it as well, and the
    run recorded 'interrupted'."""
    return tuple(s for s in FORWARDED if signal.getsignal(s) is not signal.SIG_IGN)


class _Caught:
    """The forwarded signals that reached a thread of this process which does not hold them (an
    embedding program's): Python runs this handler in the main thread, wherever it is in
    ``launch``; they wait here for the loop, which forwards them. (SIGINT raised KeyboardInterrupt
    there: out of starting the samplers it ended scaldiag, the script left running.)"""

    def __init__(self, signals: tuple):
        self.signals: list[int] = []
        self.before = {s: signal.signal(s, self._catch) for s in signals}

    def _catch(self, signum, frame) -> None:
        self.signals.append(signum)

    def take(self) -> list[int]:
        taken, self.signals = self.signals, []
        return taken

    def restore(self) -> None:
        for sig, handler in self.before.items():  # None: one not set from Python, the default
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _can_watch_signals() -> bool:
    import threading

    return hasattr(signal, "sigtimedwait") and threading.current_thread() is threading.main_thread()


def linux_libc():
    try:
        return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    except OSError:
        return None


def _controlling_terminal() -> bool:
    """Whether scaldiag has a controlling terminal (then the script shares its process group, as
    under a shell)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


def _child_setup(mask, parent_pid: int, own_group: bool):
    """What the child does between fork and exec: the parent's signal mask back, and die with the
    parent."""
    libc = linux_libc()  # loaded before the fork

    def setup() -> None:
        if own_group:
            os.setpgid(0, 0)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if libc is not None:
            libc.prctl(PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0)
            if os.getppid() != parent_pid:  # the parent died before prctl took effect
                os.kill(os.getpid(), DEATH_SIGNAL)

    return setup


class _Progress:
    """A sign of life during a long run: steps recorded so far and the recent rate, on stderr."""

    def __init__(self, steps_path: Path, every_s: float):
        self.path, self.every_s = steps_path, every_s
        self.next_s = time.monotonic() + every_s
        self.offset, self.steps, self.last = 0, 0, (time.monotonic(), 0)

    def tick(self) -> None:
        now = time.monotonic()
        if now < self.next_s:
            return
        self.next_s = now + self.every_s
        try:
            with open(self.path, "rb") as f:  # only the bytes written since the last look
                f.seek(self.offset)
                new = f.read()
        except OSError:
            return
        complete = new[: new.rfind(b"\n") + 1]
        self.offset += len(complete)
        self.steps += step_count(complete)
        (then, before), self.last = self.last, (now, self.steps)
        rate = (self.steps - before) / (now - then) if now > then else 0.0
        print(
            f"scaldiag: {self.steps:,} steps recorded ({rate:.1f} steps/s lately)",
            file=sys.stderr,
            flush=True,
        )


def step_count(lines: bytes) -> int:
    """Steps in complete steps.jsonl lines: one a row, a block's bounds less one
    (collect/recorder.py)."""
    count = 0
    for line in lines.splitlines():
        at = line.find(b'"bounds_ns":[')
        count += 1 if at < 0 else line.count(b",", at, line.find(b"]", at))
    return count


def _wait_forwarding(
    child: subprocess.Popen,
    forwarded: tuple,
    caught: _Caught,
    own_group: bool,
    progress: _Progress | None = None,
    on_signal=None,
) -> tuple[int, list[int]]:
    """Wait for the child; forward the signals scaldiag receives (the signals are blocked: taken
    here)."""
    received: list[int] = []
    forwarded_at: dict[int, float] = {}
    watched = (*forwarded, signal.SIGCHLD)
    while True:
        for sig in caught.take():  # no sender known: the terminal's signals only without one
            received.append(sig)
            if on_signal is not None:
                on_signal(sig)
            if own_group or sig not in TERMINAL_SIGNALS:
                _forward(child, sig, forwarded_at)
        code = child.poll()
        if code is not None:
            return code, received
        if progress is not None:
            progress.tick()
        info = signal.sigtimedwait(watched, 0.5)
        if info is None or info.si_signo == signal.SIGCHLD:
            continue
        received.append(info.si_signo)
        if on_signal is not None:
            on_signal(info.si_signo)
        if (
            info.si_code != SI_KERNEL
        ):  # SI_KERNEL: the terminal sent it to the whole foreground group, the script has it
            _forward(child, info.si_signo, forwarded_at)


def _forward(child: subprocess.Popen, sig: int, forwarded_at: dict[int, float]) -> None:
    """``sig`` sent to the script, unless the same signal was sent within FORWARD_COALESCE_S."""
    now = time.monotonic()
    if now - forwarded_at.get(sig, -FORWARD_COALESCE_S) < FORWARD_COALESCE_S:
        return
    forwarded_at[sig] = now
    try:
        child.send_signal(sig)
    except ProcessLookupError:
        pass


def _wait_plain(child: subprocess.Popen) -> tuple[int, list[int]]:
    """Without sigtimedwait (not Linux, not the main thread): Ctrl-C reached the child too; wait for
    it."""
    received: list[int] = []
    while True:
        try:
            return child.wait(), received
        except KeyboardInterrupt:
            received.append(signal.SIGINT)


def _drain(signals: tuple) -> None:
    """Take the signals still pending (a late duplicate), so that unblocking them does not kill
    scaldiag."""
    while signal.sigtimedwait(signals, 0) is not None:
        pass


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _status(code: int, received: list[int]) -> str:
    if received:
        return INTERRUPTED
    if code == 0:
        return FINISHED
    if code < 0:
        return f"killed by signal {-code}"
    return FAILED
