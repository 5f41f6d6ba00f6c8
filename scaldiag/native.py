"""Which compiled parts run: each is optional (setup.py builds it where a C compiler is found), and
``SCALDIAG_NATIVE=0`` selects the numpy code they mirror (the reference: tests compare the two)."""

from __future__ import annotations

import os
import sys

NATIVE_ENV = "SCALDIAG_NATIVE"


def enabled(module):
    """``module``, a compiled extension or None where it was not built, unless SCALDIAG_NATIVE=0."""
    return module if module is not None and not _numpy_asked() else None


def _numpy_asked() -> bool:
    return os.environ.get(NATIVE_ENV, "1") == "0"


_told: set[str] = set()


def tell_if_missing(module, what: str) -> None:
    """Once per process, on stderr: ``what`` runs in numpy because its compiled part was not built
    (the install found no C compiler), so a user waiting on a large trace knows why and what to do.
    """
    if module is None and what not in _told and not _numpy_asked():
        _told.add(what)
        print(
            f"scaldiag: {what} runs without its compiled part (not built: no C compiler at"
            " install?), about 4x slower; with a C compiler (gcc, clang) installed, reinstall"
            " scaldiag so that pip builds it (in a checkout: make, or pip install -e .), or set"
            f" {NATIVE_ENV}=0 to silence this",
            file=sys.stderr,
        )
