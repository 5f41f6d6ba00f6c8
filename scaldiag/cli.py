"""Command line entry point. Errors are caught once, here."""

from __future__ import annotations

import argparse
import sys

from scaldiag import __version__
from scaldiag.commands import analyze, check, compare, profile, report
from scaldiag.errors import ScaldiagError

INTERNAL_ERROR = 70  # EX_SOFTWARE (sysexits.h): distinct from 2, a problem with the input
COMMANDS = (profile, analyze, report, compare, check)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scaldiag", description="Why does training not scale with more GPUs?")
    parser.add_argument("--version", action="version", version=f"scaldiag {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ScaldiagError as exc:
        if args.debug:
            raise
        print(f"scaldiag: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("scaldiag: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (| head): nothing more to say
        return 0
    except Exception as exc:  # scaldiag's own bug: one line, not a traceback (--debug shows it)
        if args.debug:
            raise
        print(f"scaldiag: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback, "
              "and please report it)", file=sys.stderr)
        return INTERNAL_ERROR
