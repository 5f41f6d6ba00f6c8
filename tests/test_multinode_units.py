"""The multi-node parts that need no second machine: where a node's place comes from, the merge's
arithmetic on hand-built ranks with known answers (tests/test_multinode.py runs the real thing)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from scaldiag.analyze import intervals, nodes
from scaldiag.analyze.nodes import names as node_names
from scaldiag.collect import multinode
from scaldiag.rules import sd209_internode_link, sd210_straggler_node

MS = 1_000_000


def test_the_flags_make_a_torchrun_node_and_its_launch():
    node = multinode.detect({}, 2, 1, "10.0.0.1:29500", 8, host="gpu-b")
    assert node == multinode.Node(
        2, 1, "gpu-b", "torchrun", "10.0.0.1:29500", 8, **multinode.kernel()
    )
    command = multinode.torchrun_command(node, "train.py", ["--lr", "1"])
    assert command[1:3] == ["-m", "torch.distributed.run"]
    assert {
        "--nnodes=2",
        "--node-rank=1",
        "--rdzv-endpoint=10.0.0.1:29500",
        "--nproc-per-node=8",
        "--rdzv-backend=static",
    } <= set(command)
    assert command[-5:] == ["-m", "scaldiag.collect.bootstrap", "train.py", "--lr", "1"]
    assert "scaldiag.collect.bootstrap" not in multinode.uncaptured_torchrun(node, "train.py", [])
    assert multinode.run_dir_label("train", node) == "train-gpu-b-node1"


@pytest.mark.parametrize(
    "args, said",
    [
        ((2, None, "h:1", 1), "together"),
        ((2, 2, "h:1", 1), "not one of the 2 nodes"),
        ((2, 0, "h", 1), "HOST:PORT"),
        ((2, 0, "h:1", None), "--nproc-per-node"),
    ],
)
def test_an_inconsistent_multi_node_launch_is_refused_with_the_reason(args, said):
    with pytest.raises(multinode.NodeError, match=said):
        multinode.detect({}, *args)


def test_slurm_tf_config_and_jax_say_the_nodes_place():
    assert multinode.detect(
        {"SLURM_NNODES": "4", "SLURM_NODEID": "3"}, host="n3"
    ) == multinode.Node(4, 3, "n3", "slurm", **multinode.kernel())
    config = {
        "cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]},
        "task": {"type": "worker", "index": 1},
    }
    assert multinode.detect({"TF_CONFIG": json.dumps(config)}, host="c") == multinode.Node(
        3, 2, "c", "tf_config", **multinode.kernel()
    )
    assert (
        multinode.detect({"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"}, host="a").launcher
        == "jax"
    )
    assert multinode.detect({"SLURM_NNODES": "1", "SLURM_NODEID": "0"}) is None  # one machine
    assert multinode.detect({"TF_CONFIG": "{not json"}) is None
    assert multinode.detect({}) is None


def test_a_host_name_is_made_safe_for_a_directory():
    node = multinode.Node(2, 0, "../evil host\n", "slurm")
    assert "/" not in multinode.run_dir_label("t", node) and "\n" not in multinode.run_dir_label(
        "t", node
    )


def _rank(
    node: str,
    offset_ns: int,
    start_delay_ns: int = 0,
    end_delay_ns: int = 0,
    input_ns: int = 0,
    steps: int = 6,
    link_ns: int = 30 * MS,
) -> nodes.RankEvents:
    """A rank of 100 ms steps: input, compute to 40 ms (+ its delay), two all-reduces that end
    together on
    every rank (``end_delay_ns``: the job's latest rank's delay), all on a clock ``offset_ns``
    ahead.
    """
    step_start = np.arange(steps, dtype=np.int64) * 100 * MS
    cs, ce, keys = [], [], []
    for n, t in enumerate(step_start.tolist()):
        for k, (begin, end) in enumerate(((40 * MS, 60 * MS), (60 * MS, 60 * MS + link_ns))):
            cs.append(t + begin + start_delay_ns)
            ce.append(t + end + end_delay_ns)
            keys.append((n + 10, k))
    inp = intervals.union(step_start, step_start + 1 * MS + input_ns)
    s = offset_ns
    return nodes.RankEvents(
        node,
        f"{node}/rank0",
        np.arange(steps, dtype=np.int64) + 10,
        step_start + s,
        step_start + 100 * MS + s,
        np.array(cs) + s,
        np.array(ce) + s,
        keys,
        (inp[0] + s, inp[1] + s),
    )


def test_a_node_off_by_50_ms_is_put_back_on_node_0s_clock():
    ranks = [_rank("a/node0", 0), _rank("b/node1", 50 * MS)]
    aligned, offsets, notes = nodes.align(nodes.JobEvents.of(ranks), 100 * MS)
    assert (
        [o.offset_ns for o in offsets] == [0, 50 * MS]
        and offsets[1].collectives == 12
        and not notes
    )
    job = nodes.reduce_job(aligned, offsets, {"a/node0": 8_000_000})
    assert all(abs(n.lateness_ms.mean) < 1e-9 for n in job.nodes)  # on one clock nobody is late
    assert job.nodes[0].link_ms.mean == pytest.approx(50.0)  # 20 ms + the 30 ms after all arrived


def test_without_collectives_a_node_more_than_a_step_away_is_refused():
    far = _rank("b/node1", 150 * MS)
    bare = nodes.RankEvents(
        far.node,
        far.rank,
        far.step_num,
        far.step_start_ns,
        far.step_end_ns,
        np.empty(0, np.int64),
        np.empty(0, np.int64),
        [],
        far.input,
    )
    with pytest.raises(nodes.MergeRefused, match="more than a step"):
        nodes.align(nodes.JobEvents.of([_rank("a/node0", 0), bare]), 100 * MS)
    near = nodes.RankEvents(
        bare.node,
        bare.rank,
        bare.step_num,
        bare.step_start_ns - 140 * MS,
        bare.step_end_ns - 140 * MS,
        bare.coll_start_ns,
        bare.coll_end_ns,
        [],
        bare.input,
    )
    _, offsets, notes = nodes.align(nodes.JobEvents.of([_rank("a/node0", 0), near]), 100 * MS)
    assert offsets[1].offset_ns is None and "not estimated" in notes[0]


def test_a_node_with_slow_input_is_late_and_named_by_sd210_not_sd209():
    ranks = [
        _rank("a/node0", 0, end_delay_ns=15 * MS, link_ns=2 * MS),
        _rank(
            "b/node1",
            0,
            start_delay_ns=15 * MS,
            end_delay_ns=15 * MS,
            input_ns=15 * MS,
            link_ns=2 * MS,
        ),
    ]
    job = nodes.reduce_job(*nodes.align(nodes.JobEvents.of(ranks), 100 * MS)[:2], {})
    late = {n.node: n.lateness_ms.mean for n in job.nodes}
    assert late == {"a/node0": pytest.approx(-15.0), "b/node1": pytest.approx(15.0)}
    assert job.nodes[1].last_pct == 100.0 and job.nodes[0].link_ms.mean == pytest.approx(22.0)
    finding = sd210_straggler_node.RULE.check(job)
    assert finding.category == "input" and "b/node1" in finding.summary


def test_sd210_fires_only_where_the_low_end_of_the_lateness_clears_5_percent_of_the_step():
    ranks = [
        _rank("a/node0", 0, end_delay_ns=15 * MS, link_ns=2 * MS),
        _rank(
            "b/node1",
            0,
            start_delay_ns=15 * MS,
            end_delay_ns=15 * MS,
            input_ns=15 * MS,
            link_ns=2 * MS,
        ),
    ]
    job = nodes.reduce_job(*nodes.align(nodes.JobEvents.of(ranks), 100 * MS)[:2], {})
    from dataclasses import replace

    from scaldiag.analyze.stats import Summary

    def late(values):
        return replace(
            job, nodes=[job.nodes[0], replace(job.nodes[1], lateness_ms=Summary.of(values))]
        )

    step = min(n.step_ms.mean for n in job.nodes)
    assert step == pytest.approx(100.0)
    # 10 ms late a step on average, +-5.6 ms: the low end (4.4% of the step) is within the noise of
    # 5%
    noisy = late([5.0, 15.0, 5.0, 15.0, 10.0])
    s = noisy.nodes[1].lateness_ms
    assert (s.mean - s.ci95) / step < sd210_straggler_node.MIN_STEP_SHARE < s.mean / step
    assert sd210_straggler_node.RULE.check(noisy) is None
    steady = late([9.0, 11.0, 9.0, 11.0, 10.0])  # the same mean, +-1.1 ms: the low end at 8.9%
    assert sd210_straggler_node.RULE.check(steady).id == "SD210"


def test_sd209_weighs_the_link_against_the_same_all_reduce_inside_a_node():
    ranks = [_rank("a/node0", 0), _rank("b/node1", 0)]
    job = nodes.reduce_job(
        *nodes.align(nodes.JobEvents.of(ranks), 100 * MS)[:2],
        {"a/node0": 8_000_000, "b/node1": 8_000_000},
    )
    assert job.nodes[0].exposed_ms.mean == pytest.approx(
        30.0
    )  # after the last hand-over (60 ms) to 90 ms
    assert (
        sd209_internode_link.RULE.check(job).id == "SD209"
    )  # no reference: the exposed time counts whole
    from dataclasses import replace

    from scaldiag.analyze.stats import Summary

    same = replace(
        job, nodes=[replace(n, intra_node_ms=Summary.of([49.0, 50.0, 51.0])) for n in job.nodes]
    )
    assert (
        sd209_internode_link.RULE.check(same) is None
    )  # the link costs what the node itself costs
    fast = replace(
        job, nodes=[replace(n, intra_node_ms=Summary.of([4.0, 5.0, 6.0])) for n in job.nodes]
    )
    assert sd209_internode_link.RULE.check(fast).forecast.kind == "forecast"
    # a reference whose median is under the link but whose slow calls reach it: within the noise, no
    # finding
    link = job.nodes[0].link_ms.mean
    spread = [link - 15.0] * 8 + [link + 5.0] * 2
    noisy = replace(job, nodes=[replace(n, intra_node_ms=Summary.of(spread)) for n in job.nodes])
    assert sd209_internode_link.RULE.check(noisy) is None


def test_nodes_on_one_kernel_in_one_network_namespace_have_no_network_to_judge():
    ranks = [_rank("a/node0", 0), _rank("b/node1", 0)]
    job = nodes.reduce_job(
        *nodes.align(nodes.JobEvents.of(ranks), 100 * MS)[:2],
        {"a/node0": 8_000_000, "b/node1": 8_000_000},
    )
    assert (
        sd209_internode_link.RULE.check(job).id == "SD209"
    )  # as above: the exposed time counts whole
    here = multinode.detect({"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"}).fields()
    assert here["boot_id"] and here["net_ns"].startswith("net:[")  # this machine's kernel says both
    note = nodes.shared_network_stack([here, dict(here, node_rank=0)])
    assert "one network namespace" in note and here["net_ns"] in note
    from dataclasses import replace

    assert sd209_internode_link.RULE.check(replace(job, one_network_stack=True)) is None
    # another namespace (a veth pair between them: a network), another kernel, or a record that does
    # not say
    for other in (
        dict(here, net_ns="net:[1]"),
        dict(here, boot_id="another"),
        dict(here, net_ns=None),
        None,
    ):
        assert nodes.shared_network_stack([here, other]) is None


@pytest.mark.parametrize(
    "env, launcher, rank",
    [
        ({"SLURM_NNODES": "2", "SLURM_NODEID": "1"}, "slurm", 1),
        (
            {
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}
                )
            },
            "tf_config",
            1,
        ),
        ({"JAX_NUM_PROCESSES": "3", "JAX_PROCESS_ID": "2"}, "jax", 2),
    ],
)
@pytest.mark.slow
def test_under_another_launcher_the_nodes_run_directory_is_named_by_host_and_node_rank(
    tmp_path, env, launcher, rank
):
    import os
    import socket
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text("print('trained')\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "-q",
            "--out",
            str(tmp_path / "runs"),
            str(script),
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    host = multinode.run_dir_label("train", multinode.Node(1, rank, socket.gethostname(), launcher))
    assert run_dir.name.endswith(host)
    node = json.loads((run_dir / "run.json").read_text())["node"]
    assert (node["launcher"], node["node_rank"], node["host"]) == (
        launcher,
        rank,
        socket.gethostname(),
    )


def _node_dir(path, host: str, rank: int, nnodes: int = 2):
    path.mkdir(parents=True)
    (path / "run.json").write_text(
        json.dumps({"node": {"nnodes": nnodes, "node_rank": rank, "host": host}})
    )
    return path


def test_the_merge_takes_one_directory_a_node_of_one_job(tmp_path):
    from scaldiag.errors import ScaldiagError
    from scaldiag.record import nodes as job

    a, b = (
        _node_dir(tmp_path / "out" / "t-b-node1", "b", 1),
        _node_dir(tmp_path / "out" / "t-a-node0", "a", 0),
    )
    assert job.node_dirs([str(tmp_path / "out")]) == [b, a]  # node 0 first
    assert job.is_job([str(tmp_path / "out")]) and not job.is_job([str(a)])
    with pytest.raises(ScaldiagError, match="more than one"):
        job.node_dirs([str(a), str(_node_dir(tmp_path / "again", "c", 1))])
    with pytest.raises(ScaldiagError, match="not of one job"):
        job.node_dirs([str(b), str(_node_dir(tmp_path / "other", "c", 1, nnodes=4))])
    with pytest.raises(ScaldiagError, match="two or more nodes"):
        job.node_dirs([str(a), str(a)])


def test_the_merge_keeps_of_each_run_json_only_what_it_reads(tmp_path):
    """record/nodes.node_records: each node directory as its text, in node order, with only the
    part of its run.json the merge reads (every node's is held until the last is found)."""
    from scaldiag.record import nodes as job

    dirs = [_node_dir(tmp_path / "out" / f"t-h-node{k}", "h", k, nnodes=3) for k in (2, 0, 1)]
    for d in dirs:
        run = json.loads((d / "run.json").read_text())
        run.update(command=["train.py"] * 100, samplers={"gpu": [1] * 100}, started_ns=5)
        (d / "run.json").write_text(json.dumps(run))
    found = job.node_records([str(tmp_path / "out")])
    assert [d for d, _ in found] == [str(dirs[1]), str(dirs[2]), str(dirs[0])]
    assert all(
        isinstance(run, job.NodeRecord) and run.node and run.started_ns == 5 for _, run in found
    )
    assert not any(hasattr(run, "command") or hasattr(run, "samplers") for _, run in found)


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--gpus", "1,2", "--nnodes", "2"], "runs on one machine"),
        (["--nnodes", "2", "--node-rank", "0"], "together"),
        (
            [
                "--nnodes",
                "2",
                "--node-rank",
                "2",
                "--rdzv-endpoint",
                "h:1",
                "--nproc-per-node",
                "1",
            ],
            "not one of",
        ),
    ],
)
@pytest.mark.slow
def test_profile_says_what_is_wrong_with_a_multi_node_launch(tmp_path, flags, said):
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text("print('never run')\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "--out",
            str(tmp_path / "runs"),
            *flags,
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and said in done.stderr and "never run" not in done.stdout
    assert not (tmp_path / "runs").exists()


def test_a_gpu_node_records_no_gloo_reference_and_says_why(tmp_path):
    (tmp_path / "inventory.json").write_text(
        json.dumps({"gpus": [{"index": 0, "name": "NVIDIA H200"}]})
    )
    (tmp_path / "run.json").write_text("{}")
    assert "GPU node" in multinode.record_intra_node(tmp_path)
    assert "intra_node_allreduce" not in json.loads((tmp_path / "run.json").read_text())


def test_without_gradient_bytes_no_reference_is_measured(tmp_path):
    (tmp_path / "run.json").write_text("{}")
    assert "no gradient bytes" in multinode.record_intra_node(tmp_path)


@pytest.mark.parametrize(
    "environ, one_of",
    [
        (
            {
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}
                )
            },
            "2 (tf_config)",
        ),
        ({"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"}, "2 (jax)"),
        ({"WORLD_SIZE": "4"}, "4 (WORLD_SIZE)"),
    ],
)
def test_the_input_free_measurement_is_not_run_in_a_process_of_several(
    monkeypatch, environ, one_of
):
    from scaldiag.collect.frameworks import input_free, keras_callback

    for key in (
        "TF_CONFIG",
        "JAX_NUM_PROCESSES",
        "JAX_PROCESS_ID",
        "WORLD_SIZE",
        "SLURM_NNODES",
        "SLURM_JOB_NUM_NODES",
    ):
        monkeypatch.delenv(key, raising=False)
    keras_callback._not_one_of_several()  # one process: measured
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(input_free.Skipped, match=f"one of {re.escape(one_of)} of a job"):
        keras_callback._not_one_of_several()


