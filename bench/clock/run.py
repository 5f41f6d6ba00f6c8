"""scaldiag's numbers agree with the clock each public script prints, within 5% (README: 10 on an H200, 8 of 8 on the CPU).

scaldiag's steady samples/s against each public script's own clock, in the same run.

For every entry of manifest.toml that runs on this machine: copy the script's stored folder
(unmodified) to a working directory, do the entry's named preparation there, run
`scaldiag profile -q --out RUNS --json REPORT.json [flags] SCRIPT -- ARGS`, read the script's own
clock from its stdout in that same run (every chunk of stdout is time-stamped on arrival, so
scripts that print no clock are timed by the arrival of a line they print each epoch), read
scaldiag's steady step time from the JSON report (`steps.samples_per_s`, `samples_per_step`,
its interval `samples_per_s_low/high`), convert both to ms/step and samples/s, and write a table
as Markdown and JSON.

    python bench/clock/run.py [--only A,B] [--machine cpu|gpu] [--timeout 240] [--out-dir DIR]
"""  # noqa: E501

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")
KERAS_FINAL = re.compile(
    r"^\s*(?P<cur>\d+)/(?P<tot>\d+) \S* ?(?P<elapsed>\d+)s (?P<t>[\d.]+)(?P<u>us|ms|s)/step"
)
UNIT_MS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}
# Keras's printed ms/step rounded by more than this: timed by its lines' arrival instead
COARSE_PCT = 2.5
# the scaldiag run in flight (its own session), for an interrupted runner
RUNNING: list[subprocess.Popen] = []


# ---------------------------------------------------------------- running
def _has(mod: str) -> bool:
    return importlib.util.find_spec(mod) is not None


def _missing_needs(entry: dict) -> list[str]:
    out = []
    for need in _needs(entry):
        if need == "cuda":
            try:
                import torch  # noqa: PLC0415

                ok = torch.cuda.is_available()
            except Exception:  # noqa: BLE001
                ok = False
            if not ok:
                out.append("cuda")
        elif not _has(NEED_MODULE.get(need, need)):
            out.append(need)
    return out


# a manifest framework kind -> the modules that must import for it (added to the entry's needs)
FRAMEWORK_NEEDS = {
    "lightning": ["torch", "lightning"],
    "hf": ["torch", "transformers", "accelerate", "datasets"],
    "jax": ["jax"],
    "torch": ["torch"],
}
NEED_MODULE = {"lightning": "lightning.pytorch"}


def _needs(entry: dict) -> list[str]:
    return list(
        dict.fromkeys([*FRAMEWORK_NEEDS.get(entry["framework"], []), *entry.get("needs", [])])
    )


def _mnist_arrays(n_train: int, n_test: int):
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(0)
    return [
        (
            rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8),
            rng.integers(0, 10, size=n, dtype=np.uint8),
        )
        for n in (n_train, n_test)
    ]


def _mnist_idx(d: Path, n_train: int, n_test: int, gz: bool) -> None:
    """Synthetic MNIST in its own idx format (big-endian headers, uint8 pixels and labels)."""
    import gzip  # noqa: PLC0415
    import struct  # noqa: PLC0415

    d.mkdir(parents=True, exist_ok=True)
    (tx, ty), (vx, vy) = _mnist_arrays(n_train, n_test)
    for name, x, y in (("train", tx, ty), ("t10k", vx, vy)):
        files = {
            f"{name}-images-idx3-ubyte": struct.pack(">IIII", 2051, len(x), 28, 28) + x.tobytes(),
            f"{name}-labels-idx1-ubyte": struct.pack(">II", 2049, len(y)) + y.tobytes(),
        }
        for fname, data in files.items():
            if gz:
                with gzip.open(d / (fname + ".gz"), "wb") as fh:
                    fh.write(data)
            else:
                (d / fname).write_bytes(data)


def _mnist_pt(d: Path, n_train: int, n_test: int) -> None:
    """Lightning's demo MNIST files: torch.save((uint8 [N, 28, 28], int64 [N]))."""
    import torch  # noqa: PLC0415

    d.mkdir(parents=True, exist_ok=True)
    for fname, (x, y) in zip(("training.pt", "test.pt"), _mnist_arrays(n_train, n_test)):
        torch.save((torch.from_numpy(x), torch.from_numpy(y.astype("int64"))), d / fname)


def _cora(d: Path) -> None:
    """Synthetic Cora as the LINQS files: 2,708 papers x 1,433 binary words + one of 7 labels
    (cora.content: id, 1,433 0/1, label), 5,429 citations (cora.cites: cited citing)."""
    import numpy as np  # noqa: PLC0415

    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    ids = rng.choice(np.arange(1, 1_200_000), size=2708, replace=False)
    labels = [
        "Case_Based",
        "Genetic_Algorithms",
        "Neural_Networks",
        "Probabilistic_Methods",
        "Reinforcement_Learning",
        "Rule_Learning",
        "Theory",
    ]
    feats = (rng.random((2708, 1433)) < 0.0127).astype(np.int8)  # ~18 words a paper, as Cora's
    feats[np.arange(2708), rng.integers(0, 1433, size=2708)] = 1
    with open(d / "cora.content", "w") as fh:
        for i in range(2708):
            fh.write(
                f"{ids[i]}\t" + "\t".join(map(str, feats[i])) + f"\t{labels[rng.integers(0, 7)]}\n"
            )
    pairs = set()
    while len(pairs) < 5429:
        a, b = rng.integers(0, 2708, size=2)
        if a != b:
            pairs.add((int(ids[a]), int(ids[b])))
    (d / "cora.cites").write_text("".join(f"{a}\t{b}\n" for a, b in sorted(pairs)))


