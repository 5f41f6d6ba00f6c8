"""Re-run the run's own command in alternating baseline and fixed rounds, the fix applied from
outside the script (environment, import hooks), and report the measured speed-up with its spread
beside the finding's forecast."""

from __future__ import annotations

import argparse
import json
import math
import re
import signal
import sys
from pathlib import Path

from scaldiag.analyze import try_stats
from scaldiag.analyze.try_stats import TryReport
from scaldiag.collect import try_inputs, try_rounds, write_restore
from scaldiag.collect.frameworks.try_fixes import DATALOADER_ENV, KERAS_ENV
from scaldiag.commands.output import emit
from scaldiag.errors import ScaldiagError
from scaldiag.record.rundir import TRY_JSON, write_json
from scaldiag.rules.machine import fed_tf_data
from scaldiag.sanitize import line as inert


class CannotApply(ScaldiagError):
    pass


DEFAULT_ROUNDS, DEFAULT_MAX_ROUNDS, DEFAULT_BUDGET_S = 3, 12, 600.0
HELP = "apply a finding's fix from outside the script and measure it"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("try", help=HELP, description=__doc__)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by profile")
    p.add_argument(
        "finding", metavar="FINDING", help="the finding's id (SD211, SD101, SD105 on Keras)"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=DEFAULT_ROUNDS,
        help=(
            "the fewest baseline+fixed pairs (default 3): more follow, up to --max-rounds, while"
            " the pairs' range does not separate from 1.0x (or from the forecast)"
        ),
    )
    p.add_argument(
        "--max-rounds",
        type=int,
        default=DEFAULT_MAX_ROUNDS,
        help=f"the most pairs (default {DEFAULT_MAX_ROUNDS})",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        help=(
            "a hard wall in seconds (default 600): at its end the round in progress is stopped"
            " (SIGTERM, then SIGKILL) and the pairs measured are kept"
        ),
    )
    p.add_argument(
        "--allow-uncontained-writes",
        action="store_true",
        help=(
            "run a script that profile saw write files through code try cannot put back (a C++"
            " writer, a subprocess); those files are then changed by each round"
        ),
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


def _forecast_of_fix(finding, sets: dict) -> tuple[float | None, str | None]:
    """The finding's forecast where it is of this fix; else None and why (SD105's forecast is a
    per-replica batch x4, not a steps_per_execution)."""
    if finding.forecast is None:
        return None, "the finding has no forecast"
    k = batch_factor(finding)
    if k and sets.get("per_replica_batch_factor") != k:
        return None, f"the finding's forecast is of a per-replica batch x{k}, not of this fix"
    return finding.forecast.value, None


def run(args: argparse.Namespace) -> int:
    """``scaldiag try``: the finding's fix applied from outside the script, measured.

    Baseline and fixed rounds alternate (so a drift of the machine falls on both); each round is the
    run's own command under the same capture as ``profile``, in a directory of its own under
    ``RUN_DIR/try/``. The speed-up is in samples/s: the baseline's mean steady step over the fixed
    one's, each per sample (the same ratio as the steps' where the batch is unchanged): the median
    of the rounds' ratios (round i's baseline over round i's fix) and the 2.5th-97.5th percentile of
    those ratios. The fix's values are the report's plan (rules/knobs.py). With
    ``--allow-semantic``, a finding whose forecast is a larger per-replica batch has that batch
    tried, so the measurement stands beside its forecast; the record says whether the batch changed.
    Kept in ``RUN_DIR/try.json``.
    """
    run_dir = Path(args.run_dir).resolve()
    rounds_min = _bounded_rounds(args.rounds, "--rounds")
    given = getattr(args, "max_rounds", None)  # profile --try passes none
    given = DEFAULT_MAX_ROUNDS if given is None else _bounded_rounds(given, "--max-rounds")
    rounds_max = max(rounds_min, given)
    budget_s = _budget(args.budget_s)
    if not run_dir.is_dir():
        raise ScaldiagError(f"{args.run_dir}: not a run directory")
    key = write_restore.journal_key()
    for said in try_rounds.restore_unfinished(run_dir, key):  # an earlier try's, before anything
        print(f"scaldiag: {inert(said)}", file=sys.stderr)
    script, script_args, cwd, run_json = try_inputs.script_as_profiled(run_dir)
    json_out = try_inputs.json_path(args.json, run_dir, script)
    root = try_inputs.try_root(run_dir)
    refused = try_inputs.uncontained_refusal(
        run_json, getattr(args, "allow_uncontained_writes", False)
    )
    if refused:
        raise ScaldiagError(refused)
    try:
        finding, env, sets = fix_for(args.finding, run_dir, args.allow_semantic)
    except CannotApply as exc:
        print(f"scaldiag: {exc}", file=sys.stderr)
        return 2
    try_dir = try_inputs.new_try_dir(root)
    forecast, no_forecast = _forecast_of_fix(finding, sets)
    # The stopper's handlers stay until the result is kept and said: a second signal while try
    # writes try.json or speaks is recorded, not try's end before it says what changed.
    with try_rounds.Stopper(budget_s) as stopper:
        written = try_inputs.profiled_writes(run_json)
        rounds = try_rounds.Rounds(
            try_dir, run_dir, script, script_args, cwd, written, stopper, key
        )
        kept, trouble = _rounds(rounds, env, rounds_min, rounds_max, forecast, stopper, args)
        result = _result(finding, sets, kept, stopper, forecast, no_forecast)
        result.update(try_dir=str(try_dir), script=script, **trouble)
        _keep(result, try_dir, run_dir, json_out)
        _say(result, sets)
    if stopper.signal is not None:
        return 128 + int(stopper.signal)
    return 1 if trouble.get("not_restored") else 2 if trouble.get("uncontained") else 0


def _keep(result: dict, try_dir: Path, run_dir: Path, json_out: Path | None) -> None:
    """try.json in the try's directory and the run's (the latest, read by report and compare),
    and ``--json``'s file, each written whole; a write that fails is a line, the others go on."""
    writes = [
        (try_dir / TRY_JSON, lambda: write_json(try_dir, TRY_JSON, result)),
        (run_dir / TRY_JSON, lambda: write_json(run_dir, TRY_JSON, result)),
    ]
    if json_out is not None:
        writes.append((json_out, lambda: try_inputs.write_json_file(json_out, result)))
    for path, write in writes:
        try:
            write()
        except OSError as exc:
            print(f"scaldiag: cannot write {inert(path)} ({exc.strerror or exc})", file=sys.stderr)


def _rounds(rounds, env, rounds_min, rounds_max, forecast, stopper, args) -> tuple[list, dict]:
    """Baseline then fixed, pair after pair, while another is wanted and nothing stops it."""
    kept: list[dict] = []
    trouble: dict = {}
    allowed = getattr(args, "allow_uncontained_writes", False)
    said: set[str] = set()  # uncontained paths, each said once however many sides change it
    while try_stats.another_round(kept, rounds_min, rounds_max, forecast):
        if stopper.stopping():
            break
        pair: dict = {}
        kept.append(pair)
        for side, extra in (("baseline", {}), ("fixed", env)):
            if stopper.stopping():
                break
            done = rounds.side(f"{len(kept) - 1}-{side}", dict(extra))
            # said as soon as seen: whatever ends try next (a signal, a crash), this is known
            _say_uncontained([p for p in done["uncontained"] if p not in said])
            said.update(done["uncontained"])
            pair[side] = {**done, **_steady(Path(done["dir"]))}
            if done["not_restored"]:
                trouble["not_restored"] = done["not_restored"]
                return kept, trouble
            if done["uncontained"] and not allowed:
                trouble["uncontained"] = done["uncontained"]
                return kept, trouble
    return kept, trouble


MAX_ROUNDS = 100


def _bounded_rounds(value, flag: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ROUNDS:
        raise ScaldiagError(f"{flag} must be a whole number from 1 to {MAX_ROUNDS}, not {value!r}")
    return value


def _budget(value) -> float:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ScaldiagError(f"--budget-s must be a positive number of seconds, not {value!r}")
    return float(value)


def _result(finding, sets, rounds, stopper, forecast=None, no_forecast=None) -> dict:
    measured = try_stats.measured(rounds, sets, forecast)
    interrupted = stopper.signal is not None if stopper is not None else False
    out = {
        "finding": finding.id,
        "sets": sets,
        "forecast": forecast,
        "ceiling": finding.predicted_speedup.value if finding.predicted_speedup else None,
        "rounds": rounds,
        "left_out": measured["left_out"],
        "interrupted": interrupted,
        "speedup": measured["speedup"],
    }
    if no_forecast:
        out["no_forecast"] = no_forecast
    if stopper is not None and stopper.signal is not None:
        out["stopped"] = f"signal {signal.Signals(stopper.signal).name}"
    elif stopper is not None and stopper.budget_spent:
        out["stopped"] = "budget"
    if "not_applied" in measured:
        out["not_applied"] = measured["not_applied"]
    return out


def _say_uncontained(paths: list[str]) -> None:
    for path in paths:
        print(
            f"scaldiag: {inert(path)} changed while the round ran, through no write try saw (the"
            " script's native code, a subprocess, or another program): not put back",
            file=sys.stderr,
            flush=True,
        )


def _say(result: dict, sets: dict) -> None:
    """stderr: what changes what is trained, pairs left out, what stopped it; stdout: the line."""
    if "per_replica_batch_factor" in sets:
        k = sets["per_replica_batch_factor"]
        print(f"scaldiag: {SEMANTIC_WORDS.format(k=k)}", file=sys.stderr)
    for why in result["left_out"]:
        print(f"scaldiag: left out: {inert(why)}", file=sys.stderr)
    if result.get("stopped") == "budget":
        print(
            "scaldiag: the budget (--budget-s) ended the try; a round in progress was stopped",
            file=sys.stderr,
        )
    if result.get("uncontained"):
        print(
            "scaldiag: try stopped: a file changed that try cannot put back;"
            " --allow-uncontained-writes goes on regardless",
            file=sys.stderr,
        )
    for line in result.get("not_restored") or []:
        print(f"scaldiag: NOT PUT BACK: {inert(line)}", file=sys.stderr)
    emit(TryReport(result))  # stdout: the result's line (render/terminal)
