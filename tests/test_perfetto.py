"""The Perfetto / Chrome trace export, checked strictly against the Trace Event Format.

No real trace reader runs here offline (perfetto's Python trace processor
downloads its binary at first use), so the check below is strict instead:
every event's phase, types and fields as the format document defines them,
slices properly nested on each thread (what Perfetto's JSON importer needs),
counters numeric, every pid and tid named by metadata, and the content
matched against the trace and the samples it came from.
"""

import json
import math
from collections import defaultdict

import numpy as np
import pytest
from conftest import FIXTURES

from scaldiag.analyze.timeline import clock_offset_ns, run_timeline
from scaldiag.commands.report import report_views
from scaldiag.errors import ScaldiagError
from scaldiag.pipeline import diagnose
from scaldiag.readers import read_trace
from scaldiag.record.reader import read_record
from scaldiag.render import perfetto

RUNS = FIXTURES / "runs"
PHASES = {"X", "C", "M", "B", "E", "i", "I"}
METADATA = {
    "process_name": "name",
    "thread_name": "name",
    "process_sort_index": "sort_index",
    "thread_sort_index": "sort_index",
}


def is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_trace_events(doc: dict) -> dict:
    """Raise AssertionError on anything outside the format; returns a summary."""
    assert set(doc) <= {"traceEvents", "displayTimeUnit", "otherData", "metadata"}
    assert doc.get("displayTimeUnit") in (None, "ms", "ns")
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    named_pids, named_tids = set(), set()
    used_pids, used_tids = set(), set()
    per_thread = defaultdict(list)
    counters = defaultdict(int)
    for e in events:
        assert isinstance(e, dict) and e.get("ph") in PHASES, e
        assert isinstance(e["pid"], int) and isinstance(e.get("tid", 0), int), e
        assert isinstance(e["name"], str) and e["name"], e
        if e["ph"] == "M":
            assert e["name"] in METADATA, e
            value = e["args"][METADATA[e["name"]]]
            assert isinstance(value, str if METADATA[e["name"]] == "name" else int), e
            (
                named_pids.add(e["pid"])
                if e["name"] == "process_name"
                else named_tids.add((e["pid"], e["tid"]))
                if e["name"] == "thread_name"
                else None
            )
            continue
        assert is_num(e["ts"]), e
        used_pids.add(e["pid"])
        if e["ph"] == "X":
            assert is_num(e["dur"]) and e["dur"] >= 0, e
            assert isinstance(e.get("cat", ""), str), e
            used_tids.add((e["pid"], e["tid"]))
            per_thread[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        elif e["ph"] == "C":
            assert (
                isinstance(e["args"], dict)
                and e["args"]
                and all(is_num(v) for v in e["args"].values())
            ), e
            counters[(e["pid"], e["name"])] += 1
        else:
            raise AssertionError(f"phase {e['ph']} is valid but not one we write: {e}")
    assert used_pids <= named_pids and used_tids <= named_tids
    for thread, spans in per_thread.items():  # slices on one thread nest: no partial overlap
        stack = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start + 1e-3:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-3, (
                f"slices overlap without nesting on {thread}"
            )
            stack.append(end)
    return {
        "slices": sum(len(s) for s in per_thread.values()),
        "counters": dict(counters),
        "threads": len(per_thread),
    }


@pytest.fixture(scope="module")
def gpu2():
    path = RUNS / "sweep" / "gpus2"
    report = diagnose(path)
    doc = perfetto.trace_document(report_views(path, report, "perfetto")["timelines"])
    return json.loads(json.dumps(doc, allow_nan=False)), doc


def test_the_export_passes_the_strict_check(gpu2):
    doc, _ = gpu2
    summary = check_trace_events(doc)
    assert summary["slices"] > 1000 and summary["threads"] > 10


def tracks(doc: dict) -> dict[tuple[str, str], list[dict]]:
    """(process name, thread name) -> its slices."""
    events = doc["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"
    }
    out = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            out[(processes[e["pid"]], threads[(e["pid"], e["tid"])])].append(e)
    return out


def test_every_trace_event_is_a_slice_and_the_categories_cover_the_steps(gpu2):
    doc, _ = gpu2
    _, trace = read_trace(RUNS / "sweep" / "gpus2" / "trace")
    by_track = tracks(doc)
    for plane in (
        trace.device_planes + trace.host_planes
    ):  # a plane's lines: threads (split where events overlap)
        assert (
            sum(
                len(v)
                for (p, t), v in by_track.items()
                if p == plane.label and t != "categories (exclusive)"
            )
            == plane.event_count
        )
    assert (
        sum(
            len(v)
            for (p, t), v in by_track.items()
            if t != "categories (exclusive)" and p != "steps"
        )
        == trace.event_count
    )
    steps = by_track[("steps", "steps (markers)")]
    assert len(steps) == 10  # the trace's own step markers
    for device in ("/device:GPU:0", "/device:GPU:1"):
        categories = by_track[(device, "categories (exclusive)")]
        assert {e["name"] for e in categories} >= {"compute", "collective", "h2d", "idle"}
        assert sum(e["dur"] for e in categories) == pytest.approx(
            sum(e["dur"] for e in steps), rel=1e-4
        )


def test_samples_are_counters_on_the_same_clock_as_the_trace(gpu2):
    doc, _ = gpu2
    events = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    record = read_record(RUNS / "sweep" / "gpus2")
    base = int(doc["otherData"]["base_ns"])
    util = [
        e
        for e in events
        if e["ph"] == "C" and e["name"] == "util (%)" and names[e["pid"]].startswith("GPU 0")
    ]
    expected = [r for r in record.gpu_samples if r["gpu"] == 0 and r["t_ns"] >= base]
    by_ts = {round((r["t_ns"] - base) / 1e3, 3): r["util_pct"] for r in expected}
    assert util and all(by_ts[e["ts"]] == e["args"]["value"] for e in util)
    # The traced steps the recorder saw line up with the trace's step markers on this clock.
    by_track = tracks(doc)
    recorded = [
        e for e in by_track[("steps", "recorded steps (steps.jsonl)")] if "(traced)" in e["name"]
    ]
    markers = by_track[("steps", "steps (markers)")]
    # (The fixture's synthetic step times do not follow the trace's step by step: the median lines
    # up.)
    assert len(recorded) == 5
    assert abs(float(np.median([r["ts"] - m["ts"] for r, m in zip(recorded, markers)]))) < 0.02
    assert "shifted" in doc["otherData"]["clock"]


def test_clock_offset_matches_steps_in_order():
    trace = np.array([100, 200, 300])
    recorded = np.array([1100, 1205, 1300, 1400])
    assert clock_offset_ns(trace, recorded) == 1000
    assert clock_offset_ns(np.array([]), recorded) is None


def test_a_sweep_exports_every_run_and_a_run_without_trace_its_samples():
    path = RUNS / "sweep"
    report = diagnose(path)
    doc = perfetto.trace_document(report_views(path, report, "perfetto")["timelines"])
    check_trace_events(doc)
    processes = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert any(p.startswith("1 devices") for p in processes) and any(
        p.startswith("2 devices") for p in processes
    )
    killed = RUNS / "killed"
    record = read_record(killed)
    timeline = run_timeline("killed", record.steps, record.gpu_samples, record.host_samples, None)
    summary = check_trace_events(perfetto.trace_document([timeline]))
    assert summary["slices"] == len(record.steps)


def test_a_trace_report_alone_cannot_be_exported():
    with pytest.raises(ScaldiagError):
        perfetto.write(object(), None, None)
