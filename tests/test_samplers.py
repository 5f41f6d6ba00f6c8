"""Samplers with a FAKE NVML (this machine has no GPU) and the real psutil."""

import os
import signal
import subprocess
import sys
import time

import pytest
from fake_nvml import PCIE_BYTES_PER_S, FakeNvml

from scaldiag.analyze.run import gpu_summaries, host_summary
from scaldiag.collect.samplers import Samplers, visible_gpu_indices
from scaldiag.record.rundir import GPU_SAMPLES, HOST_SAMPLES, read_json, read_jsonl


def sample_for(tmp_path, seconds=0.5, **fake):
    samplers = Samplers(tmp_path, os.getpid(), nvml=FakeNvml(**fake), env={})
    samplers.start()
    time.sleep(seconds)
    stats = samplers.stop()
    return samplers, stats


def test_gpu_rows_counters_and_summary(tmp_path):
    samplers, stats = sample_for(
        tmp_path, 1.2
    )  # the PCIe counters of a quiet link: read at 0, 50 ms, then 1 s
    rows = read_jsonl(tmp_path / GPU_SAMPLES)
    assert {r["gpu"] for r in rows} == {0, 1}
    # The rate it reached is the machine's (20 Hz targeted; a loaded 2-core machine misses ticks):
    # only that it ticked and says how often. Which tick reads what is
    # test_each_tick_reads_what_its_tier_says_...'s, on the test's clock.
    assert stats["nvml"]["ticks"] > 0 and stats["nvml"]["hz"] > 0
    util = [r for r in rows if "util_pct" in r]
    pcie = [r for r in rows if "pcie_tx_bytes" in r]
    clocked = [r for r in rows if "sm_clock_mhz" in r]
    # PCIe at 1 Hz on a quiet link, utilisation at 5 Hz, clocks at 10 Hz: utilisation on clocked
    # rows only
    assert pcie and util and all("sm_clock_mhz" in r for r in util) and len(util) <= len(clocked)
    assert all("power_mw" in r for r in clocked)
    assert len(clocked) + len(pcie) >= len(
        rows
    )  # a row is a 10 Hz tick's, or a PCIe read's between them
    gpu0, gpu1 = gpu_summaries(rows, read_json(tmp_path, "inventory.json"), None)
    assert gpu0.pcie_tx_bytes_per_s == pytest.approx(PCIE_BYTES_PER_S, rel=0.05)
    assert gpu0.pcie_rx_bytes_per_s == pytest.approx(PCIE_BYTES_PER_S / 2, rel=0.05)
    assert gpu1.mem_used_max_bytes == 2 * 2**30
    assert gpu0.clock_event_reasons == ["sw_power_cap"]
    assert gpu0.power_w == pytest.approx(300.0)
    assert samplers.missing == []


def test_wrapping_pcie_counters_are_unwrapped(tmp_path):
    sample_for(tmp_path, 1.2, pcie_wraps=True)
    rows = [r for r in read_jsonl(tmp_path / GPU_SAMPLES) if r["gpu"] == 0 and "pcie_tx_bytes" in r]
    counts = [r["pcie_tx_bytes"] for r in rows]
    assert counts == sorted(counts) and counts[-1] > 2**32  # wrapped at least once, still monotonic
    gpu0, _ = gpu_summaries(read_jsonl(tmp_path / GPU_SAMPLES), {}, None)
    assert gpu0.pcie_tx_bytes_per_s == pytest.approx(PCIE_BYTES_PER_S, rel=0.05)


def test_pcie_link_is_read_while_sampling(tmp_path):
    sample_for(tmp_path, 0.3)
    rows = [r for r in read_jsonl(tmp_path / GPU_SAMPLES) if "pcie_gen" in r]
    assert rows and {(r["pcie_gen"], r["pcie_width"]) for r in rows} == {
        (4, 16)
    }  # the fake's link: Gen4 x16
    gpu0, _ = gpu_summaries(read_jsonl(tmp_path / GPU_SAMPLES), {}, None)
    assert (gpu0.pcie_gen_max_seen, gpu0.pcie_width_max_seen) == (4, 16)


