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

import re
from dataclasses import dataclass

from scaldiag.analyze.clock import LOOP_ITERATION, WHOLE_EPOCH, WHOLE_TRAINING

# The forms (Reading.form).
KERAS_BAR, TQDM, RICH, HF_METRICS, TIMER, RATE, EPOCH_TIME, ARRIVAL = (
    "keras_bar",
    "tqdm",
    "rich",
    "hf_metrics",
    "timer",
    "rate",
    "epoch_time",
    "arrival",
)
MS_PER = {"us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3, "secs": 1e3, "seconds": 1e3}
# Rates whose unit is one step of the loop; samples' rates need the batch; tokens', tokens a step.
STEP_UNITS = {
    "it",
    "its",
    "iter",
    "iters",
    "iteration",
    "iterations",
    "step",
    "steps",
    "batch",
    "batches",
}
SAMPLE_UNITS = {
    "samples",
    "sample",
    "img",
    "imgs",
    "images",
    "examples",
    "ex",
    "seq",
    "seqs",
    "sequences",
}
TOKEN_UNITS = {"tok", "toks", "token", "tokens"}
# A bar whose description says evaluation counts no training steps.
EVALUATION_WORDS = re.compile(r"valid|eval|test|predict|infer", re.I)

_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|[\x00-\x08\x0b-\x1f\x7f]")
_NUM = r"\d+(?:\.\d+)?"
_KERAS = re.compile(
    rf"^\s*(?P<n>\d+)/(?P<total>\d+|Unknown)\s*(?P<bar>[━─╸╺\[\]=>.\s]*?)\s*(?:-\s*)?"
    rf"\d+(?:s|ms|us)\s+(?:-\s+)?(?P<per>{_NUM})(?P<unit>s|ms|us)/step"
)
_KERAS_EPOCH = re.compile(r"^\s*Epoch (\d+)/(\d+)\s*$")
_KERAS_OLD = re.compile(r"^\s*-\s*(?P<s>\d+)s\s*-\s*\w+")
_TQDM = re.compile(
    rf"(?P<n>{_NUM}[kMG]?)(?:/(?P<total>{_NUM}[kMG]?|\?))?\s*\[(?P<elapsed>(?:\d+:)?\d+:\d+)"
    rf"(?:<(?:(?:\d+:)?\d+:\d+|\?))?,\s*(?:(?P<rate>{_NUM})\s*(?P<unit>[A-Za-z]*/[A-Za-z]+)|\?)"
)
_RICH = re.compile(
    rf"(?P<n>\d+)/(?P<total>\d+)\s+(?P<elapsed>\d+:\d\d:\d\d)\s*•\s*(?:\d+:\d\d:\d\d|-:--:--)"
    rf"\s+(?P<rate>{_NUM})it/s"
)
_HF = re.compile(
    r"""['"]?(train_runtime|train_samples_per_second|train_steps_per_second)['"]?"""
    rf"""\s*[:=]\s*['"]?({_NUM})"""
)
_PER = re.compile(
    rf"(?P<v>{_NUM})\s*(?P<u>us|µs|ms|secs|sec|seconds|s)\s*(?:/|per\s+)\s*"
    r"(?P<what>step|it|iter|iteration|batch|epoch)\b",
    re.I,
)
_RATE = re.compile(
    rf"(?P<v>{_NUM})\s*(?P<u>[A-Za-z]+)\s*(?:/|per\s+)\s*(?:s|sec|second)\b(?!/)", re.I
)
_COUNTER = re.compile(
    r"\b(?P<word>step|iter|iteration|batch|epoch)\b\s*[:#=]?\s*\[?(?P<c>\d+)", re.I
)
_GLYPHS = re.compile(r"[|━╸╺─█▏▎▍▌▋▊▉#]")
_DURATION = re.compile(rf"(?<![\d.:/])(?P<v>{_NUM})\s*(?P<u>ms|secs|sec|seconds|s)\b(?!\s*/)")


@dataclass(frozen=True)
class Reading:
    """One figure of a clock the script printed, as the user reads it."""

    what: str  # words the user recognises ("your tqdm bar 'epoch N'")
    form: str
    scope: str  # analyze/clock.py's scope names
    shown: str  # the figure as printed: "12.3 it/s", "3ms/step"
    ms: float | None  # ms a step of that scope; None: see total_ms, or not comparable (note)
    count: int | None  # steps it counts; None where the line does not say (an epoch's time)
    begin_ns: int  # the window the figure covers
    end_ns: int
    resolution_ms: float  # half the last printed digit, in ms a step (0 where unknown)
    text: str  # the line, control characters out
    total_ms: float | None = None  # a span's time over steps the line does not count
    note: str = ""  # why it cannot be compared
    style: str = ""  # Keras: "verbose1" (the bar) or "verbose2"
    evaluation: bool = False  # a bar over evaluation: no training steps in it


def clean(text: str) -> str:
    """The segment as the terminal shows it: escape sequences and control characters out."""
    return _CONTROL.sub("", text).strip()


def _half_digit(number: str) -> float:
    """Half a unit of the last digit printed: ``'3'`` 0.5, ``'45.2'`` 0.05."""
    decimals = len(number.split(".")[1]) if "." in number else 0
    return 0.5 * 10.0**-decimals


def _scaled(number: str) -> float:
    factor = {"k": 1e3, "M": 1e6, "G": 1e9}.get(number[-1:], 1.0)
    return float(number.rstrip("kMG")) * factor


def recognise(
    rows: list[dict], family: str = "", samples_per_step: float | None = None
) -> list[Reading]:
    """Every clock reading in the segments, in time order. ``family`` names the loop's bars
    (Lightning's, the Trainer's); ``samples_per_step`` turns samples/s into a step's time."""
    segments = [
        (int(r["t_ns"]), r.get("stream", ""), clean(r["text"]))
        for r in rows
        if isinstance(r.get("text"), str) and isinstance(r.get("t_ns"), int)
    ]
    segments.sort(key=lambda s: s[0])
    readings: list[Reading] = []
    used: set[int] = set()
    readings += _keras(segments, used)
    readings += _bars(segments, used, family)
    readings += _hf(segments, used, samples_per_step)
    readings += _timers(segments, used, samples_per_step)
    readings += _arrivals(segments, used)
    return sorted(readings, key=lambda r: r.end_ns)


def _keras(segments, used: set[int]) -> list[Reading]:
    """Each epoch's final line of Keras's bar: the first that reaches its total after the epoch's
    ``Epoch k/N`` line (redraws before it, evaluate()/predict() bars outside fit, passed over)."""
    out: list[Reading] = []
    epoch_begin: int | None = None
    final_seen = True
    last: tuple | None = None  # the epoch's latest bar line (an epoch stopped short)
    for i, (t_ns, _, text) in enumerate(segments):
        if _KERAS_EPOCH.match(text):
            if last is not None and not final_seen:
                out.append(_keras_reading(*last))
            used.add(i)
            epoch_begin, final_seen, last = t_ns, False, None
            continue
        if epoch_begin is None or final_seen:
            continue
        m = _KERAS.match(text)
        if m:
            used.add(i)
            last = (m, text, epoch_begin, t_ns)
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
                    0.0,  # as a step's time once the steps are known (printed_clock.py)
                    text,
                    total_ms=float(old["s"]) * 1e3,
                )
            )
    if last is not None and not final_seen:
        out.append(_keras_reading(*last))
    return out