def _prepare(kind: str | None, work: Path, entry: dict | None = None, machine: str = "cpu") -> None:
    if not kind:
        return
    entry = entry or {}
    n_train = int(entry.get(f"mnist_n_{machine}", entry.get("mnist_n", 60000)))
    n_test = int(entry.get("mnist_test_n", 10000))
    if kind == "wikitext_valid_as_train":
        src = work / "data" / "wikitext-2"
        dst = work / "data" / "clock"
        dst.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / "valid.txt", dst / "train.txt")
        shutil.copy(src / "valid.txt", dst / "valid.txt")
        shutil.copy(src / "test.txt", dst / "test.txt")
    elif kind == "nanogpt_tokens":
        import numpy as np  # noqa: PLC0415

        d = work / "data" / "clock"
        d.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        rng.integers(0, 50257, size=2_000_000, dtype=np.uint16).tofile(d / "train.bin")
        rng.integers(0, 50257, size=200_000, dtype=np.uint16).tofile(d / "val.bin")
    elif kind == "wikitext2_lightning":
        # lightning.pytorch.demos.WikiText2 reads ./data/wikitext-2.txt before it would download
        # pytorch/examples' word_language_model/data/wikitext-2/train.txt: the same corpus's
        # valid.txt (upstream, stored with pytorch/examples) stands in for it
        (work / "data").mkdir(parents=True, exist_ok=True)
        shutil.copy(
            HERE
            / "scripts"
            / "pytorch-examples"
            / "word_language_model"
            / "data"
            / "wikitext-2"
            / "valid.txt",
            work / "data" / "wikitext-2.txt",
        )
    elif kind == "jax_mnist_gz":
        # jax examples/datasets.py reads /tmp/jax_example_data/*-idx?-ubyte.gz before it would
        # download
        _mnist_idx(Path("/tmp/jax_example_data"), n_train, n_test, gz=True)
    elif kind == "mnist_raw_parent":
        # torchvision.datasets.MNIST('../data'): raw idx files in ../data/MNIST/raw are what it
        # checks first
        _mnist_idx(work.parent / "data" / "MNIST" / "raw", n_train, n_test, gz=False)
        # vae saves images into results/, which the script does not create (its run on the H200 of
        # 2026-12-04 failed there after its first epoch): made here, as its user would
        (work / "results").mkdir(exist_ok=True)
    elif kind == "mnist_lightning":
        # Lightning's demo MNIST: torchvision's MNIST at ./data (its _DATASETS_PATH) and at the
        # script's DATASETS_PATH (examples/Datasets) when torchvision imports; else the demo's own
        # processed files (MNIST/complete/{training,test}.pt)
        for root in (work / "data", work / "examples" / "Datasets"):
            _mnist_idx(root / "MNIST" / "raw", n_train, n_test, gz=False)
            _mnist_pt(root / "MNIST" / "complete", n_train, n_test)
    elif kind == "cora":
        _cora(work / "cora")
    elif kind == "hf_clm":
        _hf_clm(work)
    elif kind in ("plot_stub", "hf_mnist_dir"):
        _prepare_d(kind, work, n_train, n_test)
    elif kind == "sine_wave":
        subprocess.run([sys.executable, "generate_sine_wave.py"], cwd=work, check=True)
    else:
        raise SystemExit(f"unknown prepare step {kind!r}")


def _hf_clm(work: Path) -> None:
    """transformers' run_clm.py offline: text files, a tokenizer directory, and the `accuracy`
    metric where
    evaluate.load looks first. Text: upstream wikitext-2 valid.txt (training) and test.txt
    (validation), stored with pytorch/examples; the tokenizer: a byte-level BPE of 2,000 tokens
    trained on that training text with the `tokenizers` library, saved as transformers'
    PreTrainedTokenizerFast (./tokenizer, passed with --tokenizer_name: the script builds no
    tokenizer itself); evaluate.load("accuracy") reads  # noqa: E501 ./accuracy/accuracy.py before
    it would download: huggingface/evaluate's own metric script, stored byte-identical
    (scripts/evaluate-087d5cf)."""
    from tokenizers import ByteLevelBPETokenizer  # noqa: PLC0415
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415

    wiki = HERE / "scripts" / "pytorch-examples" / "word_language_model" / "data" / "wikitext-2"
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    shutil.copy(wiki / "valid.txt", data / "train.txt")
    shutil.copy(wiki / "test.txt", data / "validation.txt")
    bpe = ByteLevelBPETokenizer()
    bpe.train(
        [str(data / "train.txt")],
        vocab_size=2000,
        min_frequency=2,
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        model_max_length=1024,
    )
    tok.save_pretrained(str(work / "tokenizer"))
    shutil.copytree(
        HERE / "scripts" / "evaluate-087d5cf" / "metrics" / "accuracy", work / "accuracy"
    )


def _scaldiag_cmd() -> list[str]:
    venv = ROOT / ".venv" / "bin" / "scaldiag"
    return [str(venv)] if venv.exists() else [sys.executable, "-m", "scaldiag"]


