"""The fix ``scaldiag try`` applies inside the child, from outside the script.

``SCALDIAG_TRY_DATALOADER`` holds JSON keyword arguments (``{"num_workers": 1,
"persistent_workers": true}``) that every ``torch.utils.data.DataLoader`` the script builds gets in
place of its own. The script's file is never read or written; unset, nothing changes.
"""

from __future__ import annotations

import functools
import json
import os

from scaldiag.collect.env import TRY_DATALOADER_ENV as DATALOADER_ENV


def dataloader_overrides() -> dict:
    try:
        value = json.loads(os.environ.get(DATALOADER_ENV) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def patch_dataloader(module) -> None:
    """DataLoader's constructor with the overrides, where ``try`` set some."""
    overrides = dataloader_overrides()
    loader = getattr(module, "DataLoader", None)
    if not overrides or loader is None or getattr(loader.__init__, "_scaldiag_try", False):
        return
    original = loader.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        import inspect

        bound = inspect.signature(original).bind(self, *args, **kwargs)
        given = dict(bound.arguments)
        given.pop("self", None)
        extra = given.pop("kwargs", {})
        given.update(extra)
        given.update(overrides)
        if not given.get("num_workers"):
            given.pop("persistent_workers", None)  # DataLoader refuses it without workers
        original(self, **given)

    __init__._scaldiag_try = True
    loader.__init__ = __init__
