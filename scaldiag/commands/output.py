"""Where a command's report goes: the terminal, a JSON file, or JSON alone on stdout."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from scaldiag.errors import ScaldiagError
from scaldiag.render import json, write


def add_interconnect(parser) -> None:
    parser.add_argument("--interconnect", metavar="LINK",
                        help="predict a sweep's scaling for this link between GPUs instead of the measured "
                             "machine's: nvlink<gen>x<links> or pcie<gen>x<width>, e.g. nvlink4x18, pcie5x16 "
                             "(docs/scaling.md)")


def add_verbose(parser) -> None:
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="the whole report: every finding's fix (and every framework's), every table and note")


def add_engine(parser) -> None:
    parser.add_argument("--engine", metavar="SPEC", default=None,
                        help="where a job's rank traces are reduced, one rank at a time each: local (default: "
                             "worker processes, one per core), local:N, local:1 (in this process, the least "
                             "memory), dask or dask://HOST:PORT (docs/engines.md)")


def engine_of(args):
    """The engine ``--engine`` names, as a context manager (scaldiag/engines.py, imported only here)."""
    from scaldiag.engines import open_engine

    return open_engine(args.engine)


def emit(report, json_path: str | None, verbose: bool = False) -> None:
    """``--json -``: JSON on stdout only; else the terminal report, and JSON to ``json_path`` if given.

    ``verbose``: the whole terminal report, every fix of every framework (the JSON always holds it all)."""
    if json_path == "-":
        write(report, "json")
        return
    write(report, "terminal", all_fixes=verbose)
    if json_path:
        write_text(Path(json_path), json.render(report))


def stdout_gone() -> None:
    """The reader of stdout has gone (``| head``): what is still buffered, and anything printed later,
    goes nowhere, so that neither this nor Python's flush at exit raises again or prints a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real stdout (a test's StringIO): nothing to redirect
        pass


def flush_stdout() -> None:
    """Flush stdout now, where a reader that has gone is found and taken (not at exit, as an error)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_gone()


def write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise ScaldiagError(f"cannot write {path}: {exc.strerror}") from exc
