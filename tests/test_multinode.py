"""A job over two "nodes" on one machine: two network namespaces joined by a veth pair.

Each namespace runs ``scaldiag profile --nnodes 2 --node-rank K --rdzv-endpoint ...`` of a torchrun
CPU job over gloo (tests/multinode_job.py, one process a node), each under a host name of its own (a
UTS namespace), the rendezvous over the veth addresses. Then ``scaldiag report NODE_DIR NODE_DIR``
merges them:

1. a plain link: no finding about the network;
2. the link throttled (tbf to 100 Mbit/s, plus 1 ms of netem delay where the kernel has netem):
   SD209 is the top finding, with the exposed all-reduce per step and the bytes per step;
3. one node's input slowed (its ranks only): SD210 names that node, its input as the cause;
4. one node's recorded clock (its trace of case 1) shifted by 50 ms: the merge estimates the shift
   within 1 ms, and the verdict and every node's lateness are those of the unshifted merge.

The verdicts come from the traces (gloo's all-reduce events, the DataLoader's fetches, the step
markers) and the records; the test only sets the link and the input up. Needs root, ``ip``, ``tc``,
``unshare`` and a kernel that lets them make namespaces: elsewhere it skips, saying which was
refused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two network namespaces running a torchrun job each

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "multinode_job.py"
STEPS = "20"
# A batch whose compute dwarfs what the plain veth link adds to an all-reduce: on this 2-core
# machine the link between namespaces carries 8.4 MB at ~2.4 Gbit/s (28 ms after the last rank
# arrived, against 10.5 ms inside one namespace), and with batch 32 (40 ms steps) the exposed part
# of that read 10-11% of the step in 2 of 10 runs, at SD209's threshold: a plain link that is half
# the bottleneck is not the case this test means. With 256 the same link is a small share; the
# throttled one still holds up every step.
BATCH = "256"
SUFFIX = str(os.getpid() % 100000)
NS = (f"sdmnA{SUFFIX}", f"sdmnB{SUFFIX}")
DEV = (f"sdA{SUFFIX}", f"sdB{SUFFIX}")  # interface names: at most 15 characters
ADDR = ("10.231.7.1", "10.231.7.2")
PORT_BASE = 29600
# 100 Mbit/s: the 8.4 MB a step take ~670 ms over it. At 300 Mbit/s (~220 ms) the all-reduce after
# the last arrival was 264 ms of a 311 ms step, but with other processes on both cores the backward
# it overlaps ran as long: 98 +-90 ms exposed, within SD209's noise, and no finding (a heavily
# loaded run of 2026-12-04).
RATE = "100mbit"
RATE_GBIT = 0.1
SHIFT_NS = 50_000_000
JOB_TIMEOUT_S = 240


def _sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check)


def _why_no_namespaces() -> str | None:
    if os.geteuid() != 0:
        return "needs root to make network namespaces"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    return None


@pytest.fixture(scope="module")
def link():
    why = _why_no_namespaces()
    if why:
        pytest.skip(why)
    made = []
    try:
        for ns in NS:
            done = _sh("ip", "netns", "add", ns, check=False)
            if done.returncode:
                pytest.skip(f"the kernel refused a network namespace: {done.stderr.strip()}")
            made.append(ns)
        _sh("ip", "link", "add", DEV[0], "type", "veth", "peer", "name", DEV[1])
        for ns, dev, addr in zip(NS, DEV, ADDR):
            _sh("ip", "link", "set", dev, "netns", ns)
            _sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            _sh("ip", "-n", ns, "link", "set", dev, "up")
        probe = _sh("unshare", "--uts", "true", check=False)
        if probe.returncode:
            pytest.skip(
                f"the kernel refused a UTS namespace (a host name a node): {probe.stderr.strip()}"
            )
        yield
    finally:
        for ns in made:
            _sh("ip", "netns", "del", ns, check=False)


def _throttle(on: bool) -> str:
    """tbf on both ends (and netem's delay under it where the kernel has netem); what was set."""
    said = []
    for ns, dev in zip(NS, DEV):
        _sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)
        if not on:
            continue
        netem = _sh(
            "ip",
            "netns",
            "exec",
            ns,
            "tc",
            "qdisc",
            "add",
            "dev",
            dev,
            "root",
            "handle",
            "1:",
            "netem",
            "delay",
            "1ms",
            check=False,
        )
        parent = ["parent", "1:", "handle", "2:"] if netem.returncode == 0 else ["root"]
        _sh(
            "ip",
            "netns",
            "exec",
            ns,
            "tc",
            "qdisc",
            "add",
            "dev",
            dev,
            *parent,
            "tbf",
            "rate",
            RATE,
            "burst",
            "64kb",
            "latency",
            "100ms",
        )
        said.append(
            f"{dev}: tbf {RATE}"
            + (
                " + netem 1ms"
                if netem.returncode == 0
                else " (no netem in this kernel: no added delay)"
            )
        )
    return "; ".join(said)


