"""Command line entry point. Errors are caught once, here."""

from __future__ import annotations

import argparse
import ctypes
import errno
import importlib
import sys

from scaldiag import __version__
from scaldiag.commands.output import flush_stdout, stdout_gone
from scaldiag.errors import ScaldiagError
from scaldiag.sanitize import line

INTERNAL_ERROR = 70  # EX_SOFTWARE (sysexits.h): distinct from 2, a problem with the input
# The subcommands (their name on the command line: their module in scaldiag.commands), imported
# when named: `profile` starts the script before the analysis and its renderers are imported
# (numpy, rich: about a second of start-up on a busy machine; bench/startup/run.py).
COMMAND_MODULES = {
    "profile": "profile",
    "analyze": "analyze",
    "report": "report",
    "compare": "compare",
    "check": "check",
    "calibrate": "calibrate",
    "try": "try_fix",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of ``only`` (a name of COMMAND_MODULES) alone."""
    parser = argparse.ArgumentParser(
        prog="scaldiag", description="Why does training not scale with more GPUs?"
    )
    parser.add_argument("--version", action="version", version=f"scaldiag {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in COMMAND_MODULES.items():
        if only is None or name == only:
            importlib.import_module(f"scaldiag.commands.{module}").add_parser(sub)
    return parser


def _named_command(argv: list[str]) -> str | None:
    """The subcommand the arguments name, where they name one before any other word."""
    for arg in argv:
        if arg == "--debug":
            continue
        return arg if arg in COMMAND_MODULES else None
    return None


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # Ctrl-C before the command began (its parsing) or while an error was being said: the
        # same line and code as during the command, never a traceback (try's fuzz: a SIGINT at a
        # random time escaped main so, 1 case in 3,000)
        print("scaldiag: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_named_command(argv)).parse_args(argv)
    args.argv = argv  # as typed: profile reads the script's arguments from it
    _reuse_freed_memory()
    try:
        code = args.func(args)
        # a reader gone (| head) is found here; the code stays the command's (check, profile)
        flush_stdout()
        return code
    except ScaldiagError as exc:
        if args.debug:
            raise
        print(f"scaldiag: error: {line(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("scaldiag: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of our output went away (| head): not an error, nothing more to say
        stdout_gone()
        return 0
    except OSError as exc:
        # the environment, not scaldiag: a directory it may not read, a full disk
        if args.debug:
            raise
        return _environment_error(exc)
    except Exception as exc:  # scaldiag's own bug: one line, not a traceback (--debug shows it)
        if args.debug:
            raise
        print(
            f"scaldiag: internal error: {type(exc).__name__}: {line(exc)} (rerun with --debug for"
            " the traceback, and please report it)",
            file=sys.stderr,
        )
        return INTERNAL_ERROR


# Where an output cannot take more (stdout on /dev/full, a disk filling): what is still buffered for
# it is dropped, or Python's flush at exit raises again.
_OUTPUT_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def _environment_error(exc: OSError) -> int:
    """One line for what the file system refused (``cannot read /run: Permission denied``),
    exit 2."""
    if exc.errno in _OUTPUT_FULL:
        stdout_gone()
    where = (
        f" {exc.filename}" if exc.filename else " the output" if exc.errno in _OUTPUT_FULL else ""
    )
    verb = "write" if exc.errno in _OUTPUT_FULL else "read"
    print(
        f"scaldiag: error: cannot {verb}{line(where)}: {exc.strerror or type(exc).__name__}",
        file=sys.stderr,
    )
    return ScaldiagError.exit_code


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def _reuse_freed_memory() -> None:
    """Keep memory that large arrays free for the next ones (glibc; elsewhere nothing changes).

    An analysis makes and drops hundreds of large numpy temporaries, and glibc
    maps fresh zeroed pages for each and unmaps them when freed: at 270 MB of
    trace that was a second of kernel time (1.0-1.1 s of sys time; 0.4-0.6 s with
    this). Blocks over 64 MiB still get their own mappings: the reader reserves
    room for its columns and shrinks them in place, which a heap would keep
    (peak memory at 270 MB: 784 MB with every block on the heap, 719 MB so,
    710 MB with glibc's defaults, measured with a reservation of 4x a line's
    bytes). This process only: training that ``profile`` starts runs in
    processes of its own, with their defaults.
    """
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, 64 << 20)
        libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)
    except (OSError, AttributeError):
        pass
