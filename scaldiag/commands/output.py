"""Where a command's report goes: the terminal, a JSON file, or JSON alone on stdout."""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import sys
from pathlib import Path

from scaldiag.errors import ScaldiagError


def write(*args, **kwargs) -> None:
    """render.write, imported when a report is written (numpy, rich): `profile` starts the script
    first (bench/startup/run.py)."""
    from scaldiag.render import write as render_write

    render_write(*args, **kwargs)


def add_interconnect(parser) -> None:
    parser.add_argument(
        "--interconnect",
        metavar="LINK",
        help=(
            "predict a sweep's scaling for this link between GPUs instead of the measured "
            "machine's: nvlink<gen>x<links> or pcie<gen>x<width>, e.g. nvlink4x18, pcie5x16 "
            "(docs/scaling.md)"
        ),
    )


def add_verbose(parser) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="the whole report: every finding's fix (and every framework's), every table and note",
    )


def add_json(parser, what: str = "report") -> None:
    parser.add_argument(
        "--json",
        metavar="FILE",
        type=output_path,
        help=f"also write the {what} as JSON ('-' for stdout only)",
    )


def add_engine(parser) -> None:
    parser.add_argument(
        "--engine",
        metavar="SPEC",
        default=None,
        help=(
            "where a job's rank traces are reduced, one rank at a time each: local (default: "
            "worker processes, one per core), local:N, local:1 (in this process, the least "
            "memory), dask or dask://HOST:PORT (docs/engines.md)"
        ),
    )


def output_path(text: str) -> str:
    """An argparse type for a report's file: an empty path is refused (``-o ''`` was taken as no
    ``-o`` and replaced ./scaldiag_report.html without a word)."""
    if text == "":
        raise argparse.ArgumentTypeError("an empty path: name a file, or '-' for stdout")
    return text


def engine_of(args):
    """The engine ``--engine`` names, as a context manager (scaldiag/engines.py, imported only
    here)."""
    from scaldiag.engines import open_engine

    return open_engine(args.engine)


def emit(
    report,
    json_path: str | None = None,
    verbose: bool = False,
    fmt: str = "terminal",
    output: str | None = None,
    **views,
) -> None:
    """Every command's report, through the render table: ``fmt`` (render.FORMATS) to ``output``
    (None or ``-``: stdout; a file: replaced only once written whole, ``replacing``), and JSON to
    ``json_path`` too (``-``: stdout; the terminal report on stdout then gives way to it).
    ``views``: the timeline formats' (render.VIEW_FORMATS). ``verbose``: the whole terminal report,
    every fix of every framework (the JSON always holds it all)."""
    if "" in (output, json_path):  # a command whose option has no output_path type
        raise ScaldiagError("an empty path for the report: name a file, or '-' for stdout")
    to_stdout = output in (None, "-")
    if json_path == "-" and to_stdout and fmt in ("terminal", "json"):
        write(report, "json")
        return
    if to_stdout:
        write(report, fmt, all_fixes=verbose, **views)
    else:
        with replacing(Path(output)) as stream:
            write(report, fmt, stream, all_fixes=verbose, **views)
    if json_path == "-":
        write(report, "json")
    elif json_path:
        with replacing(Path(json_path)) as stream:
            write(report, "json", stream)


@contextlib.contextmanager
def replacing(path: Path):
    """A stream whose text replaces ``path`` only once all of it is written: a report that fails (or
    a disk that fills) leaves the file as it was, never empty or cut. A device or a FIFO
    (``/dev/full``, ``/dev/stdout``) is written in place: renaming over it would replace the device.
    """
    target = path.resolve() if path.is_symlink() else path
    if _is_special(target):
        with _failing_as_error(path):
            with target.open("w", encoding="utf-8") as stream:
                yield stream
        return
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with _failing_as_error(path):
            with tmp.open("w", encoding="utf-8") as stream:
                yield stream
            _keep_mode(target, tmp)
            os.replace(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _is_special(path: Path) -> bool:
    try:
        return not stat.S_ISREG(path.stat().st_mode) and not path.is_dir()
    except OSError:  # absent (a new file) or unreachable (said when it is opened)
        return False


def _keep_mode(target: Path, tmp: Path) -> None:
    with contextlib.suppress(OSError):  # a new file keeps the umask's mode
        os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))


@contextlib.contextmanager
def _failing_as_error(path: Path):
    try:
        yield
    except OSError as exc:
        raise ScaldiagError(f"cannot write {path}: {exc.strerror or exc}") from None


def stdout_gone() -> None:
    """The reader of stdout has gone (``| head``): what is still buffered, and anything printed
    later, goes nowhere, so that neither this nor Python's flush at exit raises again or prints a
    traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (
        OSError,
        ValueError,
        AttributeError,
    ):  # no real stdout (a test's StringIO): nothing to redirect
        pass


def flush_stdout() -> None:
    """Flush stdout now, where a reader that has gone is found and taken (not at exit, as an
    error)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_gone()


def write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise ScaldiagError(f"cannot write {path}: {exc.strerror}") from exc
