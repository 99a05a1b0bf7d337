"""A real headless Chromium for the tests that look at a page as a person would (the proxy's dashboard, the docs
site): Debian's ``chromium`` driven over the Chrome DevTools Protocol by a small client on ``websockets``.

    with Browser() as browser:
        page = browser.open("http://127.0.0.1:8787/mmtok/", ready="document.body.dataset.loaded === '1'")
        assert page.errors() == []                 # console errors, uncaught exceptions, failed loads
        assert page.evaluate("document.title") == "mmtok"
        page.screenshot(artifact("dashboard.png"))

Every page is loaded with no network beyond 127.0.0.1 expected: ``page.requests`` lists each URL the page asked
for, so a test can check that nothing came from a CDN. Chromium runs with a fresh profile, no sandbox (the tests
run as root in CI), no GPU, and the background services that would reach the internet switched off.

Where Chromium is missing the tests that need it are skipped with the command that installs it, except under CI
(``CI=true``), where ``.ci/run`` installs it and a missing browser is a failure.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",  # /dev/shm is small in containers
    "--hide-scrollbars",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)
START_TIMEOUT_S = 30.0
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-output"  # screenshots kept after the run (git-ignored)


def chromium() -> str:
    """The Chromium executable, or a skip (a failure under CI) naming how to install it."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    message = "no chromium on PATH (Debian: apt-get install -y chromium)"
    if os.environ.get("CI"):
        pytest.fail(message + "; .ci/run installs it")
    pytest.skip(message)


def artifact(name: str) -> Path:
    """A path under ``test-output/`` (made if missing) where a test keeps what a person may want to look at;
    ``MMTOK_TEST_OUTPUT`` names another folder (relative to the repository, whatever the test's working folder)."""
    folder = ARTIFACTS.parent / os.environ.get("MMTOK_TEST_OUTPUT", ARTIFACTS)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


class CdpError(RuntimeError):
    pass


