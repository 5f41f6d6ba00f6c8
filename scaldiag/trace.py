"""The trace as plain data: planes of lines of events, as numpy columns.

This is what every analysis reads. It is framework-free and format-free:
``scaldiag.xplane`` fills it from XPlane files; tests may build one by hand.
All times are integer nanoseconds on the trace's own clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Stats the analysis reads, by their XPlane stat names. Others are skipped at
# read time, which keeps reading fast.
WANTED_STATS = (
    "step_num",  # step markers (JAX StepTraceAnnotation, TF TraceContext)
    "_r",  # 1 on root events (step markers written by the profilers)
    "group_id",  # TF: step grouping written by the profiler
    "memcpy_details",  # CUPTI memcpy: "kind_src:pinned kind_dst:device size:N ..."
    "hlo_op",  # XLA instruction that launched a kernel
    "hlo_category",  # XLA's own category when present ("data formatting"...)
    "tf_op",  # TF op "name:Type" that launched a kernel
)
# The wanted stats the analysis reads as integers; the others are text.
INT_STATS = ("step_num", "_r", "group_id")


@dataclass(frozen=True)
class Line:
    """One timeline: a GPU stream, or a host thread."""

    name: str
    start_ns: np.ndarray  # int64
    end_ns: np.ndarray  # int64, >= start_ns
    name_id: np.ndarray  # int32 index into Plane.event_names
    # Each wanted stat found on this line: an object array, None where absent, or, for a stat
    # on few of the line's events (step markers on a thread of millions), a SparseStat.
    stats: dict[str, np.ndarray | SparseStat] = field(default_factory=dict)
    # True where the reader knows every stat value is already of the type the analysis
    # reads (int for INT_STATS, str for the others): readers/typed.py then skips the line.
    stats_typed: bool = False

    def __len__(self) -> int:
        return len(self.start_ns)

    def stat(self, name: str) -> np.ndarray:
        """The stat column (None where an event lacks it), all None when no event has it."""
        column = self.stats.get(name)
        if isinstance(column, SparseStat):
            return column.dense(len(self))
        return column if column is not None else np.full(len(self), None, dtype=object)

    def stat_rows(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(rows ascending, values) of the events that have the stat."""
        column = self.stats.get(name)
        if isinstance(column, SparseStat):
            return column.rows, column.values
        if column is None:
            return np.zeros(0, np.int64), np.zeros(0, dtype=object)
        rows = np.flatnonzero(column != None)  # noqa: E711 (element-wise on an object array)
        return rows, column[rows]


@dataclass(frozen=True)
class SparseStat:
    """A stat that few of a line's events have: their rows (ascending, distinct) and values.

    Keeps a reader from making, and the analysis from scanning, a column of millions of
    Nones: on a 270 MB JAX trace the host thread's 6.8 M events had 15,600 step markers."""

    rows: np.ndarray  # int64
    values: np.ndarray  # object

    def dense(self, n: int) -> np.ndarray:
        column = np.full(n, None, dtype=object)
        column[self.rows] = self.values
        return column


@dataclass(frozen=True)
class StepMarks:
    """A device's own step markers: where each step's work began on the device.

    Kineto's GPU-side ``ProfilerStep#N`` annotations (``gpu_user_annotation``): the
    span of the GPU work launched inside host step N. Markers, not work: they are kept
    apart from the plane's lines, so no busy time or category ever counts them."""

    start_ns: np.ndarray  # int64, in the order read (several per step where a step spans streams)
    end_ns: np.ndarray  # int64
    step_num: np.ndarray  # int64


@dataclass(frozen=True)
class Plane:
    """A device (``/device:GPU:0``) or the host (``/host:CPU``)."""

    name: str
    event_names: list[str]
    lines: list[Line]
    stats: dict[str, object] = field(default_factory=dict)
    host: str = ""  # set when a run has several hosts
    step_marks: StepMarks | None = None  # a device's own step markers, when the trace has them

    @property
    def label(self) -> str:
        """How reports name the plane: ``host:/device:GPU:0`` when hosts are merged."""
        return f"{self.host}:{self.name}" if self.host else self.name

    @property
    def is_device(self) -> bool:
        return self.name.startswith("/device:")

    @property
    def is_host(self) -> bool:
        return self.name.startswith("/host:CPU")

    @property
    def event_count(self) -> int:
        return sum(len(line) for line in self.lines)


@dataclass(frozen=True)
class Trace:
    planes: list[Plane]
    sources: list[str]  # files it was read from
    hostnames: list[str] = field(default_factory=list)
    # What the reader noticed about the files as given (both formats in one directory, a rank twice,
    # ranks of different runs): shown with the analysis' notes (readers/__init__.py).
    notes: list[str] = field(default_factory=list)

    @property
    def device_planes(self) -> list[Plane]:
        return [p for p in self.planes if p.is_device and p.event_count]

    @property
    def host_planes(self) -> list[Plane]:
        return [p for p in self.planes if p.is_host]

    @property
    def event_count(self) -> int:
        return sum(p.event_count for p in self.planes)
