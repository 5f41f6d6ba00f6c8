"""The reports that are lines, not panels: ``check`` (one line per limit, then the verdict: read by
CI logs and ``grep``) and ``calibrate`` (the measured curve as a table of columns). Each line is
shown inert (sanitize.line): a run's path or a GPU's name may hold anything."""

from __future__ import annotations

from scaldiag.analyze.interconnect import CalibrationReport, size_words
from scaldiag.rules.check import CheckReport
from scaldiag.sanitize import line


def check_lines(report: CheckReport) -> list[str]:
    failed = report.failed
    lines = [
        f"{'ok  ' if r.passed else 'FAIL'} {r.check}: {line(r.reason)}" for r in report.results
    ]
    if failed:
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        lines.append(line(f"check failed: {failed[0].reason}{more}"))
    else:
        lines.append(f"check passed ({len(report.results)} checks)")
    return lines


def calibration_lines(report: CalibrationReport) -> list[str]:
    doc = report.doc
    gpu_name = doc["machine"].get("gpu_name")
    where = (
        "CPU processes (gloo)"
        if doc["device"] == "cpu"
        else f"{doc['ranks']} x {gpu_name or 'GPU'}"
    )
    lines = [line(f"scaldiag calibrate: {doc['framework']} all-reduce on {where}")]
    if doc["allreduce"]:
        lines.append(
            f"{'size':>10}  {'median us':>11}  {'min-max us':>19}  {'algbw GB/s':>10} "
            f" {'busbw GB/s':>10}"
        )
        lines += [_curve_row(r) for r in doc["allreduce"]]
    lines += [
        _local_line(key, what)
        for key, what in (doc["local"] or {}).items()
        if isinstance(what, dict)
    ]
    lines += [line(f"note: {note}") for note in doc["notes"]]
    used = doc["device"] != "cpu" and doc["allreduce"]
    lines.append(
        line(
            f"saved: {report.path}"
            + (f" (reports of runs on {gpu_name} use this curve)" if used else "")
        )
    )
    return lines


def _curve_row(r: dict) -> str:
    return (
        f"{size_words(r['bytes']):>10}  {r['median_s'] * 1e6:11.1f}  "
        f"{r['min_s'] * 1e6:9.1f}-{r['max_s'] * 1e6:<9.1f}  "
        f"{r['algbw_bytes_per_s'] / 1e9:10.4g}  {r['busbw_bytes_per_s'] / 1e9:10.4g}"
    )


def _local_line(key: str, what: dict) -> str:
    rate = f", {what['bytes_per_s'] / 1e9:.0f} GB/s" if "bytes_per_s" in what else ""
    return line(
        f"{key}: {what['median_s'] * 1e6:.1f} us ({what['min_s'] * 1e6:.1f}-"
        f"{what['max_s'] * 1e6:.1f}){rate}: {what['what']}"
    )
