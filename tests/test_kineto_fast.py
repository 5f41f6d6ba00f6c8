"""The streaming Kineto reader (kineto_fast, kineto_stream, _kineto_scan.c) against the reference
(kineto_json).

The rule it is held to: for any bytes, either it gives the reference's result exactly
(planes, names in order, lines, times, stats, step markers, host and rank), or it
gives up and the reference reads the file. Checked on every Kineto fixture, on
hand-made odd events, at every way of cutting the bytes into pieces, and on
mutated real traces (seeded: the same cases every run).
"""

from __future__ import annotations

import gzip
import io
import json
import random
from pathlib import Path

import numpy as np
import pytest

from scaldiag.errors import TraceError
from scaldiag.readers import files
from scaldiag.readers.kineto import fast as kineto_fast
from scaldiag.readers.kineto import reference as kineto_json
from scaldiag.readers.kineto import stream as kineto_stream

_kineto_scan = pytest.importorskip("scaldiag.readers._kineto_scan")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted(
    p
    for d in ("fixtures/kineto", "fixtures/x2_devset")
    for p in (ROOT / d).rglob("*.pt.trace.json*")
)
SMALL = ROOT / "fixtures/kineto/synthetic_gpu/rank0.pt.trace.json"
REAL = ROOT / "fixtures/x2_devset/torch_ddp_sync_2gpu/rank0.pt.trace.json.gz"


def assert_same(a, b) -> None:
    assert (a.host_name, a.rank) == (b.host_name, b.rank)
    assert [p.name for p in a.planes] == [p.name for p in b.planes]
    for p, q in zip(a.planes, b.planes):
        assert p.event_names == q.event_names and p.stats == q.stats, p.name
        assert (p.step_marks is None) == (q.step_marks is None), p.name
        for field in ("start_ns", "end_ns", "step_num") if p.step_marks is not None else ():
            x, y = getattr(p.step_marks, field), getattr(q.step_marks, field)
            assert x.dtype == y.dtype and np.array_equal(x, y), (p.name, field)
        assert [line.name for line in p.lines] == [line.name for line in q.lines], p.name
        for line, other in zip(p.lines, q.lines):
            for field in ("start_ns", "end_ns", "name_id"):
                x, y = getattr(line, field), getattr(other, field)
                assert x.dtype == y.dtype and np.array_equal(x, y), (p.name, line.name, field)
            assert sorted(line.stats) == sorted(other.stats), (p.name, line.name)
            for key in line.stats:
                assert list(line.stats[key]) == list(other.stats[key]), (p.name, line.name, key)


def outcome(reader, file: Path):
    try:
        return reader(file)
    except TraceError as exc:
        return str(exc)


def check(file: Path) -> bool:
    """The fast reader's outcome is the reference's (or it gave up); whether it read the file
    itself."""
    fast, ref = outcome(kineto_fast.read_file, file), outcome(kineto_json.read_file, file)
    if fast is None:
        return False
    if isinstance(ref, str) or isinstance(fast, str):
        assert fast == ref
    else:
        assert_same(fast, ref)
    return True


@pytest.mark.parametrize("file", FIXTURES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_fixture_read_fast_as_the_reference_reads_it(file):
    assert check(file), f"the scanner gave up on a real trace: {file}"


def scanned(data: bytes, buffer_bytes: int):
    scanner = _kineto_scan.Scanner()
    kineto_stream._feed(io.BytesIO(data), scanner, buffer_bytes)
    return scanner.take_columns(), scanner.strings(), scanner.slow(), scanner.meta()


@pytest.mark.parametrize("buffer_bytes", [1, 2, 3, 7, 64, 1000, 4096])
def test_any_cut_into_pieces_scans_the_same(buffer_bytes):
    data = SMALL.read_bytes()[:60_000]
    data = (
        data[: data.rindex(b"},") + 1] + b"]}"
    )  # a whole document, shorter: every piece size stays quick
    whole = scanned(data, len(data) + 1)
    assert len(whole[0]["seq"]) > 8 * 50, "the sample holds fast events"
    assert scanned(data, buffer_bytes) == whole


def doc(events: list, **top) -> dict:
    return {
        "schemaVersion": 1,
        "traceEvents": events,
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        **top,
    }


def kernel(**fields) -> dict:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": "k",
        "pid": 0,
        "tid": 7,
        "ts": 10.5,
        "dur": 2,
        "args": {"device": 0, "stream": 7},
        **fields,
    }


