"""Which compiled parts run: each is optional (setup.py builds it where a C compiler is found), and
``SCALDIAG_NATIVE=0`` selects the numpy code they mirror (the reference: tests compare the two)."""

from __future__ import annotations

import os

NATIVE_ENV = "SCALDIAG_NATIVE"


def enabled(module):
    """``module``, a compiled extension or None where it was not built, unless SCALDIAG_NATIVE=0."""
    return module if module is not None and os.environ.get(NATIVE_ENV, "1") != "0" else None
