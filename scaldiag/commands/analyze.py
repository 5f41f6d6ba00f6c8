"""Diagnose an existing TensorFlow, JAX or PyTorch profile: per-step breakdown, copies, collectives
and findings. Needs no framework installed."""

from __future__ import annotations

import argparse

from scaldiag.commands.output import add_engine, add_json, add_verbose, emit, engine_of
from scaldiag.pipeline import diagnose_trace

HELP = "diagnose an existing profile (.xplane.pb, Kineto .pt.trace.json, or a logdir)"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("analyze", help=HELP, description=__doc__)
    p.add_argument(
        "path",
        help=(
            "an .xplane.pb or Kineto .pt.trace.json(.gz) file, a directory of one per host "
            "or rank, or a TensorBoard logdir"
        ),
    )
    p.add_argument("--run", help="run name under plugins/profile/ (default: the latest)")
    add_json(p)
    add_verbose(p)
    add_engine(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with engine_of(args) as engine:
        report = diagnose_trace(args.path, args.run, engine)
    emit(report, args.json, args.verbose)
    return 0
