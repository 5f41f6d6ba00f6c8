"""A job's ranks' evidence as the merge holds it: one int64 array a rank (``PackedRank``), the
job as flat columns (``JobEvents``)."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
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
        is emptied as it is read (``gathered``)."""
        return cls.gathered(_emptied(packed), len(packed))

    @classmethod
    def gathered(cls, ranks: Iterable[PackedRank], expected: int = 0) -> JobEvents:
        """The job's columns from its ranks as they come (the pipeline's, as each rank is read;
        ``expected``: about how many, to size the columns once): a chunk of CHUNK_RANKS ranks'
        evidence copied into the columns and the ranks let go, so that no rank's packed evidence
        is held beside the others' (about 0.5 KB a rank of Python's small objects, whose freed
        memory numpy's columns cannot reuse) nor all of it beside the columns."""
        node_ids: dict[str, int] = {}
        node_of, counts = array("q"), array("q")  # per rank: 8 bytes, not a list's int object
        names: list[str] = []
        numbered: dict[int, str] = {}
        filling = _Filling(expected)
        chunk: list[bytes] = []
        for p in ranks:
            if p.steps_numbered_by:
                numbered[len(names)] = p.steps_numbered_by
            node_of.append(node_ids.setdefault(p.node, len(node_ids)))
            names.append(p.rank)
            counts.extend((p.steps, p.collectives, p.inputs))
            chunk.append(p.data)
            if len(chunk) == CHUNK_RANKS:
                filling.add(chunk, counts)
        filling.add(chunk, counts)
        steps, colls, inputs = np.frombuffer(counts, np.int64).reshape(-1, 3).T.copy()
        at = [_bounds(c) for c in (steps, colls, inputs)]
        step_num, step_start, step_end, key_step, key_k, arrive, end, in_start, in_end = (
            filling.columns()
        )
        return cls(
            list(node_ids),
            np.frombuffer(node_of, np.int64).copy(),
            names,
            numbered,
            *(at[0], step_num, step_start, step_end),
            *(at[1], key_step, key_k, arrive, end),
            *(at[2], in_start, in_end),
        )

    def shifted(self, shift_of_node_ns: np.ndarray, in_place: bool = False) -> JobEvents:
        """Every rank's times less its node's shift (its clock minus node 0's). ``in_place``: the
        times moved in these columns (the merge's own, made for it), not copied: no second set of
        six columns (0.24 KB a rank of the grown job)."""
        if not shift_of_node_ns.any():
            return self
        per_rank = shift_of_node_ns[self.node_of]

        def moved(at: np.ndarray, values: np.ndarray) -> np.ndarray:
            by = np.repeat(per_rank, np.diff(at))
            return np.subtract(values, by, out=values if in_place else None)

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


def _emptied(packed: list) -> Iterator[PackedRank]:
    """``packed``'s ranks in order, each let go of as it is given."""
    for i in range(len(packed)):
        p, packed[i] = packed[i], None
        yield p
    packed.clear()


class _Filling:
    """PackedRank's nine columns of every rank, filled a chunk of ranks at a time: sized once from
    the first chunk and the ranks expected (grown by half where more come)."""

    def __init__(self, expected: int) -> None:
        self.expected, self.ranks = expected, 0
        self.out = [EMPTY_I64] * 9
        self.filled = [0] * 9

    def add(self, chunk: list[bytes], counts: array) -> None:
        """The chunk's ranks (their data; ``counts``: every rank's so far, the chunk's last)
        copied into the columns; ``chunk`` emptied."""
        if not chunk:
            return
        first = self.ranks
        self.ranks += len(chunk)
        flat = np.frombuffer(b"".join(chunk), np.int64)
        chunk.clear()
        steps, colls, inputs = np.frombuffer(counts, np.int64)[3 * first :].reshape(-1, 3).T
        at = np.concatenate(([0], np.cumsum(3 * steps + 4 * colls + 2 * inputs)[:-1]))
        for c, (start, n) in enumerate(_layout(steps, colls, inputs)):
            got = _gather(flat, at + start, n)
            self._room(c, len(got))
            self.out[c][self.filled[c] : self.filled[c] + len(got)] = got
            self.filled[c] += len(got)

    def _room(self, c: int, more: int) -> None:
        need = self.filled[c] + more
        if need <= len(self.out[c]):
            return
        ahead = max(0, self.expected - self.ranks)  # the ranks still to come, by the estimate
        size = max(need + need * ahead // max(1, self.ranks) + 16, len(self.out[c]) * 3 // 2)
        grown = np.empty(size, np.int64)
        grown[: self.filled[c]] = self.out[c][: self.filled[c]]
        self.out[c] = grown

    def columns(self) -> list[np.ndarray]:
        """The nine columns, each as long as what was filled (a copy only where more than a
        sixteenth of it would be room left unused)."""
        out, self.out = self.out, []
        return [
            col[:n] if len(col) - n <= len(col) // 16 else col[:n].copy()
            for col, n in zip(out, self.filled)
        ]


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
