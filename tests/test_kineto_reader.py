"""The Kineto reader against a plain ``json.load`` of the same files; layouts, merge of ranks, bad
input.

Fixtures (fixtures/README.md): ``kineto/cpu_ddp_gloo`` is real (torch 2.13 on the CPU, two gloo
ranks, recorded by ``scaldiag profile --nproc-per-node 2``); ``kineto/synthetic_gpu`` is synthetic
(make_synthetic_gpu.py) until a GPU trace from bench/gpu/run_torch.sh is committed.
"""

import dataclasses
import gzip
import json
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import pytest

from scaldiag.analyze.profile import analyze_trace
from scaldiag.errors import TraceError
from scaldiag.pipeline import read_trace as pipeline_read
from scaldiag.readers import find_trace
from scaldiag.readers.kineto import find_run, read_trace

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kineto"
GPU = FIXTURES / "synthetic_gpu"
CPU_DDP = FIXTURES / "cpu_ddp_gloo"
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
SKIP = {"gpu_user_annotation", "trace", "overhead", "ac2g", "fwdbwd"}


def raw(file: Path) -> dict:
    data = file.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data, parse_float=Decimal)


def complete(doc: dict):
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def ns(us) -> int:
    return int(Decimal(str(us)) * 1000)


def test_gpu_trace_matches_json_counts_and_kernel_time_per_stream():
    files = sorted(GPU.glob("*.pt.trace.json"))
    trace = read_trace(files)
    for rank, file in enumerate(files):
        doc = raw(file)
        events = complete(doc)
        device = [e for e in events if e["cat"] in DEVICE_CATS]
        host = [
            e
            for e in events
            if e["cat"].lower() not in SKIP | DEVICE_CATS and isinstance(e["pid"], int)
        ]
        planes = {p.name: p for p in trace.planes if p.host == f"rank{rank}"}
        gpu = planes[f"/device:GPU:{rank}"]
        assert gpu.event_count == len(device)
        assert planes["/host:CPU"].event_count == len(host)
        by_stream = defaultdict(int)
        for e in device:
            if e["cat"] == "kernel":
                by_stream[f"stream {e['args']['stream']}"] += ns(e["dur"])
        for line in gpu.lines:
            names = [gpu.event_names[i] for i in line.name_id]
            kernel = [not n.startswith(("Memcpy", "Memset")) for n in names]
            assert int((line.end_ns - line.start_ns)[kernel].sum()) == by_stream[line.name]
        nccl = sum(ns(e["dur"]) for e in device if e["name"].startswith("nccl"))
        line20 = next(line for line in gpu.lines if line.name == "stream 20")
        assert int((line20.end_ns - line20.start_ns).sum()) == nccl


def test_times_are_exact_wall_clock_nanoseconds():
    file = GPU / "rank0.pt.trace.json"
    doc = raw(file)
    first = min(complete(doc), key=lambda e: Decimal(str(e["ts"])))
    trace = read_trace([file])
    start = min(int(line.start_ns.min()) for p in trace.planes for line in p.lines if len(line))
    assert start == doc["baseTimeNanoseconds"] + ns(first["ts"])


