"""Issue 46's validation set: public scripts of loop shapes nobody here wrote, every clock each prints.

The entries of manifest.toml with `set = "issue46"` are run as run.py runs them (a fresh copy of
the stored, unmodified script, arguments and environment only, `scaldiag profile`, stdout
time-stamped on arrival). What this adds to run.py:

- `clocks`: a list of every clock the script prints (run.py reads one, `clock`), each with the
  scope it covers; each is compared with scaldiag's figure of that scope from the report
  (`clock.scopes[scope]`: `user_ms` where the report gives the figure as that clock reads it,
  else `ms`).
- clocks on stderr (`stream = "stderr"`): a user's own tqdm bar writes there.
- clock kinds: `keras_fits` (Keras's ms/step of each `fit` call: a script that fits several
  models prints `Epoch 1/N` again for each), `tqdm_user` (the it/s or s/it of a tqdm bar's final
  redraw, each bar; tqdm's default smoothing 0.3 makes it a moving average of the last batches,
  the figure the user reads), and run.py's `regex_mean`, `line_times`.
- the report's own reading of the printed clocks (`clock.printed`: what, scope, ms, scaldiag_ms,
  error, agrees), where this scaldiag writes it: per clock, recognised by scaldiag itself (an
  entry of the clock's form, of its scope first, then the closest figure) and its verdict.

    python bench/clock/issue46.py [--only A,B] [--timeout 300] [--machine cpu|gpu]
"""  # noqa: E501

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run  # noqa: E402

ROOT = HERE.parent.parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TQDM_FINAL = re.compile(
    r"(?P<n>\d+)/(?P<tot>\d+) \[(?P<el>[\d:]+)<[\d:?]+,\s+(?P<r>[\d.]+)(?P<u>it/s|s/it)"
)


# ---------------------------------------------------------------- preparation
def _prepare(kind, work: Path, entry: dict, machine: str) -> None:
    for k in kind if isinstance(kind, list) else [kind]:
        if k == "plot_stub_any":
            _plot_stub_any(work)
        elif k == "input_txt_wikitext":
            # minGPT's chargpt reads ./input.txt (tiny Shakespeare, fetched by hand per its
            # readme): upstream wikitext-2 valid.txt, stored with pytorch/examples, stands in
            shutil.copy(
                HERE
                / "scripts"
                / "pytorch-examples"
                / "word_language_model"
                / "data"
                / "wikitext-2"
                / "valid.txt",
                work / entry.get("input_dir", ".") / "input.txt",
            )
        else:
            run._prepare(k, work, entry, machine)


def _plot_stub_any(work: Path) -> None:
    """A `matplotlib` whose pyplot answers every name, attribute and call with nothing: the
    scripts plot or save images after each epoch (`plt.imsave(f, img, cmap=plt.cm.gray)`);
    matplotlib is installed on neither machine. Put in the working copy's root (on PYTHONPATH)."""
    pkg = work / "matplotlib"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text('"""clock run: a stand-in (bench/clock/issue46.py)."""\n')
    (pkg / "pyplot.py").write_text(
        "class _Nothing:\n"
        "    def __call__(self, *a, **k):\n        return _Nothing()\n\n"
        "    def __getattr__(self, name):\n        return _Nothing()\n\n"
        "    def __iter__(self):\n        return iter((_Nothing(), _Nothing()))\n\n\n"
        "def __getattr__(name):\n    return _Nothing()\n"
    )


# ---------------------------------------------------------------- the script's clocks
def _segments_of(raw: bytes) -> list[tuple[float, str, str]]:
    """A stream without arrival times (stderr, written to a file): split on \\r and \\n."""
    text = raw.decode("utf-8", "replace")
    parts = re.split(r"([\r\n])", text)
    return [
        (0.0, ANSI.sub("", t).replace("\b", ""), term) for t, term in zip(parts[0::2], parts[1::2])
    ]


