"""Read a run or sweep directory (possibly partial: a killed run) into plain data. Facts only."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from scaldiag.errors import ScaldiagError
from scaldiag.record import validate
from scaldiag.record.run_json import RUNNING, UNKNOWN, RunJson
from scaldiag.record.rundir import (
    DEVICE_STEPS,
    GPU_SAMPLES,
    HOST_SAMPLES,
    INVENTORY_JSON,
    MARKS,
    PRINTED,
    RUN_JSON,
    STEPS,
    SWEEP_JSON,
    TRAINING_JSON,
    TRY_JSON,
    load_json,
    load_jsonl,
)
from scaldiag.record.types import RunRecord

RECORD_NOTE = "record: "  # begins each note on what could not be read cleanly (`check` fails on it)


def read_record(run_dir: Path) -> RunRecord:
    """The run's facts, well typed whatever the files hold; each damage is a line of
    ``run["missing"]``."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ScaldiagError(f"no such run directory: {run_dir}")
    run, notes = RunJson.load(run_dir)
    if run is None or run.is_empty():
        if not (run_dir / RUN_JSON).exists():
            raise ScaldiagError(f"{run_dir} is not a scaldiag run directory (no run.json)")
        run = RunJson(status=UNKNOWN)  # damaged: report what the other files hold
    training = _object(run_dir, TRAINING_JSON, validate.TRAINING_FIELDS, notes)
    inventory = _object(run_dir, INVENTORY_JSON, validate.INVENTORY_FIELDS, notes)
    steps = read_steps(run_dir / STEPS, notes)
    gpu_samples = _rows(run_dir / GPU_SAMPLES, validate.GPU_ROW, True, "t_ns", notes)
    host_samples = _rows(run_dir / HOST_SAMPLES, validate.HOST_ROW, True, "t_ns", notes)
    # Marks come from two processes (bootstrap and recorder), so they are sorted, not checked for
    # order.
    marks = sorted(
        validate.clean_rows(load_jsonl(run_dir / MARKS)[0], validate.MARK_ROW, False)[0],
        key=lambda m: m["t_ns"],
    )
    device_steps = load_jsonl(run_dir / DEVICE_STEPS)[
        0
    ]  # checked value by value (analyze/recorded_steps.device_times)
    printed = read_printed(run_dir / PRINTED, notes)
    tried = _object(run_dir, TRY_JSON, validate.TRY_FIELDS, notes)  # {} where never tried
    notes += _abandoned(run)
    if notes:
        run = run.replace(missing=[*run.missing, *(f"{RECORD_NOTE}{n}" for n in notes)])
    return RunRecord(
        run=run,
        training=training,
        inventory=inventory,
        steps=steps,
        gpu_samples=gpu_samples,
        host_samples=host_samples,
        marks=marks,
        device_steps=device_steps,
        tried=tried if tried.get("finding") else {},
        printed=printed,
    )


def read_printed(path: Path, notes: list[str]) -> list[dict] | None:
    """printed.jsonl's rows, well typed (a segment, or the count of those dropped); None where the
    file is not there (a run from before the script's output was kept)."""
    if not path.exists():
        return None
    rows, damaged = load_jsonl(path)
    segments, wrong = validate.clean_rows(
        [r for r in rows if "dropped" not in r], validate.PRINTED_ROW, False
    )
    dropped = [
        {"dropped": r["dropped"]}
        for r in rows
        if "dropped" in r and isinstance(r["dropped"], int) and not isinstance(r["dropped"], bool)
    ]
    lost = damaged + wrong + sum("dropped" in r for r in rows) - len(dropped)
    if lost:
        notes.append(f"{path.name}: {lost} damaged line{'s' if lost > 1 else ''} skipped")
    return segments + dropped


def _object(run_dir: Path, name: str, fields: dict, notes: list[str]) -> dict:
    data, problem = load_json(run_dir / name)
    if problem:
        notes.append(problem)
    data, dropped = validate.clean_object(data, fields, name)
    notes += dropped
    return data


