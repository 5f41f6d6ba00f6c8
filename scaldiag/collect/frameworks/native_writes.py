"""File writes that frameworks make in C/C++, named to the write journal before they run.

The audit hook (collect/write_journal.py) sees Python's own file calls; some of the commonest
checkpoint writers open their file in native code, and it would not see them:

- ``torch.save(obj, "model.pt")``: the zip writer (``torch._C.PyTorchFileWriter``) opens the path
  in C++ (a file object given to ``torch.save`` is Python's, and seen);
- ``h5py.File(path, "w")`` (Keras's ``save_weights`` to ``.h5``): HDF5 opens it in C.

Each is wrapped, once its module has executed, so that the path is kept (under ``try``) or noted
(under ``profile``) first. Other native writers (TensorFlow's checkpoint ops, safetensors, a
subprocess) are not: ``profile`` finds their files by its before/after look and ``try`` refuses
them before its first round (collect/write_snapshot.py).
"""

from __future__ import annotations

import functools
import os

H5_WRITE_MODES = ("w", "w-", "x", "a", "r+")


def _note(path) -> None:
    from scaldiag.collect.write_journal import note_write

    if isinstance(path, (str, bytes, os.PathLike)):
        note_write(path)


def _wrap_init(cls, path_of) -> None:
    """``cls.__init__`` calling ``_note(path_of(args, kwargs))`` first; wrapped once."""
    original = cls.__init__
    if getattr(original, "_scaldiag_writes", False):
        return

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        _note(path_of(args, kwargs))
        return original(self, *args, **kwargs)

    init._scaldiag_writes = True
    cls.__init__ = init


def patch_torch_serialization(module) -> None:
    writer = getattr(module, "_open_zipfile_writer_file", None)
    if writer is not None:
        _wrap_init(writer, lambda args, kwargs: args[0] if args else kwargs.get("name"))


def patch_h5py_files(module) -> None:
    def path_of(args, kwargs):
        name = args[0] if args else kwargs.get("name")
        mode = args[1] if len(args) > 1 else kwargs.get("mode", "r")
        return name if mode in H5_WRITE_MODES else None

    cls = getattr(module, "File", None)
    if cls is not None:
        _wrap_init(cls, path_of)


def import_patches() -> dict:
    """Module name -> patch, for the bootstrap's import hook."""
    return {
        "torch.serialization": patch_torch_serialization,
        "h5py._hl.files": patch_h5py_files,
    }
