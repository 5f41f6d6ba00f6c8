"""Environment variables between scaldiag's processes: the launcher sets them, the child reads them."""

RUN_DIR_ENV = "SCALDIAG_RUN_DIR"             # the run directory the child records into
NUM_GPUS_ENV = "SCALDIAG_NUM_GPUS"           # a sweep point's device count, for the user's script
EMULATE_ENV = "SCALDIAG_EMULATE_DEVICES"     # split the CPU into N logical devices (profile --emulate)
GLOBAL_BATCH_ENV = "SCALDIAG_GLOBAL_BATCH"       # samples per step, when the data cannot tell (profile --global-batch)
HOST_TRACER_LEVEL_ENV = "SCALDIAG_HOST_TRACER_LEVEL"  # JAX profiler host tracer level (default 2)
INPUT_FREE_ENV = "SCALDIAG_INPUT_FREE"           # 0: skip the input-free step measured after training
