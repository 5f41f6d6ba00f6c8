"""What every benchmark's result file starts with: date, machine, versions, the command.

``write_result(name, body)`` writes ``bench/results/NAME.md``: one file a benchmark, the latest
run (git history keeps the earlier ones). The machine is described as it was when the run
started (``machine()`` before measuring): cores, memory, load, because the numbers of a shared
machine mean little without its load.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
# The packages whose version changes what a benchmark measures; absent ones are left out.
PACKAGES = (
    "scaldiag",
    "numpy",
    "tensorflow",
    "tensorflow-cpu",
    "keras",
    "jax",
    "torch",
    "psutil",
    "xprof",
)


def machine() -> str:
    """``2 cores, 7.8 GiB, load 0.42 0.55 0.61 (1, 5, 15 min), Linux x86_64``."""
    cores = os.cpu_count() or 0
    try:
        memory = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB"
    except (ValueError, OSError, AttributeError):
        memory = "memory unknown"
    try:
        load = "load " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1, 5, 15 min)"
    except OSError:
        load = "load unknown"
    return f"{cores} cores, {memory}, {load}, {platform.system()} {platform.machine()}"


def versions(extra: tuple[str, ...] = ()) -> str:
    found = [f"python {platform.python_version()}"]
    for name in (*PACKAGES, *extra):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    rev = _git("rev-parse", "--short", "HEAD")
    dirty = " (with uncommitted changes)" if _git("status", "--porcelain", "--", "scaldiag") else ""
    return ", ".join(found) + (f"; scaldiag at {rev}{dirty}" if rev else "")


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def command(name: str, argv: list[str]) -> str:
    return " ".join(["python -m bench", name, *argv])


def header(name: str, claim: str, argv: list[str], machine_before: str | None = None) -> str:
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"# {name}: {claim}\n\n"
        f"- date: {when}\n- machine: {machine_before or machine()}\n- versions: {versions()}\n"
        f"- command: `{command(name, argv)}`\n\n"
    )


def write_result(
    name: str,
    claim: str,
    argv: list[str],
    body: str,
    machine_before: str | None = None,
    out: Path | None = None,
) -> Path:
    """The result file (``out``, or ``bench/results/NAME.md``); returns its path."""
    path = out or RESULTS / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        header(name, claim, argv, machine_before) + body.rstrip() + "\n", encoding="utf-8"
    )
    print(f"wrote {path}", file=sys.stderr)
    return path


def in_temporary(
    name: str,
    claim: str,
    argv: list[str],
    body: Callable[[Path], str],
    parent: Path | None = None,
    out: Path | None = None,
) -> int:
    """``body(tmp)`` in a new temporary directory (under ``parent``; removed after), its text
    written as the
    result file under the header of the machine as it was before: for benchmarks that grow their
    inputs.
    """
    import shutil
    import tempfile

    before = machine()
    tmp = Path(tempfile.mkdtemp(prefix=f"{name}_bench_", dir=parent))
    try:
        text = body(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_result(name, claim, argv, text, machine_before=before, out=out)
    return 0


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """A process's ``VmRSS`` (now) or ``VmHWM`` (its peak so far) in MiB, from /proc; 0 where it is
    gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def descendants(pid: int) -> list[int]:
    """The live (not zombie) descendants of ``pid``."""
    import psutil

    try:
        return [
            p.pid
            for p in psutil.Process(pid).children(recursive=True)
            if p.status() != psutil.STATUS_ZOMBIE
        ]
    except psutil.Error:
        return []


class TreeRss:
    """Samples a process and its descendants every ``every_s`` until stopped: the peak of their
    summed RSS,
    and each process's own peak (VmHWM) by pid. Worker processes' memory, which wait4 of the root
    misses.
    """

    def __init__(self, pid: int, every_s: float = 0.02):
        import threading

        self.pid, self.every_s = pid, every_s
        self.peak_sum_mib = 0.0
        self.peak_by_pid: dict[int, float] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(self.every_s):
            tree = [self.pid, *descendants(self.pid)]
            self.peak_sum_mib = max(self.peak_sum_mib, sum(rss_mib(p) for p in tree))
            for p in tree:
                self.peak_by_pid[p] = max(self.peak_by_pid.get(p, 0.0), rss_mib(p, "VmHWM"))


class _Tee(io.TextIOBase):
    """stdout as it is, and a copy kept for the result file."""

    def __init__(self, stream):
        self.stream, self.kept = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def show(lines: list[str], out: str | None) -> None:
    """A benchmark's table on stdout (kept for its result file by ``record``), and in ``out`` if
    given."""
    text = "\n".join(lines)
    if out:
        Path(out).write_text(text)
    print(text)


def claim_of(doc: str | None) -> str:
    """A benchmark's claim: the first line of its module docstring."""
    return (doc or "").strip().splitlines()[0] if (doc or "").strip() else "(no claim written)"


def record(name: str, doc: str | None, argv: list[str], body: Callable[[], int | None]) -> int:
    """Run ``body`` (a benchmark's work, printing its tables), then write what it printed as
    ``bench/results/NAME.md`` under the header. A failed run's file says that it failed."""
    before = machine()
    tee = _Tee(sys.stdout)
    sys.stdout = tee
    try:
        rc = int(body() or 0)
    finally:
        sys.stdout = tee.stream
    text = _rows_last(tee.kept.getvalue())
    if rc:
        text = (
            f"**The run failed (exit status {rc}): the numbers below are not a result.**\n\n" + text
        )
    write_result(name, claim_of(doc), argv, text, before)
    return rc


def _rows_last(text: str) -> str:
    """The tables first; the one-line JSON rows a benchmark prints as it measures (its raw
    measurements) after them, in one block, so that the file reads as Markdown. Output with no
    Markdown in it is kept as printed, in one block."""
    lines = text.splitlines()
    rows = [line for line in lines if line.startswith("{") and line.endswith("}")]
    if not any(
        line.startswith(("|", "#")) for line in lines
    ):  # plain lines, no Markdown: kept as printed
        return "```\n" + text.rstrip() + "\n```\n"
    if not rows:
        return text
    rest = [line for line in lines if not (line.startswith("{") and line.endswith("}"))]
    return (
        "\n".join(rest).rstrip() + "\n\n## Every measurement\n\n```\n" + "\n".join(rows) + "\n```\n"
    )


def revision_tree(tmp: Path, rev: str, name: str) -> Path:
    """The tree at git revision ``rev``, its C parts built, in ``tmp/name``: a "before"."""
    tree = tmp / name
    tree.mkdir()
    archive = subprocess.run(
        ["git", "archive", rev], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tree,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return tree


@contextlib.contextmanager
def busy_cores(n: int):
    """``n`` processes spinning on a core each while the block runs: the load a user's machine has
    beside training (issue 37 measures under one busy core). The benchmark starts it itself, so the
    load is known, not the weather of a shared machine."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(max(0, n))
    ]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()
