"""The input-free measurement stays within its 3 s budget and gives the step the earlier, longer one
gave (docs/profile.md).

The input-free measurement before and after its budget (issue 27), side by side in one process.

    KERAS_BACKEND=tensorflow python -m bench input_free [--rounds 6] [--old-rev REV] [--models cnn,mlp,slow]
        [--out FILE]

For each model (the bundled example's CNN on arrays, a small MLP on arrays, the CNN fed by the
example's slow ``PyDataset``), trains it as a user would, then measures its input-free step with the
earlier code (``--old-rev``'s ``input_free.py``: a clone, a whole compile epoch, three ~1 s epochs)
and the current code (a 3 s budget) in alternating rounds (old-new, new-old, ...) so that the shared
machine's noise hits both. Writes a JSON of every round and a markdown table: each arm's step_ms
(mean over rounds, the rounds' coefficient of variation), its in-measurement spread
((max-min)/median of its epochs), its seconds, and the paired difference new/old with a 95% t
interval over the rounds.
"""  # noqa: E501

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import record

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import keras  # noqa: E402
import numpy as np  # noqa: E402

from scaldiag.collect.frameworks import input_free as new  # noqa: E402

PATH = "scaldiag/collect/frameworks/input_free.py"
T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23}


def old_module(rev: str):
    source = subprocess.run(
        ["git", "show", f"{rev}:{PATH}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "input_free_old.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("input_free_old", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Periods(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.begins = []

    def on_train_batch_begin(self, batch, logs=None):
        self.begins.append(time.perf_counter())


def cnn():
    return keras.Sequential(
        [
            keras.Input((32, 32, 3)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(10),
        ]
    )


def trained(name: str):
    """(model, one batch, the steady step period seen in training) after a user-like fit."""
    import train_cnn

    rng = np.random.default_rng(0)
    if name == "mlp":
        model = keras.Sequential(
            [
                keras.Input((64,)),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        x, y, batch = (
            rng.random((128 * 50, 64), dtype=np.float32),
            rng.integers(0, 10, 128 * 50),
            128,
        )
    else:
        model = cnn()
        x, y, batch = (
            rng.random((64 * 30, 32, 32, 3), dtype=np.float32),
            rng.integers(0, 10, 64 * 30),
            64,
        )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    periods = Periods()
    if name == "slow":
        model.fit(train_cnn.SlowBatches(x, y, batch), epochs=1, verbose=0, callbacks=[periods])
    else:
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=[periods])
    steps = np.diff(periods.begins[3:])
    return model, (x[:batch], y[:batch]), float(np.median(steps))


def one(module, model, batch, step_s: float, **kwargs) -> dict:
    module._measured_in_this_process = False
    t0 = time.perf_counter()
    try:
        result = module.measure(model, batch, "tensorflow", step_s, None, **kwargs)
    except module.Skipped as skipped:
        result = {"skipped": str(skipped)}
    result["wall_s"] = time.perf_counter() - t0
    return result


def summary(rows: list[dict]) -> dict:
    ok = [r for r in rows if "step_ms" in r]
    steps = [r["step_ms"] for r in ok]
    return {
        "n": len(ok),
        "skipped": len(rows) - len(ok),
        "step_ms_mean": statistics.mean(steps) if steps else None,
        "rounds_cv_pct": (
            100 * statistics.stdev(steps) / statistics.mean(steps) if len(steps) > 1 else None
        ),
        "spread_pct_mean": (
            statistics.mean(100 * (r["step_ms_max"] - r["step_ms_min"]) / r["step_ms"] for r in ok)
            if ok
            else None
        ),
        "wall_s_mean": statistics.mean(r["wall_s"] for r in rows),
        "wall_s_max": max(r["wall_s"] for r in rows),
    }


def paired(old_rows, new_rows) -> dict | None:
    ratios = [
        n["step_ms"] / o["step_ms"]
        for o, n in zip(old_rows, new_rows)
        if "step_ms" in o and "step_ms" in n
    ]
    if len(ratios) < 2:
        return None
    mean, sd = statistics.mean(ratios), statistics.stdev(ratios)
    half = T975.get(len(ratios) - 1, 2.0) * sd / len(ratios) ** 0.5
    return {"ratio_mean": mean, "ci95": [mean - half, mean + half], "n": len(ratios)}


def _main(argv: list[str]) -> int | None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--old-rev", default="81e0724")
    parser.add_argument("--models", default="cnn,mlp,slow")
    parser.add_argument(
        "--out",
        help=(
            "also write OUT.md and every round in OUT.json (the result is"
            " bench/results/input_free.md)"
        ),
    )
    args = parser.parse_args(argv)
    old = old_module(args.old_rev)
    revision = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    report = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": platform.node(),
        "cpus": os.cpu_count(),
        "load_before": os.getloadavg(),
        "command": " ".join(["python -m bench input_free", *argv]),
        "revision": revision,
        "old_revision": args.old_rev,
        "keras": keras.__version__,
        "models": {},
    }
    for name in args.models.split(","):
        model, batch, step_s = trained(name)
        rows = {"old": [], "new": []}
        for i in range(args.rounds):
            order = ["old", "new"] if i % 2 == 0 else ["new", "old"]
            for arm in order:
                rows[arm].append(one(old if arm == "old" else new, model, batch, step_s))
                print(
                    name,
                    i,
                    arm,
                    {
                        k: round(v, 3) if isinstance(v, float) else v
                        for k, v in rows[arm][-1].items()
                        if k != "source"
                    },
                    flush=True,
                )
        report["models"][name] = {
            "training_step_ms": step_s * 1e3,
            "rounds": rows,
            "old": summary(rows["old"]),
            "new": summary(rows["new"]),
            "new_over_old": paired(rows["old"], rows["new"]),
        }
    report["load_after"] = os.getloadavg()
    if args.out:
        out = Path(args.out)
        out.with_suffix(".json").write_text(json.dumps(report, indent=1))
        out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


def markdown(report: dict) -> str:
    lines = [
        f"# Input-free measurement: before ({report['old_revision']}) and after its budget",
        "",
        (
            f"- date {report['date']}, machine {report['machine']} ({report['cpus']} CPUs, shared;"
            f" load {report['load_before'][0]:.1f} before, {report['load_after'][0]:.1f} after),"
            f" Keras {report['keras']} on TF (CPU)"
        ),
        f"- command: `{report['command']}` at revision {report['revision']}",
        "",
        (
            "| model | training step ms | arm | step_ms mean | rounds CV % | epochs' spread % |"
            " seconds mean (max) | new/old [95% CI] |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, m in report["models"].items():
        p = m["new_over_old"]
        ratio = (
            f"{p['ratio_mean']:.3f} [{p['ci95'][0]:.3f}, {p['ci95'][1]:.3f}] (n={p['n']})"
            if p
            else "-"
        )
        for arm in ("old", "new"):
            s = m[arm]
            fmt = lambda v, f=".2f": "-" if v is None else format(v, f)  # noqa: E731
            lines.append(
                f"| {name} | {m['training_step_ms']:.2f} | {arm} | {fmt(s['step_ms_mean'])} |"
                f" {fmt(s['rounds_cv_pct'], '.1f')} | {fmt(s['spread_pct_mean'], '.1f')} |"
                f" {s['wall_s_mean']:.2f} ({s['wall_s_max']:.2f}) |"
                f" {ratio if arm == 'new' else ''} |"
                + (f" skipped {s['skipped']}" if s["skipped"] else "")
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    """``python -m bench input_free [ARGS]``: the run, its output kept as
    bench/results/input_free.md."""
    return record("input_free", __doc__, argv, lambda: _main(argv))
