"""A job's node directories: which run directories are the nodes of one job, in order, from their
run.json.

A node is a run directory whose run.json says ``node`` (``profile --nnodes``, SLURM, TF_CONFIG,
JAX); a directory holding several of them (a shared ``--out``) stands for all of them. What the
merge takes from each node's record (its place, its label, its framework, its intra-node reference)
is read here; the merge itself is analyze/nodes.py's, the join pipeline.py's.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from scaldiag.errors import ScaldiagError
from scaldiag.record import run_json
from scaldiag.record.reader import read_record
from scaldiag.record.run_json import RunJson
from scaldiag.record.rundir import RUN_JSON

# A node rank or a node count past this is no job's (torchrun's largest jobs have thousands of
# nodes).
MAX_NODES = 1 << 20
# The hosts of one job keep their clocks within milliseconds of each other (NTP, PTP); an offset of
# a minute is another job's trace (a run an hour earlier read "offset +3276744 ms, corrected" and
# lost the real straggler), a trace without its base time (1970), or a clock nobody keeps: its
# verdict would rest on the clocks. Refused, with the offset (here for the runs' spans,
# analyze/job_merge.py for the traces).
MAX_CLOCK_OFFSET_NS = 60 * 10**9


def node_dirs(paths: list[str], left_out: list[str] | None = None) -> list[Path]:
    """The node run directories named or held by ``paths``, node 0 first. A directory whose run.json
    does not say its place in the job (``node_rank`` not a node number) is left out, its reason
    added to ``left_out``; two directories of one node rank, or of different node counts, are not
    one job."""
    return [Path(d) for d, _ in node_records(paths, left_out)]


def node_records(
    paths: list[str], left_out: list[str] | None = None
) -> list[tuple[str, NodeRecord]]:
    """``node_dirs``' directories as text (``str`` of their Path), each with what the merge reads of
    its run.json (``_merged``): each read once (it was read about nine times a node). Text, not
    Paths: every node's is held until the last is found, and a Path is about 0.3 KB more."""
    found: dict[str, tuple[str, NodeRecord]] = {}
    for p in map(Path, paths):
        if not p.is_dir():
            raise ScaldiagError(f"no such run directory: {p}")
        own = _run_of(p)
        if node_in(own) is not None:
            held = [(str(p), _merged(own))]
        else:
            held = ((str(c), _merged(run)) for c in _children(p) if node_in(run := _run_of(c)))
        for d, run in held:
            # A directory named twice is one node (its real path a string: no second Path a node,
            # and no second string where the path is its real one: 0.1 KB a node of 10,000)
            real = os.path.realpath(d)
            found.setdefault(d if real == d else real, (d, run))
    placed, runs = {}, {}
    for d, run in found.values():
        where = place_of(node_in(run))
        if isinstance(where, str):
            (left_out if left_out is not None else []).append(
                f"{d}: {where}: this node is left out"
            )
        else:
            placed[d], runs[d] = where, run
    # Counted once, not searched for each rank: list.count per node was quadratic (0.2 s at 4,096).
    counts = Counter(r for r, _ in placed.values())
    twice = sorted(r for r, k in counts.items() if k > 1)
    if twice:
        raise ScaldiagError(
            f"node rank {twice[0]} is in more than one of these directories: give one run "
            "directory a node, all of the same job"
        )
    sizes = {n for _, n in placed.values()}
    if len(sizes) > 1:
        raise ScaldiagError(
            f"these directories are not of one job: their nodes say {sorted(sizes, key=str)} nodes"
        )
    if len(placed) < 2:
        why = f" ({'; '.join(left_out)})" if left_out else ""
        raise ScaldiagError(
            "a job report needs the run directories of two or more nodes (written by "
            "`scaldiag profile --nnodes N ...`, or under SLURM, TF_CONFIG or JAX); found "
            f"{len(placed)} in {', '.join(paths)}{why}"
        )
    return [(d, runs[d]) for d in sorted(placed, key=lambda d: (placed[d][0], d))]


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What the merge reads of a node's run.json, RunJson's fields of these names as it checked
    them: every node's is held until the last is found, and a RunJson is about 0.28 KB (its 24
    slots and its list of notes), this 64 bytes."""

    node: dict | None
    intra_node_allreduce: dict | None
    started_ns: int | None
    ended_ns: int | None


def _merged(run: RunJson) -> NodeRecord:
    """What the merge reads of a node's run.json (its place, label and network stack in ``node``,
    its intra-node all-reduce, its run's span), alone. Every node's record is held until the last
    is found, and a whole one is a few KB decoded (a 4,096-node job's records were then more than
    the merge's own figures)."""
    # The keys interned: each node's are otherwise its own copies of the same few words (a job's
    # records are held a node each until the last is found).
    node = None if run.node is None else {sys.intern(k): v for k, v in run.node.items()}
    return NodeRecord(
        node=node,
        intra_node_allreduce=run.intra_node_allreduce,
        started_ns=run.started_ns,
        ended_ns=run.ended_ns,
    )


def _children(p: Path) -> Iterator[Path]:
    """``p``'s directories in the order of their names (``sorted(p.iterdir())``'s on POSIX), made
    one at a time: a shared ``--out`` of thousands of nodes is not held as Paths."""
    try:
        names = sorted(os.listdir(p))
    except OSError as exc:
        raise ScaldiagError(f"cannot read {p}: {exc.strerror or exc}") from None
    return (c for c in map(p.joinpath, names) if c.is_dir())


def place(run_dir: Path) -> tuple[int, int | None] | str:
    """(node rank, node count or None where unsaid) from the node's run.json, or why it is no
    place."""
    return place_of(node_of(run_dir))


def place_of(node: dict | None) -> tuple[int, int | None] | str:
    """``place`` from what run.json says of the node (``node_of``'s)."""
    node = node or {}
    rank, count = node.get("node_rank"), node.get("nnodes")
    if not _is_index(rank):
        return f"its run.json's node_rank is {shown(rank)}, not a node number"
    if count is not None and not (_is_index(count) and count > 0):
        return f"its run.json's nnodes is {shown(count)}, not a number of nodes"
    if count is not None and rank >= count:
        return f"its run.json's node_rank {rank} is not one of its {count} nodes"
    return rank, count


def _is_index(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_NODES


def shown(value) -> str:
    """A value of a record as a message quotes it: JSON, at most 40 characters."""
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def is_job(paths: list[str]) -> bool:
    """Several paths, or one directory holding node directories rather than being a run itself."""
    if len(paths) > 1:
        return True
    p = Path(paths[0])
    return (
        p.is_dir()
        and not (p / RUN_JSON).exists()
        and any(node_of(c) is not None for c in _children(p))
    )


def node_of(run_dir: Path) -> dict | None:
    """What the run's run.json says of its node (``node``), or None."""
    return node_in(_run_of(run_dir))


def _run_of(run_dir: Path) -> RunJson:
    """The directory's run.json, checked (RunJson): an empty one where it has none or it cannot be
    read."""
    return run_json.read(run_dir)


def label(run_dir: Path) -> str:
    """The node as the report names it: ``<host>/node<rank>``."""
    return label_of(node_of(run_dir))


def node_in(run: RunJson | NodeRecord) -> dict | None:
    """What a run.json says of its node: ``node_of`` without the read."""
    return run.node


def label_of(node: dict | None) -> str:
    """``label`` from what run.json says of the node (``node_of``'s)."""
    node = node or {}
    host = node.get("host") if isinstance(node.get("host"), str) and node.get("host") else "host"
    rank = node.get("node_rank") if _is_index(node.get("node_rank")) else "?"
    return f"{host}/node{rank}"


def framework(run_dir: Path) -> str:
    """The job's framework as its rules' fixes name it, from node 0's record (PyTorch where
    unsaid)."""
    said = read_record(run_dir).training.get("framework")
    if not isinstance(said, dict) or said.get("name") == "pytorch":
        return "pytorch"
    return said["backend"] if said.get("backend") in ("tensorflow", "jax") else "pytorch"


def refuse_other_jobs(dirs: list[Path] | list[str], records: list[dict] | None = None) -> None:
    """Refuse node directories that say they are of different jobs: another launcher or rendezvous,
    or runs that do not overlap even allowing MAX_CLOCK_OFFSET_NS between their hosts' clocks.
    ``records``: their run.json (or node_records' part of it) where read already."""
    records = [_run_of(d) for d in dirs] if records is None else records
    for key in ("launcher", "rdzv_endpoint"):
        said = {
            shown(r.node.get(key))
            for r in records
            if r.node is not None and r.node.get(key) is not None
        }
        if len(said) > 1:
            raise ScaldiagError(
                f"these directories are not of one job: their nodes' {key} differ "
                f"({', '.join(sorted(said))})"
            )
    spans = [(d, _span_ns(r)) for d, r in zip(dirs, records)]
    spans = [(d, s) for d, s in spans if s is not None]
    for d, (start, end) in spans[1:]:
        d0, (start0, end0) = spans[0]
        if start > end0 + MAX_CLOCK_OFFSET_NS or start0 > end + MAX_CLOCK_OFFSET_NS:
            apart_s = max(start - end0, start0 - end) / 1e9
            raise ScaldiagError(
                f"these directories are not of one job: {Path(d).name}'s run and"
                f" {Path(d0).name}'s do not overlap ({apart_s:,.0f} s apart; their clocks may"
                " differ by a minute at most)"
            )


def _span_ns(record: RunJson | NodeRecord) -> tuple[int, int] | None:
    """A finished run's (started_ns, ended_ns) where both are times (0..2^62) in order."""
    start, end = record.started_ns, record.ended_ns
    ok = all(is_time_ns(t) for t in (start, end))
    return (start, end) if ok and start <= end else None


def is_time_ns(t) -> bool:
    return isinstance(t, int) and not isinstance(t, bool) and 0 < t < 2**62


def intra_node_times_ns(run_dir: Path) -> dict[int, list[int]]:
    """The same all-reduce inside the node, as ``profile`` measured it after the script
    (collect/multinode.py): per number of splits (buckets), its times; {} where none is recorded or
    its shape is another (a key '²', a time of 10**400)."""
    return intra_node_times_in(_run_of(run_dir))


def intra_node_times_in(run: RunJson | NodeRecord) -> dict[int, list[int]]:
    """``intra_node_times_ns`` from a run.json read already."""
    found = run.intra_node_allreduce
    table = found.get("times_ns") if found is not None else None
    if isinstance(table, list):  # one all-reduce of every byte
        table = {"1": table}
    if not isinstance(table, dict):
        return {}
    return {
        int(k): v
        for k, v in table.items()
        if k.isascii()
        and k.isdigit()
        and len(k) < 10
        and int(k) > 0
        and isinstance(v, list)
        and v
        and all(is_time_ns(t) for t in v)
    }
