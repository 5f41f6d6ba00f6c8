"""Run SCRIPT exactly as `python SCRIPT ARGS` would, record every training step, a profiler trace of
steady-state steps, GPU (NVML) and host samples, then print the report. Keras 3 model.fit
(TensorFlow or JAX backend) is captured automatically."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from scaldiag.collect import multinode
from scaldiag.collect.env import GLOBAL_BATCH_ENV, TORCHRUN_ENV, TRACE_LIMIT_ENV
from scaldiag.collect.launcher import launch, uncaptured_command
from scaldiag.collect.session import new_run_dir
from scaldiag.commands.output import (
    add_interconnect,
    add_verbose,
    emit,
    output_path,
    stdout_gone,
)
from scaldiag.errors import ScaldiagError
from scaldiag.sanitize import line

HELP = "run an unmodified training script with capture, then report"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("profile", help=HELP, description=__doc__)
    p.add_argument("script", help="the training script")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments (after --)")
    p.add_argument(
        "--out", default="scaldiag_runs", help="where run directories go (default: scaldiag_runs)"
    )
    p.add_argument("--json", metavar="FILE", type=output_path, help="also write the report as JSON")
    _add_sweep(p)
    _add_capture(p)
    _add_launch(p)
    p.add_argument(
        "--try",
        dest="try_finding",
        metavar="FINDING",
        help=(
            "then, if the run has that finding, apply its fix and measure it (scaldiag try RUN_DIR"
            " FINDING: 3 baseline and fixed rounds; one run, not a sweep or a job)"
        ),
    )
    add_verbose(p)
    add_interconnect(p)
    p.set_defaults(func=run)


def _add_sweep(p: argparse.ArgumentParser) -> None:
    """A sweep: one run per device count, each count K times."""
    p.add_argument(
        "--gpus",
        metavar="N,N,...",
        type=_counts,
        help="sweep: run once per GPU count (the first N visible GPUs; N is in $SCALDIAG_NUM_GPUS)",
    )
    p.add_argument(
        "--emulate",
        action="store_true",
        help="sweep over N logical CPU devices instead of GPUs (machines without GPUs)",
    )
    p.add_argument(
        "--repeat",
        type=_positive,
        default=1,
        metavar="K",
        help="run each GPU count K times (default 1)",
    )


def _add_capture(p: argparse.ArgumentParser) -> None:
    """What the capture says while it runs, and what it reads or bounds: batch, trace window."""
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress lines on stderr while the script runs (errors are still said)",
    )
    p.add_argument(
        "--global-batch",
        type=_positive,
        metavar="N",
        help="samples per step, for input whose batch scaldiag cannot read (every run of a sweep)",
    )
    p.add_argument(
        "--trace-limit-s",
        type=_seconds,
        metavar="S",
        help=(
            "the trace window's traced steps take at most S seconds (default 30; and at most 10%%"
            " of the run's wall so far, SCALDIAG_TRACE_SHARE); it ends at the first step boundary"
            " past it"
        ),
    )


def _add_launch(p: argparse.ArgumentParser) -> None:
    """Launches of several processes: torchrun on one node, a job over several nodes."""
    p.add_argument(
        "--nproc-per-node",
        metavar="N",
        type=_positive,
        help=(
            "PyTorch DDP: run the script under `torchrun --standalone --nproc-per-node N`, every"
            " rank captured (with --gpus: one process per GPU of each run; docs/pytorch.md)"
        ),
    )
    p.add_argument(
        "--nnodes",
        metavar="N",
        type=_positive,
        help=(
            "a job over N machines: run this on every node (torchrun's multi-node launch with "
            "--node-rank and --rdzv-endpoint; docs/multinode.md)"
        ),
    )
    p.add_argument(
        "--node-rank", metavar="K", type=_natural, help="this node's rank in the job (0..N-1)"
    )
    p.add_argument(
        "--rdzv-endpoint",
        metavar="HOST:PORT",
        help="where the nodes meet (node 0's address and a free port)",
    )
    p.add_argument(
        "--torchrun",
        action="store_true",
        help=(
            "with --gpus or --emulate: run each sweep point under torchrun, one process per device"
        ),
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, not {text}")
    return value


def _counts(text: str) -> list[int]:
    try:
        counts = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of GPU counts: {text!r}") from None
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError("GPU counts must be 1 or more")
    return counts


def _whole(minimum: int):
    """An argparse type: a whole number of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, not {value}")
        return value

    return parse


_positive, _natural = _whole(1), _whole(0)


def check_script(script: Path) -> None:
    if script.is_dir():
        raise ScaldiagError(f"{script} is a directory, not a Python script")
    if not script.exists():
        raise ScaldiagError(f"no such script: {script}")
    if not script.is_file() or not os.access(script, os.R_OK):
        raise ScaldiagError(f"cannot read the script {script}")


