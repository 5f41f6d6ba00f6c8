"""What each trace event is: the category rules, by what the trace shows.

Device events (GPU streams) are classified from CUPTI's own memcpy names, the
NCCL kernel names, and the op that launched a kernel (``tf_op``, ``hlo_op``,
``hlo_category`` stats). Host events are classified by the thread they run on
and the runtime's own event names. docs/categories.md lists every rule and
its source; keep the two in step.
"""

from __future__ import annotations

import re

# The step-time categories, in priority order: when several are active at one
# instant, the instant counts (exclusively) for the first. Device work comes
# before host work: a host that prepares input while the device computes is
# hidden behind compute and costs nothing. ``idle`` is what no event covers.
CATEGORIES = (
    "compute",
    "layout",
    "collective",
    "h2d",
    "d2h",
    "other",
    "input",
    "host_overhead",
    "idle",
)
DEVICE_CATEGORIES = ("compute", "layout", "collective", "h2d", "d2h", "other")
HOST_CATEGORIES = ("input", "host_overhead")

# Host-only states, never part of the exclusive breakdown:
WAIT = "wait"  # a thread blocked on something else (not busy)
BACKGROUND = "background"  # input pipeline producers running ahead (prefetch)
GENERIC = None  # no category of its own: inherits its parent's

# --- device events ---------------------------------------------------------
# CUPTI names memory copies by direction (CUpti_ActivityMemcpyKind).
_MEMCPY = {
    "MemcpyH2D": "h2d",
    "MemcpyD2H": "d2h",
    "MemcpyD2D": "other",
    "MemcpyP2P": "collective",
    "Memset": "other",
    "MemcpyH2H": "other",
}
# NCCL kernels (ncclDevKernel_AllReduce..., ncclKernel_...) and XLA's
# collective instructions (all-reduce.3, reduce-scatter, all-gather-start...).
_COLLECTIVE_KERNEL = re.compile(
    r"^nccl|^(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)", re.I
)
_COLLECTIVE_TF_OPS = re.compile(
    r"^(_?Nccl\w*|Collective\w*|_?CollectiveReduce\w*|AllReduce|HorovodAllreduce)$"
)
# Ops that only permute data. TF: Transpose and its oneDNN/conjugate forms,
# Grappler's layout optimizer nodes; XLA: transpose and copy (a layout change)
# instructions and fusions rooted in them; cuDNN's own conversion kernels.
_LAYOUT_TF_OPS = re.compile(r"^(_?Mkl)?(Conjugate)?Transpose$|^DataFormat(VecPermute|DimMap)$")
_LAYOUT_HLO = re.compile(r"^(loop_|input_)?(transpose|copy)(_fusion)?([._]\d+)*$")
_LAYOUT_KERNEL = re.compile(
    r"(^|::)(nchwToNhwc|nhwcToNchw)Kernel|SwapDimension\d+And\d+InTensor3|ShuffleInTensor3|TransposeUsingTile"
    r"|^(loop_|input_)?transpose(_fusion)?([._]\d+)*$",
    re.I,
)
_LAYOUT_HLO_CATEGORIES = {"data formatting"}


def tf_op_type(tf_op: str | None) -> str | None:
    """``"scope/name:Type"`` -> ``"Type"`` (the TF op event/stat convention)."""
    # TF names op events "scope/name:Type": one colon, no spaces, no "::"
    # (which would be a C++ scope such as "Iterator::Root").
    if not tf_op or ":" not in tf_op or "::" in tf_op or " " in tf_op:
        return None
    op_type = tf_op.rsplit(":", 1)[1].strip()
    return op_type if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", op_type) else None


# Kineto (PyTorch) names copies and memsets by direction: "Memcpy HtoD (Pageable -> Device)",
# "Memcpy DtoH (Device -> Pinned)", "Memcpy DtoD (Device -> Device)", "Memcpy PtoP (Device ->
# Device)", "Memset (Device)" (libkineto's memcpyKindString / CUPTI memcpy kinds).
_KINETO_MEMCPY = {
    "Memcpy HtoD": "h2d",
    "Memcpy DtoH": "d2h",
    "Memcpy DtoD": "other",
    "Memcpy PtoP": "collective",
    "Memcpy HtoH": "other",
    "Memcpy DtoA": "other",
    "Memcpy AtoD": "other",
    "Memset": "other",
}


def device_category(
    name: str, tf_op: str | None = None, hlo_op: str | None = None, hlo_category: str | None = None
) -> str:
    """Category of one event on a device stream."""
    for prefix, category in _MEMCPY.items():
        if name.startswith(prefix):
            return category
    if name.startswith(("Memcpy ", "Memset")):
        return next((c for prefix, c in _KINETO_MEMCPY.items() if name.startswith(prefix)), "other")
    op_type = tf_op_type(tf_op)
    if (
        _COLLECTIVE_KERNEL.search(name)
        or (hlo_op and _COLLECTIVE_KERNEL.search(hlo_op))
        or (op_type and _COLLECTIVE_TF_OPS.match(op_type))
    ):
        return "collective"
    if (
        hlo_category in _LAYOUT_HLO_CATEGORIES
        or _LAYOUT_KERNEL.search(name)
        or (hlo_op and _LAYOUT_HLO.match(hlo_op))
        or (op_type and _LAYOUT_TF_OPS.match(op_type))
        or (tf_op and "LayoutOptimizer" in tf_op)
    ):
        return "layout"
    return "compute"


