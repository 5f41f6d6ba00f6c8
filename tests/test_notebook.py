"""The Python API and the notebook: ``scaldiag.analyze``/``load``/``compare`` against the commands
they stand for, the inline HTML scoped to itself (in a real browser), and examples/notebook.ipynb
executed in a real Jupyter kernel (nbclient), converted to HTML (nbconvert) and screenshotted in
Chromium (``make notebook-screenshot`` keeps the picture as docs/img/notebook.png)."""

from __future__ import annotations

import base64
import json
import re
import struct
import subprocess
import sys
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

import scaldiag
from scaldiag.cli import main as cli_main
from scaldiag.errors import ScaldiagError
from scaldiag.pipeline import diagnose, diagnose_trace
from scaldiag.render import json as json_render
from scaldiag.render.html import CSS, SCOPE, scoped_css
from scaldiag.rules import JOB_RULES, RULES, RUN_RULES, SWEEP_RULES

RUN = FIXTURES / "runs" / "gpu1_slow"
SWEEP = FIXTURES / "runs" / "sweep"
TRACE = FIXTURES / "gpu" / "h200x2_jax_dataparallel.xplane.pb"
NOTEBOOK = ROOT / "examples" / "notebook.ipynb"
RULE_IDS = {r.id for rules in (RULES, RUN_RULES, SWEEP_RULES, JOB_RULES) for r in rules}


# --- the API is the commands' pipeline ----------------------------------------------------------


def test_load_holds_what_the_report_command_finds():
    report = scaldiag.load(RUN)
    direct = diagnose(str(RUN))
    assert report.kind == "run"
    assert [f["id"] for f in report.findings] == [f.id for f in direct.findings_shown]
    assert report.verdict == direct.verdict and report.verdict
    assert report.data == json_render.clean(json_render.to_dict(direct))
    # plain data, the JSON report's: it survives a JSON round trip unchanged
    for part in (report.findings, report.clock, report.accounting, report.steps):
        assert part and json.loads(json.dumps(part)) == part
    assert report.clock["scopes"] and report.clock["user_scope"] in report.clock["scopes"]
    parts = sum(p["seconds"] for p in report.accounting["parts"])
    assert parts == pytest.approx(report.accounting["wall_s"], rel=0.02)
    assert report.steps["steady"] == direct.analysis.steps.steady


def test_analyze_holds_what_the_analyze_command_finds():
    report = scaldiag.analyze(TRACE)
    direct = diagnose_trace(TRACE)
    assert report.kind == "trace" and report.clock is None and report.accounting is None
    assert [f["id"] for f in report.findings] == [f.id for f in direct.findings]
    assert report.verdict == direct.verdict
    assert report.steps["count"] == direct.analysis.units[0].steps


def test_a_finding_has_its_evidence_fix_and_speedup():
    report = scaldiag.load(RUN)
    for f in report.findings:
        assert f["id"] in RULE_IDS and f["evidence"] and f["fix"]
        s = f["predicted_speedup"]
        assert s is None or s["kind"] in ("ceiling", "forecast")
        assert report.finding(f["id"]) is f
        assert f"{f['id']}" in f._repr_html_()
    with pytest.raises(KeyError, match="no finding SD999"):
        report.finding("SD999")


@pytest.mark.parametrize("suffix, fmt", [(".html", "html"), (".json", "json"), (".txt", "term")])
@pytest.mark.parametrize("path", [RUN, SWEEP], ids=["run", "sweep"])
def test_save_writes_what_report_o_writes(tmp_path, suffix, fmt, path):
    saved = scaldiag.load(path).save(tmp_path / f"api{suffix}")
    assert cli_main(["report", str(path), "--format", fmt, "-o", str(tmp_path / "cli")]) == 0
    assert saved.read_bytes() == (tmp_path / "cli").read_bytes()


def test_save_perfetto_writes_what_report_format_perfetto_writes(tmp_path):
    saved = scaldiag.load(RUN).save(tmp_path / "api.json", format="perfetto")
    cli = tmp_path / "cli.json"
    assert cli_main(["report", str(RUN), "--format", "perfetto", "-o", str(cli)]) == 0
    assert saved.read_bytes() == cli.read_bytes()


