"""The link between a machine's GPUs, and the all-reduce time it gives.

Where the link comes from, in order (``Interconnect.source`` says which):

- ``given``: the user named it (``parse("nvlink4x18")``, ``parse("pcie5x16")``);
- ``read``: NVML's active NVLink count in the run's inventory, when above zero;
- ``looked up``: the GPU's product name in ``PRODUCTS`` (NVML reports no active
  NVLink on a machine with one GPU visible: the links to absent peers are down,
  so zero links there is no evidence of a PCIe-only card);
- ``assumed``: the PCIe link NVML reports (generation and width), for cards the
  table does not know, or where NVML reads zero active NVLinks with two or
  more GPUs visible.

All-reduce time is a curve over the message size (``Curve``): a calibration that ``scaldiag
calibrate`` saved for GPUs of this product (``find_calibrations`` reads the saved files: the one
place in analyze/ that reads a file, a small JSON one, so that every report uses the machine's own
curve), else the documented default for the link: for NVLink 4 x18 (H100/H200 SXM) points measured
in real 2-GPU H200 training traces and NCCL's published ring bandwidth for large messages; for other
links the two-number NCCL ring model

    t(m) = latency + 2 (n - 1) / n x m / bus bandwidth

``bus bandwidth`` is what NCCL achieves on the link (nccl-tests' ``busbw``),
not the line rate: docs/calibrate.md cites each default.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from scaldiag.errors import ScaldiagError

NVLINK_BYTES_PER_S_PER_LINK = (
    25e9  # NVLink 2-4: 25 GB/s per link and direction (NVIDIA's NVLink pages)
)
PCIE_BYTES_PER_S_PER_LANE = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}
# NCCL reaches ~370 GB/s of NVLink 4's 450 GB/s line rate (ring, ~20% protocol overhead): NCCL's
# maintainer in NVIDIA/nccl-tests#212; 365-370 GB/s busbw with NCCL_ALGO=RING at 2-4 GiB on 2 to 8
# H100 SXM (NVIDIA/nccl#1455). The same fraction is assumed for the other links (stated as assumed
# in the output).
NCCL_BUS_FRACTION = 370 / 450
# Time of a small all-reduce inside one node (nccl-tests' rows for 8 B-64 KiB are 10-30 us on NVLink
# and PCIe machines, e.g. NVIDIA/nccl-tests#68; 19.6 us is the intercept of the two DDP bucket sizes
# measured on two H200 below): one latency per all-reduce call.
NCCL_LATENCY_S = 20e-6

# NVLink 4 x18 (H100/H200 SXM), all-reduce of float32 over 2 GPUs: (bytes, seconds, where from). The
# first two are medians of NCCL's kernels in real training on two H200 joined by NV18
# (../shared/fixtures/x2_devset: torch_ddp_sync's DDP buckets, the later rank's kernel;
# keras_jax_mlp_sync's XLA all-reduces, sizes from the HLO in its XPlane), each the mean of the two
# frameworks' medians; the last is NCCL's ring busbw at 2-4 GiB.
NVLINK4_X18_POINTS = (
    (
        12.96e6,
        70.5e-6,
        (
            "12.86 MB: 63.1 us (PyTorch DDP, 5 calls, 61.2-65.1); 13.06 MB: 77.9 us (XLA, 10 calls,"
            " 76.3-82.0)"
        ),
    ),
    (
        67.1e6,
        252.0e-6,
        (
            "67.1-67.3 MB: 246.6 and 251.7 us (DDP, 5 calls each, 245.5-256.4); 258.4 and 251.4 us "
            "(XLA, 10 calls each, 246.0-282.5)"
        ),
    ),
    (
        2**31,
        2**31 / 370e9,
        (
            "2 GiB at 370 GB/s busbw: NCCL ring on 2-8 H100 SXM (NVIDIA/nccl#1455, "
            "NVIDIA/nccl-tests#212)"
        ),
    ),
)
NVLINK4_X18_SOURCE = (
    "default for NVLink 4 x18: 2-GPU H200 training traces (13 MB: 71 us, 67 MB: 252 us, "
    "i.e. 184-266 GB/s busbw) and NCCL's ring 370 GB/s at 2 GiB (NVIDIA/nccl#1455)"
)


def ring_volume(n: int) -> float:
    """Bytes each GPU sends per byte of message in a ring all-reduce: 2 (n - 1) / n (nccl-tests'
    busbw factor)."""
    return 2 * (n - 1) / n


@dataclass(frozen=True)
class Curve:
    """All-reduce seconds over message bytes, measured at ``ranks`` GPUs.

    Between points: log-log interpolation. Below the first: a line from
    ``latency_s`` at 0 bytes to the first point. Above the last: the last
    point plus the extra bytes at ``tail_bus_bytes_per_s``. No points: the
    two-number model. Another GPU count: the part above the latency scales
    with the ring volume 2 (n - 1) / n (NCCL's busbw does not depend on n for
    the ring: 365-370 GB/s from 2 to 8 GPUs, NVIDIA/nccl#1455).
    """

    sizes_bytes: tuple[float, ...]
    times_s: tuple[float, ...]
    ranks: int
    latency_s: float
    tail_bus_bytes_per_s: float
    source: str

    def __post_init__(self):
        if len(self.sizes_bytes) != len(self.times_s):
            raise ValueError("a curve needs one time per size")
        if any(b <= a for a, b in zip(self.sizes_bytes, self.sizes_bytes[1:])):
            raise ValueError("a curve's sizes must increase")
        if any(not (x > 0 and math.isfinite(x)) for x in self.sizes_bytes + self.times_s):
            raise ValueError("a curve's sizes and times must be positive numbers")
        if self.ranks < 2 or not self.tail_bus_bytes_per_s > 0 or not self.latency_s >= 0:
            raise ValueError("a curve needs 2+ ranks, a positive tail bandwidth and a latency >= 0")

    def time_s(self, message_bytes: float, n: int) -> float:
        measured = self._at_ranks(message_bytes)
        if n == self.ranks:
            return measured
        return self.latency_s + max(0.0, measured - self.latency_s) * ring_volume(n) / ring_volume(
            self.ranks
        )

    def _at_ranks(self, m: float) -> float:
        sizes, times = self.sizes_bytes, self.times_s
        if not sizes:
            return self.latency_s + ring_volume(self.ranks) * m / self.tail_bus_bytes_per_s
        if m <= sizes[0]:
            return self.latency_s + (times[0] - self.latency_s) * m / sizes[0]
        if m >= sizes[-1]:
            return times[-1] + ring_volume(self.ranks) * (m - sizes[-1]) / self.tail_bus_bytes_per_s
        i = next(k for k in range(1, len(sizes)) if sizes[k] >= m)
        slope = math.log(times[i] / times[i - 1]) / math.log(sizes[i] / sizes[i - 1])
        return times[i - 1] * (m / sizes[i - 1]) ** slope

    def bus_bytes_per_s(self, message_bytes: float) -> float:
        """nccl-tests' busbw at this size: 2 (n - 1) / n x m / t, at the curve's own rank count."""
        return ring_volume(self.ranks) * message_bytes / self._at_ranks(message_bytes)


def model_curve(bus_bytes_per_s: float, latency_s: float, source: str) -> Curve:
    return Curve((), (), 2, latency_s, bus_bytes_per_s, source)


NVLINK4_X18_CURVE = Curve(
    tuple(p[0] for p in NVLINK4_X18_POINTS),
    tuple(p[1] for p in NVLINK4_X18_POINTS),
    2,
    NCCL_LATENCY_S,
    370e9,
    NVLINK4_X18_SOURCE,
)


@dataclass(frozen=True)
class Product:
    pattern: str  # regular expression over NVML's product name
    generation: int
    links: int
    source: str


# NVLink per GPU by product (NVML names: "NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA
# A100-SXM4-80GB"...). PCIe and NVL cards are left out on purpose: they use their PCIe link (or the
# links NVML reads).
PRODUCTS = (
    Product(
        r"^NVIDIA H200$|H200 SXM|^NVIDIA H100 80GB HBM3$|H100 SXM|^NVIDIA H800$",
        4,
        18,
        "NVIDIA H100/H200 SXM datasheets: NVLink 4, 18 links, 900 GB/s both ways",
    ),
    Product(
        r"A100-SXM|A100 SXM|A800-SXM",
        3,
        12,
        "NVIDIA A100 datasheet: SXM4, NVLink 3, 12 links, 600 GB/s both ways",
    ),
    Product(
        r"V100-SXM2|V100 SXM2",
        2,
        6,
        "NVIDIA V100 datasheet: SXM2, NVLink 2, 6 links, 300 GB/s both ways",
    ),
)


@dataclass(frozen=True)
class Interconnect:
    kind: str  # "nvlink" or "pcie"
    generation: int
    lanes: int  # NVLink links, or PCIe lanes
    line_bytes_per_s: float  # per direction, per GPU
    bus_bytes_per_s: float  # NCCL all-reduce bus bandwidth on it, for large messages
    latency_s: float
    source: str  # "given", "read", "looked up" or "assumed"
    why: str = ""
    curve: Curve | None = None  # all-reduce time over message size; None: the two-number model
    notes: tuple[str, ...] = ()  # e.g. a calibration file that could not be read

    def describe(self) -> str:
        link = (
            f"NVLink {self.generation} x{self.lanes}"
            if self.kind == "nvlink"
            else f"PCIe Gen{self.generation} x{self.lanes}"
        )
        why = f" ({self.why})" if self.why else ""
        curve = (
            self.curve.source
            if self.curve
            else (
                f"bus bandwidth {self.bus_bytes_per_s / 1e9:.0f} GB/s + {self.latency_s * 1e6:.0f}"
                " us per call"
            )
        )
        notes = "".join(f"; {n}" for n in self.notes)
        return (
            f"interconnect {link}, {self.source}{why}: {self.line_bytes_per_s / 1e9:.0f} GB/s each"
            f" way; all-reduce {curve}{notes}"
        )

    def allreduce_s(self, message_bytes: float, n: int) -> float:
        """Seconds for one all-reduce of ``message_bytes`` over ``n`` GPUs (0 for one GPU)."""
        if n < 2 or message_bytes <= 0:
            return 0.0
        if self.curve is not None:
            return self.curve.time_s(message_bytes, n)
        return self.latency_s + ring_volume(n) * message_bytes / self.bus_bytes_per_s

    def with_curve(self, curve: Curve, note: str = "") -> Interconnect:
        return replace(self, curve=curve, notes=self.notes + ((note,) if note else ()))


def nvlink(generation: int, links: int, source: str, why: str = "") -> Interconnect:
    curve = NVLINK4_X18_CURVE if (generation, links) == (4, 18) else None
    return _rated_link("nvlink", generation, links, NVLINK_BYTES_PER_S_PER_LINK, source, why, curve)


def pcie(generation: int, width: int, source: str, why: str = "") -> Interconnect | None:
    rate = PCIE_BYTES_PER_S_PER_LANE.get(generation)
    if not rate or not width:
        return None
    return _rated_link("pcie", generation, width, rate, source, why)


def _rated_link(
    kind: str,
    generation: int,
    lanes: int,
    lane_bytes_per_s: float,
    source: str,
    why: str,
    curve: Curve | None = None,
) -> Interconnect:
    """A link of ``lanes`` lanes (NVLink links, PCIe lanes) of ``lane_bytes_per_s``: NCCL's bus
    bandwidth is the tail of its all-reduce ``curve``, a measured one or, where there is none, the
    default model on its line rate."""
    line = lanes * lane_bytes_per_s
    if curve is None:
        curve = model_curve(line * NCCL_BUS_FRACTION, NCCL_LATENCY_S, _model_source(line))
    bus = curve.tail_bus_bytes_per_s
    return Interconnect(kind, generation, lanes, line, bus, NCCL_LATENCY_S, source, why, curve)


def _model_source(line_bytes_per_s: float) -> str:
    return (
        f"default: {NCCL_LATENCY_S * 1e6:.0f} us + size /"
        f" {line_bytes_per_s * NCCL_BUS_FRACTION / 1e9:.0f} GB/s busbw (NCCL ring, 370/450 of the"
        " line rate as on NVLink 4: assumed; docs/calibrate.md)"
    )


def parse(spec: str) -> Interconnect:
    """``nvlink4x18``, ``nvlink3x12`` or ``pcie5x16`` (case and spaces ignored): the user's
    machine."""
    m = re.fullmatch(r"(nvlink|pcie(?:gen)?)(\d)x(\d+)", re.sub(r"[\s_-]", "", spec.lower()))
    if not m:
        raise ValueError(
            f"interconnect {spec!r}: write it as nvlink<gen>x<links> or pcie<gen>x<width>, "
            "e.g. nvlink4x18, pcie5x16"
        )
    generation, lanes = int(m.group(2)), int(m.group(3))
    if m.group(1) == "nvlink":
        return nvlink(generation, lanes, "given")
    found = pcie(generation, lanes, "given")
    if found is None:
        raise ValueError(f"interconnect {spec!r}: unknown PCIe generation {generation}")
    return found


def lookup(name: str | None) -> Product | None:
    return next((p for p in PRODUCTS if name and re.search(p.pattern, name)), None)


def from_inventory(
    inventory: dict,
    override: Interconnect | None = None,
    calibrations: list[Calibration] | None = None,
) -> Interconnect | None:
    """The run's interconnect (module docstring), or None where the inventory says nothing usable.

    ``calibrations``: saved ``scaldiag calibrate`` results to choose from; None looks them up where
    ``calibrate`` saves them (``find_calibrations``). One measured on GPUs of the same product over
    the same kind of link replaces the default curve (``choose``). A given ``override`` is another
    machine: its defaults, never this machine's calibration.
    """
    if override is not None:
        return override
    link = _link(inventory)
    if link is None:
        return None
    notes: list[str] = []
    if calibrations is None:
        calibrations, notes = find_calibrations()
    chosen = choose(calibrations, inventory, link.kind)
    return replace(link, curve=chosen.curve if chosen else link.curve, notes=tuple(notes))


def peer_links(inventory: dict) -> int | None:
    """NVLinks between the closest-linked pair of visible GPUs, from the inventory's peer matrix
    (``topology[].nvlink_links``, as ``nvidia-smi topo -m`` shows NV18), or None where it was not
    recorded.

    The ring's slowest hop sets its pace, so the fewest links of any pair; 0 where a pair has none
    (PCIe).
    """
    pairs = [t.get("nvlink_links") for t in inventory.get("topology") or [] if isinstance(t, dict)]
    counts = [c for c in pairs if isinstance(c, int) and not isinstance(c, bool) and c >= 0]
    return min(counts) if counts and len(counts) == len(pairs) else None


def _link(inventory: dict) -> Interconnect | None:
    gpus = inventory.get("gpus") or []
    if not gpus:
        return None
    links = min(g.get("nvlink_active_links") or 0 for g in gpus)
    name = gpus[0].get("name")
    product = lookup(name)
    peers = peer_links(inventory) if len(gpus) > 1 else None
    if peers:
        return nvlink(
            product.generation if product else 4,
            peers,
            "read",
            f"NVML's peer matrix: NV{peers} between every pair of the {len(gpus)} GPUs"
            + ("" if product else "; generation assumed 4"),
        )
    if peers == 0:
        return _pcie_of(
            gpus, name, "NVML's peer matrix: a pair of GPUs with no NVLink between them"
        )
    if links:
        return nvlink(
            product.generation if product else 4,
            links,
            "read",
            "NVML's active links" + ("" if product else "; generation assumed 4"),
        )
    if len(gpus) > 1 and all(g.get("nvlink_active_links") == 0 for g in gpus):
        product = None  # NVML read no NVLink between GPUs it can see: their PCIe link is the path
    if product:
        return nvlink(
            product.generation,
            product.links,
            "looked up",
            f"{name}: {product.source}; NVML reads no active link with one GPU visible",
        )
    return _pcie_of(
        gpus, name, f"{name or 'GPU'} not in the product table: its PCIe link from NVML"
    )


def _pcie_of(gpus: list[dict], name: str | None, why: str) -> Interconnect | None:
    gen, width = gpus[0].get("pcie_gen_current"), gpus[0].get("pcie_width_current")
    return pcie(gen, width, "assumed", why) if gen and width else None


# --- saved calibrations (``scaldiag calibrate``; the file's layout: docs/calibrate.md) ---

CALIBRATION_SCHEMA = "scaldiag.calibration/1"
# The file's version as every JSON scaldiag writes states it; files written before it was added
# have none and are read as version 1.
CALIBRATION_SCHEMA_VERSION = 1
CALIBRATION_ENV = "SCALDIAG_CALIBRATION"  # one file: calibrate writes it, reports read only it
# a first point this small is the latency (nccl-tests: flat up to ~64 KiB)
SMALL_MESSAGE_BYTES = 64 * 1024


@dataclass(frozen=True)
class Calibration:
    path: str
    device: str  # "gpu", or "cpu" (gloo on CPU processes: never used for GPU predictions)
    gpu_name: str | None
    gpu_count: int
    link_kind: str | None  # "nvlink", "pcie", or None where NVML did not say
    framework: str
    measured_at: str
    curve: Curve | None  # None: one GPU, nothing measured between GPUs


@dataclass(frozen=True)
class CalibrationReport:
    """``scaldiag calibrate``'s report: the document it saved (docs/calibrate.md) and where."""

    doc: dict
    path: str


def calibration_dir(env: dict | None = None) -> Path:
    env = os.environ if env is None else env
    cache = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(cache) / "scaldiag" / "interconnect"


def calibration_paths(env: dict | None = None) -> list[Path]:
    """$SCALDIAG_CALIBRATION where set, else every JSON file in the cache folder, newest first."""
    env = os.environ if env is None else env
    if env.get(CALIBRATION_ENV):
        return [Path(env[CALIBRATION_ENV])]
    folder = calibration_dir(env)
    files = [p for p in folder.glob("*.json") if p.is_file()] if folder.is_dir() else []
    return sorted(files, key=lambda p: p.stat().st_mtime, reverse=True)


# What a calibration file may hold (docs/reliability.md): `calibrate` writes ~5 KB, one row per
# power of two from 8 B (40 rows reach 4 TiB), ranks of one machine. A file past these is not ours,
# and is noted.
MAX_CALIBRATION_BYTES = 1 << 20
MAX_CALIBRATION_ROWS = 64
MAX_CALIBRATION_RANKS = 1024  # the GPUs (or CPU processes) of one machine
MAX_MESSAGE_BYTES = 1 << 44
# An all-reduce call takes more than 100 ns (a kernel launch alone is ~2 us) and less than a minute
# (2 GiB over PCIe 3 x1 takes 4 s); its bus bandwidth is under 20 TB/s (NVLink 5 is 1.8 TB/s). A
# crafted curve past these printed "0 samples/s, -100%".
MIN_CALL_S, MAX_CALL_S = 1e-7, 60.0
MAX_BUS_BYTES_PER_S = 2e13


def load_calibration(path: str | os.PathLike) -> Calibration:
    """One saved calibration; a missing, unreadable or malformed file is a ScaldiagError saying
    why."""
    try:
        # O_NONBLOCK and a regular file only: a FIFO named by $SCALDIAG_CALIBRATION blocked the open
        # forever
        with os.fdopen(
            os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)), "rb"
        ) as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise OSError(errno.EINVAL, "not a regular file (a device, a FIFO or a socket)")
            raw = f.read(MAX_CALIBRATION_BYTES + 1)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScaldiagError(
            f"calibration {path}: cannot read it ({type(exc).__name__}: {exc})"
        ) from None
    try:
        if len(raw) > MAX_CALIBRATION_BYTES:
            raise ValueError(f"over {MAX_CALIBRATION_BYTES >> 20} MiB")
        data = json.loads(text, parse_constant=_no_constant)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return calibration_from_dict(data, str(path))
    except (
        ValueError,
        TypeError,
        KeyError,
        AttributeError,
        ArithmeticError,
        RecursionError,
    ) as exc:
        raise ScaldiagError(
            f"calibration {path}: not a scaldiag calibration ({type(exc).__name__}: {exc}); "
            "run `scaldiag calibrate` again"
        ) from None


