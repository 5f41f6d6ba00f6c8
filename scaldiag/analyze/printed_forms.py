"""The clocks a script prints, recognised in its output (printed.jsonl's segments).

Each clock is read as the user reads it, from the text, and given the time window its figure
covers (the segments' time stamps are on the steps' clock). Forms, each with its scope from what
it counts:

- Keras's progress bar (``20/20 ━━━ 1s 3ms/step``, ``20/20 - 1s - 3ms/step``, ``us/step``,
  ``s/step``; Keras 2's ``[====]``; an old ``- 3s - loss`` epoch time): whole epochs, the
  epoch's final line (the ``\\r`` redraws before it are passed over);
- a tqdm bar (``n/total [mm:ss<mm:ss, X it/s]``, ``s/it``, custom units such as ``batch/s``:
  the user's own, Lightning's, accelerate's, the Trainer's): loop iterations, each bar's last line;
- Lightning's rich bar (``40/40 0:00:01 • 0:00:00 51.15it/s``): loop iterations;
- Hugging Face Trainer's logged ``train_runtime``/``train_samples_per_second``/
  ``train_steps_per_second``: the whole training;
- hand-written timers: a duration a step (``45.2 ms/step``, ``0.3 s/iter``), a rate (``X it/s``,
  ``samples/s``, ``img/s``, ``tok/s``), an epoch's time (``Epoch 3: 2.30s``);
- the arrival of any line with an increasing ``step``/``iter``/``batch``/``epoch`` counter.

Pure: rows in, ``Reading`` out. Nothing here knows what scaldiag measured (printed_clock.py).
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import replace

from scaldiag.analyze.clock import LOOP_ITERATION, WHOLE_EPOCH, WHOLE_TRAINING
from scaldiag.analyze.printed_reading import (  # (the forms' names, for the readers of readings)
    ARRIVAL,
    EPOCH_TIME,
    EVALUATION_WORDS,
    HF_METRICS,
    KERAS_BAR,
    MS_PER,
    NUM,
    RATE,
    RICH,
    TIMER,
    TQDM,
    Reading,
    clean,
    half_digit,
    scaled,
)
from scaldiag.analyze.printed_timers import arrivals, counted_timers, timers

__all__ = [
    "ARRIVAL",
    "EPOCH_TIME",
    "HF_METRICS",
    "KERAS_BAR",
    "RATE",
    "RICH",
    "TIMER",
    "TQDM",
    "Reading",
    "clean",
    "recognise",
]

_LONG_NUMBER = re.compile(r"\d{31}")
_KERAS = re.compile(
    rf"^\s*(?P<n>\d+)/(?P<total>\d+|Unknown)\s*(?P<bar>[━─╸╺\[\]=>.\s]*?)\s*(?:-\s*)?"
    # (the time so far, or the time left while the epoch runs: "4:10" where over a minute)
    rf"(?:\d+(?::\d\d)+|\d+(?:s|ms|us))\s+(?:-\s+)?(?P<per>{NUM})(?P<unit>s|ms|us)/step"
)
_KERAS_EPOCH = re.compile(r"^\s*Epoch (\d+)/(\d+)\s*$")
_KERAS_OLD = re.compile(r"^\s*-\s*(?P<s>\d+)s\s*-\s*\w+")
_TQDM = re.compile(
    rf"(?P<n>{NUM}[kMG]?)(?:/(?P<total>{NUM}[kMG]?|\?))?\s*\[(?P<elapsed>(?:\d+:)?\d+:\d+)"
    rf"(?:<(?:(?:\d+:)?\d+:\d+|\?))?,\s*(?:(?P<rate>{NUM})\s*(?P<unit>[A-Za-z]*/[A-Za-z]+)|\?)"
)
_RICH = re.compile(
    rf"(?P<n>\d+)/(?P<total>\d+)\s+(?P<elapsed>\d+:\d\d:\d\d)\s*•\s*(?:\d+:\d\d:\d\d|-:--:--)"
    rf"\s+(?P<rate>{NUM})it/s"
)
_HF = re.compile(
    r"""['"]?(train_runtime|train_samples_per_second|train_steps_per_second)['"]?"""
    rf"""\s*[:=]\s*['"]?({NUM})"""
)
_GLYPHS = re.compile(r"[|━╸╺─█▏▎▍▌▋▊▉#]")