def cpu(**fields) -> dict:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::mm",
        "pid": 11,
        "tid": 12,
        "ts": 9,
        "dur": 5,
        **fields,
    }


NUMBERS = [
    ("1.0005", "0.0015"),
    ("1.0015", "-3"),
    ("-0.0005", "0.0025"),
    ("123456789012345.123456789", "1"),
    ("1234567890123456.5", "1"),
    ("1e3", "1E-2"),
    ('"12.5"', '"x"'),
    ("10", "null"),
    ("7.25", "true"),
    ("0.1234567891", "2"),
]
ODD_TEXTS = [
    # numbers: exact decimals, half to even past nanoseconds, exponents and text (slow), huge
    # (reference refuses)
    '{"traceEvents": ['
    + ",".join(
        f'{{"ph": "X", "cat": "cpu_op", "name": "n{i}", "pid": 1, "tid": 1, "ts": {ts}, '
        f'"dur": {dur}}}'
        for i, (ts, dur) in enumerate(NUMBERS)
    )
    + "]}",
    '{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "cat":'
    ' "cpu_op"}], "x": 9' + "9" * 5000 + "}",
    '{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": NaN, "cat": "cpu_op"}]}',
    (
        '{"traceEvents": [{"ph": "X", "name": "a\\u0041\\"b\\/", "pid": 1, "tid": 1, "ts": 1,'
        ' "cat": "cpu_op"}, {"ph": "X", "name": "aA\\"b/", "pid": 1, "tid": 1, "ts": 2, "cat":'
        ' "CPU_OP"}]}'
    ),
    '{"traceEvents": [{"p\\u0068": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1}]}',
    '{"trace\\u0045vents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1}]}',
    '{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1}], "traceEvents": []}',
    (
        '{"traceEvents": [{"ph": "X", "ph": "i", "name": "a", "pid": 1, "tid": 1, "ts": 1},'
        ' {"ph": "i", "ph": "X", "name": "b", "name": "c", "pid": 1, "tid": 1, "ts": 1, "ts": 3}]}'
    ),
    '[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1}] x',
    '\ufeff{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1}]}',
    '{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "args": '
    + "[" * 300
    + "1"
    + "]" * 300
    + "}]}",
    '{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1}]',
]


def odd_docs() -> list[dict]:
    huge_base = {"baseTimeNanoseconds": 2**63 - 10}
    return [
        doc(
            [
                kernel(),
                kernel(tid="stream 7", args={"device": 0}),
                kernel(pid="3", args={}),
                kernel(pid="gpu"),
            ]
        ),
        doc(
            [
                kernel(args={"device": "1", "stream": 7.0}),
                kernel(args=[1]),
                kernel(args={"device": -1}),
            ]
        ),
        doc(
            [
                kernel(
                    cat="gpu_memcpy",
                    name="Memcpy HtoD (Pinned -> Device)",
                    args={"device": 0, "stream": 7, "bytes": 64},
                ),
                kernel(
                    cat="GPU_MEMCPY",
                    name="Memcpy DtoH (Device -> Pageable)",
                    args={"device": 0, "stream": 7},
                ),
                kernel(
                    cat="gpu_memcpy", name="Memcpy", args={"device": 0, "stream": 7, "bytes": "12"}
                ),
            ]
        ),
        doc(
            [
                cpu(name="ProfilerStep#3"),
                cpu(name="ProfilerStep#x"),
                cpu(pid="Traces", cat="Trace"),
                cpu(tid="12"),
                cpu(tid="main thread"),
                cpu(name=5),
                cpu(cat=None),
                cpu(pid=1.0),
            ]
        ),
        doc(
            [
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": 11,
                    "tid": 12,
                    "args": {"name": " main "},
                },
                cpu(),
                {
                    "ph": "B",
                    "name": "span",
                    "cat": "user_annotation",
                    "pid": 11,
                    "tid": 12,
                    "ts": 1,
                },
                cpu(ts=2, dur=1),
                {"ph": "E", "pid": 11, "tid": 12, "ts": 8},
                {"ph": "E", "pid": 11, "tid": 12, "ts": 9},
            ]
        ),
        doc(
            [
                kernel(cat="gpu_user_annotation", name="ProfilerStep#1", ts=1, dur=9),
                kernel(cat="gpu_user_annotation", name="ProfilerStep#2", pid=1, args={}),
                kernel(ts=3),
            ]
        ),
        doc([kernel(ts=10**15 - 1), cpu(ts=10**15 - 1, dur=10**15 - 1), cpu(ts=1)], **huge_base),
        doc(
            [
                cpu(ts=-5, dur=-7),
                cpu(ts=10**30),
                cpu(name="", ts=0),
                kernel(pid=0, args={"stream": 2**62}),
            ]
        ),
        doc([kernel(args={"device": d, "stream": 1}) for d in range(300)]),
        doc(
            [cpu()],
            distributedInfo={"rank": 3, "world_size": 8, "backend": "nccl"},
            host_name="node-1",
            deviceProperties=[{"id": 0, "name": "NVIDIA H200", "numSms": 132}],
        ),
        doc(
            [
                {"ph": "i", "pid": "", "tid": "", "ts": 1},
                {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 1},
                cpu(),
                5,
                None,
            ]
        ),
        doc([]),
    ]


