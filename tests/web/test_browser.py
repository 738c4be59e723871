"""`llmgw-tui --serve-web` in a real browser: Chromium loads the page, its script opens the websocket,
the fleet is drawn, and keys typed into the page move the console's cursor.

The terminal is drawn on a canvas, so what it shows is read from the frames
the page receives (Playwright's own websocket events), and keys go in through
the browser's keyboard, as a person's would. Needs Playwright (the `test`
extra) and Debian's `chromium` (`.ci/run` installs it).
"""

from __future__ import annotations

import shutil
import time

import pytest

from tests.web.conftest import NODE_NAMES, WebConsole
from tests.web.test_serve_web import screen_text

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is in the `test` extra")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium: apt-get install chromium"),
]


def _wait_for(frames: list[bytes], text: str, timeout_s: float, page) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        shown = screen_text(b"".join(frames))
        if text in shown:
            return shown
        page.wait_for_timeout(100)  # lets Playwright deliver the frames that arrived
    raise AssertionError(f"{text!r} never reached the browser; it showed: {shown[-600:]!r}")


def test_a_browser_shows_the_fleet_and_its_arrow_key_opens_the_second_node(
    web_console: WebConsole,
):
    frames: list[bytes] = []

    def on_websocket(socket) -> None:
        def received(payload: str | bytes) -> None:
            frames.append(payload if isinstance(payload, bytes) else payload.encode())

        socket.on("framereceived", received)

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("websocket", on_websocket)
            page.goto(f"{web_console.url}/?token={web_console.token}", wait_until="load")
            assert page.url == web_console.url + "/"  # the token left the address bar
            socket_url = page.get_attribute("#terminal", "data-session-websocket-url")
            assert socket_url == f"ws://127.0.0.1:{web_console.port}/ws"
            fleet = _wait_for(frames, NODE_NAMES[-1], 90, page)
            assert all(name in fleet for name in NODE_NAMES)
            page.click("#terminal")
            frames.clear()
            page.keyboard.press("ArrowDown")
            page.wait_for_timeout(500)
            page.keyboard.press("Enter")
            node_page = _wait_for(frames, f"node {NODE_NAMES[1]}", 60, page)
            assert f"node {NODE_NAMES[0]}" not in node_page
        finally:
            browser.close()
