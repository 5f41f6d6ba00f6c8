"""Build small XPlane files by hand, for tests that need exact, known events."""

from __future__ import annotations

from scaldiag.readers.xplane.schema import XSpace


class PlaneBuilder:
    def __init__(self, space, name: str):
        self.plane = space.planes.add(name=name)
        self._events: dict[str, int] = {}
        self._stats: dict[str, int] = {}

    def stat_id(self, name: str) -> int:
        if name not in self._stats:
            key = len(self._stats) + 1
            self.plane.stat_metadata[key].id = key
            self.plane.stat_metadata[key].name = name
            self._stats[name] = key
        return self._stats[name]

    def event_id(self, name: str) -> int:
        if name not in self._events:
            key = len(self._events) + 1
            self.plane.event_metadata[key].id = key
            self.plane.event_metadata[key].name = name
            self._events[name] = key
        return self._events[name]

    def add_stats(self, event, stats: dict) -> None:
        """Inline stat values, typed by their Python type (str, float, else int64)."""
        for key, value in stats.items():
            stat = event.stats.add(metadata_id=self.stat_id(key))
            if isinstance(value, str):
                stat.str_value = value
            elif isinstance(value, float):
                stat.double_value = value
            else:
                stat.int64_value = value

    def line(self, name: str, timestamp_ns: int = 0):
        return self.plane.lines.add(
            id=len(self.plane.lines) + 1, name=name, timestamp_ns=timestamp_ns
        )

    def event(
        self, line, name: str, start_ns: int, dur_ns: int, interned: dict | None = None, **stats
    ):
        """Add an event; ``stats`` are inline values, ``interned`` ones go through ref_value."""
        event = line.events.add(
            metadata_id=self.event_id(name),
            offset_ps=(start_ns - line.timestamp_ns) * 1000,
            duration_ps=dur_ns * 1000,
        )
        self.add_stats(event, stats)
        for key, value in (interned or {}).items():
            event.stats.add(metadata_id=self.stat_id(key), ref_value=self.stat_id(value))
        return event


def new_space() -> XSpace:
    space = XSpace()
    space.hostnames.append("testhost")
    return space


def write(space: XSpace, path) -> str:
    path.write_bytes(space.SerializeToString())
    return str(path)