@pytest.mark.parametrize("case", range(len(ODD_TEXTS) + len(odd_docs())))
def test_odd_input_read_as_the_reference_reads_it(case, tmp_path):
    file = tmp_path / "rank0.pt.trace.json"
    if case < len(ODD_TEXTS):
        file.write_bytes(ODD_TEXTS[case].encode("utf-8"))
    else:
        file.write_text(json.dumps(odd_docs()[case - len(ODD_TEXTS)]))
    check(file)


def test_invalid_utf8_and_control_characters_are_the_reference_s_errors(tmp_path):
    for i, data in enumerate(
        [
            b'{"traceEvents": [{"ph": "X", "name": "\xff", "pid": 1, "tid": 1, "ts": 1}]}',
            b'{"traceEvents": [{"ph": "X", "name": "a\nb", "pid": 1, "tid": 1, "ts": 1}]}',
        ]
    ):
        file = tmp_path / f"t{i}.json"
        file.write_bytes(data)
        assert kineto_fast.read_file(file) is None
        with pytest.raises(TraceError, match="not UTF-8|not valid JSON"):
            kineto_json.read_file(file)
    # A surrogate written in UTF-8: json.loads takes it (it decodes with surrogatepass); the scanner
    # gives up.
    file = tmp_path / "surrogate.json"
    file.write_bytes(
        b'{"traceEvents": [{"ph": "X", "name": "\xed\xa0\x80", "pid": 1, "tid": 1, "ts": 1}]}'
    )
    assert kineto_fast.read_file(file) is None
    assert kineto_json.read_file(file).planes[-1].event_names == ["\ud800"]


