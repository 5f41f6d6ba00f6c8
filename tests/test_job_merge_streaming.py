"""Issue 37's job merge: a node's trace files found in one walk as the rglob per ending found them,
and the JSON's per-node lists made as they are written, the same bytes as the plain lists'."""

from __future__ import annotations

import io
import os
from pathlib import Path

from scaldiag.readers import FORMATS, trace_files
from scaldiag.render import json as json_render


def _by_rglob(root: Path) -> list[Path]:
    return sorted({f for fmt in FORMATS for e in fmt.endings for f in root.rglob(f"*{e}")})


def test_trace_files_finds_what_rglob_found(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "rank0.pt.trace.json").write_text("")
    (tmp_path / ".hidden.pt.trace.json.gz").write_text("")
    (tmp_path / "d.xplane.pb").mkdir()  # a directory so named is listed, as rglob listed it
    (tmp_path / "d.xplane.pb" / "host.xplane.pb").write_text("")
    (tmp_path / "RANK1.PT.TRACE.JSON").write_text("")  # endings are case-sensitive
    (tmp_path / "notes.txt").write_text("")
    os.symlink(tmp_path / "a", tmp_path / "link")  # a link to a directory is not entered
    os.symlink(tmp_path / "gone", tmp_path / "broken.pt.trace.json")
    found = trace_files(tmp_path)
    assert found == _by_rglob(tmp_path)
    assert tmp_path / "link" / "b" / "rank0.pt.trace.json" not in found
    assert trace_files(tmp_path / "missing") == [] == _by_rglob(tmp_path / "missing")


def test_made_lists_write_the_plain_lists_bytes():
    items = [{"x": 1.5, "nan": float("nan"), "rows": [1, [2, 3]]}, {"x": float("inf")}]

    def document(each) -> dict:
        return {"a": each(items, dict), "empty": each([], dict), "b": [each(items, dict)]}

    out = io.StringIO()
    json_render.dump(document(json_render.Made), out)
    assert out.getvalue() == json_render.dumps(document(json_render._made_now))
