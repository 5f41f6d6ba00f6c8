"""PyTorch device step times on a GPU: device_steps.jsonl against the script's own synchronized
stopwatch.

Run from the project root on the GPU machine (python3 with torch + CUDA; scaldiag from this
checkout):

    PYTHONPATH=$PWD python3 bench/gpu/check_torch_device_clock.py --out "$OUT"            # eager, then torch.compile
    PYTHONPATH=$PWD python3 bench/gpu/check_torch_device_clock.py --out "$OUT" --cases eager

Each case runs this same file as a training script (``--train``) under ``scaldiag profile``: an MLP
on cuda:0 fed by a DataLoader (pinned, non_blocking copies), a ``loss.item()`` every SYNC_EVERY
steps (the host runs ahead of the device between those syncs, then waits for it),
``torch.cuda.synchronize()`` and a perf_counter stopwatch around each epoch. Then, per epoch after
the first (the first holds the warm-up and the profiler window), leaving out each epoch's first step
(its edge: validation-free here, but the new pass over the loader):

- host: the mean and median of steps.jsonl's periods (the host's optimizer.step() boundaries);
- device: the mean and median of device_steps.jsonl (CUDA events at the same boundaries);
- stopwatch: the script's synchronized seconds per step.

It also times the pieces of the hook with real events (``record`` with the current stream,
``query``, ``elapsed_time``, a whole ``TorchCapture._begin_timed``), in microseconds per call, and
checks the record: ``device_clock`` in training.json, device rows for every step but the first,
``compile`` marks (compile case: inside the first steps; eager: none) and ``compile_evidence``.
Everything goes to OUT/device_clock_check.{txt,json} and OUT/device_clock_runs.tgz. About 1-2
minutes (the compile case pays inductor's compile once).
"""  # noqa: E501

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SYNC_EVERY = 50


