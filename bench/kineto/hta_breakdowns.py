"""HTA's side of the comparison: load a directory of rank traces, then its temporal and idle-time
breakdowns.

Runs in HTA's own venv (bench/.venv-hta: HolisticTraceAnalysis 0.5.0, a benchmark
opponent, never a dependency of scaldiag):

    bench/.venv-hta/bin/python bench/kineto/hta_breakdowns.py TRACE_DIR
"""

import sys

from hta.trace_analysis import TraceAnalysis


def main() -> None:
    analyzer = TraceAnalysis(trace_dir=sys.argv[1])
    temporal = analyzer.get_temporal_breakdown(visualize=False)
    idle, _ = analyzer.get_idle_time_breakdown(visualize=False)
    print(f"temporal breakdown rows: {len(temporal)}; idle breakdown rows: {len(idle)}")


if __name__ == "__main__":
    main()