class Page:
    """One tab, driven over its own DevTools websocket: commands answered in order, events collected on the way."""

    def __init__(self, websocket_url: str) -> None:
        from websockets.sync.client import connect

        self._stack = contextlib.ExitStack()
        self._socket = self._stack.enter_context(
            connect(websocket_url, max_size=64 * 2**20, open_timeout=START_TIMEOUT_S)
        )
        self._ids = itertools.count(1)
        self._errors: list[str] = []
        self.requests: list[str] = []  # every URL the page asked for
        self._loaded = False
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")

    def send(self, method: str, timeout_s: float = 30.0, **params: Any) -> dict[str, Any]:
        """Send a command and wait for its answer, collecting the events that arrive before it."""
        number = next(self._ids)
        self._socket.send(json.dumps({"id": number, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            message = self._receive(deadline - time.monotonic())
            if message is None:
                raise CdpError(f"{method}: no answer in {timeout_s:g} s")
            if message.get("id") == number:
                if "error" in message:
                    raise CdpError(f"{method}: {message['error'].get('message')}")
                return message.get("result", {})

    def _receive(self, timeout_s: float) -> dict[str, Any] | None:
        try:
            message = json.loads(self._socket.recv(timeout=max(0.0, timeout_s)))
        except TimeoutError:
            return None
        if "method" in message:
            self._event(message["method"], message.get("params", {}))
        return message

    def _event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            texts = [str(a.get("value", a.get("description", ""))) for a in params.get("args", [])]
            self._errors.append("console: " + " ".join(texts))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            described = details.get("exception", {}).get("description") or details.get("text", "")
            self._errors.append(f"exception: {described}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self._errors.append(f"log: {entry.get('text', '')} {entry.get('url', '')}".strip())
        elif method == "Network.requestWillBeSent":
            self.requests.append(params.get("request", {}).get("url", ""))
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            self._errors.append(f"load failed: {params.get('errorText', '')}")
        elif method == "Page.loadEventFired":
            self._loaded = True

    def _pump(self, seconds: float) -> None:
        """Collect the events that arrive within ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self._receive(deadline - time.monotonic()) is not None:
            pass

    def go(self, url: str, ready: str | None = None, timeout_s: float = 30.0) -> Page:
        """Load ``url``, wait for its load event and then for the JavaScript expression ``ready`` to be truthy."""
        self._loaded = False
        answer = self.send("Page.navigate", url=url)
        if answer.get("errorText"):
            raise CdpError(f"{url}: {answer['errorText']}")
        deadline = time.monotonic() + timeout_s
        while not self._loaded:
            if time.monotonic() > deadline:
                raise CdpError(f"{url}: not loaded in {timeout_s:g} s")
            self._pump(0.05)
        if ready:
            self.wait_for(ready, max(0.1, deadline - time.monotonic()))
        return self

    def wait_for(self, expression: str, timeout_s: float = 30.0) -> Any:
        """Poll ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise CdpError(f"not true after {timeout_s:g} s: {expression}\n{self.errors()}")
            self._pump(0.05)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited), as JSON."""
        answer = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in answer:
            raise CdpError(f"{expression}: {answer['exceptionDetails'].get('text')}")
        return answer.get("result", {}).get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads so far."""
        self._pump(0.1)
        return list(self._errors)

    def smallest_text_px(self) -> float:
        """The font size, in CSS pixels, of the smallest visible text on the page."""
        return self.evaluate(SMALLEST_TEXT_JS)

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        """A PNG of the page (the whole scrolled height with ``full_page``) written to ``path``, with its smallest
        text's size in pixels in the ``min_font_px`` text chunk (as :func:`mmtok.figures.save_png` writes figures),
        so a page that shows the screenshot can be checked for legibility."""
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        if full_page:
            metrics = self.send("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.send("Page.captureScreenshot", **params)["data"]
        path.write_bytes(base64.b64decode(data))
        _note_smallest_text(path, self.smallest_text_px())
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stack.close()


SMALLEST_TEXT_JS = """(() => {
  let smallest = Infinity;
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode, element = node.parentElement;
    if (!node.textContent.trim() || !element || !element.getClientRects().length) continue;
    const style = getComputedStyle(element);
    if (style.visibility === "hidden" || style.display === "none") continue;
    smallest = Math.min(smallest, parseFloat(style.fontSize));
  }
  return Number.isFinite(smallest) ? smallest : 0;
})()"""


def _note_smallest_text(path: Path, px: float) -> None:
    from PIL import Image, PngImagePlugin

    from mmtok.figures import MIN_FONT_KEY

    info = PngImagePlugin.PngInfo()
    info.add_text(MIN_FONT_KEY, f"{px:.1f}")
    with Image.open(path) as image:
        image.load()
        image.save(path, pnginfo=info)


class Browser:
    """Headless Chromium with a fresh profile, ended (and its profile removed) on exit."""

    def __init__(self, width: int = 1280, height: int = 900) -> None:
        self.executable = chromium()
        self.size = (width, height)
        self._profile = tempfile.mkdtemp(prefix="mmtok-chromium-")
        self._process: subprocess.Popen[bytes] | None = None
        self._pages: list[Page] = []
        self.port = 0

    def __enter__(self) -> Browser:
        command = [self.executable, *FLAGS, f"--user-data-dir={self._profile}",
                   f"--window-size={self.size[0]},{self.size[1]}", "about:blank"]  # fmt: skip
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not port_file.exists() or not port_file.read_text().strip():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise CdpError("chromium did not start (no DevToolsActivePort)")
            time.sleep(0.05)
        self.port = int(port_file.read_text().split()[0])
        return self

    def open(self, url: str, ready: str | None = None, timeout_s: float = 30.0) -> Page:
        """A new tab on ``url`` (see :meth:`Page.go`)."""
        import httpx

        target = httpx.put(f"http://127.0.0.1:{self.port}/json/new?about:blank", timeout=START_TIMEOUT_S).json()
        page = Page(target["webSocketDebuggerUrl"])
        self._pages.append(page)
        width, height = self.size
        page.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        return page.go(url, ready, timeout_s)

    def __exit__(self, *exc: object) -> None:
        for page in self._pages:
            page.close()
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
        shutil.rmtree(self._profile, ignore_errors=True)
