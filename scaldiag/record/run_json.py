"""run.json, the launch's record: its keys, their types, and its JSON both ways (the only module
that spells them; every writer and reader goes through ``RunJson``).

Written by the launcher (start, then its end), a session of the callback or the loop API (a run it
started), torchrun's ranks (``rank<R>/run.json``), a node's reference all-reduce and the writes
``profile`` saw; read by the record's reader, a job's node directories, ``check`` and ``try``.

Keys this version does not know are kept as read and written back (``unknown``): a newer
scaldiag's record survives an older one's rewrite. A known key whose value has another type (or
null) is not given out (its attribute is None, the reader notes it) but is written back as it was
(``unread``); a writer that sets the key replaces it. An attribute of None is a key the file does
not hold. On disk: ``json.dumps(..., indent=1, sort_keys=True)``, replaced atomically (rundir's
``write_json``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from scaldiag.errors import ScaldiagError
from scaldiag.record.rundir import RUN_JSON, load_json, write_json
from scaldiag.record.validate import (
    _BAD,
    _int,
    _list_of,
    _num,
    _obj,
    _str,
    _time,
)

# The statuses writers give (``launcher._status`` also words "killed by signal N").
RUNNING, FINISHED, FAILED, INTERRUPTED = "running", "finished", "failed", "interrupted"
UNKNOWN = "unknown"  # the reader's, for a run.json it cannot read
_EMPTY: Mapping = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class RunJson:
    """run.json as typed attributes; None: the file does not hold the key (or not as this type)."""

    schema_version: int | None = None  # rundir.RECORD_SCHEMA_VERSION of the writer
    scaldiag_version: str | None = None
    status: str | None = None  # RUNNING, FINISHED, FAILED, INTERRUPTED, "killed by signal N"
    exit_code: int | None = None  # the script's; negative: the signal that ended it
    signal: str | None = None  # that signal's name
    signals_received: list[str] | None = None  # what the launcher forwarded to the script
    error: str | None = None  # a torchrun rank's exception type, where one ended it
    command: list[str] | None = None  # [python, script, arguments...]
    cwd: str | None = None
    host: str | None = None
    python: str | None = None
    started_ns: int | None = None
    ended_ns: int | None = None
    launcher_pid: int | None = None  # profile's launcher: a run whose launcher is gone was killed
    # what the record lacks (a sampler gap), then the reader's notes of damage (RECORD_NOTE)
    missing: list[str] = field(default_factory=list)
    samplers: dict | None = None  # the samplers' own statistics
    fresh_page_ns_per_byte: float | None = None  # collect/host_costs.py
    script: dict | None = None  # the script's identity: path, size_bytes, mtime_ns, sha256
    writes: dict | None = None  # the paths the script wrote (collect/write_snapshot.py)
    node: dict | None = None  # its place in a multi-node job (collect/multinode.Node; nodes.py)
    intra_node_allreduce: dict | None = None  # the node's reference all-reduce (multinode.py)
    in_process: dict | None = None  # a run recorded in the training's process: api, pid
    # keys this version does not know; known keys of another type (shared empty by default: a job's
    # records are held a node each, record/nodes.py)
    unknown: Mapping = field(default_factory=lambda: _EMPTY, compare=False)
    unread: Mapping = field(default_factory=lambda: _EMPTY, compare=False, repr=False)

    def __post_init__(self):
        for name, check in _CHECKS.items():
            value = getattr(self, name)
            if value is not None and check(value) is _BAD:
                raise ScaldiagError(
                    f"{RUN_JSON}: {name} cannot be a {type(value).__name__} ({value!r:.60})"
                )

    # -- JSON both ways

    @classmethod
    def from_dict(cls, data: dict, name: str = RUN_JSON) -> tuple[RunJson, list[str]]:
        """The record a decoded run.json holds, and one note per known key of another type (that
        key is kept in ``unread``). Never raises on content."""
        known, unknown, unread, notes = {}, {}, {}, []
        for key, value in data.items():
            check = _CHECKS.get(key)
            if check is None:
                unknown[key] = value
                continue
            kept = _BAD if value is None else check(value)
            if kept is _BAD:
                unread[key] = value
                if value is not None:  # null: the key unsaid (a rank's unknown exit code)
                    notes.append(
                        f"{name}: field {key!r} ignored (a {type(value).__name__}, not what the"
                        " record holds)"
                    )
            else:
                known[key] = kept
        return cls(**known, unknown=unknown, unread=unread), notes

    @classmethod
    def from_json(cls, text: str | bytes) -> RunJson:
        """The record in ``text``; ScaldiagError where it is not a JSON object or a known key's
        value has another type."""
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ScaldiagError(f"{RUN_JSON}: not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ScaldiagError(f"{RUN_JSON}: holds a JSON {type(data).__name__}, not an object")
        run, notes = cls.from_dict(data)
        if notes:
            raise ScaldiagError(notes[0])
        return run

    def to_dict(self) -> dict:
        """The keys this record gives out, in the file's order (sorted), and the unknown ones: what
        a report shows of the run."""
        data = {**self.unknown, **self._known()}
        return {k: data[k] for k in sorted(data)}

    def to_json(self) -> str:
        """The file's text: every key it was read with (``unread`` too), as the writers write."""
        return json.dumps(self._file(), indent=1, sort_keys=True)

    def _file(self) -> dict:
        return {**self.unread, **self.unknown, **self._known()}

    def _known(self) -> dict:
        return {k: v for k in _CHECKS if (v := getattr(self, k)) is not None}

    # -- the file

    @classmethod
    def load(cls, run_dir: str | os.PathLike) -> tuple[RunJson | None, list[str]]:
        """``run_dir``'s record (None where it has no run.json, or one that is no JSON object) and
        what could not be read of it, a line each."""
        data, problem = load_json(Path(run_dir) / RUN_JSON)
        if problem:
            return None, [problem]
        if not data and not (Path(run_dir) / RUN_JSON).exists():
            return None, []
        return cls.from_dict(data)

    def save(self, run_dir: str | os.PathLike) -> None:
        """Replace ``run_dir``'s run.json atomically (readers see the old file or this one)."""
        write_json(Path(run_dir), RUN_JSON, self._file())

    def replace(self, **fields) -> RunJson:
        """This record with ``fields`` set (None: the key removed), each checked."""
        unread = {k: v for k, v in self.unread.items() if k not in fields} or _EMPTY
        return dataclasses.replace(self, **fields, unread=unread)

    def is_empty(self) -> bool:
        """No key given out but ``missing`` (no run.json, an empty object, every value of another
        type): no record to correct."""
        return not self.unknown and not any(
            v is not None for k, v in self._known().items() if k != "missing"
        )


