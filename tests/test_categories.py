"""Category rules on names and stats seen in real traces."""

import pytest

from scaldiag.analyze.categories import (
    device_category,
    host_category,
    host_line_default,
    tf_op_type,
)


@pytest.mark.parametrize(
    "name,kwargs,expected",
    [
        ("MemcpyH2D", {}, "h2d"),
        ("MemcpyD2H", {}, "d2h"),
        ("MemcpyD2D", {}, "other"),
        (
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            {},
            "collective",
        ),
        ("loop_add_fusion", {"hlo_op": "all-reduce.3"}, "collective"),
        (
            "void foo<float>()",
            {"tf_op": "replica_1/CollectiveReduceV2:CollectiveReduceV2"},
            "collective",
        ),
        # cuDNN convolutions name their layouts: they are compute.
        (
            "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16",
            {},
            "compute",
        ),
        ("cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>", {}, "layout"),
        (
            (
                "void tensorflow::functor::SwapDimension1And2InTensor3UsingTiles<unsigned int, 256,"
                " 32, 32>"
            ),
            {},
            "layout",
        ),
        (
            "some_kernel",
            {"tf_op": "sequential/conv/Conv2D-0-TransposeNHWCToNCHW-LayoutOptimizer:Transpose"},
            "layout",
        ),
        ("loop_transpose_fusion", {}, "layout"),
        ("input_transpose_fusion_2", {}, "layout"),
        ("gemm_fusion_dot_7", {"hlo_op": "copy.12"}, "layout"),
        ("wrapped_tanh", {"hlo_category": "data formatting"}, "layout"),
        ("gemm_fusion_dot_7", {}, "compute"),
        (
            "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32",
            {"hlo_op": "command_buffer_1"},
            "compute",
        ),
    ],
)
def test_device_events(name, kwargs, expected):
    assert device_category(name, **kwargs) == expected


@pytest.mark.parametrize(
    "name,ops_are_compute,expected",
    [
        ("IteratorGetNextOp::DoCompute", True, "input"),
        ("shard_args", False, "input"),
        ("EagerCopyToDevice", True, "input"),
        ("Wait for LaunchOnDevice completion", False, "wait"),
        ("LocalDeviceState::WaitFor", False, "wait"),
        ("sequential/conv2d/Relu:_MklNativeFusedConv2D", True, "compute"),
        ("sequential/conv2d/Relu:_MklNativeFusedConv2D", False, "host_overhead"),
        ("sequential/permute/transpose:_MklTranspose", True, "layout"),
        ("StatefulPartitionedCall/sgd/CollectiveReduceV2:CollectiveReduceV2", True, "collective"),
        ("ExecutorState::Process", True, None),
        ("$builtins isinstance", False, None),
        ("ThenExecuteCallback:PjRtStreamExecutorRawBuffer::CopyRawHostToDevice", False, None),
        # XLA's CPU executable (fixtures/jax_cpu): its thunks (HLO names) inherit the executor's
        ("ThunkExecutor::Execute", True, "compute"),
        ("ThunkExecutor::Execute", False, "host_overhead"),
        ("ThunkExecutor::Execute (wait for completion)", True, "wait"),
        ("ynn_fusion.12", True, None),
    ],
)
def test_host_events(name, ops_are_compute, expected):
    assert host_category(name, ops_are_compute) == expected


def test_thread_roles():
    assert host_line_default("tf_data_iterator_get_next/123") == "input"
    assert host_line_default("tf_data_multi_device_iterator_get_next/1") == "input"
    assert host_line_default("tf_data_iterator_resource/77") == "background"
    assert host_line_default("collective_ops/5") == "collective"
    assert host_line_default("python") is None


def test_tf_op_type():
    assert tf_op_type("a/b/c:Conv2D") == "Conv2D"
    assert tf_op_type("Iterator::Root") is None
    assert tf_op_type("Wait: pending_threads=1/2") is None
