"""Whether a job's nodes crossed a network at all."""

from __future__ import annotations


def shared_network_stack(nodes: list[dict | None]) -> str | None:
    """The note that every node ran on one kernel in one network namespace, where each node's record
    (run.json's ``node``) says which: their collectives cross that kernel's loopback, no network.
    None where any node differs or does not say (a record made before scaldiag wrote them, a kernel
    other than Linux).
    """
    said = {
        (n.get("boot_id"), n.get("net_ns")) if isinstance(n, dict) else (None, None) for n in nodes
    }
    if len(said) != 1:
        return None
    boot_id, net_ns = next(iter(said))
    if not (isinstance(boot_id, str) and boot_id and isinstance(net_ns, str) and net_ns):
        return None
    return (
        f"every node ran on one machine (kernel boot id {boot_id[:8]}...) in one network namespace"
        f" ({net_ns}): their all-reduce crosses no network, so the network between nodes (SD209) is"
        " not judged"
    )
