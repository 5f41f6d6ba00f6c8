"""SD211 CPU oversubscribed: the training job wants more busy threads than the cores it has.

When every core is busy through the steady steps and the training job's busy threads (each rank's
intra-op threads, plus its DataLoader or PyDataset worker processes) outnumber the cores left to it
(the cores it may use, less what the rest of the machine used meanwhile, in whole cores), they take
turns on the cores: the training loop waits for a core as much as for data, and an intra-op pool
waits at every op for its slowest thread. A worker count copied from another machine does this
(``num_workers=8`` on a 2-core machine ran 0.47x, issue 23), and so do PyTorch's default intra-op
threads (one per core) on cores that other work keeps busy: a PyTorch CPU script with a slow Python
``__getitem__`` on the shared 2-core machine ran several times faster with ``OMP_NUM_THREADS=1``
(docs/rules.md). No trace share names it: the step is slower everywhere.

Evidence: the host samples of the steady window (collect/host.py): the all-core busy share, with its
95% interval over the samples; the training tree's and the rest of the machine's CPU; the process
tree's size; and what the script set (training.json ``knobs``: the intra-op threads, the
DataLoader's workers, the cores the process may use). Busy means the interval's low end is at or
above ``BUSY_PCT``: Linux accounts a core busy when any task runs on it, so a core shared by many
threads reads 100% however they wait.
"""

from __future__ import annotations

from scaldiag.analyze.run import HostSummary, RunAnalysis
from scaldiag.rules.base import Evidence, Finding, RuleFacts, same_fix
from scaldiag.rules.knobs import Machine, script_workers
from scaldiag.rules.knobs import machine as machine_of
from scaldiag.rules.machine import CpuBudget, budget

BUSY_PCT = (
    90.0  # all cores busy, less the sampler's own jitter (10 Hz /proc/stat ticks: +-10% a sample)
)


class _Oversubscribed(RuleFacts):
    id = "SD211"
    title = "CPU oversubscribed: more busy threads than cores"
    category = "host_overhead"

    def check(self, run: RunAnalysis) -> Finding | None:
        host, cpu = run.host, budget(run)
        if host is None or cpu is None:
            return None
        spread = host.core_pct_mean_ci95  # NaN from one sample: no interval, no finding
        if not host.core_pct_mean - spread >= BUSY_PCT:
            return None
        m = machine_of(run)
        threads = _intra_op_threads(run, m)
        # unknown: one a rank, as before
        per_rank = threads if isinstance(threads, int) and threads > 0 else 1
        recorded = script_workers(m)
        workers = max(
            recorded * m.ranks if recorded is not None else 0, host.processes_max - m.ranks
        )
        demand = m.ranks * per_rank + workers
        # The rest of the machine holds whole cores: half a core or more of its use is a core the
        # job waits for.
        left = max(0, m.cores - round(m.other_cores))
        if demand <= max(left, m.ranks):
            return None
        # workers a rank keeps (SD101's count where it advises them)
        keep = min(workers // m.ranks, m.workers)
        fix = _fix(m, per_rank, workers, keep)
        wants = f"{m.ranks} rank(s) x {per_rank} intra-op thread(s)" + (
            f" + {workers} worker process(es)" if workers else ""
        )
        notes = _notes(host, cpu, threads, m)
        return self.finding(
            severity="high",
            summary=(
                f"the training job runs {demand} busy threads ({wants}) where {left} of its"
                f" {m.cores} cores are left to it, every core {host.core_pct_mean:.0f}% busy: its"
                " threads wait for a core"
            ),
            evidence=[
                Evidence(
                    "cores busy (mean over the steady window)",
                    round(host.core_pct_mean, 1),
                    "%",
                    threshold=BUSY_PCT,
                    spread=round(spread, 1),
                ),
                Evidence(
                    "busy threads of the training job",
                    demand,
                    "threads",
                    threshold=max(left, m.ranks),
                ),
                Evidence("cores used by the rest of the machine", round(m.other_cores, 2), "cores"),
                Evidence("processes of the training job", host.processes_max, ""),
            ],
            fix=same_fix(fix),
            notes=notes,
        )


def _intra_op_threads(run: RunAnalysis, m: Machine) -> object:
    """Each rank's intra-op threads where counted, else None (one a rank)."""
    # Counted where measured: PyTorch's pool (OMP_NUM_THREADS=1 3.4-7.3x, docs/rules.md).
    # TensorFlow's is recorded (knob_facts) but its cost on busy cores is not measured yet: one
    # a rank, as before.
    return (
        m.script.get("intra_op_threads")
        if (run.training.get("framework") or {}).get("name") == "pytorch"
        else None
    )


def _fix(m: Machine, per_rank: int, workers: int, keep: int) -> str:
    """Fewer intra-op threads and input workers where the script's own counts are over the cores'
    share (``keep`` workers a rank), else the rest of the machine's cores named."""
    fix_threads = m.threads(keep)
    parts = []
    if per_rank > fix_threads:
        parts.append(
            f"Give each rank {fix_threads} intra-op thread(s): OMP_NUM_THREADS={fix_threads} in"
            " the environment before the script starts (PyTorch:"
            f" torch.set_num_threads({fix_threads}) at its top; TensorFlow:"
            f" tf.config.threading.set_intra_op_parallelism_threads({fix_threads}) before any"
            " op runs)."
        )
    if workers // m.ranks > m.workers:
        parts.append(
            f"Run at most {m.workers} input worker(s) per rank"
            f" (DataLoader(num_workers={m.workers}),"
            f" keras.utils.PyDataset(workers={m.workers}); tf.data's AUTOTUNE sizes itself)."
        )
    if not parts:  # the script's own counts fit: the rest of the machine takes the cores
        parts.append(
            "The job's threads fit the cores; the rest of the machine takes them: run it where "
            "nothing else computes, or pin the job to cores of its own (taskset, a cpuset)."
        )
    return (
        " ".join(parts)
        + f" Here {m.cores} cores the job may use, {m.other_cores:.1f} of them used by the "
        "rest of the machine; compare the steady samples/s with the run before the change."
    )


def _notes(host: HostSummary, cpu: CpuBudget, threads: object, m: Machine) -> list[str]:
    """Who used the cores, and where the intra-op thread count came from."""
    notes = [
        f"the training processes used {cpu.training_cores:.1f} cores, the rest of the machine "
        f"{cpu.other_cores:.1f} ({host.samples} host samples)"
    ]
    if not isinstance(threads, int):
        notes.append(
            "intra-op threads counted as one a rank (not recorded, or not PyTorch's, whose cost"
            " on busy cores is the one measured)"
        )
    elif m.script.get("intra_op_source"):
        notes.append(
            f"intra-op threads from {m.script['intra_op_source']}"
            + (
                f"; the environment set {m.script['env']}"
                if m.script.get("env")
                else "; no OMP_NUM_THREADS in the environment"
            )
        )
    return notes


RULE = _Oversubscribed()
