"""``scaldiag try RUN_DIR FINDING``: the finding's fix applied from outside the script, measured.

Baseline and fixed rounds alternate (so a drift of the machine falls on both); each round is the
run's own command under the same capture as ``profile``, in a directory of its own under
``RUN_DIR/try/``. The speed-up is in samples/s: the baseline's mean steady step over the fixed
one's, each per sample (the same ratio as the steps' where the batch is unchanged): the median of
the rounds' ratios (round i's baseline over round i's fix) and the 2.5th-97.5th percentile of those
ratios. The fix's values are the report's plan (rules/knobs.py). With ``--allow-semantic``, a
finding whose forecast is a larger per-replica batch has that batch tried, so the measurement
stands beside its forecast; the record says whether the batch changed. Kept in
``RUN_DIR/try.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

from scaldiag.collect.frameworks.try_fixes import DATALOADER_ENV, KERAS_ENV
from scaldiag.errors import ScaldiagError
from scaldiag.record.rundir import RUN_JSON, TRY_JSON, read_json, write_json
from scaldiag.rules.machine import fed_tf_data


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
        help=(
            "allow a fix that changes what is trained: where the finding's forecast is a larger"
            " per-replica batch, try that batch (learning rate and steps stay the script's)"
        ),
    )
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    p.set_defaults(func=run)


# A forecast's arithmetic opens with the change it forecasts (rules/sd105_host_bound.py,
# analyze/forecast.py): "per-replica batch x4: ..."
BATCH_FORECAST = re.compile(r"per-replica batch x(\d+)\b")
SEMANTIC_WORDS = (
    "changes what is trained: per-replica batch x{k} (the learning rate, the steps and the"
    " epochs are the script's)"
)


def batch_factor(found) -> int | None:
    """The per-replica batch factor the finding's forecast is of, or None."""
    m = BATCH_FORECAST.match(found.forecast.arithmetic) if found.forecast else None
    return int(m.group(1)) if m else None


def semantic_env(framework: str, k: int) -> tuple[dict, dict]:
    """The environment that multiplies the script's batch by ``k`` (collect/frameworks/
    try_fixes.py), and what it sets."""
    name = DATALOADER_ENV if framework == "pytorch" else KERAS_ENV
    return {name: json.dumps({"batch_size_factor": k})}, {"per_replica_batch_factor": k}


def fix_for(finding_id: str, run_dir: Path, allow_semantic: bool = False):
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
    k = batch_factor(found)
    if allow_semantic and k and report.framework in ("pytorch", "tensorflow", "jax"):
        env, sets = semantic_env(report.framework, k)
        return found, env, sets
    plan = knobs.plan(knobs.machine(report.analysis), findings)
    fix_text = found.fix.get(report.framework) or next(iter(found.fix.values()), "")
    env, sets = fix_env(
        knobs.values(fix_text), report.framework, plan, fed_tf_data(report.analysis.training)
    )
    if not env:
        semantic = (
            f" (its forecast, per-replica batch x{k}, changes what is trained:"
            " --allow-semantic tries it)"
            if k
            else ""
        )
        raise CannotApply(
            f"{finding_id}: its fix cannot be applied from outside the script yet{semantic};"
            f" paste this instead: {' '.join(fix_text.split()) or '(no fix text)'}"
        )
    return found, env, sets


def fix_env(
    values: dict, framework: str, plan: dict[str, str], tf_data: bool = False
) -> tuple[dict, dict]:
    """The child's environment that applies the knobs a fix names (``knobs.values`` of its text),
    at the plan's values, and what it sets; both empty where none can be applied from outside.
    Keras runs are named by their backend (tensorflow, jax); ``tf_data``: the script feeds fit a
    tf.data dataset (``fed_tf_data``), whose maps the tf.data fix changes."""
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
        if "tf_data_autotune" in values and framework == "tensorflow" and tf_data:
            keras["tf_data_autotune"] = True
    if loader:
        env[DATALOADER_ENV] = json.dumps(loader)
        sets.update(loader)
    if keras:
        env[KERAS_ENV] = json.dumps(keras)
        named = {"workers": "pydataset_workers", "tf_data_autotune": "num_parallel_calls"}
        sets.update({named.get(k, k): v for k, v in keras.items()})
        if "num_parallel_calls" in sets:  # as the fix's text says it
            sets["num_parallel_calls"] = "tf.data.AUTOTUNE"
    return env, sets