def test_inventory(tmp_path):
    sample_for(tmp_path, 0.05)
    inventory = read_json(tmp_path, "inventory.json")
    gpu0, _ = inventory["gpus"]
    assert gpu0["uuid"] == "GPU-fake-0" and gpu0["nvlink_active_links"] == 2
    assert inventory["topology"] == [
        {"gpus": [0, 1], "common_ancestor": 40, "path": "same NUMA node"}
    ]
    assert inventory["logical_to_nvml_index"] == [0, 1]
    assert (gpu0["pcie_gen_current"], gpu0["pcie_gen_max"]) == (4, 5)


def test_unsupported_reads_are_dropped_and_reported(tmp_path):
    samplers, _ = sample_for(tmp_path, 0.3, unsupported=(197,), util_raises=True)
    rows = read_jsonl(tmp_path / GPU_SAMPLES)
    assert rows and all("pcie_tx_bytes" not in r and "util_pct" not in r for r in rows)
    assert any("pcie_rx_bytes" in r for r in rows)
    assert any("pcie_tx_bytes" in m for m in samplers.missing)
    assert any("util_pct" in m for m in samplers.missing)


def test_no_nvml_is_missing_evidence_not_an_error(tmp_path):
    class Broken:
        def nvmlDeviceGetCount(self):
            raise RuntimeError("NVML Shared Library Not Found")

    samplers = Samplers(tmp_path, os.getpid(), nvml=Broken(), env={})
    samplers.start()
    time.sleep(0.25)
    samplers.stop()
    assert samplers.nvml is None and "nvml" in samplers.missing[0]
    assert read_jsonl(tmp_path / HOST_SAMPLES)  # the host is still sampled


@pytest.mark.parametrize("proc", ["/proc", "/nonexistent"])
def test_host_samples_see_a_busy_process_tree(tmp_path, monkeypatch, proc):
    # A parent that starts a child which burns one core: the tree is sampled (on Linux from /proc,
    # looked at once a second; without /proc with psutil, rescanned once a second).
    from scaldiag.collect import host

    monkeypatch.setattr(host, "PROC", proc)
    busy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import subprocess, sys; subprocess.run([sys.executable, '-c', "
                "'import time\\nend = time.time() + 2.5\\nwhile time.time() < end: pass'])"
            ),
        ]
    )
    samplers = Samplers(tmp_path, busy.pid, nvml=FakeNvml(gpus=0), env={})
    samplers.start()
    time.sleep(2.2)
    samplers.stop()
    busy.wait()
    rows = read_jsonl(tmp_path / HOST_SAMPLES)
    assert len(rows) >= 2 and all(a["t_ns"] < b["t_ns"] for a, b in zip(rows, rows[1:]))
    late = [r for r in rows if r["processes"] == 2]
    assert late, "the child process was never found"
    # The child's CPU is counted in the tree's. How much of a core it got depends on the machine's
    # load (the 2-core machine is shared), so the share is not compared with a figure, only seen.
    assert max(r["proc_cpu_pct"] for r in late) > 0
    assert all(0 <= r["proc_cpu_pct"] <= 100 * (os.cpu_count() or 1) * 1.05 for r in rows)
    summary = host_summary(rows, None)
    assert summary.busiest_core_pct > 0
    assert type(samplers.host._tree).__name__ == ("ProcTree" if proc == "/proc" else "PsutilTree")
    assert isinstance(samplers.host._cores, host.ProcCores) == (proc == "/proc")
    assert all(
        r["proc_threads"] >= r["processes"] and r["proc_rss_bytes"] > 1e6 * r["processes"]
        for r in rows
    )


def test_the_tree_keeps_its_members_stat_files_open_and_a_member_that_ended_is_dropped():
    # Each member's /proc/PID/stat stays open and is read again from its start; once the process has
    # ended and been reaped the read fails (the descriptor holds on to that process, not the PID).
    from scaldiag.collect import host

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        tree = host.ProcTree(host.Descendants.of(os.getpid()))
        _, _, _, processes = tree.totals()
        assert child.pid in tree._files and processes >= 2
        kept = tree._files[child.pid]
        assert (
            tree.totals()[3] == processes and tree._files[child.pid] is kept
        )  # the same file, read again
    finally:
        child.kill()
        child.wait()
    assert tree.totals()[3] == processes - 1
    assert child.pid not in tree._files and kept.fd == -1
    assert (
        child.pid not in tree._descendants.members
    )  # for good: a process given its PID is another one


