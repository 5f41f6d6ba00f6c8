"""Which script a run ran: its absolute path, size, time and sha256, recorded by ``profile``.

``try`` re-runs the run's own script, and only that one: the path and the working directory as
profiled (not resolved against try's own directory), refused where the file changed since. Old
run.json files hold the command as typed and no ``script``: its path is then resolved against the
run's recorded ``cwd``, and without one try refuses rather than guess.
"""

from __future__ import annotations

import hashlib
import os
import stat

from scaldiag.errors import ScaldiagError
from scaldiag.record.run_json import RunJson

# A script larger than this is not a script (a model file named as one, /dev/zero's kind): its
# digest is not taken, and try refuses it.
MAX_SCRIPT_BYTES = 64 << 20


def identity(script: str) -> dict:
    """run.json's ``script``: absolute path, size, mtime_ns, sha256; only the path where the file
    cannot be read as a regular file (never raises: the run goes on)."""
    path = os.path.abspath(script)
    out: dict = {"path": path}
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SCRIPT_BYTES:
            return out
        out.update(size_bytes=st.st_size, mtime_ns=st.st_mtime_ns, sha256=digest(path))
    except OSError:
        pass
    return out


def digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_regular(path: str) -> None:
    """The script as ``profile`` accepts it: a readable regular file of script size (never opened
    where it is not: a FIFO would hang, /dev/zero never ends)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ScaldiagError(f"no such script: {path}") from None
    except OSError as exc:
        raise ScaldiagError(f"cannot read the script {path} ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ScaldiagError(f"{path} is a directory, not a Python script")
    if not stat.S_ISREG(st.st_mode):
        raise ScaldiagError(f"{path} is not a regular file (a FIFO, a device): not a script")
    if st.st_size > MAX_SCRIPT_BYTES:
        raise ScaldiagError(f"{path} holds {st.st_size:,} bytes: not a Python script")
    if not os.access(path, os.R_OK):
        raise ScaldiagError(f"cannot read the script {path}")


def recorded_script(run: RunJson, run_dir: str) -> tuple[str, list[str], str, dict | None]:
    """(absolute script path, its arguments, the working directory, the recorded identity or
    None) from run.json, each checked: one clear line where the record cannot say."""
    command = run.command
    if command is None or len(command) < 2:
        raise ScaldiagError(f"{run_dir}: run.json holds no command of the run (profile it again)")
    if not all(c and "\0" not in c for c in command[1:]):
        raise ScaldiagError(f"{run_dir}: run.json's command holds empty items or NUL bytes")
    cwd = run.cwd
    if cwd is None or not os.path.isabs(cwd):
        raise ScaldiagError(
            f"{run_dir}: run.json records no working directory for its script"
            f" {command[1]!r}: try will not guess which file it is (profile it again)"
        )
    if not os.path.isdir(cwd):
        raise ScaldiagError(f"the run's working directory {cwd} is gone (profile it again)")
    ident = run.script
    path = ident.get("path") if ident else None
    if not isinstance(path, str) or not os.path.isabs(path):
        path, ident = os.path.normpath(os.path.join(cwd, command[1])), None
    return path, list(command[2:]), cwd, ident


def check_unchanged(path: str, ident: dict | None) -> None:
    """Refused where the file is not the one profiled (its sha256 differs)."""
    check_regular(path)
    if not ident or not isinstance(ident.get("sha256"), str):
        return
    if digest(path) != ident["sha256"]:
        name = os.path.basename(path)
        raise ScaldiagError(f"{name} changed since it was profiled: profile it again ({path})")
