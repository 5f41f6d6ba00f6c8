"""Check a run or a sweep against limits. Prints one line per check; exits 1 when any fails, 0 when
all pass, 2 on a usage error."""

from __future__ import annotations

import argparse
import sys

from scaldiag.commands.output import emit, stdout_gone
from scaldiag.pipeline import diagnose
from scaldiag.rules.check import CheckReport, Limits, check, parse_percent

HELP = "pass or fail a run or sweep against limits (exit 1 on failure), for CI"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("check", help=HELP, description=__doc__)
    p.add_argument("path", metavar="RUN_OR_SWEEP")
    p.add_argument(
        "--min-efficiency",
        type=float,
        metavar="E",
        help="a sweep's scaling efficiency at every device count, at least E (0.8 = 80%% of ideal)",
    )
    p.add_argument(
        "--max-step-ms", type=float, metavar="X", help="steady mean step time at most X ms"
    )
    p.add_argument(
        "--clock-agrees",
        action="store_true",
        help=(
            "every clock the script printed (a progress bar, a timer, the Trainer's metrics) agrees"
            " with scaldiag's figure of its scope, and counted no steps scaldiag did not record"
        ),
    )
    p.add_argument("--baseline", metavar="RUN", help="a run (or sweep) to compare throughput with")
    p.add_argument(
        "--max-regression",
        metavar="PCT",
        help=(
            "throughput at most PCT below the baseline's, beyond the noise (e.g. 5%%): the drop's "
            "95%% low end, as compare judges a change"
        ),
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    limits = Limits(
        min_efficiency=args.min_efficiency,
        max_step_ms=args.max_step_ms,
        max_regression_pct=parse_percent(args.max_regression) if args.max_regression else None,
        clock_agrees=args.clock_agrees,
    )
    baseline = diagnose(args.baseline) if args.baseline else None
    report = CheckReport(tuple(check(diagnose(args.path), limits, baseline)))
    code = 1 if report.failed else 0
    try:  # the verdict is the exit code, whether or not anyone reads the lines (| head -1)
        emit(report)
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_gone()
    except (
        OSError
    ) as exc:  # stdout on a full disk (or /dev/full): the lines are lost, not the verdict
        stdout_gone()
        print(
            f"scaldiag: check's lines could not be written ({exc.strerror or exc}): the verdict is"
            f" the exit code, {code}",
            file=sys.stderr,
        )
    return code
