"""`scaldiag try` measures what the hand-written fixed twin does, within their spreads.

    python -m bench try [--rounds K] [--cases torch_input_bound,keras_mlp] [--gpu] [--out FILE]

For each case: one `scaldiag profile` of the planted script, `scaldiag try RUN_DIR FINDING
--rounds K` (the fix applied from outside, alternating baseline and fixed rounds), then K
alternating pairs of the planted script and its twin (the same fix written by hand) under
`scaldiag profile`. Both sides are the ratio of steady steps per sample (median step, the
report's, over its samples a step: the steps' ratio where the batch stays), per pair; a side's
speed-up is the median of its pairs with their min-max as the spread. The finding's own
forecast and ceiling stand beside them. "agree" where the two spreads overlap.

The twins apply exactly the fix `try` applies on this machine: the DataLoader's workers at the
plan's count (cores - 1, `persistent_workers=True` in `try`; the twin's workers are started once
per run as well) and `steps_per_execution=32` for Keras; keras_host_launch_batch's twin is the
batch x4 that SD105's forecast is of, which `try --allow-semantic` applies.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from bench.common import ROOT, machine, write_result
from scaldiag.commands.try_fix import pair_ratio

CLAIM = __doc__.splitlines()[0]
WORKERS = str(max(1, (os.cpu_count() or 1) - 1))  # the plan's count for one rank (rules/machine.py)


@dataclass(frozen=True)
class Case:
    name: str
    script: str
    finding: str
    planted: list[str]
    twin: list[str]
    fix: str  # the fix, in words
    # Replaces the planted run's arguments on a GPU (--gpu), for planted and twin alike.
    on_gpu: list[str] | None = None
    tf_only: bool = False  # tf.keras: not run on the GPU machine (no TensorFlow there)
    try_args: tuple[str, ...] = ()  # more arguments of `scaldiag try` (--allow-semantic)


CASES = {
    c.name: c
    for c in (
        Case(
            "torch_input_bound",
            "bench/torch/input_bound.py",
            "SD101",
            ["--steps", "24"],
            ["--steps", "24", "--fixed", "--workers", WORKERS],
            f"DataLoader num_workers={WORKERS}",
            # On the GPU machine's 16 cores 24 steps are mostly 15 workers starting; the steady
            # state needs more (bench/accuracy runs this script at 400 steps there). At 60 steps
            # every fixed step after the warm-up ran on the 60 batches 15 workers x prefetch 4 make
            # ahead (try read 47x against a 18x ceiling, H100, 2026-12-06): those are "input
            # prefetch" steps now, so 60 steps have no steady ones.
            on_gpu=["--steps", "200"],
        ),
        Case(
            "keras_mlp",
            "tests/keras_mlp.py",
            "SD105",
            [],
            ["--steps-per-execution", "32"],
            "steps_per_execution=32",
            tf_only=True,
        ),
        # Keras 3 on any backend (the zoo's host_launch): the GPU machine's Keras case (JAX there).
        Case(
            "keras_host_launch",
            "bench/zoo/host_launch.py",
            "SD105",
            [],
            ["--steps-per-execution", "32"],
            "steps_per_execution=32",
        ),
        # The same, with the fix SD105's forecast is of: the batch x4 (16 -> 64), written by hand
        # in the twin, applied by `try --allow-semantic`; compared in samples/s.
        Case(
            "keras_host_launch_batch",
            "bench/zoo/host_launch.py",
            "SD105",
            [],
            ["--batch", "64"],
            "per-replica batch x4 (--allow-semantic)",
            try_args=("--allow-semantic",),
        ),
    )
}


def _scaldiag(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scaldiag", *args], capture_output=True, text=True, cwd=ROOT
    )


def _profile(out: Path, script: str, args: list[str]) -> tuple[Path, dict]:
    report = out.with_suffix(".json")
    done = _scaldiag("profile", "-q", "--out", str(out), "--json", str(report), script, "--", *args)
    if done.returncode != 0:
        raise RuntimeError(f"{script} {args}: exit {done.returncode}: {done.stderr[-1500:]}")
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir, json.loads(report.read_text())


def _step_ms(report: dict) -> float | None:
    """The steady steps' mean, as `try` measures its rounds (commands/try_fix.py ``_steady``)."""
    return ((report.get("steps") or {}).get("step_time_ms") or {}).get("mean")


def _sample_ms(report: dict) -> float | None:
    """The steady step per sample (the step where the samples a step are unknown), as `try`
    measures its rounds: a twin with a larger batch compares in samples/s."""
    ms, n = _step_ms(report), (report.get("steps") or {}).get("samples_per_step")
    return ms / n if ms and n else ms


def _finding(report: dict, finding: str) -> dict | None:
    found = list(report.get("findings") or [])
    found += (report.get("trace_report") or {}).get("findings") or []
    return next((f for f in found if f["id"] == finding), None)


def _spread(ratios: list[float]) -> tuple[float, float, float]:
    return statistics.median(ratios), min(ratios), max(ratios)


