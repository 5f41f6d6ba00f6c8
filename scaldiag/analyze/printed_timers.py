"""Hand-written clocks in a script's output: a time a step (``45.2 ms/step``, ``0.3 s/iter``),
a rate (``X it/s``, ``samples/s``, ``img/s``, ``tok/s``), an epoch's time (``Epoch 3: 2.30s``),
and the arrival of any line with an increasing ``step``/``iter``/``batch``/``epoch`` counter
(the time between two such lines over the counter's increase). Pure."""

from __future__ import annotations

import re

from scaldiag.analyze.clock import LOOP_ITERATION, WHOLE_EPOCH
from scaldiag.analyze.printed_reading import (
    ARRIVAL,
    EPOCH_TIME,
    MS_PER,
    NUM,
    RATE,
    SAMPLE_UNITS,
    STEP_UNITS,
    TIMER,
    TOKEN_UNITS,
    Reading,
    half_digit,
)

_PER = re.compile(
    rf"(?P<v>{NUM})\s*(?P<u>us|µs|ms|secs|sec|seconds|s)\s*(?:/|per\s+)\s*"
    r"(?P<what>step|it|iter|iteration|batch|epoch)\b",
    re.I,
)
_RATE = re.compile(
    rf"(?P<v>{NUM})\s*(?P<u>[A-Za-z]+)\s*(?:/|per\s+)\s*(?:s|sec|second)\b(?!/)", re.I
)
_STEPS = re.compile(r"(?<![\d.])(\d+)\s*(?:steps|iters|iterations|batches)\b", re.I)
_COUNTER = re.compile(
    r"\b(?P<word>step|iter|iteration|batch|epoch)\b\s*[:#=]?\s*\[?(?P<c>\d+)", re.I
)
_DURATION = re.compile(rf"(?<![\d.:/])(?P<v>{NUM})\s*(?P<u>ms|secs|sec|seconds|s)\b(?!\s*/)")


def timers(segments, used: set[int], samples_per_step: float | None) -> list[Reading]:
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
            span_ms = None
            if reading.form == EPOCH_TIME:
                begin_ns, span_ms = t_ns - int(reading.total_ms * 1e6), reading.total_ms
            if epoch_line or reading.form == EPOCH_TIME:
                count = None  # the steps of an epoch: from the record (printed_clock.py)
            steps = _STEPS.search(text)
            if steps and not epoch_line and reading.form in (TIMER, RATE) and reading.ms:
                # "phase 2: 1000 steps, 3.1 ms/step": the figure is of those steps, just before
                count = int(steps[1])
                span_ms = count * reading.ms
                begin_ns = t_ns - int(span_ms * 1e6)
            reading = Reading(**{**reading.__dict__, "span_ms": span_ms})
            out.append(_at(reading, begin_ns, t_ns, count if count and count > 0 else None))
    return out


# A line that begins with its counter and holds a time ("  3 -105.2 (0.775 sec)": JAX's
# mnist_vae prints its epoch, its test ELBO and time.time() around the epoch so)
_LEADING = re.compile(r"^\s*(?P<c>\d+)\s+(?=\S)")
_PAREN_DURATION = re.compile(rf"\(\s*(?P<v>{NUM})\s*(?P<u>ms|secs|sec|seconds|s)\s*\)")


def counted_timers(segments, used: set[int]) -> list[Reading]:
    """A time in parentheses on lines that begin with a counter going up by one: each line's time
    is the counted unit's (an epoch's, most often; its steps from the record)."""
    out: list[Reading] = []
    last: dict[tuple, int] = {}
    for i, (t_ns, stream, text) in enumerate(segments):
        if i in used:
            continue
        lead, m = _LEADING.match(text), _PAREN_DURATION.search(text)
        if not lead or not m or _COUNTER.search(text):
            continue
        key = (stream, re.sub(r"\d+(?:\.\d+)?", "N", text))
        c, before = int(lead["c"]), last.get(key)
        last[key] = int(lead["c"])
        if before is None or c != before + 1:
            continue  # (a counter that goes up by one: not any number that starts a line)
        used.add(i)
        total_ms = float(m["v"]) * MS_PER[m["u"].lower()]
        what = f"your epoch timer ('({m['u']})' in '{_short(text)}')"
        reading = _reading(
            what,
            EPOCH_TIME,
            WHOLE_EPOCH,
            f"{m['v']} {m['u']}",
            None,
            half_digit(m["v"]) * MS_PER[m["u"].lower()],
            text,
            total_ms=total_ms,
        )
        reading = Reading(**{**reading.__dict__, "span_ms": total_ms})
        out.append(_at(reading, t_ns - int(total_ms * 1e6), t_ns, None))
    return out


