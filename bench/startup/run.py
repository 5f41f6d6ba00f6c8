"""`profile`'s start-up before the script's first line: at most 0.5 s over plain `python`, and no
framework imported that the script does not import (issue 50; docs/profile.md, "What capture
costs").

    python -m bench startup [--pairs 10] [--old-rev REV]

Alternating pairs, in fresh processes: `python first.py` and `python -m scaldiag profile -q
first.py` (this tree's scaldiag), the order turned every round; with ``--old-rev REV`` a third side,
the same command with scaldiag as it was at REV (``git archive``, on PYTHONPATH), in the same
rounds. The script's first statement reads the wall clock and prints it; the
benchmark reads the clock just before it starts the command, so each side's figure is launch ->
the script's first line (the interpreter's start, scaldiag's imports and run directory, the child's
bootstrap). Per side the median and range; the overhead is each pair's difference, its median and
range. The script also prints which of tensorflow, torch, jax, keras are in ``sys.modules`` at its
first line (none, on both sides, is the claim). Then ``python -X importtime`` of what runs before
the script: the parent (``scaldiag.cli`` with the profile command's parser) and the child
(``scaldiag.collect.bootstrap``), the modules that take longest, cumulative.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import machine, write_result

CLAIM = (
    "`profile`'s start-up before the script's first line: at most 0.5 s over plain `python`, and"
    " no framework imported that the script does not import (issue 50)"
)
FRAMEWORKS = ("tensorflow", "torch", "jax", "keras")
TARGET_S = 0.5

FIRST_LINE = f"""import time
_first_ns = time.time_ns()
import sys
_seen = [m for m in {FRAMEWORKS!r} if m in sys.modules]
print("FIRST", _first_ns, ",".join(_seen) or "-", flush=True)
"""


ROOT = Path(__file__).resolve().parent.parent.parent


def _env(scaldiag_root: Path | None = None) -> dict:
    """Ours without scaldiag's variables (a run directory inherited would be written into), with
    ``scaldiag_root``'s scaldiag first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCALDIAG_")}
    if scaldiag_root is not None:
        env["PYTHONPATH"] = str(scaldiag_root)
    return env


def _first_line_s(command: list[str], cwd: Path, env: dict) -> tuple[float, str]:
    """Seconds from launch to the script's first line, and the frameworks it saw imported."""
    launched_ns = time.time_ns()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    for line in result.stdout.splitlines():
        if line.startswith("FIRST "):
            _, first_ns, seen = line.split()
            return (int(first_ns) - launched_ns) / 1e9, seen
    raise RuntimeError(f"no first line from {command}: {result.stderr[-2000:]}")