def _keras_fits(segments, spec) -> list[dict]:
    """Keras's ms/step per fit call: `Epoch 1/N` starts a new fit; each fit's epochs >= min_epoch
    (epochs 2.. by default: the first holds the compile)."""
    fits: list[dict] = []
    epoch = 0
    marker = re.compile(r"^Epoch (\d+)/(\d+)\s*$")
    for t, text, term in segments:
        m = marker.match(text.strip())
        if m:
            epoch = int(m.group(1))
            if epoch == 1:
                fits.append({"epochs": {}, "n_epochs": int(m.group(2))})
            continue
        m = run.KERAS_FINAL.match(text)
        if m and term == "\n" and epoch and fits and m.group("cur") == m.group("tot"):
            fits[-1]["epochs"][epoch] = {
                "ms": float(m.group("t")) * run.UNIT_MS[m.group("u")],
                "res": 0.5 * run.UNIT_MS[m.group("u")],
                "steps": int(m.group("tot")),
                "t": t,
            }
            epoch = 0
    out = []
    for i, f in enumerate(fits, 1):
        steady = [e for e in sorted(f["epochs"]) if e >= spec.get("min_epoch", 2)]
        if not steady:
            out.append({"fit": i, "error": f"no epoch >= {spec.get('min_epoch', 2)} in fit {i}"})
            continue
        ms = statistics.fmean(f["epochs"][e]["ms"] for e in steady)
        res = statistics.fmean(f["epochs"][e]["res"] for e in steady)
        out.append(
            {
                "fit": i,
                "ms_per_step": ms,
                "epochs": steady,
                "steps": f["epochs"][steady[0]]["steps"],
                "resolution_pct": 100 * res / ms if ms else None,
                "what": f"Keras ms/step, fit {i} of {len(fits)}, epochs {steady[0]}-{steady[-1]}",
            }
        )
    return out


def _tqdm_user(segments, spec) -> list[dict]:
    """Each tqdm bar's final redraw (n == total): its rate (it/s, or s/it under 1 it/s) as printed,
    tqdm's moving average (smoothing 0.3) of the last iterations; bars >= min_bar."""
    bars, last = [], None
    for _, text, _term in segments:
        found = list(TQDM_FINAL.finditer(text))
        m = found[-1] if found else None
        if not m:
            continue
        if m.group("n") == m.group("tot"):
            r = float(m.group("r"))
            ms = 1000.0 / r if m.group("u") == "it/s" else 1000.0 * r
            last = {"ms_per_step": ms, "printed": m.group(0), "n": int(m.group("n"))}
        elif last is not None and int(m.group("n")) < last["n"]:
            bars.append(last)
            last = None
    if last is not None:
        bars.append(last)
    keep = bars[spec.get("min_bar", 1) :]
    if not keep:
        return [{"error": f"no tqdm bar after the first {spec.get('min_bar', 1)} ({len(bars)})"}]
    return [
        {
            "ms_per_step": statistics.fmean(b["ms_per_step"] for b in keep),
            "bars": len(keep),
            "per_bar": [round(b["ms_per_step"], 3) for b in keep],
            "what": "tqdm bar's final rate (bars " + f"{spec.get('min_bar', 1) + 1}..{len(bars)})",
        }
    ]


def _read_clock(spec: dict, segments, err_segments, machine: str) -> list[dict]:
    segs = err_segments if spec.get("stream") == "stderr" else segments
    kind = spec["kind"]
    if kind == "keras_fits":
        got = _keras_fits(segs, spec)
    elif kind == "tqdm_user":
        got = _tqdm_user(segs, spec)
    else:
        got = [run.CLOCKS[kind](segs, {**spec, "machine": machine})]
    for g in got:
        g.setdefault("what", spec.get("what", kind))
        if spec.get("what") and kind not in ("keras_fits", "tqdm_user"):
            g["what"] = spec["what"]
        g["scope"] = spec.get("scope", "steady_step")
        g["stream"] = spec.get("stream", "stdout")
        g["form"] = spec.get("form") or FORM_OF_KIND.get(kind, "timer")
        per = spec.get(f"samples_per_step_{machine}", spec.get("samples_per_step"))
        if per:
            g["samples_per_step"] = per
    return got


# ---------------------------------------------------------------- scaldiag's side
def _scaldiag_ms(rep: dict | None, scope: str) -> tuple[float | None, str]:
    if not rep:
        return None, "no report"
    scopes = (rep.get("clock") or {}).get("scopes") or {}
    sc = scopes.get(scope) or {}
    if sc.get("ms"):
        return sc.get("user_ms") or sc["ms"], scope
    st = rep.get("steps") or {}
    if st.get("samples_per_s") and st.get("samples_per_step"):
        return 1000.0 * st["samples_per_step"] / st[
            "samples_per_s"
        ], "steady_step (no " + scope + ")"
    return None, f"no {scope} figure"


def _printed(rep: dict | None) -> list[dict] | None:
    """The report's own reading of the script's clocks (issue 46), where this scaldiag has it."""
    if not rep:
        return None
    c = rep.get("clock") or {}
    return c.get("printed") if "printed" in c else None


