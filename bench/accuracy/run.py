"""The accuracy benchmark: is the blame right, does the advice help, does the forecast come true?

    python bench/accuracy/run.py --out DIR [--cases input_python,host_to_device,...] [--label L]

For every zoo script (bench/zoo/) and its fixed twin (the same script with --fixed), runs
`scaldiag profile` once on the visible device (one GPU, or the CPU), with the script's own
stopwatch, and prints one table and the summary line

    top-1 A/B; high false alarms C; forecast error median D%; 2-GPU prediction error median E%

- top cause: the first finding that names a cause (trace causes ranked by their gain, then run
  findings); the rank of the planted cause among them;
- the twin's speedup, measured by the scripts' own stopwatches; the top finding's number against
  it (labelled ceiling or forecast by the finding), and whether the fix made the script faster;
- false alarms: high-severity findings on the healthy script, in `profile` and in `analyze` of the
  same trace.
The 2-GPU prediction needs two GPUs (`profile --gpus 1,2`): "n/a" where there is one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# case -> the category of its planted cause (None: healthy)
CASES = {"input_python": "input", "host_to_device": "h2d", "host_launch": "host_overhead", "healthy": None}
# The fix is said to help when the twin is at least this much faster (run-to-run noise of one run).
HELPS = 1.05


def profile(out: Path, case: str, fixed: bool) -> dict:
    label = f"{case}{'_fixed' if fixed else ''}"
    env = {**os.environ, "ZOO_STOPWATCH": str(out / f"{label}.stopwatch.json")}
    cmd = [sys.executable, "-m", "scaldiag", "profile", "--out", str(out / "runs" / label), "--json",
           str(out / f"{label}.json"), str(ROOT / "bench" / "zoo" / f"{case}.py")] + (["--", "--fixed"] if fixed else [])
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    (out / f"{label}.txt").write_text(result.stdout + result.stderr)
    report = json.loads((out / f"{label}.json").read_text())
    report["stopwatch"] = json.loads((out / f"{label}.stopwatch.json").read_text())["samples_per_s"]
    run_dir = next((out / "runs" / label).iterdir())
    analyzed = subprocess.run([sys.executable, "-m", "scaldiag", "analyze", str(run_dir / "trace"), "--json", "-"],
                              capture_output=True, text=True)
    report["analyze"] = json.loads(analyzed.stdout) if analyzed.returncode == 0 else {"findings": []}
    return report


def causes(report: dict) -> list[dict]:
    trace = (report.get("trace_report") or {}).get("findings", [])
    ranked = [f for f in trace if f["category"] != "idle"] + report.get("findings", [])
    return ranked


def row(case: str, planted: str | None, bad: dict, good: dict) -> dict:
    found = causes(bad)
    top = found[0] if found else None
    rank = next((i + 1 for i, f in enumerate(found) if f["category"] == planted), None)
    measured = good["stopwatch"] / bad["stopwatch"]
    # The top finding's forecast where it has one, else its ceiling.
    speedup = (top or {}).get("forecast") or (top or {}).get("predicted_speedup") or {}
    predicted = speedup.get("value") if top and top["category"] == planted else None
    high = [f["id"] for f in bad.get("findings", []) + (bad.get("trace_report") or {}).get("findings", [])
            if f["severity"] == "high"]
    high_analyze = [f["id"] for f in bad["analyze"].get("findings", []) if f["severity"] == "high"]
    return {"case": case, "planted": planted or "none", "top": f"{top['id']} {top['category']}" if top else "none",
            "rank": rank, "measured_twin_speedup": measured, "predicted": predicted,
            "predicted_kind": speedup.get("kind", "ceiling") if predicted else None,
            "error_pct": 100 * (predicted - measured) / measured if predicted else None,
            "fix_helps": measured >= HELPS, "high_profile": high if planted is None else [],
            "high_analyze": high_analyze if planted is None else []}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--label", default="")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in a.cases.split(","):
        rows.append(row(case, CASES[case], profile(out, case, False), profile(out, case, True)))
        print(json.dumps(rows[-1]), flush=True)
    planted = [r for r in rows if r["planted"] != "none"]
    top1 = sum(1 for r in planted if r["rank"] == 1)
    alarms = sum(len(r["high_profile"]) + len(r["high_analyze"]) for r in rows if r["planted"] == "none")
    errors = [abs(r["error_pct"]) for r in planted if r["error_pct"] is not None]
    lines = [f"# Accuracy benchmark {a.label}", "",
             "| case | planted | top cause | rank of planted | twin speedup (measured) | top finding's number |"
             " error | fix helps | high false alarms (profile / analyze) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        number = f"{r['predicted']:.2f}x ({r['predicted_kind']})" if r["predicted"] else "-"
        error = f"{r['error_pct']:+.0f}%" if r["error_pct"] is not None else "-"
        alarms_text = f"{', '.join(r['high_profile']) or '0'} / {', '.join(r['high_analyze']) or '0'}" \
            if r["planted"] == "none" else "-"
        lines.append(f"| {r['case']} | {r['planted']} | {r['top']} | {r['rank'] or 'not found'} | "
                     f"{r['measured_twin_speedup']:.2f}x | {number} | {error} | {'yes' if r['fix_helps'] else 'NO'} |"
                     f" {alarms_text} |")
    summary = (f"top-1 {top1}/{len(planted)}; high false alarms {alarms}; forecast error median "
               f"{statistics.median(errors):.0f}%" if errors else f"top-1 {top1}/{len(planted)}; high false alarms "
               f"{alarms}; forecast error median n/a")
    summary += "; 2-GPU prediction error median n/a (one device)"
    lines += ["", summary]
    (out / "accuracy.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