def recognise(
    rows: list[dict],
    family: str = "",
    samples_per_step: float | None = None,
    keras_epochs: list[tuple[int, str]] | tuple = (),
) -> list[Reading]:
    """Every clock reading in the segments, in time order. ``family`` names the loop's bars
    (Lightning's, the Trainer's); ``samples_per_step`` turns samples/s into a step's time;
    ``keras_epochs``: Keras's epochs as its callback marked them (``epoch_begin``: its time, its
    fit's name where several fits ran), where its bar prints no ``Epoch k/N`` line (Keras 3's
    ProgbarLogger prints it only when epochs > 1), and whose fit a bar is."""
    segments = [
        (int(r["t_ns"]), r.get("stream", ""), clean(r["text"]))
        for r in rows
        if isinstance(r.get("text"), str)
        and isinstance(r.get("t_ns"), int)
        and not _LONG_NUMBER.search(r["text"])  # no clock prints 31 digits: a dump, or hostile
    ]
    segments.sort(key=lambda s: s[0])
    readings: list[Reading] = []
    used: set[int] = set()
    readings += _keras(segments, used, sorted(keras_epochs))
    readings += _bars(segments, used, family)
    readings += _hf(segments, used, samples_per_step)
    readings += counted_timers(segments, used)
    readings += timers(segments, used, samples_per_step)
    readings += arrivals(segments, used)
    return sorted((_bounded(r) for r in readings if _sane(r)), key=lambda r: r.end_ns)


def _sane(r: Reading) -> bool:
    """A figure a clock can print: positive and finite ("0ms/step" times nothing)."""
    return all(v is None or (math.isfinite(v) and v > 0) for v in (r.ms, r.total_ms))


def _bounded(r: Reading) -> Reading:
    """The window inside the clock's epoch (a printed "99999999 s" reaches back before 1970)."""
    begin_ns = min(max(r.begin_ns, 0), r.end_ns)
    return r if begin_ns == r.begin_ns else replace(r, begin_ns=begin_ns)


def _keras(segments, used: set[int], epochs: list[tuple[int, str]]) -> list[Reading]:
    """Each epoch's final line of Keras's bar: the first that reaches its total after the epoch's
    ``Epoch k/N`` line, or, where none was printed (``fit(epochs=1)``), after the epoch's
    ``epoch_begin`` mark (redraws before it passed over). ``epochs``: the marks' times and their
    fit's name, where several fits ran (each fit's bar a clock of its own). Where the marks are
    known, a bar line outside every epoch is evaluate()'s or predict()'s: no training clock."""
    begins = [t for t, _ in epochs]
    out: list[Reading] = []
    epoch_begin: int | None = None
    final_seen = True
    last: tuple | None = None  # the epoch's latest bar line (an epoch stopped short)
    for i, (t_ns, _, text) in enumerate(segments):
        again = _KERAS.match(text) if final_seen and last is not None else None
        if again and again["n"] == again["total"] == last[0]["total"]:
            # the epoch's final line, after validation (ProgbarLogger's finalize at on_epoch_end),
            # where the last batch's update printed its own total before it: the user sees this
            used.add(i)
            last = (again, text, *last[2:3], t_ns, *last[4:])
            out[-1] = _keras_reading(*last)
            continue
        if (epoch_begin is None or final_seen) and _KERAS.match(text):
            marked = _marked_epoch(begins, epoch_begin, t_ns)
            if marked is not None:  # the framework's evidence where the text has none
                epoch_begin, final_seen, last = marked, False, None
        if _KERAS_EPOCH.match(text):
            if last is not None and not final_seen:
                out.append(_keras_reading(*last))
            used.add(i)
            epoch_begin, final_seen, last = t_ns, False, None
            continue
        if epoch_begin is None or final_seen:
            if _KERAS.match(text):
                last = None  # (another bar began: the epoch's final line is read)
                if epochs:
                    used.add(i)  # evaluate()'s, predict()'s bar
            continue
        m = _KERAS.match(text)
        if m:
            used.add(i)
            last = (m, text, epoch_begin, t_ns, _fit_name(epochs, begins, t_ns))
            if m["total"] != "Unknown" and m["n"] == m["total"]:
                out.append(_keras_reading(*last))
                final_seen = True
            continue
        old = _KERAS_OLD.match(text)
        if old:
            used.add(i)
            final_seen = True
            out.append(
                Reading(
                    "Keras's progress bar (its epoch time)",
                    EPOCH_TIME,
                    WHOLE_EPOCH,
                    f"{old['s']}s an epoch",
                    None,
                    None,
                    t_ns - int(float(old["s"]) * 1e9),
                    t_ns,
                    500.0,  # of the total (whole seconds): a step's once its steps are known
                    text,
                    total_ms=float(old["s"]) * 1e3,
                    span_ms=float(old["s"]) * 1e3,
                )
            )
    if last is not None and not final_seen:
        out.append(_keras_reading(*last))
    return out