def _run(entry: dict, machine: str, work: Path, timeout: float) -> dict:
    """Run one entry under scaldiag; return stdout segments with arrival times and the report."""
    script = work / (entry["path"] if entry.get("copy_root") else Path(entry["path"]).name)
    args = entry.get(f"args_{machine}", entry.get("args", []))
    runs = work / "runs"
    report = work / "report.json"
    cmd = [
        *_scaldiag_cmd(),
        "profile",
        "-q",
        "--out",
        str(runs),
        "--json",
        str(report),
        *entry.get("scaldiag_flags", []),
        str(script),
        "--",
        *args,
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if entry["framework"] == "keras":
        env.setdefault("KERAS_BACKEND", "jax" if machine == "gpu" else "tensorflow")
    elif entry["framework"] == "keras-tf":
        env["KERAS_BACKEND"] = "tensorflow"
    # a script that imports its repository's package (`from examples import datasets`)
    if entry.get("copy_root"):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(work), env.get("PYTHONPATH")) if p)
    env.update(entry.get("env", {}))
    if entry.get("shim"):
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(HERE / "shim"), env.get("PYTHONPATH")) if p
        )
        env["SCALDIAG_CLOCK_SHIM"] = entry["shim"]
        n = entry.get(f"mnist_n_{machine}", entry.get("mnist_n"))
        if n:
            env["SCALDIAG_CLOCK_MNIST_N"] = str(n)
    stop = entry.get("stop_after")
    stop_re, stop_n = (re.compile(stop[0]), int(stop[1])) if stop else (None, 0)
    t0 = time.monotonic()
    with open(work / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(
            cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=err, start_new_session=True
        )
        RUNNING[:] = [proc]
        segments: list[tuple[float, str, str]] = []  # (arrival s, text, terminator)
        buf, raw, matched, stopped, killed = "", bytearray(), 0, None, False
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)
        while True:
            now = time.monotonic() - t0
            if now > timeout and stopped is None:
                stopped = f"timeout after {timeout:.0f} s (SIGINT)"
                os.killpg(proc.pid, signal.SIGINT)
            if stopped and not killed and now > timeout + 60:
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                chunk = None
            if chunk == b"":
                break
            if not chunk:
                time.sleep(0.005)
                continue
            raw += chunk
            buf += chunk.decode("utf-8", "replace")
            parts = re.split(r"([\r\n])", buf)
            buf = parts.pop()
            for text, term in zip(parts[0::2], parts[1::2]):
                clean = ANSI.sub("", text).replace("\b", "")
                segments.append((now, clean, term))
                if (
                    stop_re
                    and stopped is None
                    and (term == "\n" or entry.get("stop_any_term"))
                    and stop_re.search(clean)
                ):
                    matched += 1
                    if matched >= stop_n:
                        stopped = (
                            f"stopped by SIGINT after {matched} lines matching the stop pattern"
                        )
                        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait()
    wall = time.monotonic() - t0
    (work / "stdout.txt").write_bytes(bytes(raw))
    (work / "stdout_times.jsonl").write_text(
        "".join(
            json.dumps({"t": round(t, 4), "text": s[:300]}) + "\n"
            for t, s, term in segments
            if term == "\n"
        )
    )
    rep = None
    if not report.exists():  # an interrupted run: report it again from the run directory
        dirs = sorted(p for p in runs.glob("*") if p.is_dir()) if runs.exists() else []
        if dirs:
            subprocess.run(
                [*_scaldiag_cmd(), "report", str(dirs[-1]), "--format", "json", "-o", str(report)],
                cwd=work,
                capture_output=True,
            )
    if report.exists():
        try:
            rep = json.loads(report.read_text())
        except ValueError:
            rep = None
    dirs = sorted(p for p in runs.glob("*") if p.is_dir()) if runs.exists() else []
    return {
        "run_dir": dirs[-1] if dirs else None,
        "cmd": cmd,
        "rc": rc,
        "wall_s": wall,
        "segments": segments,
        "report": rep,
        "stopped": stopped,
    }


# ---------------------------------------------------------------- the script's clock
def _keras_clock(segments, spec) -> dict:
    """Keras's per-epoch final Progbar line: the last '\\n'-terminated line at cur == tot after
    'Epoch i/N'."""
    epochs: dict[int, dict] = {}
    epoch = 0
    # fit(epochs=1) called in a loop prints no "Epoch i/N": the script's own line before each fit
    # (epoch_regex, group 1 its count) marks the epochs instead
    marker = re.compile(spec.get("epoch_regex", r"^Epoch (\d+)/(\d+)\s*$"))
    for t, text, term in segments:
        m = marker.match(text.strip())
        if m:
            epoch = int(m.group(1))
            continue
        m = KERAS_FINAL.match(text)
        if m and term == "\n" and epoch and m.group("cur") == m.group("tot"):
            ms = float(m.group("t")) * UNIT_MS[m.group("u")]
            epochs[epoch] = {
                "ms_per_step": ms,
                "steps": int(m.group("tot")),
                "t": t,
                "resolution_ms": 0.5 * UNIT_MS[m.group("u")],
            }
            # the epoch's own line only: a later evaluate() prints a bar of the same shape
            epoch = 0
    steady = [e for e in sorted(epochs) if e >= spec.get("min_epoch", 3)]
    if not steady:
        return {
            "error": (
                f"no Keras epoch line at epoch >= {spec.get('min_epoch', 3)} (epochs seen:"
                f" {sorted(epochs)})"
            )
        }
    ms = statistics.fmean(epochs[e]["ms_per_step"] for e in steady)
    res = statistics.fmean(epochs[e]["resolution_ms"] for e in steady)
    # Arrival-time clock: from the previous epoch's final line to this one's, over its steps.
    wall = [
        (epochs[e]["t"] - epochs[e - 1]["t"]) * 1000 / epochs[e]["steps"]
        for e in steady
        if e - 1 in epochs
    ]
    return {
        "ms_per_step": ms,
        "printed_ms": ms,
        "epochs": steady,
        "per_epoch": [epochs[e]["ms_per_step"] for e in steady],
        "resolution_pct": 100 * res / ms if ms else None,
        "line_ms_per_step": statistics.fmean(wall) if wall else None,
        "what": "Keras ms/step of epochs " + ",".join(map(str, steady)),
    }


def _regex_mean(segments, spec) -> dict:
    rx = re.compile(spec["regex"])
    vals = []
    for _, text, term in segments:
        m = rx.search(text)
        if not m or term != "\n":
            continue
        g = m.groupdict()
        if "epoch" in g and int(g["epoch"]) < spec.get("min_epoch", 0):
            continue
        if "iter" in g and int(g["iter"]) < spec.get("min_iter", 0):
            continue
        # a per-epoch timer (seconds an epoch) over the epoch's steps: ms a step
        per = spec.get(f"steps_per_value_{spec.get('machine')}", spec.get("steps_per_value", 1))
        vals.append(float(g["value"]) * UNIT_MS[spec.get("unit", "ms")] / per)
    if not vals:
        return {"error": "no steady clock line found"}
    return {
        "ms_per_step": statistics.fmean(vals),
        "n": len(vals),
        "median_ms": statistics.median(vals),
        "what": spec.get("what", spec["regex"]),
    }


def _meter_avg(segments, spec) -> dict:
    rx = re.compile(spec["regex"])
    pts = []
    for _, text, term in segments:
        m = rx.search(text)
        if m and term == "\n" and int(m.group("i")) >= spec.get("min_i", 0):
            pts.append((int(m.group("i")), float(m.group("avg")) * UNIT_MS[spec.get("unit", "s")]))
    if len(pts) < 2:
        return {"error": f"fewer than 2 steady meter lines ({len(pts)})"}
    (i0, a0), (i1, a1) = pts[0], pts[-1]
    ms = (a1 * (i1 + 1) - a0 * (i0 + 1)) / (i1 - i0)
    return {
        "ms_per_step": ms,
        "from_batch": i0,
        "to_batch": i1,
        "what": spec.get("what", "meter average"),
    }