def test_save_refuses_what_it_cannot_say_and_the_report_inputs(tmp_path):
    report = scaldiag.load(RUN)
    with pytest.raises(ScaldiagError, match="suffix"):
        report.save(tmp_path / "report.pdf")
    with pytest.raises(ScaldiagError, match="format 'pdf'"):
        report.save(tmp_path / "report.out", format="pdf")
    with pytest.raises(ScaldiagError, match="is an input of this report"):
        report.save(RUN / "run.json", format="json")
    assert report.save(tmp_path / "report.out", format="json").read_text().startswith("{")


def test_a_missing_run_is_one_clear_error(tmp_path):
    with pytest.raises(ScaldiagError, match="no such run directory"):
        scaldiag.load(tmp_path / "nothing")


def test_dataframes_are_the_plain_data():
    pytest.importorskip("pandas")
    report = scaldiag.load(RUN)
    frames = report.to_dataframes()
    assert list(frames["findings"]["id"]) == [f["id"] for f in report.findings]
    assert len(frames["evidence"]) == sum(len(f["evidence"]) for f in report.findings)
    assert set(frames["clock"]["scope"]) == set(report.clock["scopes"])
    assert frames["accounting"]["seconds"].sum() == pytest.approx(
        sum(p["seconds"] for p in report.accounting["parts"])
    )
    devices = report.data["trace_report"]["devices"]
    assert len(frames["breakdown"]) == sum(len(d["categories"]) for d in devices)
    sweep = scaldiag.load(SWEEP)
    assert list(sweep.scaling_df["gpus"]) == [p["gpus"] for p in sweep.scaling]


