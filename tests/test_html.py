"""The HTML report: one self-contained file, every string escaped, plots that draw.

The structural checks run everywhere. The browser check opens the reports in
headless Chromium over the DevTools protocol (a minimal client below: no
playwright, no selenium) and fails on a console message of level error, an
uncaught exception, any network request, or a chart that lays out empty. It
skips when no Chromium is installed (Debian: ``apt-get install chromium``).
"""

import base64
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import FIXTURES

from scaldiag.commands.report import report_views
from scaldiag.pipeline import diagnose
from scaldiag.render import html, svg

RUNS = FIXTURES / "runs"
HOSTILE = '<img src=x onerror="alert(1)"> & </pre><script>alert(2)</script>'


def render(path: Path) -> str:
    report = diagnose(path)
    return html.render(report, **{k: v for k, v in report_views(path, report, "html").items()})


class Page(HTMLParser):
    """Tags, attributes and the charts' drawn elements, as a parser sees them."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.charts: list[dict] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "svg":
            self.charts.append({"kind": attrs.get("data-kind"), "drawn": 0})
        elif self.charts and tag in ("polyline", "rect", "circle", "path"):
            drawn = (
                (tag == "polyline" and attrs.get("points", "").strip())
                or "bar" in attrs.get("class", "")
                or tag == "circle"
            )
            self.charts[-1]["drawn"] += bool(drawn)


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    return page


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return {name: render(RUNS / name) for name in ("sweep/gpus2", "sweep", "killed")}


def test_every_chart_draws_something_and_nothing_is_fetched(pages):
    for name, text in pages.items():
        page = parse(text)
        assert page.charts, name
        assert [c for c in page.charts if not c["drawn"]] == [], name
        assert not [
            t for t, _ in page.tags if t in ("script", "link", "img", "iframe", "object")
        ], name
        urls = [v for _, a in page.tags for k, v in a.items() if k in ("src", "href") and v]
        assert urls == [], name


def test_the_run_page_has_its_sections(pages):
    text = pages["sweep/gpus2"]
    kinds = [c["kind"] for c in parse(text).charts]
    assert (
        kinds.count("bars") == 1 and kinds.count("line") >= 6
    )  # breakdown; util, PCIe, clock, power, memory, CPU
    for heading in (
        "Step-time breakdown",
        "Timelines",
        "GPU utilisation",
        "PCIe / NVLink throughput",
        "SM clock",
        "host CPU",
        "Findings (",
    ):
        assert heading in text
    assert (
        "SD101" in text and "Ceiling:" in text and "<pre><code>" in text
    )  # a finding, its ceiling, its fix
    assert (
        "Where the run&#x27;s time went" in text or "Where the run's time went" in text
    )  # the accounting
    # TensorBoard does not come with scaldiag: the page says how to install it before how to run it.
    assert text.index("pip install tensorboard tensorboard-plugin-profile") < text.index(
        "tensorboard --logdir"
    )


def test_the_sweep_page_has_curve_waterfall_and_breakdowns(pages):
    page = parse(pages["sweep"])
    kinds = [c["kind"] for c in page.charts]
    assert kinds[:2] == ["scaling", "waterfall"] and "bars" in kinds
    assert "1 dev: /device:GPU:0" in pages["sweep"] and "2 dev: /device:GPU:1" in pages["sweep"]


def test_a_run_without_gpu_samples_or_trace_still_renders(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUNS / "killed", run)
    (run / "gpu_samples.jsonl").write_text("")
    text = render(run)
    assert "no GPU samples in this run" in text and parse(text).charts


def test_strings_from_the_run_are_escaped(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUNS / "killed", run)
    record = json.loads((run / "run.json").read_text())
    record["command"] = ["python", HOSTILE]
    record["missing"] = [HOSTILE]
    (run / "run.json").write_text(json.dumps(record))
    text = render(run)
    assert HOSTILE not in text and "&lt;img src=x" in text
    assert not [t for t, _ in parse(text).tags if t in ("img", "script")]


# --- in a real browser -------------------------------------------------------

CHROMIUM = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]

# In the page: each chart's box, and how many of its marks have a non-empty box.
CHART_CHECK = """JSON.stringify([...document.querySelectorAll('svg.chart')].map(s => {
  const r = s.getBoundingClientRect();
  const marks = [...s.querySelectorAll('polyline.series, rect.bar, circle')].filter(e => {
    const b = e.getBBox(); return b.width > 0 || b.height > 0; });
  return {kind: s.dataset.kind, width: r.width, height: r.height, marks: marks.length};
}))"""

# In the page: every pair of labels (texts, legend swatches) of one chart whose boxes, as laid out,
# overlap by more than half a pixel each way; each named by its own text, its tooltip left out (a
# swatch by its legend text).
OVERLAP_CHECK = """JSON.stringify([...document.querySelectorAll('svg.chart')].flatMap((s, i) => {
  const boxes = [...s.querySelectorAll('text, g.legend rect')].map(e => {
    const own = t => [...t.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join('');
    const name = e.tagName === 'rect' ? 'swatch of ' + own(e.nextElementSibling || e) : own(e);
    return {name: name, r: e.getBoundingClientRect()};
  }).filter(b => b.r.width > 0 && b.r.height > 0);
  const out = [];
  for (let a = 0; a < boxes.length; a++) for (let b = a + 1; b < boxes.length; b++) {
    const p = boxes[a].r, q = boxes[b].r;
    const w = Math.min(p.right, q.right) - Math.max(p.left, q.left);
    const h = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
    if (w > 0.5 && h > 0.5) out.push({chart: i, kind: s.dataset.kind, a: boxes[a].name, b: boxes[b].name});
  }
  return out;
}))"""  # noqa: E501


class DevTools:
    """Just enough of a WebSocket client for the DevTools protocol (RFC 6455, text frames)."""

    def __init__(self, url: str):
        host, port, path = re.match(r"ws://([^:/]+):(\d+)(/.*)", url).groups()
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()  # noqa: E501
        )
        reply = b""
        while b"\r\n\r\n" not in reply:
            reply += self.sock.recv(4096)
        assert b" 101 " in reply.split(b"\r\n")[0]
        self.buffer = reply.split(b"\r\n\r\n", 1)[1]
        self.events: list[dict] = []
        self.next_id = 0

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            assert chunk, "DevTools connection closed"
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def _message(self) -> dict:
        data = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = int.from_bytes(self._read(2), "big")
            elif n == 127:
                n = int.from_bytes(self._read(8), "big")
            data += self._read(n)
            if b0 & 0x80:  # FIN
                return json.loads(data)

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        payload = json.dumps({"id": self.next_id, "method": method, "params": params}).encode()
        mask = os.urandom(4)
        n = len(payload)
        header = bytes([0x81]) + (
            bytes([0x80 | n])
            if n < 126
            else (
                bytes([0x80 | 126]) + n.to_bytes(2, "big")
                if n < 65536
                else bytes([0x80 | 127]) + n.to_bytes(8, "big")
            )
        )
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        while True:
            message = self._message()
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, method: str, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(e.get("method") == method for e in self.events):
            assert time.monotonic() < deadline, f"no {method}"
            self.events.append(self._message())


def open_in_chromium(path: Path, profile: Path) -> tuple[list[dict], list[dict], list[dict]]:
    """(the charts as laid out, the problems: console errors, exceptions, network requests, the
    overlapping labels)."""
    proc = subprocess.Popen(
        [
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = None
        for line in proc.stderr:
            if m := re.search(r"DevTools listening on (ws://\S+)", line):
                url = m.group(1)
                break
        assert url, "chromium did not start its DevTools endpoint"
        threading.Thread(
            target=proc.stderr.read, daemon=True
        ).start()  # keep its log from filling the pipe
        port = re.match(r"ws://[^:]+:(\d+)/", url).group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=30) as reply:
            targets = json.loads(reply.read())
        page = next(t for t in targets if t["type"] == "page")
        tools = DevTools(page["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log", "Network"):
            tools.call(f"{domain}.enable")
        tools.call("Page.navigate", url=path.resolve().as_uri())
        tools.wait_for("Page.loadEventFired")
        charts, overlaps = (
            json.loads(
                tools.call("Runtime.evaluate", expression=check, returnByValue=True)["result"][
                    "value"
                ]
            )
            for check in (CHART_CHECK, OVERLAP_CHECK)
        )
        problems = [
            e
            for e in tools.events
            if e.get("method") == "Runtime.exceptionThrown"
            or (
                e.get("method") == "Runtime.consoleAPICalled"
                and e["params"]["type"] in ("error", "assert")
            )
            or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
            or (
                e.get("method") == "Network.requestWillBeSent"
                and not e["params"]["request"]["url"].startswith("file:")
            )
        ]
        return charts, problems, overlaps
    finally:
        proc.terminate()  # the browser ends its own helper processes
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed (apt-get install chromium)")
@pytest.mark.parametrize("name", ["sweep/gpus2", "sweep"])
@pytest.mark.slow
def test_the_report_opens_in_headless_chromium_without_errors(name, tmp_path):
    path = tmp_path / "report.html"
    path.write_text(render(RUNS / name), encoding="utf-8")
    charts, problems, overlaps = open_in_chromium(path, tmp_path / "profile")
    assert problems == []
    assert charts and all(
        c["width"] > 100 and c["height"] > 50 and c["marks"] > 0 for c in charts
    ), charts
    assert overlaps == []


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed (apt-get install chromium)")
@pytest.mark.slow
def test_the_browser_check_sees_a_console_error_and_an_empty_chart(tmp_path):
    """Guard the guard: a broken page fails it."""
    path = tmp_path / "broken.html"
    path.write_text(
        '<!DOCTYPE html><html><body><svg class="chart" data-kind="line" viewBox="0 0 10 10" '
        'style="width:300px;height:100px"></svg><script>console.error("boom")</script></body></html>'
    )
    charts, problems, overlaps = open_in_chromium(path, tmp_path / "profile")
    assert charts == [{"kind": "line", "width": 300, "height": 100, "marks": 0}]
    assert any(e.get("method") == "Runtime.consoleAPICalled" for e in problems)
    assert overlaps == []


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed (apt-get install chromium)")
@pytest.mark.slow
def test_the_overlap_check_sees_a_legend_text_over_the_next_swatch(tmp_path):
    """Guard the guard: the legend as it was laid out before (6.2 px a character) put a long name's
    text over the next entry's swatch; drawn so here, the check names the pair."""
    legend = (
        '<g class="legend" font-size="11"><rect x="72" y="2" width="10" height="10"'
        ' fill="#4c78a8"/><text x="86" y="11">measured ±95%</text><rect x="177" y="2" width="10"'
        ' height="10" fill="#888"/><text x="191" y="11">ideal</text></g>'
    )
    path = tmp_path / "overlap.html"
    path.write_text(
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><style>{html.CSS}</style></head><body>'
        '<svg class="chart" data-kind="scaling" viewBox="0 0 720 220" style="width:720px">'
        f'<circle cx="9" cy="9" r="4"/>{legend}</svg></body></html>',
        encoding="utf-8",
    )
    _, _, overlaps = open_in_chromium(path, tmp_path / "profile")
    assert {
        "chart": 0,
        "kind": "scaling",
        "a": "measured ±95%",
        "b": "swatch of ideal",
    } in overlaps, overlaps


@pytest.mark.parametrize(
    "names",
    [
        ["measured ±95%", "ideal"],
        ["GPU 0 PCIe TX", "GPU 0 PCIe RX"] * 12,
        ["WWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWW", "i"],
    ],
)
def test_the_legend_wraps_rows_and_moves_the_plot_down(names):
    """Without a browser: entries do not overlap at the estimated widths, rows stay inside the
    chart, and
    the plot starts below the last row."""
    places, top = svg.legend_layout(names)
    ends = [x + 14 + svg.text_width(n) for n, (x, _) in zip(names, places)]
    rows = sorted({y for _, y in places})
    for y in rows:
        row = sorted((x, end) for (x, yy), end in zip(places, ends) if yy == y)
        assert all(a_end < b_x for (_, a_end), (b_x, _) in zip(row, row[1:]))
    assert top >= rows[-1] + svg.LEGEND_ROW
    assert len(rows) > 1 or sum(ends) < svg.W


@pytest.mark.parametrize(
    "label", ["host_overhead", "unexplained", "collective", "a very long cause name of many words"]
)
def test_a_label_too_wide_for_its_slot_goes_on_two_lines_that_fit(label):
    width = 56  # a waterfall slot of ten bars, less its gap
    lines = svg.two_lines(label, width, 10)
    assert all(svg.text_width(line, 10) <= width for line in lines) and len(lines) <= 2
    if svg.text_width(label, 10) <= width:
        assert lines == [label]
    elif not any(line.endswith("…") for line in lines):  # nothing cut: every letter is still there
        assert "".join(lines).replace("-", "") == label.replace(" ", "")


def test_a_pytorch_run_page_speaks_pytorch_and_its_headline_says_the_gain():
    """The run page names the framework as the terminal does, and its verdict carries the top
    cause's
    speed-up in the same words (a real PyTorch run on this machine's CPU, tests/golden/runs)."""
    page = html.render(
        diagnose(Path(__file__).parent / "golden" / "runs" / "torch_cpu_input_bound")
    )
    assert "framework: PyTorch 2." in page and "pytorch on pytorch" not in page
    verdict = re.search(r'<p class="verdict">(.*?)</p>', page).group(1)
    assert verdict.startswith("Input-bound") and "speed-up if fixed: at most" in verdict
