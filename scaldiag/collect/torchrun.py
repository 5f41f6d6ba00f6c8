"""The one place a torchrun launch is spelled: ``profile --nproc-per-node``, a multi-node job, and
the same launches without capture (when no run directory could be made).

Each rank runs scaldiag's bootstrap (``-m scaldiag.collect.bootstrap SCRIPT ARGS``) unless
``capture`` is off, when it runs the script itself, as the user's own torchrun would.
"""

from __future__ import annotations

import sys

BOOTSTRAP = ("-m", "scaldiag.collect.bootstrap")
# torchrun's static rendezvous: node rank 0 hosts the store at the endpoint, the others connect.
# With the node rank given, no elastic matching of the endpoint to this machine's names is needed
# (c10d's matching fails where the host has a name of its own but no resolver entry: a network
# namespace).
RDZV_BACKEND = "static"


def arguments(
    script: str, script_args: list[str], nproc_per_node: int, node=None, capture: bool = True
) -> list[str]:
    """torchrun's own arguments (after ``python -m torch.distributed.run``). ``node``: a
    ``multinode.Node`` for a job over machines, else ``--standalone`` on this one."""
    if node is None:
        where = ["--standalone"]
    else:
        host, _, port = node.rdzv_endpoint.rpartition(":")
        where = [
            f"--nnodes={node.nnodes}",
            f"--node-rank={node.node_rank}",
            f"--rdzv-backend={RDZV_BACKEND}",
            f"--rdzv-endpoint={node.rdzv_endpoint}",
            f"--master-addr={host}",
            f"--master-port={port}",
        ]
    runs = [*BOOTSTRAP, script] if capture else [script]
    return [*where, f"--nproc-per-node={nproc_per_node}", *runs, *script_args]


def command(
    script: str, script_args: list[str], nproc_per_node: int, node=None, capture: bool = True
) -> list[str]:
    """The whole command line: ``python -m torch.distributed.run ARGUMENTS``."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *arguments(script, script_args, nproc_per_node, node, capture),
    ]
