"""Who can reach `llmgw-tui --serve-web`: the token, its cookie, the Origin, the Unix socket.

The console holds the operator's SSH access to the whole fleet, so every test
here is a real server on real sockets, asked by a real HTTP or websocket
client what a stranger would ask: the page, its assets and `/ws` without the
token, a websocket from another page's origin, a token file others can read,
and, where the suite runs as root, a second Unix user with curl.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import httpx
import pytest

from tests.web.conftest import WebConsole, free_port, run_cli, serving

ROUTES = (
    "/",
    "/?fontsize=20",
    "/static/js/textual.js",
    "/static/css/xterm.css",
    "/static/",
    "/download/any-key",
    "/no-such-page",
    "/ws",
)
NEEDS_TOKEN = (
    "This console needs the token it printed when it started: open the address it printed "
    "(ending in ?token=...), or send the header Authorization: token ... from a script.\n"
)
WRONG_ORIGIN = "This console opens a websocket (or takes a request that changes something) only"
EVIL = "http://evil.example"
TOKEN = "Zm9yIHRoZSB0ZXN0cyBvbmx5LCBub3QgYSByZWFsIHRva2Vu"


async def _handshake(
    url: str,
    *,
    origin: str | None,
    headers: dict[str, str] | None = None,
    unix_socket: Path | None = None,
) -> int:
    """The status a websocket handshake to `url` gets: 101 when a console was opened."""
    connector = aiohttp.UnixConnector(str(unix_socket)) if unix_socket else None
    async with aiohttp.ClientSession(connector=connector) as session:
        try:
            async with session.ws_connect(url, origin=origin, headers=headers or {}):
                return 101
        except aiohttp.WSServerHandshakeError as refused:
            return refused.status


def handshake(console: WebConsole, *, origin: str | None, **headers: str) -> int:
    return asyncio.run(
        _handshake(f"ws://127.0.0.1:{console.port}/ws", origin=origin, headers=headers)
    )


def wait_for_consoles(console: WebConsole, timeout_s: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while not (started := console.consoles()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return started


def test_without_the_token_every_route_is_refused_with_one_sentence(web_console: WebConsole):
    for route in ROUTES:
        answer = httpx.get(web_console.url + route, timeout=30)
        assert (route, answer.status_code) == (route, 403)
        assert answer.text == NEEDS_TOKEN
    assert web_console.consoles() == []


def test_a_websocket_without_the_token_is_refused_and_starts_no_console(web_console: WebConsole):
    assert handshake(web_console, origin=web_console.origin) == 403
    assert handshake(web_console, origin=EVIL) == 403
    assert web_console.consoles() == []


def test_a_wrong_token_is_refused_in_the_address_the_header_and_the_cookie(web_console: WebConsole):
    wrong = "x" * len(web_console.token)
    cookie_name = f"llmgw-console-{web_console.port}"
    for attempt in (
        {"params": {"token": wrong}},
        {"headers": {"Authorization": f"token {wrong}"}},
        {"headers": {"Cookie": f"{cookie_name}={wrong}"}},
        {"headers": {"Cookie": f"{cookie_name}={web_console.token}"}},  # the token is no cookie
    ):
        answer = httpx.get(web_console.url + "/", timeout=30, **attempt)
        assert answer.status_code == 403, attempt
    assert handshake(web_console, origin=web_console.origin, Authorization=f"token {wrong}") == 403
    assert web_console.consoles() == []


def test_the_printed_address_sets_a_strict_httponly_cookie_and_redirects_to_the_page_without_the_token(
    web_console: WebConsole,
):
    first = web_console.first_load()
    assert first.status_code == 302
    assert first.headers["location"] == web_console.url + "/"
    set_cookie = first.headers["set-cookie"]
    assert web_console.token not in set_cookie
    attributes = {part.strip().lower() for part in set_cookie.split(";")[1:]}
    assert attributes == {"httponly", "path=/", "samesite=strict"}
    cookie = web_console.cookie()
    for route in ("/", "/static/js/textual.js", "/static/css/xterm.css"):
        answer = httpx.get(web_console.url + route, headers={"Cookie": cookie}, timeout=30)
        assert (route, answer.status_code) == (route, 200)


def test_the_first_load_keeps_the_page_options_and_drops_only_the_token(web_console: WebConsole):
    first = httpx.get(
        f"{web_console.url}/?fontsize=20&token={web_console.token}", follow_redirects=False
    )
    assert first.status_code == 302
    assert first.headers["location"] == web_console.url + "/?fontsize=20"


def test_a_script_reaches_the_page_with_the_authorization_header_and_gets_no_cookie(
    web_console: WebConsole,
):
    answer = httpx.get(web_console.url + "/", headers=web_console.authorized(), timeout=30)
    assert answer.status_code == 200
    assert "set-cookie" not in answer.headers
    assert f"ws://127.0.0.1:{web_console.port}/ws" in answer.text


def test_a_websocket_from_another_page_is_refused_even_with_the_cookie_and_starts_no_console(
    web_console: WebConsole,
):
    cookie = web_console.cookie()
    assert handshake(web_console, origin=EVIL, Cookie=cookie) == 403
    assert handshake(web_console, origin=web_console.origin + ".evil.example", Cookie=cookie) == 403
    assert handshake(web_console, origin=None, Cookie=cookie) == 403  # browsers always send one
    assert handshake(web_console, origin=None, **web_console.authorized()) == 403
    refused = httpx.get(
        web_console.url + "/ws", headers={"Cookie": cookie, "Origin": EVIL}, timeout=30
    )
    assert refused.status_code == 403 and refused.text.startswith(WRONG_ORIGIN)
    assert web_console.consoles() == []


def test_a_request_that_could_change_something_must_come_from_the_console_page(
    web_console: WebConsole,
):
    foreign = httpx.post(
        web_console.url + "/", headers={**web_console.authorized(), "Origin": EVIL}, timeout=30
    )
    assert foreign.status_code == 403 and foreign.text.startswith(WRONG_ORIGIN)
    own = httpx.post(
        web_console.url + "/",
        headers={**web_console.authorized(), "Origin": web_console.origin},
        timeout=30,
    )
    assert own.status_code == 405  # past the gate: textual-serve has no POST route


def test_a_websocket_from_the_console_page_opens_a_console_whose_line_holds_no_token(
    web_console: WebConsole,
):
    async def open_one() -> tuple[int, list[int], dict[int, bytes]]:
        url = f"ws://127.0.0.1:{web_console.port}/ws"
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(
                url, origin=web_console.origin, headers={"Cookie": web_console.cookie()}
            ),
        ):
            started = await asyncio.to_thread(wait_for_consoles, web_console)
            seen = {
                pid: Path(f"/proc/{pid}/cmdline").read_bytes()
                + Path(f"/proc/{pid}/environ").read_bytes()
                for pid in started
            }
            return 101, started, seen

    status, started, seen = asyncio.run(open_one())
    assert status == 101
    assert started, "no console process started for the page's websocket"
    assert all(web_console.token.encode() not in line for line in seen.values())
    # Printed once, in the address to open; the requests that carried it logged without it.
    assert web_console.printed.read_text().count(web_console.token) == 1


def test_a_script_with_the_token_header_and_the_right_origin_opens_a_console(
    web_console: WebConsole,
):
    assert handshake(web_console, origin=web_console.origin, **web_console.authorized()) == 101


def test_behind_a_public_url_only_that_origin_opens_a_websocket(tmp_path: Path):
    public = "https://console.example:8443"
    with serving(tmp_path, "--port", str(free_port()), "--public-url", public) as console:
        assert console.url == public  # the printed address is the public one
        port = int(console.process.args[console.process.args.index("--port") + 1])
        local = f"http://127.0.0.1:{port}"
        page = httpx.get(local + "/", headers=console.authorized(), timeout=30)
        assert "wss://console.example:8443/ws" in page.text
        first = httpx.get(f"{local}/?token={console.token}", follow_redirects=False)
        assert first.headers["location"] == public + "/"
        assert "secure" in first.headers["set-cookie"].lower()  # an https page's cookie
        ws = f"ws://127.0.0.1:{port}/ws"
        headers = console.authorized()
        assert asyncio.run(_handshake(ws, origin=local, headers=headers)) == 403
        assert asyncio.run(_handshake(ws, origin=public, headers=headers)) == 101


def test_a_public_url_that_is_no_web_address_is_refused():
    done = run_cli("--serve-web", "--public-url", "console.example:8443")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "llmgw-tui: --public-url console.example:8443 is not an http:// or https:// address: "
        "give the address browsers open, such as https://console.example:8443"
    ]


def _token_file(folder: Path, content: str, mode: int) -> Path:
    path = folder / "console-token"
    path.write_text(content)
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("content", "mode", "sentence"),
    [
        (TOKEN + "\n", 0o644, "can be read or changed by other users (mode 644): chmod 600 it"),
        (TOKEN + "\n", 0o620, "can be read or changed by other users (mode 620)"),
        ("\n", 0o600, "is empty: write a token into it"),
        ("two words\n", 0o600, "holds more than a token: spaces, or bytes that are not printable"),
        ("tok\x07en-with-a-bell-in-it", 0o600, "holds more than a token"),
        ("q7Zx9\n", 0o600, "holds fewer than 16 characters"),
    ],
)
def test_a_token_file_that_others_can_read_or_that_holds_no_token_is_refused_without_showing_it(
    tmp_path: Path, content: str, mode: int, sentence: str
):
    path = _token_file(tmp_path, content, mode)
    done = run_cli("--serve-web", "--port", str(free_port()), "--token-file", str(path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"llmgw-tui: --token-file {path} {sentence}")
    if content.strip():
        assert content.strip() not in done.stderr + done.stdout


def test_a_missing_token_file_is_one_sentence(tmp_path: Path):
    done = run_cli("--serve-web", "--token-file", str(tmp_path / "absent"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"llmgw-tui: --token-file {tmp_path / 'absent'}: no such file or directory: "
        "write the token into it, mode 600"
    ]


def test_a_console_given_a_token_file_takes_that_token_and_does_not_print_it(tmp_path: Path):
    path = _token_file(tmp_path, TOKEN + "\n", 0o600)
    with serving(
        tmp_path, "--port", str(free_port()), "--token-file", str(path), token=TOKEN
    ) as console:
        printed = console.printed.read_text()
        assert TOKEN not in printed
        assert f"open {console.url}/?token=... (the token in {path})" in printed
        assert httpx.get(console.url + "/", headers=console.authorized()).status_code == 200
        assert httpx.get(console.url + "/").status_code == 403


def tcp_listeners(pid: int) -> list[str]:
    """The TCP sockets process `pid` listens on (inodes of its fds in /proc/net/tcp{,6})."""
    own = {
        os.readlink(fd).removeprefix("socket:[").removesuffix("]")
        for fd in Path(f"/proc/{pid}/fd").iterdir()
        if os.readlink(fd).startswith("socket:[")
    }
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A":  # LISTEN
                listening.add(fields[9])
    return sorted(own & listening)


def test_a_unix_socket_console_is_0600_in_a_0700_folder_answers_through_it_and_opens_no_tcp_port(
    tmp_path: Path,
):
    folder = tmp_path / "run"  # missing: the console makes it
    path = folder / "console.sock"
    with serving(tmp_path, "--unix-socket", str(path)) as console:
        assert console.url == "http://127.0.0.1:8000"  # where `ssh -L 8000:PATH` puts it
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        info = path.stat()
        assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
        assert info.st_uid == os.getuid()
        assert f"ssh -L 8000:{path} " in console.printed.read_text()
        transport = httpx.HTTPTransport(uds=str(path))
        with httpx.Client(transport=transport, base_url=console.url, timeout=30) as client:
            assert client.get("/").status_code == 403
            page = client.get("/", headers=console.authorized())
            assert page.status_code == 200 and "ws://127.0.0.1:8000/ws" in page.text
        status = asyncio.run(
            _handshake(
                f"{console.url.replace('http', 'ws')}/ws",
                origin=console.url,
                headers=console.authorized(),
                unix_socket=path,
            )
        )
        assert status == 101
        assert tcp_listeners(console.process.pid) == []
    assert not path.exists()  # removed when the console stops


def test_a_unix_socket_in_a_folder_others_can_enter_is_refused(tmp_path: Path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o711)
    done = run_cli("--serve-web", "--unix-socket", str(folder / "console.sock"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"llmgw-tui: --unix-socket {folder / 'console.sock'}: other users can enter {folder} "
        f"(mode 711): chmod 700 {folder}, or give a path in a folder only you can enter"
    ]
    assert not (folder / "console.sock").exists()


def test_a_stale_unix_socket_left_by_a_console_that_died_is_replaced(tmp_path: Path):
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    path = folder / "console.sock"
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(path))  # bound, never listened on, closed: what a killed server leaves
    with serving(tmp_path, "--unix-socket", str(path)) as console:
        transport = httpx.HTTPTransport(uds=str(path))
        with httpx.Client(transport=transport, base_url=console.url, timeout=30) as client:
            assert client.get("/", headers=console.authorized()).status_code == 200


def test_a_unix_socket_path_where_a_file_is_refused_and_the_file_kept(tmp_path: Path):
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    taken = folder / "console.sock"
    taken.write_text("not a socket")
    done = run_cli("--serve-web", "--unix-socket", str(taken))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"llmgw-tui: --unix-socket {taken} exists and is not a socket: "
        "give a path where nothing is, or remove what is there"
    ]
    assert taken.read_text() == "not a socket"


def test_a_unix_socket_with_a_tcp_option_is_refused(tmp_path: Path):
    done = run_cli("--serve-web", "--unix-socket", str(tmp_path / "c.sock"), "--port", "8001")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "llmgw-tui: --unix-socket opens no TCP port, so --port does not go with it: "
        "give --public-url for the address browsers open (the end of ssh -L)"
    ]


def test_the_token_options_need_serve_web():
    for flag, value in (("--token-file", "/x"), ("--unix-socket", "/x.sock")):
        done = run_cli(flag, value)
        assert done.returncode == 2
        assert f"{flag} needs --serve-web" in done.stderr


@pytest.fixture
def intruder() -> Iterator[str]:
    """A second Unix user on this machine, removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("making a second Unix user (useradd) needs root")
    missing = [tool for tool in ("useradd", "userdel", "runuser", "curl") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"a second Unix user's test needs {', '.join(missing)}")
    name = f"llmgw-intruder-{os.getpid()}"
    made = subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/bin/sh", name], capture_output=True, text=True
    )
    if made.returncode != 0:
        pytest.skip(f"useradd could not make a user: {made.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)


def curl_as(user: str, *args: str) -> str:
    """What `curl` run as `user` gets: the HTTP status, or "000" when it cannot connect."""
    done = subprocess.run(
        ["runuser", "-u", user, "--", "curl", "-s", "-o", "/dev/null", "-m", "10",
         "-w", "%{http_code}", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )  # fmt: skip
    return done.stdout.strip()


UPGRADE = (
    "-H", "Connection: Upgrade", "-H", "Upgrade: websocket",
    "-H", "Sec-WebSocket-Version: 13", "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
)  # fmt: skip


def test_a_second_unix_user_gets_403_on_every_route_and_cannot_connect_to_the_unix_socket(
    tmp_path: Path, intruder: str
):
    (tmp_path / "tcp").mkdir()
    with serving(tmp_path / "tcp", "--port", str(free_port())) as console:
        for route in ROUTES:
            assert (route, curl_as(intruder, console.url + route)) == (route, "403")
        # The intruder can forge the Origin a browser would send; without the token it is no use.
        for origin in (console.origin, EVIL):
            assert (
                curl_as(intruder, *UPGRADE, "-H", f"Origin: {origin}", console.url + "/ws") == "403"
            )
        assert console.consoles() == []
    # A folder under /tmp, which every user can enter, so the folder's own mode is what stops them.
    folder = Path(tempfile.mkdtemp(prefix="llmgw-console-", dir="/tmp"))
    try:
        path = folder / "console.sock"
        (tmp_path / "unix").mkdir()
        with serving(tmp_path / "unix", "--unix-socket", str(path)) as console:
            for route in ("/", "/ws"):
                assert curl_as(intruder, "--unix-socket", str(path), console.url + route) == "000"
            assert console.consoles() == []
    finally:
        shutil.rmtree(folder, ignore_errors=True)