def test_gzip_streamed_under_the_caps(tmp_path, monkeypatch):
    plain = SMALL.read_bytes()
    file = tmp_path / "rank0.pt.trace.json.gz"
    file.write_bytes(
        gzip.compress(plain[: len(plain) // 2])
        + gzip.compress(plain[len(plain) // 2 :])
        + b"\0" * 10
    )
    assert check(file)  # two members and zero padding, as files.gunzip takes them
    bomb = tmp_path / "bomb.pt.trace.json.gz"
    bomb.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * (4 << 20) + b"]}", 9))
    monkeypatch.setattr(files, "GZIP_SLACK_BYTES", 1024)
    with pytest.raises(TraceError, match="its gzip expands to more than"):
        kineto_fast.read_file(bomb)
    for damaged, said in (
        (file.read_bytes()[:-30], "ends before its last member does"),
        (file.read_bytes() + b"junk", "bytes after its end that are not gzip"),
    ):
        bad = tmp_path / "bad.pt.trace.json.gz"
        bad.write_bytes(damaged)
        # one gunzip (files.gunzip_pieces) under both readers: the same words from each
        for reader in (kineto_fast, kineto_json):
            with pytest.raises(TraceError, match=said):
                reader.read_file(bad)


WEIRD = [
    0,
    -1,
    2**63,
    -(2**63) - 1,
    10**16,
    1.5,
    0.1,
    -0.0,
    1e308,
    "abc",
    "",
    "12",
    "-3",
    "1e5",
    "\u00b2",
    "x" * 300,
    None,
    True,
    False,
    [],
    {},
    [1, 2],
    {"a": 1},
    [[[[]]]],
    "ProfilerStep#7",
    "kernel",
    "gpu_memcpy",
    "X",
    "B",
    "E",
    "M",
    "f",
]
FIELDS = [
    "ts",
    "dur",
    "pid",
    "tid",
    "ph",
    "name",
    "cat",
    "args",
    "args.device",
    "args.stream",
    "args.bytes",
]


def mutated(events: list, rng: random.Random) -> list:
    events = [dict(e) for e in events]
    for _ in range(rng.randint(1, 6)):
        e = rng.choice(events)
        field = rng.choice(FIELDS)
        value = rng.choice(WEIRD)
        if field.startswith("args."):
            e["args"] = dict(e["args"]) if isinstance(e.get("args"), dict) else {}
            e["args"][field[5:]] = value
        elif rng.random() < 0.1:
            e.pop(field, None)
        else:
            e[field] = value
    return events


def test_mutated_real_traces_read_as_the_reference_reads_them(tmp_path):
    source = json.loads(gzip.decompress(REAL.read_bytes()))
    events = source.pop("traceEvents")
    rng = random.Random(25)
    fast = 0
    for case in range(40):
        sample = events[:: rng.randint(3, 12)]
        file = tmp_path / f"case{case}.pt.trace.json"
        file.write_text(json.dumps({**source, "traceEvents": mutated(sample, rng)}))
        fast += check(file)
    assert fast >= 30, "mutated fields make events slow, not whole files given up"


# ---- a large file in two parts, the second scanned by another thread (stream.py) ----


@pytest.fixture
def in_two_parts(monkeypatch):
    """Every plain file read in two parts (as from SPLIT_MIN_BYTES on, where two cores are); the
    parts scan() returned, per call, recorded."""
    monkeypatch.setattr(kineto_stream, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(kineto_stream, "_cores", lambda: 2)
    calls: list[int] = []
    scan = kineto_stream.scan

    def counted(file, new_scanner):
        parts = scan(file, new_scanner)
        calls.append(len(parts))
        return parts

    monkeypatch.setattr(kineto_fast, "scan", counted)
    return calls


def plain_copy(file: Path, tmp_path: Path) -> Path:
    out = tmp_path / file.name.removesuffix(".gz")
    data = file.read_bytes()
    out.write_bytes(gzip.decompress(data) if file.name.endswith(".gz") else data)
    return out


@pytest.mark.parametrize("file", FIXTURES, ids=lambda p: str(p.relative_to(ROOT)))
def test_two_parts_read_as_one_stream_reads(file, tmp_path, in_two_parts):
    plain = plain_copy(file, tmp_path)
    assert check(plain), f"the scanner gave up on a real trace in two parts: {file}"
    assert in_two_parts == [2], "the file was read in two parts"


def test_odd_and_mutated_input_in_two_parts_read_as_the_reference_reads_it(tmp_path, in_two_parts):
    """Wherever the cut falls (odd events, mutated fields, a bare array), the result is the
    reference's: two parts where the cut was between events, one otherwise."""
    for case, text in enumerate(ODD_TEXTS + [json.dumps(d) for d in odd_docs()]):
        file = tmp_path / f"odd{case}.pt.trace.json"
        file.write_bytes(text.encode("utf-8"))
        check(file)
    source = json.loads(gzip.decompress(REAL.read_bytes()))
    events = source.pop("traceEvents")
    rng = random.Random(37)
    for case in range(20):
        sample = mutated(events[:: rng.randint(3, 12)], rng)
        file = tmp_path / f"case{case}.pt.trace.json"
        file.write_text(json.dumps(sample if case % 4 == 0 else {**source, "traceEvents": sample}))
        check(file)
    assert 2 in in_two_parts and 1 in in_two_parts


def middle_cut_doc(middle: dict) -> tuple[str, int, int]:
    """A document whose middle byte is inside ``middle`` (a long event with "}, {" in it), and where
    that event starts and ends."""
    side = [cpu(ts=1000 + i) for i in range(200)]  # as many bytes before it as after it
    text = json.dumps(doc(side + [middle] + side))
    at = text.index('"cat": "odd"') - 1
    end = text.index('"last": 1}', at) + len('"last": 1}')
    assert at < len(text) // 2 < end
    return text, at, end


@pytest.mark.parametrize(
    "middle",
    [
        cpu(cat="odd", name="a}, {b" * 500, last=1),  # the cut inside a string
        cpu(cat="odd", args={"nested": [{}, {"a": 1}] * 300}, last=1),  # inside an array in args
    ],
    ids=["string", "nested"],
)
def test_a_cut_not_between_events_reads_one_part(middle, tmp_path, in_two_parts, monkeypatch):
    cuts = []
    boundary = kineto_stream._event_boundary
    monkeypatch.setattr(
        kineto_stream,
        "_event_boundary",
        lambda fd, near: cuts.append(boundary(fd, near)) or cuts[-1],
    )
    file = tmp_path / "rank0.pt.trace.json"
    text, at, end = middle_cut_doc(middle)
    file.write_text(text)
    assert check(file)
    assert at < cuts[0] < end, "the cut fell inside the odd event"
    assert in_two_parts == [1]


def test_the_second_part_s_error_is_the_file_s(tmp_path, in_two_parts):
    """Damage after the cut: given up (the reference then says why), or the control byte's
    TraceError, as one stream gives."""
    text = json.dumps(doc([cpu(ts=i) for i in range(400)]))
    at = text.index("{", len(text) * 3 // 4)  # an event's first byte
    damaged = tmp_path / "rank0.pt.trace.json"
    damaged.write_text(text[:at] + "!" + text[at:])
    assert kineto_fast.read_file(damaged) is None
    assert in_two_parts == []  # gave up inside scan()
    nul = tmp_path / "nul.pt.trace.json"
    at = text.index(", {", at)  # a comma between events: where a unit starts
    nul.write_bytes(text[:at].encode() + b"\0" + text[at + 1 :].encode())
    with pytest.raises(TraceError, match=rf"not JSON text \(byte {at:,} is 0x00\)"):
        kineto_fast.read_file(nul)


def test_a_second_part_that_would_grow_without_bound_is_dropped(
    tmp_path, in_two_parts, monkeypatch
):  # noqa: E501
    """A cut not between events can make the second part's scanner see one long unit (of a whole
    part, where the cut fell in a huge event): its buffer stops at SECOND_MAX_BUFFER_BYTES and the
    first part's scanner reads on."""
    monkeypatch.setattr(kineto_stream, "PIECE_BYTES", 64)
    monkeypatch.setattr(kineto_stream, "SECOND_MAX_BUFFER_BYTES", 256)
    file = tmp_path / "rank0.pt.trace.json"
    # The cut: the comma after "pad"'s object; from there the second part's scanner sees a long
    # object (in a first part's unit, as valid JSON).
    nested = [{"pad": "y" * 8000}, {"a": [0] * 2000}]
    file.write_text(middle_cut_doc(cpu(cat="odd", args={"nested": nested}, last=1))[0])
    assert check(file)
    assert in_two_parts == [1]


# ---- a file in N parts at given cuts: the single scan's Trace, wherever the cuts fall ----


def read_cut(file: Path, monkeypatch, cuts: list[int] | None):
    """The fast reader's result with the file cut at ``cuts`` (offsets, rising; None: one part, the
    single scan), and how many parts it kept."""
    kept: list[int] = []
    scan = kineto_stream.scan

    def counted(f, new_scanner):
        parts = scan(f, new_scanner)
        kept.append(len(parts))
        return parts

    with monkeypatch.context() as m:
        m.setattr(kineto_fast, "scan", counted)
        m.setattr(kineto_stream, "_cores", lambda: 1 if cuts is None else len(cuts) + 1)
        m.setattr(kineto_stream, "SPLIT_MIN_BYTES", 0)
        if cuts is not None:
            m.setattr(kineto_stream, "_cuts", lambda fd, size, parts: [0, *cuts, size])
        return outcome(kineto_fast.read_file, file), kept


def same_as_single(file: Path, monkeypatch, cuts: list[int], single=None) -> int:
    """The file cut at ``cuts`` reads as the single scan reads it (equal Traces, or the same
    error; ``single``: that scan's outcome where known); the parts kept."""
    if single is None:
        single, one = read_cut(file, monkeypatch, None)
        assert one in ([1], [])
    split, kept = read_cut(file, monkeypatch, cuts)
    if single is None or isinstance(single, str):
        assert split == single, cuts
    else:
        assert split is not None, f"gave up where the single scan read it: cuts {cuts}"
        assert_same(split, single)
    return kept[0] if kept else 0


@pytest.mark.parametrize("parts", [2, 3, 5])
@pytest.mark.parametrize(
    "file", FIXTURES[:: max(1, len(FIXTURES) // 4)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_real_traces_in_n_parts_read_as_the_single_scan(file, parts, tmp_path, monkeypatch):
    """The cuts the reader finds itself (an event boundary near each share), N parts: every part
    kept, the Trace equal to the single scan's."""
    plain = plain_copy(file, tmp_path)
    with monkeypatch.context() as m:
        m.setattr(kineto_stream, "SPLIT_MIN_BYTES", 0)
        m.setattr(kineto_stream, "_cores", lambda: parts)
        found = kineto_stream._cuts
        cuts = []
        m.setattr(
            kineto_stream, "_cuts", lambda fd, size, n: cuts.extend(found(fd, size, n)) or cuts
        )
        assert kineto_stream.parts_for(plain.stat().st_size, parts) == parts
        split = kineto_fast.read_file(plain)
    assert len(cuts) == parts + 1, "a boundary was found near each share"
    kept = same_as_single(plain, monkeypatch, cuts[1:-1])
    assert kept == parts and split is not None


# Strings and args that hold what a boundary search looks for: "}, {", quotes, escaped quotes.
TRICKY = [
    cpu(name='a}, {"b": 1}, {c', ts=1),
    cpu(name='q\\"}, {\\"ph\\": \\"X\\"', ts=2),  # escaped quotes and backslashes
    cpu(name="\\", ts=3, args={"s": '"}, {"'}),  # a string ending in a backslash, then a quote
    cpu(name="args", ts=4, args={"nested": [{"a": "}, {"}, {"b": [{}, {}]}], "x": {"y": {}}}),
    {"ph": "M", "name": "thread_name", "pid": 11, "tid": 12, "args": {"name": "}, {t"}},
    kernel(name="k}, {", ts=5),
    {"ph": "B", "name": "b", "pid": 11, "tid": 12, "ts": 6},
    {"ph": "E", "pid": 11, "tid": 12, "ts": 8},
    cpu(name="ProfilerStep#3", cat="user_annotation", ts=9, dur=40),
    cpu(name="last", ts=50, args={"t": "}]}"}),
]


@pytest.mark.parametrize("bare_array", [False, True], ids=["object", "array"])
def test_a_cut_anywhere_reads_as_the_single_scan(bare_array, tmp_path, monkeypatch):
    """Two parts cut at bytes of a document that a JSON string or structure turns on (braces,
    brackets, quotes, backslashes, commas and colons, and the bytes either side), where its
    strings and args hold braces, quotes and escaped quotes: inside a string, inside args, at the
    file's last event, in the closing brackets. The Trace is the single scan's every time; the
    part is kept at the commas between events."""
    events = [cpu(ts=i) for i in range(3)] + TRICKY
    text = json.dumps(events if bare_array else doc(events))
    file = tmp_path / "rank0.pt.trace.json"
    file.write_text(text)
    single, _ = read_cut(file, monkeypatch, None)
    assert single is not None and not isinstance(single, str)
    turns = {i for i, c in enumerate(text) if c in '{}[]",:\\'}
    near = sorted({i + d for i in turns for d in (-1, 0, 1)} & set(range(1, len(text))))
    commas = event_commas(text, events)
    # Each a read of its own (~10 ms): 250 of those places (seeded), every comma between events,
    # the last bytes.
    cuts = sorted(
        {*random.Random(50).sample(near, 250), *commas, *range(len(text) - 12, len(text))}
    )
    kept = {cut: same_as_single(file, monkeypatch, [cut], single) for cut in cuts}
    assert all(kept[i] == 2 for i in commas), "kept wherever the cut is a comma between events"
    assert kept[commas[-1]] == 2  # the cut before the file's last event
    assert 1 in kept.values()


def test_n_cuts_anywhere_read_as_the_single_scan(tmp_path, monkeypatch):
    """Three and four parts, cut at random bytes (seeded): the single scan's Trace every time."""
    file = tmp_path / "rank0.pt.trace.json"
    events = [cpu(ts=i) for i in range(5)] + TRICKY + [kernel(ts=60 + i) for i in range(5)]
    text = json.dumps(doc(events))
    file.write_text(text)
    rng = random.Random(50)
    single, _ = read_cut(file, monkeypatch, None)
    kept = []
    for _ in range(150):
        cuts = sorted(rng.sample(range(1, len(text)), rng.choice((2, 3))))
        kept.append(same_as_single(file, monkeypatch, cuts, single))
    for _ in range(30):  # cuts all at commas between events: every part kept
        cuts = sorted(rng.sample(event_commas(text, events), 3))
        assert same_as_single(file, monkeypatch, cuts, single) == 4
    assert 1 in kept and 2 in kept


def event_commas(text: str, events: list) -> list[int]:
    """The offsets of the commas between traceEvents' elements in ``text`` (json.dumps')."""
    at = text.index("[") + 1 if text.startswith("[") else text.index('"traceEvents": [') + 16
    commas = []
    for event in events[:-1]:
        at += len(json.dumps(event))
        assert text[at : at + 2] == ", "
        commas.append(at)
        at += 2
    return commas


def test_the_parts_follow_the_cores_and_the_size():
    size = kineto_stream.SPLIT_MIN_BYTES
    assert kineto_stream.parts_for(size - 1, 8) == 1
    assert kineto_stream.parts_for(10 * size, 1) == 1
    assert kineto_stream.parts_for(10 * size, 2) == 2
    assert kineto_stream.parts_for(size, 8) == 2  # each part at least half of SPLIT_MIN_BYTES
    assert kineto_stream.parts_for(1000 * size, 64) == kineto_stream.MAX_PARTS


def test_resume_in_events_needs_a_fresh_scanner():
    scanner = _kineto_scan.Scanner()
    assert scanner.between_events() is None
    scanner.feed(b'{"traceEvents": [{"ph": "X"}', False)
    assert scanner.between_events() == (1, False)
    with pytest.raises(RuntimeError):
        scanner.resume_in_events(False)


def test_numbers_of_every_length_at_every_place_read_exactly():
    """ts, dur, pid of 1 to 15 integer digits and 0 to 9 decimals, anywhere in the piece: the
    scanner reads a digit run shorter than 16 in one block where 16 bytes are readable, else digit
    by digit (both against Decimal, rounded half to even past nanoseconds)."""
    from decimal import ROUND_HALF_EVEN, Decimal

    rng = random.Random(37)
    for _ in range(2000):
        whole = str(rng.randint(1, 10 ** rng.randint(1, 15) - 1)) if rng.random() < 0.9 else "0"
        ts = whole + (
            "." + str(rng.randint(0, 10**9))[: rng.randint(1, 9)] if rng.random() < 0.8 else ""
        )
        pid = rng.randint(0, 10 ** rng.randint(1, 18) - 1)
        event = f'{{"ph": "X", "name": "a", "pid": {pid}, "tid": 1, "ts": {ts}, "dur": {ts}}}'
        text = '{"traceEvents": [' + " " * rng.randint(0, 20) + event + "]}"
        columns, _, slow, _ = scanned(
            text.encode(), len(text) - rng.randint(0, 40) if rng.random() < 0.3 else len(text) + 1
        )
        want = int((Decimal(ts) * 1000).to_integral_value(ROUND_HALF_EVEN))
        assert not slow and np.frombuffer(columns["ts_ns"], np.int64).tolist() == [want], ts
        assert np.frombuffer(columns["dur_ns"], np.int64).tolist() == [want], ts
        assert np.frombuffer(columns["pid"], np.int64).tolist() == [pid], pid


def test_a_bare_array_behind_much_whitespace_is_read_in_one_part(tmp_path, in_two_parts):
    """Whether the document is a bare array is guessed for the second part from the first 4 KB; a
    wrong guess (more whitespace than that) is found at the cut and one part is read."""
    events = [cpu(ts=1000 + i) for i in range(400)]
    file = tmp_path / "rank0.pt.trace.json"
    file.write_text(" " * 5000 + json.dumps(events))
    check(file)
    file.write_text(" " * 100 + json.dumps(events))
    check(file)
    assert in_two_parts == [1, 2]


def test_a_gzip_text_larger_than_its_buffer_is_read_in_pieces_as_the_reference_reads_it(
    tmp_path, monkeypatch
):
    """The gzip buffer is sized from the compressed size (stream.gzip_buffer_bytes): a text that
    expands more than GZIP_EXPECTED_RATIO goes through the scanner in several pieces, and reads as
    the whole document does."""
    plain = SMALL.read_bytes()
    file = tmp_path / "rank0.pt.trace.json.gz"
    file.write_bytes(gzip.compress(plain, 9))
    monkeypatch.setattr(kineto_stream, "MIN_BUFFER_BYTES", 4096)
    monkeypatch.setattr(kineto_stream, "GZIP_EXPECTED_RATIO", 1)
    fed = []
    feed = kineto_stream._feed

    def counted(source, scanner, buffer_bytes, *args, **kwargs):
        fed.append(buffer_bytes)
        return feed(source, scanner, buffer_bytes, *args, **kwargs)

    monkeypatch.setattr(kineto_stream, "_feed", counted)
    assert check(file)
    assert fed and fed[0] == max(4096, file.stat().st_size) < len(plain)


def test_the_gzip_buffer_follows_the_compressed_size_within_its_bounds():
    assert kineto_stream.gzip_buffer_bytes(0) == kineto_stream.MIN_BUFFER_BYTES
    assert kineto_stream.gzip_buffer_bytes(34_000) == 34_000 * kineto_stream.GZIP_EXPECTED_RATIO
    assert kineto_stream.gzip_buffer_bytes(1 << 30) == kineto_stream.PIECE_BYTES


@pytest.mark.parametrize("seed", range(20))
def test_distinct_rows_of_few_runs_are_the_sorted_unique_rows(seed, monkeypatch):
    """fast._distinct: the distinct rows (sorted column by column) and each row's index, the same
    through its set of tuples (few runs) and its np.unique passes (many)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    runs = rng.integers(1, 40, size=n)  # rows come in runs, as a thread's events do
    columns = [
        np.repeat(rng.integers(-3, 4, size=n), runs)[:n],
        np.repeat(rng.integers(0, 2**40, size=n) % 5, runs)[:n],
        np.repeat(rng.integers(0, 2, size=n).astype(bool), runs)[:n],
    ]
    rows = list(zip(*(c.tolist() for c in columns)))
    want = sorted(set(rows))
    for few in (0, 1 << 30):  # np.unique's passes; the set of tuples
        monkeypatch.setattr(kineto_fast, "_FEW_RUNS", few)
        got, index = kineto_fast._distinct(*columns)
        assert [tuple(map(int, r)) for r in got] == [tuple(map(int, r)) for r in want]
        assert [want[i] for i in index.tolist()] == rows


@pytest.mark.parametrize("seed", range(20))
def test_a_line_s_order_is_the_reference_s_lexsort(seed):
    """fast._by_start_longest_first: np.lexsort((-end, start)) (by start, longest first), whether
    the starts rise already (its shortcut), tie, or come in any order; int64's extremes too."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    start = np.sort(rng.integers(0, 10**6, size=n)) if seed % 2 else rng.integers(0, 50, size=n)
    end = start + rng.integers(0, 100, size=n)
    if seed % 5 == 4 and n:
        end[rng.integers(0, n)] = np.iinfo(np.int64).min
    order, in_start, in_end = kineto_fast._by_start_longest_first(start, end)
    want = np.lexsort((-end, start))
    got = np.arange(n) if order is None else order
    assert np.array_equal(got, want)
    assert np.array_equal(in_start, start[want]) and np.array_equal(in_end, end[want])


@pytest.mark.parametrize("distinct", [1, 3, 8, 9, 40])
def test_rows_grouped_by_key_in_row_order_by_either_way(distinct, monkeypatch):
    rng = np.random.default_rng(distinct)
    keys = rng.choice(rng.integers(0, 5000, size=distinct), size=500)
    want = {int(k): np.flatnonzero(keys == k) for k in np.unique(keys)}
    for few in (0, 1000):  # a sort and a split; a comparison a key
        monkeypatch.setattr(kineto_fast, "_FEW_KEYS", few)
        got = kineto_fast._group(keys)
        assert list(got) == list(want)
        assert all(np.array_equal(got[k], want[k]) for k in want)
