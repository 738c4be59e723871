"""`llmgw-tui --serve-web`: the page loads and the console behind it answers, over textual-serve's own websocket.

The client speaks the protocol the page's script speaks (JSON envelopes such
as `["stdin", "..."]` up, the terminal's bytes down), so this is the browser
minus the drawing.
"""

from __future__ import annotations

import asyncio
import re
import socket

import aiohttp
import httpx
import pytest

from tests.web.conftest import NODE_NAMES, WebConsole, run_cli

ESCAPES = re.compile(
    rb"\x1b(\[[0-9;?<>=]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][0-9A-Za-z]|[=>78])"
)

DOWN = "\x1b[B"
ENTER = "\r"


def screen_text(received: bytes) -> str:
    """What a person would read in the terminal bytes so far (escape sequences removed)."""
    return ESCAPES.sub(b"", received).decode("utf-8", errors="replace")


class Tab:
    """One browser tab's websocket: what the console drew, and keys to send it."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.received = b""

    async def wait_for(self, text: str, timeout_s: float = 60) -> str:
        """Read the console's output until `text` appears in it; the text so far."""
        async with asyncio.timeout(timeout_s):
            while text not in screen_text(self.received):
                message = await self.socket.receive()
                if message.type == aiohttp.WSMsgType.BINARY:
                    self.received += message.data
                elif message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                    raise AssertionError(f"the console closed before showing {text!r}")
        return screen_text(self.received)

    async def press(self, keys: str) -> None:
        self.received = b""
        await self.socket.send_json(["stdin", keys])


def test_the_page_loads_and_points_its_websocket_at_the_loopback_console(web_console: WebConsole):
    page = httpx.get(web_console.url + "/", headers={"Cookie": web_console.cookie()}, timeout=30)
    assert page.status_code == 200
    assert "<div>llmgw</div>" in page.text  # the name on the page's intro
    assert f"ws://127.0.0.1:{web_console.port}/ws" in page.text


def test_the_fleet_arrives_and_a_key_press_moves_the_cursor_to_the_next_node(
    web_console: WebConsole,
):
    cookie = web_console.cookie()

    async def drive() -> tuple[str, str]:
        async with aiohttp.ClientSession() as session:
            url = f"ws://127.0.0.1:{web_console.port}/ws?width=120&height=40"
            async with session.ws_connect(
                url, origin=web_console.origin, headers={"Cookie": cookie}
            ) as socket:
                tab = Tab(socket)
                fleet = await tab.wait_for(NODE_NAMES[-1])
                await tab.press(DOWN)
                await asyncio.sleep(0.5)  # the cursor moves before Enter is read
                await tab.press(ENTER)
                node_page = await tab.wait_for(f"node {NODE_NAMES[1]}")
                return fleet, node_page

    fleet, node_page = asyncio.run(drive())
    assert all(name in fleet for name in NODE_NAMES)
    assert f"node {NODE_NAMES[1]}" in node_page and f"node {NODE_NAMES[0]}" not in node_page


def test_listening_beyond_this_machine_needs_allow_remote_and_says_why():
    done = run_cli("--serve-web", "--host", "0.0.0.0")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "llmgw-tui: --host 0.0.0.0 would let other machines reach a console that holds SSH "
        "access to the fleet: add --allow-remote if that is what you want, or leave --host out"
    ]


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (("--serve-web", "--port", "70000"), "--port 70000 is not a TCP port"),
        (("--port", "8000"), "--port needs --serve-web"),
        (("--serve-web", "--run", "x.yaml"), "does not go with --run"),
    ],
)
def test_a_bad_web_option_is_one_sentence_and_exit_code_2(args, sentence):
    done = run_cli(*args)
    assert done.returncode == 2
    assert sentence in done.stderr
    assert "Traceback" not in done.stderr


def test_allowing_remote_browsers_prints_the_ssh_warning_before_listening():
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: the warning, then a sentence, exit 2.
    done = run_cli("--serve-web", "--host", "192.0.2.1", "--allow-remote", "--port", "8765")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2
    assert lines[0].startswith("warning: the console served on 192.0.2.1:8765 holds SSH access")
    assert lines[-1].startswith("llmgw-tui: cannot listen on 192.0.2.1:8765")
    assert "Traceback" not in done.stderr


def test_a_port_already_taken_is_one_sentence_naming_it():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli("--serve-web", "--port", str(port))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"llmgw-tui: cannot listen on 127.0.0.1:{port}: address already in use: "
        "choose another --port or --host"
    ]
