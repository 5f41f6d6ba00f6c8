"""The one guard of every adapter: the profiler never raises into the user's training.

An adapter's hook that fails is missing evidence, said once by whoever owns the
capture (``on_error`` gets ``"Type: message"``); the user's call goes on as if
scaldiag were not there.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable


def reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def attempt(action: Callable, on_error: Callable[[str], object]):
    """``action()``, or None after ``on_error(reason)`` where it raised an ``Exception``."""
    try:
        return action()
    except Exception as exc:
        on_error(reason(exc))
        return None


def say(line: str) -> None:
    """One line on stderr, where there still is one (a closed stderr loses only the line); what it
    quotes of the program (an exception's text) is shown inertly (sanitize.line: no escapes)."""
    from scaldiag.sanitize import line as shown

    try:
        print(f"scaldiag: {shown(line)}", file=sys.stderr)
    except Exception:
        pass


def on_import(what: str):
    """A decorator for a patch applied when a framework module is imported: a failure (an unknown
    version of the framework) leaves that module unpatched and says so; the script runs as it would.
    """

    def wrap(patch):
        @functools.wraps(patch)
        def guarded(module) -> None:
            attempt(
                lambda: patch(module),
                lambda why: say(f"cannot hook {getattr(module, '__name__', what)} ({why})"),
            )

        return guarded

    return wrap


def after_init(cls, attach: Callable, on_error: Callable[[str], object]) -> bool:
    """``cls.__init__`` then ``attach(instance)`` (a trainer gets the adapter's callback), once per
    class; False where it was wrapped already."""
    original = cls.__init__
    if getattr(original, "_scaldiag", False):
        return False

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        attempt(lambda: attach(self), on_error)

    __init__._scaldiag = True
    cls.__init__ = __init__
    return True
