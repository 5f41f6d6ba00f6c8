"""What ``scaldiag try`` reads and where it writes, each checked before its first round.

The script is the one profiled (collect/script_file.py); the rounds go to a directory of this try's
own, ``RUN_DIR/try/<n>``, never an earlier try's and never through a link; ``--json`` never lands
on an input of the run; the writes ``profile`` saw that no hook can contain are said, and refused
unless asked.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from scaldiag.collect import script_file
from scaldiag.errors import ScaldiagError
from scaldiag.record.run_json import RunJson
from scaldiag.sanitize import line as inert


def script_as_profiled(run_dir: Path) -> tuple[str, list[str], str, RunJson]:
    """The script as profiled (absolute path, arguments, working directory) and run.json, checked
    as profile checks it and refused where the file changed since."""
    run, damage = RunJson.load(run_dir)
    if run is None or run.is_empty():
        raise ScaldiagError(f"{run_dir}: no run.json with the run's command (a run directory?)")
    if damage:  # try will not guess what a damaged record meant
        raise ScaldiagError(f"{run_dir}: {damage[0]} (profile it again)")
    path, args, cwd, ident = script_file.recorded_script(run, str(run_dir))
    script_file.check_unchanged(path, ident)
    if ident is None:
        print(
            f"scaldiag: {inert(run_dir)}'s run.json records no digest of its script: try runs"
            f" {inert(path)}"
            " (the command resolved in the run's working directory) and cannot tell whether it"
            " changed since",
            file=sys.stderr,
        )
    return path, args, cwd, run


def try_root(run_dir: Path) -> Path:
    """RUN_DIR/try, a real directory of the run (a link would send the rounds elsewhere)."""
    root = run_dir / "try"
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        raise ScaldiagError(f"{root} is not a directory of the run (a link, a file): refused")
    try:
        root.mkdir(exist_ok=True)
    except OSError as exc:
        raise ScaldiagError(f"cannot make {root} ({exc.strerror or exc})") from None
    return root


def new_try_dir(root: Path) -> Path:
    """RUN_DIR/try/<n>: this try's own, never an earlier one's."""
    taken = [int(p.name) for p in root.iterdir() if p.name.isdigit() and len(p.name) < 9]
    n = max(taken, default=0) + 1
    while True:
        d = root / str(n)
        try:
            d.mkdir()
            return d
        except FileExistsError:
            n += 1
        except OSError as exc:
            raise ScaldiagError(f"cannot make {d} ({exc.strerror or exc})") from None


def json_path(value: str | None, run_dir: Path, script: str) -> Path | None:
    """``--json FILE``, refused where it would replace an input of the run: anything inside the run
    directory (its record, its rounds), the script, a directory."""
    if value is None:
        return None
    if not value.strip():
        raise ScaldiagError("--json needs a file name")
    out = Path(value).resolve()
    inputs = (run_dir.resolve(),)
    if any(out == d or d in out.parents for d in inputs):
        raise ScaldiagError(f"--json {value}: inside the run directory, whose files are the run's")
    if out == Path(script).resolve():
        raise ScaldiagError(f"--json {value} is the script itself: refused")
    if out.is_dir():
        raise ScaldiagError(f"--json {value} is a directory")
    if not out.parent.is_dir():
        raise ScaldiagError(f"--json {value}: no folder {out.parent} to write it in")
    return out


def write_json_file(path: Path, data: dict) -> None:
    """The file replaced only once written whole."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def uncontained_refusal(run: RunJson, allowed: bool) -> str | None:
    """Before round 0: the writes profile saw that try cannot contain, or a note where the run
    recorded none; the refusal's text, or None."""
    writes = run.writes
    if writes is None:
        print(
            "scaldiag: this run was profiled before scaldiag recorded its writes: try looks at"
            " the script's folders after each round, and stops where one changed outside its"
            " containment",
            file=sys.stderr,
        )
        return None
    listed = writes.get("uncontained_paths")
    paths = [p for p in listed if isinstance(p, str)] if isinstance(listed, list) else []
    if not paths:
        return None
    shown = ", ".join(map(inert, paths[:5]))  # a record anyone could write: shown inert
    shown += f" and {len(paths) - 5} more" if len(paths) > 5 else ""
    said = (
        f"this script writes {shown} through code try cannot contain (while it was profiled,"
        " that changed through no Python write: a C/C++ writer, a subprocess; or another program"
        " wrote it meanwhile), so try could not put it back"
    )
    if allowed:
        print(f"scaldiag: {said}; --allow-uncontained-writes: going on", file=sys.stderr)
        return None
    return f"{said}; refused (--allow-uncontained-writes runs it anyway)"


def profiled_writes(run: RunJson) -> list[str]:
    """The paths the profiled run wrote (run.json ``writes``, a record anyone could have written:
    only text kept)."""
    writes = run.writes or {}
    out = []
    for key in ("python_paths", "uncontained_paths"):
        paths = writes.get(key)
        out += [p for p in paths if isinstance(p, str)] if isinstance(paths, list) else []
    return out