def read_steps(path: Path, notes: list[str] | None = None) -> list[dict]:
    """steps.jsonl as one row per step (blocks expanded), well typed and in order; damage noted in
    ``notes``."""
    return _rows(
        path,
        validate.STEP_ROW,
        False,
        "begin_ns",
        [] if notes is None else notes,
        validate.expand_step_blocks,
    )


def _rows(
    path: Path, shape, numbers_only: bool, order_key: str, notes: list[str], expand=None
) -> list[dict]:
    rows, damaged = load_jsonl(path)
    if expand is not None:
        rows, broken = expand(rows)
        damaged += broken
    rows, wrong = validate.clean_rows(rows, shape, numbers_only)
    rows, unordered = validate.in_order(rows, order_key)
    lost = damaged + wrong + unordered
    if lost:
        notes.append(f"{path.name}: {lost} damaged line{'s' if lost > 1 else ''} skipped")
    return rows


def _abandoned(run: RunJson) -> list[str]:
    """A run still marked running whose launcher is gone: it was killed (SIGKILL, OOM) before
    finalising."""
    pid = run.launcher_pid
    if run.status != RUNNING or pid is None or run.host != platform.node():
        return []
    try:
        os.kill(pid, 0)
        return []
    except ProcessLookupError:
        return [
            f"run.json says running, but its launcher (pid {pid}) has ended without finalising it:"
            " scaldiag was killed (SIGKILL, out of memory) or could not write run.json (a full"
            " disk); the steps and samples up to then are kept"
        ]
    except (PermissionError, OverflowError, ValueError, OSError):
        return []


def rank_dirs(run_dir: Path) -> dict[int, Path]:
    """The run directories of ranks > 0 of a multi-process job (``RUN_DIR/rank<R>/``), by rank."""
    return {r: path for r, path in _named_rank_dirs(run_dir).items() if (path / RUN_JSON).exists()}


def unrecorded_rank_dirs(run_dir: Path) -> dict[int, Path]:
    """A rank's directories that hold files but no run.json: records that cannot say how their
    rank ended (``check`` passed a rank directory of steps without one)."""
    return {
        r: path
        for r, path in _named_rank_dirs(run_dir).items()
        if not (path / RUN_JSON).exists() and any(path.iterdir())
    }


def _named_rank_dirs(run_dir: Path) -> dict[int, Path]:
    found = {}
    for path in sorted(Path(run_dir).glob("rank*")):
        suffix = path.name.removeprefix("rank")
        # ASCII digits only: "rank²" is digits to str.isdigit, not to int()
        if suffix.isascii() and suffix.isdigit() and len(suffix) <= 9 and path.is_dir():
            found[int(suffix)] = path
    return found


def is_sweep(path: Path) -> bool:
    return (Path(path) / SWEEP_JSON).exists()


def sweep_runs(sweep_dir: Path) -> tuple[dict, list[tuple[int, Path]]]:
    """The sweep's spec and its recorded runs as (device count, run directory)."""
    spec, problem = load_json(Path(sweep_dir) / SWEEP_JSON)
    if problem:
        raise ScaldiagError(f"{sweep_dir}: damaged sweep record: {problem}")
    listed = spec.get("runs") if isinstance(spec.get("runs"), list) else []
    runs = [
        (run["gpus"], Path(sweep_dir) / run["dir"])
        for run in listed
        if _sweep_entry(run) and (Path(sweep_dir) / run["dir"] / RUN_JSON).exists()
    ]
    return spec, runs


def _sweep_entry(run) -> bool:
    """A well-formed entry of sweep.json: a device count and a run directory inside the sweep's."""
    return (
        isinstance(run, dict)
        and isinstance(run.get("gpus"), int)
        and not isinstance(run["gpus"], bool)
        and run["gpus"] >= 1
        and isinstance(run.get("dir"), str)
        and run["dir"] not in ("", ".", "..")
        and "/" not in run["dir"]
        and "\0" not in run["dir"]
    )