def for_gpu(case: Case) -> Case:
    """The case with its GPU arguments (the twin keeps its fix after them)."""
    if case.on_gpu is None:
        return case
    fix = case.twin[len(case.planted) :]
    return replace(case, planted=case.on_gpu, twin=case.on_gpu + fix)


def run_case(case: Case, rounds: int, work: Path, save=lambda row: None) -> dict:
    """One case's row; ``save(row)`` once `try` is measured, before the twins' rounds."""
    work.mkdir(parents=True, exist_ok=True)
    run_dir, report = _profile(work / "planted", case.script, case.planted)
    f = _finding(report, case.finding)
    row = {"case": case.name, "finding": case.finding, "fix": case.fix, "found": f is not None}
    if f is None:
        return row
    row["ceiling"] = (f.get("predicted_speedup") or {}).get("value")
    row["forecast"] = (f.get("forecast") or {}).get("value")
    row["forecast_of"] = ((f.get("forecast") or {}).get("arithmetic") or "").split(":")[0]
    # exactly `rounds` pairs, as many as the twin's (try would go on while its range is unresolved)
    pairs = ("--rounds", str(rounds), "--max-rounds", str(rounds))
    done = _scaldiag("try", str(run_dir), case.finding, *pairs, *case.try_args)
    if done.returncode != 0:
        row["try_error"] = done.stderr.strip()[-500:]
    else:
        kept = json.loads((run_dir / "try.json").read_text())
        ratios = [x for x in map(pair_ratio, kept["rounds"]) if x is not None]
        row["try_sets"] = kept["sets"]
        row["try"] = _spread(ratios) if ratios else None
    save(row)
    twin = []
    for k in range(rounds):  # alternating order, as try's rounds
        order = [("planted", case.planted), ("twin", case.twin)]
        ms = {}
        for side, args in order if k % 2 == 0 else order[::-1]:
            _, rep = _profile(work / f"{side}_{k}", case.script, args)
            ms[side] = _sample_ms(rep)
        if ms["planted"] and ms["twin"]:
            twin.append(ms["planted"] / ms["twin"])
        row["twin"] = _spread(twin) if twin else None
        row["twin_pairs"] = len(twin)
        save(row)  # a run stopped by its time limit keeps the pairs measured
    row["twin"] = _spread(twin) if twin else None
    if row.get("try") and row["twin"]:
        row["agree"] = row["try"][1] <= row["twin"][2] and row["twin"][1] <= row["try"][2]
    return row


def _skipped(case: Case, why: str) -> dict:
    return {"case": case.name, "finding": case.finding, "fix": case.fix, "skipped": why}


def _x(s) -> str:
    return f"{s[0]:.2f}x ({s[1]:.2f}-{s[2]:.2f})" if s else "-"


def table(rows: list[dict], rounds: int) -> str:
    out = [
        f"{rounds} pairs a side; speed-up = baseline steady step / fixed steady step, each per"
        " sample (means of the report's steady steps over its samples a step), median of the"
        " pairs (min-max).",
        "",
        "| case | finding | fix | forecast | ceiling | `try` measured | twin measured | agree |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.get("skipped"):
            head = f"| {r['case']} | {r['finding']} | {r['fix']}"
            out.append(f"{head} | not run: {r['skipped']} |||||")
            continue
        if not r.get("found"):
            out.append(f"| {r['case']} | {r['finding']} | {r['fix']} | not found in the run |||||")
            continue
        fc = f"{r['forecast']:.2f}x ({r['forecast_of']})" if r.get("forecast") else "-"
        ceiling = f"{r['ceiling']:.2f}x" if r.get("ceiling") else "-"
        measured = _x(r.get("try")) if "try_error" not in r else f"error: {r['try_error']}"
        agree = {True: "yes", False: "NO"}.get(r.get("agree"), "-")
        out.append(
            f"| {r['case']} | {r['finding']} | {r['fix']} | {fc} | {ceiling} | {measured} |"
            f" {_x(r.get('twin'))} | {agree} |"
        )
    out += ["", "Rows as JSON:", "", "```", *(json.dumps(r) for r in rows), "```"]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench try")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--gpu", action="store_true", help="the cases' GPU arguments (on_gpu)")
    p.add_argument("--out", type=Path, help="the result file (default bench/results/try.md)")
    p.add_argument("--work", type=Path, help="keep the runs here (default: a temporary folder)")
    a = p.parse_args(argv)
    before = machine()
    rows = []

    def save(row: dict | None = None) -> None:
        # Written after every step: a run stopped by its time limit keeps what was measured.
        done = rows + ([row] if row else [])
        write_result("try", CLAIM, argv, table(done, a.rounds), before, out=a.out)

    with tempfile.TemporaryDirectory(prefix="bench_try_") as tmp:
        tmp = a.work or tmp
        for name in a.cases.split(","):
            case = for_gpu(CASES[name]) if a.gpu else CASES[name]
            if a.gpu and case.tf_only:
                rows.append(_skipped(case, "tf.keras, and the GPU machine has no TensorFlow"))
            else:
                rows.append(run_case(case, a.rounds, Path(tmp) / name, save))
            print(json.dumps(rows[-1]), file=sys.stderr)
            save()
    return 0 if all(r.get("agree") is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
