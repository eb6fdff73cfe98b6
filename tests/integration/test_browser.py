"""The bench page and a fleet run's page in a real browser (Debian's headless chromium,
driven over the DevTools protocol): no console error, every plot has a size, and the
screenshot is not blank. Screenshots go to the test's tmp dir."""

from __future__ import annotations

import base64
import itertools
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_publish import STAMPS, write_run
from wheelkiln.bench.report import render_html
from wheelkiln.bench.stats import summarize
from wheelkiln.fleet.folder import read_run
from wheelkiln.fleet.page import render_run_page

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (.ci/run installs Debian's chromium)")


class DevTools:
    """The few DevTools protocol calls a page check needs, over websocket-client."""

    def __init__(self, url: str) -> None:
        import websocket

        self.socket = websocket.create_connection(url, timeout=30)
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self.ids)
        self.socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == ident:
                assert "error" not in message, message
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    def wait_for(self, method: str) -> dict[str, Any]:
        while True:
            for index, event in enumerate(self.events):
                if event.get("method") == method:
                    return self.events.pop(index)
            self.events.append(json.loads(self.socket.recv()))

    def errors(self) -> list[str]:
        found = []
        for event in self.events:
            params = event.get("params", {})
            if event.get("method") == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                found.append(str(details.get("exception", {}).get("description")
                                 or details.get("text"))[:300])
            elif event.get("method") == "Runtime.consoleAPICalled" and params.get("type") in (
                    "error", "assert"):
                found.append(json.dumps(params.get("args", []))[:300])
            elif (event.get("method") == "Log.entryAdded"
                  and params.get("entry", {}).get("level") == "error"):
                found.append(params["entry"].get("text", "")[:300])
        return found


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A headless chromium; yields its DevTools websocket address."""
    profile = tmp_path_factory.mktemp("chromium-profile")
    assert CHROMIUM is not None
    proc = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--no-first-run", "--remote-debugging-port=0", f"--user-data-dir={profile}",
         "--window-size=1200,1200", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            match = re.search(r"DevTools listening on (ws://\S+)", line)
            if match:
                break
        else:
            pytest.fail("chromium never said where DevTools listens")
        browser_url = match.group(1)
        port = browser_url.split(":")[2].split("/")[0]
        from urllib.request import urlopen

        with urlopen(f"http://127.0.0.1:{port}/json/list") as response:
            targets = json.load(response)
        page = next(t for t in targets if t.get("type") == "page")
        yield str(page["webSocketDebuggerUrl"])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


PIXEL_STATS = """
new Promise((resolve, reject) => {
    const image = new Image();
    image.onload = () => {
        const canvas = document.createElement('canvas');
        canvas.width = image.width; canvas.height = image.height;
        const context = canvas.getContext('2d');
        context.drawImage(image, 0, 0);
        const data = context.getImageData(0, 0, image.width, image.height).data;
        let n = 0, sum = 0, squares = 0;
        for (let i = 0; i < data.length; i += 4) {
            const grey = (data[i] + data[i + 1] + data[i + 2]) / 3;
            n += 1; sum += grey; squares += grey * grey;
        }
        const mean = sum / n;
        resolve({width: image.width, height: image.height, variance: squares / n - mean * mean});
    };
    image.onerror = () => reject(new Error('the screenshot is not an image'));
    image.src = 'data:image/png;base64,' + SHOT;
})"""
"""Decodes the screenshot in the browser and measures its grey levels: no image library."""


def check_page(browser: str, page: Path, screenshot: Path) -> dict[str, Any]:
    devtools = DevTools(browser)
    try:
        for domain in ("Page", "Runtime", "Log"):
            devtools.call(f"{domain}.enable")
        devtools.call("Page.navigate", url=page.as_uri())
        devtools.wait_for("Page.loadEventFired")
        boxes = devtools.call("Runtime.evaluate", returnByValue=True, expression="""
            [...document.querySelectorAll('figure.plot svg')].map(svg => {
                const box = svg.getBoundingClientRect();
                return {label: svg.parentElement.getAttribute('aria-label'),
                        width: box.width, height: box.height,
                        marks: svg.querySelectorAll('.role-mark path, .role-mark line').length};
            })""")["result"]["value"]
        errors = devtools.errors()  # before the measuring script runs in the page
        shot = devtools.call("Page.captureScreenshot", format="png")
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        pixels = devtools.call("Runtime.evaluate", returnByValue=True, awaitPromise=True,
                               expression=PIXEL_STATS.replace("SHOT", json.dumps(shot["data"])))
        return {"errors": errors, "plots": boxes, "pixels": pixels["result"]["value"]}
    finally:
        devtools.socket.close()


def test_bench_and_fleet_pages_render_in_chromium(browser: str, tmp_path: Path) -> None:
    from tests.unit.test_bench_report import RECORDS, rec

    bench = tmp_path / "bench.html"
    bench.write_text(render_html(summarize([*RECORDS, rec("frozen*", 400.0)]), source="store"))
    write_run(tmp_path / "runs", STAMPS[1], ("pkg-a", "pkg-b", "pkg-c"))
    fleet = tmp_path / "fleet.html"
    fleet.write_text(render_run_page(read_run(tmp_path / "runs" / STAMPS[1])))
    expected = {"bench": (bench, 1), "fleet": (fleet, 2)}  # the fleet page: Gantt + a builder
    for name, (page, plots) in expected.items():
        screenshot = tmp_path / f"{name}.png"
        found = check_page(browser, page, screenshot)
        assert found["errors"] == [], (name, found["errors"])
        assert len(found["plots"]) == plots, (name, found["plots"])
        for plot in found["plots"]:
            assert plot["width"] > 100 and plot["height"] > 50 and plot["marks"] > 0, (name, plot)
        assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        pixels = found["pixels"]
        assert pixels["width"] >= 1000 and pixels["height"] >= 600, pixels
        assert pixels["variance"] > 100, (name, pixels)  # not blank: text and plots
    # The measure can fail: a blank page has no variance, and a script error is caught.
    blank = tmp_path / "blank.html"
    blank.write_text("<!doctype html><html><body><script>null.x</script></body></html>")
    found = check_page(browser, blank, tmp_path / "blank.png")
    assert found["pixels"]["variance"] < 1 and found["plots"] == []
    assert len(found["errors"]) == 1 and "TypeError" in found["errors"][0]