def _line_times(segments, spec) -> dict:
    rx = re.compile(spec["regex"])
    hits, last_n = [], None
    for t, text, term in segments:
        m = rx.search(text)
        if m and term == "\n":
            n = m.groupdict().get("n")
            if spec.get("first_run_only") and n is not None:
                # a script that trains twice (a second model, a second loop) restarts its counter:
                # only the first run's lines are the clock
                if last_n is not None and int(n) <= last_n:
                    break
                last_n = int(n)
            steps = int(m.groupdict().get("steps") or spec.get("steps_per_line", 1))
            hits.append((t, steps))
    hits = hits[spec.get("skip", 2) :]
    if len(hits) < 2:
        return {"error": f"fewer than 2 steady lines ({len(hits)})"}
    span = hits[-1][0] - hits[0][0]
    steps = sum(s for _, s in hits[:-1])
    return {
        "ms_per_step": 1000 * span / steps,
        "lines": len(hits),
        "steps": steps,
        "what": "arrival times of a line printed each epoch/step (the script prints no clock)",
    }


RICH_BAR = re.compile(
    r"Epoch (?P<epoch>\d+)/(?P<last>\d+) .*?(?P<n>\d+)/(?P<tot>\d+) [\d:]+ \S [\d:-]+ "
    r"(?P<rate>[\d.]+)it/s"
)


def _rich_bar(segments) -> dict | None:
    """Lightning's RichProgressBar (the default where `rich` imports): on a stdout that is no
    terminal,  # noqa: E501
    rich's Live does not redraw and prints the bar once, when the run ends. Its it/s is rich's
    `task.speed`: completed batches over the time between the train task's progress samples of the
    last 30 s (`speed_estimate_period`); validation updates its own task, so the figure is the
    training batches (and their hooks) of that window: loop_iteration, one reading."""
    hits = [m for _, text, _ in segments for m in [RICH_BAR.search(text)] if m]
    if not hits:
        return None
    m = hits[-1]
    return {
        "ms_per_step": 1000.0 / float(m.group("rate")),
        "scope": "loop_iteration",
        "epochs": [int(m.group("epoch"))],
        "batches_done": f"{m.group('n')}/{m.group('tot')}",
        "window": {"epoch": int(m.group("epoch")), "batches": int(m.group("n"))},
        "what": (
            f"Lightning RichProgressBar's it/s, printed once at exit (epoch {m.group('epoch')},"
            f" {m.group('n')}/{m.group('tot')} batches; rich's speed over the last 30 s of training"
            " batches)"
        ),
    }


RICH_SPEED_PERIOD_S = 30.0  # rich's Progress(speed_estimate_period=30): Lightning keeps it


def _rich_window(run_dir: Path, epoch: int, batches: int) -> dict:
    """scaldiag's own step ends over the bar's window: rich's task.speed counts the progress samples
    (one at each training batch's end) of the last 30 s of the epoch the bar shows, the first
    sample's batch left out, over the time from the first sample to the last. The same steps from
    the run's steps.jsonl (the epoch's first ``batches`` steps): the loop iteration of the clock's
    own window, beside the report's figure over every steady step."""
    from scaldiag.record.reader import read_record  # noqa: PLC0415

    try:
        steps = read_record(run_dir).steps
    except Exception as exc:  # a damaged run: no window figure, said
        return {"error": f"{type(exc).__name__}: {exc}"}
    ends = sorted(s["end_ns"] for s in steps if s.get("epoch") == epoch)[:batches]
    if len(ends) < batches or len(ends) < 2:
        return {"error": f"{len(ends)} steps recorded in epoch {epoch}, the bar shows {batches}"}
    kept = [e for e in ends if e >= ends[-1] - RICH_SPEED_PERIOD_S * 1e9]
    if len(kept) < 2:
        return {"error": "one batch in the bar's last 30 s"}
    return {
        "ms_per_step": (kept[-1] - kept[0]) / 1e6 / (len(kept) - 1),
        "epoch": epoch,
        "steps": len(kept) - 1,
        "what": f"epoch {epoch}'s batches {batches - len(kept) + 2}-{batches} (rich's window)",
    }


TQDM_BAR = re.compile(
    r"(?P<desc>Epoch (?P<epoch>\d+)):.*?\|\s*(?P<n>\d+)/(?P<tot>\d+) \[[\d:]+<[\d:?]+,\s*"
    r"(?P<rate>[\d.]+)(?P<u>it/s|s/it)"
)


def _tqdm_bar(segments, spec) -> dict:
    """Lightning's TQDMProgressBar (tqdm, smoothing=0, reset at each train epoch's start): every
    redraw  # noqa: E501
    shows n / (now - epoch start). Per epoch: `first_full`, the redraw at n == total right after the
    last training batch (its on_train_batch_end: the epoch's start, every batch and its hooks), and
    `last`, the epoch's final redraw (on_validation_end / on_train_epoch_end set_postfix: validation
    in too). spec.which picks the clock (default last: what the bar reads when the epoch is over).
    """
    per: dict[int, dict] = {}
    for t, text, _term in segments:
        for m in TQDM_BAR.finditer(text):
            n, tot = int(m.group("n")), int(m.group("tot"))
            if n != tot or tot == 0:
                continue
            rate = float(m.group("rate"))
            ms = 1000.0 / rate if m.group("u") == "it/s" else 1000.0 * rate
            e = per.setdefault(int(m.group("epoch")), {"steps": tot})
            e.setdefault("first_full_ms", ms)
            e["last_ms"], e["t"] = ms, t
    steady = [e for e in sorted(per) if e >= spec.get("min_epoch", 2)]
    if not steady:
        rich = _rich_bar(segments)
        if rich:
            return rich
        return {
            "error": (
                f"no full epoch bar at epoch >= {spec.get('min_epoch', 2)} (epochs seen:"
                f" {sorted(per)})"
            )
        }
    which = spec.get("which", "last")
    ms = statistics.fmean(per[e][f"{which}_ms"] for e in steady)
    wall = [
        (per[e]["t"] - per[e - 1]["t"]) * 1000 / per[e]["steps"] for e in steady if e - 1 in per
    ]
    return {
        "ms_per_step": ms,
        "epochs": steady,
        "per_epoch": [per[e][f"{which}_ms"] for e in steady],
        "first_full_ms_per_step": statistics.fmean(per[e]["first_full_ms"] for e in steady),
        "last_ms_per_step": statistics.fmean(per[e]["last_ms"] for e in steady),
        "line_ms_per_step": statistics.fmean(wall) if wall else None,
        "what": (
            "Lightning bar's it/s at each epoch's"
            f" {'final redraw' if which == 'last' else 'n == total'}, epochs "
            + ",".join(map(str, steady))
        ),
    }


