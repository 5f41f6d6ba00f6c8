"""A job of N ranks grown from the real 2-rank CPU DDP job of fixtures/kineto/cpu_ddp_gloo, as node
directories.

Rank g's trace is the fixture's rank ``g % 2`` (each 34 KB gzipped, 1,745 events, 5 steps with one
``gloo:all_reduce`` each). Its node's clock is off node 0's as real hosts' are (``clocks``):

- ``"jitter"``: its ``baseTimeNanoseconds`` moved by 0-49 us (``jitter_ns``), so that no two ranks
  are the same trace (job_merge.refuse_copies) and arrivals differ;
- ``"drift"``: the node's clock off by up to +-20 ms (``offset_ns``: NTP keeps hosts within
  milliseconds) and running fast or slow by up to +-100 ppm (``rate_ppm``: a quartz oscillator's
  error), so every event's time after the trace's first is stretched by its node's rate (one of
  ``RATES`` rates, each remainder compressed once), on top of the jitter.

The file is written as two gzip members: a new one for the document's first bytes up to the base
time, then the remainder compressed once for every rank of that fixture rank and rate (a gzip file
may hold several members; the readers read them all).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SOURCE = ROOT / "fixtures" / "kineto" / "cpu_ddp_gloo" / "plugins" / "profile" / "torch"
BASE = re.compile(rb'"baseTimeNanoseconds": (\d+)')
TS = re.compile(rb'"ts": ([0-9.]+)')
CLOCKS = ("jitter", "drift")
# Distinct clock rates among the nodes (each a compressed remainder per fixture rank).
RATES = 16


def jitter_ns(g: int) -> int:
    """A rank's clock moved by 0-49 us, spread over the ranks (a fixed pattern, so runs repeat)."""
    return (g * 7919) % 50_000


def offset_ns(node: int) -> int:
    """A node's clock against node 0's: -20..+20 ms, spread over the nodes (a fixed pattern)."""
    return 0 if node == 0 else (node * 1_000_003) % 40_000_001 - 20_000_000


def rate_ppm(node: int) -> float:
    """A node's clock rate error: one of RATES values in -100..+100 ppm (node 0: none)."""
    return 0.0 if node == 0 else -100.0 + 200.0 * (node % RATES) / (RATES - 1)


def _stretched(text: bytes, ppm: float) -> bytes:
    """Every ``"ts"`` after the document's first moved by ``ppm`` of its distance from it."""
    if not ppm:
        return text
    first = float(TS.search(text).group(1))
    scale = ppm * 1e-6

    def moved(m: re.Match) -> bytes:
        ts = float(m.group(1))
        return b'"ts": %.3f' % (ts + (ts - first) * scale)

    return TS.sub(moved, text)


def _halves(clocks: str) -> list[list[tuple[bytes, int, bytes]]]:
    """Per fixture rank, per rate: the text before its base time, the base time, and the rest
    compressed once."""
    out = []
    for k in range(2):
        text = gzip.decompress((SOURCE / f"rank{k}.pt.trace.json.gz").read_bytes())
        m = BASE.search(text)
        head, base, rest = text[: m.start(1)], int(m.group(1)), text[m.end(1) :]
        rates = range(RATES) if clocks == "drift" else [0]
        out.append(
            [(head, base, gzip.compress(_stretched(rest, rate_ppm(r)), 6, mtime=0)) for r in rates]
        )
    return out


def grow(root: Path, ranks: int, ranks_per_node: int = 1, clocks: str = "jitter") -> list[Path]:
    """``ranks`` ranks in ``ceil(ranks / ranks_per_node)`` node directories under ``root``; their
    paths. ``clocks``: how far each node's clock is off node 0's (CLOCKS, the docstring)."""
    if clocks not in CLOCKS:
        raise ValueError(f"clocks: one of {', '.join(CLOCKS)}, not {clocks!r}")
    halves = _halves(clocks)
    drift = clocks == "drift"
    nnodes = -(-ranks // ranks_per_node)
    dirs = []
    for node in range(nnodes):
        d = root / f"node{node:05d}"
        (d / "trace").mkdir(parents=True)
        (d / "run.json").write_text(
            json.dumps(
                {
                    "node": {"nnodes": nnodes, "node_rank": node, "host": f"h{node}"},
                    "status": "finished",
                    "exit_code": 0,
                }
            )
        )
        for local in range(min(ranks_per_node, ranks - node * ranks_per_node)):
            g = node * ranks_per_node + local
            head, base, rest = halves[g % 2][node % RATES if drift else 0]
            moved = base + jitter_ns(g) + (offset_ns(node) if drift else 0)
            first = gzip.compress(head + str(moved).encode(), compresslevel=6, mtime=0)
            (d / "trace" / f"rank{local}.pt.trace.json.gz").write_bytes(first + rest)
        dirs.append(d)
    return dirs
