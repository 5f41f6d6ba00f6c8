"""The one exception family. The CLI catches it once and prints its message."""


class ScaldiagError(Exception):
    """A problem the user can fix (bad path, unreadable trace...). Exit code 2."""

    exit_code = 2


class TraceError(ScaldiagError):
    """A trace file or logdir that cannot be read as an XPlane profile."""


# What decoding or analysing a hostile trace can raise besides TraceError. Under a run the trace is
# evidence among others: where it raises one of these the run reports without it, naming the gap.
TRACE_FAILURES = (
    TraceError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    ArithmeticError,
    MemoryError,
    RecursionError,
)