HF_METRIC = re.compile(
    r"^\s*train_(?P<key>runtime|steps_per_second|samples_per_second)\s*=\s*(?P<v>[\d:.]+)\s*$"
)


def _hf_train_metrics(segments, spec) -> dict:
    """transformers' Trainer.train() metrics as its examples print them at the end
    (`trainer.log_metrics("train",
    ...)`: `***** train metrics *****`, then `train_runtime = h:mm:ss.cc`, `train_steps_per_second =
    x`):  # noqa: E501 speed_metrics' time.time() from just before on_train_begin to the end of the
    last epoch (evaluation, logging and checkpoints inside training in), over the optimizer steps
    run. ms per optimizer step = runtime / steps, steps = runtime x steps/s rounded (each printed
    figure is rounded: runtime to 10 ms, steps/s to 3 decimals)."""
    got: dict[str, str] = {}
    for _, text, term in segments:
        m = HF_METRIC.match(text)
        if m and term == "\n":
            got[m.group("key")] = m.group("v")
    if "runtime" not in got or "steps_per_second" not in got:
        return {"error": f"no train metrics block (seen: {sorted(got)})"}
    h, mnt, sec = got["runtime"].split(":")
    runtime = 3600 * int(h) + 60 * int(mnt) + float(sec)
    sps = float(got["steps_per_second"])
    steps = round(runtime * sps)
    if not steps:
        return {"error": f"no steps in the train metrics ({got})"}
    return {
        "ms_per_step": 1000.0 * runtime / steps,
        "runtime_s": runtime,
        "steps": steps,
        "steps_per_second": sps,
        "samples_per_second": (
            float(got["samples_per_second"]) if "samples_per_second" in got else None
        ),
        "what": spec.get(
            "what",
            "the Trainer's train_runtime over its optimizer steps (train metrics printed at the"
            " end)",
        ),
    }


CLOCKS = {
    "tqdm_bar": _tqdm_bar,
    "keras_progbar": _keras_clock,
    "regex_mean": _regex_mean,
    "meter_avg": _meter_avg,
    "line_times": _line_times,
    "hf_train_metrics": _hf_train_metrics,
}


# ---------------------------------------------------------------- one row
def _scaldiag_side(rep: dict | None) -> dict:
    if not rep:
        # a script that did not start (or a report not written) still makes its row
        return {"error": "no report", "epochs_ms_per_step": {}}
    st = rep.get("steps") or {}
    sps, per = st.get("samples_per_s"), st.get("samples_per_step")
    out = {
        "recorded": st.get("recorded"),
        "steady": st.get("steady"),
        "samples_per_step": per,
        "samples_per_s": sps,
        "samples_per_s_low": st.get("samples_per_s_low"),
        "samples_per_s_high": st.get("samples_per_s_high"),
        "step_time_mean_ms": (st.get("step_time_ms") or {}).get("mean"),
        "profiler_inflation": st.get("profiler_inflation"),
        "excluded": {k: len(v) for k, v in (st.get("excluded") or {}).items()},
    }
    epochs = rep.get("epochs") or {}
    out["epochs_ms_per_step"] = {
        2: epochs.get("ms_per_step"),
        1: epochs.get("ms_per_step_after_first"),
    }
    out["epochs_compared"] = epochs.get("compared")
    if sps and per:
        out["ms_per_step"] = 1000.0 * per / sps
    elif out["step_time_mean_ms"]:
        out["ms_per_step"] = out["step_time_mean_ms"]
    else:
        out["error"] = "no steady steps in the report" if not st.get("steady") else "no step time"
    return out


def run_entry(entry: dict, machine: str, timeout: float, keep: Path) -> dict:
    row = {
        k: entry.get(k) for k in ("name", "source", "commit", "path", "framework", "shape", "notes")
    }
    row["machine"] = machine
    missing = _missing_needs(entry)
    if missing:
        row["skipped"] = "cannot import here: " + ", ".join(missing)
        return row
    work = keep / entry["name"]
    shutil.rmtree(work, ignore_errors=True)
    src = HERE / "scripts" / entry["dir"]
    if not entry.get("copy_root"):
        src = src / Path(entry["path"]).parent
    shutil.copytree(src, work)
    _prepare(entry.get("prepare"), work, entry, machine)
    res = _run(entry, machine, work, float(entry.get("timeout", timeout)))
    row.update(
        rc=res["rc"],
        wall_s=round(res["wall_s"], 1),
        stopped=res["stopped"],
        work=str(work),
        args=entry.get(f"args_{machine}", entry.get("args", [])),
    )
    return _compare(entry, machine, row, res)


