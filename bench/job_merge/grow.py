"""A job of N ranks grown from the real 2-rank CPU DDP job of fixtures/kineto/cpu_ddp_gloo, as node
directories.

Rank g's trace is the fixture's rank ``g % 2`` (each 34 KB gzipped, 1,745 events, 5 steps with one
``gloo:all_reduce`` each), its ``baseTimeNanoseconds`` moved by a few microseconds (``jitter_ns``)
so that no two ranks are the same trace (job_merge.refuse_copies) and arrivals differ. The file is
written as two gzip members: a new one for the document's first bytes up to the base time, then the
fixture's own remainder compressed once for every rank (a gzip file may hold several members; the
readers read them all).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SOURCE = ROOT / "fixtures" / "kineto" / "cpu_ddp_gloo" / "plugins" / "profile" / "torch"
BASE = re.compile(rb'"baseTimeNanoseconds": (\d+)')


def jitter_ns(g: int) -> int:
    """A rank's clock moved by 0-49 us, spread over the ranks (a fixed pattern, so runs repeat)."""
    return (g * 7919) % 50_000


def _halves() -> list[tuple[bytes, int, bytes]]:
    """Per fixture rank: the text before its base time, the base time, and the rest compressed once.
    """
    out = []
    for k in range(2):
        text = gzip.decompress((SOURCE / f"rank{k}.pt.trace.json.gz").read_bytes())
        m = BASE.search(text)
        out.append(
            (
                text[: m.start(1)],
                int(m.group(1)),
                gzip.compress(text[m.end(1) :], compresslevel=6, mtime=0),
            )
        )
    return out


def grow(root: Path, ranks: int, ranks_per_node: int = 1) -> list[Path]:
    """``ranks`` ranks in ``ceil(ranks / ranks_per_node)`` node directories under ``root``; their
    paths."""
    halves = _halves()
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
            head, base, rest = halves[g % 2]
            first = gzip.compress(
                head + str(base + jitter_ns(g)).encode(), compresslevel=6, mtime=0
            )
            (d / "trace" / f"rank{local}.pt.trace.json.gz").write_bytes(first + rest)
        dirs.append(d)
    return dirs
