"""SD209 inter-node link: the all-reduce between machines is on the critical path.

In a job over several nodes every data-parallel step all-reduces the
gradients across the network between them, usually far slower than the links
inside a node (NVLink, PCIe, shared memory). Measured per step on each node:
the collectives' time after their last rank arrived (the transfer, not a wait
for a late peer: SD210 names those) and the *exposed* time the step pays for
it: from the last rank's last hand-over (its backward done) to the end of the
step's collectives, when no rank can compute.
Nodes whose records say they ran on one kernel in one network namespace talk
over its loopback: no network, nothing to judge (analyze/nodes.shared_network_stack).
The slowest hop is the node whose link time is longest. Fixes move fewer
bytes over the network (compression, a larger batch per all-reduce), reduce
inside each node first (hierarchical all-reduce), or tune the transport.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scaldiag.analyze.nodes import JobAnalysis, NodeSummary
from scaldiag.rules.base import Evidence, Finding, RuleFacts, Speedup, ms_evidence

# As SD103 (collective-bound): 10% of the step is where overlap or compression starts to pay in
# data-parallel tuning guides; 25% means communication rivals compute. Compared with the low end of
# the exposed share's 95% interval, so a noisy step never raises it.
MODERATE_PCT = 10.0
HIGH_PCT = 25.0
# Gradient compression to fp16/bf16 halves the bytes over the link (DDP's fp16/bf16 compress hooks).
COMPRESSED_BYTES_FRACTION = 0.5

FIX = {
    "pytorch": (
        "Send fewer bytes between the nodes and overlap them: compress DDP's gradients"
        " (model.register_comm_hook(None,"
        " torch.distributed.algorithms.ddp_comm_hooks.default_hooks.fp16_compress_hook), or"
        " powerSGD_hook for more); all-reduce once per several micro-batches (model.no_sync());"
        " larger buckets so fewer, bigger messages cross the network"
        " (DistributedDataParallel(model, bucket_cap_mb=100)); with several GPUs a node, reduce"
        " inside the node first (hierarchical all-reduce: NCCL does it with NCCL_ALGO=Tree; check"
        " the NIC NCCL uses with NCCL_DEBUG=INFO, NCCL_SOCKET_IFNAME / NCCL_IB_HCA,"
        " NCCL_NSOCKS_PERTHREAD=4 NCCL_SOCKET_NTHREADS=2 on TCP); on gloo, GLOO_SOCKET_IFNAME=<the"
        " fast interface>."
    ),
    "tensorflow": (
        "MultiWorkerMirroredStrategy(communication_options=tf.distribute.experimental.CommunicationOptions(bytes_per_pack=50"
        " * 1024 * 1024,"
        " implementation=tf.distribute.experimental.CommunicationImplementation.NCCL)) packs"
        " gradients into fewer messages; all-reduce fp16 gradients (mixed precision); a larger"
        " per-replica batch or gradient accumulation all-reduces less often."
    ),
    "jax": (
        "Shard so the largest all-reduce stays inside a node (a mesh with the data axis across"
        " nodes and the model axis inside), all-reduce bf16 gradients, accumulate micro-batches"
        " (optax.MultiSteps), and let XLA overlap it"
        " (XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true)."
    ),
}


@dataclass(frozen=True)
class _Network:
    """One node's step and the network's part of it, on the untraced step's scale."""

    step_ms: float  # the steady (untraced) step where recorded, else the traced one
    inflation: (
        float  # traced step / steady step: the tracer's slowdown, divided out of traced times
    )
    exposed_ms: float
    exposed_ci_ms: float
    link_ms: float
    intra_ms: float | None  # the same all-reduce inside the node (measured), None: unknown
    network_ms: float  # the exposed time the network adds over the intra-node all-reduce
    network_low_ms: float  # ... from the low end of the exposed time's 95% interval


def _network(node: NodeSummary, fallback_intra_ms: float | None) -> _Network | None:
    steady = node.steady_step_ms
    step = steady.mean if steady is not None and steady.n and steady.mean > 0 else node.step_ms.mean
    if not step > 0 or node.exposed_ms.n == 0:
        return None
    inflation = max(1.0, node.step_ms.mean / step) if step > 0 else 1.0
    exposed, link = node.exposed_ms.mean / inflation, node.link_ms.mean / inflation
    ci = node.exposed_ms.ci95 / inflation if math.isfinite(node.exposed_ms.ci95) else exposed
    own = node.intra_node_ms is not None and node.intra_node_ms.n
    intra = node.intra_node_ms.p50 if own else fallback_intra_ms
    excess = link - intra if intra is not None else math.inf
    # Beyond the noise: the link's low end against the reference's slow calls. The reference is
    # timed after the script, under another load; on a plain veth link under load its median alone
    # let the network's part clear the threshold (tests/test_multinode.py).
    link_ci = node.link_ms.ci95 / inflation if math.isfinite(node.link_ms.ci95) else link
    intra_high = max(node.intra_node_ms.p90, intra) if own else intra
    excess_low = link - link_ci - intra_high if intra is not None else math.inf
    return _Network(
        step,
        inflation,
        exposed,
        ci,
        link,
        intra,
        max(0.0, min(exposed, excess)),
        max(0.0, min(exposed - ci, excess_low)),
    )