_CHECKS = {
    "schema_version": _int,
    "scaldiag_version": _str,
    "status": _str,
    "exit_code": _int,
    "signal": _str,
    "signals_received": _list_of(_str),
    "error": _str,
    "command": _list_of(_str),
    "cwd": _str,
    "host": _str,
    "python": _str,
    "started_ns": _time,
    "ended_ns": _time,
    "launcher_pid": _int,
    "missing": _list_of(_str),
    "samplers": _obj({}),
    "fresh_page_ns_per_byte": _num,
    "script": _obj({"path": _str, "sha256": _str, "size_bytes": _int, "mtime_ns": _int}),
    "writes": _obj({}),
    "node": _obj({}),
    "intra_node_allreduce": _obj({}),
    "in_process": _obj({}),
}
assert set(_CHECKS) == {f.name for f in dataclasses.fields(RunJson)} - {"unknown", "unread"}


def read(run_dir: str | os.PathLike) -> RunJson:
    """``run_dir``'s record; an empty one where it has none or it cannot be read."""
    return RunJson.load(run_dir)[0] or RunJson()


def update(
    run_dir: str | os.PathLike,
    change: Callable[[RunJson], RunJson | None] | None = None,
    **fields,
) -> RunJson | None:
    """The one read-modify-rewrite of run.json (the launcher, a session, torchrun's ranks, the
    node's reference all-reduce, the writes ``profile`` saw): ``change`` gets the record (an empty
    one where absent or damaged) and returns the record to write, or None to leave the file as it
    is; ``fields`` are set after it. Written atomically; returns what was written, or None."""
    run = read(run_dir)
    new = change(run) if change is not None else run
    if new is None:
        return None
    new = new.replace(**fields) if fields else new
    new.save(run_dir)
    return new