def test_arrivals_pair_in_order_and_survive_a_collective_cut_at_the_window_s_edge():
    work = np.array([100, 200, 300, 400], np.int64)
    # equal counts: in order, an enqueue stamped after its work arrives when the work began
    assert nodes.pair_arrivals(np.array([90, 195, 305, 390]), work).tolist() == [90, 195, 300, 390]
    # one hand-over more, after the window closed on its work (TF under load: 20 hand-overs, 19 ops)
    assert nodes.pair_arrivals(np.array([90, 195, 290, 390, 480]), work).tolist() == [
        90,
        195,
        290,
        390,
    ]
    # ... or before it opened
    assert nodes.pair_arrivals(np.array([5, 90, 195, 290, 390]), work).tolist() == [
        90,
        195,
        290,
        390,
    ]
    # one work more than hand-overs: that work arrives when it starts
    assert nodes.pair_arrivals(np.array([195, 290, 390]), work).tolist() == [100, 195, 290, 390]
    # far apart counts: no pairing is safe
    assert nodes.pair_arrivals(np.arange(10) * 50, work) is None


def _tf_env(task_type: str, index: int, **extra: str) -> dict:
    cluster = {"chief": ["c:1"], "worker": ["w:1", "w:2"]}
    return {
        "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}}),
        **extra,
    }