def reanalyze(saved: Path, work_root: Path) -> None:
    """The saved table's runs compared again with the current analysis: each script's arrival-timed
    stdout (stdout_times.jsonl) and run directory, kept under ``work_root/<name>`` (a GPU run's
    clock_runs.tgz, unpacked). Writes ``<saved stem>_reanalyzed.md|json`` beside it."""
    data = json.loads(saved.read_text())
    manifest = {e["name"]: e for e in tomllib.loads((HERE / "manifest.toml").read_text())["script"]}
    rows = []
    for row in data["rows"]:
        work = work_root / row["name"]
        if (
            row.get("skipped")
            or row["name"] not in manifest
            or not (work / "stdout_times.jsonl").exists()
        ):
            rows.append(row)
            continue
        segments = [
            (r["t"], r["text"], "\n")
            for r in map(json.loads, (work / "stdout_times.jsonl").read_text().splitlines())
        ]
        dirs = sorted(p for p in (work / "runs").glob("*") if p.is_dir())
        out = (
            subprocess.run(
                [*_scaldiag_cmd(), "report", str(dirs[-1]), "--format", "json", "-o", "-"],
                capture_output=True,
                text=True,
            )
            if dirs
            else None
        )
        report = json.loads(out.stdout) if out is not None and out.returncode == 0 else None
        base = {
            k: v
            for k, v in row.items()
            if k
            not in (
                "clock",
                "scaldiag",
                "error_pct",
                "steady_error_pct",
                "error_vs_line_clock_pct",
                "scope",
            )
        }
        rows.append(
            _compare(
                manifest[row["name"]],
                data["meta"]["machine"],
                base,
                {"segments": segments, "report": report, "run_dir": dirs[-1] if dirs else None},
            )
        )
    meta = {
        **data["meta"],
        "reanalyzed": (
            f"the runs of {saved.name} reported again at git revision "
            + subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
            ).stdout.strip()
            + " (python bench/clock/run.py --reanalyze "
            + " ".join(sys.argv[2:])
            + ")"
        ),
    }
    write(rows, meta, saved.with_name(saved.stem + "_reanalyzed.md"))


def _compare(entry: dict, machine: str, row: dict, res: dict) -> dict:
    """The script's clock read from its output, scaldiag's figure of the same scope, and the error.
    """
    row["clock"] = CLOCKS[entry["clock"]["kind"]](
        res["segments"], {**entry["clock"], "machine": machine}
    )
    per = int(entry["clock"].get("batches_per_step", 1))
    if per > 1 and row["clock"].get("ms_per_step"):
        # a clock that counts batches (Lightning's bar: it/s of batches) where an optimizer step
        # takes `per` of them (accumulate_grad_batches): its figure per optimizer step, scaldiag's
        # step
        for key in (
            "ms_per_step",
            "line_ms_per_step",
            "first_full_ms_per_step",
            "last_ms_per_step",
        ):
            if row["clock"].get(key):
                row["clock"][key] *= per
        row["clock"]["what"] += f" (x {per} batches an optimizer step)"
    row["scaldiag"] = _scaldiag_side(res["report"])
    window = row["clock"].get("window")
    if window and res.get("run_dir") is not None:
        row["same_window"] = _rich_window(Path(res["run_dir"]), **window)
    batch = entry.get(f"batch_{machine}", entry.get("batch"))
    row["batch"] = batch
    c, s = row["clock"].get("ms_per_step"), row["scaldiag"].get("ms_per_step")
    row["scope"] = "steady steps"
    kind = entry["clock"]["kind"]
    scope = row["clock"].get("scope") or entry["clock"].get("scope")
    scopes = ((res["report"] or {}).get("clock") or {}).get("scopes") or {}
    if scope and (scopes.get(scope) or {}).get("ms"):
        # the report names each figure's scope (issue 32): the figure of the clock's own scope
        row["scope"] = scope
        row["scaldiag"]["user_scope"] = (res["report"].get("clock") or {}).get("user_scope")
        row["scaldiag"]["scopes_ms"] = {k: (v or {}).get("ms") for k, v in scopes.items()}
        if s and c:
            row["steady_error_pct"] = 100.0 * (c / s - 1.0)
        # user_ms: the figure as that clock reads it (Keras's bar leaves each epoch's first step
        # out)
        s = row["scaldiag"]["ms_per_step_compared"] = (
            scopes[scope].get("user_ms") or scopes[scope]["ms"]
        )
    elif scope:
        # a report without `clock` (before issue 32): today's figures, the whole-epoch one for a
        # whole-epoch clock where the report has it, else the steady step
        whole = row["scaldiag"]["epochs_ms_per_step"].get(2)
        row["scope"] = scope + " (report has no clock scopes: "
        if scope == "whole_epoch" and whole:
            row["steady_error_pct"] = 100.0 * (c / s - 1.0) if c and s else None
            row["scope"] += "scaldiag's whole-epoch figure)"
            s = row["scaldiag"]["ms_per_step_compared"] = whole
        else:
            row["scope"] += "scaldiag's steady step)"
            row["scaldiag"]["ms_per_step_compared"] = s
    elif kind == "keras_progbar" and s and c:
        # Keras's ms/step times whole epochs (validation and the epoch's edges in): compare it with
        # scaldiag's whole-epoch figure of the same scope (analyze/epochs.py), the steady one beside
        # it.
        verbose = int(entry.get("keras_verbose", 1))  # fit's verbose="auto" is 1
        row["steady_error_pct"] = 100.0 * (c / s - 1.0)
        row["scope"] = f"whole epochs (Keras verbose={verbose})"
        line = row["clock"].get("line_ms_per_step")
        if (row["clock"].get("resolution_pct") or 0) > COARSE_PCT and line:
            # Keras prints whole ms (or us): at a few ms a step that is +-10-50%. The arrival of the
            # same epochs' lines times the same epochs finely (from one epoch's end to the next:
            # verbose=2's scope).
            verbose, c = 2, line
            row["clock"]["ms_per_step"] = line
            row["clock"]["what"] += (
                f" (printed {row['clock']['printed_ms']:.3g} ms: too coarse; timed by its lines'"
                " arrival)"
            )
            row["scope"] = "whole epochs (arrival of Keras's epoch lines)"
            row["steady_error_pct"] = 100.0 * (c / s - 1.0)
        s = row["scaldiag"]["ms_per_step_compared"] = row["scaldiag"]["epochs_ms_per_step"].get(
            verbose
        )
    elif kind == "line_times" and row["scaldiag"]["epochs_ms_per_step"].get(2):
        # The script prints no clock: its lines' arrival times whole epochs, edges in (a checkpoint
        # save, the DataLoader's workers starting), as a stopwatch around its epochs would.
        row["steady_error_pct"] = 100.0 * (c / s - 1.0) if c and s else None
        row["scope"] = "whole epochs (the script prints no clock)"
        s = row["scaldiag"]["ms_per_step_compared"] = row["scaldiag"]["epochs_ms_per_step"][2]
    else:
        row["scaldiag"]["ms_per_step_compared"] = s
    if c and s:
        row["clock"]["samples_per_s"] = 1000.0 * batch / c
        row["scaldiag"]["samples_per_s_at_batch"] = 1000.0 * batch / s
        # error of scaldiag's samples/s against the clock's: (s_rate - c_rate) / c_rate
        row["error_pct"] = 100.0 * (c / s - 1.0)
        lc = row["clock"].get("line_ms_per_step")
        if lc:
            row["error_vs_line_clock_pct"] = 100.0 * (lc / s - 1.0)
        w = (row.get("same_window") or {}).get("ms_per_step")
        if w:
            row["same_window"]["error_pct"] = 100.0 * (c / w - 1.0)
    return row


