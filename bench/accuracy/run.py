"""The blame is right, the advice helps and the forecast comes true against fixed twins
(docs/rules.md).

    python -m bench accuracy [--out DIR] [--rounds K] [--cases input_python,...] [--quick] [--label L]

Its table goes to bench/results/accuracy.md (bench.common.write_result); the runs' reports stay in
--out (a temporary folder by default). Committed runs and their reading: bench/results/accuracy/.

For every case (a zoo script of bench/zoo/, Keras 3; a PyTorch script of bench/torch/) and its fixed
twin (the same script with the fix's flag), runs `scaldiag profile` on the visible device (one GPU,
or the CPU) K rounds, planted and twin alternating in order (planted first in even rounds, twin
first in odd ones, so a drift of the shared machine does not favour one side), with the script's own
stopwatch, and prints one table and the summary line

    top-1 A/B; high false alarms C; forecast error median D%; 2-GPU prediction error median E%

- top cause: the first finding that names a cause (trace causes ranked by their gain, then run
  findings), each round; A counts the cases whose planted cause was top in every round;
- the twin's speedup (twin / planted samples/s, the scripts' stopwatches), per round: median and
  range;
- the top finding's number: its forecast where it has one *for the twin's fix* (the forecast's
  arithmetic names the fix), else its ceiling; D is the median |error| of the forecasts over all
  (case, round) pairs: ceilings are shown beside the twin but are no forecast and stay out of D;
- C: high-severity findings on the healthy scripts, every round, in `profile` and in `analyze` of
  the same trace;
- E: the 2-GPU prediction needs two GPUs (`profile --gpus 1,2`); "not measured (1 GPU)" with one.
"""  # noqa: E501

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The fix is said to help when the twin's median speedup is at least this (run-to-run noise: the
# healthy script's twin, itself, measured 0.98-1.02x on an H200).
HELPS = 1.05
# One profile's limit: a hung script is a failed round, not a hung benchmark (--timeout-s).
TIMEOUT_S = 300
# What SD101 advises on this machine for one rank (rules/machine.CpuBudget.workers)
ADVISED_WORKERS = max(1, (os.cpu_count() or 1) - 1)


@dataclass(frozen=True)
class Case:
    name: str
    script: str  # relative to the project root
    planted: str | None  # the category of the planted cause (None: healthy)
    twin: list[str]  # the twin's arguments: the fix
    fix_words: str | None = (
        None  # text of a forecast's arithmetic that says it forecasts the twin's fix
    )
    quick: list[str] = field(default_factory=list)  # arguments of a short run (sizing, the CPU)
    variants: dict[str, list[str]] = field(
        default_factory=dict
    )  # other fixes, measured in round 0 only
    stopwatch: str = "zoo"  # "zoo": ZOO_STOPWATCH json; "stdout": the script's printed samples/s
    needs_device: bool = (
        False  # the planted cause exists only with a device (host-to-device copies)
    )
    args: list[str] = field(default_factory=list)  # passed on every run, planted and twin
    # What changes with a device (a GPU), measured: {"planted": ..., "twin": [...]} replacing the
    # fields.
    on_device: dict = field(default_factory=dict)


def for_device(case: Case, device: bool) -> Case:
    """The case as it is on a GPU (``on_device``) or without one."""
    return replace(case, **case.on_device) if device and case.on_device else case


