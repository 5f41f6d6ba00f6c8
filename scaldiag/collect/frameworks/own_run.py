"""The run a Lightning or Hugging Face callback records itself, where nobody armed the adapters.

Under ``scaldiag profile`` (the import hook) or inside ``scaldiag.capture()`` the PyTorch adapter
is armed and the callback only says what its loop's parts are. A callback the user added in a
plain ``python train.py`` or a notebook finds it unarmed: it then opens the same in-process run
``scaldiag.capture()`` opens (collect/inprocess.py) when training begins, and finishes it when
training ends. One code path: the callback is a door onto the adapter, not a second capture.
"""

from __future__ import annotations

import os

from scaldiag.collect.env import GLOBAL_BATCH_ENV
from scaldiag.collect.frameworks.guard import reason, say

# Callbacks' runs open now. transformers calls no callback when ``train()`` raises: such a run would
# stay open, its adapters armed and SCALDIAG_RUN_DIR set, and the next capture would record into
# it. ``close_abandoned`` closes them as failed: before a ``scaldiag.capture()`` block, and at exit.
_OPEN: list[OwnRun] = []
ABANDONED = "the training ended without its end callback (it raised)"


def close_abandoned() -> None:
    for run in list(_OPEN):
        run.finish(RuntimeError(ABANDONED))


class OwnRun:
    def __init__(self, out, global_batch: int | None, label: str, api: str):
        self.out, self.global_batch, self.label, self.api = out, global_batch, label, api
        self.run = None  # the InProcessRun open now, or None
        self.run_dir = None  # the last run this callback recorded itself
        self._batch_before: str | None = None

    def start(self) -> bool:
        """Training begins: True where this callback now records a run of its own."""
        from scaldiag.collect.frameworks import adapters
        from scaldiag.collect.inprocess import InProcessRun

        if self.run is not None:  # the last training raised where no hook said so (transformers)
            self.finish(RuntimeError(ABANDONED))
        if "pytorch" in adapters.armed():
            return False
        run = InProcessRun(self.out, self.label, api=self.api)
        try:
            run.start()
        except Exception as exc:
            run.finish("failed", exc)
            say(f"capture disabled, training continues ({reason(exc)})")
            return False
        self.run, self.run_dir = run, run.run_dir
        if not _OPEN:
            import atexit

            atexit.unregister(close_abandoned)  # (once, however many runs)
            atexit.register(close_abandoned)
        _OPEN.append(self)
        if self.global_batch:
            self._batch_before = os.environ.get(GLOBAL_BATCH_ENV)
            os.environ[GLOBAL_BATCH_ENV] = str(int(self.global_batch))
        return True

    def finish(self, error: BaseException | None) -> None:
        """Training ended (``error``: where it raised): the run closed, the adapters disarmed."""
        from scaldiag.collect.inprocess import status_of

        run, self.run = self.run, None
        if run is None:
            return
        if self in _OPEN:
            _OPEN.remove(self)
        if self.global_batch:
            if self._batch_before is None:
                os.environ.pop(GLOBAL_BATCH_ENV, None)
            else:
                os.environ[GLOBAL_BATCH_ENV] = self._batch_before
        run.finish(status_of(error), error)
        say(f"run recorded in {run.run_dir} (scaldiag report {run.run_dir})")
