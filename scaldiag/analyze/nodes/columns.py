"""A job's ranks' evidence as the merge holds it: one int64 array a rank (``PackedRank``), the
job as flat columns (``JobEvents``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from scaldiag.analyze import intervals
from scaldiag.analyze.nodes.evidence import RankEvents

EMPTY_I64 = np.empty(0, np.int64)


@dataclass(frozen=True, slots=True)  # slots: one a rank until the merge (no __dict__ a rank)
class PackedRank:
    """One rank's evidence as the merge reads it, in one int64 array's bytes: a job holds every
    rank's until they are merged, so one buffer a rank, not ten arrays, a list of key tuples and an
    interval set (``RankEvents``: about 2.7 KB a rank of the grown 5-step job, against about 0.3 KB
    here). Bytes, not a numpy array: no array object a rank (about 0.1 KB), and a small buffer is
    Python's allocator's, whose freed blocks the rest of the merge reuses once the job's columns
    are made.

    ``data`` holds, as native int64, one column after the other: the steps' numbers, starts and
    ends (``steps`` each), the collectives' step numbers, k, arrivals and ends (``collectives``
    each; a collective without a key has step -1, as one before the first step), the input's
    starts and ends (``inputs`` each)."""

    node: str
    rank: str
    steps: int
    collectives: int
    inputs: int
    data: bytes
    steps_numbered_by: str | None = None


def pack(r: RankEvents) -> PackedRank:
    """The rank's evidence in one array (PackedRank): what the merge reads of it, nothing else."""
    arrive_ns, end_ns = np.asarray(r.arrive_ns, np.int64), np.asarray(r.coll_end_ns, np.int64)
    n = min(len(arrive_ns), len(end_ns))
    key = np.full((2, n), -1, np.int64)
    keyed = min(n, len(r.coll_key))
    if keyed:
        key[:, :keyed] = np.array(r.coll_key[:keyed], np.int64).reshape(-1, 2).T
    columns = [r.step_num, r.step_start_ns, r.step_end_ns, key[0], key[1], arrive_ns[:n]]
    columns += [end_ns[:n], r.input[0], r.input[1]]
    data = np.concatenate([np.asarray(c, np.int64) for c in columns]).tobytes()
    return PackedRank(
        r.node, r.rank, len(r.step_num), n, len(r.input[0]), data, r.steps_numbered_by
    )