def test_gpu_analysis_steps_copies_collectives_and_the_straggler_rank():
    """Per host step. The generator puts the GPU-side ProfilerStep annotations 380 us into each
    step,
    after the step's copy, where Kineto starts them at the step's first GPU work
    (tests/test_device_steps.py on real H200 traces), so this test leaves the device's own steps out
    and checks the host's."""
    name, trace = pipeline_read(GPU)
    assert all(
        p.step_marks is not None and len(p.step_marks.start_ns) == 30 for p in trace.device_planes
    )
    assert "device's own GPU-side" in analyze_trace(trace, name).steps_description
    trace = dataclasses.replace(
        trace, planes=[dataclasses.replace(p, step_marks=None) for p in trace.planes]
    )
    analysis = analyze_trace(trace, name)
    assert analysis.framework == "pytorch"
    assert analysis.steps_method == "markers" and "ProfilerStep" in analysis.steps_description
    steps = [
        e
        for e in complete(raw(GPU / "rank0.pt.trace.json"))
        if e["name"].startswith("ProfilerStep#") and e["cat"] == "user_annotation"
    ]
    units = {u.name: u for u in analysis.units}
    assert set(units) == {"rank0:/device:GPU:0", "rank1:/device:GPU:1"}
    assert units["rank0:/device:GPU:0"].steps == len(steps)
    unit = units["rank0:/device:GPU:0"]
    assert unit.h2d.bytes_per_step == 131072 and unit.h2d.bytes_by_host_kind == {"pinned": 131072}
    assert unit.collective_count_per_step == 1
    assert unit.categories["collective"].busy_ms == pytest.approx(0.25)
    assert unit.categories["input"].exclusive_ms > 0
    compute = {n: u.categories["compute"].busy_ms for n, u in units.items()}
    assert compute["rank1:/device:GPU:1"] == pytest.approx(1.3 * compute["rank0:/device:GPU:0"])
    from scaldiag.rules.report import build_report

    report = build_report(analysis)
    straggler = next(f for f in report.findings if f.id == "SD206")
    assert "rank1" in straggler.summary
    assert "pytorch" in straggler.fix


def test_real_cpu_ddp_logdir_two_gzip_ranks_merge():
    fmt, run, files = find_trace(CPU_DDP)
    assert (
        fmt.name == "kineto"
        and run == "torch"
        and [f.name for f in files] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    )
    trace = read_trace(files)
    assert trace.hostnames == ["rank0", "rank1"]
    assert [p.label for p in trace.host_planes] == ["rank0:/host:CPU", "rank1:/host:CPU"]
    for plane, file in zip(trace.host_planes, files):
        doc = raw(file)
        host = [
            e
            for e in complete(doc)
            if e.get("cat", "").lower() not in SKIP and isinstance(e["pid"], int)
        ]
        assert plane.event_count == len(host)
        names = Counter(plane.event_names[i] for line in plane.lines for i in line.name_id)
        assert names["ProfilerStep"] == sum(e["name"].startswith("ProfilerStep#") for e in host)
        assert names["gloo:all_reduce"] == sum(e["name"] == "gloo:all_reduce" for e in host) > 0
        assert plane.stats["distributed_rank"] == doc["distributedInfo"]["rank"]
    analysis = analyze_trace(pipeline_read(CPU_DDP)[1])
    assert analysis.steps_method == "markers" and analysis.units[0].steps == 5
    assert analysis.units[0].categories["collective"].busy_ms > 0
    assert analysis.units[0].categories["input"].busy_ms > 0


def test_single_file_gz_and_plain_json_read_the_same(tmp_path):
    plain = GPU / "rank0.pt.trace.json"
    packed = tmp_path / "trace.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a, b = read_trace([plain]), read_trace([packed])
    assert a.event_count == b.event_count and a.hostnames == b.hostnames == ["synthetic"]
    assert [p.label for p in a.planes] == ["/device:GPU:0", "/host:CPU"]
    fmt, _, files = find_trace(packed)
    assert fmt.name == "kineto" and files == [packed]


def test_tensorboard_handler_layout_latest_cycle_per_worker_and_named_runs(tmp_path):
    for run in ("run_a", "run_b"):
        d = tmp_path / run
        d.mkdir()
        for worker, ms in (
            ("host_1.1", 1700000000001),
            ("host_1.1", 1700000000002),
            ("host_2.1", 1700000000001),
        ):
            (d / f"{worker}.{ms}.pt.trace.json").write_bytes(
                (GPU / "rank0.pt.trace.json").read_bytes()
            )
    run, files = find_run(tmp_path)
    assert run == "run_b"
    assert [f.name for f in files] == [
        "host_1.1.1700000000002.pt.trace.json",
        "host_2.1.1700000000001.pt.trace.json",
    ]
    assert find_run(tmp_path, "run_a")[0] == "run_a"
    with pytest.raises(TraceError, match="no run named"):
        find_run(tmp_path, "nope")