def test_without_pandas_the_tables_say_so_and_the_data_stays():
    code = (
        "import sys; sys.modules['pandas'] = None\n"
        "import scaldiag\n"
        f"r = scaldiag.load({str(RUN)!r})\n"
        "assert r.findings and r.clock\n"
        "try:\n    r.findings_df\nexcept scaldiag.errors.ScaldiagError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("pandas is not installed")


def test_import_scaldiag_imports_nothing_heavy():
    code = (
        "import sys, scaldiag\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('numpy', 'rich', 'pandas') or m.startswith('scaldiag.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_scaldiag_analyze_is_the_function_and_still_the_package():
    """``scaldiag.analyze`` names the analysis package and the API's function: both work, whichever
    is reached first (a fresh process each way)."""
    trace = str(TRACE)
    for first in ("import scaldiag.analyze.stats", "import scaldiag"):
        code = (
            f"{first}\nimport scaldiag\nfrom scaldiag.analyze import stats\n"
            f"r = scaldiag.analyze({trace!r})\nprint(r.kind, bool(stats.__file__))"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.stdout.split() == ["trace", "True"], out.stderr[-2000:]


def test_compare_is_the_compare_command():
    from scaldiag.render import compare as compare_render
    from scaldiag.rules.compare import compare

    cmp = scaldiag.compare(SWEEP / "gpus1", scaldiag.load(RUN))
    direct = compare(diagnose(str(SWEEP / "gpus1")), diagnose(str(RUN)))
    assert cmp.data == json.loads(compare_render.to_json(direct))
    page = cmp._repr_html_()
    assert "<style" not in page and "<script" not in page  # inline styles only: nothing leaks
    for change in cmp.data["changes"]:
        assert change["metric"] in page


# --- inline HTML: scoped ------------------------------------------------------------------------


class _Styles(HTMLParser):
    def __init__(self):
        super().__init__()
        self.in_style, self.css, self.tags = False, [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.in_style = tag == "style"

    def handle_endtag(self, tag):
        self.in_style = False

    def handle_data(self, data):
        if self.in_style:
            self.css.append(data)


def test_every_style_rule_is_inside_the_wrapper():
    page = scaldiag.load(RUN)._repr_html_()
    parsed = _Styles()
    parsed.feed(page)
    assert parsed.tags[0] == "div" and page.startswith(f'<div class="{SCOPE}">')
    assert "script" not in parsed.tags and "iframe" not in parsed.tags
    rules = re.findall(r"([^{}]+)\{[^{}]*\}", "".join(parsed.css))
    assert len(rules) == len(re.findall(r"\{", CSS))
    for selectors in rules:
        for sel in selectors.split(","):
            assert sel.strip().startswith(f".{SCOPE}"), sel
    assert "<svg" in page  # the plots come with it
    with pytest.raises(ValueError, match="at-rule"):
        scoped_css("@media print{h1{color:red}}")


# What the page outside the report looks like: its own heading, table and text.
HOST_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>
<h2 id="host-h2">a notebook's heading</h2><table id="host-table"><tr><td id="host-td">1</td></tr>
</table><pre id="host-pre">text</pre><p id="host-p">words</p>{report}</body></html>"""
HOST_STYLES = """JSON.stringify(['host-h2', 'host-table', 'host-td', 'host-pre', 'host-p', null]
  .map(id => {
    const e = id ? document.getElementById(id) : document.body; const s = getComputedStyle(e);
    return [id, s.fontSize, s.fontFamily, s.borderBottom, s.padding, s.margin, s.background,
            s.borderCollapse, s.maxWidth, s.whiteSpace];
  }))"""


def _chromium():
    from test_html import CHROMIUM

    if CHROMIUM is None:
        pytest.skip("no chromium installed (apt-get install chromium)")


@pytest.mark.slow
def test_the_report_does_not_restyle_the_page_it_is_shown_in(tmp_path):
    _chromium()
    report = scaldiag.load(RUN)
    found = {}
    for name, inside in (("without", ""), ("with", report._repr_html_())):
        page = tmp_path / f"{name}.html"
        page.write_text(HOST_PAGE.format(report=inside))
        with chromium_page(page, tmp_path / f"profile-{name}") as tools:
            found[name] = evaluate(tools, HOST_STYLES)
            if inside:
                # and the report inside is styled: its verdict has the report's own border
                found["verdict"] = evaluate(
                    tools,
                    "getComputedStyle(document.querySelector('.scaldiag-report .verdict'))"
                    ".borderLeftWidth",
                )
    assert found["with"] == found["without"]
    assert found["verdict"] == "4px"


# --- the browser: test_html's DevTools client, a page at a time ---------------------------------


class chromium_page:
    """Chromium headless on ``path`` (test_html's flags and DevTools client), loaded; the client."""

    def __init__(self, path: Path, profile: Path, width: int = 1100, height: int = 900):
        self.path, self.profile, self.size = path, profile, (width, height)

    def __enter__(self):
        import threading

        from test_html import CHROMIUM, FLAGS, DevTools

        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={self.profile}",
                f"--window-size={self.size[0]},{self.size[1]}",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        url = None
        for line in self.proc.stderr:
            if m := re.search(r"DevTools listening on (ws://\S+)", line):
                url = m.group(1)
                break
        assert url, "chromium did not start its DevTools endpoint"
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()
        port = re.match(r"ws://[^:]+:(\d+)/", url).group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=30) as reply:
            page = next(t for t in json.loads(reply.read()) if t["type"] == "page")
        tools = DevTools(page["webSocketDebuggerUrl"])
        tools.call("Page.enable")
        tools.call("Runtime.enable")
        tools.call("Page.navigate", url=self.path.resolve().as_uri())
        tools.wait_for("Page.loadEventFired", timeout_s=120)
        return tools

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def evaluate(tools, expression: str):
    result = tools.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"]
    value = result["value"]
    return json.loads(value) if expression.startswith("JSON.") else value


# --- the notebook, in a real kernel -------------------------------------------------------------

# In the page nbconvert writes: each report's box (every one laid out, none empty) and its charts.
REPORT_BOXES = """JSON.stringify([...document.querySelectorAll('.scaldiag-report')].map(e => {
  const r = e.getBoundingClientRect();
  return {width: r.width, height: r.height, charts: [...e.querySelectorAll('svg.chart')].filter(
    s => s.getBoundingClientRect().height > 0).length};
}))"""
# The first %%scaldiag cell's top, in the page: where the picture starts.
FIRST_MAGIC_TOP = """(() => { const c = [...document.querySelectorAll('.jp-CodeCell')].find(
  c => c.querySelector('.jp-InputArea-editor').textContent.trim().startsWith('%%scaldiag'));
  return c.getBoundingClientRect().top + window.scrollY; })()"""
SHOT_SIZE = (1100, 1500)  # the picture: the first %%scaldiag cell and the top of its report


def _outputs(cell, kind: str) -> str:
    """A cell's outputs of one MIME type (text/plain streams included as ``stream``), joined."""
    out = []
    for o in cell.get("outputs", []):
        if kind == "stream" and o["output_type"] == "stream" and o["name"] == "stdout":
            out.append(o["text"])
        elif kind != "stream" and kind in o.get("data", {}):
            out.append(o["data"][kind])
    return "".join(out)


def _cell(nb, starts: str):
    return next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(starts))


def _shows_report(page: str, report) -> None:
    """The displayed page holds the report's findings (each its heading) and its verdict."""
    import html as html_module

    assert f"Findings ({len(report.findings)})" in page or f"findings ({len(report.findings)})" in (
        page
    )
    for f in report.findings:
        assert f"<h3>{f['id']} · {f['severity']} ·" in page, f["id"]
    assert html_module.escape(report.verdict, quote=True) in page


@pytest.mark.slow
def test_the_notebook_runs_in_a_kernel_shows_its_findings_and_is_screenshotted(
    tmp_path, monkeypatch
):
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    nb = nbformat.read(NOTEBOOK, as_version=4)
    # The runs go under the scratch directory (the kernel's cwd), the fixtures are the repository's.
    monkeypatch.setenv("SCALDIAG_FIXTURES", str(FIXTURES))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up log, not in the picture
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    nbformat.write(nb, tmp_path / "executed.ipynb")

    # Each %%scaldiag cell's report is the one scaldiag.load gives of the run it recorded.
    magics = (("%%scaldiag\nhistory = model.fit", "keras_report"), ("%%scaldiag\nfor", "torch"))
    for magic, after in magics:
        printed = _outputs(_cell(nb, after), "stream").splitlines()
        run_dir = tmp_path / printed[0]  # under the kernel's directory (relative, or absolute)
        assert run_dir.resolve().is_relative_to(tmp_path.resolve())
        assert (run_dir / "run.json").exists()
        again = scaldiag.load(run_dir)
        assert printed[1] == repr([f["id"] for f in again.findings])
        assert set(f["id"] for f in again.findings) <= RULE_IDS
        _shows_report(_outputs(_cell(nb, magic), "text/html"), again)

    fixture = scaldiag.load(RUN)
    assert fixture.findings  # the recorded run has findings: the checks below are not empty
    _shows_report(_outputs(_cell(nb, "report = scaldiag.load"), "text/html"), fixture)
    table = _outputs(_cell(nb, "print(report.verdict)"), "text/html")
    assert all(f"<td>{f['id']}</td>" in table for f in fixture.findings)
    first = _outputs(_cell(nb, "report.findings[0]"), "text/html")
    assert first.startswith(f'<div class="{SCOPE}">') and fixture.findings[0]["id"] in first
    # one output, the comparison (rich's own Jupyter display showed each line as an output)
    assert [o["output_type"] for o in _cell(nb, "scaldiag.compare").outputs] == ["execute_result"]
    compared = _outputs(_cell(nb, "scaldiag.compare"), "text/html")
    assert "scaldiag compare" in compared and "gpu1_slow" in compared

    # As HTML (nbconvert), in a real browser: every report laid out with its charts; a picture.
    page = tmp_path / "notebook.html"
    page.write_text(HTMLExporter().from_notebook_node(nb)[0])
    _chromium()
    with chromium_page(page, tmp_path / "profile", *SHOT_SIZE) as tools:
        boxes = evaluate(tools, REPORT_BOXES)
        assert len(boxes) >= 4  # Keras, PyTorch, the fixture, its first finding
        assert all(b["width"] > 300 and b["height"] > 50 for b in boxes), boxes
        assert boxes[2]["charts"] >= 1  # the fixture's report: its breakdown and timelines drawn
        top = evaluate(tools, FIRST_MAGIC_TOP)
        shot = tools.call(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": top - 8, "width": SHOT_SIZE[0], "height": SHOT_SIZE[1], "scale": 1},
        )
    png = base64.b64decode(shot["data"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == SHOT_SIZE
    (tmp_path / "notebook.png").write_bytes(png)  # `make notebook-screenshot` keeps it in docs/img
