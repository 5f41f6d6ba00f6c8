"""Add tables that bench/clock/run.py wrote to bench/results/clock/clock.md and clock.json.

    python bench/clock/add_table.py OUT_DIR/cpu_2026-12-06_NAMES.md [...]

Each table becomes a row of clock.md's index (newest first), a section (its headings two levels
down) and a key of clock.json (the .json beside it). Its "committed in" reads "this commit": commit
the result. A table already there is refused (its name is the key).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results" / "clock"
SECTIONS_AFTER = "Each section below was a file of its own until issue 33.\n"


def _meta(text: str) -> tuple[str, str, str, str]:
    """(date, machine, command, code at) from a table's header lines."""
    title = re.search(r"^# .*\((\w+), (\d{4}-\d\d-\d\d)\)$", text, re.M)
    machine = re.search(r"^- machine: (.*)$", text, re.M)[1]
    command = re.search(r"^- command: `(.*)`$", text, re.M)[1]
    rev = re.search(r"^- scaldiag git revision: `(\w+)`", text, re.M)
    dirty = "uncommitted changes under scaldiag/" in text
    code = (rev[1][:7] if rev else "?") + (" (+ uncommitted changes)" if dirty else "")
    desc = "2-core VM" if title[1] == "cpu" else machine
    return title[2], desc, command, code


def add(table: Path, md: str, data: dict) -> str:
    name = table.name
    if name.replace(".md", ".json") in data:
        raise SystemExit(f"{name} is in clock.json already")
    text = table.read_text()
    date, machine, command, code = _meta(text)
    short = command if len(command) <= 160 else command[:157] + "..."
    anchor = re.sub(r"[^a-z0-9_-]", "", name.lower())
    row = f"| [{name}](#{anchor}) | {date} | {machine} | `{short}` | {code} | this commit |\n"
    head = "|---|---|---|---|---|---|\n"
    assert head in md, "clock.md's index table not found"
    md = md.replace(head, head + row, 1)
    body = re.sub(r"^(#+) ", r"\1## ", text, flags=re.M)
    section = f"## {name}\n\nAs written by bench/clock/run.py (its headings two levels down).\n\n"
    assert SECTIONS_AFTER in md, "clock.md's sections not found"
    md = md.replace(SECTIONS_AFTER, SECTIONS_AFTER + "\n" + section + body.rstrip() + "\n", 1)
    data[name.replace(".md", ".json")] = json.loads(table.with_suffix(".json").read_text())
    return md


def main(tables: list[str]) -> None:
    md = (RESULTS / "clock.md").read_text()
    data = json.loads((RESULTS / "clock.json").read_text())
    for t in tables:
        md = add(Path(t), md, data)
    # newest first: the keys in the order of the index rows
    order = re.findall(r"^\| \[([^\]]+)\]\(#", md, re.M)
    keys = [o.replace(".md", ".json") for o in order if o.replace(".md", ".json") in data]
    data = {k: data[k] for k in keys + [k for k in data if k not in keys]}
    (RESULTS / "clock.md").write_text(md)
    (RESULTS / "clock.json").write_text(json.dumps(data, indent=1) + "\n")
    print(f"added {len(tables)} table(s) to {RESULTS / 'clock.md'} and clock.json")


if __name__ == "__main__":
    main(sys.argv[1:])
