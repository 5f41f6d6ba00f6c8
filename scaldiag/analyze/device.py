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
    category: np.ndarray        # object array of category names
    memcpy_details: np.ndarray  # object array, None where absent

    def sets(self) -> dict[str, iv.IntervalSet]:
        return {c: iv.union(self.start_ns[m], self.end_ns[m])
                for c in DEVICE_CATEGORIES if (m := self.category == c).any()}

    def of(self, category: str) -> np.ndarray:
        return self.category == category


def device_events(plane: Plane) -> DeviceEvents:
    starts, ends, cats, details = [], [], [], []
    cache: dict[tuple, str] = {}
    for line in plane.lines:
        if not len(line):
            continue
        tf_op, hlo_op, hlo_cat = line.stat("tf_op"), line.stat("hlo_op"), line.stat("hlo_category")
        line_cats = np.empty(len(line), dtype=object)
        for i, key in enumerate(zip(line.name_id.tolist(), tf_op, hlo_op, hlo_cat)):
            found = cache.get(key)
            if found is None:
                found = cache[key] = device_category(plane.event_names[key[0]], *key[1:])
            line_cats[i] = found
        starts.append(line.start_ns)
        ends.append(line.end_ns)
        cats.append(line_cats)
        details.append(line.stat("memcpy_details"))
    if not starts:
        empty = np.empty(0, np.int64)
        return DeviceEvents(empty, empty, np.empty(0, object), np.empty(0, object))
    return DeviceEvents(np.concatenate(starts), np.concatenate(ends), np.concatenate(cats), np.concatenate(details))