def test_per_core_busy_share_is_psutils_reading_of_proc_stat(tmp_path, monkeypatch):
    # psutil's cpu_percent(percpu=True): busy = user+nice+system+irq+softirq+steal (guest is inside
    # user), idle = idle+iowait, each delta at least 0 (a counter that went back), rounded to 0.1.
    from scaldiag.collect import host

    monkeypatch.setattr(host, "PROC", str(tmp_path))
    stat = tmp_path / "stat"
    fields = "user nice system idle iowait irq softirq steal guest guest_nice".split()

    def write(*cores):
        lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
        lines += [
            f"cpu{i} " + " ".join(str(c.get(f, 0)) for f in fields) for i, c in enumerate(cores)
        ]
        stat.write_text("\n".join([*lines, "intr 12 3", "ctxt 9", ""]))

    write(
        {"user": 100, "idle": 100, "guest": 50}, {"idle": 10, "iowait": 10}, {"steal": 5, "idle": 5}
    )
    cores = host.ProcCores()
    write(
        {"user": 130, "system": 10, "irq": 5, "softirq": 5, "idle": 150, "iowait": 50, "guest": 80},
        {"idle": 10, "iowait": 10},
        {"steal": 3, "idle": 8},
    )
    assert cores() == [33.3, 0.0, 0.0]  # 50 busy of 150; no tick at all; a counter that went back
    write(
        {"user": 140, "system": 10, "irq": 5, "softirq": 5, "idle": 160, "iowait": 45, "guest": 80},
        {"idle": 10, "iowait": 10},
        {"steal": 3, "idle": 8},
    )
    assert cores()[0] == 50.0  # iowait went back 5: that field counts 0, not -5 against idle's +10
    write({"user": 130}, {"idle": 10})  # a core went offline
    assert cores() == [0.0, 0.0]
    write(*[{"user": 1, "idle": 1}] * 3000)  # /proc/stat longer than one read asks for (3000 cores)
    many = host.ProcCores()
    write(*[{"user": 2, "idle": 4}] * 3000)
    assert stat.stat().st_size > 1 << 16 and many() == [25.0] * 3000
    stat.write_text("garbage")
    assert not isinstance(host.ProcCores.or_psutil(), host.ProcCores)


@pytest.mark.parametrize(
    "value,expected", [(None, None), ("0,1", [0, 1]), ("1", [1]), ("", []), ("GPU-abc", None)]
)
def test_visible_devices(value, expected):
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    assert visible_gpu_indices(env) == expected


def test_samples_reach_the_disk_within_a_second_while_sampling(tmp_path):
    """A run killed at any moment keeps all but the last second of its samples."""
    from scaldiag.collect.samplers import FLUSH_MAX_DELAY_S

    samplers = Samplers(tmp_path, os.getpid(), nvml=FakeNvml(), env={})
    samplers.start()
    try:
        time.sleep(2.5)
        read_ns = time.time_ns()
        on_disk_gpu = read_jsonl(tmp_path / GPU_SAMPLES)  # read while the writers are still open
        on_disk_host = read_jsonl(tmp_path / HOST_SAMPLES)
    finally:
        samplers.stop()
    assert on_disk_gpu and on_disk_host
    final = read_jsonl(tmp_path / GPU_SAMPLES)
    assert final[: len(on_disk_gpu)] == on_disk_gpu  # whole rows, in order
    # What was sampled before the read but not yet on disk is the last flush delay's rows, however
    # slowly the loaded machine ran the sampler: the writer flushes at the first row past the delay.
    # (The slack: a row is stamped when sampled, a moment before it is written.)
    newest_ns = on_disk_gpu[-1]["t_ns"]
    pending = [r["t_ns"] for r in final[len(on_disk_gpu) :] if r["t_ns"] < read_ns]
    assert all(t - newest_ns <= (FLUSH_MAX_DELAY_S + 0.5) * 1e9 for t in pending), (
        newest_ns,
        pending,
    )


class _Rows:
    def __init__(self):
        self.rows = []

    def write_many(self, rows):
        self.rows.extend(rows)


