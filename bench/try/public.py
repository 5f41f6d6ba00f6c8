"""`scaldiag try` on public scripts nobody here wrote (issue 47): helpers for
bench/gpu/run_try_public.sh and the CPU section of bench/results/try.md.

    python bench/try/public.py has REPORT_JSON FINDING      # exit 0 where the report has it
    python bench/try/public.py run-dir REPORT_JSON          # the run directory profile wrote
    python bench/try/public.py summary --name N --source S --commit C --path P --finding F
        --try-json FILE --report REPORT_JSON --sha-before FILE --sha-after FILE
        [--args "..."] [--card "..."] [--load "..."] [--command "..."] [--line FILE]

`summary` prints a short markdown section: the measured speed-up with its range and pairs, the
forecast (only where it is this fix's) and the ceiling, the pairs left out, what stopped the try,
and whether the script's working directory stayed byte-identical (its files' sha256 listed
before and after `try`, the listing made by the caller). Nothing here measures anything.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _load(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"public.py: cannot read {path}: {e}") from None


def _findings(report: dict) -> list[dict]:
    """The run's findings and its trace's (SD101 and SD105 are the trace's: report --json keeps them
    under trace_report)."""
    trace = report.get("trace_report") or {}
    both = (report.get("findings") or []) + (trace.get("findings") or [])
    return [f for f in both if isinstance(f, dict)]


def _ids(report: dict) -> list[str]:
    return [f.get("id") for f in _findings(report)]


def _x(v) -> str:
    return "none" if v is None else f"{v:.2f}x"


def _sets(sets: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sets.items()) or "(nothing)"


def _identical(before: str, after: str) -> str:
    a, b = Path(before).read_text(), Path(after).read_text()
    n = len([ln for ln in a.splitlines() if ln.strip()])
    if a == b:
        return f"yes ({n} file(s), sha256 of each the same before and after `try`)"
    gone = sorted(set(a.splitlines()) ^ set(b.splitlines()))
    return f"NO: {len(gone)} lines differ: " + "; ".join(gone[:6])


def summary(a: argparse.Namespace) -> str:
    t, rep = _load(a.try_json), _load(a.report)
    s = t.get("speedup") or {}
    f = next((x for x in _findings(rep) if x.get("id") == a.finding), {})
    measured = (
        f"{s['median']:.2f}x (range {s['low']:.2f}-{s['high']:.2f}, {s['pairs']} pairs;"
        f" {'resolved' if s.get('resolved') else 'NOT resolved: inside the noise'})"
        if s
        else "no pair measured"
    )
    lines = [
        f"#### {a.name}: {a.finding} ({f.get('title', '?')})",
        "",
        f"- script: `{a.path}` of {a.source} at {a.commit[:7]} (stored unmodified),"
        f" arguments `{a.args or '(none)'}`",
    ]
    if a.card:
        lines.append(f"- card: {a.card}")
    if a.load:
        lines.append(f"- load (`/proc/loadavg`): {a.load}")
    if a.command:
        lines.append(f"- command: `{a.command}`")
    lines += [
        f"- fix applied: {_sets(t.get('sets') or {})}",
        f"- measured: {measured}",
        f"- forecast: {_x(t.get('forecast'))}"
        + (f" ({t['no_forecast']})" if t.get("no_forecast") else "")
        + f"; ceiling {_x(t.get('ceiling'))}",
        f"- left out: {'; '.join(t.get('left_out') or []) or 'none'};"
        f" stopped: {t.get('stopped') or 'no (rounds done)'}",
        f"- user's folder byte-identical after try: {_identical(a.sha_before, a.sha_after)}",
    ]
    if a.line and Path(a.line).exists():
        printed = Path(a.line).read_text().strip()
        lines += ["- printed:", "", "```", printed, "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/try/public.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("has")
    h.add_argument("report")
    h.add_argument("finding")
    r = sub.add_parser("run-dir")
    r.add_argument("report")
    m = sub.add_parser("summary")
    for k in ("name", "source", "commit", "path", "finding", "try-json", "report"):
        m.add_argument(f"--{k}", required=True)
    for k in ("sha-before", "sha-after"):
        m.add_argument(f"--{k}", required=True)
    for k in ("args", "card", "load", "command", "line"):
        m.add_argument(f"--{k}", default="")
    a = p.parse_args(argv)
    if a.cmd == "has":
        ids = _ids(_load(a.report))
        print(f"findings: {', '.join(i for i in ids if i) or 'none'}")
        return 0 if a.finding in ids else 1
    if a.cmd == "run-dir":
        print(_load(a.report)["run_dir"])
        return 0
    sys.stdout.write(summary(a))
    return 0


if __name__ == "__main__":
    sys.exit(main())