CASES = [
    Case(
        "input_python",
        "bench/zoo/input_python.py",
        "input",
        ["--fixed"],
        quick=["--steps", "12"],
        variants={"threads": ["--fixed", "--threads"], "processes": ["--fixed", "--processes"]},
    ),
    Case(
        "host_to_device",
        "bench/zoo/host_to_device.py",
        "h2d",
        ["--fixed"],
        fix_words="uint8",
        quick=["--steps", "8", "--batch", "64"],
        needs_device=True,
    ),
    Case(
        "host_launch",
        "bench/zoo/host_launch.py",
        "host_overhead",
        ["--fixed"],
        fix_words="per-replica batch x4",
        quick=["--steps", "80"],
    ),
    Case(
        "healthy",
        "bench/zoo/healthy.py",
        None,
        ["--fixed"],
        quick=["--steps", "5", "--batch", "32"],
    ),
    # The twin is the advice as printed for this machine (rules/machine.py: cores - 1 workers for
    # one rank); the variant, the 8 workers the advice said before it knew the machine (0.47x on 2
    # cores, issue 23).
    Case(
        "torch_input_bound",
        "bench/torch/input_bound.py",
        "input",
        ["--fixed", "--workers", str(ADVISED_WORKERS)],
        args=["--steps", "40"],
        quick=["--steps", "16"],
        stopwatch="stdout",
        fix_words="parallel input workers",
        variants={"8_workers": ["--fixed", "--workers", "8"]},
        # On an H200 (16 cores) 40 steps of the twin are mostly its 15 workers starting (5.95x
        # against 11.3x at 400 steps, the script's own stopwatch, bench/results/accuracy/README.md):
        # the steady state needs 400.
        on_device={"args": ["--steps", "400"]},
    ),
    Case(
        "torch_launch_bound",
        "bench/torch/launch_bound.py",
        "host_overhead",
        ["--fixed"],
        args=["--steps", "200"],
        fix_words="torch.compile",
        quick=["--steps", "60"],
        stopwatch="stdout",
    ),
    # bench/torch/healthy.py at batch 1024 was the zoo's healthy PyTorch script until run 6. On an
    # H200 it is host-bound: the same step replayed as one CUDA graph (the same kernels, no launches
    # from Python) was 1.31x [1.24, 1.39] faster
    # (bench/results/gpu_h200/torch/torch.md#sd105_twinsmd), the eager step waiting on the host
    # about a quarter of its time, over SD105's high bound (20%). So on a GPU its planted cause is
    # host overhead and its twin that graph, SD105's PyTorch advice where the device is busy 40%+;
    # on the CPU (short arguments, no graphs there) it stays a script with no planted cause, its
    # twin SD105's CPU fix, torch.compile, which tests that label (``refutes_none``).
    Case(
        "torch_wide_mlp",
        "bench/torch/healthy.py",
        None,
        ["--fixed", "compile"],
        args=["--steps", "40"],
        quick=["--steps", "16", "--batch", "64", "--width", "512"],
        stopwatch="stdout",
        on_device={"planted": "host_overhead", "twin": ["--fixed", "graphs"]},
    ),
    # The healthy PyTorch script: the same model at batch 4096 (2.4x the samples/s of batch 1024 on
    # an H200, gpu_h200/torch/torch.md), its twin the same CUDA graph: a healthy script's graph twin
    # measures no gain.
    # On the CPU there are no CUDA graphs (capturable=True refuses CPU tensors): the twin is
    # torch.compile (SD105's CPU fix). Its short CPU arguments (batch 64, width 512) are where
    # SD105 read a host-overhead share of 20-24% (bench/results/accuracy, cpu_2026-12-06_zoo_c):
    # the twin says whether that step is healthy there.
    Case(
        "torch_healthy",
        "bench/torch/healthy.py",
        None,
        ["--fixed", "compile"],
        args=["--steps", "40", "--batch", "4096"],
        quick=["--steps", "16", "--batch", "64", "--width", "512"],
        stopwatch="stdout",
        on_device={"twin": ["--fixed", "graphs"]},
    ),
]
BY_NAME = {c.name: c for c in CASES}
_PRINTED_RATE = re.compile(r"steady ([\d.]+) samples/s|([\d.]+) samples/s \(script's own stopwatch")


