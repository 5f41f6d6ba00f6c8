"""The XPlane reader: stats inline and interned, logdir layout, bad input."""

import os
from pathlib import Path

import numpy as np
import pytest
from conftest import GPU_TRACE
from xspace_builder import PlaneBuilder, new_space, write

from scaldiag.errors import TraceError
from scaldiag.readers.xplane import read as xplane_read
from scaldiag.readers.xplane.read import find_run, read_trace

DETAILS = "kind_src:pageable kind_dst:device size:4096 dest:0 async:0"


def test_inline_and_interned_stats_read_the_same(tmp_path):
    space = new_space()
    gpu = PlaneBuilder(space, "/device:GPU:0")
    line = gpu.line("Stream #1(MemcpyH2D)", timestamp_ns=1000)
    gpu.event(line, "MemcpyH2D", 1000, 10, memcpy_details=DETAILS)
    gpu.event(line, "MemcpyH2D", 2000, 10, interned={"memcpy_details": DETAILS})
    trace = read_trace([write(space, tmp_path / "t.xplane.pb")])
    (line,) = trace.device_planes[0].lines
    assert list(line.stat("memcpy_details")) == [DETAILS, DETAILS]
    assert line.start_ns.tolist() == [1000, 2000]
    assert line.end_ns.tolist() == [1010, 2010]


def test_metadata_level_stats_reach_events_without_their_own(tmp_path):
    space = new_space()
    gpu = PlaneBuilder(space, "/device:GPU:0")
    line = gpu.line("Stream #7(Compute)")
    gpu.event(line, "loop_transpose_fusion", 0, 5)
    meta = gpu.plane.event_metadata[1]
    meta.stats.add(metadata_id=gpu.stat_id("hlo_op"), str_value="transpose.1")
    trace = read_trace([write(space, tmp_path / "t.xplane.pb")])
    assert list(trace.device_planes[0].lines[0].stat("hlo_op")) == ["transpose.1"]


def test_logdir_latest_run_and_named_run(tmp_path):
    for run in ("2026_01_01_00_00_00", "2026_01_02_00_00_00"):
        d = tmp_path / "plugins" / "profile" / run
        d.mkdir(parents=True)
        (d / "host.xplane.pb").write_bytes(GPU_TRACE.read_bytes())
    assert find_run(tmp_path)[0] == "2026_01_02_00_00_00"
    assert find_run(tmp_path, "2026_01_01_00_00_00")[0] == "2026_01_01_00_00_00"
    with pytest.raises(TraceError, match="no run named"):
        find_run(tmp_path, "nope")


def test_two_hosts_are_merged_with_host_prefixes(tmp_path):
    d = tmp_path / "plugins" / "profile" / "run1"
    d.mkdir(parents=True)
    for host in ("a", "b"):
        (d / f"{host}.xplane.pb").write_bytes(GPU_TRACE.read_bytes())
    trace = read_trace(find_run(tmp_path)[1])
    names = [p.label for p in trace.device_planes]
    assert names == ["vm:/device:GPU:0", "vm:/device:GPU:1"] * 2  # the fixture's hostname is "vm"
    assert trace.event_count == 2 * read_trace([GPU_TRACE]).event_count