def _at(r: Reading, begin_ns: int, end_ns: int, count: int | None) -> Reading:
    return Reading(**{**r.__dict__, "begin_ns": begin_ns, "end_ns": end_ns, "count": count})


def _timer_forms(text: str, counter, samples_per_step: float | None) -> list[Reading]:
    out = [*_per_forms(text), *_rate_forms(text, samples_per_step)]
    return out + _counter_forms(text, counter, bool(out))


def _per_forms(text: str) -> list[Reading]:
    """Times per step, iteration, batch or epoch ("143.6 ms/step", "12 s per epoch")."""
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
                    half_digit(m["v"]) * unit_ms,  # of the total: a step's once its steps are known
                    text,
                    total_ms=float(m["v"]) * unit_ms,
                )
            )
        else:
            what = f"your timer ('{m['u']}/{per}' in '{_short(text)}'){_which(text, m, _PER)}"
            reading = _reading(
                what,
                TIMER,
                LOOP_ITERATION,
                shown,
                float(m["v"]) * unit_ms,
                half_digit(m["v"]) * unit_ms,
                text,
            )
            out.append(
                Reading(**{**reading.__dict__, "median": bool(_MEDIAN.search(text[: m.start()]))})
            )
    return out


def _rate_forms(text: str, samples_per_step: float | None) -> list[Reading]:
    """Rates ("7.0 it/s", "1024 samples/s", "tokens/s"): a step's time where the unit gives one."""
    out: list[Reading] = []
    for m in _RATE.finditer(text):
        unit, value = m["u"], float(m["v"])
        base = unit.lower()
        if value <= 0:
            continue
        shown, res_rel = f"{m['v']} {unit}/s", half_digit(m["v"]) / value
        what = f"your '{unit}/s' ('{_short(text)}'){_which(text, m, _RATE)}"
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
    return out


def _counter_forms(text: str, counter, found_any: bool) -> list[Reading]:
    """A bare duration beside the line's counter: an epoch's time after an epoch counter, else
    (where the line gave no other form) a step's time in ms."""
    out: list[Reading] = []
    if counter and counter["word"].lower() == "epoch" and not _PER.search(text):
        duration = _DURATION.search(text[counter.end() :])
        if duration:
            total_ms = float(duration["v"]) * MS_PER[duration["u"].lower()]
            shown = f"{duration['v']}{duration['u']}"
            what = f"your epoch timer ('{duration['u']}' in '{_short(text)}')"
            out.append(
                _reading(
                    what,
                    EPOCH_TIME,
                    WHOLE_EPOCH,
                    shown,
                    None,
                    half_digit(duration["v"]) * MS_PER[duration["u"].lower()],
                    text,
                    total_ms=total_ms,
                )
            )
    elif counter and not found_any:
        # after the counter, or the one time before it (minGPT: "iter_dt 143.64ms; iter 10: ...")
        before = list(_DURATION.finditer(text[: counter.start()]))
        duration = _DURATION.search(text[counter.end() :]) or (
            before[0] if len(before) == 1 else None
        )
        if duration and duration["u"].lower() == "ms":
            what = f"your timer ('{duration['u']}' in '{_short(text)}')"
            ms, res = float(duration["v"]), half_digit(duration["v"])
            out.append(_reading(what, TIMER, LOOP_ITERATION, f"{duration['v']} ms", ms, res, text))
    return out


# A figure named a median by the word just before it ("median 174.81 ms/step", "p50: 3.1 ms/step")
_MEDIAN = re.compile(r"\b(?:median|p50)\W*$", re.I)


def _which(text: str, m, form: re.Pattern) -> str:
    """Where a line prints several figures of one form ("median 174.81 ms/step ..., mean 174.29
    ms/step"), each is a clock of its own, named by the word before it."""
    if sum(1 for _ in form.finditer(text)) < 2:
        return ""
    words = re.findall(r"[A-Za-z_]+", text[: m.start()])
    return f" '{words[-1]}'" if words else f" #{m.start()}"


def _reading(what, form, scope, shown, ms, res, text, total_ms=None, note="") -> Reading:
    return Reading(what, form, scope, shown, ms, None, 0, 0, res, text, total_ms, note)


def _short(text: str) -> str:
    """The line with its numbers as N: one name for every line of a timer."""
    return re.sub(r"\d+(?:\.\d+)?(?:e-?\d+)?", "N", text)[:48]


def arrivals(segments, used: set[int]) -> list[Reading]:
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