@dataclass(frozen=True)
class JobEvents:
    """Every rank's evidence in flat int64 columns, the ranks one after another: each ``*_at``
    holds where each rank's rows begin, then the end (rank i's steps are
    ``step_at[i]:step_at[i + 1]``). Per rank only its node's index and its name are more; node
    and rank names are held once for the job."""

    nodes: list[str]  # in the order of their first rank
    node_of: np.ndarray  # (ranks,): the index of each rank's node in ``nodes``
    ranks: list[str]
    numbered_by: dict[int, str]  # rank index: how its steps were numbered, where not by markers
    step_at: np.ndarray
    step_num: np.ndarray
    step_start_ns: np.ndarray
    step_end_ns: np.ndarray
    coll_at: np.ndarray
    coll_step: np.ndarray  # -1: not in a numbered step (never matched)
    coll_k: np.ndarray  # k-th collective of its step
    arrive_ns: np.ndarray
    end_ns: np.ndarray
    input_at: np.ndarray
    input_start_ns: np.ndarray
    input_end_ns: np.ndarray

    @classmethod
    def of(cls, ranks: list[RankEvents | PackedRank]) -> JobEvents:
        return cls.taken([r if isinstance(r, PackedRank) else pack(r) for r in ranks])

    @classmethod
    def taken(cls, packed: list[PackedRank]) -> JobEvents:
        """``of`` for the merge, which lets go of each rank once it is in the columns: ``packed``
        is emptied, a chunk of ranks at a time (the evidence held once, not as the ranks' buffers,
        a joined copy of them and the columns at once: 0.5 KB a rank at a 10,000-rank job's
        peak)."""
        node_ids: dict[str, int] = {}
        node_of = np.array([node_ids.setdefault(p.node, len(node_ids)) for p in packed], np.int64)
        steps, colls, inputs = (
            np.array([getattr(p, k) for p in packed], np.int64).reshape(-1)
            for k in ("steps", "collectives", "inputs")
        )
        names = [p.rank for p in packed]
        numbered = {i: p.steps_numbered_by for i, p in enumerate(packed) if p.steps_numbered_by}
        step_num, step_start, step_end, key_step, key_k, arrive, end, in_start, in_end = _columns(
            packed, steps, colls, inputs
        )
        at = [_bounds(c) for c in (steps, colls, inputs)]
        return cls(
            list(node_ids),
            node_of,
            names,
            numbered,
            *(at[0], step_num, step_start, step_end),
            *(at[1], key_step, key_k, arrive, end),
            *(at[2], in_start, in_end),
        )

    def shifted(self, shift_of_node_ns: np.ndarray) -> JobEvents:
        """Every rank's times less its node's shift (its clock minus node 0's)."""
        if not shift_of_node_ns.any():
            return self
        per_rank = shift_of_node_ns[self.node_of]

        def moved(at: np.ndarray, values: np.ndarray) -> np.ndarray:
            return values - np.repeat(per_rank, np.diff(at))

        return replace(
            self,
            step_start_ns=moved(self.step_at, self.step_start_ns),
            step_end_ns=moved(self.step_at, self.step_end_ns),
            arrive_ns=moved(self.coll_at, self.arrive_ns),
            end_ns=moved(self.coll_at, self.end_ns),
            input_start_ns=moved(self.input_at, self.input_start_ns),
            input_end_ns=moved(self.input_at, self.input_end_ns),
        )

    def steps_of(self, i: int) -> slice:
        return slice(int(self.step_at[i]), int(self.step_at[i + 1]))

    def colls_of(self, i: int) -> slice:
        return slice(int(self.coll_at[i]), int(self.coll_at[i + 1]))

    def input_of(self, i: int) -> intervals.IntervalSet:
        at = slice(int(self.input_at[i]), int(self.input_at[i + 1]))
        return self.input_start_ns[at], self.input_end_ns[at]

    def keys_of(self, i: int) -> list[tuple[int, int]]:
        at = self.colls_of(i)
        return list(zip(self.coll_step[at].tolist(), self.coll_k[at].tolist()))


def _bounds(counts: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)


# Ranks joined and copied into the columns at once: few numpy calls a rank, a small joined copy.
CHUNK_RANKS = 1024


def _columns(
    packed: list[PackedRank], steps: np.ndarray, colls: np.ndarray, inputs: np.ndarray
) -> list[np.ndarray]:
    """PackedRank's nine columns of every rank, a chunk of ranks at a time, each chunk let go of
    (``packed`` emptied) once copied."""
    layout = _layout(steps, colls, inputs)  # per column: where it starts in a rank, its counts
    out = [np.empty(int(counts.sum()), np.int64) for _, counts in layout]
    filled = [0] * len(out)
    base = np.concatenate(([0], np.cumsum(3 * steps + 4 * colls + 2 * inputs)))
    for first in range(0, len(packed), CHUNK_RANKS):
        last = min(first + CHUNK_RANKS, len(packed))
        flat = np.frombuffer(b"".join([p.data for p in packed[first:last]]), np.int64)
        packed[first:last] = [None] * (last - first)
        at = base[first:last] - base[first]
        for column, (start, counts), done in zip(out, layout, list(filled)):
            got = _gather(flat, at + start[first:last], counts[first:last])
            column[done : done + len(got)] = got
        filled = [f + int(c[first:last].sum()) for f, (_, c) in zip(filled, layout)]
    packed.clear()
    return out


def _layout(steps: np.ndarray, colls: np.ndarray, inputs: np.ndarray):
    """PackedRank's columns, each as (where it starts in each rank's data, each rank's count)."""
    s, c = 3 * steps, 3 * steps + 4 * colls
    return [
        (0 * steps, steps),
        (steps, steps),
        (2 * steps, steps),
        (s, colls),
        (s + colls, colls),
        (s + 2 * colls, colls),
        (s + 3 * colls, colls),
        (c, inputs),
        (c + inputs, inputs),
    ]


def _gather(flat: np.ndarray, first: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """One column of every rank: rank r's ``counts[r]`` values of ``flat`` from ``first[r]`` on."""
    at = _bounds(counts)
    return flat[np.arange(at[-1]) + np.repeat(first - at[:-1], counts)]