# --- host events -----------------------------------------------------------
# Blocking: the thread waits for the device, a peer or a lock. Not host work.
# KernelAndDeviceFunc::Run is TF's caller blocked while a function's graph runs
# on the executor threads (which have events of their own).
_WAIT = re.compile(
    r"^Wait\b|WaitFor|BlockHostUntil|Rendezvous|^Await|Sleep|::Wait$|^ThreadpoolListener::"
    r"|^KernelAndDeviceFunc::Run$"
)
# The training step taking its next batch: tf.data consumer ops, the
# hand-over of host arrays to devices (JAX/PJRT device_put, TF eager copies),
# and Python input code that `scaldiag profile` annotates (input_marks.py).
_INPUT = re.compile(
    r"^scaldiag_input$|IteratorGetNext|GetNextFromShard|^Iterator::|^PrefetchConsume|MultiDeviceIterator"
    r"|^shard_args$|DevicePut|^device_put|BufferFromHostBuffer|^H2D Dispatch$"
    r"|^EagerCopyToDevice$|^PjRtCApiClient::BufferFromHost|^Transpose::Execute|^MemcpyH2D$"
)
# PyTorch (Kineto) host events. The DataLoader's own annotation of each batch fetch
# (torch/utils/data/dataloader.py: record_function "enumerate(DataLoader)#<Iter>.__next__") is
# input. CUDA runtime and driver calls (cat cuda_runtime, cuda_driver: cudaLaunchKernel,
# cuLaunchKernel...) are the host side of launching work; the synchronising ones wait for the
# device. Collectives: the c10d process group's record_function names (nccl:all_reduce,
# gloo:broadcast), its ops (c10d::allreduce_) and torch's record_param_comms.
_TORCH_INPUT = re.compile(r"^enumerate\(DataLoader\)#.*__next__$|DataLoaderIter\.__next__$")
_TORCH_WAIT = re.compile(
    r"^(cuda(Stream|Device|Event|Ctx)Synchronize|cu(Stream|Ctx|Event)Synchronize"
    r"|cudaStreamQuery|cudaEventQuery|cuStreamQuery|cuEventQuery)$"
)
_CUDA_API = re.compile(r"^cuda[A-Z]\w*$|^cu[A-Z]\w*$")
_TORCH_COLLECTIVE = re.compile(
    r"^(nccl|gloo|mpi|ucc|xccl):\w|^c10d::|^_?c10d_functional::|^record_param_comms$"
)
# ATen/autograd ops (cat cpu_op): the computation itself on the CPU, the host side of launches with
# GPUs.
_TORCH_OP = re.compile(
    r"^(aten|prim|quantized|mkldnn|cudnn|mkl|sparse|torchvision|inductor|triton)::"
    r"|^autograd::engine::evaluate_function: |^[A-Z]\w*Backward\d*$"
)

# XLA's CPU runtime (JAX on the CPU backend; fixtures/jax_cpu): a compiled executable runs as
# thunks named after their HLO instructions (fusion.3, dot.49, ynn_fusion.12, while.203...) inside
# "ThunkExecutor::Execute", on the client's threads (tf_XLAPjRtCpuClient/*, tf_XLAEigen/*). The
# thunks' names are the program's own, so the executor's event is the rule and they inherit it.
# The caller blocked until the thunks finish is "ThunkExecutor::Execute (wait for completion)".
_XLA_CPU_EXECUTE = re.compile(r"^ThunkExecutor::Execute$")
_XLA_CPU_WAIT = re.compile(r"^ThunkExecutor::Execute \(wait for completion\)$")

# tf.data threads. The get_next threads run the consumer side (the step waits
# there); the others produce elements ahead of time in the background.
_TF_DATA_CONSUMER_LINE = re.compile(r"^tf_data_(multi_device_)?iterator_get_next")
_TF_DATA_LINE = re.compile(r"^tf_data_")
_COLLECTIVE_LINE = re.compile(r"^collective_ops/|^nccl", re.I)


def host_line_default(line_name: str) -> str | None:
    """The category every event on a host thread has unless its own name says more."""
    if _TF_DATA_CONSUMER_LINE.match(line_name):
        return "input"
    if _TF_DATA_LINE.match(line_name):
        return BACKGROUND
    if _COLLECTIVE_LINE.match(line_name):
        return "collective"
    return GENERIC


def host_category(name: str, ops_are_compute: bool) -> str | None:
    """Category a host event's own name gives it, or GENERIC.

    ``ops_are_compute``: TF op events (``name:Type``), ATen ops and XLA's CPU
    executable (``ThunkExecutor::Execute``) are the computation itself when the
    trace has no device planes (a CPU backend); with GPUs they are the host side
    of launching device work.
    """
    if name.startswith("$"):  # Python tracer frames: the code that ran, no category
        return GENERIC
    if _WAIT.search(name) or _XLA_CPU_WAIT.match(name):
        return WAIT
    if _XLA_CPU_EXECUTE.match(name):
        return "compute" if ops_are_compute else "host_overhead"
    if _INPUT.search(name) or _TORCH_INPUT.search(name):
        return "input"
    if _TORCH_WAIT.match(name):
        return WAIT
    if _TORCH_COLLECTIVE.search(name):
        return "collective"
    if _CUDA_API.match(name):
        return "host_overhead"
    if _TORCH_OP.search(name):
        return "compute" if ops_are_compute else "host_overhead"
    op_type = tf_op_type(name)
    if op_type is None:
        return GENERIC
    if _COLLECTIVE_TF_OPS.match(op_type):
        return "collective"
    if ops_are_compute:
        return "layout" if _LAYOUT_TF_OPS.match(op_type) or "LayoutOptimizer" in name else "compute"
    return "host_overhead"
