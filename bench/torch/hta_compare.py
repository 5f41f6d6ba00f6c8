"""HolisticTraceAnalysis's temporal and idle-time breakdown of a Kineto trace directory, for a
side-by-side
with `scaldiag analyze` on the same files. HTA is not a scaldiag dependency: run it from its own
venv,

    python3 -m venv /tmp/hta && /tmp/hta/bin/pip install HolisticTraceAnalysis
    /tmp/hta/bin/python bench/torch/hta_compare.py DIR_OF_PT_TRACE_JSON     # uncompressed *.json files
"""  # noqa: E501

import sys

from hta.trace_analysis import TraceAnalysis


def main() -> None:
    analysis = TraceAnalysis(trace_dir=sys.argv[1])
    print(analysis.get_temporal_breakdown(visualize=False).to_string())
    ranks = sorted(analysis.t.traces)  # every rank (HTA's default is rank 0 alone)
    idle = analysis.get_idle_time_breakdown(ranks=ranks, visualize=False)
    print((idle[0] if isinstance(idle, tuple) else idle).to_string())


if __name__ == "__main__":
    main()
