"""Two processes of one job on this machine, each under ``scaldiag profile``, then ``scaldiag
report`` of both:
what tests/test_multinode_tf.py (TF_CONFIG) and tests/test_multinode_jax.py (JAX's processes) share.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_ports(n: int) -> list[int]:
    """``n`` ports free on 127.0.0.1 now (all held until all are found, so they differ)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def profile_two(
    out: Path, make_envs, job: Path, job_args: list[str], timeout_s: float
) -> list[Path]:
    """Both processes' ``scaldiag profile`` at once (process k with ``make_envs()[k]``, called
    again for a second try: new ports); their run directories, node 0 first.

    A job whose script died of a native crash (SIGABRT or SIGSEGV, as ``profile`` reports it for
    the script it ran) is run again, up to TRIES times, with a warning that keeps the crash's log:
    TensorFlow 2.21's profiler aborts a traced non-chief worker now and then ("free(): invalid
    pointer" in worker 1, its peer then failing at the next all-reduce; docs/multinode.md). That
    crash is the framework's, not an answer scaldiag gave; TRIES in a row fail the test. Any other
    failure fails it at once."""
    crashes = []
    for k in range(1, TRIES + 1):
        attempt = _profile_two_once(out / f"try{k}", make_envs(), job, job_args, timeout_s)
        if not isinstance(attempt, str):
            return attempt
        crashes.append(attempt)
        warnings.warn(f"a script crashed natively; try {k} of {TRIES}:\n{attempt}", stacklevel=2)
    raise AssertionError(f"the script crashed natively {TRIES} times in a row:\n{crashes[-1]}")


# Tries of a job whose script crashes natively: TF's profiler aborts a traced non-chief worker in a
# few percent of jobs (docs/multinode.md), and the tests that trace both workers opt in to that.
TRIES = 3


# The exit codes ``scaldiag profile`` passes on for a script killed by SIGABRT or SIGSEGV.
NATIVE_CRASH_CODES = {128 + signal.SIGABRT, 128 + signal.SIGSEGV}


def _profile_two_once(
    out: Path, envs: list[dict], job: Path, job_args: list[str], timeout_s: float
) -> list[Path] | str:
    """One try of the job: its run directories, or both logs where a script crashed natively."""
    out.mkdir(parents=True)
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "scaldiag",
                "profile",
                "-q",
                "--out",
                str(out),
                str(job),
                "--",
                *job_args,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for env in envs
    ]
    try:
        logs = [p.communicate(timeout=timeout_s)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    # Both logs: the one that failed first is often the peer of the one whose error shows (a TF
    # worker reports its peer's missed heartbeats).
    told = "\n".join(
        f"process {k} (exit {p.returncode}):\n{logs[k][-2500:]}" for k, p in enumerate(procs)
    )
    if any(
        p.returncode in NATIVE_CRASH_CODES and "killed by signal" in logs[k]
        for k, p in enumerate(procs)
    ):
        return told
    assert [p.returncode for p in procs] == [0] * len(procs), told
    print(f"{out.name}: both processes profiled in {time.monotonic() - started:.0f} s")
    dirs = sorted(out.iterdir(), key=lambda d: d.name[-1])  # by node rank
    assert [d.name.endswith(f"-node{k}") for k, d in enumerate(dirs)] == [True, True], dirs
    return dirs


def report(env: dict, *paths: Path, fmt: str = "json") -> str:
    done = subprocess.run(
        [sys.executable, "-m", "scaldiag", "report", *map(str, paths), "--format", fmt],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def ids(found: dict | str) -> list[str]:
    """The findings' ids of a JSON report (parsed or not)."""
    found = json.loads(found) if isinstance(found, str) else found
    return [f["id"] for f in found["findings"]]