# the harness's clock kinds and the report's clock.printed `what`, as forms of clock: a clock is
# recognised only by a report entry of its own form (a timer's lines' arrival is another clock)
FORM_OF_KIND = {
    "keras_fits": "keras_bar",
    "keras_progbar": "keras_bar",
    "tqdm_user": "tqdm",
    "tqdm_bar": "tqdm",
    "line_times": "arrival",
}


def _form_of_printed(what: str) -> str:
    w = (what or "").lower()
    if "keras" in w:
        return "keras_bar"
    if "arrival" in w:
        return "arrival"
    if "tqdm" in w or "rich" in w or "bar" in w:
        return "tqdm"
    return "timer"


def _form_of_clock_what(what: str) -> str:
    """The form of a harness clock saved without it, from its description."""
    w = what.lower()
    if w.startswith("keras"):
        return "keras_bar"
    if "tqdm" in w:
        return "tqdm"
    if "arrival" in w:
        return "arrival"
    return "timer"


def _match_printed(clock: dict, printed: list[dict] | None) -> dict:
    """Recognised: the report lists a printed clock of the same form (Keras bar, tqdm bar, a
    printed timer, the arrival of lines), of the same scope first, then the closest figure. No
    gate on the figure: the harness averages the readings it chooses (every epoch from the
    second), the report those on the steps its figure covers (not the epoch scaldiag's profiler
    slowed: JAX's mnist_vae on the H200, 87x), and a gate of 10% called such a clock unread."""
    if printed is None:
        return {"recognised": None}
    ms = clock.get("ms_per_step")
    if not ms:
        return {"recognised": None}
    best = None
    for p in printed:
        pm = p.get("ms")
        if not pm or _form_of_printed(p.get("what")) != clock.get("form"):
            continue
        gap = abs(pm / ms - 1.0)
        key = (p.get("scope") != clock.get("scope"), gap)
        if best is None or key < best[0]:
            best = (key, p)
    if best is None:
        return {"recognised": False}
    p = best[1]
    return {
        "recognised": True,
        "printed": p,
        "agrees": p.get("agrees"),
        "report_error_pct": 100.0 * p["error"]
        if isinstance(p.get("error"), (int, float))
        else None,
    }


# ---------------------------------------------------------------- one script
def run_one(entry: dict, machine: str, timeout: float, keep: Path) -> dict:
    row = {
        k: entry.get(k) for k in ("name", "source", "commit", "path", "framework", "shape", "notes")
    }
    row["machine"] = machine
    missing = run._missing_needs(entry)
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
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    res = run._run(entry, machine, work, float(entry.get("timeout", timeout)))
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    err_segments = _segments_of((work / "stderr.txt").read_bytes())
    rep = res["report"]
    printed = _printed(rep)
    row.update(
        rc=res["rc"],
        wall_s=round(res["wall_s"], 1),
        stopped=res["stopped"],
        work=str(work),
        args=entry.get(f"args_{machine}", entry.get("args", [])),
        load_before=" ".join(load_before),
        load_after=" ".join(load_after),
        report_printed=printed,
        report_headline_contradicted=((rep or {}).get("clock") or {}).get(
            "printed_headline_contradicted"
        ),
        report_printed_dropped=((rep or {}).get("clock") or {}).get("printed_dropped"),
        headline=_headline(rep),
    )
    row["clocks"] = _clocks_of(entry, machine, res["segments"], err_segments, rep)
    return row


def _clocks_of(entry: dict, machine: str, segments, err_segments, rep: dict | None) -> list[dict]:
    """Every clock of the entry read from the run's output, beside scaldiag's figure of its scope
    and the report's own reading of it."""
    printed = _printed(rep)
    clocks = []
    for spec in entry.get("clocks") or [entry["clock"]]:
        for c in _read_clock(spec, segments, err_segments, machine):
            s, s_scope = _scaldiag_ms(rep, c["scope"])
            c["scaldiag_ms"] = s
            c["scaldiag_scope"] = s_scope
            if c.get("ms_per_step") and s:
                c["error_pct"] = 100.0 * (c["ms_per_step"] / s - 1.0)
            s_samples = ((rep or {}).get("steps") or {}).get("samples_per_step")
            if c.get("ms_per_step") and s and c.get("samples_per_step") and s_samples:
                # a clock whose step holds other samples than scaldiag's (an epoch in one call):
                # samples/s on both sides
                c["clock_samples_per_s"] = 1000.0 * c["samples_per_step"] / c["ms_per_step"]
                c["scaldiag_samples_per_s"] = 1000.0 * s_samples / s
                c["error_pct"] = 100.0 * (
                    c["scaldiag_samples_per_s"] / c["clock_samples_per_s"] - 1
                )
            clocks.append(c)
    _match_all(clocks, printed)
    return clocks