def _no_constant(name: str):
    raise ValueError(f"{name} is no number")


def _count(value, what: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{what} is {str(value)[:40]}, not a count in {low}..{high}")
    return value


def _number(value, what: str, low: float, high: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"{what} is not a number")
    if isinstance(value, int) and abs(value) > 2**62 or not low <= float(value) <= high:
        raise ValueError(f"{what} is {str(value)[:40]}, not a positive number in {low:g}..{high:g}")
    return float(value)


def _text(value, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{what} is not text")
    return value


def calibration_from_dict(data: dict, path: str = "") -> Calibration:
    if data.get("schema") != CALIBRATION_SCHEMA:
        raise ValueError(
            f"schema {str(data.get('schema'))[:40]!r}, expected {CALIBRATION_SCHEMA!r}"
        )
    version = data.get("schema_version", CALIBRATION_SCHEMA_VERSION)
    if version != CALIBRATION_SCHEMA_VERSION:
        raise ValueError(
            f"schema_version {str(version)[:40]}, expected {CALIBRATION_SCHEMA_VERSION} (a newer"
            " scaldiag's file?)"
        )
    machine = data["machine"]
    if not isinstance(machine, dict):
        raise ValueError("machine is not an object")
    rows = data.get("allreduce") or []
    if not isinstance(rows, list) or len(rows) > MAX_CALIBRATION_ROWS:
        raise ValueError(f"allreduce is not a list of at most {MAX_CALIBRATION_ROWS} rows")
    ranks = _count(data["ranks"], "ranks", 1, MAX_CALIBRATION_RANKS)
    link = machine.get("link") or {}
    if not isinstance(link, dict) or link.get("kind") not in (None, "nvlink", "pcie"):
        raise ValueError("machine.link.kind is not nvlink, pcie or null")
    curve = None
    if rows and ranks >= 2:
        sizes, times = _rows(rows)
        # the fixed cost of a call: no more than the fastest call measured (on a busy host the
        # smallest size is not always the fastest)
        latency = min(times) if sizes[0] <= SMALL_MESSAGE_BYTES else min(NCCL_LATENCY_S, min(times))
        tail = ring_volume(ranks) * sizes[-1] / times[-1]
        if any(ring_volume(ranks) * m / t > MAX_BUS_BYTES_PER_S for m, t in zip(sizes, times)):
            raise ValueError(f"a row's bus bandwidth is over {MAX_BUS_BYTES_PER_S / 1e12:g} TB/s")
        curve = Curve(
            sizes, times, ranks, latency, tail, _calibration_source(data, sizes, times, ranks, path)
        )
    device = data["device"]
    if device not in ("gpu", "cpu"):
        raise ValueError("device is not gpu or cpu")
    gpu_count = _count(machine.get("gpu_count") or 0, "machine.gpu_count", 0, MAX_CALIBRATION_RANKS)
    return Calibration(
        path,
        device,
        _text(machine.get("gpu_name"), "machine.gpu_name"),
        gpu_count,
        link.get("kind"),
        str(_text(data.get("framework"), "framework")),
        str(_text(data.get("measured_at"), "measured_at")),
        curve,
    )


def _rows(rows: list) -> tuple[tuple[float, ...], tuple[float, ...]]:
    if not all(isinstance(r, dict) for r in rows):
        raise ValueError("an allreduce row is not an object")
    sizes = tuple(_number(r["bytes"], "a row's bytes", 1, MAX_MESSAGE_BYTES) for r in rows)
    times = tuple(_number(r["median_s"], "a row's median_s", MIN_CALL_S, MAX_CALL_S) for r in rows)
    return sizes, times


def _calibration_source(data: dict, sizes: tuple, times: tuple, ranks: int, path: str) -> str:
    bus = [ring_volume(ranks) * m / t for m, t in zip(sizes, times)]
    who = (
        f"{ranks} x {data['machine'].get('gpu_name')}"
        if data.get("device") == "gpu"
        else f"{ranks} CPU processes, {data.get('backend')}"
    )
    return (
        f"measured by scaldiag calibrate ({data.get('framework')}, {who},"
        f" {data.get('measured_at')}; {path}):"
        f" {size_words(sizes[0])}-{size_words(sizes[-1])}, busbw"
        f" {min(bus) / 1e9:.3g}-{max(bus) / 1e9:.3g} GB/s"
    )


def size_words(m: float) -> str:
    unit = next(
        ((u, f) for u, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)) if m >= f), ("B", 1)
    )
    return f"{m / unit[1]:g} {unit[0]}"


def find_calibrations(env: dict | None = None) -> tuple[list[Calibration], list[str]]:
    """The saved calibrations, and a note for each file that could not be read (the defaults
    stand)."""
    found, notes = [], []
    for path in calibration_paths(env):
        try:
            found.append(load_calibration(path))
        except ScaldiagError as exc:
            notes.append(f"{exc}: not used, the defaults stand")
    return found, notes


def choose(calibrations: list[Calibration], inventory: dict, link_kind: str) -> Calibration | None:
    """The calibration for this inventory's GPUs: same product name, measured between GPUs on the
    same kind of link; the one at this GPU count where the run saw more than one, else the most GPUs
    (newest first).
    """
    gpus = inventory.get("gpus") or []
    name = (gpus[0].get("name") or "").strip() if gpus else ""
    fits = [
        c
        for c in calibrations
        if c.device == "gpu"
        and c.curve is not None
        and name
        and (c.gpu_name or "").strip() == name
        and c.link_kind in (None, link_kind)
    ]
    if not fits:
        return None
    same = [c for c in fits if len(gpus) > 1 and c.curve.ranks == len(gpus)]
    return (same or sorted(fits, key=lambda c: -c.curve.ranks))[0]