@pytest.mark.parametrize(
    "content,message",
    [
        (b"", "empty"),
        (b"{not json", "not valid JSON"),
        (b'{"traceEvents": 3}', "no traceEvents"),
        (b'{"traceEvents": [{"ph": "M", "name": "thread_name"}]}', "no complete"),
        (b"\x1f\x8b\x08\x00garbage", "gzip"),
        (b"\xff\xfe\x00", "UTF-8"),
    ],
)
def test_bad_files_are_one_trace_error(tmp_path, content, message):
    file = tmp_path / "x.pt.trace.json"
    file.write_bytes(content)
    with pytest.raises(TraceError, match=message):
        read_trace([file])


def test_begin_end_pairs_and_json_array_form(tmp_path):
    events = [
        {"ph": "B", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 10},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 11.5,
            "dur": 2.25,
        },
        {"ph": "E", "pid": 1, "tid": 1, "ts": 20},
    ]
    file = tmp_path / "array.json"
    file.write_text(json.dumps(events))
    (plane,) = read_trace([file]).planes
    (line,) = plane.lines
    assert line.start_ns.tolist() == [10_000, 11_500] and line.end_ns.tolist() == [20_000, 13_750]
    assert list(line.stat("step_num")) == [1, None]


@pytest.mark.parametrize(
    "name,expected",
    [
        ("Memcpy HtoD (Pageable -> Device)", "h2d"),
        ("Memcpy DtoH (Device -> Pinned)", "d2h"),
        ("Memcpy DtoD (Device -> Device)", "other"),
        ("Memset (Device)", "other"),
        ("Memcpy PtoP (Device -> Device)", "collective"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "collective"),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "collective"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
            "compute",
        ),
    ],
)
def test_kineto_device_categories(name, expected):
    from scaldiag.analyze.categories import device_category

    assert device_category(name) == expected


@pytest.mark.parametrize(
    "name,on_cpu,with_gpu",
    [
        ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "input", "input"),
        ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "input", "input"),
        ("scaldiag_input", "input", "input"),
        ("aten::addmm", "compute", "host_overhead"),
        ("autograd::engine::evaluate_function: AddmmBackward0", "compute", "host_overhead"),
        ("cudaLaunchKernel", "host_overhead", "host_overhead"),
        ("cuLaunchKernel", "host_overhead", "host_overhead"),
        ("cudaStreamSynchronize", "wait", "wait"),
        ("cudaDeviceSynchronize", "wait", "wait"),
        ("nccl:all_reduce", "collective", "collective"),
        ("gloo:all_reduce", "collective", "collective"),
        ("c10d::allreduce_", "collective", "collective"),
        ("ProfilerStep", None, None),
        ("Optimizer.step#SGD.step", None, None),
    ],
)
def test_kineto_host_categories(name, on_cpu, with_gpu):
    from scaldiag.analyze.categories import host_category

    assert host_category(name, ops_are_compute=True) == on_cpu
    assert host_category(name, ops_are_compute=False) == with_gpu


REAL_GPU = FIXTURES / "h200_cuda"


def test_real_h200_trace_kernels_copies_and_steps_against_json():
    """A real torch.profiler trace of a tiny CUDA loop on an H200 (torch 2.11,
    bench/gpu/run_torch.sh)."""
    (file,) = REAL_GPU.glob("*.pt.trace.json.gz")
    doc = raw(file)
    events = complete(doc)
    kernels = [e for e in events if e["cat"] == "kernel"]
    trace = read_trace([file])
    (gpu,) = [p for p in trace.planes if p.name.startswith("/device:GPU")]
    names = [gpu.event_names[i] for line in gpu.lines for i in line.name_id]
    kernel_ns = sum(
        int(e - s)
        for line in gpu.lines
        for s, e, i in zip(line.start_ns, line.end_ns, line.name_id)
        if not gpu.event_names[i].startswith(("Memcpy", "Memset"))
    )
    assert kernel_ns == sum(ns(e["dur"]) for e in kernels)
    assert len(names) == len([e for e in events if e["cat"] in DEVICE_CATS])
    steps = {
        int(e["name"].split("#")[1]) for e in events if e["name"].startswith("ProfilerStep#")
    }  # host and GPU copies
    analysis = analyze_trace(trace, "real")
    assert analysis.framework == "pytorch" and analysis.steps_method == "markers"
    assert analysis.units[0].steps == len(steps) and analysis.units[0].kind == "gpu"