def _keras_reading(m, text: str, begin_ns: int, end_ns: int) -> Reading:
    unit_ms = MS_PER[m["unit"]]
    return Reading(
        "Keras's progress bar",
        KERAS_BAR,
        WHOLE_EPOCH,
        f"{m['per']}{m['unit']}/step",
        float(m["per"]) * unit_ms,
        int(m["n"]),
        begin_ns,
        end_ns,
        _half_digit(m["per"]) * unit_ms,
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
        n = _scaled(m["n"])
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
        ms, shown, res = rate * 1e3, f"{m['rate']} s/{base}", _half_digit(m["rate"]) * 1e3
    else:  # it/s, or a custom unit (batch/s): one of the loop's iterations, as tqdm counts them
        ms, shown = 1e3 / rate, f"{m['rate']} {per}/s"
        res = ms * _half_digit(m["rate"]) / rate
    # (each redraw is stamped when the next one ends it: the bar's own elapsed time bounds its
    # start)
    begin_ns = min(bar["begin_ns"], end_ns - int(_seconds(m["elapsed"]) * 1e9))
    return [
        Reading(
            _bar_name(desc, family, rich),
            RICH if rich else TQDM,
            LOOP_ITERATION,
            shown,
            ms,
            int(n),
            begin_ns,
            end_ns,
            res,
            bar["text"],
            evaluation=bool(EVALUATION_WORDS.search(desc)),
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
            res = ms * _half_digit(samples) / float(samples)
        elif steps:
            ms = 1e3 / float(steps)
            what, shown = "the Trainer's train_steps_per_second", f"{steps} steps/s"
            res = ms * _half_digit(steps) / float(steps)
        else:
            continue
        count = round(runtime_s * 1e3 / ms) if ms > 0 else None
        out.append(
            Reading(what, HF_METRICS, WHOLE_TRAINING, shown, ms, count, begin_ns, t_ns, res, text)
        )
    return out


def _timers(segments, used: set[int], samples_per_step: float | None) -> list[Reading]:
    """Hand-written figures: a time a step, a rate, an epoch's time; the window of each is the
    time since the previous line of its kind (the first of a kind covers its moment only)."""
    out: list[Reading] = []
    previous: dict[str, tuple[int, int | None]] = {}  # what -> (t_ns, counter) of the last line
    for i, (t_ns, stream, text) in enumerate(segments):
        if i in used:
            continue
        counter = _COUNTER.search(text)
        epoch_line = bool(counter) and counter["word"].lower() == "epoch"
        for reading in _timer_forms(text, counter, samples_per_step):
            if epoch_line and reading.form != EPOCH_TIME:  # a rate over the epoch: its scope
                reading = Reading(**{**reading.__dict__, "scope": WHOLE_EPOCH})
            key = f"{stream}:{reading.what}"
            before = previous.get(key)
            c = int(counter["c"]) if counter else None
            previous[key] = (t_ns, c)
            begin_ns = before[0] if before else t_ns
            count = c - before[1] if before and c is not None and before[1] is not None else None
            if reading.form == EPOCH_TIME:
                begin_ns = t_ns - int(reading.total_ms * 1e6)
            if epoch_line or reading.form == EPOCH_TIME:
                count = None  # the steps of an epoch: from the record (printed_clock.py)
            out.append(_at(reading, begin_ns, t_ns, count if count and count > 0 else None))
    return out


def _at(r: Reading, begin_ns: int, end_ns: int, count: int | None) -> Reading:
    return Reading(**{**r.__dict__, "begin_ns": begin_ns, "end_ns": end_ns, "count": count})


def _timer_forms(text: str, counter, samples_per_step: float | None) -> list[Reading]:
    out: list[Reading] = []
    for m in _PER.finditer(text):
        unit_ms, per = MS_PER[m["u"].lower()], m["what"].lower()
        shown = f"{m['v']} {m['u']}/{per}"
        if per == "epoch":
            out.append(
                _reading(
                    f"your timer ('{m['u']}/epoch')",
                    EPOCH_TIME,
                    WHOLE_EPOCH,
                    shown,
                    None,
                    0.0,
                    text,
                    total_ms=float(m["v"]) * unit_ms,
                )
            )
        else:
            what = f"your timer ('{m['u']}/{per}' in '{_short(text)}')"
            out.append(
                _reading(
                    what,
                    TIMER,
                    LOOP_ITERATION,
                    shown,
                    float(m["v"]) * unit_ms,
                    _half_digit(m["v"]) * unit_ms,
                    text,
                )
            )
    for m in _RATE.finditer(text):
        unit, value = m["u"], float(m["v"])
        base = unit.lower()
        if value <= 0:
            continue
        shown, res_rel = f"{m['v']} {unit}/s", _half_digit(m["v"]) / value
        what = f"your '{unit}/s' ('{_short(text)}')"
        if base in STEP_UNITS:
            out.append(
                _reading(
                    what, RATE, LOOP_ITERATION, shown, 1e3 / value, 1e3 / value * res_rel, text
                )
            )
        elif base in SAMPLE_UNITS:
            ms = samples_per_step * 1e3 / value if samples_per_step else None
            note = "" if ms else "samples a step unknown (no batch size recorded)"
            out.append(
                _reading(
                    what, RATE, LOOP_ITERATION, shown, ms, (ms or 0.0) * res_rel, text, note=note
                )
            )
        elif base in TOKEN_UNITS:
            note = "tokens a step unknown: not comparable with a step's time"
            out.append(_reading(what, RATE, LOOP_ITERATION, shown, None, 0.0, text, note=note))
    if counter and counter["word"].lower() == "epoch" and not _PER.search(text):
        duration = _DURATION.search(text[counter.end() :])
        if duration:
            total_ms = float(duration["v"]) * MS_PER[duration["u"].lower()]
            shown = f"{duration['v']}{duration['u']}"
            what = f"your epoch timer ('{duration['u']}' in '{_short(text)}')"
            out.append(
                _reading(what, EPOCH_TIME, WHOLE_EPOCH, shown, None, 0.0, text, total_ms=total_ms)
            )
    elif counter and not out:
        duration = _DURATION.search(text[counter.end() :])
        if duration and duration["u"].lower() == "ms":
            what = f"your timer ('{duration['u']}' in '{_short(text)}')"
            ms, res = float(duration["v"]), _half_digit(duration["v"])
            out.append(_reading(what, TIMER, LOOP_ITERATION, f"{duration['v']} ms", ms, res, text))
    return out


def _reading(what, form, scope, shown, ms, res, text, total_ms=None, note="") -> Reading:
    return Reading(what, form, scope, shown, ms, None, 0, 0, res, text, total_ms, note)


def _short(text: str) -> str:
    """The line with its numbers as N: one name for every line of a timer."""
    return re.sub(r"\d+(?:\.\d+)?(?:e-?\d+)?", "N", text)[:48]


def _arrivals(segments, used: set[int]) -> list[Reading]:
    """For lines with an increasing counter: the time between two of them over the counter's
    increase. Lines of one kind share their text before the counter."""
    out: list[Reading] = []
    last: dict[tuple, tuple[int, int]] = {}
    for i, (t_ns, stream, text) in enumerate(segments):
        if i in used:
            continue
        m = _COUNTER.search(text)
        if not m:
            continue
        word, c = m["word"].lower(), int(m["c"])
        key = (stream, word, re.sub(r"\d+", "N", text[: m.start()]))
        before = last.get(key)
        last[key] = (t_ns, c)
        if before is None or c <= before[1] or t_ns <= before[0]:
            continue
        increase, dt_ms = c - before[1], (t_ns - before[0]) / 1e6
        epoch = word == "epoch"
        out.append(
            Reading(
                f"the arrival of your '{m['word']} N' lines",
                ARRIVAL,
                WHOLE_EPOCH if epoch else LOOP_ITERATION,
                f"{dt_ms / increase:.4g} ms a{'n epoch' if epoch else ' ' + word}",
                None if epoch else dt_ms / increase,
                None if epoch else increase,
                before[0],
                t_ns,
                0.0,
                text,
                total_ms=dt_ms if epoch else None,
            )
        )
    return out
