"""The table of every rank's arrival at each collective matched on every rank (``arrivals``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scaldiag.analyze.nodes.columns import JobEvents


@dataclass(frozen=True)
class Cells:
    """Every rank's own collectives that were matched on every rank, in rank order and, within a
    rank, in
    the rank's own order: its index in the job (``rank``), the collective's column of the table, the
    rank's own arrival and end."""

    rank: np.ndarray
    col: np.ndarray
    arrive_ns: np.ndarray
    end_ns: np.ndarray


@dataclass(frozen=True)
class ArrivalTable:
    """The arrivals at the collectives matched on every rank: one row a rank name (a later rank of
    the
    same name replaces an earlier one's arrival), one column a collective; per column its step, its
    last and first arrival and the sum of its arrivals' distances from the first (integer ns: the
    mean of the others is exact)."""

    count: int  # collectives matched on every rank (columns)
    names: int  # rank names (rows)
    at_ns: np.ndarray  # (names, count): each name's arrival
    step: np.ndarray  # (count,)
    last_ns: np.ndarray
    first_ns: np.ndarray
    above_first_ns: np.ndarray  # sum over the names of (arrival - first arrival)
    cells: Cells
    name_of_cell: np.ndarray  # each cell's row


EMPTY_I64 = np.empty(0, np.int64)


def arrival_table(job: JobEvents) -> ArrivalTable:
    """The table of every rank's arrival at each collective matched on every rank (steps numbered >=
    0)."""
    name_ids: dict[str, int] = {}
    name_of_rank = np.array([name_ids.setdefault(r, len(name_ids)) for r in job.ranks], np.int64)
    rank_of = np.repeat(np.arange(len(job.ranks), dtype=np.int64), np.diff(job.coll_at))
    name_of = name_of_rank.reshape(-1)[rank_of]
    steps, ks, arrive, end = job.coll_step, job.coll_k, job.arrive_ns, job.end_ns
    numbered = steps >= 0
    rank_of, name_of, steps, ks, arrive, end = (
        _kept(a, numbered) for a in (rank_of, name_of, steps, ks, arrive, end)
    )
    names = len(name_ids)
    if len(steps):
        keys, key_of = np.unique(np.stack([steps, ks]), axis=1, return_inverse=True)
        key_of = key_of.reshape(-1)
    else:
        keys, key_of = np.empty((2, 0), np.int64), EMPTY_I64
    # Each (name, collective) once: its last rank's arrival (as a dict filled in rank order keeps).
    cell = name_of * max(1, keys.shape[1]) + key_of
    last_of_cell = len(cell) - 1 - np.unique(cell[::-1], return_index=True)[1]
    named = np.zeros(len(cell), bool)
    named[last_of_cell] = True
    on_every = np.bincount(key_of[named], minlength=keys.shape[1]) == names
    col_of_key = np.cumsum(on_every) - 1
    count = int(on_every.sum())
    at = np.zeros((names, count), np.int64)
    keep = named & on_every[key_of]
    at[name_of[keep], col_of_key[key_of[keep]]] = arrive[keep]
    matched = on_every[key_of]
    cells = Cells(
        _kept(rank_of, matched),
        col_of_key[_kept(key_of, matched)],
        _kept(arrive, matched),
        _kept(end, matched),
    )
    first = at.min(axis=0) if names else EMPTY_I64
    return ArrivalTable(
        count,
        names,
        at,
        keys[0][on_every],
        at.max(axis=0) if names else EMPTY_I64,
        first,
        (at - first).sum(axis=0) if names else EMPTY_I64,
        cells,
        _kept(name_of, matched),
    )


def _kept(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``values[keep]``, without its copy where ``keep`` keeps every row (the usual job: every
    collective numbered and matched on every rank): a copy is a column a cell."""
    return values if keep.all() else values[keep]
