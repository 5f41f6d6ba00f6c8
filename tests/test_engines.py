"""scaldiag.engines: the same results in the same order from every engine, an item's error reaching
the
caller as it was raised, no worker process left behind, and clear errors for specs and missing
extras.

The functions mapped are real: each reads a Kineto fixture with scaldiag's reader. One Dask
LocalCluster serves the whole module (its start takes seconds).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from scaldiag import engines
from scaldiag.engines import LocalEngine, default_workers, open_engine, parse_spec, tasks
from scaldiag.errors import ScaldiagError, TraceError

ROOT = Path(__file__).resolve().parent.parent
RANK_FILES = sorted(str(p) for p in (ROOT / "fixtures" / "kineto").rglob("*.pt.trace.json*"))
SLOW = "slow"  # an item that takes longer than any test waits
SLOW_S = 120  # how long the SLOW item sleeps: a map that returns sooner did not wait for it


def events_of(path: str) -> tuple[int, int]:
    """(events in one rank's file, the pid that read it): what a per-rank reduction returns,
    small."""
    from scaldiag.readers.kineto import read_trace

    return read_trace([path]).event_count, os.getpid()


def events_or_sleep(item: str) -> int:
    """A file's events; the SLOW item sleeps (an item still running when another fails)."""
    if item == SLOW:
        time.sleep(SLOW_S)
    return events_of(item)[0]


def _events_here() -> list[int]:
    return [events_of(p)[0] for p in RANK_FILES]


def _workers_alive(before: set[int]) -> list[str]:
    """Descendants of this process that were not there before, save multiprocessing's resource
    tracker (one per process that used a pool: it exits with it, and holds no item)."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid in before or p.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "resource_tracker" not in cmd:
            found.append(f"{p.pid} {cmd[:100]}")
    return found


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture(scope="module")
def dask_engine():
    pytest.importorskip("distributed")
    with open_engine("dask:2") as engine:
        yield engine


@pytest.fixture
def truncated(tmp_path) -> str:
    """A rank file cut in the middle: scaldiag's reader raises TraceError on it."""
    whole = (ROOT / "fixtures" / "kineto" / "synthetic_gpu" / "rank0.pt.trace.json").read_bytes()
    path = tmp_path / "rank3.pt.trace.json"
    path.write_bytes(whole[: len(whole) // 2])
    return str(path)


def test_fixtures_found():
    assert len(RANK_FILES) >= 6, RANK_FILES


# --- the same results, in order
# --------------------------------------------------------------------


def test_local_one_runs_here():
    with open_engine("local:1") as engine:
        results = engine.map(events_of, RANK_FILES)
    assert (engine.name, engine.workers) == ("local", 1)
    assert [n for n, _ in results] == _events_here()
    assert {pid for _, pid in results} == {os.getpid()}  # no pool: peak memory is one item's


def test_local_two_uses_worker_processes_and_gives_the_same_results():
    before = _children()
    with open_engine("local:2") as engine:
        results = engine.map(events_of, RANK_FILES)
    assert (engine.name, engine.workers) == ("local", 2)
    assert [n for n, _ in results] == _events_here()
    pids = {pid for _, pid in results}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert not _workers_alive(before)


def test_dask_gives_the_same_results_in_order(dask_engine):
    results = dask_engine.map(events_of, RANK_FILES)
    assert (dask_engine.name, dask_engine.workers) == ("dask", 2)
    assert [n for n, _ in results] == _events_here()
    assert os.getpid() not in {pid for _, pid in results}
    # the same item twice is two tasks with two results (no result reused across items or calls)
    assert [n for n, _ in dask_engine.map(events_of, RANK_FILES[:1] * 2)] == _events_here()[:1] * 2


def test_empty_and_single_items():
    with open_engine("local:2") as engine:
        assert engine.map(events_of, []) == []
        ((n, pid),) = engine.map(events_of, RANK_FILES[:1])
    assert n == _events_here()[0] and pid == os.getpid()  # one item: no pool started for it


def test_items_go_one_a_task_unless_a_worker_has_many():
    assert tasks(list(range(10)), 2) == [[i] for i in range(10)]
    many = list(range(2 * engines.TASKS_PER_WORKER * 3 + 1))
    cut = tasks(many, 2)
    assert [i for task in cut for i in task] == many  # in order, each once
    assert len(cut) <= 2 * engines.TASKS_PER_WORKER and {len(t) for t in cut[:-1]} == {4}
    assert tasks([], 2) == []


def test_many_items_several_to_a_task_give_the_same_results_in_order(monkeypatch, dask_engine):
    monkeypatch.setattr(engines, "TASKS_PER_WORKER", 1)  # 2 workers: 2 tasks of several items
    items = RANK_FILES * 2
    want = [events_of(p)[0] for p in items]
    with open_engine("local:2") as engine:
        results = engine.map(events_of, items)
    assert [n for n, _ in results] == want and os.getpid() not in {pid for _, pid in results}
    assert [n for n, _ in dask_engine.map(events_of, items)] == want


def test_an_items_error_in_a_task_of_several_reaches_the_caller(monkeypatch, truncated):
    expected = _error_here(truncated)
    monkeypatch.setattr(engines, "TASKS_PER_WORKER", 1)
    before = _children()
    with open_engine("local:2") as engine, pytest.raises(TraceError) as raised:
        engine.map(events_of, [*RANK_FILES, truncated, *RANK_FILES])
    assert str(raised.value) == str(expected)
    assert not _workers_alive(before)


def test_default_spec_is_local_with_a_worker_per_core():
    for spec in (None, "local", " local "):
        with open_engine(spec) as engine:
            assert (engine.name, engine.workers) == ("local", default_workers())
    assert 1 <= default_workers() <= (os.cpu_count() or 1)


# --- errors
# ------------------------------------------------------------------------------------------


def _error_here(truncated: str) -> TraceError:
    with pytest.raises(TraceError) as here:
        events_of(truncated)
    return here.value


def test_an_items_error_reaches_the_caller_and_the_other_items_stop(truncated):
    expected = _error_here(truncated)
    before = _children()
    started = time.perf_counter()
    with open_engine("local:2") as engine, pytest.raises(TraceError) as raised:
        engine.map(events_or_sleep, [SLOW, truncated, *RANK_FILES])
    assert str(raised.value) == str(expected) and "rank3.pt.trace.json" in str(raised.value)
    # The SLOW item was stopped, not waited for: the map returned before it could have ended (a
    # causal bound, not a budget: SLOW_S is what the item takes, whatever the machine's load).
    assert time.perf_counter() - started < SLOW_S
    assert not _workers_alive(before)


def test_local_one_raises_the_items_error_itself(truncated):
    expected = _error_here(truncated)
    with open_engine("local:1") as engine, pytest.raises(TraceError) as raised:
        engine.map(events_of, [RANK_FILES[0], truncated])
    assert str(raised.value) == str(expected)


def test_dask_raises_the_items_error_with_its_type_and_message(dask_engine, truncated):
    expected = _error_here(truncated)
    with pytest.raises(TraceError) as raised:
        dask_engine.map(events_of, [*RANK_FILES[:2], truncated])
    assert str(raised.value) == str(expected)
    # the cluster still serves the next call
    assert [n for n, _ in dask_engine.map(events_of, RANK_FILES[:2])] == _events_here()[:2]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to oneself")
def test_keyboard_interrupt_stops_the_workers():
    # SIGINT raises KeyboardInterrupt as under a terminal, even in a suite started ignoring it
    # (conftest.TERMINAL_DEFAULTS)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupted_map_stops_the_workers()
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupted_map_stops_the_workers():
    before = _children()
    # What Ctrl-C does to the caller: SIGINT, here sent while both workers run the SLOW item.
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    started = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            LocalEngine(2).map(events_or_sleep, [SLOW, SLOW, *RANK_FILES])
    finally:
        timer.cancel()
    assert time.perf_counter() - started < SLOW_S  # the SLOW items were not waited for
    assert not _workers_alive(before)


# --- specs and extras
# --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    ["spark", "local:0", "local:two", "local:-1", "dask://", "http://host:1", "", "dask:2:3"],
)
def test_a_bad_spec_names_the_accepted_forms(spec):
    with pytest.raises(ScaldiagError) as raised:
        open_engine(spec)
    message = str(raised.value)
    assert "\n" not in message
    for form in ("local", "local:N", "dask", "dask://HOST:PORT", "tcp://HOST:PORT"):
        assert form in message


@pytest.mark.parametrize("spec", ["ray", "ray:2", "ray://head:10001"])
def test_ray_says_it_is_not_supported(spec):
    with pytest.raises(ScaldiagError, match="Ray is not supported"):
        open_engine(spec)


def test_specs_parse():
    assert parse_spec(None) == ("local", None, None)
    assert parse_spec("local:3") == ("local", 3, None)
    assert parse_spec("dask") == ("dask", None, None)
    assert parse_spec("dask:4") == ("dask", 4, None)
    assert parse_spec("dask://sched:8786") == ("dask", None, "tcp://sched:8786")
    assert parse_spec("tcp://10.0.0.1:8786") == ("dask", None, "tcp://10.0.0.1:8786")


@pytest.mark.parametrize("spec", ["dask", "dask:2", "tcp://127.0.0.1:1"])
def test_a_missing_extra_says_which_to_install(monkeypatch, spec):
    monkeypatch.setitem(
        sys.modules, "distributed", None
    )  # what an install without the extra has: no module
    with pytest.raises(ScaldiagError) as raised:
        open_engine(spec)
    message = str(raised.value)
    assert "pip install 'scaldiag[dask]'" in message and "\n" not in message


# --- imap: the results one at a time (the job merge gathers each rank's evidence as it comes)
# --------------------------------------------------------------------


def test_local_imap_gives_the_maps_results_in_order():
    want = _events_here()
    before = _children()
    with open_engine("local:1") as one, open_engine("local:2") as two:
        for engine in (one, two):
            got = engine.imap(events_of, RANK_FILES)
            assert not isinstance(got, list)
            assert [n for n, _ in got] == want
        assert list(two.imap(events_of, [])) == []
    assert not _workers_alive(before)


def test_dask_imap_gives_the_maps_results_in_order(dask_engine):
    got = dask_engine.imap(events_of, RANK_FILES)
    assert not isinstance(got, list)
    assert [n for n, _ in got] == _events_here()
    assert list(dask_engine.imap(events_of, [])) == []


def test_imap_raises_the_items_error_and_stops_the_workers(truncated):
    expected = _error_here(truncated)
    before = _children()
    with open_engine("local:2") as engine, pytest.raises(TraceError) as raised:
        list(engine.imap(events_of, [*RANK_FILES, truncated]))
    assert str(raised.value) == str(expected)
    assert not _workers_alive(before)