def _match_all(clocks: list[dict], printed: list[dict] | None) -> None:
    """Each clock's entry in the report's clock.printed. Keras bars of several fits: where the
    report lists as many Keras bars (one per model, in the order the fits ran) as the harness read
    fits, the i-th fit is the i-th bar; otherwise (one model fit twice: one bar) by figure."""
    bars = [c for c in clocks if c.get("fit")]
    keras = [p for p in (printed or []) if _form_of_printed(p.get("what")) == "keras_bar"]
    by_order = len(bars) > 1 and len(keras) == len(bars)
    for c in clocks:
        if by_order and c.get("fit"):
            p = keras[c["fit"] - 1]
            err = p.get("error")
            c.update(
                recognised=True,
                printed=p,
                agrees=p.get("agrees"),
                report_error_pct=100.0 * err if isinstance(err, (int, float)) else None,
            )
        else:
            c.update(_match_printed(c, printed))


def reclock(saved: Path, report_name: str = "report.json") -> None:
    """The saved table's runs read again with the manifest's clocks as they are now: each run's
    arrival-timed stdout (stdout_times.jsonl), stderr and report.json, kept in its work folder."""
    d = json.loads(saved.read_text())
    manifest = {e["name"]: e for e in tomllib.loads((HERE / "manifest.toml").read_text())["script"]}
    for r in d["rows"]:
        work = Path(r.get("work") or "/nonexistent")
        if (
            r.get("skipped")
            or r["name"] not in manifest
            or not (work / "stdout_times.jsonl").exists()
        ):
            continue
        segments = [
            (x["t"], x["text"], "\n")
            for x in map(json.loads, (work / "stdout_times.jsonl").read_text().splitlines())
        ]
        err = _segments_of((work / "stderr.txt").read_bytes())
        rf = work / report_name
        rep = json.loads(rf.read_text()) if rf.exists() else None
        c = (rep or {}).get("clock") or {}
        r["report_printed"] = _printed(rep)
        r["report_headline_contradicted"] = c.get("printed_headline_contradicted")
        r["report_printed_dropped"] = c.get("printed_dropped")
        r["headline"] = _headline(rep)
        r["clocks"] = _clocks_of(manifest[r["name"]], d["meta"]["machine"], segments, err, rep)
    d["meta"]["reclocked"] = (
        f"clocks read again from the kept runs ({report_name}) with the manifest of git "
        + (
            subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
            ).stdout.strip()
        )
    )
    write(d["rows"], d["meta"], saved.with_suffix(".md"))


def _headline(rep: dict | None) -> dict | None:
    if not rep:
        return None
    st = rep.get("steps") or {}
    c = rep.get("clock") or {}
    return {
        "samples_per_s": st.get("samples_per_s"),
        "samples_per_step": st.get("samples_per_step"),
        "user_scope": c.get("user_scope"),
        "scopes_ms": {k: (v or {}).get("ms") for k, v in (c.get("scopes") or {}).items()},
    }


# ---------------------------------------------------------------- the table
def _f(x, nd=2):
    return "" if x is None else f"{x:,.{nd}f}"


def _printed_words(p: dict) -> str:
    err = p.get("error")
    verdict = {True: "agrees", False: "disagrees", None: "not compared"}[p.get("agrees")]
    return (
        f"{p.get('what')} ({p.get('scope')}): {_f(p.get('ms'), 3)} ms against scaldiag's"
        f" {_f(p.get('scaldiag_ms'), 3)}, {verdict}"
        + (f" ({100 * err:+.1f}%)" if isinstance(err, (int, float)) else "")
        + (f", {p['note']}" if p.get("note") else "")
    )