def script_arguments(argv: list[str] | None, script: str, parsed: list[str]) -> list[str]:
    """The script's arguments exactly as typed after it, less one ``--`` right after the script
    (profile's own separator). argparse drops a ``--`` itself in some Python versions (3.11: the
    first), so they are read from the tail of ``argv`` that argparse left as the script's:
    ``train.py -- -- --foo`` gives the script ``-- --foo`` (it got ``--foo``)."""
    n = len(parsed)
    if argv is None or len(argv) < n + 1:
        typed = list(parsed)
    else:
        at = len(argv) - n  # where argparse's remainder begins
        dropped = at >= 2 and argv[at - 1] == "--" and argv[at - 2] == script
        typed = argv[at - 1 :] if dropped else argv[at:]
    return typed[1:] if typed[:1] == ["--"] else typed


def run(args: argparse.Namespace) -> int:
    script = Path(args.script)
    check_script(script)
    script_args = script_arguments(getattr(args, "argv", None), args.script, args.script_args)
    if args.global_batch:  # inherited by every run the command launches
        os.environ[GLOBAL_BATCH_ENV] = str(args.global_batch)
    if args.trace_limit_s is not None:
        os.environ[TRACE_LIMIT_ENV] = repr(args.trace_limit_s)
    _refuse_mixed(args)
    if args.gpus or args.emulate:
        return _sweep(args, script, script_args)
    run_dir, code = _launch_one(args, script, script_args)
    # The analysis is imported once the script has ended, not before it starts (numpy, rich:
    # bench/startup/run.py).
    from scaldiag.pipeline import diagnose_run
    from scaldiag.render.terminal.common import exit_text

    if not args.quiet:
        print(
            f"\nscaldiag: the script ended ({exit_text(code)}); analysing the run...",
            file=sys.stderr,
            flush=True,
        )
    _report(lambda: emit(diagnose_run(run_dir), args.json, args.verbose), args)
    print(line(f"scaldiag: run directory {run_dir}  (scaldiag report {run_dir})"), file=sys.stderr)
    if args.try_finding and code == 0:
        tried = _try(run_dir, args.try_finding)
        if tried == 130:  # Ctrl-C during the rounds: the pairs so far are kept
            return tried
    return exit_status(code)


def _refuse_mixed(args: argparse.Namespace) -> None:
    """Options that do not go together: a sweep and a job's, ``--try`` and either, ``--torchrun``
    on one run."""
    if (args.gpus or args.emulate) and (
        args.nnodes or args.node_rank is not None or args.rdzv_endpoint
    ):
        raise ScaldiagError(
            "a sweep (--gpus, --emulate) runs on one machine: --nnodes, --node-rank and "
            "--rdzv-endpoint are for one run of a job over several"
        )
    if args.try_finding and (args.gpus or args.emulate or args.nproc_per_node or args.nnodes):
        raise ScaldiagError("--try measures a fix on one run: not with a sweep or a job")
    if args.torchrun and not args.nproc_per_node and not (args.gpus or args.emulate):
        raise ScaldiagError(
            "--torchrun applies to a sweep (--gpus, --emulate); for one run give --nproc-per-node N"
        )


def _launch_one(args: argparse.Namespace, script: Path, script_args: list[str]) -> tuple[Path, int]:
    """One run (or one node's part of a job) launched and waited for: its directory and the
    script's exit status."""
    node = _node(args)
    launch_command = (
        multinode.torchrun_command(node, str(script), script_args) if _torchrun_node(node) else None
    )
    if (
        args.nproc_per_node and launch_command is None
    ):  # the child re-runs itself under torchrun (torch_hooks.py)
        os.environ[TORCHRUN_ENV] = str(args.nproc_per_node)
    try:
        run_dir = new_run_dir(
            args.out, multinode.run_dir_label(script.stem, node) if node else script.stem
        )
    except (OSError, RuntimeError) as exc:
        _run_without_capture(
            args.out,
            exc,
            (
                multinode.uncaptured_torchrun(node, str(script), script_args)
                if launch_command
                else uncaptured_command(str(script), script_args, args.nproc_per_node)
            ),
        )
    code = launch(
        run_dir,
        str(script),
        script_args,
        stdout=_script_stdout(args),
        progress_every_s=_progress(args),
        command=launch_command,
        run_fields=dict(node=node.fields()) if node else None,
    )
    if (
        launch_command and code == 0
    ):  # the reference SD209 compares the network with (docs/multinode.md)
        _intra_node(run_dir, args)
    return run_dir, code


