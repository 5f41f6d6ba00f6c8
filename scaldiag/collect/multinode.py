"""Jobs that span machines: which node this ``scaldiag profile`` runs on, and the launch that joins
the others.

Every node runs its own ``scaldiag profile`` and writes its own run directory,
named by host and node rank (``<time>-<script>-<host>-node<K>``), so that
directories from several machines (or one shared ``--out`` on a network file
system) never collide and ``scaldiag report DIR DIR ...`` can merge them.

Where the node's place in the job comes from, first found wins:

- the command line: ``--nnodes N --node-rank K`` (torchrun's multi-node launch;
  ``--rdzv-endpoint HOST:PORT`` is where the nodes meet);
- SLURM (``srun``): ``SLURM_NNODES`` / ``SLURM_JOB_NUM_NODES`` and ``SLURM_NODEID``;
- TensorFlow's ``TF_CONFIG`` (``MultiWorkerMirroredStrategy``): the cluster's
  chief and workers in that order, this task's place among them;
- JAX (``jax.distributed.initialize``): ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID``.

Only the torchrun launch is started here; under the other launchers the script
joins its peers itself, as it does without scaldiag.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from scaldiag.collect import torchrun
from scaldiag.collect.env import TF_TRACE_ALL_WORKERS_ENV

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Node:
    nnodes: int
    node_rank: int
    host: str
    launcher: str  # where nnodes and node_rank came from: torchrun, slurm, tf_config, jax
    rdzv_endpoint: str | None = None  # torchrun only: HOST:PORT
    nproc_per_node: int | None = None  # torchrun only
    # The kernel this node runs on (its boot id) and its network stack (the network namespace):
    # nodes that share both talk through that kernel's loopback, over no network (SD209 is not
    # judged then).
    boot_id: str | None = None
    net_ns: str | None = None

    def fields(self) -> dict:
        """What run.json says of the node (``node``), read back by the merge."""
        return asdict(self)


class NodeError(ValueError):
    """The node's place in the job is given inconsistently."""


def detect(
    environ,
    nnodes: int | None = None,
    node_rank: int | None = None,
    rdzv_endpoint: str | None = None,
    nproc_per_node: int | None = None,
    host: str | None = None,
) -> Node | None:
    """This node's place in a multi-node job, or None for a job on one machine."""
    host = host or socket.gethostname()
    if nnodes is not None or node_rank is not None or rdzv_endpoint is not None:
        return replace(
            _torchrun(nnodes, node_rank, rdzv_endpoint, nproc_per_node, host), **kernel()
        )
    for found in (_slurm(environ), _tf_config(environ), _jax(environ)):
        if found is not None:
            nodes, rank, launcher = found
            return Node(nodes, rank, host, launcher, **kernel()) if nodes > 1 else None
    return None


def kernel() -> dict:
    """This process's kernel and network namespace, where Linux says (None elsewhere)."""
    try:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:64] or None
    except OSError:
        boot_id = None
    try:
        net_ns = os.readlink("/proc/self/ns/net")[:64]  # "net:[4026531840]"
    except OSError:
        net_ns = None
    return {"boot_id": boot_id, "net_ns": net_ns}


def _torchrun(nnodes, node_rank, endpoint, nproc, host) -> Node:
    if nnodes is None or node_rank is None or not endpoint:
        raise NodeError(
            "a multi-node launch needs --nnodes N, --node-rank K and --rdzv-endpoint HOST:PORT"
            " together"
        )
    if not 0 <= node_rank < nnodes:
        raise NodeError(
            f"--node-rank {node_rank} is not one of the {nnodes} nodes (0..{nnodes - 1})"
        )
    address, _, port = endpoint.rpartition(":")
    if not address or not port.isdigit() or not 0 < int(port) < 65536:
        raise NodeError(f"--rdzv-endpoint must be HOST:PORT, not {endpoint!r}")
    if not nproc:
        raise NodeError("a multi-node launch needs --nproc-per-node M (processes on this node)")
    return Node(nnodes, node_rank, host, "torchrun", endpoint, nproc)


def _int(value) -> int | None:
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else None


def _slurm(environ) -> tuple[int, int, str] | None:
    nodes = _int(environ.get("SLURM_NNODES") or environ.get("SLURM_JOB_NUM_NODES"))
    rank = _int(environ.get("SLURM_NODEID"))
    return (nodes, rank, "slurm") if nodes and rank is not None and rank < nodes else None


