"""The headless Chromium harness (tests/browser.py) sees what a person would: the page's DOM after its scripts ran,
its console errors and uncaught exceptions, every URL it asked for, and a screenshot."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from tests.browser import Browser, artifact
from tests.upstream import serve

CLEAN = """<!doctype html><title>clean</title><link rel="icon" href="data:,"><p id="out">before</p>
<script>document.getElementById("out").textContent = "after"; document.body.dataset.ready = "1";</script>"""
BROKEN = """<!doctype html><title>broken</title><p>x</p>
<script>console.error("something failed"); document.body.dataset.ready = "1"; undefinedFunction();</script>
<img src="/missing.png">"""


def pages() -> Starlette:
    async def clean(_request):
        return HTMLResponse(CLEAN)

    async def broken(_request):
        return HTMLResponse(BROKEN)

    return Starlette(routes=[Route("/clean", clean), Route("/broken", broken)])


def test_a_clean_page_runs_its_scripts_and_reports_no_errors():
    with serve(pages()) as url, Browser() as browser:
        page = browser.open(url + "/clean", ready="document.body.dataset.ready === '1'")
        assert page.evaluate("document.getElementById('out').textContent") == "after"
        assert page.errors() == []
        assert page.requests == [url + "/clean"]
        shot = page.screenshot(artifact("browser-clean.png"))
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 1000


def test_console_errors_exceptions_and_failed_loads_are_reported():
    with serve(pages()) as url, Browser() as browser:
        page = browser.open(url + "/broken", ready="document.body.dataset.ready === '1'")
        page.wait_for("document.images[0].complete")
        errors = "\n".join(page.errors())
    assert "console: something failed" in errors
    assert "undefinedFunction" in errors
    assert "404" in errors and url + "/missing.png" in errors
