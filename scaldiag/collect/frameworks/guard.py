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
    replace(cls, "__init__", __init__)
    return True


# How to take back each patch the adapters made in this process, oldest first. Under ``profile``
# nothing is taken back (the process ends with the script); ``scaldiag.capture`` takes back what
# its block armed (``undo_since``), so that training after the block runs unpatched.
_UNDO: list[Callable[[], object]] = []


def replace(owner, name: str, value) -> None:
    """``owner.name = value``, the way back noted. A class attribute it inherited (``vars`` has no
    such name) is deleted on the way back, so that the base's is seen again."""
    own = vars(owner) if isinstance(owner, type) else None
    had = name in own if own is not None else hasattr(owner, name)
    old = own.get(name) if own is not None else getattr(owner, name, None)
    setattr(owner, name, value)
    _UNDO.append(lambda: setattr(owner, name, old) if had else delattr(owner, name))


def undoable(take_back: Callable[[], object]) -> None:
    """A patch made another way (a hook registered: its handle's ``remove``), and its way back."""
    _UNDO.append(take_back)


def undo_mark() -> int:
    return len(_UNDO)


def undo_since(mark: int) -> list[str]:
    """Take back every patch made since ``undo_mark()`` returned ``mark``, newest first; what could
    not be taken back, as reasons."""
    failed: list[str] = []
    while len(_UNDO) > mark:
        take_back = _UNDO.pop()
        attempt(take_back, failed.append)
    return failed
