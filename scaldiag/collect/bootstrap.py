"""The child process of ``scaldiag profile``: run the user's script unmodified.

    python -m scaldiag.collect.bootstrap SCRIPT [ARGS...]     (run dir in $SCALDIAG_RUN_DIR)

The script runs as ``python SCRIPT ARGS`` would run it: as ``__main__``, with
``sys.argv = [SCRIPT, *ARGS]``, the script's directory first on ``sys.path``,
the same working directory, its exit code and exceptions unchanged. Before
it starts, an import hook waits for the frameworks the adapters follow
(``frameworks/adapters.py``: Keras, PyTorch, Lightning, transformers, JAX);
each adapter patches its framework's module once the program has imported it
(Keras's ``fit`` adds a ScaldiagCallback, torch.optim's global step hooks,
a Lightning or transformers callback, ``jax.jit``). Nothing else of the
program is touched, except under emulation (``SCALDIAG_EMULATE_DEVICES=N``,
set by ``profile --emulate``): once TensorFlow is imported, its CPU is split
into N logical devices and ``MirroredStrategy()`` uses all of them.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import traceback

from scaldiag.collect import printed, write_journal, write_snapshot
from scaldiag.collect.env import FINISH_LIMIT_ENV, RUN_DIR_ENV
from scaldiag.collect.frameworks import adapters, native_writes, torch_hooks
from scaldiag.collect.frameworks.adapters import PatchAfterImport as _PatchAfterImport
from scaldiag.record.rundir import append_mark


def _from_the_script(path: str, hook):
    """An uncaught exception's traceback as ``python SCRIPT`` prints it: from the script's first
    frame, without the bootstrap's and runpy's before it. A hook the script installs replaces this.
    """

    def excepthook(kind, value, tb):
        first = tb
        while first is not None and first.tb_frame.f_code.co_filename != path:
            first = first.tb_next
        if first is None:
            return hook(kind, value, tb)
        try:
            value = value.with_traceback(first)  # Python prints the exception's own traceback
        except Exception:
            pass
        hook(kind, value, first)

    return excepthook


FINISH_LIMIT_S = 180.0  # a trace's export and the input ceiling take seconds; a hang, forever


def finish_limit_s() -> float:
    try:
        return float(os.environ.get(FINISH_LIMIT_ENV) or FINISH_LIMIT_S)
    except ValueError:
        return FINISH_LIMIT_S


def exit_status(ended: BaseException | None) -> int:
    """The status ``python SCRIPT`` would have left with, for how the script ended."""
    if ended is None:
        return 0
    if isinstance(ended, SystemExit):
        code = ended.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    return 130 if isinstance(ended, KeyboardInterrupt) else 1


def finish_within(finish, limit_s: float, ended: BaseException | None) -> None:
    """The capture's end (``finish``), once the script has ended; where it has not returned after
    ``limit_s``, the process leaves with the script's own status: the user's training is done,
    and a profiler that never returns must not keep it from ending. Seen with torch's profiler
    stopping after a CUDA graph's replays (pytorch/pytorch#135003; docs/pytorch.md). What the end
    had not written yet is missing from the run; the launcher reports the rest."""
    done = threading.Event()

    def watchdog() -> None:
        if done.wait(limit_s):
            return
        print(
            f"scaldiag: the capture's end did not return within {limit_s:.0f} s after the script"
            " ended (a profiler that hangs at its stop); leaving with the script's exit status,"
            " the rest of the capture unwritten",
            file=sys.stderr,
        )
        if ended is not None and not isinstance(ended, SystemExit):
            traceback.print_exception(ended)  # what Python would have printed on the way out
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(exit_status(ended))

    threading.Thread(target=watchdog, name="scaldiag-finish-watchdog", daemon=True).start()
    try:
        finish()
    finally:
        done.set()


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m scaldiag.collect.bootstrap SCRIPT [ARGS...]")
    script = sys.argv[1]
    # profile --nproc-per-node: one bootstrap per rank
    torch_hooks.exec_torchrun(script, sys.argv[2:])
    torch_hooks.enter_rank_dir()
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    sys.meta_path.insert(0, _PatchAfterImport(adapters.import_patches()))
    sys.excepthook = _from_the_script(os.path.abspath(script), sys.excepthook)
    # The script's printed lines (its own clocks), read as they pass (collect/printed.py).
    printed_lines = printed.start(os.environ.get(RUN_DIR_ENV))
    writes = write_snapshot.start(script)  # profile: the folders the script may write, before
    if write_journal.install_from_env():  # try: each path kept before a write; profile: noted
        sys.meta_path.insert(0, _PatchAfterImport(native_writes.import_patches()))  # C++ writers
    append_mark(os.environ.get(RUN_DIR_ENV), "script_begin")
    ended: BaseException | None = None
    try:
        # Absolute, as ``python SCRIPT`` sets it (3.9+): a script that changes directory still finds
        # its files.
        runpy.run_path(os.path.abspath(script), run_name="__main__")
    except BaseException as exc:
        ended = exc
        raise
    finally:
        finish_within(adapters.finish, finish_limit_s(), ended)
        write_snapshot.finish(writes)  # run.json's ``writes`` (profile only)
        if printed_lines is not None:
            printed_lines.finish()
        append_mark(os.environ.get(RUN_DIR_ENV), "script_end")
        # a torchrun rank > 0: its own end
        torch_hooks.record_rank_outcome(torch_hooks.rank_outcome(ended))


if __name__ == "__main__":
    main()
