"""Plain, slow, obvious reading of XPlane protos: the independent reference for tests.

The proto classes are TensorFlow's own generated ``xplane_pb2`` where
TensorFlow is installed (``make test`` installs it), so scaldiag's schema
and decoder are checked against the format's owner, not against themselves.
Without TensorFlow, scaldiag's schema is the fallback.
"""

from __future__ import annotations


def xspace_class():
    """TensorFlow's XSpace message class, else scaldiag's (schema.py)."""
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2

        return xplane_pb2.XSpace
    except ImportError:
        from scaldiag.readers.xplane.schema import XSpace

        return XSpace


def load_space(data: bytes):
    space = xspace_class()()
    space.ParseFromString(data)
    return space


def stat_value(plane, stat):
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return plane.stat_metadata[stat.ref_value].name
    return getattr(stat, kind) if kind else None


def events(space, plane_name: str):
    """Every event of the named plane as a dict, absolute times in ns."""
    out = []
    for plane in space.planes:
        if plane.name != plane_name:
            continue
        for line in plane.lines:
            for e in line.events:
                start = line.timestamp_ns + e.offset_ps / 1000
                out.append(
                    {
                        "line": line.name,
                        "name": plane.event_metadata[e.metadata_id].name,
                        "start_ns": start,
                        "end_ns": start + e.duration_ps / 1000,
                        "stats": {
                            plane.stat_metadata[s.metadata_id].name: stat_value(plane, s)
                            for s in e.stats
                        },
                    }
                )
    return out


def union_length_in(intervals, lo, hi):
    """Total length of the union of (start, end) pairs clipped to [lo, hi)."""
    clipped = sorted((max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo))
    total, cur_s, cur_e = 0.0, None, None
    for s, e in clipped:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + ((cur_e - cur_s) if cur_e is not None else 0.0)