# --- the training script (run under scaldiag profile)
# ----------------------------------------------------
def train(args) -> None:
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    device = torch.device("cuda:0")
    width = args.width
    layers = [nn.Linear(256, width), nn.ReLU()]
    for _ in range(args.layers):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10)).to(device)
    step_model = torch.compile(model) if args.compile else model
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    n = args.batch * args.steps_per_epoch
    loader = DataLoader(
        TensorDataset(torch.randn(n, 256), torch.randint(0, 10, (n,))),
        batch_size=args.batch,
        shuffle=True,
        pin_memory=True,
        drop_last=True,
    )
    watch = []
    for epoch in range(args.epochs):
        torch.cuda.synchronize()
        t0, steps = time.perf_counter(), 0
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = nn.functional.cross_entropy(step_model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
            if steps % SYNC_EVERY == 0:
                loss.item()
        torch.cuda.synchronize()
        watch.append({"epoch": epoch, "steps": steps, "seconds": time.perf_counter() - t0})
        print(
            f"epoch {epoch}: {steps} steps, {watch[-1]['seconds'] / steps * 1e3:.3f} ms/step"
            " (synchronized)",
            flush=True,
        )
    Path(args.stopwatch).write_text(json.dumps(watch))


# --- reading a run
# ---------------------------------------------------------------------------------------
def device_times(run_dir: Path) -> dict[int, float]:
    times = {}
    path = run_dir / "device_steps.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            row = json.loads(line)
            for i, ms in enumerate(row["device_ms"]):
                times[row["step"] + i] = ms
    return times


def summarise(run_dir: Path, watch: list[dict], compiled: bool) -> dict:
    sys.path.insert(0, str(ROOT))
    from scaldiag.record.reader import read_record

    record = read_record(run_dir)
    steps, marks, training = record.steps, record.marks, record.training
    device = device_times(run_dir)
    per_epoch = []
    for w in watch:
        rows = [s for s in steps if s["epoch"] == w["epoch"]]
        if w["epoch"] == 0 or len(rows) < 3:
            continue
        body = rows[1:]  # the first step of an epoch holds its edge
        host = [(s["end_ns"] - s["begin_ns"]) / 1e6 for s in body]
        dev = [device[s["step"]] for s in body if s["step"] in device]
        per_epoch.append(
            {
                "epoch": w["epoch"],
                "steps": len(body),
                "host_mean_ms": statistics.fmean(host),
                "host_median_ms": statistics.median(host),
                "host_max_ms": max(host),
                "device_mean_ms": statistics.fmean(dev) if dev else None,
                "device_median_ms": statistics.median(dev) if dev else None,
                "device_steps_found": len(dev),
                "stopwatch_ms": w["seconds"] / w["steps"] * 1e3,
            }
        )
    compiles = [m for m in marks if m["mark"] == "compile"]
    first_steps_end = steps[2]["end_ns"] if len(steps) > 2 else None
    return {
        "run_dir": str(run_dir),
        "steps": len(steps),
        "device_steps": len(device),
        "device_steps_cover": sorted(device) == [s["step"] for s in steps][1:],
        "device_clock": training.get("device_clock"),
        "device_clock_error": training.get("device_clock_error"),
        "compile_evidence": training.get("compile_evidence"),
        "compile_marks": len(compiles),
        "compile_marks_in_first_steps": sum(
            1 for m in compiles if first_steps_end and m["end_ns"] <= first_steps_end
        ),
        "compiled": compiled,
        "epochs": per_epoch,
    }


# --- the hook's cost with real events
# --------------------------------------------------------------------
def per_call_us(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def paired_us(f, g, blocks: int = 40, per_block: int = 1000) -> tuple[float, float]:
    """``f`` and ``g`` in alternating blocks (the machine's drift hits both alike): us per call of
    each."""
    spent = [0.0, 0.0]
    for _ in range(blocks):
        for i, fn in enumerate((f, g)):
            t0 = time.perf_counter()
            for _ in range(per_block):
                fn()
            spent[i] += time.perf_counter() - t0
    return spent[0] / (blocks * per_block) * 1e6, spent[1] / (blocks * per_block) * 1e6


def hook_costs(work_dir: Path) -> dict:
    import functools

    import torch

    sys.path.insert(0, str(ROOT))
    from scaldiag.collect.frameworks.torch_capture import TorchCapture
    from scaldiag.collect.frameworks.torch_device_clock import WRITE_EVERY_ROWS, DeviceClock
    from scaldiag.collect.recorder import StepRecorder
    from scaldiag.record.rundir import DEVICE_STEPS, JsonlWriter

    device = torch.device("cuda:0")
    x = torch.ones(1024, device=device)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    stream = functools.partial(torch.cuda.current_stream, device)
    a.record(), b.record()
    torch.cuda.synchronize()
    costs = {}
    for rnd in range(3):
        a.record(), b.record()
        torch.cuda.synchronize()
        plain_dir, timed_dir = work_dir / f"plain{rnd}", work_dir / f"timed{rnd}"
        plain_dir.mkdir(), timed_dir.mkdir()
        plain = StepRecorder(plain_dir, None, warmup_steps=0, trace_steps=0)
        timed = StepRecorder(timed_dir, None, warmup_steps=0, trace_steps=0)
        writer = JsonlWriter(
            timed_dir / DEVICE_STEPS, flush_every=WRITE_EVERY_ROWS, max_delay_s=1.0
        )
        capture = TorchCapture()
        capture._recorder_begin = timed.begin
        capture.clock = DeviceClock(
            functools.partial(torch.cuda.Event, enable_timing=True), stream, writer.write, 0
        )

        def kernel_then(fn):
            def step():
                x.add_(
                    1.0
                )  # a step's worth of queued work, tiny: the device keeps up, so reads retire it
                fn()

            return step

        row = {
            "torch.cuda.current_stream(device)": per_call_us(stream, 20000),
            "event.record(stream), the stream looked up before": per_call_us(
                functools.partial(a.record, stream()), 20000
            ),
        }
        b.record()
        torch.cuda.synchronize()  # both complete: query and elapsed_time as a read finds them
        row["event.query() (complete)"] = per_call_us(a.query, 20000)
        row["start.elapsed_time(end)"] = per_call_us(lambda: a.elapsed_time(b), 20000)
        row["x.add_(1) (a kernel launch, for scale)"] = per_call_us(lambda: x.add_(1.0), 20000)
        plain_us, timed_us = paired_us(kernel_then(plain.begin), kernel_then(capture._begin_timed))
        row["step: kernel + StepRecorder.begin"] = plain_us
        row["step: kernel + TorchCapture._begin_timed"] = timed_us
        torch.cuda.synchronize()
        capture.clock.finish()
        writer.close()
        for name, value in row.items():
            costs.setdefault(name, []).append(value)
    return {name: statistics.median(values) for name, values in costs.items()}


# --- the driver
# ------------------------------------------------------------------------------------------
def run_case(name: str, out: Path, work: Path, args) -> dict:
    watch_file = work / f"{name}_stopwatch.json"
    train_args = [
        "--train",
        "--stopwatch",
        str(watch_file),
        "--epochs",
        str(args.epochs),
        "--steps-per-epoch",
        str(args.steps_per_epoch),
        "--batch",
        str(args.batch),
        "--width",
        str(args.width),
        "--layers",
        str(args.layers),
    ] + (["--compile"] if name == "compile" else [])
    runs = work / "runs" / name
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "PYTHONUNBUFFERED": "1",
    }
    started = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "--out",
            str(runs),
            str(Path(__file__)),
            "--",
            *train_args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=args.timeout,
    )
    (out / f"device_clock_{name}.log").write_text(result.stdout + "\n--- stderr\n" + result.stderr)
    if result.returncode != 0 or not watch_file.exists():
        return {
            "case": name,
            "error": f"exit {result.returncode}",
            "stderr_tail": result.stderr[-2000:],
        }
    (run_dir,) = list(runs.iterdir())
    summary = summarise(run_dir, json.loads(watch_file.read_text()), name == "compile")
    summary["case"], summary["wall_s"] = name, time.perf_counter() - started
    return summary