def write(rows: list[dict], meta: dict, out_md: Path) -> None:
    clocks = [c for r in rows for c in r.get("clocks", [])]
    errs = [abs(c["error_pct"]) for c in clocks if "error_pct" in c]
    rec = [c for c in clocks if c.get("recognised") is not None]
    meta["clocks"] = len(clocks)
    meta["within_5pct"] = f"{sum(e <= 5 for e in errs)} of {len(errs)}"
    meta["median_abs_error_pct"] = statistics.median(errs) if errs else None
    meta["recognised"] = (
        f"{sum(1 for c in rec if c['recognised'])} of {len(clocks)}" if rec else "not read"
    )
    yes = [c for c in rec if c["recognised"]]
    meta["report_agrees"] = f"{sum(1 for c in yes if c.get('agrees'))} of {len(yes)}"
    meta["headline_contradicted"] = [
        r["name"] for r in rows if r.get("report_headline_contradicted")
    ]
    out_md.with_suffix(".json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=1, default=str) + "\n"
    )
    L = [
        f"# Issue 46's validation set against each script's own clocks ({meta['machine']},"
        f" {meta['date']})",
        "",
        f"- machine: {meta['machine_desc']}",
        f"- command: `{meta['command']}`",
        f"- scaldiag git revision: `{meta['git_rev']}`",
        "- uncommitted changes under scaldiag/ in the tree that ran: "
        + (", ".join(f"`{x.strip()}`" for x in meta["git_dirty"] if x.strip()) or "none"),
        f"- versions: {meta['versions']}",
        *([f"- {meta['reclocked']}"] if meta.get("reclocked") else []),
        *([f"- re-reported: {meta['rereported']}"] if meta.get("rereported") else []),
        f"- clocks read: {meta['clocks']}; scaldiag's figure of the same scope within 5%:"
        f" **{meta['within_5pct']}**; median |error| {_f(meta['median_abs_error_pct'], 1)}%;"
        f" recognised by the report itself: **{meta['recognised']}**, of those the report's"
        f" verdict agrees: **{meta['report_agrees']}**; runs whose headline the report marked"
        f" contradicted: {', '.join(meta['headline_contradicted']) or 'none'}",
        "",
        "One row per clock the script prints. error = the clock's ms over scaldiag's ms of the"
        " same scope, - 1 (= scaldiag's samples/s over the clock's, - 1; positive: scaldiag reads"
        " faster). scaldiag's figure: the report's `clock.scopes[scope]` (`user_ms`, the figure as"
        " that kind of clock reads it, where given). *Recognised* and *verdict*: the report's own"
        " `clock.printed` (issue 46): an entry of the clock's form, of its scope first, then the"
        " closest figure; blank where this scaldiag writes no `clock.printed`. load:"
        " /proc/loadavg (1, 5, 15 min) before and after the script.",
        "",
        "| script | source @ commit | loop shape | clock | scope | script's ms | scaldiag ms"
        " (scope) | error | recognised by scaldiag | scaldiag's verdict | load before / after |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        src = f"{r['source']} `{r['path']}` @ {r['commit'][:10]}"
        if r.get("skipped"):
            L.append(
                f"| {r['name']} | {src} | {r.get('shape') or ''} | not run: {r['skipped']} |"
                " | | | | | | |"
            )
            continue
        for k, c in enumerate(r["clocks"] or [{"error": "no clock"}]):
            err = f"{c['error_pct']:+.1f}%" if "error_pct" in c else (c.get("error") or "")
            rec = {True: "yes", False: "no", None: ""}[c.get("recognised")]
            verdict = ""
            if c.get("recognised"):
                ag = c.get("agrees")
                gap = c.get("report_error_pct")
                pp = c.get("printed") or {}
                verdict = {True: "agrees", False: "disagrees", None: "not compared"}[ag] + (
                    f" ({gap:+.1f}%: {_f(pp.get('ms'), 2)} vs {_f(pp.get('scaldiag_ms'), 2)} ms)"
                    if gap is not None
                    else ""
                )
            # the script's source and shape once, on its first clock's row
            head = (src, r.get("shape") or "") if k == 0 else ("ditto", "ditto")
            L.append(
                f"| {r['name']} | {head[0]} | {head[1]} | {c.get('what', '')}"
                f" ({c.get('stream', 'stdout')}) | {c.get('scope', '')} |"
                f" {_f(c.get('ms_per_step'), 3)} | {_f(c.get('scaldiag_ms'), 3)}"
                f" ({c.get('scaldiag_scope', '')}) | {err} | {rec} | {verdict} |"
                f" {r.get('load_before')} / {r.get('load_after')} |"
            )
    L += ["", "Per run: exit code, wall time, arguments, the report's headline, notes.", ""]
    for r in rows:
        if r.get("skipped"):
            L.append(f"- **{r['name']}**: not run ({r['skipped']}). {r.get('notes') or ''}")
            continue
        h = r.get("headline") or {}
        pr = r.get("report_printed")
        pr_text = "not in this report" if pr is None else str(len(pr))
        L.append(
            f"- **{r['name']}**: exit {r['rc']}, {r['wall_s']} s"
            f"{', ' + r['stopped'] if r.get('stopped') else ''}; args `{' '.join(r['args'])}`;"
            f" report: user scope {h.get('user_scope')}, scopes (ms)"
            f" {json.dumps({k: round(v, 3) for k, v in (h.get('scopes_ms') or {}).items() if v})};"
            f" clock.printed: {pr_text}"
            + (
                "; headline contradicted by a printed clock"
                if r.get("report_headline_contradicted")
                else ""
            )
            + f". {r.get('notes') or ''}"
            + "".join(f" **Report's clock:** {_printed_words(p)}." for p in (pr or []))
        )
    out_md.write_text("\n".join(L) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--machine", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--machine-desc", default="")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out-dir", default=str(ROOT / "bench" / "results" / "clock"))
    ap.add_argument("--keep", default="/tmp/scaldiag_clock46")
    ap.add_argument("--tag", default="", help="added to the result file's name")
    ap.add_argument("--rewrite", default="", help="only write the .md again from this .json")
    ap.add_argument(
        "--reclock", default="", help="read the clocks of a saved table's kept runs again"
    )
    ap.add_argument(
        "--report-name",
        default="report.json",
        help="with --reclock: the report file in each kept run's folder (`scaldiag report` again)",
    )
    ap.add_argument(
        "--plain",
        action="store_true",
        help="run each script as `python SCRIPT ARGS` (no scaldiag): the clocks a plain run prints",
    )
    a = ap.parse_args()
    if a.plain:
        plain = [sys.executable, str(HERE / "plain_exec.py")]
        run._scaldiag_cmd = lambda: plain
        a.tag = a.tag or "plain"
    if a.reclock:
        reclock(Path(a.reclock), a.report_name)
        return
    if a.rewrite:
        d = json.loads(Path(a.rewrite).read_text())
        for r in d["rows"]:
            for c in r.get("clocks", []):
                # the matching again (a table written before a change to it)
                c.setdefault("form", _form_of_clock_what(c.get("what", "")))
                for k in ("recognised", "printed", "agrees", "report_error_pct"):
                    c.pop(k, None)
            _match_all(r.get("clocks", []), r.get("report_printed"))
        write(d["rows"], d["meta"], Path(a.rewrite).with_suffix(".md"))
        return
    manifest = tomllib.loads((HERE / "manifest.toml").read_text())["script"]
    only = {n for n in a.only.split(",") if n}
    todo = [e for e in manifest if e.get("set") == "issue46" and (not only or e["name"] in only)]
    keep = Path(a.keep)
    keep.mkdir(parents=True, exist_ok=True)

    def git(*c):
        return subprocess.run(["git", *c], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    meta = {
        "machine": a.machine,
        "machine_desc": a.machine_desc
        or f"{platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "date": date,
        "started_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "python bench/clock/issue46.py " + " ".join(sys.argv[1:]),
        "git_rev": git("rev-parse", "HEAD"),
        "git_dirty": git("status", "--porcelain", "--untracked-files=all", "--", "scaldiag").split(
            "\n"
        ),
        "versions": run._versions(),
    }
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out_md = out_dir / f"issue46_{a.machine}_{date}{('_' + a.tag) if a.tag else ''}.md"
    rows = []
    for e in todo:
        if a.machine not in e.get("machines", ["cpu", "gpu"]):
            rows.append(
                {
                    k: e.get(k)
                    for k in ("name", "source", "commit", "path", "framework", "shape", "notes")
                }
                | {"machine": a.machine, "skipped": f"not listed for {a.machine}"}
            )
            continue
        print(f"== {e['name']} (load {Path('/proc/loadavg').read_text().split()[0]})", flush=True)
        t0 = time.monotonic()
        row = run_one(e, a.machine, a.timeout, keep)
        rows.append(row)
        write(rows, meta, out_md)
        print(
            json.dumps(
                {"name": row["name"], "rc": row.get("rc"), "s": round(time.monotonic() - t0)}
                | {
                    "clocks": [
                        (
                            c.get("what"),
                            c.get("ms_per_step"),
                            c.get("scaldiag_ms"),
                            c.get("error_pct"),
                            c.get("error"),
                        )
                        for c in row.get("clocks", [])
                    ]
                },
                default=str,
            ),
            flush=True,
        )
    write(rows, meta, out_md)
    print(f"wrote {out_md}")


if __name__ == "__main__":
    main()
