"""Grow a real rank trace (fixtures/x2_devset/torch_ddp_sync_2gpu, PyTorch DDP on two H200s) to any
size.

The events of the real trace are repeated in time, each copy shifted by the
trace's span (plus 1 us), ``ProfilerStep#N`` renumbered so every copy's steps
count; names, categories, args and the event mix (kernels, copies, CPU ops,
runtime calls, flows) are the real trace's. Thread names (ph M) are written
once. Rank r of a job of n is grown from the fixture's rank r % 2, with
distributedInfo saying rank r of n.

    python bench/kineto/make_trace.py OUT.pt.trace.json --mb 100 [--rank R --world N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [
    ROOT / "fixtures" / "x2_devset" / "torch_ddp_sync_2gpu" / f"rank{r}.pt.trace.json.gz"
    for r in (0, 1)
]
_STEP = re.compile(r"^ProfilerStep#([0-9]+)$")
_TS, _STEP_HOLE = "\x00TS\x00", "\x00STEP\x00"


def _plain(value):
    """Decimals as floats for json.dumps (ts is written apart, exactly)."""
    if isinstance(value, Decimal):
        return (
            int(value)
            if value == value.to_integral_value() and "." not in str(value)
            else float(value)
        )
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _ns(ts: Decimal) -> int:
    return int(ts * 1000)


class Grower:
    """One source trace, ready to write any number of shifted copies of its events."""

    def __init__(self, source: Path):
        doc = json.loads(gzip.decompress(source.read_bytes()), parse_float=Decimal)
        events = doc.pop("traceEvents")
        self.top = doc
        self.once = [json.dumps(_plain(e)) for e in events if e.get("ph") == "M"]
        timed = [
            e for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), (int, Decimal))
        ]
        starts = [_ns(Decimal(e["ts"])) for e in timed]
        ends = [s + _ns(Decimal(e.get("dur", 0))) for s, e in zip(starts, timed)]
        self.span_ns = max(ends) - min(starts) + 1000
        steps = [int(m.group(1)) for e in timed if (m := _STEP.match(str(e.get("name", ""))))]
        self.steps_per_copy = max(steps) - min(steps) + 1 if steps else 0
        self.templates = []  # (text pieces, ts ns, step number or None)
        for e, start in zip(timed, starts):
            m = _STEP.match(str(e.get("name", "")))
            e = _plain(dict(e, ts=_TS, **({"name": _STEP_HOLE} if m else {})))
            self.templates.append((_template(json.dumps(e)), start, int(m.group(1)) if m else 0))

    def write(self, out: Path, target_bytes: int, rank: int, world: int) -> tuple[int, int]:
        """Copies until the file holds ``target_bytes``; (events, bytes) written."""
        top = dict(self.top)
        top["distributedInfo"] = dict(
            _plain(top.get("distributedInfo", {})), rank=rank, world_size=world
        )
        head = {
            k: _plain(v)
            for k, v in top.items()
            if k not in ("traceName", "displayTimeUnit", "baseTimeNanoseconds")
        }
        tail = {
            k: _plain(top[k])
            for k in ("traceName", "displayTimeUnit", "baseTimeNanoseconds")
            if k in top
        }
        events = 0
        with open(out, "w", encoding="utf-8") as f:
            f.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
            f.write(",\n".join(self.once))
            events += len(self.once)
            copy = 0
            while f.tell() < target_bytes:
                shift, step_shift = copy * self.span_ns, copy * self.steps_per_copy
                f.write(
                    ",\n"
                    + ",\n".join(
                        t.format(ts=_us(start + shift), step=step + step_shift)
                        for t, start, step in self.templates
                    )
                )
                events += len(self.templates)
                copy += 1
            f.write("\n], " + json.dumps(tail)[1:] + "\n")
            size = f.tell()
        return events, size


def _template(text: str) -> str:
    """An event's JSON as a format string: {ts} and {step} where the holes were, every other brace
    doubled."""
    text = text.replace(json.dumps(_TS), "{ts}").replace(
        json.dumps(_STEP_HOLE)[1:-1], "ProfilerStep#{step}"
    )
    return (
        text.replace("{", "{{")
        .replace("}", "}}")
        .replace("{{ts}}", "{ts}")
        .replace("{{step}}", "{step}")
    )


def _us(ns: int) -> str:
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def make(out: Path, mb: float, rank: int = 0, world: int = 2) -> tuple[int, int]:
    return Grower(SOURCES[rank % 2]).write(out, int(mb * 1e6), rank, world)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--mb", type=float, default=100)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world", type=int, default=2)
    args = parser.parse_args()
    events, size = make(args.out, args.mb, args.rank, args.world)
    print(f"{args.out}: {events:,} events, {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