def _tf_config(environ) -> tuple[int, int, str] | None:
    """TF_CONFIG: the chief (if any) then the workers, as MultiWorkerMirroredStrategy numbers its
    tasks."""
    try:
        config = json.loads(environ.get("TF_CONFIG") or "null")
        cluster, task = config["cluster"], config["task"]
        order = [
            (kind, i) for kind in ("chief", "worker") for i in range(len(cluster.get(kind) or []))
        ]
        return len(order), order.index((task["type"], int(task["index"]))), "tf_config"
    except (TypeError, KeyError, ValueError, AttributeError, json.JSONDecodeError):
        return None


def tf_task_untraced(environ) -> str | None:
    """Why this TF multi-worker task takes no profiler trace, or None where it may.

    TensorFlow 2.21's profiler, stopped in a task that is not the coordination service's leader (the
    chief, else worker 0), aborts that process now and then (a double free in
    TraceMeRecorder::Consume; docs/multinode.md, "Known fault"); the leader never did. A broken
    training run costs the user more than a missing trace, so only the leader is traced unless
    TF_TRACE_ALL_WORKERS_ENV is 1."""
    found = _tf_config(environ)
    if found is None or found[1] == 0 or environ.get(TF_TRACE_ALL_WORKERS_ENV) == "1":
        return None
    return (
        f"not traced: task {found[1]} of a TF multi-worker job (TensorFlow's profiler can abort a"
        f" task that is not the chief when it stops; {TF_TRACE_ALL_WORKERS_ENV}=1 traces it anyway)"
    )


def _jax(environ) -> tuple[int, int, str] | None:
    nodes, rank = _int(environ.get("JAX_NUM_PROCESSES")), _int(environ.get("JAX_PROCESS_ID"))
    return (nodes, rank, "jax") if nodes and rank is not None and rank < nodes else None


def run_dir_label(stem: str, node: Node) -> str:
    """The node's run directory name after its time stamp: ``<script>-<host>-node<K>``."""
    host = _UNSAFE.sub("_", node.host)[:64] or "host"
    return f"{stem}-{host}-node{node.node_rank}"


def torchrun_command(node: Node, script: str, script_args: list[str]) -> list[str]:
    """torchrun's multi-node launch, each rank running the bootstrap (rank R > 0 records in
    RUN_DIR/rank<R>)."""
    return torchrun.command(script, script_args, node.nproc_per_node, node)


def uncaptured_torchrun(node: Node, script: str, script_args: list[str]) -> list[str]:
    """The same launch without capture (the run directory could not be made)."""
    return torchrun.command(script, script_args, node.nproc_per_node, node, capture=False)


# The intra-node reference: gloo all-reduces of the job's gradient bytes between two local
# processes, after the script. Five timed after two warm-up ones: enough for a median; each costs
# tens of ms.
INTRA_NODE_REPEATS = 5
INTRA_NODE_TIMEOUT_S = 120


def record_intra_node(run_dir, timeout_s: float = INTRA_NODE_TIMEOUT_S) -> str | None:
    """Measure what the job's all-reduce takes inside this node (``torch_allreduce``) and add it to
    run.json as ``intra_node_allreduce``; returns why it was not measured, or None."""
    import subprocess
    from pathlib import Path

    from scaldiag.record import run_json
    from scaldiag.record.rundir import INVENTORY_JSON, read_json

    gpus = read_json(Path(run_dir), INVENTORY_JSON).get("gpus")
    if (
        isinstance(gpus, list) and gpus
    ):  # NCCL over NVLink/PCIe inside the node, not gloo over loopback
        return (
            "a GPU node: its intra-node link is NVLink or PCIe, not measured here"
            " (docs/multinode.md)"
        )
    nbytes = _parameter_bytes(Path(run_dir))
    if not nbytes:
        return "no gradient bytes recorded (training.json parameter_bytes)"
    try:
        # The job's interface joins the nodes; the reference stays inside this one.
        env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "scaldiag.collect.frameworks.torch_allreduce",
                str(nbytes),
                str(INTRA_NODE_REPEATS),
            ],
            capture_output=True,
            timeout=timeout_s,
            check=False,
            env=env,
        )
        result = json.loads(done.stdout or b"null")
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return f"the intra-node all-reduce could not be measured ({type(exc).__name__})"
    if not isinstance(result, dict) or not result.get("times_ns"):
        return "the intra-node all-reduce could not be measured (gloo over loopback failed)"
    try:
        run_json.update(Path(run_dir), intra_node_allreduce=result)
    except OSError as exc:
        return f"cannot write run.json ({exc.strerror or exc})"
    return None


def _parameter_bytes(run_dir) -> int | None:
    from scaldiag.record.rundir import TRAINING_JSON, read_json

    for d in [run_dir, *sorted(run_dir.glob("rank*"))]:
        try:
            value = read_json(d, TRAINING_JSON).get("parameter_bytes")
        except (OSError, ValueError):
            continue
        if isinstance(value, int) and value > 0:
            return value
    return None
