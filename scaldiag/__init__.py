"""scaldiag: why does training not scale with more GPUs?"""

import sys
import types

__version__ = "0.1.0"

# The Python API (scaldiag/api.py), imported on first use by name: ``import scaldiag`` stays the
# version string's cost, without the pipeline, numpy or rich (python -X importtime -c "import
# scaldiag"). The API sits above every layer; the package only names it, it imports none of it.
_API = "scaldiag.api"
_LAZY = {"load": _API, "compare": _API}
# A block or a notebook cell profiled in this process (scaldiag/capturing.py; scaldiag/ipython.py
# for ``%load_ext scaldiag``: IPython is imported only when the extension loads).
_LAZY |= {"capture": "scaldiag.capturing", "load_ipython_extension": "scaldiag.ipython"}


def __getattr__(name: str):
    import importlib

    if name == "analyze":  # the subpackage, callable (_AnalyzePackage)
        return importlib.import_module("scaldiag.analyze")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'scaldiag' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "analyze", *_LAZY])


class _AnalyzePackage(types.ModuleType):
    """``scaldiag.analyze`` is both the analysis package (scaldiag/analyze/) and the API's
    ``analyze(path)``: the name is the package's for the import system (every ``from
    scaldiag.analyze import ...`` works as before), and calling it calls scaldiag.api.analyze."""

    def __call__(self, path, run=None):
        import importlib

        return importlib.import_module(_API).analyze(path, run)


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value) -> None:
        # The import system sets the subpackage on its parent once imported: it is made callable
        # there, whoever imported it first (the pipeline, or the API's caller).
        if name == "analyze" and isinstance(value, types.ModuleType):
            value.__class__ = _AnalyzePackage
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