_port = iter(range(PORT_BASE, PORT_BASE + 50))


def _job(out: Path, *job_args: str) -> list[Path]:
    """Both nodes' ``scaldiag profile``, at once; their run directories, node 0 first."""
    started = time.monotonic()
    port = next(_port)
    procs = []
    for k, (ns, dev) in enumerate(zip(NS, DEV)):
        profile = [
            sys.executable,
            "-m",
            "scaldiag",
            "profile",
            "-q",
            "--out",
            str(out),
            "--nnodes",
            "2",
            "--node-rank",
            str(k),
            "--rdzv-endpoint",
            f"{ADDR[0]}:{port}",
            "--nproc-per-node",
            "1",
            str(JOB),
            "--",
            "--steps",
            STEPS,
            "--batch",
            BATCH,
            *job_args,
        ]
        inner = f"hostname host{'AB'[k]} && GLOO_SOCKET_IFNAME={dev} exec " + " ".join(profile)
        procs.append(
            subprocess.Popen(
                ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c", inner],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    logs = [p.communicate(timeout=JOB_TIMEOUT_S)[0] for p in procs]
    for k, p in enumerate(procs):
        assert p.returncode == 0, f"node {k}:\n{logs[k][-3000:]}"
    print(f"{out.name}: both nodes profiled in {time.monotonic() - started:.0f} s")
    dirs = sorted(
        out.iterdir(), key=lambda d: d.name[-1]
    )  # by node rank: the time stamps may differ
    assert [d.name.endswith(f"-host{'AB'[k]}-node{k}") for k, d in enumerate(dirs)] == [
        True,
        True,
    ], dirs
    return dirs


def _report(*dirs: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "scaldiag", "report", *map(str, dirs), "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _ids(report: dict) -> list[str]:
    return [f["id"] for f in report["findings"]]


def _evidence(finding: dict, metric: str) -> dict:
    return next(e for e in finding["evidence"] if e["metric"] == metric)


@pytest.fixture(scope="module")
def plain(link, tmp_path_factory):
    _throttle(False)
    return _job(tmp_path_factory.mktemp("plain"))


@pytest.fixture(scope="module")
def throttled(link, tmp_path_factory):
    setting = _throttle(True)
    try:
        return _job(tmp_path_factory.mktemp("throttled")), setting
    finally:
        _throttle(False)


def test_a_plain_link_gives_no_finding_about_the_network(plain):
    report = _report(plain[0].parent)  # the shared --out: every node directory it holds
    assert "SD209" not in _ids(report), report["findings"]
    nodes = report["analysis"]["nodes"]
    assert [n["node"] for n in nodes] == ["hostA/node0", "hostB/node1"]
    assert all(
        n["bytes_per_step"] > 4_000_000 for n in nodes
    )  # the job's 8.4 MB of gradients, recorded
    assert report["analysis"]["matched_collectives"] >= 5


def test_a_throttled_link_is_the_top_finding_with_its_time_and_bytes(throttled):
    dirs, setting = throttled
    report = _report(*dirs)
    assert _ids(report)[:1] == ["SD209"], (setting, report["findings"])
    top = report["findings"][0]
    exposed = _evidence(top, "exposed all-reduce per step")
    assert exposed["unit"] == "ms" and exposed["value"] > 0 and exposed["spread"] is not None
    assert _evidence(top, "bytes all-reduced per step")["value"] > 4_000_000
    rate = _evidence(top, "achieved all-reduce rate over the slowest hop")["value"]
    assert rate < RATE_GBIT * 1.1, (
        f"{rate} Gbit/s over a {RATE} link ({setting})"
    )  # the link, not more


@pytest.fixture(scope="module")
def slow_input(link, tmp_path_factory):
    _throttle(False)
    return _job(
        tmp_path_factory.mktemp("slow_input"), "--slow-input-node", "1", "--slow-input-ms", "60"
    )


def test_one_nodes_slow_input_names_that_node(slow_input):
    report = _report(*slow_input)
    assert _ids(report)[:1] == ["SD210"], report["findings"]
    finding = report["findings"][0]
    assert finding["category"] == "input" and "hostB/node1" in finding["summary"], finding[
        "summary"
    ]
    assert "SD209" not in _ids(report), report["findings"]


def _shift_clock(node_dir: Path, shift_ns: int) -> None:
    """Every event of the node's traces moved by ``shift_ns``: its clock, as another machine's would
    be."""
    for f in (node_dir / "trace").rglob("*.pt.trace.json"):
        doc = json.loads(f.read_text())
        for e in doc["traceEvents"]:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = e["ts"] + shift_ns / 1e3  # Kineto's ts is in microseconds
        f.write_text(json.dumps(doc))


def test_a_shifted_clock_is_estimated_within_a_millisecond_and_the_verdict_kept(plain, tmp_path):
    """On the plain job: both nodes reach each all-reduce together, so its ends coincide as well as
    they
    can (where one node is late, its ends trail the other's by about a message: 0.77 ms measured
    once). Uncorrected, the shift would make hostB 50 ms late at every collective: SD210 would name
    it."""
    dirs = plain
    before = _report(*dirs)
    copies = [shutil.copytree(d, tmp_path / d.name) for d in dirs]
    _shift_clock(copies[1], SHIFT_NS)
    after = _report(*copies)
    offsets = {o["node"]: o["offset_ns"] for o in after["analysis"]["offsets"]}
    # The same events, one node's moved by the shift: the estimate moves by the shift, to the
    # microsecond of Kineto's timestamps (how close the unshifted estimate comes to 0 is the run's
    # noise, not asserted; the verdicts below are what a wrong estimate would change: uncorrected,
    # SD210 would name hostB).
    was = {o["node"]: o["offset_ns"] for o in before["analysis"]["offsets"]}
    assert offsets["hostB/node1"] - was["hostB/node1"] == pytest.approx(SHIFT_NS, abs=2_000), (
        offsets,
        was,
    )
    assert _ids(after) == _ids(before)
    assert [f["summary"] for f in after["findings"]] == [f["summary"] for f in before["findings"]]
    _merged_trace_is_on_one_clock(copies, tmp_path / "job_trace.json")
    late = [n["lateness_ms"]["mean"] for n in after["analysis"]["nodes"]]
    assert late == pytest.approx(
        [n["lateness_ms"]["mean"] for n in before["analysis"]["nodes"]], abs=1.0
    )


def _merged_trace_is_on_one_clock(dirs: list[Path], out: Path) -> None:
    """The merged trace (--format perfetto): both ranks' all-reduces end together again."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scaldiag",
            "report",
            *map(str, dirs),
            "--format",
            "perfetto",
            "-o",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    events = json.loads(out.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    ends: dict[str, list[float]] = {}
    for e in events:
        if e.get("name") == "gloo:all_reduce" and e.get("ph") == "X":
            ends.setdefault(names[e["pid"]].split(":")[0], []).append(e["ts"] + e["dur"])
    a, b = (sorted(v) for _, v in sorted(ends.items()))
    assert len(a) == len(b) >= 5
    diffs_us = sorted(abs(x - y) for x, y in zip(a, b))
    # Within a few ms (ends paired by order here, not by step as the merge pairs them, whose offset
    # the caller checked to 1 ms), not the 50 ms the recorded clocks say.
    assert diffs_us[len(diffs_us) // 2] < SHIFT_NS / 1e3 / 10, diffs_us


def test_a_node_given_twice_is_not_a_job(plain):
    done = subprocess.run(
        [sys.executable, "-m", "scaldiag", "report", str(plain[0]), str(plain[0])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "scaldiag:" in done.stderr
