"""``scaldiag try RUN_DIR FINDING``: the finding's fix applied from outside the script, measured.

Baseline and fixed rounds alternate (so a drift of the machine falls on both); each round is the
run's own command under the same capture as ``profile``, in a directory of its own under
``RUN_DIR/try/``. The speed-up is the baseline's steady step over the fixed one's: the median of
the rounds' ratios (round i's baseline over round i's fix) and the 2.5th-97.5th percentile of
those ratios. The fix's values are the report's plan (rules/knobs.py). Kept in ``RUN_DIR/try.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from scaldiag.collect.frameworks.try_fixes import DATALOADER_ENV, KERAS_ENV
from scaldiag.errors import ScaldiagError
from scaldiag.record.rundir import RUN_JSON, TRY_JSON, read_json, write_json


class CannotApply(ScaldiagError):
    pass


DEFAULT_ROUNDS, DEFAULT_BUDGET_S = 3, 600.0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "try",
        help="apply a finding's fix from outside the script and measure it",
        description=(
            "Re-run the run's own command in alternating baseline and fixed rounds, the fix "
            "applied from outside the script (environment, import hooks), and report the "
            "measured speed-up with its spread beside the finding's forecast."
        ),
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by profile")
    p.add_argument(
        "finding", metavar="FINDING", help="the finding's id (SD211, SD101, SD105 on Keras)"
    )
    p.add_argument(
        "--rounds", type=int, default=DEFAULT_ROUNDS, help="baseline+fixed pairs (default 3)"
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        help="stop starting rounds after this (default 600)",
    )
    p.add_argument(
        "--allow-semantic",
        action="store_true",
        help="allow a fix that changes what is trained (none is built yet)",
    )
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    p.set_defaults(func=run)


def fix_for(finding_id: str, run_dir: Path):
    """(the finding, the environment of the fix, what it sets) or CannotApply."""
    from scaldiag.pipeline import diagnose_run
    from scaldiag.rules import knobs

    report = diagnose_run(run_dir)
    findings = list(report.findings) + list(
        report.trace_report.findings if report.trace_report else []
    )
    found = next((f for f in findings if f.id == finding_id), None)
    if found is None:
        ids = ", ".join(sorted({f.id for f in findings})) or "none"
        raise ScaldiagError(f"{finding_id}: not a finding of {run_dir} (its findings: {ids})")
    plan = knobs.plan(knobs.machine(report.analysis), findings)
    fix_text = found.fix.get(report.framework) or next(iter(found.fix.values()), "")
    env, sets = fix_env(knobs.values(fix_text), report.framework, plan)
    if not env:
        raise CannotApply(
            f"{finding_id}: its fix cannot be applied from outside the script yet; paste this"
            f" instead: {' '.join(fix_text.split()) or '(no fix text)'}"
        )
    return found, env, sets


def fix_env(values: dict, framework: str, plan: dict[str, str]) -> tuple[dict, dict]:
    """The child's environment that applies the knobs a fix names (``knobs.values`` of its text),
    at the plan's values, and what it sets; both empty where none can be applied from outside.
    Keras runs are named by their backend (tensorflow, jax)."""
    env: dict[str, str] = {}
    sets: dict[str, object] = {}
    if "intra_op_threads" in values:
        env["OMP_NUM_THREADS"] = plan["intra_op_threads"]
        sets["intra_op_threads"] = int(plan["intra_op_threads"])
    loader, keras = {}, {}
    if "num_workers" in values and framework == "pytorch":
        loader["num_workers"] = int(plan["num_workers"])
        loader["persistent_workers"] = True
        if "prefetch_factor" in values:
            loader["prefetch_factor"] = _value(plan, values, "prefetch_factor")
        if "pin_memory" in values and plan.get("pin_memory") == "True":  # the plan's: CUDA only
            loader["pin_memory"] = True
    if framework in ("tensorflow", "jax"):
        if "steps_per_execution" in values:
            keras["steps_per_execution"] = _value(plan, values, "steps_per_execution")
        if "pydataset_workers" in values:
            keras["workers"] = _value(plan, values, "pydataset_workers")
    if loader:
        env[DATALOADER_ENV] = json.dumps(loader)
        sets.update(loader)
    if keras:
        env[KERAS_ENV] = json.dumps(keras)
        sets.update({"pydataset_workers" if k == "workers" else k: v for k, v in keras.items()})
    return env, sets


def _value(plan: dict[str, str], values: dict, knob: str) -> int:
    """The plan's value for a knob, else the fix text's own (the largest it names)."""
    return int(plan.get(knob) or max(values[knob], key=int))


def _steady_ms(round_dir: Path) -> float | None:
    from scaldiag.pipeline import diagnose_run

    try:
        return float(diagnose_run(round_dir).analysis.steps.step_time_ms.p50)
    except Exception:  # a round without steady steps (killed, failed) is a gap, not a result
        return None


def run(args: argparse.Namespace) -> int:
    from scaldiag.collect.launcher import launch

    run_dir = Path(args.run_dir)
    command = read_json(run_dir, RUN_JSON).get("command")
    if not isinstance(command, list) or len(command) < 2:
        raise ScaldiagError(f"{run_dir}: no run.json with the run's command")
    if args.rounds < 1 or args.budget_s <= 0:
        raise ScaldiagError("--rounds and --budget-s must be positive")
    try:
        finding, env, sets = fix_for(args.finding, run_dir)
    except CannotApply as exc:
        print(f"scaldiag: {exc}", file=sys.stderr)
        return 2
    script, script_args = command[1], command[2:]
    started = time.monotonic()
    rounds: list[dict] = []
    interrupted = False
    try:
        for i in range(args.rounds):
            if rounds and time.monotonic() - started > args.budget_s:
                break
            pair = {}
            for side, extra in (("baseline", {}), ("fixed", env)):
                d = run_dir / "try" / f"{i}-{side}"
                d.mkdir(parents=True, exist_ok=True)
                code = launch(d, script, script_args, env=dict(extra), stdout=sys.stderr.fileno())
                pair[side] = {"dir": str(d), "exit": code, "step_ms": _steady_ms(d)}
            rounds.append(pair)
    except KeyboardInterrupt:
        interrupted = True
    result = _result(finding, sets, rounds, interrupted)
    write_json(run_dir, TRY_JSON, result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, sort_keys=True))
    _print(result)
    return 130 if interrupted else 0


def _result(finding, sets, rounds, interrupted) -> dict:
    ratios = [
        r["baseline"]["step_ms"] / r["fixed"]["step_ms"]
        for r in rounds
        if "fixed" in r and r["baseline"]["step_ms"] and r["fixed"]["step_ms"]
    ]
    out = {
        "finding": finding.id,
        "sets": sets,
        "forecast": finding.forecast.value if finding.forecast else None,
        "ceiling": finding.predicted_speedup.value if finding.predicted_speedup else None,
        "rounds": rounds,
        "interrupted": interrupted,
        "speedup": None,
    }
    if ratios:
        a = np.array(ratios)
        out["speedup"] = {
            "median": float(np.median(a)),
            "low": float(np.percentile(a, 2.5)),
            "high": float(np.percentile(a, 97.5)),
            "pairs": len(ratios),
        }
    return out


def _print(r: dict) -> None:
    from scaldiag.render.words import tried_words

    print(tried_words(r))