@pytest.mark.parametrize(
    "content,message",
    [
        (b"", "is empty"),
        (b"this is not a protobuf at all \xff\xfe" * 50, "not"),
        (GPU_TRACE.read_bytes()[: len(GPU_TRACE.read_bytes()) // 2], "truncated"),
    ],
)
def test_bad_files_raise_trace_errors(tmp_path, content, message):
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message):
        read_trace([path])


def test_missing_path_and_empty_logdir(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        find_run(tmp_path / "missing")
    with pytest.raises(TraceError, match="no .xplane.pb files"):
        find_run(tmp_path)


def test_event_columns_are_numpy(tmp_path):
    line = read_trace([GPU_TRACE]).device_planes[0].lines[0]
    assert line.start_ns.dtype == np.int64 and line.name_id.dtype == np.int32
    assert (line.end_ns >= line.start_ns).all()


@pytest.mark.parametrize("path", ["gpu", "mirrored_2cpu", "input_bound", "transposes"])
def test_every_event_and_wanted_stat_matches_the_protobuf_objects(path, raw_space):
    """The numpy wire decoder against plain protobuf reading, event by event."""
    from conftest import tf_cpu_trace
    from rawproto import events

    from scaldiag.trace import WANTED_STATS

    file = GPU_TRACE if path == "gpu" else tf_cpu_trace(path)
    space, trace = raw_space(file), read_trace([file])
    checked = 0
    for plane in trace.planes:
        expected = events(space, plane.name)
        columns = [{k: line.stat(k) for k in line.stats} for line in plane.lines]
        got = [
            (
                line.name,
                plane.event_names[line.name_id[i]],
                int(line.start_ns[i]),
                int(line.end_ns[i]),
                {k: c[i] for k, c in stats.items() if c[i] is not None},
            )
            for line, stats in zip(plane.lines, columns)
            for i in range(len(line))
        ]
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g[:2] == (e["line"], e["name"])
            assert g[2] == int(e["start_ns"]) and abs(g[3] - e["end_ns"]) <= 1
            assert g[4] == {k: v for k, v in e["stats"].items() if k in WANTED_STATS}
        checked += len(got)
    assert checked > 1000


def test_every_stat_value_kind(tmp_path):
    space = new_space()
    host = PlaneBuilder(space, "/host:CPU")
    line = host.line("python", timestamp_ns=5)
    event = host.event(
        line, "train", 10, 3, step_num=-7, hlo_op="x" * 300
    )  # negative varint, 2-byte length
    event.stats.add(metadata_id=host.stat_id("group_id"), uint64_value=2**63 + 5)
    event.stats.add(metadata_id=host.stat_id("_r"), double_value=1.5)
    event.stats.add(metadata_id=host.stat_id("tf_op"), bytes_value=b"a:B")
    host.event(line, "other", 20, 0, interned={"hlo_category": "data formatting"})
    (line,) = read_trace([write(space, tmp_path / "t.xplane.pb")]).host_planes[0].lines
    assert {k: list(line.stat(k)) for k in line.stats} == {
        "step_num": [-7, None],
        "hlo_op": ["x" * 300, None],
        "group_id": [2**63 + 5, None],
        "_r": [1.5, None],
        "tf_op": ["a:B", None],
        "hlo_category": [None, "data formatting"],
    }


def test_the_reference_reader_is_tensorflows_own_proto_when_installed():
    """With TensorFlow installed (as `make test` installs it) the tests' reference is independent of
    scaldiag."""
    pytest.importorskip("tensorflow")
    from rawproto import xspace_class

    assert "scaldiag" not in xspace_class().__module__
    assert xspace_class().DESCRIPTOR.full_name == "tensorflow.profiler.XSpace"


def test_zero_filled_file_is_rejected_at_its_first_bytes(tmp_path):
    path = tmp_path / "zeros.xplane.pb"
    with open(path, "wb") as f:
        f.truncate(64 << 20)  # sparse: 64 MB of zeros
    with pytest.raises(TraceError, match="not a readable XPlane trace"):
        read_trace([path])


def _columns(trace):
    return [
        (
            p.name,
            p.event_names,
            [
                (
                    ln.name,
                    ln.start_ns.tolist(),
                    ln.end_ns.tolist(),
                    ln.name_id.tolist(),
                    {k: ln.stat(k).tolist() for k in ln.stats},
                )
                for ln in p.lines
            ],
        )
        for p in trace.planes
    ]


def test_vectorised_field_runs_read_what_the_python_loop_reads(monkeypatch):
    from scaldiag.readers.xplane import wire

    monkeypatch.setattr(wire, "_VECTOR_AFTER", 10**9)
    by_loop = _columns(read_trace([GPU_TRACE]))
    monkeypatch.setattr(wire, "_VECTOR_AFTER", 0)
    for window in (64, 997, 1 << 21):  # many windows, fields across window edges
        monkeypatch.setattr(wire, "_WINDOW_BYTES", window)
        assert _columns(read_trace([GPU_TRACE])) == by_loop


def test_varints_round_trip_every_length():
    from google.protobuf.internal.encoder import _VarintBytes

    from scaldiag.readers.xplane import wire

    rng = np.random.default_rng(1)
    values = [0, 1, 127, 128, 2**56 - 1, 2**56, 2**63, 2**64 - 1]
    values += [
        int(v) >> int(k) for v, k in zip(rng.integers(0, 2**63, 2000), rng.integers(0, 63, 2000))
    ]
    data, pos = b"", []
    for v in values:
        pos.append(len(data))
        data += _VarintBytes(v)
    buf, pos = np.frombuffer(data, np.uint8), np.array(pos)  # the last ones end at the buffer's end
    decoded, length = wire.varints(buf, pos)
    assert decoded.tolist() == values
    assert length.tolist() == [len(_VarintBytes(v)) for v in values]
    bounded, bounded_length, ok = wire._varints_bounded(buf, pos, len(buf) - 1)
    assert bounded[:-1].tolist() == values[:-1] and ok[:-1].all() and not ok[-1]


def test_a_helper_process_decodes_what_this_one_does(monkeypatch):
    from scaldiag.readers.xplane import read, wire

    monkeypatch.setattr(
        wire, "_WINDOW_BYTES", 4096
    )  # many batches, half of them sent to the helper
    alone = _columns(read_trace([GPU_TRACE]))
    monkeypatch.setattr(read, "_PARALLEL_MIN_BYTES", 0)
    monkeypatch.setenv("SCALDIAG_DECODE_WORKERS", "1")
    assert _columns(read_trace([GPU_TRACE])) == alone


def _every_fixture_trace() -> list[Path]:
    return sorted(Path(__file__).parent.parent.joinpath("fixtures").rglob("*.xplane.pb"))


def _read_both(monkeypatch, files):
    """(columns or the error) with the C decoder, and with the numpy one."""

    def read(native: str):
        monkeypatch.setenv("SCALDIAG_NATIVE", native)
        try:
            return _columns(read_trace(files))
        except TraceError as exc:
            return ("TraceError", str(exc).split(":")[0])

    return read("1"), read("0")


needs_c = pytest.mark.skipif(
    xplane_read._wire_c is None, reason="the C decoder was not built (no compiler)"
)


@needs_c
def test_the_c_decoder_reads_every_fixture_as_the_numpy_one(monkeypatch):
    files = _every_fixture_trace()
    assert len(files) >= 5
    for file in files:
        native, numpy_only = _read_both(monkeypatch, [file])
        assert native == numpy_only, file


@needs_c
def test_the_c_decoder_batches_a_line_as_one(monkeypatch):
    """Batch edges (a line decoded a few events per call) and columns grown as they fill change
    nothing."""
    whole, _ = _read_both(monkeypatch, [GPU_TRACE])
    monkeypatch.setattr(xplane_read, "_NATIVE_BATCH", 7)
    assert _read_both(monkeypatch, [GPU_TRACE])[0] == whole
    monkeypatch.setattr(
        xplane_read, "_BYTES_PER_EVENT", 1 << 20
    )  # columns sized for one event: grown many times
    assert _read_both(monkeypatch, [GPU_TRACE])[0] == whole


@needs_c
@pytest.mark.parametrize("cut", [0.3, 0.5, 0.97])
def test_the_c_decoder_rejects_what_the_numpy_one_rejects(monkeypatch, tmp_path, cut):
    data = GPU_TRACE.read_bytes()
    path = tmp_path / "cut.xplane.pb"
    path.write_bytes(data[: int(len(data) * cut)])
    native, numpy_only = _read_both(monkeypatch, [path])
    assert native[0] == "TraceError" and native == numpy_only


@pytest.fixture
def decoding_threads(monkeypatch):
    """Every file's lines decoded by threads (as from _THREADS_MIN_BYTES on), a few events a batch:
    many batches a line, decoded at once; the events of each line they decoded, recorded (-1: the
    line was left to one pass)."""
    monkeypatch.setattr(xplane_read, "_THREADS_MIN_BYTES", 0)
    monkeypatch.setattr(xplane_read, "_THREAD_BATCH", 5)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    batches: list[int] = []
    at_once = xplane_read._decoded_by_threads

    def counted(native, data, start, end, *rest):
        found = at_once(native, data, start, end, *rest)
        batches.append(-1 if found is None else len(found[0]))
        return found

    monkeypatch.setattr(xplane_read, "_decoded_by_threads", counted)
    return batches


@needs_c
def test_threads_decode_every_fixture_as_one_pass(monkeypatch, decoding_threads):
    """Lines cut into batches of 5 events, decoded by a pool of threads into their rows: the
    columns and stats of the single pass, on every fixture."""
    for file in _every_fixture_trace():
        with monkeypatch.context() as m:
            m.setattr(xplane_read, "_THREADS_MIN_BYTES", 1 << 62)
            single = _read_both(monkeypatch, [file])[0]
        assert _read_both(monkeypatch, [file])[0] == single, file
    assert any(n > 5 for n in decoding_threads), "lines of several batches were decoded by threads"


@needs_c
@pytest.mark.parametrize("cut", [0.3, 0.5, 0.97])
def test_threads_reject_what_the_numpy_decoder_rejects(
    monkeypatch, tmp_path, cut, decoding_threads
):
    data = GPU_TRACE.read_bytes()
    path = tmp_path / "cut.xplane.pb"
    path.write_bytes(data[: int(len(data) * cut)])
    native, numpy_only = _read_both(monkeypatch, [path])
    assert native[0] == "TraceError" and native == numpy_only


@needs_c
def test_threads_read_damaged_events_as_one_pass(monkeypatch, tmp_path, decoding_threads):
    """Bytes flipped inside events (seeded): the threads' columns, or error, are the single
    pass's."""
    import random

    data = bytearray(GPU_TRACE.read_bytes())
    rng = random.Random(50)
    for case in range(12):
        damaged = bytearray(data)
        for _ in range(3):
            damaged[rng.randrange(len(damaged) // 4, len(damaged))] = rng.randrange(256)
        path = tmp_path / f"damaged{case}.xplane.pb"
        path.write_bytes(bytes(damaged))
        with monkeypatch.context() as m:
            m.setattr(xplane_read, "_THREADS_MIN_BYTES", 1 << 62)
            single = _read_both(monkeypatch, [path])[0]
        assert _read_both(monkeypatch, [path])[0] == single, case


def test_a_stat_on_few_events_of_a_long_line_is_kept_sparse_and_reads_the_same(tmp_path):
    """Step markers on a host thread of many events: rows and values, not a column of Nones; where
    an event has the stat twice, the later value wins, as in a dense column."""
    from scaldiag.trace import SparseStat

    space = new_space()
    host = PlaneBuilder(space, "/host:CPU")
    line = host.line("python3")
    n = xplane_read.SPARSE_MIN_EVENTS * 2
    for i in range(n):
        event = host.event(
            line, "op", i * 10, 5, **({"step_num": i // 500} if i % 500 == 0 else {})
        )
        if i == 1000:
            event.stats.add(
                metadata_id=host.stat_id("step_num"), int64_value=99
            )  # a second value: it wins
    path = write(space, tmp_path / "t.xplane.pb")
    (sparse,) = read_trace([path]).host_planes[0].lines
    assert isinstance(sparse.stats["step_num"], SparseStat)
    rows, values = sparse.stat_rows("step_num")
    assert rows.tolist() == list(range(0, n, 500))
    assert values.tolist() == [k if k != 2 else 99 for k in range(len(rows))]
    dense_reader = xplane_read.SPARSE_MIN_EVENTS
    try:
        xplane_read.SPARSE_MIN_EVENTS = 10**18
        (dense,) = read_trace([path]).host_planes[0].lines
    finally:
        xplane_read.SPARSE_MIN_EVENTS = dense_reader
    assert isinstance(dense.stats["step_num"], np.ndarray)
    assert sparse.stat("step_num").tolist() == dense.stat("step_num").tolist()
    assert [a.tolist() for a in dense.stat_rows("step_num")] == [rows.tolist(), values.tolist()]


def test_a_large_trace_read_without_the_compiled_decoder_says_so_once(monkeypatch, capsys):
    from scaldiag import native

    monkeypatch.setattr(xplane_read, "_wire_c", None)  # as where setup.py found no compiler
    monkeypatch.setattr(xplane_read, "_NOTICE_MIN_BYTES", 0)
    monkeypatch.setattr(native, "_told", set())
    read_trace([GPU_TRACE])
    read_trace([GPU_TRACE])
    assert capsys.readouterr().err.count("runs without its compiled part") == 1
    monkeypatch.setattr(native, "_told", set())
    monkeypatch.setenv(native.NATIVE_ENV, "0")  # numpy asked for: nothing to say
    read_trace([GPU_TRACE])
    assert capsys.readouterr().err == ""
