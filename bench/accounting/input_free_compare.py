"""The input-free step (scaldiag's clone on one cached batch) against a twin fed without the slow
input.

    python bench/accounting/input_free_compare.py COMPARE_JSONL PLANTED:TWIN [PLANTED:TWIN ...]

COMPARE_JSONL: lines of bench/accounting/compare.py, labels "<kind>_r<round>". For each
pair and round: the planted run's steady step and input-free step, the twin's step by
its own stopwatch (the same model without the slow input), the error of the input-free
step against the twin's step, and the input share scaldiag counts against the share the
twin shows (1 - twin step / planted step). Prints a Markdown table and a summary line.
"""

import json
import statistics
import sys


def main() -> None:
    rows = {r["label"]: r for r in map(json.loads, open(sys.argv[1]))}
    print(
        "| planted | twin | round | planted step ms (stopwatch) | input-free step ms | twin step ms"
        " (stopwatch) | error of input-free vs twin | input share counted | share by the twin |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    errors = []
    for pair in sys.argv[2:]:
        planted, twin = pair.split(":")
        for label in sorted(k for k in rows if k.startswith(planted + "_r")):
            r = label.rsplit("_r", 1)[1]
            p, t = rows[label], rows.get(f"{twin}_r{r}")
            if t is None or p.get("input_free_ms") is None:
                print(
                    f"| {planted} | {twin} | {r} | - | {p.get('input_free_skipped') or '-'} | - | -"
                    " | - | - |"
                )
                continue
            error = p["input_free_ms"] / t["stopwatch_step_ms"] - 1
            errors.append(abs(error))
            twin_share = 100 * (1 - t["stopwatch_step_ms"] / p["stopwatch_step_ms"])
            print(
                f"| {planted} | {twin} | {r} | {p['stopwatch_step_ms']:.2f} |"
                f" {p['input_free_ms']:.2f} | {t['stopwatch_step_ms']:.2f} | {error:+.1%} |"
                f" {p['input_cost_pct']:.1f}%"
                f" ({'counted' if p['input_cost_significant'] else 'within noise'}) |"
                f" {twin_share:.1f}% |"
            )
    if errors:
        print(
            f"\ninput-free step vs twin: median |error| {statistics.median(errors):.1%}, "
            f"worst {max(errors):.1%} over {len(errors)} pairs"
        )


if __name__ == "__main__":
    main()
