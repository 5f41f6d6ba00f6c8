"""xprof's verdict beside scaldiag's on the very same traces of an accuracy run.

    python bench/accuracy/xprof_side_by_side.py ACCURACY_OUT_DIR --xprof-python bench/.venv-xprof/bin/python

For every case of a `bench/accuracy/run.py --out ACCURACY_OUT_DIR` run (planted and twin), reads
scaldiag's top cause from its JSON report and asks xprof 2.24.2's `overview_page` for its own
statement on the run's XPlane trace. Prints a markdown table. xprof runs in its own venv.
"""  # noqa: E501

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

XPROF = """
import json, sys
from xprof.convert import raw_to_tool_data
data, _ = raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], "overview_page", {"use_saved_result": False})
found = [t.get("p", {}).get("statement") for t in json.loads(data)]
print(next((s for s in found if s), "(no statement)"))
"""  # noqa: E501


def top_cause(report: dict) -> str:
    trace = (report.get("trace_report") or {}).get("findings", [])
    found = [f for f in trace if f["category"] != "idle"] + report.get("findings", [])
    return (
        f"{found[0]['id']} {found[0]['title']}"
        if found
        else "no finding (" + (report.get("trace_report") or {}).get("verdict", "")[:60] + ")"
    )


def xprof_statement(python: str, trace: Path) -> str:
    done = subprocess.run(
        [python, "-c", XPROF, str(trace)], capture_output=True, text=True, timeout=300
    )
    return (
        done.stdout.strip().splitlines()[-1]
        if done.returncode == 0 and done.stdout.strip()
        else (
            "(xprof failed:"
            f" {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode})"
        )
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--xprof-python", required=True)
    a = p.parse_args()
    out = Path(a.out)
    print("| run | scaldiag's top cause | xprof overview_page statement |\n|---|---|---|")
    for report_file in sorted(out.glob("*.json")):
        if report_file.name.endswith(".stopwatch.json"):
            continue
        label = report_file.stem
        traces = sorted((out / "runs" / label).glob("*/trace/plugins/profile/*/*.xplane.pb"))
        if not traces:
            continue
        statement = xprof_statement(a.xprof_python, traces[-1]).replace("|", "/")
        print(
            f"| {label} | {top_cause(json.loads(report_file.read_text()))} | {statement} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