def profile(out: Path, case: Case, label: str, args: list[str], analyze: bool) -> dict:
    """One `scaldiag profile` of the case with ``args``; the report with the stopwatch's samples/s.
    """
    stopwatch = out / f"{label}.stopwatch.json"
    env = {**os.environ, "ZOO_STOPWATCH": str(stopwatch)}
    cmd = [
        sys.executable,
        "-m",
        "scaldiag",
        "profile",
        "--out",
        str(out / "runs" / label),
        "--json",
        str(out / f"{label}.json"),
        str(ROOT / case.script),
    ] + (["--", *args] if args else [])
    t0 = time.perf_counter()
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
        text = result.stdout + result.stderr
    except subprocess.TimeoutExpired as exc:
        text = f"{_text(exc.stdout)}{_text(exc.stderr)}\ntimed out after {TIMEOUT_S} s"
    wall_s = time.perf_counter() - t0
    (out / f"{label}.txt").write_text(text)
    try:
        report = json.loads((out / f"{label}.json").read_text())
    except (OSError, ValueError):
        return {"failed": True, "wall_s": wall_s}
    report["wall_s"] = wall_s
    report["stopwatch"] = _stopwatch(case, stopwatch, text)
    if analyze:  # false alarms of `analyze` on the same trace, for the healthy scripts
        run_dir = next((out / "runs" / label).iterdir())
        analyzed = subprocess.run(
            [sys.executable, "-m", "scaldiag", "analyze", str(run_dir / "trace"), "--json", "-"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        report["analyze"] = (
            json.loads(analyzed.stdout) if analyzed.returncode == 0 else {"findings": []}
        )
    return report


def _text(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def _stopwatch(case: Case, path: Path, text: str) -> float | None:
    if case.stopwatch == "zoo":
        try:
            return json.loads(path.read_text())["samples_per_s"]
        except (OSError, ValueError, KeyError):
            return None
    rates = [float(a or b) for a, b in _PRINTED_RATE.findall(text)]
    return rates[-1] if rates else None


def causes(report: dict) -> list[dict]:
    trace = (report.get("trace_report") or {}).get("findings", [])
    return [f for f in trace if f["category"] != "idle"] + report.get("findings", [])


def all_findings(report: dict) -> list[dict]:
    return report.get("findings", []) + (report.get("trace_report") or {}).get("findings", [])


def judge(case: Case, bad: dict, good: dict) -> dict:
    """One round of one case: the blame, the twin, the number against it."""
    if (
        bad.get("failed")
        or good.get("failed")
        or not bad.get("stopwatch")
        or not good.get("stopwatch")
    ):
        return {"failed": True}
    found = causes(bad)
    top = found[0] if found else None
    rank = next((i + 1 for i, f in enumerate(found) if f["category"] == case.planted), None)
    measured = good["stopwatch"] / bad["stopwatch"]
    number = kind = None
    if top and top["category"] == case.planted:
        forecast = top.get("forecast")
        if forecast and case.fix_words and case.fix_words in forecast["arithmetic"]:
            number, kind = forecast["value"], "forecast"
        elif top.get("predicted_speedup"):
            number, kind = (
                top["predicted_speedup"]["value"],
                top["predicted_speedup"].get("kind", "ceiling"),
            )
    high = (
        [f"{f['id']}" for f in all_findings(bad) if f["severity"] == "high"]
        if case.planted is None
        else []
    )
    high_analyze = (
        [f["id"] for f in bad.get("analyze", {}).get("findings", []) if f["severity"] == "high"]
        if case.planted is None
        else []
    )
    return {
        "top": f"{top['id']} {top['category']}" if top else "none",
        "rank": rank,
        "measured": measured,
        "number": number,
        "kind": kind,
        "error_pct": 100 * (number - measured) / measured if number else None,
        "high_profile": high,
        "high_analyze": high_analyze,
        "samples_per_s": [bad["stopwatch"], good["stopwatch"]],
        "wall_s": bad["wall_s"] + good["wall_s"],
    }


def run_round(out: Path, case: Case, r: int, quick: bool) -> tuple[dict, dict]:
    """Round ``r`` of one case: planted and twin (alternating which goes first), and in round 0 the
    variants."""
    extra = case.args + (case.quick if quick else [])
    order = [("planted", extra), ("twin", extra + case.twin)]
    reports = {}
    for side, args in order if r % 2 == 0 else order[::-1]:
        reports[side] = profile(
            out, case, f"{case.name}_{side}_r{r}", args, analyze=case.planted is None
        )
    variants = {}
    for name, args in case.variants.items() if r == 0 else ():
        v = profile(out, case, f"{case.name}_{name}_r0", extra + args, analyze=False)
        if v.get("stopwatch") and reports["planted"].get("stopwatch"):
            variants[name] = v["stopwatch"] / reports["planted"]["stopwatch"]
    return judge(case, reports["planted"], reports["twin"]), variants


def median_range(values: list[float]) -> str:
    if not values:
        return "-"
    return (
        f"{statistics.median(values):.2f}x [{min(values):.2f}-{max(values):.2f}]"
        if len(values) > 1
        else f"{values[0]:.2f}x"
    )


def table(rows: list[dict], label: str, rounds: int, device_planted: bool) -> tuple[list[str], str]:
    lines = [
        f"# Accuracy benchmark {label}",
        "",
        (
            f"Up to {rounds} round(s) of each case and twin (the rounds column says how many ran),"
            " planted and twin alternating which goes first. Twin speedup: median [min-max] over"
            " rounds."
        ),
        "",
        (
            "| case | rounds | planted | top cause per round | rank of planted | twin speedup | top"
            " finding's number (kind) per round | error per round | fix helps | high false alarms"
            " (profile / analyze) |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    top1 = planted_cases = alarms = 0
    errors, refuted = [], []
    for row in rows:
        ok = [r for r in row["rounds"] if not r.get("failed")]
        case = for_device(BY_NAME[row["case"]], device_planted)
        skipped = None
        if not row["rounds"]:
            skipped = "not run (time budget)"
        elif case.planted:
            if case.needs_device and not device_planted:
                skipped = "no device: the planted copies do not exist"
            else:
                planted_cases += 1
                top1 += (
                    bool(ok) and all(r["rank"] == 1 for r in ok) and len(ok) == len(row["rounds"])
                )
                errors += [abs(r["error_pct"]) for r in ok if r["kind"] == "forecast"]
        else:
            high = sum(len(r["high_profile"]) + len(r["high_analyze"]) for r in ok)
            if refutes_none(case, ok):
                refuted += [row["case"]] * high
            else:
                alarms += high
        lines.append(_line(row, ok, skipped))
    summary = (
        f"top-1 {top1}/{planted_cases}; high false alarms {alarms}"
        + (
            f" ({len(refuted)} more high findings where the fixed twin refutes the 'none' label:"
            f" {', '.join(sorted(set(refuted)))})"
            if refuted
            else ""
        )
        + "; forecast error median "
        + (
            f"{statistics.median(errors):.0f}% ({len(errors)} forecasts)"
            if errors
            else "n/a (no forecast)"
        )
        + f"; 2-GPU prediction error median {devset_error()}"
    )
    return lines, summary


# The development set of real 1-GPU runs and their measured 2-GPU throughput (its README): the cases
# and modes tests/test_predict_devset.py predicts. With two GPUs lent, `profile --gpus 1,2` of the
# zoo adds more.
DEVSET = ROOT.parent / "shared" / "fixtures" / "x2_devset"
DEVSET_CASES = {
    "keras_jax_mlp_sync": ("weak", 48_155),
    "keras_jax_fixed_batch": ("strong", 28_321),
    "torch_ddp_sync": ("weak", 25_036),
}


def devset_error() -> str:
    """Median |error| of the 2-GPU predictions from the development set's 1-GPU runs, or why there
    is none."""
    if not DEVSET.exists():
        return "not measured (no development set here, and no second GPU)"
    sys.path.insert(0, str(ROOT))
    from scaldiag.analyze.predict import predict
    from scaldiag.analyze.scaling import _basis
    from scaldiag.pipeline import analyze_run_dir

    errors = []
    for case, (mode, measured) in DEVSET_CASES.items():
        p = predict(_basis(1, [analyze_run_dir(DEVSET / case / "run_1gpu")]), 2, mode)
        errors.append(abs(100 * (p.samples_per_s - measured) / measured))
    return f"{statistics.median(errors):.1f}% (development set, {len(errors)} real 2-GPU runs)"


def refutes_none(case: Case, ok: list[dict]) -> bool:
    """A script labelled healthy whose fixed twin (a fix, not the script again) was faster beyond
    HELPS in every round: the label is wrong on this machine, and a high finding there is no false
    alarm. The summary line counts those apart, by name."""
    measured = [r["measured"] for r in ok if r.get("measured")]
    return bool(case.twin) and bool(measured) and min(measured) >= HELPS


def _line(row: dict, ok: list[dict], skipped: str | None) -> str:
    failed = len(row["rounds"]) - len(ok)
    tops = ", ".join(r["top"] for r in ok) + (f" ({failed} failed)" if failed else "")
    ranks = ", ".join(str(r["rank"] or "-") for r in ok)
    measured = [r["measured"] for r in ok]
    numbers = ", ".join(f"{r['number']:.2f}x ({r['kind']})" if r["number"] else "-" for r in ok)
    errors = ", ".join(f"{r['error_pct']:+.0f}%" if r["error_pct"] is not None else "-" for r in ok)
    helps = "yes" if measured and statistics.median(measured) >= HELPS else "NO"
    if row["planted"] == "none":
        # A healthy script's twin is itself or a fix it should not need: a gain beyond the noise
        # says the label is wrong (as the CUDA graph said of batch 1024, torch_wide_mlp).
        helps = (
            "twin helps: label doubtful"
            if measured and statistics.median(measured) >= HELPS
            else "- (twin = noise)"
        )
        alarms = " / ".join(
            "; ".join(",".join(r[k]) or "0" for r in ok) for k in ("high_profile", "high_analyze")
        )
    else:
        alarms = "-"
    variants = "".join(f"; {name}: {v:.2f}x" for name, v in row["variants"].items())
    skipped = f" (not counted: {skipped})" if skipped else ""
    return (
        f"| {row['case']}{skipped} | {len(row['rounds'])} | {row['planted']} | {tops} | {ranks} |"
        f" {median_range(measured)}{variants} | {numbers} | {errors} | {helps} | {alarms} |"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument(
        "--out", default=None, help="where the runs and reports go (default: a temporary folder)"
    )
    p.add_argument("--cases", default=",".join(c.name for c in CASES))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--torch-rounds",
        type=int,
        default=None,
        help="rounds of the PyTorch cases (default: --rounds)",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="start no new round of a case after this many seconds (the table is written anyway)",
    )
    p.add_argument("--quick", action="store_true", help="short runs (each case's quick arguments)")
    p.add_argument(
        "--no-device",
        action="store_true",
        help="the CPU: cases planted in device copies are not counted",
    )
    p.add_argument("--label", default="")
    p.add_argument("--timeout-s", type=float, default=TIMEOUT_S, help="one profile's limit")
    p.add_argument(
        "--table-to", help="also write accuracy.md and accuracy.json here, after every round"
    )
    a = p.parse_args()
    globals()["TIMEOUT_S"] = a.timeout_s
    out = Path(a.out or tempfile.mkdtemp(prefix="scaldiag-accuracy-"))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    cases = [for_device(BY_NAME[name], not a.no_device) for name in a.cases.split(",")]
    rows = {
        c.name: {"case": c.name, "planted": c.planted or "none", "rounds": [], "variants": {}}
        for c in cases
    }
    # Keras cases first, then PyTorch's; within each, round-major: every case gets its first round
    # before any gets its second, so a budget cut leaves whole rounds.
    keras = [c for c in cases if c.stopwatch == "zoo"]
    torch = [c for c in cases if c.stopwatch != "zoo"]
    torch_rounds = a.rounds if a.torch_rounds is None else a.torch_rounds
    plan = [(r, c) for r in range(a.rounds) for c in keras] + [
        (r, c) for r in range(torch_rounds) for c in torch
    ]
    for r, case in plan:
        if a.budget_s and time.perf_counter() - t0 > a.budget_s:
            print(f"# budget: {case.name} round {r} not started", flush=True)
            continue
        result, variants = run_round(out, case, r, a.quick)
        rows[case.name]["rounds"].append(result)
        rows[case.name]["variants"].update(variants)
        print(
            json.dumps({"case": case.name, "round": r, **result}),
            f"# {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        write(out, a, list(rows.values()), t0)  # a run killed at its limit still leaves its table
    lines = write(out, a, list(rows.values()), t0)
    print("\n".join(lines))
    sys.path.insert(0, str(ROOT))
    from bench.common import claim_of, write_result

    write_result(
        "accuracy",
        claim_of(__doc__),
        sys.argv[1:],
        "\n".join(lines) + f"\n\nruns and reports: {out}\n",
    )


def write(out: Path, a, rows: list[dict], t0: float) -> list[str]:
    lines, summary = table(rows, a.label, a.rounds, device_planted=not a.no_device)
    lines += ["", summary, "", f"wall time {time.perf_counter() - t0:.0f} s"]
    for folder in [out] + ([Path(a.table_to)] if a.table_to else []):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "accuracy.md").write_text("\n".join(lines) + "\n")
        (folder / "accuracy.json").write_text(json.dumps(rows, indent=1))
    return lines


if __name__ == "__main__":
    main()
