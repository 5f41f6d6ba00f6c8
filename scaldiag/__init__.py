"""scaldiag: why does training not scale with more GPUs?"""

__version__ = "0.1.0"

# The Python API (scaldiag/api.py), imported on first use: ``import scaldiag`` stays the version
# string's cost, without the pipeline, numpy or rich (python -X importtime -c "import scaldiag").
_LAZY = {"analyze": "scaldiag.api", "load": "scaldiag.api", "compare": "scaldiag.api"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'scaldiag' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
