"""Make a large, realistic XPlane file by tiling the real H200 trace in time.

Every line's events are repeated ``copies`` times, each copy shifted by the
trace's span; step markers get fresh step numbers so every copy's steps
count. Names, stats and nesting are those of the real trace.

    python bench/analyze/make_large_trace.py OUT.xplane.pb [--copies 200]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scaldiag.readers.xplane.schema import XSpace

SOURCE = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "gpu"
    / "h200x2_jax_dataparallel.xplane.pb"
)


def tile(space: XSpace, copies: int) -> XSpace:
    span_ps = _span_ps(space)
    for plane in space.planes:
        step_ids = {k for k, m in plane.stat_metadata.items() if m.name == "step_num"}
        for line in plane.lines:
            originals = list(line.events)
            steps_per_copy = (
                max(
                    (
                        s.int64_value
                        for e in originals
                        for s in e.stats
                        if s.metadata_id in step_ids
                    ),
                    default=0,
                )
                + 1
            )
            for k in range(1, copies):
                for event in originals:
                    copy = line.events.add()
                    copy.CopyFrom(event)
                    copy.offset_ps = event.offset_ps + k * span_ps
                    for stat in copy.stats:
                        if stat.metadata_id in step_ids:
                            stat.int64_value += k * steps_per_copy
    return space


def _span_ps(space: XSpace) -> int:
    ends = [
        line.timestamp_ns * 1000 + e.offset_ps + e.duration_ps
        for p in space.planes
        for line in p.lines
        for e in line.events
    ]
    return max(ends) + 1_000_000  # a 1 us gap between copies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--copies", type=int, default=200)
    args = parser.parse_args()
    space = XSpace()
    space.ParseFromString(SOURCE.read_bytes())
    tile(space, args.copies)
    data = space.SerializeToString()
    Path(args.out).write_bytes(data)
    events = sum(len(line.events) for p in space.planes for line in p.lines)
    print(f"{args.out}: {events} events, {len(data) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