def _try(run_dir: Path, finding: str) -> int:
    """``scaldiag try RUN_DIR FINDING`` with its defaults; its refusal is a line, not the run's
    failure (the script's exit status stays the command's)."""
    from scaldiag.commands import try_fix

    print(line(f"scaldiag: trying {finding}'s fix on {run_dir}..."), file=sys.stderr, flush=True)
    try:
        return try_fix.run(
            argparse.Namespace(
                run_dir=str(run_dir),
                finding=finding,
                rounds=try_fix.DEFAULT_ROUNDS,
                budget_s=try_fix.DEFAULT_BUDGET_S,
                allow_semantic=False,
                json=None,
            )
        )
    except ScaldiagError as exc:
        print(line(f"scaldiag: try: {exc}"), file=sys.stderr)
        return 2


def _node(args) -> multinode.Node | None:
    """This node's place in a job over several machines (the flags, else SLURM, TF_CONFIG, JAX), or
    None."""
    try:
        return multinode.detect(
            os.environ, args.nnodes, args.node_rank, args.rdzv_endpoint, args.nproc_per_node
        )
    except multinode.NodeError as exc:
        raise ScaldiagError(str(exc)) from None


def _intra_node(run_dir: Path, args) -> None:
    if not args.quiet:
        print(
            "scaldiag: measuring the same all-reduce inside this node (gloo over loopback)...",
            file=sys.stderr,
            flush=True,
        )
    why = multinode.record_intra_node(run_dir)
    if why:
        print(line(f"scaldiag: no intra-node reference: {why}"), file=sys.stderr)


def _torchrun_node(node: multinode.Node | None) -> bool:
    return node is not None and node.launcher == "torchrun"


# A line on stderr this often while a run goes on: a sign of life, rare enough not to bury the
# script's output.
PROGRESS_EVERY_S = 30.0


def _progress(args) -> float | None:
    return None if args.quiet else PROGRESS_EVERY_S


def _script_stdout(args) -> int | None:
    """``--json -``: the script's own output goes to stderr, so that stdout is the JSON alone."""
    return sys.stderr.fileno() if args.json == "-" else None


def exit_status(code: int) -> int:
    """The script's exit code as a shell reports it: killed by signal N is 128 + N."""
    return code if code >= 0 else 128 - code


def _run_without_capture(out: str, exc: Exception, command: list[str]) -> None:
    """The run directory cannot be made: say so once, and become the same launch without capture
    (``python SCRIPT ARGS``, or ``torchrun`` under ``--nproc-per-node``)."""
    reason = getattr(exc, "strerror", None) or str(exc)
    print(
        line(
            f"scaldiag: cannot create a run directory under {out} ({reason}); running the script"
            " without capture, nothing is recorded"
        ),
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.flush()
    os.environ.pop(TORCHRUN_ENV, None)  # no bootstrap runs to read it
    os.execv(command[0], command)


def _report(make, args) -> None:
    """Print the report; scaldiag's own failure here never changes the exit code, which is the
    script's."""
    try:
        make()
        sys.stdout.flush()
    except (
        BrokenPipeError
    ):  # the reader of the report has gone (| head): not scaldiag's failure, nor the script's
        stdout_gone()
    except ScaldiagError as exc:  # the run is kept even when its report cannot be made
        print(f"scaldiag: no report: {line(exc)}", file=sys.stderr)
    except Exception as exc:
        if getattr(args, "debug", False):
            raise
        print(
            f"scaldiag: no report: internal error ({type(exc).__name__}: {line(exc)}); the run"
            " directory is kept",
            file=sys.stderr,
        )


def _sweep(args, script: Path, script_args: list[str]) -> int:
    from scaldiag.collect.sweep import gpus_for, sweep
    from scaldiag.pipeline import diagnose_sweep

    counts = args.gpus or [1, 2]
    gpus = gpus_for(counts, args.emulate)
    try:
        sweep_dir = new_run_dir(args.out, f"{script.stem}-sweep")
    except (
        OSError,
        RuntimeError,
    ) as exc:  # a sweep is a measurement: without its record it is pointless
        raise ScaldiagError(
            f"cannot create a sweep directory under {args.out}:"
            f" {getattr(exc, 'strerror', None) or exc}"
        ) from exc
    try:
        codes = sweep(
            sweep_dir,
            str(script),
            script_args,
            counts,
            args.emulate,
            gpus,
            args.repeat,
            torchrun=bool(args.torchrun or args.nproc_per_node),
            stdout=_script_stdout(args),
            progress_every_s=_progress(args),
        )
    except OSError as exc:
        raise ScaldiagError(
            f"the sweep stopped: cannot write under {sweep_dir}: {exc.strerror or exc}"
        ) from exc
    print(file=sys.stderr)
    _report(
        lambda: emit(diagnose_sweep(sweep_dir, args.interconnect), args.json, args.verbose), args
    )
    print(
        line(f"scaldiag: sweep directory {sweep_dir}  (scaldiag report {sweep_dir})"),
        file=sys.stderr,
    )
    failed = [c for c in codes if c != 0]
    return 0 if not failed else exit_status(failed[0])