def _value(plan: dict[str, str], values: dict, knob: str) -> int:
    """The plan's value for a knob, else the fix text's own (the largest it names)."""
    return int(plan.get(knob) or max(values[knob], key=int))


def _steady(round_dir: Path) -> dict:
    """The round's steady step (mean ms: steps over their time, as throughput counts them) and
    samples a step, where it has them. Not the median: a pipeline that works ahead makes steps of
    two kinds (a batch ready, a batch waited for), and on tests/tfdata_slow_map.py the medians read
    1.08x where Keras's own clock read 1.33x."""
    from scaldiag.pipeline import diagnose_run

    try:
        steps = diagnose_run(round_dir).analysis.steps
        return {
            "step_ms": float(steps.step_time_ms.mean),
            "samples_per_step": steps.samples_per_step,
        }
    except Exception:  # a round without steady steps (killed, failed) is a gap, not a result
        return {"step_ms": None, "samples_per_step": None}


def run(args: argparse.Namespace) -> int:
    from scaldiag.collect.launcher import launch

    run_dir = Path(args.run_dir)
    command = read_json(run_dir, RUN_JSON).get("command")
    if not isinstance(command, list) or len(command) < 2:
        raise ScaldiagError(f"{run_dir}: no run.json with the run's command")
    if args.rounds < 1 or args.budget_s <= 0:
        raise ScaldiagError("--rounds and --budget-s must be positive")
    try:
        finding, env, sets = fix_for(args.finding, run_dir, args.allow_semantic)
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
                pair[side] = {"dir": str(d), "exit": code, **_steady(d)}
            rounds.append(pair)
    except KeyboardInterrupt:
        interrupted = True
    result = _result(finding, sets, rounds, interrupted)
    write_json(run_dir, TRY_JSON, result)
    if "per_replica_batch_factor" in sets:
        print(
            f"scaldiag: {SEMANTIC_WORDS.format(k=sets['per_replica_batch_factor'])}",
            file=sys.stderr,
        )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, sort_keys=True))
    _print(result)
    return 130 if interrupted else 0


def _per_sample_ms(side: dict) -> float | None:
    """A side's steady step per sample (its step where the samples a step are unknown: the same
    ratio then, as long as both sides' batches are the same)."""
    ms, n = side.get("step_ms"), side.get("samples_per_step")
    return ms / n if ms and n else ms


def pair_ratio(pair: dict) -> float | None:
    """Round i's speed-up in samples/s: baseline time a sample over the fix's. Per sample only
    where both sides know their samples a step; else the steps' ratio."""
    b, f = pair.get("baseline") or {}, pair.get("fixed") or {}
    if not (b.get("step_ms") and f.get("step_ms")):
        return None
    if b.get("samples_per_step") and f.get("samples_per_step"):
        return _per_sample_ms(b) / _per_sample_ms(f)
    return b["step_ms"] / f["step_ms"]


def batch_unchanged(sets: dict, rounds: list[dict]) -> str | None:
    """Why a batch fix measured nothing: its fixed runs kept the script's batch (the input is
    batched by the script: a dataset, a PyDataset, a DataLoader's batch_sampler)."""
    k = sets.get("per_replica_batch_factor")
    seen = [
        (r["baseline"].get("samples_per_step"), r["fixed"].get("samples_per_step"))
        for r in rounds
        if "fixed" in r
    ]
    if not k or not any(b and f for b, f in seen):
        return None
    if all(f == b * k for b, f in seen if b and f):
        return None
    return (
        f"the fixed runs did not take a batch x{k} (samples a step: {seen}): the script's input"
        " makes its own batches (a dataset, a PyDataset, a batch_sampler); change it there"
    )


def _result(finding, sets, rounds, interrupted) -> dict:
    not_applied = batch_unchanged(sets, rounds)
    ratios = [] if not_applied else [x for x in map(pair_ratio, rounds) if x is not None]
    out = {
        "finding": finding.id,
        "sets": sets,
        "forecast": finding.forecast.value if finding.forecast else None,
        "ceiling": finding.predicted_speedup.value if finding.predicted_speedup else None,
        "rounds": rounds,
        "interrupted": interrupted,
        "speedup": None,
    }
    if not_applied:
        out["not_applied"] = not_applied
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