def _old_tree(rev: str, into: Path) -> Path:
    """scaldiag's package as it was at ``rev`` (the C parts unbuilt: start-up does not use them)."""
    into.mkdir()
    archive = subprocess.run(
        ["git", "archive", rev, "scaldiag"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _rounds(n: int, tmp: Path, old: Path | None) -> dict[str, list[tuple[float, str]]]:
    script = tmp / "first.py"
    script.write_text(FIRST_LINE)
    profile = [sys.executable, "-m", "scaldiag", "profile", "-q", "--out", str(tmp / "runs")]
    sides = [
        ("plain", [sys.executable, str(script)], _env()),
        ("profile", [*profile, str(script)], _env(ROOT)),
    ]
    if old is not None:
        sides.append(("profile_old", [*profile, str(script)], _env(old)))
    got: dict[str, list[tuple[float, str]]] = {name: [] for name, _, _ in sides}
    for i in range(n):
        for name, command, env in sides[i % len(sides) :] + sides[: i % len(sides)]:
            got[name].append(_first_line_s(command, tmp, env))
            shutil.rmtree(tmp / "runs", ignore_errors=True)
    return got


def _importtime(command: list[str], cwd: Path, env: dict, top: int = 12) -> str:
    """``-X importtime``'s slowest modules (cumulative), and the total of the top-level ones."""
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    rows = []
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        self_us, cumulative_us, raw = line[len("import time:") :].split("|")
        if not cumulative_us.strip().isdigit():
            continue  # the header line
        depth = (len(raw) - len(raw.lstrip()) - 1) // 2
        rows.append((int(cumulative_us), int(self_us), depth, raw.strip()))
    total_ms = sum(c for c, _, d, _ in rows if d == 0) / 1e3
    lines = [
        f"top-level imports: {total_ms:.0f} ms in all",
        "",
        "| module | cumulative ms |",
        "|---|---|",
    ]
    for cumulative, _, _, name in sorted(rows, reverse=True)[:top]:
        lines.append(f"| `{name}` | {cumulative / 1e3:.1f} |")
    return "\n".join(lines)


def _ms(values: list[float]) -> str:
    return (
        f"{1e3 * statistics.median(values):.0f} ms ({1e3 * min(values):.0f}-"
        f"{1e3 * max(values):.0f})"
    )


def _row(label: str, values: list[float]) -> str:
    return f"| {label} | {_ms(values)} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench startup", description=__doc__)
    parser.add_argument("--pairs", type=int, default=10, help="rounds of alternating sides (10)")
    parser.add_argument("--old-rev", help="also scaldiag as it was at this git revision")
    parser.add_argument("--out", type=Path, help="the result file (default bench/results/)")
    args = parser.parse_args(argv)
    before = machine()
    tmp = Path(tempfile.mkdtemp(prefix="startup_bench_"))
    try:
        old = _old_tree(args.old_rev, tmp / "old") if args.old_rev else None
        got = _rounds(args.pairs, tmp, old)
        (tmp / "child_run").mkdir()
        child_env = {**_env(ROOT), "SCALDIAG_RUN_DIR": str(tmp / "child_run")}
        child = _importtime(
            [sys.executable, "-X", "importtime", "-m", "scaldiag.collect.bootstrap", "first.py"],
            tmp,
            child_env,
        )
        parent_code = "import scaldiag.cli as c; c.build_parser('profile')"
        parent = _importtime(
            [sys.executable, "-X", "importtime", "-c", parent_code], tmp, _env(ROOT)
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    plain = [s for s, _ in got["plain"]]
    rows = [_row("`python first.py`", plain)]
    medians = {}
    for side, label in (("profile", "this tree"), ("profile_old", f"at {args.old_rev}")):
        if side not in got:
            continue
        seconds = [s for s, _ in got[side]]
        over = [b - a for a, b in zip(plain, seconds)]
        medians[label] = statistics.median(over)
        rows.append(_row(f"`python -m scaldiag profile -q first.py`, {label}", seconds))
        rows.append(_row(f"overhead, {label} (each round's difference from plain)", over))
    seen = sorted({f for side in got.values() for _, f in side})
    verdict = "within" if medians["this tree"] <= TARGET_S else "over"
    table = "\n".join(rows)
    rounds = "; ".join(
        f"{side}: " + ", ".join(f"{s:.3f}" for s, _ in values) for side, values in got.items()
    )
    body = f"""launch -> the script's first line, {args.pairs} rounds, the sides in turn (fresh
processes; scaldiag on PYTHONPATH):

| side | median (min-max) |
|---|---|
{table}

The median overhead of this tree is {verdict} the {TARGET_S} s target. Frameworks in
`sys.modules` at the script's first line, every side: {", ".join(seen)} (`-`: none of
{", ".join(FRAMEWORKS)}).

Each round's seconds: {rounds}

## The child before the script: `python -X importtime -m scaldiag.collect.bootstrap first.py`

{child}

## The parent before it starts the child

`python -X importtime -c "{parent_code}"`

{parent}
"""
    write_result(
        "startup", CLAIM, argv if argv is not None else sys.argv[1:], body, before, args.out
    )
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