def test_only_the_tf_chief_is_traced_unless_every_task_is_asked_for():
    assert multinode.tf_task_untraced({}) is None  # not a TF multi-worker job
    assert multinode.tf_task_untraced(_tf_env("chief", 0)) is None
    why = multinode.tf_task_untraced(_tf_env("worker", 1))
    assert why.startswith("not traced: task 2 of a TF multi-worker job"), why  # chief, w0, w1
    assert multinode.TF_TRACE_ALL_WORKERS_ENV in why
    asked = _tf_env("worker", 1, **{multinode.TF_TRACE_ALL_WORKERS_ENV: "1"})
    assert multinode.tf_task_untraced(asked) is None


def test_names_judged_once_a_pattern_give_each_name_s_own_search(monkeypatch):
    """analyze/nodes/names.name_flags remembers whether a pattern finds a name (the ranks of a job
    name the same ops): the flags are each name's own search, whether remembered, forgotten at the
    bound, or of a plane with more names than the bound (searched, not remembered)."""
    monkeypatch.setattr(node_names, "_FOUND", {})
    monkeypatch.setattr(node_names, "_REMEMBERED_NAMES", 8)
    names = ["gloo:all_reduce", "aten::add_", "c10d::allreduce_", "ProfilerStep#3", "ProfilerStep"]
    many = [f"op{i}" for i in range(20)] + ["nccl:all_reduce", "all-reduce.7"]
    for pattern in (nodes.HOST_COLLECTIVE, nodes.ENQUEUE, nodes.STEP, nodes.XLA_COLLECTIVE):
        for plane in (names, names[::-1], many, names, many[:7], names):
            want = [pattern.search(n) is not None for n in plane] + [False]
            assert node_names.name_flags(plane, pattern).tolist() == want, (pattern.pattern, plane)
        assert len(node_names._FOUND[pattern.pattern]) <= 8
