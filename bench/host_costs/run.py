"""The fresh-page probe a profiled run makes measures what a Keras batch slice pays for fresh pages
(docs/rules.md, SD102).

Benchmark: scaldiag's fresh-page probe (collect/host_costs.py) against
bench/accuracy/fresh_pages.py, side by side.

    python -m bench host_costs [--rounds 5] [--out FILE]

Each round runs, alternating, the probe (a fresh private anonymous mapping with huge pages asked
for, written once per page, against the same pages rewritten) and one pair of fresh_pages.py (a
shuffled 50 MB float32 batch slice into glibc's fresh pages, against MALLOC_MMAP_THRESHOLD_ fixed
above it: what a Keras array adapter pays), each in its own process; prints both ns/byte and their
ratio per round.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from bench.common import record

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "from scaldiag.collect.host_costs import fresh_page_ns_per_byte;"
    " print(fresh_page_ns_per_byte())"
)


def _main(argv: list[str]) -> int | None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out")
    a = p.parse_args(argv)
    rows = []
    for _ in range(a.rounds):
        probe = float(
            subprocess.run(
                [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, cwd=ROOT
            ).stdout
        )
        slow = json.loads(
            subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "bench" / "accuracy" / "fresh_pages.py"),
                    "--pairs",
                    "1",
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        rows.append((probe, slow["median_fresh_page_ns_per_byte"]))
    lines = [
        (
            "# Fresh-page cost: scaldiag's probe against fresh_pages.py"
            f" ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)"
        ),
        "",
        (
            f"Machine: {platform.node()}, {platform.machine()}, Python {platform.python_version()}."
            f" Command: `python -m bench host_costs --rounds {a.rounds}`."
        ),
        "",
        "| round | probe ns/byte | fresh_pages.py ns/byte | probe / fresh_pages |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {i + 1} | {pr:.3f} | {fp:.3f} | {f'{pr / fp:.2f}' if fp > 0 else 'n/a'} |"
        for i, (pr, fp) in enumerate(rows)
    ]
    ratios = [pr / fp for pr, fp in rows if fp > 0]
    lines += [
        "",
        (
            f"Medians: probe {statistics.median(r[0] for r in rows):.3f}, fresh_pages.py"
            f" {statistics.median(r[1] for r in rows):.3f} ns/byte; ratio median"
            f" {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})."
        ),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)


def main(argv: list[str]) -> int:
    """``python -m bench host_costs [ARGS]``: the run, its output kept as
    bench/results/host_costs.md."""
    return record("host_costs", __doc__, argv, lambda: _main(argv))
