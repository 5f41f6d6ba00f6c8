"""Profile training inside a notebook (or any running program), in its own process:

    import scaldiag

    with scaldiag.capture() as cap:
        model.fit(x, y, epochs=2)          # or a PyTorch loop, Lightning, a transformers Trainer
    cap.report                             # shown inline in Jupyter; cap.run_dir is the record

The kernel is not restarted and keeps its state. The block gets what ``scaldiag profile`` gives a
script (collect/inprocess.py): the same loop adapters and their evidence, the profiler window,
host and GPU samples, the printed clocks, a run directory ``scaldiag report`` reads again. What
one process cannot know (the start-up before the block, a sweep over GPU counts) the report says
as missing evidence. On leaving the block every patch is taken back: training after it runs as
it would have, and the next ``capture()`` records afresh.

An exception in the block propagates unchanged, after the run is closed as ``failed``
(``interrupted`` for Ctrl-C): what was recorded until then stays readable (``scaldiag.load``).
The module is not ``scaldiag.capture`` itself: that name is the function (``scaldiag/__init__``).
"""

from __future__ import annotations

import os
from pathlib import Path

from scaldiag.collect.env import GLOBAL_BATCH_ENV
from scaldiag.collect.frameworks.guard import reason, say
from scaldiag.collect.frameworks.own_run import close_abandoned
from scaldiag.collect.inprocess import InProcessRun, status_of

__all__ = ["capture", "Capture"]


class Capture:
    """The ``with`` block's run: ``run_dir`` once it started, ``report`` once it ended well (a
    ``scaldiag.api`` report, or None with ``report_error`` saying why)."""

    def __init__(self, out=None, global_batch: int | None = None, label: str = "capture"):
        self.out, self.global_batch, self.label = out, global_batch, label
        self.run_dir: Path | None = None
        self.report = None
        self.report_error: str | None = None
        self._run: InProcessRun | None = None
        self._batch_before: str | None = None

    def __enter__(self) -> Capture:
        close_abandoned()  # a callback's run left open by a Trainer.train that raised
        run = InProcessRun(self.out, self.label, api="scaldiag.capture()")
        try:
            run.start()
        except Exception as exc:  # no record: the block still runs, as the user wrote it
            run.finish("failed", exc)
            say(f"capture disabled, the block runs uncaptured ({reason(exc)})")
            self.report_error = f"nothing recorded: {reason(exc)}"
            return self
        self._run, self.run_dir = run, run.run_dir
        if self.global_batch and not run.inside_profile:
            self._batch_before = os.environ.get(GLOBAL_BATCH_ENV)
            os.environ[GLOBAL_BATCH_ENV] = str(int(self.global_batch))
        return self

    def __exit__(self, kind, error, tb) -> bool:
        run = self._run
        if run is None:
            return False
        if self.global_batch and not run.inside_profile:
            if self._batch_before is None:
                os.environ.pop(GLOBAL_BATCH_ENV, None)
            else:
                os.environ[GLOBAL_BATCH_ENV] = self._batch_before
        if run.inside_profile:
            self.report_error = (
                "inside `scaldiag profile` or another capture: that run records this block, and is"
                " reported when it ends"
            )
            return False
        run.finish(status_of(error), error)
        if error is None:
            self._load()
        return False  # the block's exception, unchanged

    def _load(self) -> None:
        """The report of the run just recorded, as ``scaldiag.load`` gives it; our failure here is
        a reason in ``report_error``, never the user's block's."""
        from scaldiag.api import load
        from scaldiag.errors import ScaldiagError

        try:
            self.report = load(self.run_dir)
        except ScaldiagError as exc:
            self.report_error = str(exc)
        except Exception as exc:
            self.report_error = f"the run could not be analysed ({reason(exc)})"

    def _repr_html_(self) -> str | None:
        if self.report is not None:
            return self.report._repr_html_()
        return None

    def __repr__(self) -> str:
        if self.report is not None:
            return repr(self.report)
        return f"<scaldiag capture of {self.run_dir}: {self.report_error or 'running'}>"


def capture(out=None, global_batch: int | None = None, label: str = "capture") -> Capture:
    """A run recorded around the ``with`` block, in this process.

    Args:
        out: where run directories go (default ``scaldiag_runs``, as ``profile --out``).
        global_batch: samples per step, where the data cannot tell (``profile --global-batch``).
        label: the run directory's name after its time stamp.
    """
    return Capture(out, global_batch, label)