class _ClockedNvml(FakeNvml):
    """A fake GPU whose counters count on the test's clock, so a tick loop can stand for hours."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.now_s = 0.0

    def elapsed_s(self):
        return self.now_s


def _ticked(nvml, ticks, sampler=None):
    from scaldiag.collect.nvml import PERIOD_S, NvmlSampler

    writer = _Rows()
    sampler = sampler or NvmlSampler(nvml, writer)
    sampler._writer = writer
    sampler.clock_ns = lambda: int(nvml.now_s * 1e9)
    for _ in range(ticks):
        sampler._tick()
        nvml.now_s += PERIOD_S
    return writer.rows


@pytest.mark.parametrize("fake", [{}, {"unsupported": (186,)}, {"util_raises": True}])
def test_each_tick_reads_what_its_tier_says_in_a_fixed_key_order(fake):
    from scaldiag.collect.nvml import CALLS, FIELDS, PCIE_KEYS, PERIOD_S, ROW_EVERY

    rows = _ticked(
        _ClockedNvml(gpus=3, **fake), 401
    )  # two cycles of the slowest tier, and one tick more
    dropped = (
        {"power_mw"}
        if fake.get("unsupported")
        else {"util_pct"}
        if fake.get("util_raises")
        else set()
    )
    ticks = {}
    for row in rows:
        tick = round(row["t_ns"] / 1e9 / PERIOD_S)
        ticks.setdefault(tick, []).append(row["gpu"])
        fields = [k for k, _, _, every in FIELDS if tick % every == 0 and k not in dropped]
        pcie = [k for k in PCIE_KEYS if k in row]
        calls = [k for k, every in CALLS if tick % every == 0 and k not in dropped]
        assert list(row) == ["t_ns", "gpu", *fields, *pcie, *calls], (tick, row)
        assert tick % ROW_EVERY == 0 or pcie  # between the 10 Hz rows, only PCIe reads make a row
    assert all(ticks[t] == [0, 1, 2] for t in range(0, 401, ROW_EVERY))


@pytest.mark.parametrize(
    "bytes_per_s,reads",
    [
        (
            0.0,
            2 + 9,
        ),  # idle: the first two reads learn the rate, then once a second (every 20 ticks)
        (1e9, 2 + 9),  # 1 GB/s: a quarter wrap takes 1.07 s, so still once a second
        (8e9, 2 + 198 // 2),  # 8 GB/s: a quarter wrap in 134 ms, every 2 ticks
        (40e9, 200),  # 40 GB/s, near PCIe Gen5 x16: every tick (50 ms; one wrap takes 107 ms)
    ],
)
def test_pcie_counters_are_read_as_often_as_their_traffic_needs(bytes_per_s, reads):
    nvml = _ClockedNvml(gpus=2, pcie_bytes_per_s=bytes_per_s, pcie_wraps=True)
    rows = _ticked(nvml, 200)
    for gpu in (0, 1):
        pcie = [r for r in rows if r["gpu"] == gpu and "pcie_tx_bytes" in r]
        assert abs(len(pcie) - reads) <= 1, (gpu, len(pcie))
        counts = [r["pcie_tx_bytes"] for r in pcie]
        assert counts == sorted(counts)  # unwrapped: the fake's 32-bit counter wraps at these rates
        if bytes_per_s:
            span_s = (pcie[-1]["t_ns"] - pcie[0]["t_ns"]) / 1e9
            assert (counts[-1] - counts[0]) / span_s == pytest.approx(bytes_per_s, rel=1e-6)


def test_the_pcie_read_rate_follows_the_traffic_both_ways():
    from scaldiag.collect.nvml import NvmlSampler

    def reads(rows):
        return sum("pcie_tx_bytes" in r for r in rows)

    nvml = _ClockedNvml(gpus=1, pcie_bytes_per_s=0.0)
    sampler = NvmlSampler(nvml, _Rows())
    assert reads(_ticked(nvml, 100, sampler)) <= 2 + 5  # quiet: once a second after the first two
    nvml.pcie_bytes_per_s, nvml.t0 = 40e9, nvml.now_s  # traffic starts
    assert (
        reads(_ticked(nvml, 100, sampler)) >= 100 - 21
    )  # every tick, after at most one slow interval
    nvml.pcie_bytes_per_s = 0.0
    assert reads(_ticked(nvml, 100, sampler)) <= 1 + 5  # back to once a second


def test_the_busier_pcie_direction_sets_the_read_rate():
    from scaldiag.collect.nvml import NvmlSampler

    class TxHeavy(_ClockedNvml):
        def nvmlDeviceGetFieldValues(self, handle, fields):
            out = super().nvmlDeviceGetFieldValues(handle, fields)
            for (field_id, _), value in zip(fields, out):
                if field_id == 198:  # RX counts far higher than TX but no longer moves
                    value.value.uiVal = value.value.ullVal = 4_000_000_000
            return out

    nvml = TxHeavy(gpus=1, pcie_bytes_per_s=40e9, pcie_wraps=False)
    rows = _ticked(nvml, 60, NvmlSampler(nvml, _Rows()))
    assert sum("pcie_tx_bytes" in r for r in rows) >= 58


def test_pcie_every_is_a_quarter_wrap_at_the_rate_seen():
    from scaldiag.collect.nvml import PCIE_SLOWEST_EVERY, PERIOD_S, WRAP_GUARD_BYTES, pcie_every

    assert pcie_every(None) == 1 and pcie_every(0.0) == PCIE_SLOWEST_EVERY
    assert pcie_every(1e12) == 1
    for rate in (1e8, 2e9, 5e9, 1e10, 3e10):
        every = pcie_every(rate)
        assert 1 <= every <= PCIE_SLOWEST_EVERY
        assert (
            every in (1, PCIE_SLOWEST_EVERY)
            or rate * every * PERIOD_S <= WRAP_GUARD_BYTES < rate * (every + 1) * PERIOD_S
        )


def test_throttle_counters_are_recorded_as_cumulative_nanoseconds():
    rows = _ticked(_ClockedNvml(gpus=1), 401)
    counted = [r for r in rows if "throttle_sw_power_cap_ns" in r]
    assert len(counted) == 3  # ticks 0, 200, 400: every 10 s
    assert [r["throttle_sw_power_cap_ns"] for r in counted] == pytest.approx(
        [0, 0.5e9 * 10, 0.5e9 * 20], abs=2
    )


def test_descendants_join_as_they_appear_and_leave_as_they_end():
    # A child that starts a grandchild after the tree was first read: both join from the new PIDs
    # in /proc, and both leave when they end; a process that is not a descendant does not join.
    from scaldiag.collect.host import Descendants

    tree = Descendants.of(
        os.getpid()
    )  # (earlier tests may have left processes of their own: only ours count)
    assert tree is not None and tree.update()[0] == os.getpid()
    # an orphan: its parent (our child) ends before the tree is looked at, so it is no descendant
    # now
    orphan = int(
        subprocess.run(
            [
                sys.executable,
                "-c",
                (
                    "import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', 'import"
                    " time; time.sleep(5)'], stdout=subprocess.DEVNULL,"
                    " stderr=subprocess.DEVNULL).pid)"
                ),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    )
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import subprocess, sys, time; "
                "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1.5)']); "
                "print(g.pid, flush=True); g.wait()"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    grandchild = int(child.stdout.readline())
    members = tree.update()
    assert members[0] == os.getpid() and child.pid in members and grandchild in members
    assert orphan not in members and os.path.exists(f"/proc/{orphan}")
    child.wait()
    members = tree.update()
    assert members[0] == os.getpid() and child.pid not in members and grandchild not in members
    os.kill(orphan, signal.SIGKILL)


def test_descendants_find_a_child_whose_pid_wrapped_below_its_parents(monkeypatch):
    # PIDs wrap around: a grandchild may have a smaller PID than its parent in the same look.
    from scaldiag.collect import host

    procs = {1000: 1}
    monkeypatch.setattr(host, "_pids", lambda: set(procs))
    monkeypatch.setattr(host, "_parent", lambda pid: procs.get(pid, -1))
    tree = host.Descendants.of(1000)
    procs.update(
        {300: 5000, 5000: 1000, 301: 7}
    )  # 5000 is the child, 300 its child, 301 a stranger's
    assert tree.update() == [1000, 5000, 300]
