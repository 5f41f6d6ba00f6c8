"""Two processes of one job on this machine, each under ``scaldiag profile``, then ``scaldiag
report`` of both:
what tests/test_multinode_tf.py (TF_CONFIG) and tests/test_multinode_jax.py (JAX's processes) share.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
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
    out: Path, envs: list[dict], job: Path, job_args: list[str], timeout_s: float
) -> list[Path]:
    """Both processes' ``scaldiag profile`` at once (process k with ``envs[k]``); their run
    directories, node 0
    first. A process still running when the other is done or the time is up is killed: one stuck at
    a collective its peer left is not left behind."""
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
    assert [p.returncode for p in procs] == [0] * len(procs), "\n".join(
        f"process {k} (exit {p.returncode}):\n{logs[k][-2500:]}" for k, p in enumerate(procs)
    )
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
