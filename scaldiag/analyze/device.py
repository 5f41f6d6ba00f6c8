"""Device planes: the time each GPU spends per category, and its copies."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scaldiag.analyze import intervals as iv
from scaldiag.analyze.categories import DEVICE_CATEGORIES, device_category
from scaldiag.trace import Plane


@dataclass(frozen=True)
class DeviceEvents:
    """One device's events, flattened over its streams, with their category."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    category: np.ndarray  # object array of category names
    memcpy_details: np.ndarray  # object array, None where absent

    def sets(self) -> dict[str, iv.IntervalSet]:
        return {
            c: iv.union(self.start_ns[m], self.end_ns[m])
            for c in DEVICE_CATEGORIES
            if (m := self.category == c).any()
        }

    def of(self, category: str) -> np.ndarray:
        return self.category == category


def device_events(plane: Plane) -> DeviceEvents:
    starts, ends, cats, details = [], [], [], []
    cache: dict[tuple, str] = {}
    for line in plane.lines:
        if not len(line):
            continue
        starts.append(line.start_ns)
        ends.append(line.end_ns)
        cats.append(_categories(plane, line, cache))
        details.append(line.stat("memcpy_details"))
    if not starts:
        empty = np.empty(0, np.int64)
        return DeviceEvents(empty, empty, np.empty(0, object), np.empty(0, object))
    return DeviceEvents(
        np.concatenate(starts), np.concatenate(ends), np.concatenate(cats), np.concatenate(details)
    )


def _categories(plane: Plane, line, cache: dict[tuple, str]) -> np.ndarray:
    """Each event's category, decided once per distinct (name, tf_op, hlo_op, hlo_category)."""
    key = line.name_id.astype(np.int64)
    distinct: list[list] = [list(range(len(plane.event_names)))]
    for stat in ("tf_op", "hlo_op", "hlo_category"):
        codes, values = _factorize(line.stat(stat) if stat in line.stats else None, len(line))
        distinct.append(values)
        key = key * len(values) + codes  # one integer per combination (few distinct values each)
    if np.prod([float(len(v)) for v in distinct]) >= 2.0**62:  # too many to number: one at a time
        return _categories_by_event(plane, line, cache)
    unique, inverse = np.unique(key, return_inverse=True)
    table = np.empty(len(unique), dtype=object)
    for j, k in enumerate(unique.tolist()):
        parts = []
        for values in reversed(distinct):
            k, code = divmod(k, len(values))
            parts.append(values[code])
        name_id, tf_op, hlo_op, hlo_cat = reversed(parts)
        found = cache.get((name_id, tf_op, hlo_op, hlo_cat))
        if found is None:
            found = cache[(name_id, tf_op, hlo_op, hlo_cat)] = device_category(
                plane.event_names[name_id], tf_op, hlo_op, hlo_cat
            )
        table[j] = found
    return table[inverse.reshape(-1)]


def _categories_by_event(plane: Plane, line, cache: dict[tuple, str]) -> np.ndarray:
    tf_op, hlo_op, hlo_cat = line.stat("tf_op"), line.stat("hlo_op"), line.stat("hlo_category")
    line_cats = np.empty(len(line), dtype=object)
    for i, key in enumerate(zip(line.name_id.tolist(), tf_op, hlo_op, hlo_cat)):
        found = cache.get(key)
        if found is None:
            found = cache[key] = device_category(plane.event_names[key[0]], *key[1:])
        line_cats[i] = found
    return line_cats


def _factorize(column: np.ndarray | None, n: int) -> tuple[np.ndarray, list]:
    """(code per event, distinct values) of an object column; None (absent) is a value too."""
    if column is None:
        return np.zeros(n, np.int64), [None]
    values = column.tolist()
    index = {v: i for i, v in enumerate(dict.fromkeys(values))}  # in order of first appearance
    return np.fromiter(map(index.__getitem__, values), np.int64, n), list(index)