REAL_DDP_1GPU = FIXTURES / "h200_ddp_gloo_1gpu"


def test_real_h200_two_ranks_on_one_gpu_each_rank_its_own_plane_with_its_kernels():
    """Two torchrun ranks on ONE H200 (gloo all-reducing CUDA tensors; bench/torch/ddp_one_gpu.py
    under
    `scaldiag profile --nproc-per-node 2`): both say device 0, the merge keeps them apart by rank.
    """
    files = sorted(REAL_DDP_1GPU.glob("rank*.pt.trace.json.gz"))
    assert [f.name for f in files] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    trace = read_trace(files)
    # these files carry no host_name: one host, so ranks are labelled rank0, rank1 (not rank0/rank0)
    assert trace.hostnames == ["rank0", "rank1"]
    gpus = {p.label: p for p in trace.device_planes}
    assert sorted(gpus) == ["rank0:/device:GPU:0", "rank1:/device:GPU:0"]
    for rank, file in enumerate(files):
        doc = raw(file)
        assert (
            doc["distributedInfo"]["rank"] == rank and doc["distributedInfo"]["backend"] == "gloo"
        )
        events = complete(doc)
        device = [e for e in events if e["cat"] in DEVICE_CATS]
        plane = gpus[f"rank{rank}:/device:GPU:0"]
        assert sum(len(line.start_ns) for line in plane.lines) == len(device)
        assert sum(int(line.end_ns.sum() - line.start_ns.sum()) for line in plane.lines) == sum(
            ns(e["dur"]) for e in device
        )
        assert {e["args"]["device"] for e in device} == {0}
        assert any(e["name"] == "gloo:all_reduce" for e in events)
        pinned = [e for e in device if e["name"] == "Memcpy HtoD (Pinned -> Device)"]
        assert pinned  # the DataLoader's pinned batch, copied non_blocking
    analysis = analyze_trace(trace, "ddp")
    assert analysis.hosts == ["rank0", "rank1"] and analysis.steps_method == "markers"
    units = {u.name: u for u in analysis.units}
    assert sorted(units) == ["rank0:/device:GPU:0", "rank1:/device:GPU:0"]
    assert all(u.steps == 5 for u in units.values())
    # rank 1 does 8 extra 2048x2048 matmuls a step: its device computes far more than rank 0's
    assert (
        units["rank1:/device:GPU:0"].categories["compute"].busy_ms
        > 5 * units["rank0:/device:GPU:0"].categories["compute"].busy_ms
    )


def test_a_directory_of_chrome_traces_is_known_by_content_not_name(tmp_path):
    """`prof.export_chrome_trace("trace_rank0.json")`, as the PyTorch docs show, names the files as
    the script
    chose: such a directory is read as Kineto (before: "no .xplane.pb files under DIR"); other JSON
    is left.
    """
    from conftest import FIXTURES

    from scaldiag.readers import read_trace as read_any

    ddp = FIXTURES / "x2_devset" / "torch_ddp_sync_2gpu"
    (tmp_path / "trace_rank0.json").write_bytes(
        gzip.decompress((ddp / "rank0.pt.trace.json.gz").read_bytes())
    )
    (tmp_path / "trace_rank1.json.gz").write_bytes((ddp / "rank1.pt.trace.json.gz").read_bytes())
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    _, trace = read_any(tmp_path)
    assert sorted(Path(s).name for s in trace.sources) == [
        "trace_rank0.json",
        "trace_rank1.json.gz",
    ]
    assert len([p for p in trace.planes if p.is_device]) == 2