def table(summary: dict) -> str:
    if "error" in summary:
        return f"{summary['case']}: FAILED ({summary['error']})\n{summary['stderr_tail']}\n"
    lines = [
        (
            f"== {summary['case']}: {summary['steps']} steps, {summary['device_steps']} device"
            " steps "
            f"(cover all but step 0: {summary['device_steps_cover']});"
            f" device_clock={summary['device_clock']!r}"
            f"{' error=' + summary['device_clock_error'] if summary['device_clock_error'] else ''}"
        ),
        (
            f"   compile_evidence={summary['compile_evidence']} compile"
            f" marks={summary['compile_marks']} (in the first 3 steps:"
            f" {summary['compile_marks_in_first_steps']})"
        ),
        (
            "   epoch  steps  host mean  host median  host max  device mean  device median "
            " stopwatch  device/stopwatch  host/stopwatch"
        ),
    ]
    for e in summary["epochs"]:
        dev = e["device_mean_ms"]
        lines.append(
            f"   {e['epoch']:5d}  {e['steps']:5d}  {e['host_mean_ms']:9.3f} "
            f" {e['host_median_ms']:11.3f}  {e['host_max_ms']:8.3f} "
            f" {dev if dev is not None else float('nan'):11.3f} "
            f" {e['device_median_ms'] if dev is not None else float('nan'):13.3f} "
            f" {e['stopwatch_ms']:9.3f}  {(dev / e['stopwatch_ms']) if dev else float('nan'):16.4f}"
            f"  {e['host_mean_ms'] / e['stopwatch_ms']:14.4f}"
        )
    if summary["epochs"]:

        def mean(key):
            values = [e[key] for e in summary["epochs"] if e[key] is not None]
            return statistics.fmean(values) if values else float("nan")

        lines.append(
            f"   steady (epochs 1..): host mean {mean('host_mean_ms'):.3f} ms, device mean "
            f"{mean('device_mean_ms'):.3f} ms, stopwatch {mean('stopwatch_ms'):.3f} ms per step"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", action="store_true", help="(internal) be the training script")
    parser.add_argument("--stopwatch", default="stopwatch.json")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--out", default=os.environ.get("OUT", "bench/results/torch_gpu"))
    parser.add_argument("--cases", default="eager,compile")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps-per-epoch", type=int, default=150)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--timeout", type=int, default=300)
    args = parser.parse_args()
    if args.train:
        train(args)
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        report = {
            "cases": [run_case(name, out, work, args) for name in args.cases.split(",") if name]
        }
        costs_dir = work / "costs"
        costs_dir.mkdir()
        report["hook_costs_us"] = hook_costs(costs_dir)
        if (work / "runs").exists():
            with tarfile.open(out / "device_clock_runs.tgz", "w:gz") as tar:
                tar.add(work / "runs", arcname="runs")
    import torch

    header = (
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)};"
        f" batch {args.batch}, width {args.width} x {args.layers} layers, loss.item() every"
        f" {SYNC_EVERY} steps\n"
    )
    text = header + "".join(table(c) for c in report["cases"])
    text += "hook pieces, us per call (median of 3 rounds of 20,000):\n" + "".join(
        f"   {value:8.3f}  {name}\n" for name, value in report["hook_costs_us"].items()
    )
    costs = report["hook_costs_us"]
    text += (
        f"   {costs['step: kernel + TorchCapture._begin_timed'] - costs['step: kernel + StepRecorder.begin']:8.3f}"  # noqa: E501
        "  the device clock's cost per step (difference of the two step rows)\n"
    )
    print(text)
    (out / "device_clock_check.txt").write_text(text)
    (out / "device_clock_check.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
