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
from scaldiag.render import html

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
            drawn = (tag == "polyline" and attrs.get("points", "").strip()) or "bar" in attrs.get("class", "") \
                or tag == "circle"
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
        assert not [t for t, _ in page.tags if t in ("script", "link", "img", "iframe", "object")], name
        urls = [v for _, a in page.tags for k, v in a.items() if k in ("src", "href") and v]
        assert urls == [], name


def test_the_run_page_has_its_sections(pages):
    text = pages["sweep/gpus2"]
    kinds = [c["kind"] for c in parse(text).charts]
    assert kinds.count("bars") == 1 and kinds.count("line") >= 6  # breakdown; util, PCIe, clock, power, memory, CPU
    for heading in ("Step-time breakdown", "Timelines", "GPU utilisation", "PCIe / NVLink throughput", "SM clock",
                    "host CPU", "Findings ("):
        assert heading in text
    assert "SD101" in text and "Ceiling:" in text and "<pre><code>" in text  # a finding, its ceiling, its fix
    assert "Where the run&#x27;s time went" in text or "Where the run's time went" in text  # the accounting


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

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]

# In the page: each chart's box, and how many of its marks have a non-empty box.
CHART_CHECK = """JSON.stringify([...document.querySelectorAll('svg.chart')].map(s => {
  const r = s.getBoundingClientRect();
  const marks = [...s.querySelectorAll('polyline.series, rect.bar, circle')].filter(e => {
    const b = e.getBBox(); return b.width > 0 || b.height > 0; });
  return {kind: s.dataset.kind, width: r.width, height: r.height, marks: marks.length};
}))"""


class DevTools:
    """Just enough of a WebSocket client for the DevTools protocol (RFC 6455, text frames)."""

    def __init__(self, url: str):
        host, port, path = re.match(r"ws://([^:/]+):(\d+)(/.*)", url).groups()
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                          f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                          .encode())
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
        header = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
                                  if n < 65536 else bytes([0x80 | 127]) + n.to_bytes(8, "big"))
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


def open_in_chromium(path: Path, profile: Path) -> tuple[list[dict], list[dict]]:
    """(the charts as laid out, the problems: console errors, exceptions, network requests)."""
    proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for line in proc.stderr:
            if m := re.search(r"DevTools listening on (ws://\S+)", line):
                url = m.group(1)
                break
        assert url, "chromium did not start its DevTools endpoint"
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep its log from filling the pipe
        port = re.match(r"ws://[^:]+:(\d+)/", url).group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=30) as reply:
            targets = json.loads(reply.read())
        page = next(t for t in targets if t["type"] == "page")
        tools = DevTools(page["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log", "Network"):
            tools.call(f"{domain}.enable")
        tools.call("Page.navigate", url=path.resolve().as_uri())
        tools.wait_for("Page.loadEventFired")
        charts = json.loads(tools.call("Runtime.evaluate", expression=CHART_CHECK, returnByValue=True)
                            ["result"]["value"])
        problems = [e for e in tools.events
                    if e.get("method") == "Runtime.exceptionThrown"
                    or (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
                    or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
                    or (e.get("method") == "Network.requestWillBeSent"
                        and not e["params"]["request"]["url"].startswith("file:"))]
        return charts, problems
    finally:
        proc.terminate()  # the browser ends its own helper processes
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed (apt-get install chromium)")
@pytest.mark.parametrize("name", ["sweep/gpus2", "sweep"])
def test_the_report_opens_in_headless_chromium_without_errors(name, tmp_path):
    path = tmp_path / "report.html"
    path.write_text(render(RUNS / name), encoding="utf-8")
    charts, problems = open_in_chromium(path, tmp_path / "profile")
    assert problems == []
    assert charts and all(c["width"] > 100 and c["height"] > 50 and c["marks"] > 0 for c in charts), charts


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed (apt-get install chromium)")
def test_the_browser_check_sees_a_console_error_and_an_empty_chart(tmp_path):
    """Guard the guard: a broken page fails it."""
    path = tmp_path / "broken.html"
    path.write_text('<!DOCTYPE html><html><body><svg class="chart" data-kind="line" viewBox="0 0 10 10" '
                    'style="width:300px;height:100px"></svg><script>console.error("boom")</script></body></html>')
    charts, problems = open_in_chromium(path, tmp_path / "profile")
    assert charts == [{"kind": "line", "width": 300, "height": 100, "marks": 0}]
    assert any(e.get("method") == "Runtime.consoleAPICalled" for e in problems)
