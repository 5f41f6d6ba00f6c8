"""scaldiag's numbers against the script's own stopwatch, one line per run:

    python bench/accounting/compare.py RUN_DIR STOPWATCH_JSON [LABEL]

Prints throughput (scaldiag / stopwatch), the accounting (parts and their
sum against the wall time), the profiler inflation and the corrected
breakdown's step time against the untraced step. Exit 0 always: a report.
"""

import json
import sys

from scaldiag.pipeline import diagnose_run


def main() -> None:
    run_dir, stopwatch_path = sys.argv[1], sys.argv[2]
    label = sys.argv[3] if len(sys.argv) > 3 else run_dir
    watch = json.load(open(stopwatch_path))
    a = diagnose_run(run_dir).analysis
    s = a.steps
    ours = s.samples_per_s if s else None
    ratio = ours / watch["samples_per_s"] if ours else float("nan")
    acc = a.accounting
    parts = "; ".join(f"{p.part} {p.seconds:.2f}" for p in acc.parts) if acc else "-"
    total = sum(p.seconds for p in acc.parts) if acc else float("nan")
    unit = a.trace.units[0] if a.trace and a.trace.units else None
    corrected = unit.step_time_ms.mean if unit else float("nan")
    print(
        json.dumps(
            {
                "label": label,
                "scaldiag_samples_per_s": ours,
                "stopwatch_samples_per_s": watch["samples_per_s"],
                "ratio": ratio,
                "steady": s.steady if s else None,
                "recorded": s.recorded if s else None,
                "excluded": {k: len(v) for k, v in s.excluded.items()} if s else None,
                "invariant_holds": bool(
                    s and s.recorded == s.steady + sum(len(v) for v in s.excluded.values())
                ),
                "step_ms": s.step_time_ms.mean if s else None,
                "traced_step_ms": s.traced_step_ms if s else None,
                "profiler_inflation": s.profiler_inflation if s else None,
                "corrected_trace_step_ms": corrected,
                "corrected_shares_pct": (
                    {c: round(t.exclusive_pct, 1) for c, t in unit.categories.items()}
                    if unit
                    else None
                ),
                "wall_s": acc.wall_s if acc else None,
                "parts_sum_s": total,
                "goodput": acc.goodput if acc else None,
                "parts": parts,
                "global_batch": a.training.get("global_batch"),
                "batch_source": a.training.get("batch_source"),
                "input_free_ms": a.input_cost.input_free_ms if a.input_cost else None,
                "input_cost_ms": a.input_cost.cost_ms if a.input_cost else None,
                "input_cost_pct": a.input_cost.share_pct if a.input_cost else None,
                "input_cost_significant": a.input_cost.significant if a.input_cost else None,
                "input_free_skipped": a.training.get("input_free_skipped"),
                "stopwatch_step_ms": 1e3 * watch["batch"] / watch["samples_per_s"],
            }
        )
    )


if __name__ == "__main__":
    main()
