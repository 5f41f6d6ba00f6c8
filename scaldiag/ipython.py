"""The IPython extension: ``%load_ext scaldiag``, then a cell profiled in the kernel's own process:

    %%scaldiag [--out DIR] [--global-batch N] [--no-display]
    model.fit(x, y, epochs=2)

The cell runs inside ``scaldiag.capture()`` (scaldiag/capturing.py) and the report is displayed
below it (the HTML report inline; text where the front end shows no HTML). The cell's code runs as
a cell would, in the notebook's namespace, IPython's own syntax (``%magics``, ``!shell``)
included; its last expression's value is the cell's output, as without the magic. An exception in
the cell is the cell's error, as without the magic (after the run is closed). The last capture is
``_scaldiag`` in the namespace (its ``run_dir``, its ``report``).
"""

from __future__ import annotations

import argparse
import ast
import shlex

from scaldiag.capturing import Capture, capture

LAST = "_scaldiag"  # the namespace's name for the last cell's capture


def load_ipython_extension(ip) -> None:
    ip.register_magic_function(_magic(ip), magic_kind="cell", magic_name="scaldiag")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="%%scaldiag", add_help=False, exit_on_error=False)
    p.add_argument("--out", default=None, help="where run directories go (scaldiag_runs)")
    p.add_argument("--global-batch", type=int, default=None, help="samples per step")
    p.add_argument("--no-display", action="store_true", help="record only; show nothing")
    return p


def _magic(ip):
    def scaldiag(line: str, cell: str):
        args = parse(line)
        with capture(out=args.out, global_batch=args.global_batch, label="cell") as cap:
            ip.user_ns[LAST] = cap
            value = run_cell_code(ip, cell)
        if not args.no_display:
            _show(cap)
        return value

    scaldiag.__doc__ = __doc__
    return scaldiag


def parse(line: str) -> argparse.Namespace:
    """The magic's arguments; a mistake is IPython's ``UsageError``: one line, no traceback."""
    from IPython.core.error import UsageError

    try:
        args, extra = _parser().parse_known_args(shlex.split(line))
    except (argparse.ArgumentError, ValueError) as exc:
        raise UsageError(f"%%scaldiag {line}: {exc}") from None
    if extra:
        raise UsageError(
            f"%%scaldiag {line}: unknown {' '.join(extra)} (options: --out DIR,"
            " --global-batch N, --no-display)"
        )
    return args


def run_cell_code(ip, cell: str):
    """The cell as IPython would run it (its syntax transformed), in the user's namespace; the
    value of a last expression returned. Its exceptions propagate (the run is closed by
    ``capture`` on their way out)."""
    source = ip.transform_cell(cell)
    tree = ast.parse(source)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    name = ip.compile.cache(source)  # its lines shown in a traceback
    if tree.body:
        exec(compile(tree, name, "exec"), ip.user_global_ns, ip.user_ns)
    if last is not None:
        return eval(
            compile(ast.Expression(last.value), name, "eval"), ip.user_global_ns, ip.user_ns
        )
    return None


def _show(cap: Capture) -> None:
    from IPython.display import display

    if cap.report is not None:
        display(cap.report)
    else:
        from scaldiag.sanitize import line

        print(line(f"scaldiag: no report for {cap.run_dir}: {cap.report_error}"))
