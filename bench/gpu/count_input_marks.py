"""Count the input annotations (``scaldiag_input``) in a run's trace, per host line, with the steps.

    python3 bench/gpu/count_input_marks.py RUN_DIR

A functional check of input_marks on a real backend: the annotation must be in the trace window
(Keras-on-JAX array batches: one per batch fetched in it), and the run's steps all recorded.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from scaldiag.collect.frameworks.input_marks import INPUT_MARKER  # noqa: E402
from scaldiag.readers import read_trace  # noqa: E402
from scaldiag.record.reader import read_steps  # noqa: E402


def input_marks(trace_dir: Path) -> list[tuple[str, str, int]]:
    """(plane, line, number of ``scaldiag_input`` events) of each host line that has any."""
    _, trace = read_trace(trace_dir)
    found = []
    for plane in trace.host_planes:
        if INPUT_MARKER not in plane.event_names:
            continue
        marker = plane.event_names.index(INPUT_MARKER)
        for line in plane.lines:
            count = int(np.count_nonzero(line.name_id == marker))
            if count:
                found.append((plane.name, line.name, count))
    return found


if __name__ == "__main__":
    run = Path(sys.argv[1])
    steps = read_steps(run / "steps.jsonl")
    print(f"steps recorded: {len(steps)}, traced: {sum(1 for s in steps if s['traced'])}")
    for plane, line, count in input_marks(run / "trace"):
        print(f"{plane} line {line!r}: {count} {INPUT_MARKER} events")