# ---------------------------------------------------------------- output
def _fmt(x, nd=1):
    return "" if x is None else f"{x:,.{nd}f}"


def rewrite(json_path: Path) -> None:
    """Write the Markdown table again from a saved .json (after a change to the table's layout)."""
    d = json.loads(json_path.read_text())
    meta = d["meta"]
    if isinstance(meta.get("git_dirty"), bool):
        meta["git_dirty"] = (
            ["(this run recorded only that the tree had uncommitted changes)"]
            if meta["git_dirty"]
            else []
        )
    write(d["rows"], meta, json_path.with_suffix(".md"))


def write(rows: list[dict], meta: dict, out_md: Path) -> None:
    errs = [abs(r["error_pct"]) for r in rows if "error_pct" in r]
    meta["median_abs_error_pct"] = statistics.median(errs) if errs else None
    meta["within_5pct"] = f"{sum(e <= 5 for e in errs)} of {len(errs)}"
    out_md.with_suffix(".json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=1, default=str) + "\n"
    )
    L = [
        f"# scaldiag against each script's own clock ({meta['machine']}, {meta['date']})",
        "",
        f"- machine: {meta['machine_desc']}",
        f"- command: `{meta['command']}`",
        f"- scaldiag git revision: `{meta['git_rev']}`",
        *([f"- reanalyzed: {meta['reanalyzed']}"] if meta.get("reanalyzed") else []),
        "- uncommitted changes under scaldiag/ in the tree that ran: "
        + (", ".join(f"`{x.strip()}`" for x in meta["git_dirty"] if x.strip()) or "none"),
        f"- versions: {meta['versions']}",
        (
            f"- median |error|: **{_fmt(meta['median_abs_error_pct'])}%**; within 5%:"
            f" **{meta['within_5pct']}**"
        ),
        "",
        (
            "error = scaldiag's samples/s of the clock's scope against the script's clock in"
            " samples/s (both at the manifest's batch): positive means scaldiag reads faster than"
            " the script's clock. Scope: Keras's ms/step times whole epochs (from the epoch's"
            " begin, or its first step's end with verbose=1, to its end after validation): it is"
            " compared with scaldiag's whole-epoch figure (report `epochs`), and scaldiag's steady"
            " step is shown beside it; the other clocks time training steps and are compared with"
            " the steady step. The Keras clock prints whole ms (or us) per step: `res` is half its"
            " last digit as a share; `line clock` is the same epochs timed by the arrival of"
            " Keras's epoch lines (epoch edges and validation included, as in Keras's own ms/step)."
        ),
        "",
        (
            "| script | source @ commit | framework | loop shape | clock | scope | script's ms/step"
            " | scaldiag ms/step | error | scaldiag steady ms/step (error) | res | line clock"
            " ms/step (error) | scaldiag steady/recorded, excluded | inflation |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        src = f"{r['source']} `{r['path']}` @ {r['commit'][:10]}"
        if r.get("skipped"):
            L.append(
                f"| {r['name']} | {src} | {r['framework']} | {r.get('shape') or ''} | not run:"
                f" {r['skipped']} | | | | | | | | | |"
            )
            continue
        c, s = r["clock"], r["scaldiag"]
        err = (
            f"{r['error_pct']:+.1f}%"
            if "error_pct" in r
            else (c.get("error") or s.get("error") or "")
        )
        lc = c.get("line_ms_per_step")
        lcs = (
            f"{lc:.2f} ({r['error_vs_line_clock_pct']:+.1f}%)"
            if lc and "error_vs_line_clock_pct" in r
            else ""
        )
        res = f"{c['resolution_pct']:.1f}%" if c.get("resolution_pct") else ""
        exc = ", ".join(f"{k} {v}" for k, v in (s.get("excluded") or {}).items())
        infl = s.get("profiler_inflation")
        steady = (
            f"{_fmt(s.get('ms_per_step'), 2)} ({r['steady_error_pct']:+.1f}%)"
            if r.get("steady_error_pct") is not None
            else ""
        )
        L.append(
            f"| {r['name']} | {src} | {r['framework']} | {r.get('shape') or ''} |"
            f" {c.get('what', '')} | {r.get('scope', 'steady steps')} |"
            f" {_fmt(c.get('ms_per_step'), 2)} |"
            f" {_fmt(s.get('ms_per_step_compared', s.get('ms_per_step')), 2)} | {err} | {steady} |"
            f" {res} | {lcs} | {s.get('steady')}/{s.get('recorded')}; {exc} |"
            f" {_fmt(infl, 2) if isinstance(infl, (int, float)) else infl} |"
        )
    L += ["", "Per run: exit code, wall time, arguments, notes.", ""]
    for r in rows:
        if r.get("skipped"):
            L.append(f"- **{r['name']}**: not run ({r['skipped']}). {r.get('notes') or ''}")
        else:
            L.append(
                f"- **{r['name']}**: exit {r['rc']}, {r['wall_s']}"
                f" s{', ' + r['stopped'] if r.get('stopped') else ''}; args"
                f" `{' '.join(r['args'])}`; batch {r['batch']}. {r.get('notes') or ''}"
                + (f" **Seen:** {r['seen']}" if r.get("seen") else "")
                + _window_note(r.get("same_window"))
            )
    out_md.write_text("\n".join(L) + "\n")


def _window_note(w: dict | None) -> str:
    if not w:
        return ""
    if "ms_per_step" not in w:
        return f" **Same window:** not read ({w.get('error')})."
    err = f" ({w['error_pct']:+.1f}% against the bar)" if "error_pct" in w else ""
    return (
        f" **Same window:** scaldiag's step ends over {w['what']}: {w['ms_per_step']:.2f} ms a"
        f" step{err}."
    )


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    out = [f"python {platform.python_version()}"]
    for mod in ("keras", "jax", "torch"):
        try:
            out.append(f"{mod} {version(mod)}")
        except PackageNotFoundError:
            pass
    if _has("tensorflow"):
        out.append(f"tensorflow {_tf_version()}")
    return ", ".join(out)


def _tf_version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    for dist in ("tensorflow-cpu", "tensorflow"):
        try:
            return version(dist)
        except PackageNotFoundError:
            pass
    return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated manifest names")
    ap.add_argument("--machine", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument(
        "--machine-desc", default="", help="words for the table (default: from the host)"
    )
    ap.add_argument("--timeout", type=float, default=240, help="seconds per script before SIGINT")
    ap.add_argument("--out-dir", default=str(ROOT / "bench" / "results" / "clock"))
    ap.add_argument(
        "--keep", default="/tmp/scaldiag_clock", help="working copies and run directories"
    )
    ap.add_argument("--rewrite", default="", help="only write the .md again from this saved .json")
    ap.add_argument(
        "--reanalyze",
        nargs=2,
        metavar=("SAVED_JSON", "WORK_DIR"),
        help="compare a saved table's kept runs again with the current analysis (see reanalyze)",
    )
    a = ap.parse_args()
    if a.reanalyze:
        reanalyze(Path(a.reanalyze[0]), Path(a.reanalyze[1]))
        return
    if a.rewrite:
        rewrite(Path(a.rewrite))
        return
    manifest = tomllib.loads((HERE / "manifest.toml").read_text())["script"]
    only = {n for n in a.only.split(",") if n}
    # issue 46's set (every clock each prints, its own preparation steps) is run by issue46.py
    manifest = [e for e in manifest if e.get("set") != "issue46"]
    todo = [e for e in manifest if not only or e["name"] in only]
    keep = Path(a.keep)
    keep.mkdir(parents=True, exist_ok=True)

    def git(*c):
        return subprocess.run(["git", *c], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    date = dt.date.today().isoformat()
    desc = a.machine_desc or f"{platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}"
    meta = {
        "machine": a.machine,
        "machine_desc": desc,
        "date": date,
        "command": "python bench/clock/run.py " + " ".join(sys.argv[1:]),
        "git_rev": git("rev-parse", "HEAD"),
        "git_dirty": (
            git("status", "--porcelain", "--untracked-files=all", "--", "scaldiag").split("\n")
        ),
        "versions": _versions(),
    }
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = "" if not only else "_" + "_".join(sorted(only))[:60]
    out_md = out_dir / f"{a.machine}_{date}{suffix}.md"
    rows = []
    try:
        for e in todo:
            if a.machine not in e.get("machines", []):
                why = e.get("notes") if not e.get("machines") else f"not on the {a.machine} machine"
                rows.append(
                    {
                        **{
                            k: e.get(k)
                            for k in (
                                "name",
                                "source",
                                "commit",
                                "path",
                                "framework",
                                "shape",
                                "notes",
                            )
                        },
                        "machine": a.machine,
                        "skipped": why,
                    }
                )
                continue
            print(f"== {e['name']}", flush=True)
            row = run_entry(e, a.machine, a.timeout, keep)
            rows.append(row)
            write(rows, meta, out_md)  # after every script: a stopped runner keeps what was done
            print(
                json.dumps(
                    {k: row.get(k) for k in ("name", "rc", "wall_s", "error_pct", "skipped")}
                    | {
                        "clock_ms": row.get("clock", {}).get("ms_per_step"),
                        "scaldiag_ms": row.get("scaldiag", {}).get("ms_per_step"),
                        "clock_error": row.get("clock", {}).get("error"),
                        "scaldiag_error": row.get("scaldiag", {}).get("error"),
                    }
                ),
                flush=True,
            )
    except KeyboardInterrupt:
        meta["stopped"] = f"runner interrupted after {len(rows)} rows"
        for proc in RUNNING:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    write(rows, meta, out_md)
    print(f"wrote {out_md} and {out_md.with_suffix('.json')}")


# ---------------------------------------------------------------- issue 32 (d): Flax examples'
# inputs
def _prepare_d(kind: str, work: Path, n_train: int, n_test: int) -> None:
    """Flax's nnx toy examples. `plot_stub`: they import matplotlib.pyplot and plot once training is
    over (plt.show() on a pipe draws nothing); matplotlib is not installed here nor among the GPU
    machine's packages, so the working copy gets a `matplotlib` package whose pyplot answers every
    name with a function that does nothing  # noqa: E501 (the script's folder is first on sys.path).
    Nothing it times runs through it. `hf_mnist_dir` (and the stub): 05_vae's
    `datasets.load_dataset('mnist')` reads a local folder named `mnist` before it would go to the
    hub: synthetic MNIST as the hub's layout (`mnist/{train,test}-00000-of-00001.parquet`, an
    `image` column of 28x28 uint8 images, `label`).
    """
    pkg = work / "matplotlib"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text(
        '"""clock run: a stand-in, plotting only (bench/clock/run.py _prepare_d)."""\n'
    )
    (pkg / "pyplot.py").write_text(
        "def _nothing(*args, **kwargs):\n    return None\n\n\n"
        "def __getattr__(name):\n    return _nothing\n"
    )
    if kind != "hf_mnist_dir":
        return
    import datasets  # noqa: PLC0415

    feats = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=[str(i) for i in range(10)])}
    )
    (work / "mnist").mkdir(exist_ok=True)
    for split, (x, y) in zip(("train", "test"), _mnist_arrays(n_train, n_test)):
        ds = datasets.Dataset.from_dict(
            {"image": list(x), "label": y.astype(int).tolist()}, features=feats
        )
        ds.to_parquet(str(work / "mnist" / f"{split}-00000-of-00001.parquet"))


if __name__ == "__main__":
    main()
