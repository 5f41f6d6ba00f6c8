"""Which parser reads Kineto JSON: maintained packages against scaldiag's scanner, on one trace.

Each candidate, in a fresh process (peak RSS from wait4), gets from every complete
event what the reader keeps (name, cat, ts, dur, pid, tid, args.device, args.stream,
args.bytes), ts as exact nanoseconds where the parser can give them. The packages
are benchmark opponents, in their own venv (never dependencies of scaldiag):

    python -m venv bench/.venv-parsers
    bench/.venv-parsers/bin/pip install numpy protobuf orjson msgspec pysimdjson ijson
    bench/.venv-parsers/bin/python bench/kineto/parsers.py TRACE.json [--only NAME]

Prints a markdown table (docs/pytorch.md, "Reading Kineto traces", quotes it).
"""

import argparse
import os
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WANTED = ("name", "cat", "ts", "dur", "pid", "tid")
ARGS = ("device", "stream", "bytes")


def _rows_from_dicts(events) -> int:
    kept = 0
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "X":
            args = e.get("args") or {}
            _ = (
                [e.get(k) for k in WANTED],
                [args.get(k) for k in ARGS],
                int(Decimal(str(e.get("ts"))) * 1000),
            )
            kept += 1
    return kept


def stdlib(path: Path) -> int:
    import json

    return _rows_from_dicts(json.loads(path.read_bytes(), parse_float=Decimal)["traceEvents"])


def orjson_(path: Path) -> int:
    import orjson  # floats only: ts past 2**53 ns are not exact

    return _rows_from_dicts(orjson.loads(path.read_bytes())["traceEvents"])


def msgspec_(path: Path) -> int:
    import msgspec

    class Args(msgspec.Struct):
        device: int | None = None
        stream: int | None = None
        bytes: int | None = None

    class Event(msgspec.Struct):  # only these fields are decoded; the rest is skipped in C
        ph: str | None = None
        name: str | None = None
        cat: str | None = None
        ts: Decimal | None = None  # exact: a Decimal object per event
        dur: Decimal | None = None
        pid: int | str | None = None
        tid: int | str | None = None
        args: Args | None = None

    class Doc(msgspec.Struct):
        traceEvents: list[Event]

    doc = msgspec.json.decode(path.read_bytes(), type=Doc)
    return sum(1 for e in doc.traceEvents if e.ph == "X" and int(e.ts * 1000) is not None)


def simdjson_(path: Path) -> int:
    import simdjson  # a lazy document over the whole text; numbers as doubles

    doc = simdjson.Parser().parse(path.read_bytes())
    kept = 0
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            args = e.get("args") or {}
            _ = [e.get(k) for k in WANTED], [args.get(k) for k in ARGS]
            kept += 1
    return kept


def ijson_(path: Path) -> int:
    import ijson  # incremental, yajl2_c backend: bounded memory, a dict per event, Decimals exact

    with open(path, "rb") as f:
        return _rows_from_dicts(ijson.items(f, "traceEvents.item", use_float=False))


def scaldiag_scanner(path: Path) -> int:
    sys.path.insert(0, str(ROOT))
    from scaldiag.readers import _kineto_scan
    from scaldiag.readers.kineto import stream as kineto_stream

    parts = kineto_stream.scan(path, _kineto_scan.Scanner)  # one scanner, or two (two parts)
    return sum(len(sc.take_columns()["seq"]) // 8 + len(sc.slow()) for sc, _ in parts)


CANDIDATES = {
    "json (stdlib), Decimal": stdlib,
    "orjson 3 (floats)": orjson_,
    "msgspec (typed, Decimal ts)": msgspec_,
    "pysimdjson (lazy, floats)": simdjson_,
    "ijson yajl2_c (streaming, Decimal)": ijson_,
    "scaldiag _kineto_scan (streaming, exact)": scaldiag_scanner,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace", type=Path)
    parser.add_argument("--only")
    args = parser.parse_args()
    if args.only:
        start = time.perf_counter()
        kept = CANDIDATES[args.only](args.trace)
        print(f"{kept} {time.perf_counter() - start:.2f}")
        return
    print(f"{args.trace.stat().st_size / 1e6:.0f} MB; load {os.getloadavg()[0]:.1f} at start\n")
    print(
        "| parser | events kept | s (in process) | CPU s | peak RSS MiB | load"
        " |\n|---|---|---|---|---|---|"
    )
    for name in CANDIDATES:
        load = os.getloadavg()[0]
        proc = subprocess.Popen(
            [sys.executable, __file__, str(args.trace), "--only", name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        out, err = proc.stdout.read().decode(), proc.stderr.read().decode()
        if status != 0:
            print(
                f"| {name} | failed: {err.strip().splitlines()[-1] if err.strip() else status} | |"
                f" | | {load:.1f} |"
            )
            continue
        kept, seconds = out.split()
        print(
            f"| {name} | {int(kept):,} | {float(seconds):.1f} |"
            f" {usage.ru_utime + usage.ru_stime:.1f} | {usage.ru_maxrss / 1024:,.0f} | {load:.1f} |"
        )


if __name__ == "__main__":
    main()