class _InterNodeLink(RuleFacts):
    id = "SD209"
    title = "The network between nodes holds up every step"
    category = "collective"

    def check(self, job: JobAnalysis) -> Finding | None:
        if len(job.nodes) < 2 or not job.matched_collectives or job.one_network_stack:
            return None
        own = [
            n.intra_node_ms.p50
            for n in job.nodes
            if n.intra_node_ms is not None and n.intra_node_ms.n
        ]
        # a node that measured none: the others'
        fallback = float(sorted(own)[len(own) // 2]) if own else None
        measured = ((n, m) for n in job.nodes if (m := _network(n, fallback)) is not None)
        # The node that pays most, and the slowest hop: a job's nodes are made one at a time
        # (analyze/nodes.NodeTable), so neither a list of them nor of their figures is held.
        found = _first_max(
            measured, lambda p: p[1].network_low_ms / p[1].step_ms, lambda p: p[1].link_ms
        )
        if found is None:
            return None
        (node, m), (slowest, ms) = found
        low_pct, pct = 100 * m.network_low_ms / m.step_ms, 100 * m.network_ms / m.step_ms
        if low_pct < MODERATE_PCT:
            return None
        return self.finding(
            severity="high" if low_pct >= HIGH_PCT else "medium",
            summary=(
                f"the all-reduce across nodes is exposed for {m.exposed_ms:.1f} ms of each"
                f" {m.step_ms:.1f} ms step on {node.node}"
            )
            + (f", {node.bytes_per_step / 1e6:.1f} MB a step" if node.bytes_per_step else "")
            + (
                f"; inside one node the same all-reduce takes {m.intra_ms:.1f} ms"
                if m.intra_ms is not None
                else ""
            )
            + f"; slowest hop: {slowest.node} ({ms.link_ms:.1f} ms after the last rank arrived)",
            evidence=_evidence(node, m, slowest, ms, pct),
            fix=FIX,
            notes=_notes(node, m),
            predicted_speedup=Speedup(
                _gain(m.step_ms, m.network_ms),
                _gain(m.step_ms, m.network_low_ms),
                _gain(m.step_ms, m.network_ms),
                f"no network cost over the intra-node all-reduce: {m.step_ms:.1f} / "
                f"({m.step_ms:.1f} - {m.network_ms:.1f}) ms",
            ),
            forecast=_forecast(node, m),
        )


def _first_max(items, *keys) -> list | None:
    """For each key the item ``max(items, key=key)`` gives (the first of the largest), in one pass
    over ``items``; None where there is none."""
    best: list = []
    for item in items:
        if not best:
            best = [item] * len(keys)
            continue
        best = [item if key(item) > key(b) else b for key, b in zip(keys, best)]
    return best or None


def _gain(step: float, saved: float) -> float:
    return 1 / (1 - min(saved / step, 0.99))


def _evidence(
    node: NodeSummary, m: _Network, slowest: NodeSummary, ms: _Network, pct: float
) -> list[Evidence]:
    out = [
        ms_evidence("exposed all-reduce per step", m.exposed_ms, m.exposed_ci_ms, node.node),
        Evidence(
            "network's share of the step (exposed, over the intra-node all-reduce)",
            round(pct, 1),
            "%",
            threshold=MODERATE_PCT,
            device=node.node,
        ),
        ms_evidence(
            "all-reduce after the last rank arrived",
            ms.link_ms,
            slowest.link_ms.ci95 / ms.inflation,
            slowest.node,
        ),
    ]
    if m.intra_ms is not None:
        own = node.intra_node_ms
        known = own is not None and math.isfinite(own.ci95)
        out.append(
            ms_evidence(
                "the same all-reduce inside the node (measured)",
                m.intra_ms,
                own.ci95 if known else None,
                node.node if own is not None else None,
            )
        )
    if node.bytes_per_step:
        rate = node.bytes_per_step * 8 / (ms.link_ms / 1e3) / 1e9 if ms.link_ms > 0 else math.nan
        out += [
            Evidence("bytes all-reduced per step", node.bytes_per_step, "B", device=node.node),
            Evidence(
                "achieved all-reduce rate over the slowest hop",
                round(rate, 3),
                "Gbit/s",
                device=slowest.node,
            ),
        ]
    return out


def _notes(node: NodeSummary, m: _Network) -> list[str]:
    notes = []
    if m.inflation > 1:
        notes.append(
            f"traced times divided by the tracer's slowdown on {node.node} ({m.inflation:.2f}x:"
            f" traced step {node.step_ms.mean:.1f} ms, untraced {m.step_ms:.1f} ms)"
        )
    if m.intra_ms is not None and node.intra_node_ms is None:
        notes.append(
            f"{node.node} measured no intra-node reference: the other nodes' median is used"
        )
    if m.intra_ms is None:
        notes.append(
            "no intra-node reference (not measured on this node): the exposed all-reduce is taken"
            " whole as the network's"
        )
    if not node.bytes_per_step:
        notes.append(
            "bytes per step unknown (no optimizer parameters recorded): no rate, no forecast"
        )
    return notes


def _forecast(node: NodeSummary, m: _Network) -> Speedup | None:
    if not node.bytes_per_step:
        return None
    saved = m.network_ms * (1 - COMPRESSED_BYTES_FRACTION)
    f = _gain(m.step_ms, saved)
    return Speedup(
        f,
        f,
        f,
        "fp16 gradient compression halves the bytes; the network's time scales with them: "
        f"{m.step_ms:.1f} / ({m.step_ms:.1f} - {saved:.1f}) ms",
        kind="forecast",
    )


RULE = _InterNodeLink()
