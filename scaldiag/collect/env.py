"""Environment variables between scaldiag's processes: the launcher sets them, the child reads them.

Every variable scaldiag's capture sets or reads is named here. (The knobs a user sets for the layers
below capture, which may not import it, are named where they are read: ``SCALDIAG_NATIVE``
(native.py), ``SCALDIAG_DECODE_WORKERS`` (readers/xplane/read.py), ``SCALDIAG_CALIBRATION``
(analyze/interconnect.py).)"""

RUN_DIR_ENV = "SCALDIAG_RUN_DIR"  # the run directory the child records into
# seconds the capture's end may take after the script ended (collect/bootstrap.py; default 180)
FINISH_LIMIT_ENV = "SCALDIAG_FINISH_LIMIT_S"
NUM_GPUS_ENV = "SCALDIAG_NUM_GPUS"  # a sweep point's device count, for the user's script
EMULATE_ENV = "SCALDIAG_EMULATE_DEVICES"  # split the CPU into N logical devices (profile --emulate)
GLOBAL_BATCH_ENV = (  # samples per step, when the data cannot tell (profile --global-batch)
    "SCALDIAG_GLOBAL_BATCH"
)
HOST_TRACER_LEVEL_ENV = "SCALDIAG_HOST_TRACER_LEVEL"  # JAX profiler host tracer level (default 2)
# 1: trace every TF multi-worker task, not only the chief (TensorFlow's profiler can abort the
# others: docs/multinode.md, "Known fault").
TF_TRACE_ALL_WORKERS_ENV = "SCALDIAG_TF_TRACE_ALL_WORKERS"
INPUT_FREE_ENV = "SCALDIAG_INPUT_FREE"  # 0: skip the input-free step measured after training
TORCHRUN_ENV = "SCALDIAG_TORCHRUN"  # nproc-per-node: the child re-runs the bootstrap under torchrun
RUN_ROOT_ENV = (  # a torchrun job's run directory; ranks > 0 record in RUN_ROOT/rank<R>
    "SCALDIAG_RUN_ROOT"
)
TRY_DATALOADER_ENV = (  # scaldiag try: DataLoader keyword arguments, JSON (try_fixes.py)
    "SCALDIAG_TRY_DATALOADER"
)
TRY_KERAS_ENV = (  # scaldiag try: compile's steps_per_execution, PyDataset's workers, JSON
    "SCALDIAG_TRY_KERAS"
)
# scaldiag try: the round's journal directory; the child keeps every path it writes outside
# TRY_OWN (the try's own directory) there first (collect/write_journal.py)
TRY_JOURNAL_ENV = "SCALDIAG_TRY_JOURNAL"
TRY_OWN_ENV = "SCALDIAG_TRY_OWN"
# the key each journal entry is signed with (hex): a journal this machine's try did not write is
# never applied (collect/write_journal.py)
TRY_KEY_ENV = "SCALDIAG_TRY_KEY"
# 0: profile does not record which paths the script writes (run.json ``writes``)
WRITES_RECORD_ENV = "SCALDIAG_RECORD_WRITES"
TEARDOWN_ENV = (  # Kineto's own, read when the profiler stops (collect/frameworks/torch_trace.py)
    "TEARDOWN_CUPTI"
)
# The trace window's bounds in time (collect/trace_budget.py): its traced steps end at the first
# step boundary past either (defaults 30 s and 0.10 of the run's wall so far;
# profile --trace-limit-s)
TRACE_LIMIT_ENV = "SCALDIAG_TRACE_LIMIT_S"
TRACE_SHARE_ENV = "SCALDIAG_TRACE_SHARE"
