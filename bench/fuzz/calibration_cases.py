"""``python -m bench fuzz --mode calibration``: damaged saved calibrations (``scaldiag calibrate``'s
files) read by
the commands that use them: report, check and compare of the GPU sweep fixtures/runs/sweep (its
predictions choose a saved all-reduce curve of the same GPU product: analyze/interconnect.py).

The files: the real ones of bench/results/gpu_h200/calibrate (torch and JAX on one H200, gloo on
CPU) and an H200 x2 NVLink curve that the sweep chooses (tests/test_hostile_round3.py's), 1-3
damages each: a field set to huge, negative, non-numeric or unparseable values (1e999999, 5,000
digits, NaN, nesting 5,000 deep), rows dropped, shuffled, duplicated, 1 or 65 of them, values at and
past the bounds (1 B, 16 TiB, 100 ns, 60 s, 1,024 ranks, 20 TB/s), a wrong schema or type; as bytes
truncated, bit-flipped, invalid UTF-8, a BOM, padded past 1 MiB, sparse 4 GiB. Where they are: the
cache folder ($XDG_CACHE_HOME or $HOME/.cache: scaldiag/interconnect/*.json, 1-4 files, or 400), or
$SCALDIAG_CALIBRATION naming one file; in place of a file a directory, a FIFO, a link to /dev/zero
or /dev/urandom, a dangling link, a link loop, a path under a file, the cache folder a file.
Sometimes the sweep's GPU name is set to the calibration's (so that a crafted curve is chosen).
Checks: the common ones (no uncaught exception, no exit 70, 10 s).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The real saved files of the H200 run (torch, JAX, gloo on CPU), kept merged by their former names.
REAL_FILE = ROOT / "bench/results/gpu_h200/calibrate/calibrate.json"
SWEEP = ROOT / "fixtures/runs/sweep"
CAL_FIELDS = [
    "schema",
    "measured_at",
    "device",
    "framework",
    "backend",
    "ranks",
    "host",
    "machine",
    "machine.gpu_name",
    "machine.gpu_count",
    "machine.link",
    "machine.link.kind",
    "machine.gpus",
    "allreduce",
    "local",
    "notes",
]
ROW_FIELDS = [
    "bytes",
    "median_s",
    "min_s",
    "max_s",
    "repeats",
    "calls_per_repeat",
    "busbw_bytes_per_s",
]
EDGE = [
    1,
    2**44,
    2**44 + 1,
    1e-7,
    9.9e-8,
    60.0,
    60.000001,
    1024,
    1025,
    2,
    1,
    0,
    2e13,
    5e-324,
    1e308,
    2**62,
    2**62 + 1,
    2**63,
    -1,
    0.5,
]
ENV_KEYS = ("SCALDIAG_CALIBRATION", "XDG_CACHE_HOME", "HOME")


def h200_curve(ranks: int = 2, gpu_count: int = 2) -> dict:
    rows = [
        {"bytes": m, "median_s": t, "min_s": t, "max_s": t, "repeats": 7}
        for m, t in ((8, 15e-6), (2**20, 25e-6), (2**26, 200e-6), (2**30, 2.9e-3))
    ]
    return {
        "schema": "scaldiag.calibration/1",
        "measured_at": "2026-12-02T04:00:00Z",
        "device": "gpu",
        "framework": "torch",
        "backend": "nccl",
        "ranks": ranks,
        "machine": {"gpu_name": "NVIDIA H200", "gpu_count": gpu_count, "link": {"kind": "nvlink"}},
        "allreduce": rows,
    }


class CalibrationCases:
    def __init__(self):
        from bench.fuzz import run as fuzz

        self.fuzz = fuzz
        real = json.loads(REAL_FILE.read_bytes()) if REAL_FILE.is_file() else {}
        real = [v for _, v in sorted(real.items()) if isinstance(v, dict) and "schema" in v]
        self.docs = [h200_curve(), h200_curve(4, 8), *real]
        self.weights = [6, 2, *([1] * len(real))]
        self.env: dict[str, str | None] = {}

    def _doc(self, rng, log: list[str]) -> dict:
        doc = json.loads(json.dumps(rng.choices(self.docs, self.weights)[0]))
        fz = self.fuzz
        for _ in range(rng.randint(0, 3)):
            op = rng.choice(["field", "field", "row", "row", "rows", "edge", "scale"])
            rows = doc.get("allreduce") if isinstance(doc.get("allreduce"), list) else []
            if op == "field":
                field = rng.choice(CAL_FIELDS)
                value = rng.choice(
                    [fz._weird(rng), "DROP", "scaldiag.calibration/2", "NVIDIA H200", "pcie", "cpu"]
                )
                doc = fz._set_path(doc, field, value, rng)
                log.append(f"{field}={value!r:.50}")
            elif op == "row" and rows:
                i = rng.randrange(len(rows))
                field = rng.choice(ROW_FIELDS)
                value = rng.choice([fz._weird(rng), "DROP", rng.choice(EDGE)])
                rows[i] = (
                    fz._set_path(rows[i], field, value, rng) if isinstance(rows[i], dict) else value
                )
                log.append(f"allreduce[{i}].{field}={value!r:.50}")
            elif op == "rows" and rows:
                how = rng.choice(
                    ["shuffle", "reverse", "dup", "one", "65", "64", "drop", "replace"]
                )
                if how == "shuffle":
                    rng.shuffle(rows)
                elif how == "reverse":
                    rows.reverse()
                elif how == "dup":
                    rows.insert(rng.randrange(len(rows) + 1), dict(rng.choice(rows)))
                elif how == "one":
                    del rows[1:]
                elif how in ("65", "64"):
                    first = rows[0] if isinstance(rows[0], dict) else {"median_s": 1e-5}
                    rows[:] = [{**first, "bytes": 8 * 2**i} for i in range(int(how))]
                elif how == "drop":
                    del rows[rng.randrange(len(rows))]
                else:
                    rows[rng.randrange(len(rows))] = fz._weird(rng)
                doc["allreduce"] = rows
                log.append(f"rows {how}")
            elif op == "edge":
                field = rng.choice(
                    [
                        "ranks",
                        "machine.gpu_count",
                        "allreduce.0.bytes",
                        "allreduce.-1.median_s",
                        "allreduce.0.median_s",
                        "allreduce.-1.bytes",
                    ]
                )
                value = rng.choice(EDGE)
                if field.startswith("allreduce") and rows:
                    _, i, key = field.split(".")
                    if isinstance(rows[int(i)], dict):
                        rows[int(i)] = {**rows[int(i)], key: value}
                elif not field.startswith("allreduce"):
                    doc = fz._set_path(doc, field, value, rng)
                log.append(f"{field}={value!r}")
            elif op == "scale" and rows:
                k = rng.choice([1e-9, 1e-3, 0.5, 2, 1e3, 1e9])
                for r in rows:
                    if isinstance(r, dict) and isinstance(r.get("median_s"), (int, float)):
                        r["median_s"] *= k
                log.append(f"times x{k:g}")
        return doc

    def _file(self, path: Path, rng, log: list[str]) -> None:
        """A calibration file at ``path``: a (mutated) document, its bytes maybe damaged, or no file
        at all."""
        fz = self.fuzz
        what = rng.choices(["doc", "bytes", "huge", "special"], [55, 25, 8, 12])[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        sub: list[str] = []
        data = fz._dumps(self._doc(rng, sub))
        if what == "doc":
            path.write_bytes(data)
        elif what == "bytes":
            path.write_bytes(data)
            sub.append(fz._damage_file(path, rng))
        elif what == "huge":
            how = rng.choice(["1MiB", "1MiB+1", "20MB", "sparse", "deep", "digits"])
            if how == "1MiB":
                path.write_bytes(data + b" " * ((1 << 20) - len(data)))
            elif how == "1MiB+1":
                path.write_bytes(data + b" " * ((1 << 20) + 1 - len(data)))
            elif how == "20MB":
                path.write_bytes(
                    b'{"schema": "scaldiag.calibration/1", "pad": "' + b"x" * (20 << 20) + b'"}'
                )
            elif how == "sparse":
                path.write_bytes(b"")
                os.truncate(path, 4 << 30)
            elif how == "deep":
                depth = rng.choice([900, 5000, 100_000])
                path.write_bytes(data[:-1] + b', "x": ' + b"[" * depth + b"]" * depth + b"}")
            else:
                path.write_bytes(
                    data.replace(b'"ranks": ', b'"ranks": ' + b"9" * 5000 + b', "r": ', 1)
                )
            sub.append(how)
        else:
            how = rng.choice(
                ["dir", "fifo", "devzero", "urandom", "devnull", "dangling", "loop", "self-dir"]
            )
            if how == "dir":
                path.mkdir()
            elif how == "fifo":
                os.mkfifo(path)
            elif how in ("devzero", "urandom", "devnull"):
                path.symlink_to(
                    {"devzero": "/dev/zero", "urandom": "/dev/urandom", "devnull": "/dev/null"}[how]
                )
            elif how == "dangling":
                path.symlink_to(path.parent / "absent.json")
            elif how == "loop":
                path.symlink_to(path)
            else:
                path.symlink_to(path.parent)
            sub.append(how)
        log.append(f"{path.name}: {what}" + (f" ({', '.join(sub)})" if sub else ""))

    def make(self, rng, work: Path) -> tuple[str, list[list[str]]]:
        log: list[str] = []
        env: dict[str, str | None] = {k: None for k in ENV_KEYS}
        env["HOME"] = str(work / "home")
        place = rng.choices(["cache", "home", "env", "many", "folder-odd"], [45, 10, 30, 5, 10])[0]
        folder = (
            (work / "cache" if place != "home" else work / "home" / ".cache")
            / "scaldiag"
            / "interconnect"
        )
        if place in ("cache", "many", "folder-odd", "env"):
            env["XDG_CACHE_HOME"] = str(work / "cache")
        if place in ("cache", "home"):
            for i in range(rng.randint(1, 4)):
                self._file(folder / f"cal{i}.json", rng, log)
        elif place == "many":
            folder.mkdir(parents=True)
            data = self.fuzz._dumps(h200_curve())
            for i in range(400):
                (folder / f"c{i}.json").write_bytes(data if i % 2 else data[:i])
            log.append("400 files")
        elif place == "env":
            how = rng.choices(
                ["file", "absent", "under-a-file", "long", "empty", "dev"], [80, 5, 5, 4, 3, 3]
            )[0]
            target = work / "calibration.json"
            if how == "file":
                self._file(target, rng, log)
            elif how == "absent":
                target = work / "absent" / "x.json"
            elif how == "under-a-file":
                (work / "f").write_text("x")
                target = work / "f" / "x.json"
            elif how == "long":
                target = work / ("x" * 300 + ".json")
            elif how == "dev":
                target = Path(
                    rng.choice(
                        ["/dev/zero", "/dev/urandom", "/dev/null", "/dev/full", "/proc/self/mem"]
                    )
                )
            env["SCALDIAG_CALIBRATION"] = "" if how == "empty" else str(target)
            log.append(f"SCALDIAG_CALIBRATION {how}" + (f" {target}" if how == "dev" else ""))
            if how == "empty":  # falls back to the cache folder
                self._file(folder / "cal.json", rng, log)
        else:
            how = rng.choice(
                ["folder-file", "interconnect-file", "folder-link-devnull", "folder-fifo"]
            )
            base = work / "cache"
            (base / "scaldiag").mkdir(parents=True)
            if how == "folder-file":
                (base / "scaldiag" / "interconnect").write_text("{}")
            elif how == "interconnect-file":
                (base / "scaldiag" / "interconnect").mkdir()
                (base / "scaldiag" / "interconnect" / "sub.json").mkdir()
            elif how == "folder-link-devnull":
                (base / "scaldiag" / "interconnect").symlink_to("/dev/null")
            else:
                os.mkfifo(base / "scaldiag" / "interconnect")
            log.append(how)
        self.env = env
        sweep = SWEEP
        if (
            rng.random() < 0.25
        ):  # the sweep's GPUs named as a calibration names them: a crafted curve chosen
            sweep = work / "sweep"
            shutil.copytree(SWEEP, sweep)
            names = [
                f.get("machine", {}).get("gpu_name") if isinstance(f.get("machine"), dict) else None
                for f in self.docs
            ]
            name = rng.choice(
                [n for n in names if isinstance(n, str)] + ["", "NVIDIA A100-SXM4-80GB"]
            )
            for inv in sweep.rglob("inventory.json"):
                doc = json.loads(inv.read_text())
                for g in doc.get("gpus", []):
                    g["name"] = name
                inv.write_text(json.dumps(doc))
            log.append(f"sweep GPUs named {name!r}")
        s = str(sweep)
        commands = [
            (25, ["report", s]),
            (10, ["report", s, "-v"]),
            (15, ["report", s, "--format", "json"]),
            (5, ["report", s, "--format", "html", "-o", str(work / "r.html")]),
            (15, ["check", s, "--max-step-ms", "100000"]),
            (10, ["compare", str(sweep / "gpus1"), str(sweep / "gpus2")]),
            (5, ["report", s, "--interconnect", "nvlink4x18"]),
            (5, ["check", s, "--baseline", str(SWEEP), "--max-regression", "5%"]),
        ]
        argv = rng.choices([c for _, c in commands], [w for w, _ in commands])[0]
        return f"{place}: " + "; ".join(log), [argv]