def _fit_name(epochs: list[tuple[int, str]], begins: list[int], t_ns: int) -> str:
    k = bisect.bisect_right(begins, t_ns)
    return epochs[k - 1][1] if k else ""


def _marked_epoch(begins_ns: list[int], opened_ns: int | None, t_ns: int) -> int | None:
    """The newest epoch mark at or before ``t_ns`` that no bar line has opened yet: None where the
    line belongs to an epoch already read (an evaluate() bar after fit's)."""
    k = bisect.bisect_right(begins_ns, t_ns)
    if k == 0 or (opened_ns is not None and begins_ns[k - 1] <= opened_ns):
        return None
    return begins_ns[k - 1]


def _keras_reading(m, text: str, begin_ns: int, end_ns: int, fit: str = "") -> Reading:
    unit_ms = MS_PER[m["unit"]]
    return Reading(
        "Keras's progress bar" + (f" ({fit})" if fit else ""),
        KERAS_BAR,
        WHOLE_EPOCH,
        f"{m['per']}{m['unit']}/step",
        float(m["per"]) * unit_ms,
        int(m["n"]),
        begin_ns,
        end_ns,
        half_digit(m["per"]) * unit_ms,
        text,
        style="verbose1" if m["bar"].strip() else "verbose2",
    )


def _bars(segments, used: set[int], family: str) -> list[Reading]:
    """Each tqdm or rich bar's last line; a bar ends where its counter goes back or its description
    changes (Lightning resets one bar each epoch)."""
    out: list[Reading] = []
    open_bars: dict[tuple, dict] = {}  # (stream, description's shape, rich) -> the bar so far
    for i, (t_ns, stream, text) in enumerate(segments):
        if i in used:
            continue
        m = _TQDM.search(text) or _RICH.search(text)
        if not m:
            continue
        used.add(i)
        rich = m.re is _RICH
        desc = _desc(text[: m.start()])
        key = (stream, re.sub(r"\d+", "#", desc), rich)
        n = scaled(m["n"])
        bar = open_bars.get(key)
        if bar is not None and (n < bar["n"] or desc != bar["desc"]):
            out += _bar_reading(bar, family)
            bar = None
        if bar is None:
            bar = open_bars[key] = {"begin_ns": t_ns, "desc": desc, "rich": rich}
        bar.update(n=n, m=m, text=text, end_ns=t_ns)
    for bar in open_bars.values():
        out += _bar_reading(bar, family)
    return out


def _desc(desc: str) -> str:
    """The bar's description: its text before the percentage and the bar's glyphs."""
    return _GLYPHS.split(desc)[0].rstrip(" :%0123456789").strip()


