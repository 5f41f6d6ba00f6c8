"""Well-typed facts from a run directory someone may have damaged.

The record is read back by ``record/reader.py`` after a crash, a kill, a
full disk, or a hand edit. Whatever the bytes, the analysis gets values of
the types it was written for: a field of the wrong type is dropped (and
said), a JSONL row missing a required field, or holding one of the wrong
type, is skipped (and counted). Nothing here raises on content.

Numbers must be finite; booleans are not numbers here (``True`` is an
``int`` to Python, not a step count to us). Integers fit in int64 (the
analysis puts them in numpy columns; 10**400 is no count), and times
(``*_ns``, epoch nanoseconds) lie in [0, 2**62): until the year 2116, and
the difference or sum of two never leaves int64.
"""

from __future__ import annotations

import math

# A field's check: value -> the value to keep, or _BAD.
_BAD = object()


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
MAX_TIME_NS = 2**62


def _int(v):
    return (
        v
        if isinstance(v, int) and not isinstance(v, bool) and _INT64_MIN <= v <= _INT64_MAX
        else _BAD
    )


def _time(v):
    """Epoch nanoseconds: an integer in [0, MAX_TIME_NS)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_TIME_NS else _BAD


def _num(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return _BAD
    if isinstance(v, int):
        return _int(v)
    return v if math.isfinite(v) else _BAD


def _str(v):
    return v if isinstance(v, str) else _BAD


def _bool(v):
    return v if isinstance(v, bool) else _BAD


def _opt(check):
    return lambda v: None if v is None else check(v)


def _list_of(check):
    def checked(v):
        if not isinstance(v, list):
            return _BAD
        items = [check(x) for x in v]
        return _BAD if any(x is _BAD for x in items) else items

    return checked


def _obj(fields: dict):
    """A nested object: its known fields checked the same way, unknown ones kept."""

    def checked(v):
        if not isinstance(v, dict):
            return _BAD
        return {
            k: x
            for k, x in ((k, fields[k](x) if k in fields else x) for k, x in v.items())
            if x is not _BAD
        }

    return checked


def _all_of(fields: dict):
    """A nested object that is used whole: every listed field present and well typed, else
    dropped."""

    def checked(v):
        if not isinstance(v, dict) or any(k not in v or fields[k](v[k]) is _BAD for k in fields):
            return _BAD
        return v

    return checked


def _str_map(v):
    if not isinstance(v, dict):
        return _BAD
    return {str(k): x for k, x in v.items() if isinstance(x, str)}


# run.json's fields: record/run_json.py (RunJson).
TRAINING_FIELDS = {
    "framework": _obj({"name": _str, "backend": _str, "versions": _str_map}),
    "global_batch": _opt(_int),
    "per_replica_batch": _opt(_int),
    "replicas": _opt(_int),
    "steps_per_execution": _opt(_int),
    "steps_per_epoch": _opt(_int),
    "parameter_bytes": _opt(_int),
    "warmup_steps": _int,
    "trace_steps": _int,
    "batch_source": _str,
    # the window (collect/recorder.py): its steps, its plan, what ended it (collect/trace_budget.py)
    "trace": _obj(
        {
            "first_step": _int,
            "last_step": _int,
            "planned_steps": _int,
            "ended_by": _str,
            "limit_s": _num,
            "share": _num,
        }
    ),
    "trace_error": _str,  # why the trace window did not start or stop (collect/session.py)
    # optimizer steps recorded into CUDA graphs (collect/frameworks/torch_hooks.py): their replays
    # call no optimizer.step(), so the step hooks never see them
    "cuda_graph_steps": _int,
    "input_ceiling": _all_of(
        {"samples_per_s": _num, "batches": _int, "seconds": _num, "source": _str}
    ),
    # the framework allocator's peak per device (collect/frameworks/device_memory.py)
    "device_memory": _list_of(
        _all_of({"device": _int, "peak_bytes": _int, "limit_bytes": _int, "source": _str})
    ),
}
# try.json (commands/try_fix.py): what a report says of it must be whole, else it is not said.
TRY_FIELDS = {
    "finding": _str,
    "sets": _obj({}),
    "forecast": _opt(_num),
    "ceiling": _opt(_num),
    "interrupted": _bool,
    "speedup": _opt(_all_of({"median": _num, "low": _num, "high": _num, "pairs": _int})),
    "not_applied": _str,  # why a fix measured nothing (a batch the script's input keeps)
    "no_forecast": _str,  # why the finding's forecast is not of the fix tried
    "left_out": _list_of(_str),  # the pairs where a side failed, and why
    "stopped": _str,  # what ended the try early: "budget", "signal SIGINT"
}
GPU_INFO_FIELDS = {
    "index": _int,
    "name": _str,
    "uuid": _str,
    "pci_bus_id": _str,
    "memory_total_bytes": _int,
    "pcie_gen_current": _int,
    "pcie_gen_max": _int,
    "pcie_width_current": _int,
    "pcie_width_max": _int,
    "power_limit_mw": _int,
}
INVENTORY_FIELDS = {
    "gpus": _list_of(_obj(GPU_INFO_FIELDS)),
    "topology": _list_of(_obj({})),
    "logical_to_nvml_index": _opt(_list_of(_int)),
    "cuda_visible_devices": _opt(_str),
}

# JSONL rows: (required fields, optional fields). Unknown fields of sample rows must be numbers.
STEP_ROW = (
    {"step": _int, "begin_ns": _time, "end_ns": _time},
    {"epoch": _int, "traced": _bool, "batch": _int},
)
GPU_ROW = ({"t_ns": _time, "gpu": _int}, {})
MARK_ROW = ({"mark": _str, "t_ns": _time}, {"epoch": _int})
PRINTED_ROW = ({"t_ns": _time, "text": _str}, {"stream": _str, "end": _str})
HOST_ROW = (
    {"t_ns": _time, "core_pct": _list_of(_num), "proc_cpu_pct": _num, "proc_rss_bytes": _int},
    {},
)


def clean_object(data: dict, fields: dict, name: str) -> tuple[dict, list[str]]:
    """Drop the known fields whose value has the wrong type; one note per dropped field."""
    out, notes = {}, []
    for key, value in data.items():
        check = fields.get(key)
        kept = value if check is None else check(value)
        if kept is _BAD:
            notes.append(
                f"{name}: field {key!r} ignored (a {type(value).__name__}, not what the record"
                " holds)"
            )
        else:
            out[key] = kept
    return out, notes


def expand_step_blocks(rows: list[dict]) -> tuple[list[dict], int]:
    """steps.jsonl rows with each block (``bounds_ns``, written by collect/recorder.py) expanded
    into one row per step, and how many blocks were damaged (skipped whole: their steps' numbers and
    ends depend on every bound).

    A block ``{"step": s, "epoch": e, "bounds_ns": [b0, ..., bn], "batch": [k0, ...]}`` holds steps
    s .. s+n-1, step s+i from b_i to b_i+1, untraced; ``batch`` (each step's, null for none) is
    optional.
    """
    if not any("bounds_ns" in row for row in rows):
        return rows, 0
    out, damaged = [], 0
    for row in rows:
        if "bounds_ns" not in row:
            out.append(row)
            continue
        steps = _block_steps(row)
        if steps is None:
            damaged += 1
        else:
            out += steps
    return out, damaged


def _block_steps(row: dict) -> list[dict] | None:
    step, epoch = _int(row.get("step")), _int(row.get("epoch", 0))
    bounds, batches = _list_of(_time)(row["bounds_ns"]), row.get("batch")
    n = len(bounds) - 1 if bounds is not _BAD else 0
    if (
        step is _BAD
        or epoch is _BAD
        or n < 1
        or any(later < earlier for earlier, later in zip(bounds, bounds[1:]))
    ):
        return None
    if batches is not None and (_list_of(_opt(_int))(batches) is _BAD or len(batches) != n):
        return None
    rows = [
        {
            "step": step + i,
            "epoch": epoch,
            "begin_ns": bounds[i],
            "end_ns": bounds[i + 1],
            "traced": False,
        }
        for i in range(n)
    ]
    if batches is not None:
        for r, batch in zip(rows, batches):
            if batch is not None:  # null: that step had no batch index
                r["batch"] = batch
    return rows


def clean_rows(
    rows: list[dict], shape: tuple[dict, dict], numbers_only: bool
) -> tuple[list[dict], int]:
    """The rows whose required fields are present and well typed; optional bad fields dropped."""
    required, optional = shape
    kept, skipped = [], 0
    for row in rows:
        out = {}
        for key, check in required.items():
            value = check(row[key]) if key in row else _BAD
            if value is _BAD:
                break
            out[key] = value
        else:
            for key, value in row.items():
                if key in required:
                    continue
                check = optional.get(key, _num if numbers_only else None)
                value = value if check is None else check(value)
                if value is not _BAD:
                    out[key] = value
            kept.append(out)
            continue
        skipped += 1
    return kept, skipped


def in_order(rows: list[dict], key: str) -> tuple[list[dict], int]:
    """Rows with ``key`` non-decreasing, as they were written; rows out of order are skipped."""
    kept, last = [], None
    for row in rows:
        if last is None or row[key] >= last:
            kept.append(row)
            last = row[key]
    return kept, len(rows) - len(kept)