def _bar_reading(bar: dict, family: str) -> list[Reading]:
    m, n, rich, desc, end_ns = bar["m"], bar["n"], bar["rich"], bar["desc"], bar["end_ns"]
    if not m["rate"] or n <= 0 or float(m["rate"]) <= 0:
        return []
    rate, unit = float(m["rate"]), (m["unit"] if not rich else "it/s")
    per, _, base = unit.partition("/")
    if per == "s":  # s/it: seconds a step
        ms, shown, res = rate * 1e3, f"{m['rate']} s/{base}", half_digit(m["rate"]) * 1e3
    else:  # it/s, or a custom unit (batch/s): one of the loop's iterations, as tqdm counts them
        ms, shown = 1e3 / rate, f"{m['rate']} {per}/s"
        res = ms * half_digit(m["rate"]) / rate
    # (each redraw is stamped when the next one ends it: the bar's own elapsed time bounds its
    # start)
    begin_ns = min(bar["begin_ns"], end_ns - int(_seconds(m["elapsed"]) * 1e9))
    # Its count at its rate is its span (tqdm's closing rate is its count over its time): the
    # first line is stamped when the next redraw ends it, up to a tenth of a second of steps in
    # (more on a loaded machine), and rich leaves its final line alone (a Lightning run under
    # profile kept 'Epoch 2/2 ... 200/200 0:00:00 • 0:00:00 440.94it/s' only)
    span_ms = n * ms
    begin_ns = min(begin_ns, end_ns - int(span_ms * 1e6))
    # The Trainer's bar spans the whole training, and tqdm's closing line is the bar's average
    # from its start: train_runtime's scope (the HF run above: 1.26 s/it, train_runtime 161.1 s
    # over 128 steps)
    trainer = family == "transformers" and not desc
    return [
        Reading(
            _bar_name(desc, family, rich),
            RICH if rich else TQDM,
            WHOLE_TRAINING if trainer else LOOP_ITERATION,
            shown,
            ms,
            int(n),
            begin_ns,
            end_ns,
            res,
            bar["text"],
            evaluation=bool(EVALUATION_WORDS.search(desc)),
            span_ms=span_ms,
        )
    ]


def _bar_name(desc: str, family: str, rich: bool) -> str:
    named = re.sub(r"\d+", "N", desc)[:40]
    if family == "lightning":
        return f"Lightning's {'rich ' if rich else ''}progress bar" + (
            f" '{named}'" if named and not named.startswith("Epoch") else ""
        )
    if family == "transformers" and not desc:
        return "the Trainer's progress bar"
    return f"your {'rich' if rich else 'tqdm'} bar" + (f" '{named}'" if named else "")


def _seconds(clock: str) -> float:
    total = 0.0
    for part in clock.split(":"):
        total = total * 60 + float(part)
    return total


def _hf(segments, used: set[int], samples_per_step: float | None) -> list[Reading]:
    """The Trainer's closing metrics: one reading of the whole training."""
    out: list[Reading] = []
    for i, (t_ns, _, text) in enumerate(segments):
        found = dict(_HF.findall(text))
        if "train_runtime" not in found:
            continue
        used.add(i)
        runtime_s = float(found["train_runtime"])
        samples, steps = found.get("train_samples_per_second"), found.get("train_steps_per_second")
        begin_ns = t_ns - int(runtime_s * 1e9)
        if samples and samples_per_step:
            ms = samples_per_step * 1e3 / float(samples)
            what, shown = "the Trainer's train_samples_per_second", f"{samples} samples/s"
            res = ms * half_digit(samples) / float(samples)
        elif steps:
            ms = 1e3 / float(steps)
            what, shown = "the Trainer's train_steps_per_second", f"{steps} steps/s"
            res = ms * half_digit(steps) / float(steps)
        else:
            continue
        count = round(runtime_s * 1e3 / ms) if ms > 0 else None
        out.append(
            Reading(
                what,
                HF_METRICS,
                WHOLE_TRAINING,
                shown,
                ms,
                count,
                begin_ns,
                t_ns,
                res,
                text,
                span_ms=runtime_s * 1e3,
            )
        )
    return out
